package catalog

import (
	"encoding/binary"
	"fmt"

	"github.com/metatree/metatree/catalog/internal/codec"
)

// The format versions of encoded batches, their first byte. Version 1:
//
//	batch := version:byte count:uvarint op*
//	op    := type:byte flags:byte path:str kind:str to:str attr:str
//	         [modified:uvarint if flagModified] nset:uvarint (key:str value)* nunset:uvarint key:str*
//	value := type:byte (str | zigzag varint | 0/1 byte | bytes:str)
//	str   := len:uvarint bytes
//
// Version 2 adds the flag flagMatch (Cond.Match) and, when it is set, the
// attributes to match after the modified index:
//
//	op    := ... [modified:uvarint if flagModified] [nmatch:uvarint (key:str value)+ if flagMatch] nset:uvarint ...
//
// Version 3 adds the flags flagOwner and flagOrphan (Op.Owner, on creates)
// and, when flagOwner is set, the owner after the match:
//
//	op    := ... [nmatch ... if flagMatch] [owner:str version:uvarint if flagOwner] nset:uvarint ...
//
// where version 0 stands for the owner's version when the batch applies.
//
// Version 4 encodes as version 3 does and changes how a batch is judged:
// Quota.Exempt applies to batches of version 4 and later only, so that
// every replica decides a batch of version 3 or older as a binary that
// reads no newer format (and has no exemption) decides it. A writer asks
// for version 4 (EncodeVersion) once every member reads it; Encode never
// picks it.
//
// Set, unset and match keys are strictly increasing and every varint takes
// its shortest form (decoding refuses longer ones), so the encoding of a
// batch is canonical. A batch that needs no version 2 field still encodes
// in the oldest version that carries it unless asked otherwise
// (EncodeVersion).
const (
	BatchV1 = 1
	BatchV2 = 2
	BatchV3 = 3
	BatchV4 = 4
	// NewestBatchVersion is the newest batch format this code reads and
	// writes.
	NewestBatchVersion = BatchV4
)

const (
	flagRecursive = 1 << iota
	flagExists
	flagAbsent
	flagModified
	flagMatch  // version 2
	flagOwner  // version 3
	flagOrphan // version 3, only with flagOwner
	flagsV1    = flagRecursive | flagExists | flagAbsent | flagModified
	flagsV2    = flagsV1 | flagMatch
	flagsV3    = flagsV2 | flagOwner | flagOrphan
)

// Encode validates the batch and returns its binary form, the entry that
// Apply takes, in the oldest format that carries it (version 1 unless an
// operation uses Cond.Match, version 3 if one names an Owner). A validation error is an *OpError naming the
// operation.
func (b Batch) Encode() ([]byte, error) {
	ops, err := b.rawOps()
	if err != nil {
		return nil, err
	}
	return appendOps(nil, ops, neededVersion(ops)), nil
}

// EncodeVersion is Encode in format version (BatchV1 to BatchV4): a writer
// passes the cluster's format version, so that every member can read what
// it writes. A batch that version cannot carry fails with
// ErrUnsupportedVersion naming the field that needs a newer one.
func (b Batch) EncodeVersion(version int) ([]byte, error) {
	if version < BatchV1 || version > NewestBatchVersion {
		return nil, fmt.Errorf("%w: batch version %d (this code writes %d to %d)", ErrUnsupportedVersion, version, BatchV1, NewestBatchVersion)
	}
	ops, err := b.rawOps()
	if err != nil {
		return nil, err
	}
	if need := neededVersion(ops); need > version {
		field := "Cond.Match"
		if need == BatchV3 {
			field = "Owner"
		}
		return nil, fmt.Errorf("%w: %s needs batch version %d, asked for %d", ErrUnsupportedVersion, field, need, version)
	}
	return appendOps(nil, ops, version), nil
}

func (b Batch) rawOps() ([]rawOp, error) {
	ops := make([]rawOp, len(b.Ops))
	for i := range b.Ops {
		ops[i] = b.Ops[i].raw()
	}
	if err := validateOps(ops); err != nil {
		return nil, err
	}
	return ops, nil
}

// neededVersion is the oldest batch version that carries ops.
func neededVersion(ops []rawOp) int {
	v := BatchV1
	for i := range ops {
		if !ops[i].owner.zero() {
			return BatchV3
		}
		if len(ops[i].match) > 0 {
			v = BatchV2
		}
	}
	return v
}

