package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/image"
	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/offline"
)

// digestJSON is what `check` found comparing the dir's catalog with the
// digests its log recorded.
type digestJSON struct {
	// Image is the index of the image the catalog was loaded from (0:
	// none, the log replayed from its start).
	Image uint64 `json:"image"`
	// Marks counts the check marks after the image; Compared those at
	// which a majority of the voters reported a digest the catalog agreed
	// with.
	Marks    int `json:"marks"`
	Compared int `json:"compared"`
}

// checkDigests loads the dir's catalog as a restart would (its newest
// image that covers the log's start, then the committed log after it) and
// compares its digest at every check mark of the log with the one a
// majority of the voters reported there. A disagreement is an error
// naming the index and both digests.
func checkDigests(ctx context.Context, fs vfs.FS, dir string, window uint64) (*digestJSON, error) {
	in, err := offline.Inspect(dir, offline.InspectOptions{FS: fs})
	if err != nil {
		return nil, err
	}
	defer in.Close()
	st := in.Status()
	l, err := image.ListDir(fs, dir)
	if err != nil {
		return nil, err
	}
	tree := catalog.New()
	out := &digestJSON{}
	var membership []byte
	for _, idx := range l.Images { // newest first
		if idx+1 < st.FirstIndex || idx > st.LastIndex {
			continue
		}
		info, err := image.ReadFile(fs, l.Path(fs, idx), func(r io.Reader) error { return tree.Load(r) })
		if err != nil {
			continue // imageProblems names it
		}
		out.Image, membership = idx, info.Membership
		break
	}
	res, err := in.VerifyDigests(ctx, tree, out.Image, membership, window)
	out.Marks, out.Compared = len(res.Marks), len(res.Compared)
	var ce *journal.CorruptError
	if errors.As(err, &ce) {
		return out, fmt.Errorf("digest: %s: at the check mark at index %d the catalog (image %d and the log after it) has digest %s (format %d), and voters %v recorded %s: %w",
			dir, ce.Index, out.Image, hex.EncodeToString(ce.Local), ce.Format, ce.Agreeing, hex.EncodeToString(ce.Majority), journal.ErrCorrupt)
	}
	if err != nil {
		return out, fmt.Errorf("digest: %s: %w", dir, err)
	}
	return out, nil
}
