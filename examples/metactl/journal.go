package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/offline"
)

// journalStatusJSON is `journal status`'s output.
type journalStatusJSON struct {
	Dir           string           `json:"dir"`
	ClusterID     string           `json:"cluster_id"`
	NodeID        uint64           `json:"node_id,omitempty"`
	Role          journal.Role     `json:"role"`
	FirstIndex    uint64           `json:"first_index"`
	LastIndex     uint64           `json:"last_index"`
	Term          uint64           `json:"term"`
	Vote          uint64           `json:"vote"`
	Commit        uint64           `json:"commit"`
	SnapshotIndex uint64           `json:"snapshot_index"`
	SnapshotTerm  uint64           `json:"snapshot_term"`
	MembersIndex  uint64           `json:"members_index"`
	Voters        []uint64         `json:"voters"`
	Learners      []uint64         `json:"learners"`
	Members       []journal.Member `json:"members"`
}

func openJournal(e env, dir string) (*offline.Inspector, error) {
	return offline.Inspect(dir, offline.InspectOptions{FS: e.fs})
}

// journalStatus reports a data dir's log and membership.
func journalStatus(args []string, e env) error {
	pos, err := parse(flag.NewFlagSet("journal status", flag.ContinueOnError), args, 1, "one DIR")
	if err != nil {
		return err
	}
	in, err := openJournal(e, pos[0])
	if err != nil {
		return err
	}
	defer in.Close()
	st := in.Status()
	out := journalStatusJSON{
		Dir: pos[0], ClusterID: st.ClusterID, NodeID: st.NodeID, Role: st.Role,
		FirstIndex: st.FirstIndex, LastIndex: st.LastIndex, Term: st.Term, Vote: st.Vote, Commit: st.Commit,
		SnapshotIndex: st.SnapshotIndex, SnapshotTerm: st.SnapshotTerm, MembersIndex: st.MembershipIndex,
		Voters: nonNil(st.Voters), Learners: nonNil(st.Learners), Members: st.Members,
	}
	if out.Members == nil {
		out.Members = []journal.Member{}
	}
	return writeJSON(e.stdout, out)
}

func nonNil(ids []uint64) []uint64 {
	if ids == nil {
		return []uint64{}
	}
	return ids
}

// journalEntries prints the log's entries in [-from, -to] as JSON lines. A
// range missing from the log or an entry that does not decode is printed
// as such (with "error") and makes the exit code 1.
func journalEntries(args []string, e env) error {
	fl := flag.NewFlagSet("journal entries", flag.ContinueOnError)
	from := fl.Uint64("from", 0, "first index (default: the log's first)")
	to := fl.Uint64("to", math.MaxUint64, "last index, included (default: the log's last)")
	pos, err := parse(fl, args, 1, "one DIR")
	if err != nil {
		return err
	}
	if *from > *to {
		return usageErr("journal entries: -from %d is past -to %d", *from, *to)
	}
	in, err := openJournal(e, pos[0])
	if err != nil {
		return err
	}
	defer in.Close()
	bw := bufio.NewWriterSize(e.stdout, 1<<20)
	enc := json.NewEncoder(bw)
	bad := 0
	err = in.Entries(*from, *to, func(ent offline.Entry) error {
		line := describeEntry(ent)
		if line.Error != "" {
			bad++
			fmt.Fprintf(e.stderr, "metactl: %s: entry %d: %s\n", pos[0], ent.Index, line.Error)
		}
		return enc.Encode(line)
	})
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		return fmt.Errorf("journal entries: %s: %w", pos[0], err)
	}
	if bad > 0 {
		return errProblems
	}
	return nil
}

// entryJSON is one line of `journal entries`.
type entryJSON struct {
	Index     uint64              `json:"index"`
	Term      uint64              `json:"term"`
	Type      string              `json:"type"`
	Kind      string              `json:"kind"`
	Key       string              `json:"key,omitempty"`
	Bytes     int                 `json:"bytes,omitempty"`
	Ops       []opJSON            `json:"ops,omitempty"`
	Timestamp string              `json:"timestamp,omitempty"`
	Version   uint32              `json:"cluster_version,omitempty"`
	Change    *offline.ConfChange `json:"change,omitempty"`
	Error     string              `json:"error,omitempty"`
}

// opJSON is one catalog operation of a user entry.
type opJSON struct {
	Op        string                   `json:"op"`
	Path      string                   `json:"path,omitempty"`
	Kind      string                   `json:"kind,omitempty"`
	Set       map[string]catalog.Value `json:"set,omitempty"`
	Unset     []string                 `json:"unset,omitempty"`
	Recursive bool                     `json:"recursive,omitempty"`
	To        string                   `json:"to,omitempty"`
	Attr      string                   `json:"attr,omitempty"`
	IfExists  bool                     `json:"if_exists,omitempty"`
	IfAbsent  bool                     `json:"if_absent,omitempty"`
	IfMod     uint64                   `json:"if_modified,omitempty"`
	IfMatch   map[string]catalog.Value `json:"if_match,omitempty"`
}

// describeEntry decodes an entry for a person: the envelope, the
// idempotency key, the catalog batch's operations, the conf change, the
// leader's timestamp. It never fails: what does not decode is in Error.
func describeEntry(ent offline.Entry) entryJSON {
	out := entryJSON{Index: ent.Index, Term: ent.Term, Type: ent.Type, Kind: ent.Kind, Change: ent.Change}
	if ent.Err != nil {
		out.Error = ent.Err.Error()
	}
	switch ent.Kind {
	case offline.KindUser:
		out.Key = uuid.UUID(ent.Key).String()
		out.Bytes = len(ent.Data)
		b, err := catalog.DecodeBatch(ent.Data)
		if err != nil {
			out.Error = fmt.Errorf("catalog batch: %w", err).Error()
			break
		}
		out.Ops = describeOps(b)
	case offline.KindTimestamp:
		out.Timestamp = time.Unix(0, ent.UnixNano).UTC().Format(time.RFC3339Nano)
	case offline.KindVersion:
		out.Version = ent.Version
	}
	return out
}

func describeOps(b catalog.Batch) []opJSON {
	ops := make([]opJSON, 0, len(b.Ops))
	for _, op := range b.Ops {
		ops = append(ops, opJSON{
			Op: op.Type.String(), Path: op.Path, Kind: op.Kind, Set: op.Set, Unset: op.Unset,
			Recursive: op.Recursive, To: op.To, Attr: op.Attr,
			IfExists: op.Cond.Exists, IfAbsent: op.Cond.Absent, IfMod: op.Cond.Modified, IfMatch: op.Cond.Match,
		})
	}
	return ops
}
