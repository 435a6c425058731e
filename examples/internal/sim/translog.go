package sim

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// transitionMessages are the log messages a transLog keeps: the member
// transitions a leader's monitor journals, the events each frontend's
// member view delivers to its registry, and the events that cancel a
// registry's queries, each with the member, the epochs and the
// generation or event it acted on.
var transitionMessages = []string{
	"heartbeat: transition journaled",
	"heartbeat: member missed heartbeats",
	"heartbeat: member event",
	"cancel: queries cancelled",
}

// maxTransitions bounds the lines a transLog keeps.
const maxTransitions = 20000

// transLine is one kept log line: when and on which frontend it was
// logged, and its text.
type transLine struct {
	at       time.Time
	frontend uint64
	text     string
}

// transLog keeps, from every frontend's log, the lines that record
// member transitions (transitionMessages), so that a failed query check
// prints the exact transitions the leaders journaled and the events the
// coordinator's registry applied, where the samples of eventLog only
// show their outcome a sample apart.
type transLog struct {
	mu    sync.Mutex
	lines []transLine
}

// logger returns the logger frontend id's parts log to.
func (l *transLog) logger(id uint64) *slog.Logger {
	return slog.New(&transHandler{log: l, frontend: id})
}

// about returns the kept lines that name member (as their "member" or
// in their event) between from and to, one a line; a nil transLog keeps
// none.
func (l *transLog) about(member uint64, from, to time.Time, since func(time.Time) time.Duration) string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	names := []string{fmt.Sprintf("member=%d ", member), fmt.Sprintf("=worker %d ", member), fmt.Sprintf("=frontend %d ", member)}
	for _, ln := range l.lines {
		named := false
		for _, n := range names {
			named = named || strings.Contains(ln.text+" ", n)
		}
		if ln.at.Before(from) || ln.at.After(to) || !named {
			continue
		}
		fmt.Fprintf(&b, "\n        %v frontend %d: %s", since(ln.at), ln.frontend, ln.text)
	}
	return b.String()
}

// transHandler is the slog.Handler of one frontend's transLog logger.
type transHandler struct {
	log      *transLog
	frontend uint64
	attrs    []slog.Attr
}

func (h *transHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *transHandler) Handle(_ context.Context, rec slog.Record) error {
	kept := false
	for _, m := range transitionMessages {
		kept = kept || rec.Message == m
	}
	if !kept {
		return nil
	}
	var b strings.Builder
	b.WriteString(rec.Message)
	write := func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	rec.Attrs(write)
	h.log.mu.Lock()
	defer h.log.mu.Unlock()
	if len(h.log.lines) < maxTransitions {
		h.log.lines = append(h.log.lines, transLine{at: rec.Time, frontend: h.frontend, text: b.String()})
	}
	return nil
}

func (h *transHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return &c
}

// WithGroup keeps the group's attributes unqualified: the kept messages
// log none in groups.
func (h *transHandler) WithGroup(string) slog.Handler { return h }
