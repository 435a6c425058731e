package durable

import (
	"errors"
	"fmt"
	iofs "io/fs"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// SyncDir fsyncs directory dir, making the entries created, renamed or
// removed in it durable.
func SyncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("open dir %s: %w", dir, err)
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	if err := d.Close(); err != nil {
		return fmt.Errorf("close dir %s: %w", dir, err)
	}
	return nil
}

// MkdirAll creates dir and its missing parents, and fsyncs the parent of
// each directory it creates. A dir that exists is left as it is.
func MkdirAll(fs vfs.FS, dir string) error {
	var created []string
	for d := dir; ; d = fs.PathDir(d) {
		if _, err := fs.Stat(d); err == nil || !errors.Is(err, iofs.ErrNotExist) {
			break
		}
		created = append(created, d)
		if fs.PathDir(d) == d {
			break
		}
	}
	if len(created) == 0 {
		return nil
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	// Parents first: a child's entry is durable only once its parent is.
	for i := len(created) - 1; i >= 0; i-- {
		if p := fs.PathDir(created[i]); p != created[i] {
			if err := SyncDir(fs, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// WriteFile replaces dir/name with data durably: it writes and fsyncs
// dir/name.tmp, renames it over dir/name and fsyncs dir. A crash leaves
// either the old file or the new one, never a part of either.
func WriteFile(fs vfs.FS, dir, name string, data []byte) error {
	tmp := fs.PathJoin(dir, name+".tmp")
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := fs.Rename(tmp, fs.PathJoin(dir, name)); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return SyncDir(fs, dir)
}
