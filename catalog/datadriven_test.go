package catalog_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/metatree/metatree/catalog"
)

// TestDataDriven runs the scripts in testdata/batches: each applies
// batches to a fresh tree and dumps the result. Commands:
//
//	apply index=N        one op a line (see parseOp); prints the Result
//	dump [path=/p]       the subtree at path (default /), a node a line
//	find kind=K attr=A value=V
//
// Rewrite the expected output with -rewrite after a deliberate change.
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/batches", func(t *testing.T, path string) {
		tree := catalog.New()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "apply":
				var index uint64
				d.ScanArgs(t, "index", &index)
				var ops []catalog.Op
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					op, err := parseOp(line)
					if err != nil {
						d.Fatalf(t, "%s", err)
					}
					ops = append(ops, op)
				}
				data, err := catalog.Batch{Ops: ops}.Encode()
				if err != nil {
					return fmt.Sprintf("encode: %s\n", err)
				}
				res := tree.Apply(index, data).(*catalog.Result)
				if res.Err != nil {
					return fmt.Sprintf("error: %s\n", res.Err)
				}
				return fmt.Sprintf("ok ids=%v\n", res.IDs)
			case "dump":
				root := "/"
				if d.HasArg("path") {
					d.ScanArgs(t, "path", &root)
				}
				var b strings.Builder
				dump(&b, tree, root)
				return b.String()
			case "find":
				var kind, attr, value string
				d.ScanArgs(t, "kind", &kind)
				d.ScanArgs(t, "attr", &attr)
				d.ScanArgs(t, "value", &value)
				var b strings.Builder
				for _, n := range tree.Find(kind, attr, parseValue(value)) {
					fmt.Fprintln(&b, n.Path)
				}
				return b.String()
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
				return ""
			}
		})
	})
}

// parseOp parses one op of an apply command:
//
//	create PATH KIND [key=value...]
//	update PATH [key=value...] [-key...] [if-modified=N]
//	delete PATH [recursive]
//	move PATH TO
//	check PATH [exists|absent|modified=N]
//	create-index KIND ATTR
//	drop-index KIND ATTR
func parseOp(line string) (catalog.Op, error) {
	f := strings.Fields(line)
	if len(f) < 2 {
		return catalog.Op{}, fmt.Errorf("op %q: want a type and an argument", line)
	}
	var op catalog.Op
	rest := f[2:]
	switch f[0] {
	case "create", "update", "delete", "move", "check":
		op.Path = f[1]
	case "create-index", "drop-index":
		if len(f) != 3 {
			return op, fmt.Errorf("op %q: want KIND ATTR", line)
		}
		op.Kind, op.Attr, rest = f[1], f[2], nil
	}
	switch f[0] {
	case "create":
		op.Type = catalog.OpCreate
		if len(rest) == 0 {
			return op, fmt.Errorf("op %q: create wants a kind", line)
		}
		op.Kind, rest = rest[0], rest[1:]
	case "update":
		op.Type = catalog.OpUpdate
	case "delete":
		op.Type = catalog.OpDelete
	case "move":
		op.Type = catalog.OpMove
		if len(rest) == 0 {
			return op, fmt.Errorf("op %q: move wants a destination", line)
		}
		op.To, rest = rest[0], rest[1:]
	case "check":
		op.Type = catalog.OpCheck
	case "create-index":
		op.Type = catalog.OpCreateIndex
	case "drop-index":
		op.Type = catalog.OpDropIndex
	default:
		return op, fmt.Errorf("op %q: unknown type %q", line, f[0])
	}
	for _, a := range rest {
		k, v, hasValue := strings.Cut(a, "=")
		switch {
		case a == "recursive":
			op.Recursive = true
		case a == "exists":
			op.Cond.Exists = true
		case a == "absent":
			op.Cond.Absent = true
		case k == "modified" || k == "if-modified":
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return op, fmt.Errorf("op %q: %s: %w", line, a, err)
			}
			op.Cond.Modified = n
		case strings.HasPrefix(a, "-"):
			op.Unset = append(op.Unset, a[1:])
		case hasValue:
			if op.Set == nil {
				op.Set = map[string]catalog.Value{}
			}
			op.Set[k] = parseValue(v)
		default:
			return op, fmt.Errorf("op %q: cannot parse %q", line, a)
		}
	}
	return op, nil
}

// parseValue reads an integer, true or false, or else a string.
func parseValue(s string) catalog.Value {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return catalog.Int(n)
	}
	if b, err := strconv.ParseBool(s); err == nil && (s == "true" || s == "false") {
		return catalog.Bool(b)
	}
	return catalog.String(s)
}

// dump writes the subtree at path, depth first, children by name: each
// node's path, id, kind, created and modified indexes, and attributes by
// key.
func dump(b *strings.Builder, tree *catalog.Tree, path string) {
	n, ok := tree.Get(path)
	if !ok {
		fmt.Fprintf(b, "%s: not found\n", path)
		return
	}
	keys := make([]string, 0, len(n.Attrs))
	for k := range n.Attrs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fmt.Fprintf(b, "%s id=%d kind=%q created=%d modified=%d", n.Path, n.ID, n.Kind, n.Created, n.Modified)
	for _, k := range keys {
		fmt.Fprintf(b, " %s=%s", k, n.Attrs[k])
	}
	b.WriteString("\n")
	children := tree.Children(path)
	slices.Sort(children)
	for _, c := range children {
		if path == "/" {
			dump(b, tree, "/"+c)
		} else {
			dump(b, tree, path+"/"+c)
		}
	}
}
