package raftstore

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/metatree/metatree/internal/durable"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// DefaultCacheBytes is the default bound of the in-memory entry cache.
const DefaultCacheBytes = 16 << 20

// Options configures Open.
type Options struct {
	// FS is the filesystem. The default (nil) is vfs.Default, the real disk;
	// tests pass vfs.NewMem() or vfs.NewCrashableMem().
	FS vfs.FS
	// Dir is the Pebble directory (created if missing). Required.
	Dir string
	// Logger receives Pebble's and the store's log lines. The default (nil)
	// discards them.
	Logger *slog.Logger
	// CacheBytes bounds the cache of recently appended entries that raft
	// reads back to replicate and apply, in bytes of entry data. The default
	// (0) is DefaultCacheBytes; a negative value disables the cache.
	CacheBytes int64
}

// Store is the Pebble-backed raft log and hard state of one node. It is
// safe for concurrent use; writes are serialised, reads run concurrently
// with each other and with writes.
type Store struct {
	db    *pebble.DB
	dir   string
	log   *slog.Logger
	halt  *halt // the first storage failure; set, the store refuses writes
	syncs atomic.Uint64

	// writeMu serialises writers (Append, SetSnapshot, Compact, Close), so
	// each builds its batch against a view no one else changes meanwhile.
	// SaveMembership writes a key outside that view and does not take it.
	writeMu sync.Mutex

	// readers counts reads (and SaveMembership's writes) in flight on db
	// outside mu; Close waits for them. Add happens only under mu.RLock with
	// closed false.
	readers sync.WaitGroup

	mu struct {
		sync.RWMutex // protects the fields below, the view raft reads
		closed       bool
		hs           *raftpb.HardState
		snap         *raftpb.Snapshot // never nil; index 0 = none
		trunc        truncState
		last         uint64 // last index; trunc.index when the log is empty
		cache        entryCache
	}
}

// Open opens (or creates) the store in opts.Dir and checks its restart
// invariants: trunc <= snapshot <= HardState.Commit <= last index, and the
// log starts right after trunc. A store that breaks one is refused with an
// error wrapping ErrCorrupt.
func Open(opts Options) (*Store, error) {
	if opts.Dir == "" {
		return nil, errors.New("raftstore: Options.Dir is required")
	}
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.CacheBytes == 0 {
		opts.CacheBytes = DefaultCacheBytes
	}
	if err := durable.MkdirAll(opts.FS, opts.Dir); err != nil {
		return nil, fmt.Errorf("raftstore: create %s: %w", opts.Dir, err)
	}
	h := newHalt()
	popts := pebbleOptions(opts, h)
	db, err := pebble.Open(opts.Dir, popts)
	popts.Cache.Unref() // the DB holds its own reference
	if err != nil {
		var ioErr *IOError
		if errors.As(h.check(), &ioErr) && errors.Is(err, ioErr.Err) {
			err = ioErr // names the operation and the file
		}
		return nil, fmt.Errorf("raftstore: open pebble in %s: %w", opts.Dir, err)
	}
	h.live.Store(true)
	s := &Store{db: db, dir: opts.Dir, log: opts.Logger, halt: h}
	s.mu.cache.limit = opts.CacheBytes
	if err := s.load(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("raftstore: open %s: %w", opts.Dir, err)
	}
	return s, nil
}

// memTableSize returns 24 to 40 MiB, drawn at random per store (32 MiB on
// average). Replicas fill their memtables with the same entries: of one
// size, they would flush together, and a flush takes CPU and disk from the
// appends. Drawn apart, the followers' flushes mostly fall at different
// times, so a quorum keeps appending at full speed through most of them
// (BenchmarkPropose/proposers=64's p99-ms).
func memTableSize() uint64 { return 24<<20 + uint64(rand.N(17))<<20 }