// appendValue appends the type byte and payload of v; the same bytes are a
// value's form in node blobs and its key in secondary indexes.
func appendValue(dst []byte, v Value) []byte {
	dst = append(dst, byte(v.typ))
	switch v.typ {
	case TypeString, TypeBytes:
		dst = codec.AppendStr(dst, v.s)
	case TypeInt:
		dst = binary.AppendVarint(dst, v.i)
	case TypeBool:
		dst = append(dst, byte(v.i))
	}
	return dst
}

func appendOps(dst []byte, ops []rawOp, version int) []byte {
	dst = append(dst, byte(version))
	dst = binary.AppendUvarint(dst, uint64(len(ops)))
	for i := range ops {
		o := &ops[i]
		var flags byte
		if o.recursive {
			flags |= flagRecursive
		}
		if o.cond.Exists {
			flags |= flagExists
		}
		if o.cond.Absent {
			flags |= flagAbsent
		}
		if o.cond.Modified != 0 {
			flags |= flagModified
		}
		if len(o.match) > 0 {
			flags |= flagMatch
		}
		if !o.owner.zero() {
			flags |= flagOwner
			if o.owner.Orphan {
				flags |= flagOrphan
			}
		}
		dst = append(dst, byte(o.typ), flags)
		dst = codec.AppendStr(dst, o.path)
		dst = codec.AppendStr(dst, o.kind)
		dst = codec.AppendStr(dst, o.to)
		dst = codec.AppendStr(dst, o.attr)
		if o.cond.Modified != 0 {
			dst = binary.AppendUvarint(dst, o.cond.Modified)
		}
		if len(o.match) > 0 {
			dst = binary.AppendUvarint(dst, uint64(len(o.match)))
			for _, e := range o.match {
				dst = codec.AppendStr(dst, e.k)
				dst = appendValue(dst, e.v)
			}
		}
		if !o.owner.zero() {
			dst = codec.AppendStr(dst, o.owner.Path)
			dst = binary.AppendUvarint(dst, o.owner.Version)
		}
		dst = binary.AppendUvarint(dst, uint64(len(o.set)))
		for _, e := range o.set {
			dst = codec.AppendStr(dst, e.k)
			dst = appendValue(dst, e.v)
		}
		dst = binary.AppendUvarint(dst, uint64(len(o.unset)))
		for _, k := range o.unset {
			dst = codec.AppendStr(dst, k)
		}
	}
	return dst
}

// DecodeBatch decodes and validates an encoded batch of any version this
// code reads. Unknown versions are ErrUnknownVersion; anything else that is not a valid encoding is
// ErrMalformed naming the problem and its byte offset; an invalid operation
// is an *OpError. It never panics.
func DecodeBatch(data []byte) (Batch, error) {
	d := decoder{max: NewestBatchVersion}
	ops, err := d.decode(data, nil, false)
	if err != nil {
		return Batch{}, err
	}
	if err := validateOps(ops); err != nil {
		return Batch{}, err
	}
	b := Batch{Ops: make([]Op, len(ops))}
	for i := range ops {
		b.Ops[i] = ops[i].op()
	}
	return b, nil
}

// decoder reads the batch format on a codec.Reader. With View set,
// strings point into the data (no copies: Apply's fast path) and must not
// outlive the call.
type decoder struct {
	codec.Reader
	max  int  // the newest version read (0: NewestBatchVersion)
	kvs  []kv // backing store for the ops' set slices, reused
	keys []string
}

func (d *decoder) value(what string) Value {
	t, s, i := d.Value(what)
	return Value{typ: ValueType(t), s: s, i: i}
}

