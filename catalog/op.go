package catalog

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/metatree/metatree/catalog/internal/codec"
	"github.com/metatree/metatree/catalog/internal/layout"
)

// OpType is the type of an operation in a batch.
type OpType uint8

// Operation types.
const (
	// OpCreate creates the node at Path (its parent must exist) with Kind and
	// the attributes in Set.
	OpCreate OpType = iota + 1
	// OpUpdate sets the attributes in Set and deletes those in Unset. A
	// non-empty Kind must equal the node's kind (else ErrConflict).
	OpUpdate
	// OpDelete deletes the node at Path; a node with children only with
	// Recursive.
	OpDelete
	// OpMove moves or renames the node at Path (with its subtree) to To,
	// whose parent must exist and which must not exist.
	OpMove
	// OpCheck changes nothing: it only evaluates its Cond (no Cond means
	// Exists).
	OpCheck
	// OpCreateIndex creates the secondary index on (Kind, Attr).
	OpCreateIndex
	// OpDropIndex drops the secondary index on (Kind, Attr).
	OpDropIndex
	// OpResync is never in a batch: it is the last event a watcher receives
	// when Load replaced the whole tree (the watcher is then closed with
	// ErrResync).
	OpResync
)

func (t OpType) String() string {
	switch t {
	case OpCreate:
		return "create"
	case OpUpdate:
		return "update"
	case OpDelete:
		return "delete"
	case OpMove:
		return "move"
	case OpCheck:
		return "check"
	case OpCreateIndex:
		return "create-index"
	case OpDropIndex:
		return "drop-index"
	case OpResync:
		return "resync"
	}
	return fmt.Sprintf("op(%d)", uint8(t))
}

// Cond is an operation's precondition, evaluated against the tree as left by
// the earlier operations of the same batch. A failed one fails the batch with
// ErrConflict.
type Cond struct {
	Exists   bool   // the node at Path exists
	Absent   bool   // the node at Path does not exist
	Modified uint64 // the node at Path exists and was last changed at this index (0: no check)
	// Match: the node at Path exists and each of these attributes holds
	// this value (same type and value; nil: no check). It lets a writer
	// move a node from one state to the next (a job from "running" to
	// "done") without knowing the index of its last change. Batches that
	// use it need batch format version 2 (see EncodeVersion).
	Match map[string]Value
}

func (c Cond) zero() bool { return !c.Exists && !c.Absent && c.Modified == 0 && len(c.Match) == 0 }

// Op is one operation of a batch. Which fields apply depends on Type; a field
// that does not apply must be left zero (Encode rejects it).
type Op struct {
	Type      OpType
	Path      string           // the node: "/db1/orders"; "" for index ops
	Kind      string           // create: the new node's kind; update: expected kind; index ops: indexed kind
	Set       map[string]Value // create, update: attributes to set
	Unset     []string         // update: attributes to delete
	Recursive bool             // delete: also delete the subtree
	To        string           // move: the new path
	Attr      string           // index ops: indexed attribute
	Cond      Cond
	// Owner (create only; zero: none) ties the new node to a version of
	// another node (Owner.Version, or 0 for the one current when the batch
	// applies): when that node next changes or goes, the new node goes too (see Owner and owner.go). Batches that use it need
	// batch format version 3 (see EncodeVersion).
	Owner Owner
}

// Batch is a list of operations applied atomically: all of them or, if any
// fails, none.
type Batch struct{ Ops []Op }

// Result is what Apply returns for a batch (as its `any`).
type Result struct {
	Index uint64   // the log index of the batch
	IDs   []uint64 // per operation: the id of the node created, changed, deleted, moved or checked (0 if none); nil if the batch failed
	Err   error    // nil, or an *OpError naming the failing operation (or an ErrMalformed/ErrUnknownVersion/ErrApplied error)
}

// Limits on names and values. They bound memory per node and keep image
// records small; violating them is ErrInvalidName or ErrInvalid.
const (
	MaxNameLen    = layout.MaxNameLen // bytes in a node name, kind or attribute key: 255
	MaxValueLen   = codec.MaxValueLen // bytes in a string or bytes value: 1 << 20
	MaxAttrsBytes = 4 << 20           // encoded bytes of one node's name and attributes, each key counted by its name
	MaxPathLen    = layout.MaxPathLen // bytes in a path: 1 << 16
)

