package catalog

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/metatree/metatree/internal/operr"
)

// ValueType is the type of an attribute value.
type ValueType uint8

// Attribute value types. The zero Value has TypeInvalid and cannot be stored.
const (
	TypeInvalid ValueType = iota
	TypeString
	TypeInt
	TypeBool
	TypeBytes
)

func (t ValueType) String() string {
	switch t {
	case TypeString:
		return "string"
	case TypeInt:
		return "int"
	case TypeBool:
		return "bool"
	case TypeBytes:
		return "bytes"
	}
	return "invalid"
}

// Value is a typed attribute value: a string, an int64, a bool or bytes.
// Values are immutable and safe to share; compare them with Equal.
type Value struct {
	typ ValueType
	i   int64  // int, and bool as 0/1
	s   string // string, and bytes
}

// String returns a string value.
func String(s string) Value { return Value{typ: TypeString, s: s} }

// Int returns an integer value.
func Int(i int64) Value { return Value{typ: TypeInt, i: i} }

// Bool returns a boolean value.
func Bool(b bool) Value {
	v := Value{typ: TypeBool}
	if b {
		v.i = 1
	}
	return v
}

// Bytes returns a bytes value holding a copy of b.
func Bytes(b []byte) Value { return Value{typ: TypeBytes, s: string(b)} }

// Type returns the value's type.
func (v Value) Type() ValueType { return v.typ }

// Str returns the payload of a string value, "" for other types; AsString
// also says whether the value is a string. String, in contrast, formats any
// value for printing.
func (v Value) Str() string {
	if v.typ != TypeString {
		return ""
	}
	return v.s
}

// Int64 returns the integer of an int value, 0 for other types; AsInt also
// says whether the value is an int.
func (v Value) Int64() int64 {
	if v.typ != TypeInt {
		return 0
	}
	return v.i
}

// Bool returns the boolean of a bool value, false for other types; AsBool
// also says whether the value is a bool.
func (v Value) Bool() bool { return v.typ == TypeBool && v.i != 0 }

// Bytes returns a copy of the bytes of a bytes value, nil for other types;
// AsBytes also says whether the value is bytes.
func (v Value) Bytes() []byte {
	if v.typ != TypeBytes {
		return nil
	}
	return []byte(v.s)
}

// Equal reports whether v and w have the same type and content.
func (v Value) Equal(w Value) bool { return v == w }

// String formats the value for printing (fmt.Stringer; the payload
// accessors are Str and AsString): strings as they are, ints in
// decimal, bools as true/false, bytes as 0x-prefixed hex.
func (v Value) String() string {
	switch v.typ {
	case TypeString:
		return v.s
	case TypeInt:
		return strconv.FormatInt(v.i, 10)
	case TypeBool:
		return strconv.FormatBool(v.i != 0)
	case TypeBytes:
		return "0x" + hex.EncodeToString([]byte(v.s))
	}
	return "<invalid>"
}

// MarshalJSON encodes strings, ints and bools as the JSON scalars, and bytes
// as {"bytes":"<base64>"} so that the type survives a round trip.
func (v Value) MarshalJSON() ([]byte, error) {
	switch v.typ {
	case TypeString:
		return json.Marshal(v.s)
	case TypeInt:
		return strconv.AppendInt(nil, v.i, 10), nil
	case TypeBool:
		return strconv.AppendBool(nil, v.i != 0), nil
	case TypeBytes:
		return json.Marshal(struct {
			Bytes []byte `json:"bytes"`
		}{[]byte(v.s)})
	}
	return nil, errors.New("catalog: cannot marshal an invalid Value")
}

// UnmarshalJSON accepts what MarshalJSON produces: a string, an integer
// (within int64), a bool, or {"bytes":"<base64>"}.
func (v *Value) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return errors.New("catalog: empty JSON value")
	}
	switch data[0] {
	case '"':
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return operr.Errorf("catalog: value: %w", err)
		}
		*v = String(s)
	case 't', 'f':
		var b bool
		if err := json.Unmarshal(data, &b); err != nil {
			return operr.Errorf("catalog: value: %w", err)
		}
		*v = Bool(b)
	case '{':
		var o struct {
			Bytes *string `json:"bytes"`
		}
		if err := json.Unmarshal(data, &o); err != nil {
			return operr.Errorf("catalog: value: %w", err)
		}
		if o.Bytes == nil {
			return errors.New(`catalog: value: object must be {"bytes":"<base64>"}`)
		}
		b, err := base64.StdEncoding.DecodeString(*o.Bytes)
		if err != nil {
			return operr.Errorf("catalog: value: bytes: %w", err)
		}
		*v = Bytes(b)
	default:
		i, err := strconv.ParseInt(string(data), 10, 64)
		if err != nil {
			return fmt.Errorf("catalog: value %s is not a string, an int64, a bool or {\"bytes\":...}", data)
		}
		*v = Int(i)
	}
	return nil
}