// pebbleOptions tunes Pebble for a raft log: sequential appends, reads of
// recent entries, whole ranges deleted behind images.
func pebbleOptions(opts Options, h *halt) *pebble.Options {
	o := &pebble.Options{
		FS:     haltFS{FS: opts.FS, h: h},
		Logger: pebbleLogger{l: opts.Logger, h: h},
		EventListener: &pebble.EventListener{
			// A flush or compaction that failed on the disk has halted the
			// store already (haltFS); Pebble retries it in the background.
			BackgroundError: func(err error) {
				opts.Logger.Error("pebble background error", "component", "pebble", "err", err)
			},
			// Once halted, haltFS parks Pebble's calls that would change
			// the disk, which the disk-health check reports as slowness.
			DiskSlow: func(info pebble.DiskSlowInfo) {
				if h.check() == nil {
					opts.Logger.Warn("pebble: disk slow", "component", "pebble", "info", info.String())
				}
			},
		},
		// Recent entries are served from the entry cache or the memtable;
		// the block cache only helps replay and slow followers.
		Cache: pebble.NewCache(8 << 20),
		// A log is written once, read back soon, then deleted by range: a
		// larger memtable means fewer flushes, and most entries die (range
		// deleted after an image) before they reach L1. Its size varies
		// by store (memTableSize), so that replicas, which append the same
		// entries, do not all flush at once.
		MemTableSize:                memTableSize(),
		MemTableStopWritesThreshold: 4,
		// The WAL fsync on each synced commit is the durability; background
		// WAL syncing would only add I/O. Smooth sstable writes from flushes
		// and compactions so they do not stall that fsync.
		WALBytesPerSync:    0,
		BytesPerSync:       1 << 20,
		FormatMajorVersion: pebble.FormatNewest,
	}
	// Entries are opaque and usually compact already; compressing them costs
	// CPU on the flush path for little space.
	o.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionNone })
	// A log is read sequentially (replay, catch-up): larger blocks mean
	// fewer reads and block-cache lookups per entry.
	for i := range o.Levels {
		o.Levels[i].BlockSize = 32 << 10
	}
	// Pebble sizes a table by the bytes its keys reference in blob files
	// too, so L0's default 2 MB target would cut each flush into a dozen
	// tables of a few hundred KB of keys, each created, synced and
	// recorded on its own, for the next compaction to merge again. L0's
	// target is above the largest memtable, so a flush writes one table;
	// the levels below keep Pebble's default targets, so a compaction
	// rewrites only the few tables its new entries overlap (the log's
	// tail, where the m/ keys sort), never one table of the whole log.
	// The base level stays L6 until the log, values counted, passes
	// LBaseMaxBytes; the default 64 MB would put L5 between them for a
	// log of a few hundred thousand entries, and rewrite each key and
	// handle twice. BenchmarkPropose's CPU profiles (-propose.cpuprofile)
	// measure the flushes' and compactions' share.
	o.TargetFileSizes[0] = 64 << 20
	for i := 1; i < len(o.TargetFileSizes); i++ {
		o.TargetFileSizes[i] = (2 << 20) << i
	}
	o.LBaseMaxBytes = 1 << 30
	// No bloom filters (the default): every Get is for a key that exists.
	// Entries go to blob files when their memtable is flushed; sstables
	// keep the keys and a handle each. A log is never updated and is
	// deleted in index order, so a blob file dies whole once the log is
	// compacted past it, and compactions, which otherwise rewrite every
	// entry from L0 into the lower levels while the log grows between
	// images, copy only keys and handles (the compaction CPU and I/O
	// beside the WAL's fsync: BenchmarkPropose's cpu-us/op and
	// leader-fsync-p99-ms). Values below MinimumSize stay in the sstable:
	// a handle would save them little. A blob file that still holds an
	// entry the log keeps stays whole until the log is compacted past it;
	// the rewrite of a partly dead one (over TargetGarbageRatio, past
	// RewriteMinimumAge) only bounds that when images stop.
	o.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy {
		return pebble.ValueSeparationPolicy{
			Enabled:               true,
			MinimumSize:           64,
			MaxBlobReferenceDepth: 10,
			RewriteMinimumAge:     5 * time.Minute,
			TargetGarbageRatio:    0.2,
		}
	}
	return o
}

// load reads the metadata and establishes the in-memory view.
func (s *Store) load() error {
	format, err := s.get(keyFormat)
	if err != nil {
		return err
	}
	if format == nil {
		empty, err := s.isEmpty()
		if err != nil {
			return err
		}
		if !empty {
			return fmt.Errorf("%w: keys present but no m/fmt (not a raftstore?)", ErrCorrupt)
		}
		if err := s.set(keyFormat, []byte{formatVersion}, pebble.Sync); err != nil {
			return fmt.Errorf("write m/fmt: %w", err)
		}
		s.syncs.Add(1)
	} else if err := decodeFormat(format); err != nil {
		return err
	}

	hs := &raftpb.HardState{}
	if v, err := s.get(keyHardState); err != nil {
		return err
	} else if v != nil {
		if hs, err = decodeHardState(v); err != nil {
			return err
		}
	}
	snap := &raftpb.Snapshot{}
	if v, err := s.get(keySnapshot); err != nil {
		return err
	} else if v != nil {
		if snap, err = decodeSnapshot(v); err != nil {
			return err
		}
	}
	var trunc truncState
	if v, err := s.get(keyTrunc); err != nil {
		return err
	} else if v != nil {
		if trunc, err = decodeTrunc(v); err != nil {
			return err
		}
	}
	first, last, ok, err := s.logBounds()
	if err != nil {
		return err
	}
	lastIndex := trunc.index
	if ok {
		if first != trunc.index+1 {
			return fmt.Errorf("%w: log starts at %d but truncation is at %d", ErrCorrupt, first, trunc.index)
		}
		// A gap inside the log is not searched for here (that would read
		// the whole log); a read that meets one fails with ErrCorrupt.
		lastIndex = last
	}
	snapIndex := snap.GetMetadata().GetIndex()
	switch {
	case trunc.index > snapIndex:
		return fmt.Errorf("%w: truncation index %d is past the snapshot index %d", ErrCorrupt, trunc.index, snapIndex)
	case snapIndex > hs.GetCommit():
		return fmt.Errorf("%w: snapshot index %d is past the durable commit %d", ErrCorrupt, snapIndex, hs.GetCommit())
	case hs.GetCommit() > lastIndex:
		return fmt.Errorf("%w: durable commit %d is past the last entry %d (HardState ahead of entries)", ErrCorrupt, hs.GetCommit(), lastIndex)
	case snapIndex == trunc.index && snapIndex != 0 && snap.GetMetadata().GetTerm() != trunc.term:
		return fmt.Errorf("%w: snapshot term %d at index %d differs from the truncation term %d", ErrCorrupt, snap.GetMetadata().GetTerm(), snapIndex, trunc.term)
	}
	s.mu.hs = hs
	s.mu.snap = snap
	s.mu.trunc = trunc
	s.mu.last = lastIndex
	s.mu.cache.reset(lastIndex + 1)
	s.log.Debug("raftstore opened", "first", trunc.index+1, "last", lastIndex,
		"commit", hs.GetCommit(), "snapshot", snapIndex)
	return nil
}

