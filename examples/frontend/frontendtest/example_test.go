package frontendtest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/metatree/metatree/examples/frontend/frontendtest"
)

// Example serves HTTP on an in-memory address, reaches it from another,
// and cuts the link between them.
func Example() {
	n := frontendtest.NewNetwork()
	ln, err := n.Listen("a:1")
	if err != nil {
		panic(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello") })}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close(); <-done }()

	tr := n.Transport("b:1")
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	get := func() (string, error) {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://a:1/", nil)
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	fmt.Println(get())
	n.Partition("a:1", "b:1")
	_, err = get()
	fmt.Println("partitioned:", errors.Is(err, frontendtest.ErrPartitioned))
	n.Heal()
	fmt.Println(get())
	// Output:
	// hello <nil>
	// partitioned: true
	// hello <nil>
}
