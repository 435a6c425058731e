package catalog

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
)

// Errors of the typed attribute mapping (Attrs, DecodeAttrs, View.Decode).
var (
	// ErrUnsupportedField: a struct given to Attrs or DecodeAttrs has an
	// exported field of a type no Value carries (floats, maps, nested
	// structs, ...) and no `catalog:"-"` tag, or v is not a struct (pointer).
	ErrUnsupportedField = errors.New("catalog: unsupported field type")
	// ErrAttrType: a stored attribute has a type the struct field cannot
	// hold (an int attribute into a string field, an int out of the field's
	// range, ...).
	ErrAttrType = errors.New("catalog: attribute of the wrong type")
)

// AsString returns the string of a string value; ok is false for other types.
func (v Value) AsString() (s string, ok bool) { return v.s, v.typ == TypeString }

// AsInt returns the integer of an int value; ok is false for other types.
func (v Value) AsInt() (i int64, ok bool) {
	if v.typ != TypeInt {
		return 0, false
	}
	return v.i, true
}

// AsBool returns the boolean of a bool value; ok is false for other types.
func (v Value) AsBool() (b bool, ok bool) { return v.typ == TypeBool && v.i != 0, v.typ == TypeBool }

// AsBytes returns a copy of the bytes of a bytes value; ok is false for
// other types.
func (v Value) AsBytes() (b []byte, ok bool) {
	if v.typ != TypeBytes {
		return nil, false
	}
	return []byte(v.s), true
}

// typedField is the plan for one struct field: where it is, the attribute
// key it maps to and the Value type it carries.
type typedField struct {
	index     int
	key       string
	typ       ValueType
	omitEmpty bool
}

// typedPlan is the cached plan for one struct type.
type typedPlan struct {
	fields []typedField
	err    error
}

// typedPlans caches a *typedPlan per reflect.Type, so that mapping a value
// walks its type's fields once, not on every call.
var typedPlans sync.Map

var bytesType = reflect.TypeFor[[]byte]()

// planFor returns the field plan of struct type t, building it on first use.
func planFor(t reflect.Type) *typedPlan {
	if p, ok := typedPlans.Load(t); ok {
		return p.(*typedPlan)
	}
	p := buildPlan(t)
	actual, _ := typedPlans.LoadOrStore(t, p)
	return actual.(*typedPlan)
}

func buildPlan(t reflect.Type) *typedPlan {
	p := &typedPlan{}
	seen := map[string]string{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag, hasTag := f.Tag.Lookup("catalog")
		if tag == "-" {
			continue
		}
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if !hasTag || name == "" {
			name = f.Name
		}
		typ := fieldValueType(f.Type)
		if typ == TypeInvalid {
			p.err = fmt.Errorf("%w: %s.%s has type %s (want a string, integer, bool or []byte kind, or a `catalog:\"-\"` tag)",
				ErrUnsupportedField, t, f.Name, f.Type)
			return p
		}
		if prev, dup := seen[name]; dup {
			p.err = fmt.Errorf("%w: %s.%s and %s.%s both map to attribute %q", ErrUnsupportedField, t, prev, t, f.Name, name)
			return p
		}
		seen[name] = f.Name
		p.fields = append(p.fields, typedField{
			index:     i,
			key:       name,
			typ:       typ,
			omitEmpty: opts == "omitempty",
		})
	}
	return p
}

// fieldValueType returns the Value type a field of type t carries, or
// TypeInvalid if none does.
func fieldValueType(t reflect.Type) ValueType {
	switch t.Kind() {
	case reflect.String:
		return TypeString
	case reflect.Bool:
		return TypeBool
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return TypeInt
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return TypeBytes
		}
	}
	return TypeInvalid
}

// structValue returns the struct v is or points to, or an error naming
// what v is instead.
func structValue(v any, fn string, settable bool) (reflect.Value, *typedPlan, error) {
	rv := reflect.ValueOf(v)
	if settable {
		if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
			return reflect.Value{}, nil, fmt.Errorf("%w: %s needs a non-nil pointer to a struct, got %T", ErrUnsupportedField, fn, v)
		}
		rv = rv.Elem()
	} else {
		if rv.Kind() == reflect.Pointer && !rv.IsNil() {
			rv = rv.Elem()
		}
		if rv.Kind() != reflect.Struct {
			return reflect.Value{}, nil, fmt.Errorf("%w: %s needs a struct or a pointer to one, got %T", ErrUnsupportedField, fn, v)
		}
	}
	p := planFor(rv.Type())
	if p.err != nil {
		return reflect.Value{}, nil, p.err
	}
	return rv, p, nil
}

