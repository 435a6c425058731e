package journaltest

import "sync"

// Applied is one entry a Recorder applied.
type Applied struct {
	Index uint64
	Data  []byte
}

// Recorder is a trivial journal.StateMachine that remembers every entry it
// applied. Apply returns the data. Safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	applied []Applied
}

// Apply implements journal.StateMachine.
func (r *Recorder) Apply(index uint64, data []byte) any {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applied = append(r.applied, Applied{Index: index, Data: append([]byte(nil), data...)})
	return data
}

// Applied returns a copy of the entries applied so far, in order.
func (r *Recorder) Applied() []Applied {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Applied(nil), r.applied...)
}

// LastIndex returns the index of the last applied entry (0: none).
func (r *Recorder) LastIndex() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.applied) == 0 {
		return 0
	}
	return r.applied[len(r.applied)-1].Index
}
