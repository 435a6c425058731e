// Package durable creates directories and replaces files so that they
// survive a crash, over pebble's vfs.FS: every file is fsynced before it is
// renamed into place, and every directory whose entries change is fsynced
// after the change (POSIX forgets a new entry otherwise; vfs's crashable
// MemFS models that).
package durable
