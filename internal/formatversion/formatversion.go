package formatversion

import "errors"

// ErrUnknown marks an error about data written in a format version the
// code that read it does not know.
var ErrUnknown = errors.New("unknown format version")
