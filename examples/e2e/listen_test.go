package e2e

import (
	"net/http"
	"path/filepath"
	"testing"
	"time"
)

// TestListenAdvertiseAndPprof: -listen is the address a metaserver binds,
// -addr the one it tells the cluster (as etcd's listen and advertise URLs);
// -pprof mounts net/http/pprof, which is absent without it.
func TestListenAdvertiseAndPprof(t *testing.T) {
	c := newCluster(t)
	advertised, release := reserveAddrOn(t, "127.0.0.1") // held, so that listen differs
	listen := freeAddr(t)
	release()
	p := c.metaserverAt(1, filepath.Join(c.base, "fe1"), advertised, "-bootstrap", "-listen", listen, "-pprof")
	p.addr = listen // the test reaches it where it binds
	eventually(t, 20*time.Second, "metaserver live on its -listen address", func() bool {
		resp, err := client.Get(p.url("/livez"))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	var members []struct {
		ID   int    `json:"id"`
		Addr string `json:"addr"`
		Kind string `json:"kind"`
	}
	eventually(t, 20*time.Second, "the member list names the node", func() bool {
		members = nil
		return call(t, "GET", p.url("/v1/members"), nil, &members) == http.StatusOK && len(members) > 0
	})
	for _, m := range members {
		if m.ID == 1 && m.Kind == "frontend" && m.Addr != advertised {
			t.Fatalf("member 1 advertises %q, want the -addr %q (it binds %q)", m.Addr, advertised, listen)
		}
	}
	if _, err := client.Get("http://" + advertised + "/livez"); err == nil {
		t.Fatalf("something answers on the advertised address %s: the metaserver must bind only %s", advertised, listen)
	}
	resp, err := client.Get(p.url("/debug/pprof/cmdline"))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /debug/pprof/cmdline with -pprof: %v %v", resp, err)
	}
	resp.Body.Close()

	q := c.metaserver(2, "-bootstrap")
	eventually(t, 20*time.Second, "second metaserver live", func() bool {
		resp, err := client.Get(q.url("/livez"))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	resp, err = client.Get(q.url("/debug/pprof/cmdline"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Fatalf("GET /debug/pprof/cmdline without -pprof: 200, want it unmounted")
	}
}
