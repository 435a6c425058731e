package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binaries holds the paths of the example programs, built once per test
// binary by TestMain.
var binaries struct {
	metaserver string
	worker     string
	metactl    string
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "metatree-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binaries.metaserver = filepath.Join(dir, "metaserver")
	binaries.worker = filepath.Join(dir, "worker")
	binaries.metactl = filepath.Join(dir, "metactl")
	for out, pkg := range map[string]string{
		binaries.metaserver: "github.com/metatree/metatree/examples/metaserver",
		binaries.worker:     "github.com/metatree/metatree/examples/worker",
		binaries.metactl:    "github.com/metatree/metatree/examples/metactl",
	} {
		args := []string{"build", "-o", out}
		if os.Getenv("METATREE_E2E_RACE") != "" {
			// CI runs the end-to-end tests a second time with binaries
			// built with the race detector.
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, pkg)...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n", pkg, err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// proc is one running example binary.
type proc struct {
	t    *testing.T
	name string
	bin  string
	args []string
	addr string
	dir  string // data dir (metaserver only)
	log  *lockedBuffer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// start runs the binary with its arguments; the test's cleanup kills it.
func (p *proc) start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	p.cmd = cmd
	done := make(chan struct{})
	p.done = done
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
}

// kill sends SIGKILL and waits for the process to exit.
func (p *proc) kill() {
	p.signal(syscall.SIGKILL)
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop() error {
	p.signal(syscall.SIGTERM)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	p.mu.Lock()
	p.cmd = nil
	p.mu.Unlock()
}

// dump asks a running process for its goroutine stacks (SIGQUIT: the Go
// runtime writes them to its output and exits) and waits for it to exit,
// so the stacks are in its log.
func (p *proc) dump() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return // exited already
	default:
	}
	p.signal(syscall.SIGQUIT)
}

func (p *proc) url(path string) string { return "http://" + p.addr + path }

// cluster is a set of processes that one test owns.
type cluster struct {
	t     *testing.T
	base  string
	procs []*proc
}

func newCluster(t *testing.T) *cluster {
	c := &cluster{t: t, base: t.TempDir()}
	t.Cleanup(func() {
		if t.Failed() {
			// A member stuck in a wait shows where: the Go runtime answers
			// SIGQUIT with every goroutine's stack, then exits.
			for _, p := range c.procs {
				p.dump()
			}
		}
		for _, p := range c.procs {
			p.kill()
		}
		// Race-enabled binaries report to their output; most are killed
		// rather than exiting, so their exit code cannot tell.
		for _, p := range c.procs {
			if out := p.log.String(); strings.Contains(out, "WARNING: DATA RACE") {
				i := strings.Index(out, "WARNING: DATA RACE")
				t.Errorf("%s reported a data race:\n%s", p.name, tail(out[i:], 6000))
			}
		}
		if t.Failed() {
			dir := t.ArtifactDir()
			for _, p := range c.procs {
				out := p.log.String()
				// The stacks go to the file: the log shown ends where they begin.
				logged, _, _ := strings.Cut(out, "SIGQUIT: quit")
				t.Logf("---- log of %s ----\n%s", p.name, tail(logged, 4000))
				path := filepath.Join(dir, p.name+".log")
				if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
					t.Logf("save the log of %s: %v", p.name, err)
					continue
				}
				t.Logf("full log of %s (goroutine dump included) in %s (kept with go test -artifacts)", p.name, path)
			}
		}
	})
	return c
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// fast timings keep the tests short; the binaries' defaults are for
// production.
// A small compaction margin lets a checkpoint compact the log, so a late
// joiner must restore from an image.
var fastFlags = []string{"-heartbeat-interval", "200ms", "-dead-after", "3", "-stale-after", "5s", "-compact-margin", "10"}

// insecureUnlessCredentials returns -insecure unless args give the member
// a credential: the binaries refuse to start with neither.
func insecureUnlessCredentials(args []string) []string {
	for _, a := range args {
		switch a {
		case "-token", "-tls-cert", "-auth-file":
			return nil
		}
	}
	return []string{"-insecure"}
}

func (c *cluster) metaserver(id int, extra ...string) *proc {
	return c.metaserverAt(id, filepath.Join(c.base, fmt.Sprintf("fe%d", id)), freeAddr(c.t), extra...)
}

// metaserverAt starts metaserver id on the data dir dir, serving addr.
func (c *cluster) metaserverAt(id int, dir, addr string, extra ...string) *proc {
	args := append([]string{"-id", fmt.Sprint(id), "-dir", dir, "-addr", addr}, fastFlags...)
	args = append(args, extra...)
	args = append(args, insecureUnlessCredentials(extra)...)
	p := &proc{t: c.t, name: fmt.Sprintf("metaserver-%d", id), bin: binaries.metaserver, args: args, addr: addr, dir: dir, log: &lockedBuffer{}}
	c.procs = append(c.procs, p)
	p.start()
	return p
}

// restart starts a stopped metaserver again from its data dir, without
// -bootstrap or -join.
func (c *cluster) restart(p *proc) {
	var args []string
	for i := 0; i < len(p.args); i++ {
		switch p.args[i] {
		case "-bootstrap":
			continue
		case "-join", "-role":
			i++
			continue
		}
		args = append(args, p.args[i])
	}
	p.args = args
	p.start()
}

func (c *cluster) worker(id int, extra ...string) *proc {
	return c.workerAt(id, freeAddr(c.t), extra...)
}

// workerAt starts worker id serving addr.
func (c *cluster) workerAt(id int, addr string, extra ...string) *proc {
	args := append([]string{"-id", fmt.Sprint(id), "-addr", addr}, extra...)
	args = append(args, insecureUnlessCredentials(extra)...)
	p := &proc{t: c.t, name: fmt.Sprintf("worker-%d", id), bin: binaries.worker, args: args, addr: addr, log: &lockedBuffer{}}
	c.procs = append(c.procs, p)
	p.start()
	return p
}

var client = &http.Client{Timeout: 15 * time.Second}

// call sends a JSON request and decodes a JSON answer into out (when not
// nil). It returns the status code.
func call(t *testing.T, method, url string, body any, out any) int {
	t.Helper()
	return callWith(t, client, method, url, body, out)
}

// callWith is call through the given client.
func callWith(t *testing.T, client *http.Client, method, url string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	// A success fills out; an error fills it only when the caller asked for
	// the error body.
	_, wantsError := out.(*apiError)
	success := resp.StatusCode >= 200 && resp.StatusCode < 300
	if out != nil && len(data) > 0 && (success || wantsError) {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: status %d, body %q is not JSON: %v", method, url, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode
}

// eventually polls cond until it holds or the deadline passes. The cluster
// runs in other processes, so polling their HTTP API is how this test
// observes their events.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out after %v waiting for %s", within, what)
		case <-tick.C:
		}
	}
}

