package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/metatree/metatree/image"
	"github.com/metatree/metatree/journal/offline"
)

// checkJSON is `check`'s output; each problem is also a line on stderr.
type checkJSON struct {
	Dir      string      `json:"dir"`
	OK       bool        `json:"ok"`
	Problems []string    `json:"problems"`
	Digests  *digestJSON `json:"digests,omitempty"`
}

// check verifies every property of a data dir that can be verified
// offline: the journal's (offline.Inspector.Problems: VERSION, ROLE and
// MEMBERS agree, the log is contiguous from its truncation point, the
// HardState commit is within it, …), the images' (dirProblems), and the
// catalog's against the digests the log recorded (checkDigests).
func check(ctx context.Context, args []string, e env) error {
	fl := flag.NewFlagSet("check", flag.ContinueOnError)
	window := fl.Uint64("dedupe-window", 10_000, "the dedupe window to replay with when the dir's cluster records none (bootstrapped by an older version; the node's min(-compact-margin, 10000)); a dir that records its cluster's window is replayed with that one")
	pos, err := parse(fl, args, 1, "one DIR")
	if err != nil {
		return err
	}
	dir := pos[0]
	problems := checkDir(e.fs, dir)
	var digests *digestJSON
	if len(problems) == 0 {
		var err error
		if digests, err = checkDigests(ctx, e.fs, dir, *window); err != nil {
			problems = append(problems, err)
		}
	}
	out := checkJSON{Dir: dir, OK: len(problems) == 0, Problems: []string{}, Digests: digests}
	for _, p := range problems {
		out.Problems = append(out.Problems, p.Error())
		fmt.Fprintln(e.stderr, p)
	}
	if err := writeJSON(e.stdout, out); err != nil {
		return err
	}
	if len(problems) > 0 {
		return errProblems
	}
	return nil
}

// checkDir returns every problem found in the data dir.
func checkDir(fs vfs.FS, dir string) []error {
	in, err := offline.Inspect(dir, offline.InspectOptions{FS: fs})
	if err != nil {
		return []error{err}
	}
	defer in.Close()
	problems := in.Problems()
	return append(problems, imageProblems(fs, dir, in.Status())...)
}

// imageProblems checks the image directory against the journal: every
// image.<index> reads back whole (header, checksum, catalog body), names
// its own index and the dir's cluster; an image that startup can load
// covers the log's start and is not past its end; no unfinished file is
// left.
func imageProblems(fs vfs.FS, dir string, st offline.DirStatus) []error {
	l, err := image.ListDir(fs, dir)
	if err != nil {
		return []error{err}
	}
	var problems []error
	for _, t := range l.Temps {
		problems = append(problems, fmt.Errorf("image: leftover temporary file %s (an interrupted checkpoint or download; the next startup removes it)", fs.PathJoin(l.Dir, t)))
	}
	var usable []uint64 // valid images startup could load, newest first
	for _, idx := range l.Images {
		path := l.Path(fs, idx)
		out, err := statusOf(fs, path)
		switch {
		case err != nil:
			problems = append(problems, err)
		case out.Index != idx:
			problems = append(problems, fmt.Errorf("image: %s holds the image of index %d, not %d", path, out.Index, idx))
		case st.ClusterID != "" && out.ClusterID != st.ClusterID:
			problems = append(problems, fmt.Errorf("image: %s belongs to cluster %s, the data dir to %s", path, out.ClusterID, st.ClusterID))
		default:
			usable = append(usable, idx)
		}
	}
	minIndex := st.FirstIndex - 1
	var covering []uint64
	for _, idx := range usable {
		if idx >= minIndex {
			covering = append(covering, idx)
		}
	}
	switch {
	case minIndex > 0 && len(covering) == 0:
		problems = append(problems, fmt.Errorf("journal: %s: the log starts at %d but no valid image at or after index %d covers the entries before it (images: %v)",
			dir, st.FirstIndex, minIndex, l.Images))
	case len(covering) > 0 && covering[0] > st.LastIndex:
		problems = append(problems, fmt.Errorf("image: %s is past the log's last entry %d: the log lost entries the image holds",
			l.Path(fs, covering[0]), st.LastIndex))
	}
	return problems
}
