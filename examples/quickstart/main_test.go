package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The quickstart runs to its end and its timeline tells the story: among
// others, the worker's owned task goes with the restart that cancels the
// worker's queries, and a write fenced on the old epoch is refused.
func TestQuickstartTellsTheTimeline(t *testing.T) {
	var buf bytes.Buffer
	out = &buf
	t.Cleanup(func() { out = os.Stdout })
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	require.NoError(t, run(ctx), "timeline so far:\n%s", buf.String())
	timeline := buf.String()
	for _, line := range []string{
		`cluster of 3 frontends up; leader is frontend [123]`,
		`wrote 212 catalog nodes`,
		`task /tasks/load-101 created, owned by worker 101's epoch [0-9a-f]{8}: it lives as long as that process`,
		`worker 101 restarted \(new epoch [0-9a-f]{8}\)`,
		`task /tasks/load-101 deleted \d+ms after the restart, on every frontend, at index \d+: the entry that records the restart`,
		`q1 cancelled \d+ms after the restart: cancel: node 101 restarted`,
		`q2 cancelled \d+ms after the restart: cancel: node 101 restarted`,
		`q4 cancelled \d+ms after the restart: cancel: node 101 restarted`,
		`q3 \(worker 102 only\) still running`,
		`a txn with if_epoch on the old epoch is refused: 409 conflict`,
		`a create owned by the old epoch is refused: 409 owner_not_current`,
		`frontend [123] leads after`,
		`checkpoint on frontend [123]: image\.\d+`,
		`all closed; data dirs removed. Done.`,
	} {
		require.Regexp(t, regexp.MustCompile(`(?m)^ *\d+\.\d{3}s  +`+line), timeline)
	}
	// The task goes next to the queries the same restart cancels.
	require.Regexp(t, regexp.MustCompile(`worker 101 restarted.*\n.*task /tasks/load-101 deleted.*\n.*q1 cancelled`), timeline)
}
