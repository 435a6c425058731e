package lint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/constant"
	"go/format"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/metatree/metatree"

// moduleRoot is the directory of the module's go.mod, above this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module "+module+"\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod of module %s above the lint package", module)
		}
		dir = parent
	}
}

// goFiles lists the .go files git tracks under root (nested modules such as
// examples/compare included), relative to root. Without git, or outside a
// checkout, it walks the tree instead, skipping testdata and hidden dirs.
func goFiles(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z", "--", "*.go")
	cmd.Dir = root
	if out, err := cmd.Output(); err == nil {
		var files []string
		for _, f := range strings.Split(string(out), "\x00") {
			if f != "" {
				files = append(files, filepath.FromSlash(f))
			}
		}
		return files
	}
	var files []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestGofmt checks that every tracked .go file is formatted as gofmt
// formats it.
func TestGofmt(t *testing.T) {
	root := moduleRoot(t)
	files := goFiles(t, root)
	if len(files) == 0 {
		t.Fatal("found no .go files")
	}
	for _, f := range files {
		src, err := os.ReadFile(filepath.Join(root, f))
		if errors.Is(err, os.ErrNotExist) {
			continue // tracked but deleted in the working tree
		}
		if err != nil {
			t.Fatal(err)
		}
		formatted, err := format.Source(src)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if !bytes.Equal(src, formatted) {
			t.Errorf("%s is not gofmt-clean: run gofmt -w %s", f, f)
		}
	}
}

// listedPackage is the part of `go list -json` output the check uses.
type listedPackage struct {
	ImportPath string
	Dir        string
	Name       string
	ForTest    string
	Export     string
	GoFiles    []string
	ImportMap  map[string]string
	Module     *struct{ Path string }
}

// listPackages runs `go list -export -deps -test` on the module: every
// package it builds, test variants included, with the export data the type
// checker imports them from.
func listPackages(t *testing.T, root string) []listedPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-export", "-deps", "-test", "-json=ImportPath,Dir,Name,ForTest,Export,GoFiles,ImportMap,Module", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// TestErrorfWrapsErrors type-checks every package of the module, its tests
// included, and reports each fmt.Errorf that formats an error value with %v
// or %s: the message keeps the text, but errors.Is and errors.As no longer
// find the cause. Such a cause is wrapped with %w (several %w in one call
// are fine).
func TestErrorfWrapsErrors(t *testing.T) {
	root := moduleRoot(t)
	pkgs := listPackages(t, root)
	export := make(map[string]string, len(pkgs))
	hasTestVariant := make(map[string]bool)
	for _, p := range pkgs {
		export[p.ImportPath] = p.Export
		if p.ForTest != "" && p.Name != "main" {
			hasTestVariant[p.ForTest] = true
		}
	}
	checked := 0
	for _, p := range pkgs {
		if p.Module == nil || p.Module.Path != module || strings.HasSuffix(p.ImportPath, ".test") {
			continue
		}
		if p.ForTest == "" && hasTestVariant[p.ImportPath] {
			continue // its test variant holds the same files and the tests
		}
		for _, finding := range checkPackage(t, root, p, export) {
			t.Error(finding)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("checked no packages")
	}
}

// checkPackage type-checks one listed package from source, importing its
// dependencies from their export data, and returns its findings.
func checkPackage(t *testing.T, root string, p listedPackage, export map[string]string) []string {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("%s: %v", p.ImportPath, err)
		}
		files = append(files, f)
	}
	lookup := func(path string) (io.ReadCloser, error) {
		if mapped, ok := p.ImportMap[path]; ok {
			path = mapped
		}
		file := export[path]
		if file == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	}
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", lookup)}
	if _, err := conf.Check(p.ImportPath, fset, files, info); err != nil {
		t.Fatalf("type-check %s: %v", p.ImportPath, err)
	}
	var findings []string
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || !isFmtErrorf(info, call.Fun) || len(call.Args) == 0 || call.Ellipsis.IsValid() {
				return true
			}
			tv := info.Types[call.Args[0]]
			if tv.Value == nil || tv.Value.Kind() != constant.String {
				return true // a format built at run time: nothing to check
			}
			for _, v := range formatVerbs(constant.StringVal(tv.Value)) {
				if v.verb != 'v' && v.verb != 's' {
					continue
				}
				arg := 1 + v.arg
				if arg >= len(call.Args) {
					continue // go vet reports missing arguments
				}
				if typ := info.Types[call.Args[arg]].Type; typ != nil && isError(typ) {
					pos := fset.Position(call.Args[arg].Pos())
					rel, err := filepath.Rel(root, pos.Filename)
					if err != nil {
						rel = pos.Filename
					}
					findings = append(findings, fmt.Sprintf("%s:%d: fmt.Errorf formats the error %s with %%%c: wrap it with %%w", rel, pos.Line, types.ExprString(call.Args[arg]), v.verb))
				}
			}
			return true
		})
	}
	return findings
}

// isFmtErrorf reports whether fun names fmt.Errorf.
func isFmtErrorf(info *types.Info, fun ast.Expr) bool {
	var id *ast.Ident
	switch e := fun.(type) {
	case *ast.SelectorExpr:
		id = e.Sel
	case *ast.Ident:
		id = e
	default:
		return false
	}
	fn, ok := info.Uses[id].(*types.Func)
	return ok && fn.Pkg() != nil && fn.Pkg().Path() == "fmt" && fn.Name() == "Errorf"
}