// ValidName reports whether s is a valid node name, kind or attribute key:
// 1 to 255 bytes of UTF-8, without '/', NUL, or control characters, and not
// "." or "..".
func ValidName(s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty", ErrInvalidName)
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("%w: %d bytes (at most %d): %.32q...", ErrInvalidName, len(s), MaxNameLen, s)
	}
	if s == "." || s == ".." {
		return fmt.Errorf("%w: %q", ErrInvalidName, s)
	}
	ascii := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '/' {
			return fmt.Errorf("%w: %q contains '/'", ErrInvalidName, s)
		}
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("%w: %q contains control byte %#x", ErrInvalidName, s, c)
		}
		if c >= 0x80 {
			ascii = false
		}
	}
	if !ascii && !utf8.ValidString(s) {
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidName, s)
	}
	return nil
}

// ValidPath reports whether p is a valid absolute path: "/" or "/a/b" with
// valid names, no trailing or doubled slash.
func ValidPath(p string) error {
	if p == "/" {
		return nil
	}
	if p == "" || p[0] != '/' {
		return fmt.Errorf("%w: path %q is not absolute", ErrInvalidName, p)
	}
	if len(p) > MaxPathLen {
		return fmt.Errorf("%w: path of %d bytes (at most %d)", ErrInvalidName, len(p), MaxPathLen)
	}
	// One pass for the common case (ASCII names); anything unusual is
	// reported by ValidName on the offending component.
	start := 1
	ascii := true
	for i := 1; i <= len(p); i++ {
		if i < len(p) {
			c := p[i]
			if c >= 0x80 {
				ascii = false
			}
			if c != '/' && c >= 0x20 && c != 0x7f {
				continue
			}
			if c != '/' {
				break // a control byte: let ValidName say so
			}
		}
		n := p[start:i]
		if len(n) == 0 || len(n) > MaxNameLen || n == "." || n == ".." {
			break
		}
		if i == len(p) {
			if ascii || utf8.ValidString(p) {
				return nil
			}
			break
		}
		start = i + 1
	}
	rest := p[1:]
	for {
		name, tail, more := strings.Cut(rest, "/")
		if err := ValidName(name); err != nil {
			return fmt.Errorf("path %q: %w", p, err)
		}
		if !more {
			return fmt.Errorf("%w: path %q", ErrInvalidName, p) // not reached
		}
		rest = tail
	}
}

// under reports whether path p is prefix or inside it ("/a" is under "/a"
// and "/", "/a/b" is under "/a", "/ab" is not).
func under(p, prefix string) bool {
	if prefix == "" || prefix == "/" {
		return true
	}
	return strings.HasPrefix(p, prefix) && (len(p) == len(prefix) || p[len(prefix)] == '/')
}

func validValue(k string, v Value) error {
	if err := ValidName(k); err != nil {
		return fmt.Errorf("attribute key: %w", err)
	}
	return validValueOnly(k, v)
}

func validValueOnly(k string, v Value) error {
	switch v.typ {
	case TypeString, TypeBytes:
		if len(v.s) > MaxValueLen {
			return fmt.Errorf("%w: attribute %q: value of %d bytes (at most %d)", ErrInvalid, k, len(v.s), MaxValueLen)
		}
	case TypeInt, TypeBool:
	default:
		return fmt.Errorf("%w: attribute %q: invalid (zero) Value", ErrInvalid, k)
	}
	return nil
}

// kv is one attribute assignment; rawOp holds Set as kvs sorted by key.
type kv struct {
	k string
	v Value
}

// rawOp is the form operations are validated, encoded and applied in: Set as
// a sorted slice rather than a map. In Apply its strings may view the entry
// bytes, so nothing may keep them past the call.
type rawOp struct {
	typ       OpType
	recursive bool
	cond      Cond
	owner     Owner
	path      string
	kind      string
	to        string
	attr      string
	match     []kv     // cond.Match sorted by key (cond.Match itself is nil)
	set       []kv     // sorted by key, no duplicates
	unset     []string // sorted, no duplicates
	// setEnc is set's encoding in the entry a create was decoded from
	// (nset:uvarint (key:str value)*, see codec.go), nil for an op built
	// otherwise: the canonical encoding of the created node's attributes,
	// which its format 2 digest element holds as is (digester.created).
	setEnc []byte
}

