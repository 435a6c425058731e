// Package operr formats an operation's error without repeating its
// package's name: the packages' sentinels carry it ("journal: no leader"),
// and an operation that fails with one reads "journal: propose: no
// leader", not "journal: propose: journal: no leader".
package operr
