package catalog_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
)

type engine string

type typedTable struct {
	Name     string `catalog:"name"`
	Engine   engine `catalog:"engine"`
	Buckets  int    `catalog:"buckets"`
	Small    int8
	Big      int64   `catalog:"big"`
	Count    uint32  `catalog:"count"`
	Replicas uint64  `catalog:"replicas"`
	Online   bool    `catalog:"online"`
	Blob     []byte  `catalog:"blob"`
	Note     string  `catalog:"note,omitempty"`
	Scratch  string  `catalog:"-"`
	Ratio    float64 `catalog:"-"`
	hidden   int
}

func TestTypedAttrsRoundTripEveryKind(t *testing.T) {
	in := typedTable{Name: "orders", Engine: "olap", Buckets: 16, Small: -8, Big: math.MinInt64,
		Count: 7, Replicas: 3, Online: true, Blob: []byte{0, 1, 2}, Scratch: "x", Ratio: 0.5, hidden: 9}
	attrs, err := catalog.Attrs(in)
	require.NoError(t, err)
	require.Equal(t, map[string]catalog.Value{
		"name": catalog.String("orders"), "engine": catalog.String("olap"), "buckets": catalog.Int(16),
		"Small": catalog.Int(-8), "big": catalog.Int(math.MinInt64), "count": catalog.Int(7),
		"replicas": catalog.Int(3), "online": catalog.Bool(true), "blob": catalog.Bytes([]byte{0, 1, 2}),
	}, attrs, "omitempty leaves out the empty note; - and unexported fields are skipped")

	tr := catalog.New()
	res := apply(tr, 1, catalog.Op{Type: catalog.OpCreate, Path: "/orders", Kind: "table", Set: attrs})
	require.NoError(t, res.Err)

	n, ok := tr.Get("/orders")
	require.True(t, ok)
	var out typedTable
	require.NoError(t, n.Decode(&out))
	want := in
	want.Scratch, want.Ratio, want.hidden = "", 0, 0
	require.Equal(t, want, out)

	var viaView typedTable
	var viewErr error
	tr.Read(func(r catalog.Reader) {
		v, ok := r.Get("/orders")
		require.True(t, ok)
		viewErr = v.Decode(&viaView)
	})
	require.NoError(t, viewErr)
	require.Equal(t, want, viaView)

	in.Note = "set"
	attrs, err = catalog.Attrs(&in)
	require.NoError(t, err)
	require.Equal(t, catalog.String("set"), attrs["note"], "omitempty keeps a non-empty value")
}

func TestTypedAttrsUnsupportedFieldNamesStructFieldAndType(t *testing.T) {
	type withFloat struct {
		Name  string
		Ratio float64 `catalog:"ratio"`
	}
	_, err := catalog.Attrs(withFloat{})
	require.ErrorIs(t, err, catalog.ErrUnsupportedField)
	require.ErrorContains(t, err, "withFloat.Ratio has type float64")
	require.ErrorIs(t, catalog.DecodeAttrs(nil, &withFloat{}), catalog.ErrUnsupportedField)

	type inner struct{ A string }
	type embedded struct {
		inner
		B string
	}
	type exportedEmbedded struct {
		Inner inner
	}
	_, err = catalog.Attrs(exportedEmbedded{})
	require.ErrorIs(t, err, catalog.ErrUnsupportedField)
	require.ErrorContains(t, err, "exportedEmbedded.Inner has type catalog_test.inner")
	attrs, err := catalog.Attrs(embedded{B: "b"})
	require.NoError(t, err, "an unexported embedded struct is skipped like any unexported field")
	require.Equal(t, map[string]catalog.Value{"B": catalog.String("b")}, attrs)

	type dup struct {
		A string `catalog:"k"`
		B string `catalog:"k"`
	}
	_, err = catalog.Attrs(dup{})
	require.ErrorIs(t, err, catalog.ErrUnsupportedField)
	require.ErrorContains(t, err, `both map to attribute "k"`)

	_, err = catalog.Attrs(42)
	require.ErrorIs(t, err, catalog.ErrUnsupportedField)
	require.ErrorIs(t, catalog.DecodeAttrs(nil, typedTable{}), catalog.ErrUnsupportedField, "decoding needs a pointer")
	require.ErrorIs(t, catalog.DecodeAttrs(nil, (*typedTable)(nil)), catalog.ErrUnsupportedField)

	_, err = catalog.Attrs(struct{ U uint64 }{U: math.MaxUint64})
	require.ErrorIs(t, err, catalog.ErrUnsupportedField)
	require.ErrorContains(t, err, "U = 18446744073709551615")
}

