package journal

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.etcd.io/raft/v3"

	"github.com/metatree/metatree/internal/ratelimit"
)

// metrics are the journal's own counters, read by its Prometheus collector
// at scrape time: a node pays an atomic add per event (a histogram
// observation for the durations) and nothing else, scraped or not.
type metrics struct {
	leaderChanges      atomic.Uint64
	proposalsApplied   atomic.Uint64
	proposalsFailed    atomic.Uint64
	proposalsForwarded atomic.Uint64
	loopStalls         atomic.Uint64 // see Journal.noteTick
	// apply and readBarrier are unregistered histograms owned by this
	// journal (client_golang's lock-free buckets), emitted by the
	// collector.
	apply       prometheus.Histogram
	readBarrier prometheus.Histogram
	// walFsync is Pebble's own WAL fsync histogram, taken from the store
	// at the first scrape.
	walFsync atomic.Pointer[prometheus.Histogram]

	slowSync  ratelimit.Log
	slowApply ratelimit.Log
	// refusedForward limits the warnings about forwarded proposals this
	// node dropped (admitProposal).
	refusedForward ratelimit.Log
}

func newMetrics() *metrics {
	return &metrics{
		apply: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "metatree_journal_apply_duration_seconds", Help: "Time StateMachine.Apply took for one user entry.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 10), // 10 µs to 2.6 s
		}),
		readBarrier: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "metatree_journal_read_barrier_duration_seconds", Help: "Time a ReadBarrier took, from the call to the local apply of the leader's commit index.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10), // 100 µs to 26 s
		}),
	}
}

var (
	descHasLeader = prometheus.NewDesc("metatree_journal_has_leader",
		"1 when this node knows a leader, 0 otherwise.", nil, nil)
	descIsLeader = prometheus.NewDesc("metatree_journal_is_leader",
		"1 when this node is the leader, 0 otherwise.", nil, nil)
	descLeaderChanges = prometheus.NewDesc("metatree_journal_leader_changes_total",
		"Leader changes this node has seen (a new non-zero leader id).", nil, nil)
	descTerm = prometheus.NewDesc("metatree_journal_term",
		"The raft term this node is in.", nil, nil)
	descApplied = prometheus.NewDesc("metatree_journal_applied_index",
		"The last log index applied on this node.", nil, nil)
	descCommitted = prometheus.NewDesc("metatree_journal_committed_index",
		"The last log index this node knows committed (and durable locally).", nil, nil)
	descStale = prometheus.NewDesc("metatree_journal_stale",
		"1 when this node's replayed state is older than Config.StaleAfter (CheckFresh fails), 0 otherwise.", nil, nil)
	descProposalsApplied = prometheus.NewDesc("metatree_journal_proposals_applied_total",
		"User entries this node applied to the state machine (replays included, duplicates skipped).", nil, nil)
	descProposalsFailed = prometheus.NewDesc("metatree_journal_proposals_failed_total",
		"Propose calls on this node that returned an error.", nil, nil)
	descProposalsForwarded = prometheus.NewDesc("metatree_journal_proposals_forwarded_total",
		"Attempts of Propose calls on this node that went to another node, the leader.", nil, nil)
	descLoopStalls = prometheus.NewDesc("metatree_journal_loop_stalls_total",
		"Times the raft loop took no tick for ElectionTicks-HeartbeatTicks ticks or more (a paused process, a starved CPU): on a leader, long enough for its followers to stop hearing it and elect another.", nil, nil)
	descRefusedMessages = prometheus.NewDesc("metatree_journal_refused_messages_total",
		"Raft messages from the network this node refused as invalid (Status.RefusedMessages): raft never saw them.", nil, nil)
	descRefusedPeers = prometheus.NewDesc("metatree_journal_refused_peer_requests_total",
		"Peer requests the HTTP transport refused for the sender's identity (RefusedPeers): a certificate that does not name it, or a stream message in another member's name.", nil, nil)
	descReadRounds = prometheus.NewDesc("metatree_journal_read_index_rounds_total",
		"ReadIndex rounds this node sent for its ReadBarrier calls, which share them (resends included).", nil, nil)
	descHalted = prometheus.NewDesc("metatree_journal_halted",
		"1 when the applier stopped at an entry this binary cannot read (Status.Err names the index and version), 0 otherwise.", nil, nil)
	descClusterVersion = prometheus.NewDesc("metatree_journal_cluster_version",
		"The cluster's format version as this node has applied it.", nil, nil)
	descMaxVersion = prometheus.NewDesc("metatree_journal_max_version",
		"The newest format version this node reads (Config.MaxVersion).", nil, nil)
	descNoSpaceAlarm = prometheus.NewDesc("metatree_journal_no_space_alarm",
		"1 while a voter's no-space alarm is raised and the cluster refuses writes (ErrNoSpace), 0 otherwise.", nil, nil)
	descCorrupt = prometheus.NewDesc("metatree_journal_corrupt",
		"1 when this member's state machine digest differed from a majority of the voters' (ErrCorrupt: it stopped applying and serving), 0 otherwise.", nil, nil)
	descConsistencyChecks = prometheus.NewDesc("metatree_journal_consistency_checks_total",
		"Consistency check rounds this member compared its own digest in, with a majority of the voters' (Config.CheckInterval).", nil, nil)
	descDiskFree = prometheus.NewDesc("metatree_journal_disk_free_bytes",
		"Free bytes on the data dir's disk at the last check (absent while the guard is off: Config.ReserveBytes negative, or a filesystem that reports no usage).", nil, nil)
	descWALFsync = prometheus.NewDesc("metatree_journal_wal_fsync_duration_seconds",
		"WAL fsync latency of the Pebble log (Pebble's own LogWriter histogram, bounds a subset of pebble.FsyncLatencyBuckets).", nil, nil)
)

