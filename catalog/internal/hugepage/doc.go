// Package hugepage makes the catalog's large pointer-free arrays (its path
// index) in memory that Linux backs with transparent huge pages.
//
// A lookup in a catalog of millions of nodes is a chain of cache misses in
// tables of hundreds of megabytes. With 4 KiB pages each miss also misses
// the TLB and costs a page walk, in a virtual machine a two-dimensional
// one; with 2 MiB pages the TLB covers gigabytes and the walk goes. Most
// distributions set transparent huge pages to "madvise", so that a program
// gets them only for the memory it asks them for: Make asks, with
// madvise(MADV_HUGEPAGE), for the whole 2 MiB pages inside each array it
// makes. Arrays smaller than MinBytes are made as make makes them: a huge
// page is 2 MiB of resident memory as soon as one byte of it is touched,
// too much for a small catalog.
//
// The arrays stay ordinary Go memory, owned and freed by the garbage
// collector. Where the kernel has no transparent huge pages (or is not
// Linux) the advice is not given, or fails and is ignored: the array is
// the same, only its pages are small.
package hugepage