// Attrs maps the exported fields of struct v (or *v) to attributes for
// Op.Set, as encoding/json maps fields to object members: the attribute key
// is the field's name, or the name in its `catalog:"key"` tag; a
// `catalog:"-"` tag skips the field, and `catalog:"key,omitempty"` leaves
// out a zero value. Fields of string, bool, integer and []byte kinds
// (named types included) map to the Value of that type; any other exported
// field type is an error wrapping ErrUnsupportedField that names the
// struct, the field and its type, as is an unsigned value above
// math.MaxInt64.
func Attrs(v any) (map[string]Value, error) {
	rv, p, err := structValue(v, "Attrs", false)
	if err != nil {
		return nil, err
	}
	m := make(map[string]Value, len(p.fields))
	for _, f := range p.fields {
		fv := rv.Field(f.index)
		if f.omitEmpty && fv.IsZero() {
			continue
		}
		switch f.typ {
		case TypeString:
			m[f.key] = String(fv.String())
		case TypeBool:
			m[f.key] = Bool(fv.Bool())
		case TypeBytes:
			m[f.key] = Bytes(fv.Bytes())
		case TypeInt:
			if fv.CanInt() {
				m[f.key] = Int(fv.Int())
			} else {
				u := fv.Uint()
				if u > math.MaxInt64 {
					return nil, fmt.Errorf("%w: %s.%s = %d is above the largest int attribute", ErrUnsupportedField,
						rv.Type(), rv.Type().Field(f.index).Name, u)
				}
				m[f.key] = Int(int64(u))
			}
		}
	}
	return m, nil
}

// DecodeAttrs sets the fields of the struct v points to from attrs, with
// the field mapping of Attrs. A field whose attribute is absent keeps its
// value; an attribute no field maps to is ignored. An attribute of another
// type than its field's, or an int out of the field's range, is an error
// wrapping ErrAttrType that names the attribute, the field and both types;
// fields already set stay set.
func DecodeAttrs(attrs map[string]Value, v any) error {
	return decodeAttrs(func(k string) (Value, bool) { val, ok := attrs[k]; return val, ok }, v, "DecodeAttrs")
}

// Decode sets the fields of the struct v points to from the node's
// attributes, as DecodeAttrs does. Strings and bytes are copied out of the
// tree's storage.
func (v View) Decode(dst any) error { return decodeAttrs(v.Attr, dst, "View.Decode") }

// Decode sets the fields of the struct v points to from the node's
// attributes, as DecodeAttrs does.
func (n Node) Decode(v any) error { return DecodeAttrs(n.Attrs, v) }

func decodeAttrs(get func(string) (Value, bool), v any, fn string) error {
	rv, p, err := structValue(v, fn, true)
	if err != nil {
		return err
	}
	for _, f := range p.fields {
		val, ok := get(f.key)
		if !ok {
			continue
		}
		fv := rv.Field(f.index)
		if val.typ != f.typ {
			return fmt.Errorf("%w: attribute %q is %s, field %s.%s is %s", ErrAttrType,
				f.key, val.typ, rv.Type(), rv.Type().Field(f.index).Name, fv.Type())
		}
		switch f.typ {
		case TypeString:
			fv.SetString(strings.Clone(val.s))
		case TypeBool:
			fv.SetBool(val.i != 0)
		case TypeBytes:
			fv.SetBytes([]byte(val.s))
		case TypeInt:
			if fv.CanInt() {
				if fv.OverflowInt(val.i) {
					return fmt.Errorf("%w: attribute %q = %d overflows field %s.%s of type %s", ErrAttrType,
						f.key, val.i, rv.Type(), rv.Type().Field(f.index).Name, fv.Type())
				}
				fv.SetInt(val.i)
			} else {
				if val.i < 0 || fv.OverflowUint(uint64(val.i)) {
					return fmt.Errorf("%w: attribute %q = %d overflows field %s.%s of type %s", ErrAttrType,
						f.key, val.i, rv.Type(), rv.Type().Field(f.index).Name, fv.Type())
				}
				fv.SetUint(uint64(val.i))
			}
		}
	}
	return nil
}
