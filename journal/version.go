package journal

import (
	"github.com/metatree/metatree/internal/operr"
	"github.com/metatree/metatree/journal/internal/datadir"
)

// checkNodeID refuses a dir whose VERSION names another node.
func checkNodeID(dir string, ver map[string]string, id uint64) error {
	have, err := datadir.VersionNodeID(dir, ver)
	if err != nil {
		return err
	}
	if have != 0 && have != id {
		return operr.Errorf("journal: %w: %s is the data dir of node %d, not of node %d", ErrClusterMismatch, dir, have, id)
	}
	return nil
}
