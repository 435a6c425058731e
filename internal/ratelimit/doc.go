// Package ratelimit bounds how often one kind of warning is logged, as
// etcd's "slow fdatasync" and "apply request took too long" warnings are:
// at most one line per interval, counting the ones it left out.
package ratelimit
