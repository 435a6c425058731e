package journal

import (
	"github.com/metatree/metatree/journal/internal/datadir"
	"github.com/metatree/metatree/journal/internal/membership"
)

// The data dir's files beside the raft store (VERSION, ROLE, MEMBERS) are
// journal/internal/datadir's to read and write.

func (j *Journal) writeMembers(m *membership.Membership) error {
	return datadir.WriteMembers(j.cfg.FS, j.cfg.Dir, m)
}

func (j *Journal) readMembers() (*membership.Membership, error) {
	return datadir.ReadMembers(j.cfg.FS, j.cfg.Dir)
}
