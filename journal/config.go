package journal

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/metatree/metatree/internal/clock"
	"github.com/metatree/metatree/internal/operr"
	"github.com/metatree/metatree/journal/internal/dedupe"
	"github.com/metatree/metatree/journal/internal/rafthttp"
)

// StateMachine is what the journal replays the log into (the catalog in
// metatree).
//
// Threading contract: Apply is called from one goroutine owned by the
// journal, strictly in log order, once per user entry (an entry whose
// idempotency key was applied recently is skipped, not applied twice). It
// must be deterministic: the same entries give the same state on every
// replica. It must not call back into the Journal's blocking methods
// (Propose, WaitApplied, ReadBarrier), which wait for Apply itself.
type StateMachine interface {
	// Apply applies the user entry committed at index; the value goes to
	// the local proposer waiting on that index. A value that is a Halter
	// with a non-nil Halt means the entry could not be read at all (an
	// unknown format): the applier stops there (see HaltError).
	Apply(index uint64, data []byte) any
}

// ProposalChecker is implemented by a StateMachine that can tell, without
// applying it, whether data is an entry it reads (catalog.Tree does). The
// journal then checks every proposal before it enters the log: Propose on
// the proposing node, and the leader again for a proposal another node
// forwarded to it (in raft's message stream or through HandleForward).
// Data it refuses never reaches the log: Propose fails with
// ErrInvalidProposal wrapping the checker's error, and a leader drops a
// forwarded copy. Without the check, bytes of no known format would be
// committed and halt the applier of every replica that meets them.
//
// CheckProposal runs on the proposers' and the transport's goroutines,
// concurrently with Apply and with itself, and must be safe for that. It
// must not depend on the state the log builds: an entry that passes may
// still fail when applied (the same way on every replica), but one that
// fails must be one no replica of this binary could read.
type ProposalChecker interface {
	CheckProposal(data []byte) error
}

// Snapshots is the hook the image package implements. A nil Snapshots means
// no images: the log is never compacted and every node replays from index 1.
type Snapshots interface {
	// LoadLatest is called once in Open before raft starts: load the newest
	// valid local image whose index >= minIndex into the state machine and
	// return its index and the membership blob stored with it (0, nil if
	// there is no image). minIndex is the journal's first retained index - 1:
	// an older image could not be replayed forward. raft restarts from the
	// returned index, so it may be older than the newest image (a fallback)
	// as long as it is at least minIndex.
	LoadLatest(ctx context.Context, minIndex uint64) (index uint64, membership []byte, err error)
	// Fetch makes the image at exactly index durable in the local data dir,
	// fetched from the peer at addr (host:port). Called when a raft snapshot
	// message arrives, before raft sees it; single-flight.
	Fetch(ctx context.Context, addr string, index uint64) error
	// Install loads the durable local image at index into the live state
	// machine (atomically). Called on the apply goroutine, in log order,
	// when raft applies that snapshot.
	Install(ctx context.Context, index uint64) error
}

// Clock is the time source of the raft loop, the proposers' waits and the
// staleness guard: Now, NewTicker, NewTimer and AfterFunc, as tailscale's
// tstime.Clock has them. Nil in Config means the real clock.
type Clock = clock.Clock

