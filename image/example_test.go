package image_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/metatree/metatree/image"
)

// counter is a tiny State: the sum of the numbers in its entries.
type counter struct{ sum int }

func (c *counter) Apply(_ uint64, data []byte) any {
	n, _ := strconv.Atoi(string(data))
	c.sum += n
	return c.sum
}

func (c *counter) Save(w io.Writer) error {
	_, err := io.WriteString(w, strconv.Itoa(c.sum))
	return err
}

func (c *counter) Load(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(string(b))
	if err != nil {
		return err
	}
	c.sum = n
	return nil
}

// Write an image, then load it as a restarting node does.
func Example() {
	ctx := context.Background()
	fs := vfs.NewMem() // the real disk (vfs.Default) when FS is nil

	live := &counter{sum: 42}
	s, err := image.Open(image.Config{Dir: "/node1", FS: fs, State: live, ClusterID: "c1"})
	if err != nil {
		panic(err)
	}
	info, err := s.Write(ctx, image.Header{Index: 100, Term: 3, Membership: []byte("voters=1,2,3")}, live.Save)
	if err != nil {
		panic(err)
	}
	fmt.Println("wrote", info.Name, "at index", info.Index)
	s.Close()

	// Restart: the journal asks for the newest image its log can follow.
	restarted := &counter{}
	s, err = image.Open(image.Config{Dir: "/node1", FS: fs, State: restarted, ClusterID: "c1"})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	index, membership, err := s.LoadLatest(ctx, 90)
	fmt.Println("loaded index", index, string(membership), "sum", restarted.sum, err)

	// An image from another cluster is refused.
	err = s.SetClusterID("c2")
	fmt.Println(errors.Is(err, image.ErrClusterMismatch))
	// Output:
	// wrote image.100 at index 100
	// loaded index 100 voters=1,2,3 sum 42 <nil>
	// true
}
