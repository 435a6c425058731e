//go:build !unix

package image

import "errors"

// canTruncate: old images are removed at once here (renaming an open file
// is not portable either).
const canTruncate = false

// truncateFd is not supported here.
func truncateFd(fd uintptr, size int64) error { return errors.ErrUnsupported }