// Config configures a Journal. The zero value of every tunable means its
// documented default; Open copies the Config, fills defaults
// ([Config.WithDefaults]) and validates.
type Config struct {
	// ID is this node's raft id: non-zero, unique in the cluster, never
	// reused for another node. Required.
	ID uint64
	// Dir is the node's data dir (VERSION, ROLE, LOCK, journal/). Required.
	Dir string
	// Addr is this node's host:port as its peers reach it. Required.
	Addr string

	// Start mode. With a VERSION file in Dir the node restarts from it and
	// Bootstrap/Join are ignored. Otherwise exactly one of:
	//   Bootstrap: start a new single-node cluster (others join it);
	//   Join: the address of any running member (the helper).
	Bootstrap bool
	Join      string
	// Role is Follower (voter) or Observer (learner). RoleUnset means
	// Follower for bootstrap and join, and the ROLE file on restart. A Role
	// that disagrees with the ROLE file or with the cluster is an error at
	// startup (ErrRoleMismatch), except Observer on a node the cluster
	// promoted since (its ROLE says Follower): promotion is one-way, so a
	// restart with the flags the node joined with starts it as the voter
	// it is.
	Role Role
	// ClusterID names a new cluster at bootstrap (default: a random UUID).
	// On restart or join, a non-empty ClusterID must match the cluster's.
	ClusterID string
	// Token guards joining and every peer request. The bootstrap node's
	// token becomes the cluster's; a joining node must present the same.
	Token string

	// ForceNewCluster, on a restart, makes this node the only voter of its
	// cluster, keeping everything its log holds: for a survivor after the
	// other voters are lost for good (permanent quorum loss), never while
	// they may come back. Open appends the removal of every other member
	// to the log and commits the whole log with them, in one synced write;
	// raft applies them as any membership change (MEMBERS, ROLE and the
	// removed ids follow) and the node elects itself. From the start of
	// Open until those removals apply, it refuses every other node's
	// messages with ErrRemoved, as a member refuses a removed one. A
	// restart without it afterwards is an ordinary restart; one with it
	// again changes nothing.
	ForceNewCluster bool

	// StateMachine receives the user entries. Required. When it is a
	// ProposalChecker, proposals are checked before they enter the log.
	StateMachine StateMachine
	// ProposalGuard, when set, is asked on the proposing node, with the
	// proposer's context, before a proposal (Propose, ProposeWithKey)
	// enters the log and after the StateMachine's CheckProposal passed it:
	// an error it returns fails the proposal with ErrInvalidProposal
	// wrapping that error, and nothing is proposed. A host keeps the part
	// of the state its own components write out of its users' reach with
	// it (the frontend refuses user writes under heartbeat's /_cluster).
	// The leader does not ask it again for a forwarded proposal. It runs
	// on the proposers' goroutines, concurrently. Default: none.
	ProposalGuard func(ctx context.Context, data []byte) error
	// Snapshots is the image hook (nil = no images, no compaction).
	Snapshots Snapshots

	// Transport carries the traffic between nodes. Default: the HTTP
	// transport (mount Handler() under /raft/) using HTTPClient.
	Transport Transport
	// HTTPClient is used by the default transport (default: a client with
	// its own http.Transport; set one with TLS config for https).
	HTTPClient *http.Client
	// Scheme is "http" or "https" for the default transport (default:
	// "https" with TLS, else "http").
	Scheme string
	// TLS, when set, is the client side of mutual TLS for the default
	// transport: it dials peers with this configuration, and its Handler
	// refuses (403, ErrPeerIdentity) a peer request that carries no
	// verified client certificate naming the sender's id (URI SAN
	// metatree://node/<id>). The host serves the Handler over TLS with a
	// server configuration that verifies client certificates against the
	// cluster's CA. Default: none (plain HTTP, the token alone).
	TLS *tls.Config

	// FS is the filesystem for the data dir (default: the OS, vfs.Default).
	FS vfs.FS
	// Logger receives the journal's logs (default: discard).
	Logger *slog.Logger
	// Clock is the time source for ticks and the staleness guard (default:
	// the real clock).
	Clock Clock

	// TickInterval is the raft tick (default 100ms).
	TickInterval time.Duration
	// ElectionTicks is the election timeout in ticks (default 10).
	ElectionTicks int
	// HeartbeatTicks is the heartbeat interval in ticks (default 1).
	HeartbeatTicks int

	// MaxSizePerMsg bounds the bytes of entries in one append message
	// (default 1 MiB).
	MaxSizePerMsg uint64
	// MaxInflightMsgs bounds the append messages in flight to one follower
	// (default 256).
	MaxInflightMsgs int
	// MaxInflightBytes bounds the bytes in flight to one follower (default
	// 32 MiB).
	MaxInflightBytes uint64
	// MaxUncommittedBytes bounds the leader's uncommitted log tail; further
	// proposals fail with ErrBusy (default 64 MiB).
	MaxUncommittedBytes uint64
	// MaxCommittedBytesPerReady bounds the committed entries handed out per
	// Ready (default 4 MiB).
	MaxCommittedBytesPerReady uint64
	// ApplyQueueBytes bounds the committed-but-unapplied bytes queued for
	// the state machine; past it raft hands out no more committed entries
	// until Apply catches up, while the node goes on ticking, heartbeating,
	// voting, appending and acknowledging (default 64 MiB). The queue holds
	// at most this plus MaxCommittedBytesPerReady.
	ApplyQueueBytes uint64
	// ApplyQueueBatches bounds the number of queued apply batches, which
	// count as full like ApplyQueueBytes (default 1024).
	ApplyQueueBatches int
	// SendQueueMsgs and SendQueueBytes bound the messages queued for one
	// peer by the default transport (defaults 4096 and 64 MiB); overflow
	// drops (raft retransmits).
	SendQueueMsgs  int
	SendQueueBytes uint64
	// MaxBodyBytes bounds one HTTP request body or stream frame accepted by
	// the handler (default 4 × MaxSizePerMsg + 1 MiB).
	MaxBodyBytes int64
	// MaxEntryBytes bounds the data of one proposal: a larger one fails at
	// once with ErrTooLarge (default 1.5 MiB, etcd's request limit). It
	// must leave room in a stream frame: 1 MiB of other messages plus
	// max(MaxSizePerMsg, MaxEntryBytes) plus 64 KiB within MaxBodyBytes,
	// or followers would refuse the append that carries it, forever.
	MaxEntryBytes uint64
	// ProposalQueue bounds the proposals waiting for the raft loop (default
	// 4096); past it Propose waits (on its context).
	ProposalQueue int

	// StaleAfter is the staleness tolerance: the leader journals its clock
	// every StaleAfter/2, and a non-leader whose last replayed timestamp is
	// older than StaleAfter reports itself stale (default 30s). A stale
	// observer probes the member it takes for the leader every
	// StaleAfter/2, to learn whether it was removed (removalprobe.go).
	StaleAfter time.Duration

	// CheckInterval is how often the leader starts a consistency check
	// round, when the StateMachine is a Digester (check.go): every member
	// records its digest at a mark the leader journals, the members
	// report their digests through the log, and a member whose digest
	// differs from a majority of the voters' raises the corruption alarm
	// (ErrCorrupt) within a few round trips of the mark. Default 1s;
	// negative turns the checks off. A round costs one entry from the
	// leader and one from each member, and one digest read each. Set it
	// alike on every member: a member with checks on that restarts waits
	// for a mark before it serves reads (the check at start).
	CheckInterval time.Duration

	// DedupeWindow is how many log indexes back an idempotency key is
	// remembered: an entry whose key reached the log within the window
	// before it is not applied again, and the window slides to it (default
	// 10,000). The window decides replicated state, so it is the cluster's:
	// the node that bootstraps the cluster records its DedupeWindow in the
	// log, and every member, restart, image and restore uses the recorded
	// one, whatever its own DedupeWindow says. Only a cluster bootstrapped
	// by a version that did not record it uses each member's own (set it
	// alike on every member there).
	DedupeWindow uint64
	// CompactMargin is the least number of entries kept behind the newest
	// image for slow followers (default 20,000; at least DedupeWindow; the
	// log keeps at least the cluster's dedupe window when that is wider).
	// The log is compacted only up to an earlier image, so it holds up to
	// the distance between two images more.
	CompactMargin uint64
	// ForwardRetries bounds the attempts of a proposal made on a non-leader
	// (default 5).
	ForwardRetries int

	// MaxVersion is the newest format version this node reads and writes,
	// advertised when it joins (default NewestVersion; OldestVersion to
	// NewestVersion). A host whose state machine reads only older formats
	// sets it to what the state machine reads. The node refuses to start or
	// join a cluster whose version is above it, and halts its applier on a
	// version entry above it (see Status.ClusterVersion).
	MaxVersion uint32

	// SlowSync is the synced log write past which the journal logs a
	// "slow WAL sync" warning with the figure (default 1s, etcd's slow
	// fdatasync threshold). SlowApply is the same for one
	// StateMachine.Apply (default 100ms, etcd's "apply request took too
	// long"). Each kind of warning is logged at most once every 10s.
	SlowSync  time.Duration
	SlowApply time.Duration
	// PromoteMaxLag is how many entries an observer may trail the leader's
	// log and still be promoted; Promote fails with ErrNotCaughtUp past it
	// (default 1,000), as etcd refuses to promote a learner that is
	// behind.
	PromoteMaxLag uint64

	// ReserveBytes is the free space of the data dir's filesystem under
	// which the node refuses new writes with ErrNoSpace, keeping the rest
	// for what raft itself must write; it takes writes again once free
	// space is back above it (default 64 MiB; negative: no guard).
	// BallastBytes is the size of the emergency ballast file
	// (EMERGENCY_BALLAST in Dir) that holds space in reserve: the node
	// releases it when free space falls under half of ReserveBytes, and an
	// operator may delete it to restart a node whose disk filled (default
	// ReserveBytes/8; negative: none). SpaceCheckInterval is how often
	// free space is measured (default 1s). A filesystem that reports no
	// usage (in memory) has no guard.
	ReserveBytes       int64
	BallastBytes       int64
	SpaceCheckInterval time.Duration

	// knobs are test hooks (nil in production).
	knobs *testingKnobs
}

