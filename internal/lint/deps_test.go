package lint

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// workerSide are the packages a worker process links: the worker itself and
// the heartbeat packages it answers the leader with.
var workerSide = []string{
	module + "/examples/internal/worker",
	module + "/heartbeat/responder",
	module + "/heartbeat/epoch",
}

// frontendOnly are the packages only a frontend links: the catalog and the
// journal, their subpackages included.
var frontendOnly = []string{module + "/catalog", module + "/journal"}

// TestWorkerSideLinksNoCatalog lists the dependencies of the worker-side
// packages (`go list -deps`, tests excluded: what the worker binary links)
// and reports every catalog or journal package among them. A worker answers
// heartbeats and cancels fragments; the member records, their replay and
// the monitor are the frontend's (package heartbeat), and linking them
// would link the whole catalog.
func TestWorkerSideLinksNoCatalog(t *testing.T) {
	root := moduleRoot(t)
	for _, pkg := range workerSide {
		cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg)
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr.Bytes())
		}
		deps := strings.Fields(string(out))
		if !slices.Contains(deps, pkg) {
			t.Fatalf("go list -deps %s does not list the package itself: %q", pkg, deps)
		}
		for _, dep := range deps {
			for _, banned := range frontendOnly {
				if dep == banned || strings.HasPrefix(dep, banned+"/") {
					t.Errorf("%s links %s: the worker side must not import the catalog or the journal, directly or through another package", pkg, dep)
				}
			}
		}
	}
}
