//go:build !unix

package image

import "errors"

// truncateFd is not supported here: old images are removed at once.
func truncateFd(fd uintptr, size int64) error { return errors.ErrUnsupported }
