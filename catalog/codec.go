package catalog

import (
	"encoding/binary"
	"fmt"
	"unsafe"
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
// Set, unset and match keys are strictly increasing and every varint takes
// its shortest form (decoding refuses longer ones), so the encoding of a
// batch is canonical. A batch that needs no version 2 field still encodes
// in the oldest version that carries it unless asked otherwise
// (EncodeVersion).
const (
	BatchV1 = 1
	BatchV2 = 2
	BatchV3 = 3
	// NewestBatchVersion is the newest batch format this code reads and
	// writes.
	NewestBatchVersion = BatchV3
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

// EncodeVersion is Encode in format version (BatchV1 to BatchV3): a writer
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

func appendStr(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// appendValue appends the type byte and payload of v; the same bytes are a
// value's form in node blobs and its key in secondary indexes.
func appendValue(dst []byte, v Value) []byte {
	dst = append(dst, byte(v.typ))
	switch v.typ {
	case TypeString, TypeBytes:
		dst = appendStr(dst, v.s)
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
		dst = appendStr(dst, o.path)
		dst = appendStr(dst, o.kind)
		dst = appendStr(dst, o.to)
		dst = appendStr(dst, o.attr)
		if o.cond.Modified != 0 {
			dst = binary.AppendUvarint(dst, o.cond.Modified)
		}
		if len(o.match) > 0 {
			dst = binary.AppendUvarint(dst, uint64(len(o.match)))
			for _, e := range o.match {
				dst = appendStr(dst, e.k)
				dst = appendValue(dst, e.v)
			}
		}
		if !o.owner.zero() {
			dst = appendStr(dst, o.owner.Path)
			dst = binary.AppendUvarint(dst, o.owner.Version)
		}
		dst = binary.AppendUvarint(dst, uint64(len(o.set)))
		for _, e := range o.set {
			dst = appendStr(dst, e.k)
			dst = appendValue(dst, e.v)
		}
		dst = binary.AppendUvarint(dst, uint64(len(o.unset)))
		for _, k := range o.unset {
			dst = appendStr(dst, k)
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

// decoder reads the batch format. With view set, strings point into data
// (no copies: Apply's fast path) and must not outlive the call.
type decoder struct {
	data []byte
	off  int
	view bool
	max  int  // the newest version read (0: NewestBatchVersion)
	kvs  []kv // backing store for the ops' set slices, reused
	keys []string
	err  error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: at byte %d: %s", ErrMalformed, d.off, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	if d.off < len(d.data) && d.data[d.off] < 0x80 { // one byte: most lengths
		v := d.data[d.off]
		d.off++
		return uint64(v)
	}
	v, n := binary.Uvarint(d.data[d.off:])
	if n <= 0 {
		d.fail("bad varint for %s", what)
		return 0
	}
	if overlong(d.data[d.off : d.off+n]) {
		d.fail("overlong varint for %s", what)
		return 0
	}
	d.off += n
	return v
}

// overlong reports whether the varint b (as binary.Uvarint or
// binary.Varint read it) has more bytes than its value needs: a last byte
// of zero. Encoding writes the shortest form, and only the shortest is
// accepted, so that one batch or value has one encoding (values are kept,
// and indexed, in their encoded form).
func overlong(b []byte) bool { return len(b) > 1 && b[len(b)-1] == 0 }

func (d *decoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.data[d.off:])
	if n <= 0 {
		d.fail("bad varint for %s", what)
		return 0
	}
	if overlong(d.data[d.off : d.off+n]) {
		d.fail("overlong varint for %s", what)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) byte(what string) byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.data) {
		d.fail("truncated before %s", what)
		return 0
	}
	b := d.data[d.off]
	d.off++
	return b
}

func (d *decoder) str(what string, max int) string {
	// Fast path: a short string with a one-byte length.
	if d.err == nil && d.off < len(d.data) {
		if n := int(d.data[d.off]); n < 0x80 && n <= max && d.off+1+n <= len(d.data) {
			start := d.off + 1
			d.off = start + n
			if n == 0 {
				return ""
			}
			if d.view {
				return unsafe.String(&d.data[start], n)
			}
			return string(d.data[start:d.off])
		}
	}
	n := d.uvarint(what)
	if d.err != nil {
		return ""
	}
	if n > uint64(max) {
		d.fail("%s of %d bytes exceeds %d", what, n, max)
		return ""
	}
	if n > uint64(len(d.data)-d.off) {
		d.fail("truncated %s (%d bytes, %d left)", what, n, len(d.data)-d.off)
		return ""
	}
	b := d.data[d.off : d.off+int(n)]
	d.off += int(n)
	if n == 0 {
		return ""
	}
	if d.view {
		return unsafe.String(&b[0], len(b))
	}
	return string(b)
}

func (d *decoder) value(what string) Value {
	t := ValueType(d.byte(what))
	switch t {
	case TypeString, TypeBytes:
		return Value{typ: t, s: d.str(what, MaxValueLen)}
	case TypeInt:
		return Value{typ: t, i: d.varint(what)}
	case TypeBool:
		b := d.byte(what)
		if b > 1 {
			d.fail("bool %s is %d", what, b)
		}
		return Value{typ: t, i: int64(b)}
	}
	d.fail("unknown value type %d for %s", t, what)
	return Value{}
}

// decode parses data into ops (appending to ops[:0]). It checks the
// encoding only; validate checks the operations.
func (d *decoder) decode(data []byte, ops []rawOp, view bool) ([]rawOp, error) {
	d.data, d.off, d.view, d.err = data, 0, view, nil
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
	d.off = 1
	n := d.uvarint("op count")
	// Every op takes at least 8 bytes, which bounds the count by the input
	// size before anything is allocated.
	if d.err == nil && (n == 0 || n > uint64(len(data)-d.off)/8) {
		d.fail("op count %d impossible for %d bytes", n, len(data))
	}
	if d.err != nil {
		return nil, d.err
	}
	ops = ops[:0]
	type span struct{ m0, m1, set0, set1, un0, un1 int }
	spans := make([]span, 0, n)
	for i := 0; i < int(n) && d.err == nil; i++ {
		var o rawOp
		o.typ = OpType(d.byte("op type"))
		flags := d.byte("flags")
		if flags&^known != 0 {
			d.fail("op %d: unknown flags %#x", i, flags)
		}
		o.recursive = flags&flagRecursive != 0
		o.cond.Exists = flags&flagExists != 0
		o.cond.Absent = flags&flagAbsent != 0
		o.path = d.str("path", MaxPathLen)
		o.kind = d.str("kind", MaxNameLen)
		o.to = d.str("to", MaxPathLen)
		o.attr = d.str("attr", MaxNameLen)
		if flags&flagModified != 0 {
			o.cond.Modified = d.uvarint("modified")
			if d.err == nil && o.cond.Modified == 0 {
				d.fail("op %d: modified flag with index 0", i)
			}
		}
		var sp span
		sp.m0 = len(d.kvs)
		if flags&flagMatch != 0 {
			nmatch := d.uvarint("match count")
			if d.err == nil && (nmatch == 0 || nmatch > uint64(len(data)-d.off)/3) {
				d.fail("op %d: match count %d impossible", i, nmatch)
			}
			for j := 0; j < int(nmatch) && d.err == nil; j++ {
				k := d.str("match key", MaxNameLen)
				v := d.value("match value")
				d.kvs = append(d.kvs, kv{k, v})
			}
		}
		sp.m1 = len(d.kvs)
		if flags&flagOrphan != 0 && flags&flagOwner == 0 {
			d.fail("op %d: orphan flag without an owner", i)
		}
		if flags&flagOwner != 0 {
			o.owner.Path = d.str("owner", MaxPathLen)
			o.owner.Version = d.uvarint("owner version")
			o.owner.Orphan = flags&flagOrphan != 0
		}
		sp.set0 = len(d.kvs)
		setStart := d.off
		nset := d.uvarint("set count")
		if nset > uint64(len(data)-d.off)/3 {
			d.fail("op %d: set count %d impossible", i, nset)
		}
		for j := 0; j < int(nset) && d.err == nil; j++ {
			k := d.str("attribute key", MaxNameLen)
			v := d.value("attribute value")
			d.kvs = append(d.kvs, kv{k, v})
		}
		sp.set1 = len(d.kvs)
		if o.typ == OpCreate && d.err == nil {
			// The count and pairs as read: the canonical encoding of the
			// created node's attributes (see rawOp.setEnc).
			o.setEnc = data[setStart:d.off:d.off]
		}
		sp.un0 = len(d.keys)
		nunset := d.uvarint("unset count")
		if nunset > uint64(len(data)-d.off) {
			d.fail("op %d: unset count %d impossible", i, nunset)
		}
		for j := 0; j < int(nunset) && d.err == nil; j++ {
			d.keys = append(d.keys, d.str("unset key", MaxNameLen))
		}
		sp.un1 = len(d.keys)
		ops = append(ops, o)
		spans = append(spans, sp)
	}
	if d.err == nil && d.off != len(data) {
		d.fail("%d trailing bytes", len(data)-d.off)
	}
	if d.err != nil {
		return nil, d.err
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
