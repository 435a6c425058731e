package sim

import (
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/metatree/metatree/internal/linearize"
)

// history records the clients' operations for the linearizability check,
// on a logical clock that orders every call and return the simulator saw
// (virtual time stands still between two blocking points, so many
// operations share one instant; the clock tells them apart), and hashes
// every event in the order it happened.
type history struct {
	mu    sync.Mutex
	clock int64
	regs  []porcupine.Operation
	h     uint64
	fh    uint64 // the faults' alone
	n     int
	cuts  []cut // the operators' recoveries, in order (cut.go)
	start time.Time
	trace func(string)
}

func newHistory(start time.Time, trace func(string)) *history {
	empty := fnv.New64a().Sum64()
	return &history{h: empty, fh: empty, start: start, trace: trace}
}

// unknownReturn is the return time of an operation whose outcome is
// unknown: it may take effect at any point after its call.
const unknownReturn = math.MaxInt64

// call stamps the start of an operation.
func (h *history) call() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clock++
	return h.clock
}

// done records an operation of client that began at call: with known,
// output is its outcome and it returns now; without, it may take effect
// at any time after call.
func (h *history) done(client int, call int64, in linearize.KV, output any, known bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clock++
	ret := h.clock
	if !known {
		ret = unknownReturn
	}
	h.regs = append(h.regs, porcupine.Operation{ClientId: client, Input: in, Output: output, Call: call, Return: ret})
	h.n++
	h.mix(fmt.Sprintf("op %d %+v %v %v", client, in, output, known))
}

// failed records a write that failed for certain (it did not and will
// not apply): it stays out of the operations the check sees, so a read
// of its value fails the check; its outcome is hashed.
func (h *history) failed(in linearize.KV) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clock++
	h.n++
	h.mix(fmt.Sprintf("failed %+v", in))
}

// event hashes one event that is not a register operation (a unique
// create and its outcome).
func (h *history) event(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mix(fmt.Sprintf(format, args...))
}

// fault hashes a fault and traces it.
func (h *history) fault(format string, args ...any) {
	s := "fault " + fmt.Sprintf(format, args...)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mix(s)
	h.fh = mix(h.fh, s)
	if h.trace != nil {
		h.trace(fmt.Sprintf("%8v %s", time.Since(h.start).Round(time.Millisecond), s))
	}
}

// counted counts a completed operation that is no register operation.
func (h *history) counted() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
}

// mix folds s into the hash; h.mu is held.
func (h *history) mix(s string) { h.h = mix(h.h, s) }

// mix returns the hash of sum followed by s.
func mix(sum uint64, s string) uint64 {
	f := fnv.New64a()
	var b [8]byte
	for i := range b {
		b[i] = byte(sum >> (8 * i))
	}
	f.Write(b[:])
	f.Write([]byte(s))
	return f.Sum64()
}

// hashes returns the hash of every event and that of the faults alone.
func (h *history) hashes() (all, faults uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.h, h.fh
}

func (h *history) ops() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// operations returns a copy of the register operations.
func (h *history) operations() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]porcupine.Operation(nil), h.regs...)
}

// addCut records a cut: the checks split the history there (eras).
func (h *history) addCut(c cut) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cuts = append(h.cuts, c)
}

// cutsSoFar returns the cuts recorded.
func (h *history) cutsSoFar() []cut {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.cuts)
}
