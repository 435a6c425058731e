package journal_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/metatree/metatree/journal"
)

// upper is a toy state machine: it upper-cases what it applies.
type upper struct{ last string }

func (u *upper) Apply(index uint64, data []byte) any {
	u.last = strings.ToUpper(string(data))
	return u.last
}

// A single-node cluster: bootstrap, write, read your write. A real node
// also mounts j.Handler() under /raft/ on the server listening at Addr,
// and its peers join it with Config.Join.
func ExampleOpen() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sm := &upper{}
	j, err := journal.Open(ctx, journal.Config{
		ID:           1,
		Dir:          "/node1",
		Addr:         "127.0.0.1:7001",
		Bootstrap:    true,
		StateMachine: sm,
		FS:           vfs.NewMem(), // tests only; the default is the disk
		TickInterval: 10 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer j.Close()

	_, value, err := j.Propose(ctx, []byte("hello"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(value, sm.last)
	fmt.Println(j.Status().Role, j.Status().IsLeader(), j.CheckFresh() == nil)
	// Output:
	// HELLO HELLO
	// follower true true
}