type status struct {
	ID        uint64 `json:"id"`
	ClusterID string `json:"cluster_id"`
	Epoch     string `json:"epoch"`
	Role      string `json:"role"`
	State     string `json:"state"`
	Leader    uint64 `json:"leader"`
	Term      uint64 `json:"term"`
	Applied   uint64 `json:"applied"`
	Committed uint64 `json:"committed"`
	Image     uint64 `json:"image"`
	Stale     bool   `json:"stale"`
}

func getStatus(t *testing.T, p *proc) (status, bool) {
	var st status
	code := call(t, "GET", p.url("/v1/status"), nil, &st)
	return st, code == http.StatusOK
}

// waitLeader waits until every given server agrees on one leader and
// returns it.
func (c *cluster) waitLeader(within time.Duration, servers ...*proc) *proc {
	c.t.Helper()
	var leader *proc
	eventually(c.t, within, "an agreed leader", func() bool {
		var id uint64
		for _, p := range servers {
			st, ok := getStatus(c.t, p)
			if !ok || st.Leader == 0 || (id != 0 && st.Leader != id) {
				return false
			}
			id = st.Leader
		}
		for _, p := range servers {
			if st, _ := getStatus(c.t, p); st.ID == id && st.State == "leader" {
				leader = p
				return true
			}
		}
		return false
	})
	return leader
}

type nodeView struct {
	ID       uint64         `json:"id"`
	Path     string         `json:"path"`
	Name     string         `json:"name"`
	Kind     string         `json:"kind"`
	Attrs    map[string]any `json:"attrs"`
	Created  uint64         `json:"created"`
	Modified uint64         `json:"modified"`
	Children []string       `json:"children"`
}

type apiError struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

type queryView struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Cause string `json:"cause"`
}

type fragmentView struct {
	Query            string `json:"query"`
	Coordinator      uint64 `json:"coordinator"`
	CoordinatorEpoch string `json:"coordinator_epoch"`
	State            string `json:"state"`
	Cause            string `json:"cause"`
}

type memberView struct {
	ID     uint64 `json:"id"`
	Addr   string `json:"addr"`
	Kind   string `json:"kind"`
	Role   string `json:"role"`
	Epoch  string `json:"epoch"`
	Status string `json:"status"`
}

// pause stops (SIGSTOP) or resumes (SIGCONT) the process without ending it.
func (p *proc) pause(on bool) {
	p.t.Helper()
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		p.t.Fatalf("%s is not running", p.name)
	}
	sig := syscall.SIGCONT
	if on {
		sig = syscall.SIGSTOP
	}
	if err := cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("%s: %v", p.name, err)
	}
}
