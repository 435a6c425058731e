package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/image"
)

// imageStatusJSON is `image status`'s output.
type imageStatusJSON struct {
	File      string `json:"file"`
	Index     uint64 `json:"index"`
	Term      uint64 `json:"term"`
	ClusterID string `json:"cluster_id"`
	Format    uint16 `json:"format"`
	// Nodes counts the catalog's nodes, the root excluded (as dump lists
	// them).
	Nodes      int    `json:"nodes"`
	Bytes      int64  `json:"bytes"`
	ChecksumOK bool   `json:"checksum_ok"`
	CRC32C     string `json:"crc32c"`
}

// imageStatus reports an image file, or the newest valid image of a data
// dir. The whole file is read: the checksum is verified and the catalog
// decoded (to count its nodes).
func imageStatus(args []string, e env) error {
	pos, err := parse(flag.NewFlagSet("image status", flag.ContinueOnError), args, 1, "one FILE or DIR")
	if err != nil {
		return err
	}
	path := pos[0]
	st, err := e.fs.Stat(path)
	if err != nil {
		return fmt.Errorf("image status: %w", err)
	}
	if !st.IsDir() {
		out, err := statusOf(e.fs, path)
		if err != nil {
			if out.File != "" {
				writeJSON(e.stdout, out)
			}
			return err
		}
		return writeJSON(e.stdout, out)
	}
	l, err := image.ListDir(e.fs, path)
	if err != nil {
		return err
	}
	if len(l.Images) == 0 {
		return fmt.Errorf("image status: %s holds no image", l.Dir)
	}
	var failures []error
	for _, idx := range l.Images {
		out, err := statusOf(e.fs, l.Path(e.fs, idx))
		if err == nil {
			for _, f := range failures {
				fmt.Fprintf(e.stderr, "metactl: skipped: %v\n", f)
			}
			return writeJSON(e.stdout, out)
		}
		failures = append(failures, err)
	}
	return fmt.Errorf("image status: no valid image in %s: %w", l.Dir, errors.Join(failures...))
}

// statusOf reads and checks one image file. A file whose header decodes
// but whose body or checksum does not gets an output with ChecksumOK false
// and an error.
func statusOf(fs vfs.FS, path string) (imageStatusJSON, error) {
	hdr, err := image.ReadHeader(fs, path)
	if err != nil {
		return imageStatusJSON{}, err
	}
	out := imageStatusJSON{
		File: path, Index: hdr.Index, Term: hdr.Term, ClusterID: hdr.ClusterID, Format: hdr.Version,
		Bytes: hdr.Size, CRC32C: fmt.Sprintf("%08x", hdr.CRC),
	}
	tree := catalog.New()
	if _, err := image.ReadFile(fs, path, func(r io.Reader) error { return tree.Load(r) }); err != nil {
		return out, err
	}
	out.ChecksumOK = true
	out.Nodes = tree.Len() - 1
	return out, nil
}

// imageVerify checks an image file whole: exit 0 when it is intact, 1 and
// the reason when not. It checks the container (header, trailer, CRC32C)
// and that the catalog body decodes.
func imageVerify(args []string, e env) error {
	pos, err := parse(flag.NewFlagSet("image verify", flag.ContinueOnError), args, 1, "one FILE")
	if err != nil {
		return err
	}
	if _, err := statusOf(e.fs, pos[0]); err != nil {
		return err
	}
	return nil
}

// dumpNode is one line of `image dump`.
type dumpNode struct {
	Path     string                   `json:"path"`
	Kind     string                   `json:"kind"`
	Attrs    map[string]catalog.Value `json:"attrs"`
	Created  uint64                   `json:"created"`
	Modified uint64                   `json:"modified"`
}

// imageDump lists every node of an image but the root, sorted by path
// string, as JSON lines. Nothing is printed unless the whole file checks
// out: the dump is of a verified image or of none.
func imageDump(args []string, e env) error {
	pos, err := parse(flag.NewFlagSet("image dump", flag.ContinueOnError), args, 1, "one FILE")
	if err != nil {
		return err
	}
	tree := catalog.New()
	if _, err := image.ReadFile(e.fs, pos[0], func(r io.Reader) error { return tree.Load(r) }); err != nil {
		return err
	}
	return dumpTree(tree, e.stdout)
}

// dumpTree writes the tree's nodes, the root excluded, sorted by path.
func dumpTree(tree *catalog.Tree, w io.Writer) error {
	var nodes []dumpNode
	tree.Read(func(r catalog.Reader) {
		nodes = make([]dumpNode, 0, r.Len())
		for v := range r.Root().Subtree() {
			if v.ID() == r.Root().ID() {
				continue
			}
			n := dumpNode{Path: v.Path(), Kind: v.Kind(), Attrs: map[string]catalog.Value{}, Created: v.Created(), Modified: v.Modified()}
			for k, val := range v.Attrs() {
				n.Attrs[k] = val
			}
			nodes = append(nodes, n)
		}
	})
	slices.SortFunc(nodes, func(a, b dumpNode) int { return strings.Compare(a.Path, b.Path) })
	bw := bufio.NewWriterSize(w, 1<<20)
	enc := json.NewEncoder(bw)
	for _, n := range nodes {
		if err := enc.Encode(n); err != nil {
			return fmt.Errorf("image dump: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("image dump: %w", err)
	}
	return nil
}

// writeJSON writes v as one JSON object and a newline.
func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}
