package raftstore

import "github.com/prometheus/client_golang/prometheus"

// WALFsyncLatency returns Pebble's own histogram of WAL fsync latencies,
// in nanoseconds (Pebble's FsyncLatencyBuckets), or nil once the store is
// closed. The histogram is Pebble's LogWriter metric, created with the DB
// and never replaced, so a caller may keep it: it stays readable after
// Close.
func (s *Store) WALFsyncLatency() prometheus.Histogram {
	s.mu.RLock()
	if s.mu.closed {
		s.mu.RUnlock()
		return nil
	}
	s.readers.Add(1)
	s.mu.RUnlock()
	defer s.readers.Done()
	return s.db.Metrics().LogWriter.FsyncLatency
}