// get returns a copy of the value at key, or nil if there is none.
func (s *Store) get(key []byte) ([]byte, error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	defer closer.Close()
	return append([]byte{}, v...), nil
}

func (s *Store) isEmpty() (bool, error) {
	it, err := s.db.NewIter(nil)
	if err != nil {
		return false, err
	}
	empty := !it.First()
	if err := it.Close(); err != nil {
		return false, err
	}
	return empty, nil
}

// logBounds returns the first and last stored entry index.
func (s *Store) logBounds() (first, last uint64, ok bool, err error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: logPrefix, UpperBound: logEnd})
	if err != nil {
		return 0, 0, false, err
	}
	defer it.Close()
	if !it.First() {
		return 0, 0, false, it.Error()
	}
	if first, err = decodeIndexKey(logPrefix, it.Key()); err != nil {
		return 0, 0, false, err
	}
	if !it.Last() {
		return 0, 0, false, it.Error()
	}
	if last, err = decodeIndexKey(logPrefix, it.Key()); err != nil {
		return 0, 0, false, err
	}
	return first, last, true, it.Error()
}

// Close closes the store, waiting for reads in flight. It is idempotent.
func (s *Store) Close() error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.closed = true
	s.mu.cache.reset(0)
	s.mu.Unlock()
	s.readers.Wait()
	s.halt.close() // Pebble's calls parked by a halt fail, so its Close can finish
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("raftstore: close: %w", err)
	}
	return nil
}

// Halted returns the storage failure that halted the store (wrapping
// ErrHalted), or nil.
func (s *Store) Halted() error { return s.halt.check() }

// Halt halts the store for a failure the host saw on the same disk (an
// image write): it refuses every write from then on, as after a failure
// of its own.
func (s *Store) Halt(cause error) { s.halt.record(cause) }

// HaltedCh returns a channel closed when the store halts.
func (s *Store) HaltedCh() <-chan struct{} { return s.halt.done }

// halted returns the halt error if the store halted while the write that
// returned err ran, and err otherwise.
func (s *Store) halted(err error) error {
	if h := s.halt.check(); h != nil {
		return h
	}
	return err
}

// Syncs returns the number of fsynced commits so far (for syncs/op).
func (s *Store) Syncs() uint64 { return s.syncs.Load() }

// HardState returns a copy of the durable HardState.
func (s *Store) HardState() *raftpb.HardState {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return proto.Clone(s.mu.hs).(*raftpb.HardState)
}

// set writes one key as commit writes a batch: refused once halted, and
// failed if the store halted while Pebble wrote it.
func (s *Store) set(key, value []byte, opts *pebble.WriteOptions) error {
	if err := s.halt.check(); err != nil {
		return err
	}
	if err := s.db.Set(key, value, opts); err != nil {
		return s.halted(err)
	}
	return s.halt.check()
}

// commit commits b (syncing if sync) and counts the sync.
func (s *Store) commit(b *pebble.Batch, sync bool) error {
	opts := pebble.NoSync
	if sync {
		opts = pebble.Sync
	}
	if err := s.halt.check(); err != nil {
		return err
	}
	if err := b.Commit(opts); err != nil {
		return s.halted(err)
	}
	// Pebble returns nil from a commit whose WAL write or fsync failed
	// (after calling Fatalf, which halted the store): the halt, not the
	// nil, is the answer.
	if err := s.halt.check(); err != nil {
		return err
	}
	if sync {
		s.syncs.Add(1)
	}
	return nil
}
