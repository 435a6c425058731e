package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTransLogKeepsTheTransitionsOfOneMember(t *testing.T) {
	var l transLog
	start := time.Now()
	l.logger(2).Info("heartbeat: transition journaled", "member", 6, "type", "restarted", "generation", 9)
	l.logger(5).With("part", "cancel").Info("cancel: queries cancelled", "event", "worker 6 restarted at 40: a -> b (gen 9)", "queries", 1)
	l.logger(5).Info("cancel: queries cancelled", "event", "worker 16 dead at 41: c -> d (gen 2)", "queries", 1)
	l.logger(2).Info("frontend started", "member", 6)
	since := func(t time.Time) time.Duration { return t.Sub(start).Round(time.Hour) }

	got := l.about(6, start, time.Now(), since)
	lines := strings.Split(strings.TrimSpace(got), "\n")
	require.Len(t, lines, 2, got)
	require.Contains(t, lines[0], "frontend 2: heartbeat: transition journaled member=6 type=restarted generation=9")
	require.Contains(t, lines[1], "frontend 5: cancel: queries cancelled part=cancel event=worker 6 restarted at 40")
	require.Empty(t, l.about(7, start, time.Now(), since))
	require.Empty(t, l.about(6, time.Now().Add(time.Hour), time.Now().Add(2*time.Hour), since))
}
