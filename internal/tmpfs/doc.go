// Package tmpfs mounts small real filesystems for tests that must meet a
// full disk (ENOSPC) as the kernel reports it. Mounting needs root on
// Linux, which CI has; elsewhere the tests skip, saying why.
package tmpfs