// Collector returns a prometheus.Collector of this journal's series
// (metatree_journal_*). Register it on the host's own registry; each call
// returns a new collector reading the same counters, so two journals in
// one process register on two registries, or on one through
// prometheus.WrapRegistererWith with a distinguishing label. Values are
// read at scrape time.
func (j *Journal) Collector() prometheus.Collector { return journalCollector{j} }

type journalCollector struct{ j *Journal }

func (c journalCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHasLeader, descIsLeader, descLeaderChanges, descTerm, descApplied,
		descCommitted, descStale, descProposalsApplied, descProposalsFailed, descProposalsForwarded, descLoopStalls, descWALFsync,
		descRefusedMessages, descRefusedPeers,
		descReadRounds, descHalted, descClusterVersion, descMaxVersion, descNoSpaceAlarm, descDiskFree, descCorrupt, descConsistencyChecks} {
		ch <- d
	}
	c.j.metrics.apply.Describe(ch)
	c.j.metrics.readBarrier.Describe(ch)
}

func (c journalCollector) Collect(ch chan<- prometheus.Metric) {
	j, m := c.j, c.j.metrics
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	leader := j.leader.Load()
	gauge(descHasLeader, b2f(leader != 0))
	gauge(descIsLeader, b2f(leader == j.id && j.state.Load() == uint32(raft.StateLeader)))
	counter(descLeaderChanges, m.leaderChanges.Load())
	gauge(descTerm, float64(j.term.Load()))
	gauge(descApplied, float64(j.applied.Load()))
	gauge(descCommitted, float64(j.committed.Load()))
	gauge(descStale, b2f(j.CheckFresh() != nil))
	counter(descProposalsApplied, m.proposalsApplied.Load())
	counter(descProposalsFailed, m.proposalsFailed.Load())
	counter(descProposalsForwarded, m.proposalsForwarded.Load())
	counter(descLoopStalls, m.loopStalls.Load())
	counter(descRefusedMessages, j.refusedMsgs.Load())
	counter(descRefusedPeers, j.RefusedPeers())
	counter(descReadRounds, j.rounds.Sent())
	gauge(descHalted, b2f(j.halted() != nil))
	gauge(descClusterVersion, float64(j.clusterVersion()))
	gauge(descMaxVersion, float64(j.cfg.MaxVersion))
	gauge(descNoSpaceAlarm, b2f(j.noSpaceAlarm() != nil))
	gauge(descCorrupt, b2f(j.corruptErr() != nil))
	counter(descConsistencyChecks, j.checker.Count())
	if free, ok := j.space.Free(); ok {
		gauge(descDiskFree, float64(free))
	}
	if h := m.walFsyncHistogram(j); h != nil {
		if cm, err := secondsHistogram(descWALFsync, h); err == nil {
			ch <- cm
		}
	}
	ch <- m.apply
	ch <- m.readBarrier
}

// walFsyncHistogram returns Pebble's fsync histogram, fetched from the
// store once (nil before the store opened or after it closed, when it was
// never fetched).
func (m *metrics) walFsyncHistogram(j *Journal) prometheus.Histogram {
	if h := m.walFsync.Load(); h != nil {
		return *h
	}
	if j.store == nil {
		return nil
	}
	h := j.store.WALFsyncLatency()
	if h == nil {
		return nil
	}
	m.walFsync.Store(&h)
	return h
}

// walFsyncBounds are the upper bounds (seconds) the WAL fsync histogram
// is reported at: each maps to the smallest of Pebble's bounds at or above
// it, so every reported cumulative count is exact.
var walFsyncBounds = []float64{0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10}

// secondsHistogram turns Pebble's nanosecond histogram into a constant
// histogram in seconds at walFsyncBounds.
func secondsHistogram(d *prometheus.Desc, h prometheus.Histogram) (prometheus.Metric, error) {
	var pb dto.Metric
	if err := h.Write(&pb); err != nil {
		return nil, err
	}
	hist := pb.GetHistogram()
	buckets := make(map[float64]uint64, len(walFsyncBounds))
	src := hist.GetBucket()
	i := 0
	for _, want := range walFsyncBounds {
		for i < len(src) && src[i].GetUpperBound()/1e9 < want {
			i++
		}
		if i == len(src) {
			break
		}
		buckets[src[i].GetUpperBound()/1e9] = src[i].GetCumulativeCount()
	}
	return prometheus.NewConstHistogram(d, hist.GetSampleCount(), hist.GetSampleSum()/1e9, buckets)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// noteSync records how long a synced append took and warns when it took
// longer than Config.SlowSync.
func (j *Journal) noteSync(took time.Duration, entries int) {
	if took < j.cfg.SlowSync {
		return
	}
	if ok, n := j.metrics.slowSync.Allow(j.cfg.Clock.Now()); ok {
		j.log.Warn("slow WAL sync", "took", took, "threshold", j.cfg.SlowSync, "entries", entries, "suppressed", n)
	}
}

// noteApply records one StateMachine.Apply and warns when it took longer
// than Config.SlowApply.
func (j *Journal) noteApply(index uint64, took time.Duration) {
	j.metrics.apply.Observe(took.Seconds())
	j.metrics.proposalsApplied.Add(1)
	if took < j.cfg.SlowApply {
		return
	}
	if ok, n := j.metrics.slowApply.Allow(j.cfg.Clock.Now()); ok {
		j.log.Warn("apply took too long", "index", index, "took", took, "threshold", j.cfg.SlowApply, "suppressed", n)
	}
}

// observeReadBarrier records a read barrier that started at start.
func (j *Journal) observeReadBarrier(start time.Time) {
	j.metrics.readBarrier.Observe(j.cfg.Clock.Now().Sub(start).Seconds())
}