// testingKnobs are hooks tests set through Config.knobs (export_test.go
// sets them as KnobsForTest, an alias, so the fields are exported).
type testingKnobs struct {
	// BeforeRepropose runs on the proposer's goroutine before a Propose
	// hands the loop another copy of its entry.
	BeforeRepropose func(key [16]byte)
	// Judged runs on the applier for every copy of a user entry it skips.
	Judged func(index uint64, key [16]byte, v dedupe.Verdict)
	// Changed runs after a state a test awaits may have changed: a message
	// from a peer was recorded (reachable), a leader timestamp applied
	// (CheckFresh), a vote request sent (campaigns) or a snapshot transfer
	// reported (snapsOut). It runs on the loop or the applier and must
	// not block.
	Changed func()
	// Ticked runs on the loop after each raft tick. It must not block,
	// but for a test that stalls the loop as a starved process would.
	Ticked func()
	// HoldReports makes the loop leave the consistency report the applier
	// left until the member stops, as the slowest loop would.
	HoldReports bool
}

// notifyChanged calls the changed knob, if set.
func (j *Journal) notifyChanged() {
	if k := j.cfg.knobs; k != nil && k.Changed != nil {
		k.Changed()
	}
}

// WithDefaults returns a copy of c in which every zero field that has a
// default holds it: the configuration Open runs with. Required fields (ID,
// Dir, Addr, StateMachine) stay as they are; nothing is validated.
func (c Config) WithDefaults() Config {
	c.fillDefaults()
	return c
}

