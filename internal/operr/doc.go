// Package operr names the failed operation in an error without repeating
// the package's prefix: the packages' sentinels carry their package name
// ("journal: no leader"), and an operation that fails with one reads
// "journal: propose: no leader", not "journal: propose: journal: no leader".
package operr