func (o *Op) raw() rawOp {
	r := rawOp{typ: o.Type, recursive: o.Recursive, cond: o.Cond, owner: o.Owner, path: o.Path, kind: o.Kind, to: o.To, attr: o.Attr}
	r.cond.Match = nil
	if len(o.Cond.Match) > 0 {
		r.match = make([]kv, 0, len(o.Cond.Match))
		for k, v := range o.Cond.Match {
			r.match = append(r.match, kv{k, v})
		}
		slices.SortFunc(r.match, func(a, b kv) int { return strings.Compare(a.k, b.k) })
	}
	if len(o.Set) > 0 {
		r.set = make([]kv, 0, len(o.Set))
		for k, v := range o.Set {
			r.set = append(r.set, kv{k, v})
		}
		slices.SortFunc(r.set, func(a, b kv) int { return strings.Compare(a.k, b.k) })
	}
	if len(o.Unset) > 0 {
		r.unset = slices.Clone(o.Unset)
		slices.Sort(r.unset)
		r.unset = slices.Compact(r.unset)
	}
	return r
}

func (r *rawOp) op() Op {
	o := Op{Type: r.typ, Path: r.path, Kind: r.kind, Recursive: r.recursive, To: r.to, Attr: r.attr, Cond: r.cond, Owner: r.owner}
	if len(r.match) > 0 {
		o.Cond.Match = make(map[string]Value, len(r.match))
		for _, e := range r.match {
			o.Cond.Match[e.k] = e.v
		}
	}
	if len(r.set) > 0 {
		o.Set = make(map[string]Value, len(r.set))
		for _, e := range r.set {
			o.Set[e.k] = e.v
		}
	}
	if len(r.unset) > 0 {
		o.Unset = r.unset
	}
	return o
}

// validate checks one operation in isolation; the checks that need the tree
// happen in Apply.
func (o *rawOp) validate(m *validMemo) error {
	stray := func(field string) error {
		return fmt.Errorf("%w: field %s does not apply to %s", ErrInvalid, field, o.typ)
	}
	switch o.typ {
	case OpCreate, OpUpdate, OpDelete, OpMove, OpCheck:
		if err := m.validPath(o.path); err != nil {
			return err
		}
		if o.attr != "" {
			return stray("Attr")
		}
	case OpCreateIndex, OpDropIndex:
		if o.path != "" {
			return stray("Path")
		}
		if err := ValidName(o.kind); err != nil {
			return fmt.Errorf("kind: %w", err)
		}
		if err := ValidName(o.attr); err != nil {
			return fmt.Errorf("attribute: %w", err)
		}
		if len(o.set) > 0 || len(o.unset) > 0 || o.recursive || o.to != "" || !o.cond.zero() || len(o.match) > 0 || !o.owner.zero() {
			return fmt.Errorf("%w: %s takes only Kind and Attr", ErrInvalid, o.typ)
		}
		return nil
	default:
		return fmt.Errorf("%w: unknown operation type %d", ErrInvalid, uint8(o.typ))
	}
	if o.cond.Exists && o.cond.Absent {
		return fmt.Errorf("%w: condition both Exists and Absent", ErrInvalid)
	}
	if o.cond.Absent && o.cond.Modified != 0 {
		return fmt.Errorf("%w: condition both Absent and Modified", ErrInvalid)
	}
	if o.cond.Absent && len(o.match) > 0 {
		return fmt.Errorf("%w: condition both Absent and Match", ErrInvalid)
	}
	if o.typ == OpCreate && len(o.match) > 0 {
		return fmt.Errorf("%w: condition Match on a create (the node must not exist)", ErrInvalid)
	}
	for i, e := range o.match {
		if err := m.validKey(e.k); err != nil {
			return fmt.Errorf("match key: %w", err)
		}
		if err := validValueOnly(e.k, e.v); err != nil {
			return err
		}
		if i > 0 && o.match[i-1].k >= e.k {
			return fmt.Errorf("%w: match keys not sorted or duplicated at %q", ErrInvalid, e.k)
		}
	}
	if o.typ != OpCreate && o.typ != OpUpdate && len(o.set) > 0 {
		return stray("Set")
	}
	if o.typ != OpUpdate && len(o.unset) > 0 {
		return stray("Unset")
	}
	if o.typ != OpDelete && o.recursive {
		return stray("Recursive")
	}
	if o.typ != OpCreate && !o.owner.zero() {
		return stray("Owner")
	}
	if o.typ != OpMove && o.to != "" {
		return stray("To")
	}
	if o.typ != OpCreate && o.typ != OpUpdate && o.kind != "" {
		return stray("Kind")
	}
	size := len(o.path)
	for i, e := range o.set {
		if err := m.validKey(e.k); err != nil {
			return fmt.Errorf("attribute key: %w", err)
		}
		if err := validValueOnly(e.k, e.v); err != nil {
			return err
		}
		if i > 0 && o.set[i-1].k >= e.k {
			return fmt.Errorf("%w: attribute keys not sorted or duplicated at %q", ErrInvalid, e.k)
		}
		size += len(e.k) + len(e.v.s) + 10
	}
	if size > MaxAttrsBytes {
		return fmt.Errorf("%w: attributes of %d bytes (at most %d)", ErrInvalid, size, MaxAttrsBytes)
	}
	for i, k := range o.unset {
		if err := ValidName(k); err != nil {
			return fmt.Errorf("unset key: %w", err)
		}
		if i > 0 && o.unset[i-1] >= k {
			return fmt.Errorf("%w: unset keys not sorted or duplicated at %q", ErrInvalid, k)
		}
		if _, found := slices.BinarySearchFunc(o.set, k, func(e kv, k string) int { return strings.Compare(e.k, k) }); found {
			return fmt.Errorf("%w: attribute %q both set and unset", ErrInvalid, k)
		}
	}
	switch o.typ {
	case OpCreate:
		if o.path == "/" {
			return fmt.Errorf("%w: cannot create the root", ErrExists)
		}
		if err := m.validKind(o.kind); err != nil {
			return fmt.Errorf("kind: %w", err)
		}
		if !o.owner.zero() {
			if err := o.validOwner(); err != nil {
				return err
			}
		}
	case OpUpdate:
		if o.kind != "" {
			if err := ValidName(o.kind); err != nil {
				return fmt.Errorf("kind: %w", err)
			}
		}
	case OpDelete:
		if o.path == "/" {
			return fmt.Errorf("%w: cannot delete the root", ErrInvalid)
		}
	case OpMove:
		if o.path == "/" {
			return fmt.Errorf("%w: cannot move the root", ErrInvalid)
		}
		if err := ValidPath(o.to); err != nil {
			return fmt.Errorf("to: %w", err)
		}
		if o.to == "/" || under(o.to, o.path) {
			return fmt.Errorf("%w: cannot move %q into itself (%q)", ErrInvalid, o.path, o.to)
		}
	}
	return nil
}