// fillDefaults sets every zero field that has a default to it; it is the
// one place the defaults live.
func (c *Config) fillDefaults() {
	def := func(v *uint64, d uint64) {
		if *v == 0 {
			*v = d
		}
	}
	if c.TickInterval == 0 {
		c.TickInterval = 100 * time.Millisecond
	}
	if c.ElectionTicks == 0 {
		c.ElectionTicks = 10
	}
	if c.HeartbeatTicks == 0 {
		c.HeartbeatTicks = 1
	}
	def(&c.MaxSizePerMsg, 1<<20)
	if c.MaxInflightMsgs == 0 {
		c.MaxInflightMsgs = 256
	}
	def(&c.MaxInflightBytes, 32<<20)
	def(&c.MaxUncommittedBytes, 64<<20)
	def(&c.MaxCommittedBytesPerReady, 4<<20)
	def(&c.ApplyQueueBytes, 64<<20)
	if c.ApplyQueueBatches == 0 {
		c.ApplyQueueBatches = 1024
	}
	if c.SendQueueMsgs == 0 {
		c.SendQueueMsgs = 4096
	}
	def(&c.SendQueueBytes, 64<<20)
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = int64(4*c.MaxSizePerMsg) + 1<<20
	}
	if c.ProposalQueue == 0 {
		c.ProposalQueue = 4096
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = 30 * time.Second
	}
	if c.CheckInterval == 0 {
		c.CheckInterval = time.Second
	}
	def(&c.MaxEntryBytes, 3<<19)
	def(&c.DedupeWindow, 10_000)
	def(&c.CompactMargin, 20_000)
	if c.ForwardRetries == 0 {
		c.ForwardRetries = 5
	}
	if c.MaxVersion == 0 {
		c.MaxVersion = NewestVersion
	}
	if c.SlowSync == 0 {
		c.SlowSync = time.Second
	}
	if c.SlowApply == 0 {
		c.SlowApply = 100 * time.Millisecond
	}
	def(&c.PromoteMaxLag, 1000)
	if c.ReserveBytes == 0 {
		c.ReserveBytes = 64 << 20
	}
	if c.BallastBytes == 0 {
		c.BallastBytes = c.ReserveBytes / 8
	}
	if c.SpaceCheckInterval == 0 {
		c.SpaceCheckInterval = time.Second
	}
	if c.Scheme == "" {
		c.Scheme = "http"
		if c.TLS != nil {
			c.Scheme = "https"
		}
	}
	if c.FS == nil {
		c.FS = vfs.Default
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
}

