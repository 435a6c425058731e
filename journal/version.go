package journal

import (
	"strconv"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/metatree/metatree/internal/operr"
)

// The VERSION file names the cluster the data dir belongs to, its join
// token and the id of the node it is the dir of:
//
//	cluster_id=<uuid>
//	token=<join token>
//	node_id=<raft id>
//
// node_id lets a restart refuse a dir started under another -id, and
// offline tools compare ROLE with the node's role in the membership. A dir
// written before node_id existed has none, and is accepted as it is.

// writeVersion writes VERSION durably.
func writeVersion(fs vfs.FS, dir, clusterID, token string, id uint64) error {
	return writeKV(fs, dir, "VERSION", [][2]string{
		{"cluster_id", clusterID}, {"token", token}, {"node_id", strconv.FormatUint(id, 10)},
	})
}

// versionNodeID returns VERSION's node_id (0 when it has none).
func versionNodeID(dir string, ver map[string]string) (uint64, error) {
	v, ok := ver["node_id"]
	if !ok {
		return 0, nil
	}
	id, err := strconv.ParseUint(v, 10, 64)
	if err != nil || id == 0 {
		return 0, operr.Errorf("journal: %s: %w: VERSION node_id %q is not a positive integer", dir, ErrMalformed, v)
	}
	return id, nil
}

// checkNodeID refuses a dir whose VERSION names another node.
func checkNodeID(dir string, ver map[string]string, id uint64) error {
	have, err := versionNodeID(dir, ver)
	if err != nil {
		return err
	}
	if have != 0 && have != id {
		return operr.Errorf("journal: %w: %s is the data dir of node %d, not of node %d", ErrClusterMismatch, dir, have, id)
	}
	return nil
}
