// Package peeridtest makes certificate authorities and member certificates
// for tests, with crypto/x509, in memory and on disk.
package peeridtest