func (c *Config) validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.ID == 0 {
		bad("ID must be non-zero")
	}
	if c.Dir == "" {
		bad("Dir is required")
	}
	if c.Addr == "" {
		bad("Addr is required")
	}
	if c.StateMachine == nil {
		bad("StateMachine is required")
	}
	if c.Bootstrap && c.Join != "" {
		bad("Bootstrap and Join are exclusive")
	}
	if c.Role != RoleUnset && c.Role != Follower && c.Role != Observer {
		bad("unknown Role %d", c.Role)
	}
	if c.ForceNewCluster && (c.Bootstrap || c.Join != "") {
		bad("ForceNewCluster is for a restart: not with Bootstrap or Join")
	}
	if c.Bootstrap && c.Role == Observer {
		bad("a bootstrap node must be a Follower (voter)")
	}
	if c.TickInterval < time.Millisecond {
		bad("TickInterval %v below 1ms", c.TickInterval)
	}
	if c.HeartbeatTicks < 1 || c.ElectionTicks <= c.HeartbeatTicks {
		bad("ElectionTicks (%d) must exceed HeartbeatTicks (%d) >= 1", c.ElectionTicks, c.HeartbeatTicks)
	}
	if c.MaxInflightMsgs < 1 {
		bad("MaxInflightMsgs must be positive")
	}
	if c.MaxInflightBytes < c.MaxSizePerMsg {
		bad("MaxInflightBytes (%d) must be >= MaxSizePerMsg (%d)", c.MaxInflightBytes, c.MaxSizePerMsg)
	}
	if c.MaxBodyBytes < int64(c.MaxSizePerMsg) {
		bad("MaxBodyBytes (%d) must be >= MaxSizePerMsg (%d)", c.MaxBodyBytes, c.MaxSizePerMsg)
	}
	if need := int64(rafthttp.StreamBatchBytes + max(c.MaxSizePerMsg, c.MaxEntryBytes) + rafthttp.FrameSlack); c.MaxBodyBytes < need {
		bad("MaxBodyBytes (%d) must be >= %d to carry an entry of MaxEntryBytes (%d) or an append of MaxSizePerMsg (%d) in a stream frame", c.MaxBodyBytes, need, c.MaxEntryBytes, c.MaxSizePerMsg)
	}
	if c.ApplyQueueBatches < 1 || c.SendQueueMsgs < 1 || c.ProposalQueue < 1 || c.ForwardRetries < 1 {
		bad("queue sizes and ForwardRetries must be positive")
	}
	if c.StaleAfter < 2*c.TickInterval {
		bad("StaleAfter (%v) must be at least two ticks", c.StaleAfter)
	}
	if c.CompactMargin < c.DedupeWindow {
		bad("CompactMargin (%d) must be >= DedupeWindow (%d)", c.CompactMargin, c.DedupeWindow)
	}
	if c.MaxVersion < OldestVersion || c.MaxVersion > NewestVersion {
		bad("MaxVersion %d outside %d to %d", c.MaxVersion, OldestVersion, NewestVersion)
	}
	if c.Scheme != "http" && c.Scheme != "https" {
		bad("Scheme must be http or https")
	}
	if c.TLS != nil && c.Scheme != "https" {
		bad("Scheme must be https with TLS")
	}
	if len(errs) > 0 {
		return operr.Errorf("journal: invalid config: %w", errors.Join(errs...))
	}
	return nil
}