// validMemo remembers what the previous operations of a batch proved
// valid: the components of the last path, the last kind, recent keys.
// Batches repeat them, and validating each from scratch was a tenth of
// Apply's time.
type validMemo struct {
	path  string
	kind  string
	keys  [8]string
	nkeys int
}

func (m *validMemo) validPath(p string) error {
	if prev := m.path; prev != "" && len(p) > 1 && p[0] == '/' && len(p) <= MaxPathLen {
		n := layout.CommonPrefix(p, prev)
		if n == len(p) && (n == len(prev) || prev[n] == '/') {
			return nil // p is prev or one of its ancestors
		}
		// The longest prefix of whole components both share.
		k := n
		for k > 0 && !(k < len(p) && p[k] == '/' && (k == len(prev) || prev[k] == '/')) {
			k--
		}
		// p[k:] must name at least one component: "/" alone is the root
		// as a path but an empty component as a suffix.
		if k > 0 && len(p)-k > 1 && ValidPath(p[k:]) == nil {
			m.path = p
			return nil
		}
	}
	if err := ValidPath(p); err != nil {
		return err
	}
	m.path = p
	return nil
}

func (m *validMemo) validKind(k string) error {
	if k == m.kind && k != "" {
		return nil
	}
	if err := ValidName(k); err != nil {
		return err
	}
	m.kind = k
	return nil
}

func (m *validMemo) validKey(k string) error {
	for _, v := range m.keys[:min(m.nkeys, len(m.keys))] {
		if v == k {
			return nil
		}
	}
	if err := ValidName(k); err != nil {
		return err
	}
	m.keys[m.nkeys%len(m.keys)] = k
	m.nkeys++
	return nil
}

func validateOps(ops []rawOp) error {
	if len(ops) == 0 {
		return fmt.Errorf("%w: empty batch", ErrInvalid)
	}
	var m validMemo
	for i := range ops {
		if err := ops[i].validate(&m); err != nil {
			return &OpError{Op: i, Type: ops[i].typ, Path: strings.Clone(ops[i].path), Err: err}
		}
	}
	return nil
}
