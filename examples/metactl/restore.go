package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/metatree/metatree/examples/frontend"
)

// restoreConfig is what `metactl restore` is asked to do.
type restoreConfig struct {
	Image string // the image file
	Dir   string // the data dir to create
	ID    uint64
	Addr  string
	Token string
}

// restoreJSON is `restore`'s output.
type restoreJSON struct {
	Dir       string `json:"dir"`
	ClusterID string `json:"cluster_id"`
	ID        uint64 `json:"id"`
	Addr      string `json:"addr"`
	Index     uint64 `json:"index"`
	Term      uint64 `json:"term"`
	Bytes     int64  `json:"bytes"`
}

// restore makes a data dir from which `metaserver -id N -dir DIR -addr A`
// starts as the only voter of a new cluster holding the image's catalog.
func restore(ctx context.Context, args []string, e env) error {
	fl := flag.NewFlagSet("restore", flag.ContinueOnError)
	var c restoreConfig
	fl.StringVar(&c.Image, "image", "", "the image file (a backup, or image.<index> of a data dir)")
	fl.StringVar(&c.Dir, "dir", "", "the data dir to create: it must not exist or be empty")
	fl.Uint64Var(&c.ID, "id", 0, "the new cluster's first node (the -id metaserver is started with)")
	fl.StringVar(&c.Addr, "addr", "", "that node's HOST:PORT (the -addr metaserver is started with)")
	fl.StringVar(&c.Token, "token", "", "the new cluster's join token (default: none)")
	if _, err := parse(fl, args, 0, "no positional argument"); err != nil {
		return err
	}
	switch {
	case c.Image == "" || c.Dir == "" || c.Addr == "":
		return usageErr("restore needs -image, -dir, -id and -addr")
	case c.ID == 0:
		return usageErr("restore: -id must be a positive integer")
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return usageErr("restore: -addr %q: want HOST:PORT", c.Addr)
	}
	out, err := restoreDir(ctx, e.fs, c, e.stderr)
	if err != nil {
		return err
	}
	return writeJSON(e.stdout, out)
}

// restoreDir makes the data dir (frontend.Restore) and reports it.
func restoreDir(ctx context.Context, fs vfs.FS, c restoreConfig, stderr io.Writer) (restoreJSON, error) {
	r, err := frontend.Restore(ctx, frontend.RestoreConfig{FS: fs, Image: c.Image, Dir: c.Dir, ID: c.ID, Addr: c.Addr, Token: c.Token})
	if err != nil {
		return restoreJSON{}, err
	}
	if r.Leftover != "" {
		fmt.Fprintf(stderr, "metactl: removed %s, left by an interrupted restore\n", r.Leftover)
	}
	return restoreJSON{Dir: c.Dir, ClusterID: r.ClusterID, ID: c.ID, Addr: c.Addr, Index: r.Index, Term: r.Term, Bytes: r.Bytes}, nil
}