// decode parses data into ops (appending to ops[:0]). It checks the
// encoding only; validate checks the operations.
func (d *decoder) decode(data []byte, ops []rawOp, view bool) ([]rawOp, error) {
	d.Data, d.Off, d.View, d.Err = data, 0, view, nil
	d.kvs, d.keys = d.kvs[:0], d.keys[:0]
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty entry", ErrMalformed)
	}
	max := d.max
	if max == 0 {
		max = NewestBatchVersion
	}
	version := int(data[0])
	if version < BatchV1 || version > max {
		return nil, fmt.Errorf("%w: batch version %d (this code reads %d to %d)", ErrUnknownVersion, version, BatchV1, max)
	}
	known := byte(flagsV1)
	switch {
	case version >= BatchV3:
		known = flagsV3
	case version >= BatchV2:
		known = flagsV2
	}
	d.Off = 1
	n := d.Uvarint("op count")
	// Every op takes at least 8 bytes, which bounds the count by the input
	// size before anything is allocated.
	if d.Err == nil && (n == 0 || n > uint64(len(data)-d.Off)/8) {
		d.Fail("op count %d impossible for %d bytes", n, len(data))
	}
	if d.Err != nil {
		return nil, d.Err
	}
	ops = ops[:0]
	type span struct{ m0, m1, set0, set1, un0, un1 int }
	spans := make([]span, 0, n)
	for i := 0; i < int(n) && d.Err == nil; i++ {
		var o rawOp
		o.typ = OpType(d.Byte("op type"))
		flags := d.Byte("flags")
		if flags&^known != 0 {
			d.Fail("op %d: unknown flags %#x", i, flags)
		}
		o.recursive = flags&flagRecursive != 0
		o.cond.Exists = flags&flagExists != 0
		o.cond.Absent = flags&flagAbsent != 0
		o.path = d.Str("path", MaxPathLen)
		o.kind = d.Str("kind", MaxNameLen)
		o.to = d.Str("to", MaxPathLen)
		o.attr = d.Str("attr", MaxNameLen)
		if flags&flagModified != 0 {
			o.cond.Modified = d.Uvarint("modified")
			if d.Err == nil && o.cond.Modified == 0 {
				d.Fail("op %d: modified flag with index 0", i)
			}
		}
		var sp span
		sp.m0 = len(d.kvs)
		if flags&flagMatch != 0 {
			nmatch := d.Uvarint("match count")
			if d.Err == nil && (nmatch == 0 || nmatch > uint64(len(data)-d.Off)/3) {
				d.Fail("op %d: match count %d impossible", i, nmatch)
			}
			for j := 0; j < int(nmatch) && d.Err == nil; j++ {
				k := d.Str("match key", MaxNameLen)
				v := d.value("match value")
				d.kvs = append(d.kvs, kv{k, v})
			}
		}
		sp.m1 = len(d.kvs)
		if flags&flagOrphan != 0 && flags&flagOwner == 0 {
			d.Fail("op %d: orphan flag without an owner", i)
		}
		if flags&flagOwner != 0 {
			o.owner.Path = d.Str("owner", MaxPathLen)
			o.owner.Version = d.Uvarint("owner version")
			o.owner.Orphan = flags&flagOrphan != 0
		}
		sp.set0 = len(d.kvs)
		setStart := d.Off
		nset := d.Uvarint("set count")
		if nset > uint64(len(data)-d.Off)/3 {
			d.Fail("op %d: set count %d impossible", i, nset)
		}
		for j := 0; j < int(nset) && d.Err == nil; j++ {
			k := d.Str("attribute key", MaxNameLen)
			v := d.value("attribute value")
			d.kvs = append(d.kvs, kv{k, v})
		}
		sp.set1 = len(d.kvs)
		if o.typ == OpCreate && d.Err == nil {
			// The count and pairs as read: the canonical encoding of the
			// created node's attributes (see rawOp.setEnc).
			o.setEnc = data[setStart:d.Off:d.Off]
		}
		sp.un0 = len(d.keys)
		nunset := d.Uvarint("unset count")
		if nunset > uint64(len(data)-d.Off) {
			d.Fail("op %d: unset count %d impossible", i, nunset)
		}
		for j := 0; j < int(nunset) && d.Err == nil; j++ {
			d.keys = append(d.keys, d.Str("unset key", MaxNameLen))
		}
		sp.un1 = len(d.keys)
		ops = append(ops, o)
		spans = append(spans, sp)
	}
	if d.Err == nil && d.Off != len(data) {
		d.Fail("%d trailing bytes", len(data)-d.Off)
	}
	if d.Err != nil {
		return nil, d.Err
	}
	// Slices into kvs/keys are taken only now, after they stopped growing.
	for i := range ops {
		sp := spans[i]
		if sp.m1 > sp.m0 {
			ops[i].match = d.kvs[sp.m0:sp.m1:sp.m1]
		}
		if sp.set1 > sp.set0 {
			ops[i].set = d.kvs[sp.set0:sp.set1:sp.set1]
		}
		if sp.un1 > sp.un0 {
			ops[i].unset = d.keys[sp.un0:sp.un1:sp.un1]
		}
	}
	return ops, nil
}
