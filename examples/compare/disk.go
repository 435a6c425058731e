package main

import (
	"io/fs"
	"path/filepath"
)

// diskBytes is the disk the files under dir occupy: the blocks they hold
// where the system says (preallocated space included), else their sizes.
func diskBytes(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		total += occupied(fi)
		return nil
	})
	return total, err
}