var errorType = types.Universe.Lookup("error").Type().Underlying().(*types.Interface)

// isError reports whether a value of type t is an error.
func isError(t types.Type) bool {
	if _, ok := t.(*types.TypeParam); ok {
		return false
	}
	return types.Implements(t, errorType)
}

// verb is one formatting directive: its letter and the index of the
// argument it formats, counted from the first argument after the format.
type verb struct {
	verb rune
	arg  int
}

// formatVerbs parses a fmt format string as fmt does: flags, width and
// precision (a * takes an argument), explicit argument indexes [n], and %%.
func formatVerbs(format string) []verb {
	var verbs []verb
	arg := 0
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		i++
		// Flags, width, precision and argument indexes, in any order fmt
		// accepts them.
	directive:
		for ; i < len(format); i++ {
			switch c := format[i]; {
			case strings.IndexByte("+-# 0.", c) >= 0 || ('0' <= c && c <= '9'):
			case c == '*':
				arg++
			case c == '[':
				end := strings.IndexByte(format[i:], ']')
				if end < 0 {
					return verbs
				}
				var n int
				if _, err := fmt.Sscanf(format[i+1:i+end], "%d", &n); err == nil && n > 0 {
					arg = n - 1
				}
				i += end
			default:
				break directive
			}
		}
		if i >= len(format) {
			break
		}
		if format[i] == '%' {
			continue
		}
		verbs = append(verbs, verb{verb: rune(format[i]), arg: arg})
		arg++
	}
	return verbs
}

func TestFormatVerbs(t *testing.T) {
	for _, tc := range []struct {
		format string
		want   []verb
	}{
		{"plain", nil},
		{"100%% of %v", []verb{{'v', 0}}},
		{"%w: %d %v", []verb{{'w', 0}, {'d', 1}, {'v', 2}}},
		{"%*d %-8.3s %v", []verb{{'d', 1}, {'s', 2}, {'v', 3}}},
		{"%[2]v %[1]s %v", []verb{{'v', 1}, {'s', 0}, {'v', 1}}},
		{"%+v%#v%x", []verb{{'v', 0}, {'v', 1}, {'x', 2}}},
		{"trailing %", nil},
	} {
		got := formatVerbs(tc.format)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("formatVerbs(%q) = %v, want %v", tc.format, got, tc.want)
		}
	}
}

// clockFuncs are the functions of package time that read or wait on the
// wall clock: the journal calls them through its injected Clock instead,
// so that tests drive its time.
var clockFuncs = map[string]bool{
	"Now": true, "Since": true, "Until": true, "Sleep": true, "Tick": true,
	"After": true, "AfterFunc": true, "NewTimer": true, "NewTicker": true,
}

// TestJournalTimeThroughClock reports every call of a clockFuncs function
// in the journal's non-test files (journal/ and journal/internal/;
// journaltest is a test harness).
func TestJournalTimeThroughClock(t *testing.T) {
	root := moduleRoot(t)
	checked := 0
	for _, f := range goFiles(t, root) {
		slash := filepath.ToSlash(f)
		if !strings.HasPrefix(slash, "journal/") || strings.HasSuffix(slash, "_test.go") ||
			strings.HasPrefix(slash, "journal/journaltest/") || strings.Contains(slash, "/testdata/") {
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, f))
		if errors.Is(err, os.ErrNotExist) {
			continue // tracked but deleted in the working tree
		}
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, finding := range wallClockCalls(t, f, src) {
			t.Errorf("%s: use the injected Clock (Config.Clock, HTTPOptions.Clock)", finding)
		}
	}
	if checked == 0 {
		t.Fatal("found no journal files to check")
	}
}

// wallClockCalls returns the position and name of each call of a
// clockFuncs function of package time in the file src.
func wallClockCalls(t *testing.T, name string, src []byte) []string {
	t.Helper()
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	timeNames := map[string]bool{}
	for _, imp := range file.Imports {
		if imp.Path.Value == `"time"` {
			if imp.Name != nil {
				timeNames[imp.Name.Name] = true
			} else {
				timeNames["time"] = true
			}
		}
	}
	if len(timeNames) == 0 {
		return nil
	}
	var found []string
	ast.Inspect(file, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		// id.Obj is set for a local name (a variable called time): the
		// parser resolves those, not package names.
		if id, ok := sel.X.(*ast.Ident); ok && timeNames[id.Name] && id.Obj == nil && clockFuncs[sel.Sel.Name] {
			found = append(found, fmt.Sprintf("%s: time.%s", fset.Position(sel.Pos()), sel.Sel.Name))
		}
		return true
	})
	return found
}

func TestWallClockCalls(t *testing.T) {
	src := []byte(`package p

import (
	"time"
	tm "time"
)

func f(c interface{ Now() time.Time }) {
	_ = time.Now()
	_ = tm.Since(c.Now())
	_ = time.Duration(1) * time.Second
	go func() { <-time.After(time.Second) }()
	time := c
	_ = time.Now()
}
`)
	got := wallClockCalls(t, "p.go", src)
	want := []string{"p.go:9:6: time.Now", "p.go:10:6: time.Since", "p.go:12:16: time.After"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
