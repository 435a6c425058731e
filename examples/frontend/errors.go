package frontend

import (
	"errors"
	"strings"

	"github.com/metatree/metatree/heartbeat"
)

var (
	// ErrNoCredentials is Start's refusal of a frontend given neither a
	// token nor TLS files, and not told Insecure.
	ErrNoCredentials = errors.New("frontend: no credentials")
	// ErrInvalidConfig is a Config that Start cannot run; the error names
	// the field.
	ErrInvalidConfig = errors.New("frontend: invalid config")
	// ErrReserved is a write under heartbeat's /_cluster: the member
	// records change only through the membership calls and heartbeats.
	ErrReserved = errors.New("frontend: reserved for the cluster's own records")
	// ErrRecordLeft is a frontend removed from raft whose member record
	// could not be removed yet; the next leader removes it.
	ErrRecordLeft = errors.New("frontend: member record left for the next leader")
	// ErrNotReady is Ready's answer while the frontend should take no
	// traffic; the error says why.
	ErrNotReady = errors.New("frontend: not ready")
)

// Reserved reports whether path lies under the cluster's own records
// (heartbeat.ClusterPath), which [Frontend.Write] refuses.
func Reserved(path string) bool {
	return path == heartbeat.ClusterPath || strings.HasPrefix(path, heartbeat.ClusterPath+"/")
}
