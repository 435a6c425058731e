package frontend_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/frontend/frontendtest"
)

// README:begin
func TestEmbedding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // in virtual time
		type Table struct{ Buckets int64 }
		c := frontendtest.NewCluster(t, frontendtest.Options{Frontends: 3, Workers: 1}) // worker 4
		ctx := t.Context()
		leader, err := c.Leader(ctx)
		require.NoError(t, err)
		f1, f2, f3 := c.Frontend(leader), c.Frontend(leader%3+1), c.Frontend((leader+1)%3+1)
		w := f3.Tree().Watch(catalog.WatchOptions{Prefix: "/orders"})
		defer w.Close()
		set, _ := catalog.Attrs(Table{Buckets: 16}) // an unsupported field type is an error
		res, err := f2.Write(ctx, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/orders",
			Kind: "table", Set: set, Cond: catalog.Cond{Absent: true}}}}) // a follower forwards it
		require.NoError(t, err)
		ev, _ := w.Next(ctx)                              // every change, in log order
		require.NoError(t, f3.Journal().ReadBarrier(ctx)) // then a linearizable read on a follower
		n, _ := f3.Tree().Get("/orders")
		var got Table
		require.NoError(t, n.Decode(&got))
		require.Equal(t, []any{res.Index, Table{Buckets: 16}}, []any{ev.Index, got})
		q, err := f1.Registry().Register(ctx, cancel.Member{Node: f1.ID(), Epoch: f1.Epoch()}, []cancel.Member{{Node: 4}})
		require.NoError(t, err)
		defer q.Finish()
		_, err = c.RestartWorker(ctx, 4)
		require.NoError(t, err)
		<-q.Context().Done() // also when worker 4 dies or is removed
		require.ErrorIs(t, context.Cause(q.Context()), cancel.ErrNodeRestarted)
	})
}

// README:end

// between returns the text of the file at path between the first begin
// and the end after it, without the blank lines around it.
func between(t *testing.T, path, begin, end string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	s := string(b)
	i := strings.Index(s, begin)
	require.GreaterOrEqual(t, i, 0, "%s has no %q", path, begin)
	s = s[i+len(begin):]
	j := strings.Index(s, end)
	require.GreaterOrEqual(t, j, 0, "%s has no %q after %q", path, end, begin)
	return strings.Trim(s[:j], "\n")
}

// TestREADMEShowsTheEmbeddingProgramVerbatim checks that the README's
// embedding program is TestEmbedding, line for line, and at most 30 lines:
// the README's program is compiled and run, and cannot rot.
func TestREADMEShowsTheEmbeddingProgramVerbatim(t *testing.T) {
	program := between(t, "readme_test.go", "// README:begin", "// README:end")
	inREADME := between(t, "../../README.md", "<!-- embed:begin -->\n```go", "```\n<!-- embed:end -->")
	require.Equal(t, program, inREADME, "the README's embedding program differs from TestEmbedding in examples/frontend/readme_test.go")
	require.LessOrEqual(t, strings.Count(program, "\n")+1, 30, "the embedding program fits in 30 lines")
}
