package raftstore

import (
	"context"
	"fmt"
	"log/slog"

	"go.etcd.io/raft/v3"
)

// pebbleLogger routes Pebble's log lines to slog. Pebble calls Fatalf for
// errors it cannot recover from (a failed WAL write or fsync in the commit
// pipeline, a failed MANIFEST write, a broken internal invariant) and
// expects it not to return; neither exiting nor panicking is acceptable
// inside a host's process. Fatalf halts the store instead (see ErrHalted)
// and returns: every store write checks the halt after Pebble returns, so a
// commit Pebble lets through after a fatal error is never acknowledged, and
// no write reaches Pebble after it.
type pebbleLogger struct {
	l *slog.Logger
	h *halt
}

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Info(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "component", "pebble", "fatal", true)
	p.h.record(pebbleFatal{msg: msg, err: firstError(args)})
}

// pebbleFatal is a Pebble fatal error: its message, and the error among
// its arguments (if any) for errors.Is.
type pebbleFatal struct {
	msg string
	err error
}

func (e pebbleFatal) Error() string { return "pebble: " + e.msg }
func (e pebbleFatal) Unwrap() error { return e.err }

func firstError(args []any) error {
	for _, a := range args {
		if err, ok := a.(error); ok {
			return err
		}
	}
	return nil
}

// NewRaftLogger adapts l to raft.Logger, so a RawNode logs through the
// host's slog.Logger instead of raft's global logger (never call
// raft.SetLogger: it is process-wide). A nil l discards everything.
// Fatal and Panic log at error level and then panic: raft calls them only
// for broken invariants, after which the node cannot go on.
func NewRaftLogger(l *slog.Logger) raft.Logger {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return raftLogger{l: l.With("component", "raft")}
}

type raftLogger struct{ l *slog.Logger }

func (r raftLogger) log(level slog.Level, msg string) {
	// Enabled first: raft logs a lot at debug and Sprint is not free.
	r.l.Log(context.Background(), level, msg)
}

func (r raftLogger) enabled(level slog.Level) bool {
	return r.l.Enabled(context.Background(), level)
}

func (r raftLogger) Debug(v ...any) {
	if r.enabled(slog.LevelDebug) {
		r.log(slog.LevelDebug, fmt.Sprint(v...))
	}
}

func (r raftLogger) Debugf(format string, v ...any) {
	if r.enabled(slog.LevelDebug) {
		r.log(slog.LevelDebug, fmt.Sprintf(format, v...))
	}
}

func (r raftLogger) Info(v ...any) {
	if r.enabled(slog.LevelInfo) {
		r.log(slog.LevelInfo, fmt.Sprint(v...))
	}
}

func (r raftLogger) Infof(format string, v ...any) {
	if r.enabled(slog.LevelInfo) {
		r.log(slog.LevelInfo, fmt.Sprintf(format, v...))
	}
}

func (r raftLogger) Warning(v ...any) {
	if r.enabled(slog.LevelWarn) {
		r.log(slog.LevelWarn, fmt.Sprint(v...))
	}
}

func (r raftLogger) Warningf(format string, v ...any) {
	if r.enabled(slog.LevelWarn) {
		r.log(slog.LevelWarn, fmt.Sprintf(format, v...))
	}
}

func (r raftLogger) Error(v ...any) { r.log(slog.LevelError, fmt.Sprint(v...)) }

func (r raftLogger) Errorf(format string, v ...any) {
	r.log(slog.LevelError, fmt.Sprintf(format, v...))
}

func (r raftLogger) Fatal(v ...any) { r.Panic(v...) }

func (r raftLogger) Fatalf(format string, v ...any) { r.Panicf(format, v...) }

func (r raftLogger) Panic(v ...any) {
	msg := fmt.Sprint(v...)
	r.log(slog.LevelError, msg)
	panic(msg)
}

func (r raftLogger) Panicf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	r.log(slog.LevelError, msg)
	panic(msg)
}
