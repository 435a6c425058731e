package envelope

import (
	"encoding/binary"
	"fmt"

	"github.com/metatree/metatree/journal/internal/errs"
)

// OldestVersion is the oldest cluster version a version entry may raise to
// (journal.OldestVersion).
const OldestVersion = 1

// EncodeVersion encodes the entry that raises the cluster version to v:
//
//	KindVersion: [4][4-byte big-endian cluster version]
func EncodeVersion(v uint32) []byte {
	b := make([]byte, 5)
	b[0] = KindVersion
	binary.BigEndian.PutUint32(b[1:], v)
	return b
}

// DecodeVersion decodes a KindVersion entry.
func DecodeVersion(b []byte) (uint32, error) {
	if len(b) != 5 || b[0] != KindVersion {
		return 0, fmt.Errorf("%w: version entry of %d bytes", errs.ErrMalformed, len(b))
	}
	v := binary.BigEndian.Uint32(b[1:])
	if v < OldestVersion {
		return 0, fmt.Errorf("%w: cluster version %d", errs.ErrMalformed, v)
	}
	return v, nil
}
