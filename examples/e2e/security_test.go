package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// authCall sends a request with a bearer token (none when empty) and
// returns the status and body. A streaming answer (a watch) is cut off
// after its header.
func authCall(t *testing.T, method, url, token, body string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	if strings.HasPrefix(req.URL.Path, "/v1/watch") && resp.StatusCode == http.StatusOK {
		return resp.StatusCode, nil
	}
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// TestAuthRoles: with -auth-file, each role gets exactly its endpoints:
// every endpoint of examples/API.md is called without a token and with
// each role's; a role too weak is answered 403 forbidden, no known token
// 401 unauthenticated, and a strong enough one gets past authentication.
// /livez, /readyz and /metrics need no token.
func TestAuthRoles(t *testing.T) {
	c := newCluster(t)
	authFile := filepath.Join(c.base, "auth")
	if err := os.WriteFile(authFile, []byte("# token role\nr0-read read\nw0-write write\n  # admin below\na0-admin admin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fe := c.metaserver(1, "-bootstrap", "-auth-file", authFile)
	eventually(t, 15*time.Second, "a leader", func() bool {
		code, body := authCall(t, "GET", fe.url("/v1/status"), "r0-read", "")
		var st status
		return code == http.StatusOK && json.Unmarshal(body, &st) == nil && st.State == "leader"
	})
	if strings.Contains(fe.log.String(), "r0-read") || strings.Contains(fe.log.String(), "a0-admin") {
		t.Fatal("a token appears in the log")
	}

	const (
		none = iota
		read
		write
		admin
	)
	tokens := []string{none: "", read: "r0-read", write: "w0-write", admin: "a0-admin"}
	endpoints := []struct {
		method, path, body string
		need               int
	}{
		{"GET", "/livez", "", none},
		{"GET", "/readyz", "", none},
		{"GET", "/metrics", "", none},
		{"GET", "/v1/status", "", read},
		{"GET", "/v1/catalog/db1", "", read},
		{"GET", "/v1/find?kind=table&attr=a&value=b", "", read},
		{"GET", "/v1/watch?prefix=/", "", read},
		{"GET", "/v1/members", "", read},
		{"GET", "/v1/queries/q1", "", read},
		{"PUT", "/v1/catalog/db1", `{"kind":"database"}`, write},
		{"DELETE", "/v1/catalog/db1", "", write},
		{"POST", "/v1/txn", `{"ops":[{"op":"check","path":"/"}]}`, write},
		{"POST", "/v1/queries", `{"id":"q1","workers":[],"duration_ms":1}`, write},
		{"POST", "/v1/members", `{"id":0}`, admin},
		{"DELETE", "/v1/members/99", "", admin},
		{"POST", "/v1/members/99/promote", "", admin},
		{"POST", "/v1/leader", `{"id":99}`, admin},
		{"POST", "/v1/checkpoint", "", admin},
	}
	for _, ep := range endpoints {
		for role, token := range tokens {
			name := fmt.Sprintf("%s %s as %s", ep.method, ep.path, []string{"nobody", "read", "write", "admin"}[role])
			t.Run(name, func(t *testing.T) {
				code, body := authCall(t, ep.method, fe.url(ep.path), token, ep.body)
				switch {
				case role < ep.need && role == none:
					if code != http.StatusUnauthorized || !strings.Contains(string(body), `"unauthenticated"`) {
						t.Fatalf("status %d %s, want 401 unauthenticated", code, body)
					}
				case role < ep.need:
					if code != http.StatusForbidden || !strings.Contains(string(body), `"forbidden"`) {
						t.Fatalf("status %d %s, want 403 forbidden", code, body)
					}
				default:
					if code == 0 || code == http.StatusUnauthorized || code == http.StatusForbidden {
						t.Fatalf("status %d %s, want past authentication", code, body)
					}
				}
			})
		}
	}
	code, _ := authCall(t, "GET", fe.url("/v1/status"), "a0-admin-but-longer", "")
	if code != http.StatusUnauthorized {
		t.Fatalf("an unknown token: status %d, want 401", code)
	}
}

// TestForgedHeartbeat: a worker started with -token refuses a heartbeat
// that has the right cluster id and a high term but no token, and keeps
// its fragments running; the same heartbeat with the token is honoured
// (its empty frontend list removes the coordinator, which cancels them).
func TestForgedHeartbeat(t *testing.T) {
	c := newCluster(t)
	fe := c.metaserver(1, "-bootstrap", "-token", "join-secret")
	c.waitLeader(15*time.Second, fe)
	w := c.worker(101, "-token", "join-secret")
	if code := call(t, "POST", fe.url("/v1/members"), map[string]any{"id": 101, "addr": w.addr, "kind": "worker"}, nil); code != http.StatusOK {
		t.Fatalf("adding the worker: status %d", code)
	}
	const q = "q-forged"
	eventually(t, 15*time.Second, "the query's fragment running", func() bool {
		call(t, "POST", fe.url("/v1/queries"), map[string]any{"id": q, "workers": []int{101}, "duration_ms": 120000}, nil)
		return fragmentState(t, w, q) == "running"
	})
	st, _ := getStatus(t, fe)
	forged, err := json.Marshal(map[string]any{"cluster": st.ClusterID, "leader": 1, "term": uint64(1) << 40, "member": 101,
		"round": 1, "version": uint64(1) << 40, "frontends": []any{}})
	if err != nil {
		t.Fatal(err)
	}
	beat := func(token string) int {
		req, err := http.NewRequest("POST", w.url("/_heartbeat"), strings.NewReader(string(forged)))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("X-Metatree-Token", token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := beat(""); code != http.StatusForbidden {
		t.Fatalf("forged heartbeat without a token: status %d, want 403", code)
	}
	if code := beat("wrong"); code != http.StatusForbidden {
		t.Fatalf("forged heartbeat with a wrong token: status %d, want 403", code)
	}
	if s := fragmentState(t, w, q); s != "running" {
		t.Fatalf("after refused heartbeats the fragment is %q, want running", s)
	}
	var ws struct {
		Term uint64 `json:"term"`
	}
	call(t, "GET", w.url("/v1/status"), nil, &ws)
	if ws.Term >= 1<<40 {
		t.Fatalf("a refused heartbeat raised the worker's term to %d", ws.Term)
	}
	if code := beat("join-secret"); code != http.StatusOK {
		t.Fatalf("heartbeat with the token: status %d, want 200", code)
	}
	eventually(t, 5*time.Second, "the fragment cancelled by the honoured heartbeat", func() bool {
		return fragmentState(t, w, q) == "cancelled"
	})
}

// TestBinariesRefuseToStartWithoutCredentials: a metaserver or a worker
// given neither -token, TLS nor -auth-file exits 2 with a message naming
// those flags and -insecure; told -insecure, it starts.
func TestBinariesRefuseToStartWithoutCredentials(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		bin   string
		args  []string
		flags []string
	}{
		{"metaserver", binaries.metaserver, []string{"-id", "1", "-dir", filepath.Join(dir, "fe1"), "-addr", freeAddr(t), "-bootstrap"},
			[]string{"-token", "-tls-cert", "-auth-file", "-insecure"}},
		{"worker", binaries.worker, []string{"-id", "11", "-addr", freeAddr(t)},
			[]string{"-token", "-tls-cert", "-insecure"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &proc{t: t, name: tc.name, bin: tc.bin, args: tc.args, log: &lockedBuffer{}}
			p.start()
			t.Cleanup(p.kill)
			select {
			case <-p.done:
			case <-time.After(20 * time.Second):
				t.Fatalf("%s without credentials kept running:\n%s", tc.name, p.log.String())
			}
			var exit interface{ ExitCode() int }
			if p.err == nil || !errors.As(p.err, &exit) || exit.ExitCode() != 2 {
				t.Fatalf("%s without credentials: exit %v, want status 2; output:\n%s", tc.name, p.err, p.log.String())
			}
			for _, f := range tc.flags {
				if !strings.Contains(p.log.String(), f) {
					t.Fatalf("%s's refusal does not name %s:\n%s", tc.name, f, p.log.String())
				}
			}

			addr := freeAddr(t)
			args := append([]string{}, tc.args...)
			for i := range args {
				if args[i] == "-addr" {
					args[i+1] = addr
				}
			}
			ok := &proc{t: t, name: tc.name + "-insecure", bin: tc.bin, args: append(args, "-insecure"), addr: addr, log: &lockedBuffer{}}
			ok.start()
			t.Cleanup(ok.kill)
			eventually(t, 20*time.Second, tc.name+" -insecure serving", func() bool {
				return call(t, "GET", ok.url("/v1/status"), nil, nil) == http.StatusOK
			})
		})
	}
}

// TestForgedHeartbeatLapsesOnAnInsecureWorker: an -insecure worker cannot
// refuse a forged heartbeat (the cluster id and a huge term and version,
// an empty frontend list), which cancels its fragments; but once the forger
// is silent for -stale-after, the worker follows the real leader again: its
// term is the leader's, and a new query runs on it.
func TestForgedHeartbeatLapsesOnAnInsecureWorker(t *testing.T) {
	c := newCluster(t)
	fe := c.metaserver(1, "-bootstrap")
	c.waitLeader(15*time.Second, fe)
	w := c.worker(101, "-stale-after", "2s")
	if code := call(t, "POST", fe.url("/v1/members"), map[string]any{"id": 101, "addr": w.addr, "kind": "worker"}, nil); code != http.StatusOK {
		t.Fatalf("adding the worker: status %d", code)
	}
	eventually(t, 15*time.Second, "the first query's fragment running", func() bool {
		call(t, "POST", fe.url("/v1/queries"), map[string]any{"id": "q1", "workers": []int{101}, "duration_ms": 120000}, nil)
		return fragmentState(t, w, "q1") == "running"
	})
	st, _ := getStatus(t, fe)
	forged := fmt.Sprintf(`{"cluster":%q,"leader":66,"term":%d,"member":101,"round":1,"version":%d,"frontends":[]}`, st.ClusterID, uint64(1)<<40, uint64(1)<<40)
	resp, err := client.Post(w.url("/_heartbeat"), "application/json", strings.NewReader(forged))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("forged heartbeat on an -insecure worker: status %d, want 200", resp.StatusCode)
	}
	var ws struct {
		Term uint64 `json:"term"`
	}
	call(t, "GET", w.url("/v1/status"), nil, &ws)
	if ws.Term != 1<<40 {
		t.Fatalf("worker term %d after the forged heartbeat, want %d", ws.Term, uint64(1)<<40)
	}
	eventually(t, 5*time.Second, "the fragment cancelled by the forged list", func() bool {
		return fragmentState(t, w, "q1") == "cancelled"
	})

	eventually(t, 20*time.Second, "the worker back on the real leader's term", func() bool {
		call(t, "GET", w.url("/v1/status"), nil, &ws)
		st, _ := getStatus(t, fe)
		return ws.Term == st.Term
	})
	eventually(t, 15*time.Second, "a new query's fragment running", func() bool {
		call(t, "POST", fe.url("/v1/queries"), map[string]any{"id": "q2", "workers": []int{101}, "duration_ms": 120000}, nil)
		return fragmentState(t, w, "q2") == "running"
	})
}