func TestTypedDecodeWrongStoredTypeOrRangeIsErrAttrType(t *testing.T) {
	var out typedTable
	err := catalog.DecodeAttrs(map[string]catalog.Value{"buckets": catalog.String("16")}, &out)
	require.ErrorIs(t, err, catalog.ErrAttrType)
	require.ErrorContains(t, err, `attribute "buckets" is string, field catalog_test.typedTable.Buckets is int`)

	err = catalog.DecodeAttrs(map[string]catalog.Value{"Small": catalog.Int(300)}, &out)
	require.ErrorIs(t, err, catalog.ErrAttrType)
	require.ErrorContains(t, err, "overflows field catalog_test.typedTable.Small of type int8")

	err = catalog.DecodeAttrs(map[string]catalog.Value{"count": catalog.Int(-1)}, &out)
	require.ErrorIs(t, err, catalog.ErrAttrType)

	out = typedTable{Name: "kept"}
	require.NoError(t, catalog.DecodeAttrs(map[string]catalog.Value{"other": catalog.Int(1)}, &out))
	require.Equal(t, typedTable{Name: "kept"}, out, "absent attributes leave fields as they are; unknown ones are ignored")
}

func TestValueAsAccessorsReportPresenceOfTheAskedType(t *testing.T) {
	s, ok := catalog.String("x").AsString()
	require.True(t, ok)
	require.Equal(t, "x", s)
	_, ok = catalog.Int(1).AsString()
	require.False(t, ok)

	i, ok := catalog.Int(0).AsInt()
	require.True(t, ok, "a stored zero is present")
	require.Zero(t, i)
	_, ok = catalog.String("0").AsInt()
	require.False(t, ok)

	b, ok := catalog.Bool(false).AsBool()
	require.True(t, ok)
	require.False(t, b)
	_, ok = catalog.Int(1).AsBool()
	require.False(t, ok)

	by, ok := catalog.Bytes([]byte("ab")).AsBytes()
	require.True(t, ok)
	require.Equal(t, []byte("ab"), by)
	_, ok = catalog.String("ab").AsBytes()
	require.False(t, ok)

	_, ok = catalog.Value{}.AsString()
	require.False(t, ok, "the zero Value has no type")
}

func FuzzDecodeAttrsNeverPanics(f *testing.F) {
	f.Add("buckets", uint8(1), int64(16), "s", []byte("b"))
	f.Add("Small", uint8(1), int64(1000), "", []byte(nil))
	f.Add("blob", uint8(2), int64(-1), "x", []byte{0xff})
	f.Add("engine", uint8(3), int64(1), "olap", []byte{})
	f.Fuzz(func(t *testing.T, key string, kind uint8, i int64, s string, b []byte) {
		var v catalog.Value
		switch kind % 5 {
		case 0:
			v = catalog.String(s)
		case 1:
			v = catalog.Int(i)
		case 2:
			v = catalog.Bytes(b)
		case 3:
			v = catalog.Bool(i%2 == 0)
		}
		attrs := map[string]catalog.Value{key: v, "name": catalog.String(s), "count": catalog.Int(i)}
		var out typedTable
		err := catalog.DecodeAttrs(attrs, &out)
		if err != nil {
			require.ErrorIs(t, err, catalog.ErrAttrType)
			return
		}
		// What decodes encodes back to the attributes the fields map to.
		back, err := catalog.Attrs(out)
		require.NoError(t, err)
		for k, got := range back {
			if want, ok := attrs[k]; ok {
				require.True(t, want.Equal(got), "attribute %q: stored %v, round trip %v", k, want, got)
			}
		}
	})
}

func TestTypedAttrsPlanIsCachedPerType(t *testing.T) {
	type pair struct {
		A int64 `catalog:"a"`
		B bool  `catalog:"b"`
	}
	v := pair{A: 1, B: true}
	_, err := catalog.Attrs(v) // builds and caches the plan
	require.NoError(t, err)
	// With the plan cached, a call allocates only the result map; a walk
	// of the type's fields would allocate its own map and slice too.
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := catalog.Attrs(&v); err != nil {
			panic(err)
		}
	})
	require.LessOrEqual(t, allocs, 2.0)
}
