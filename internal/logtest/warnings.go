package logtest

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// Warnings is a slog.Handler that keeps the messages of records at level
// Warn and above. It is safe for concurrent use.
type Warnings struct {
	mu   sync.Mutex
	msgs []string
}

// Enabled implements slog.Handler.
func (w *Warnings) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (w *Warnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		w.mu.Lock()
		w.msgs = append(w.msgs, r.Message)
		w.mu.Unlock()
	}
	return nil
}

// WithAttrs implements slog.Handler.
func (w *Warnings) WithAttrs([]slog.Attr) slog.Handler { return w }

// WithGroup implements slog.Handler.
func (w *Warnings) WithGroup(string) slog.Handler { return w }

// Count returns how many kept messages contain msg.
func (w *Warnings) Count(msg string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, m := range w.msgs {
		if strings.Contains(m, msg) {
			n++
		}
	}
	return n
}
