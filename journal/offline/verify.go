package offline

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/internal/consistency"
	"github.com/metatree/metatree/journal/internal/dedupe"
	"github.com/metatree/metatree/journal/internal/envelope"
	"github.com/metatree/metatree/journal/internal/membership"
)

// DigestCheck is what Inspector.VerifyDigests found.
type DigestCheck struct {
	// Marks are the check marks the replay passed; Compared those at which
	// a majority of the voters reported a digest and this dir's state
	// agreed with it.
	Marks, Compared []uint64
	// Window is the dedupe window the replay decided copies of keys by:
	// the cluster's as the image or the dir records it, or the caller's
	// for a dir that records none.
	Window uint64
}

// VerifyDigests checks the dir's state against the digests its log
// recorded, offline, as a member does at the check marks: it replays the
// committed log after imageIndex into sm, which holds the image of that
// index (imageMembership is the image's membership blob, whose dedupe
// window the replay needs), and at every check mark compares sm's digest
// with the one a majority of the dir's voters reported there. At the first
// that differs it returns a *journal.CorruptError (journal.ErrCorrupt)
// naming the mark's index and both digests. A log with no reports (a
// cluster below format version 3, or one compacted past every mark)
// compares nothing; DigestCheck says how much was. The replay decides the
// copies of a key by the cluster's dedupe window, which the image's
// membership and the dir's record; window (journal.Config.DedupeWindow of
// the node that wrote the dir) is used only for a dir of a cluster that
// records none.
func (in *Inspector) VerifyDigests(ctx context.Context, sm interface {
	journal.StateMachine
	journal.Digester
}, imageIndex uint64, imageMembership []byte, window uint64) (DigestCheck, error) {
	var out DigestCheck
	var im *membership.Membership
	if len(imageMembership) > 0 {
		var err error
		if im, err = membership.Decode(imageMembership); err != nil {
			return out, fmt.Errorf("journal: verify digests: image %d: %w", imageIndex, err)
		}
	}
	m, _ := in.membership()
	if m == nil {
		return out, fmt.Errorf("journal: verify digests: %w: the dir records no membership", journal.ErrMalformed)
	}
	out.Window = im.WindowOr(m.WindowOr(window))
	d := dedupe.New(out.Window)
	if im != nil {
		d.Reset(im.Keys)
	}
	voters := slices.Clone(m.Voters)
	first := in.store.TruncIndex + 1
	if imageIndex+1 < first {
		return out, fmt.Errorf("journal: verify digests: %w: the log starts at %d, after the image %d", journal.ErrCompacted, first, imageIndex)
	}
	hi := min(in.store.HardState.GetCommit(), in.store.LastIndex())
	if imageIndex >= hi {
		return out, nil
	}
	var ck consistency.Checker
	next := imageIndex + 1
	errStop := errors.New("stop")
	var found error
	err := in.store.Scan(imageIndex+1, hi, func(index uint64, e *raftpb.Entry, err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if err != nil || index != next {
			return fmt.Errorf("journal: verify digests: %w: the log is not whole at %d", journal.ErrMalformed, next)
		}
		next++
		if e.GetType() != raftpb.EntryNormal || len(e.GetData()) == 0 {
			return nil
		}
		env, err := envelope.Decode(e.GetData())
		if errors.Is(err, journal.ErrUnknownVersion) {
			return &journal.HaltError{Index: index, What: "entry", Version: int(e.GetData()[0]), Err: err}
		}
		if err != nil {
			return nil // skipped by every replica alike
		}
		switch env.Kind {
		case envelope.KindUser:
			_, verdict := d.Judge(index, env)
			switch verdict {
			case dedupe.Duplicate:
				d.Add(index, env.Key, nil)
				return nil
			case dedupe.Expired:
				return nil
			}
			v := sm.Apply(index, env.Data)
			if h, ok := v.(journal.Halter); ok {
				if err := h.Halt(); err != nil {
					return &journal.HaltError{Index: index, What: "state machine entry", Err: err}
				}
			}
			d.Add(index, env.Key, nil)
		case envelope.KindCheck:
			switch env.Check.Op {
			case envelope.CheckMark:
				out.Marks = append(out.Marks, index)
				ck.RecordMark(index, env.Check.Format, slices.Clone(consistency.StateDigest(sm, env.Check.Format)))
			case envelope.CheckReport:
				before := ck.Count()
				ce, _ := ck.Tally(voters, env.Check)
				if ce != nil {
					found = ce
					return errStop
				}
				if ck.Count() > before {
					out.Compared = append(out.Compared, env.Check.Mark)
				}
			}
		}
		return nil
	})
	if found != nil {
		return out, found
	}
	if err != nil {
		return out, err
	}
	return out, nil
}
