package journal

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/metatree/metatree/internal/durable"
	"github.com/metatree/metatree/internal/operr"
)

// The data dir's files beside the raft store: VERSION and ROLE (key=value
// files) and MEMBERS (the newest membership), each replaced durably.

// readKV reads a key=value file (VERSION, ROLE). ok is false when the file
// does not exist.
func readKV(fs vfs.FS, path string) (map[string]string, bool, error) {
	f, err := fs.Open(path)
	if err != nil {
		if errors.Is(err, io.EOF) || isNotExist(err) {
			return nil, false, nil
		}
		return nil, false, operr.Errorf("journal: open %s: %w", path, err)
	}
	defer f.Close()
	kv := map[string]string{}
	sc := bufio.NewScanner(io.LimitReader(f, 64<<10))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, false, operr.Errorf("journal: %s: %w: line %q is not key=value", path, ErrMalformed, line)
		}
		kv[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	if err := sc.Err(); err != nil {
		return nil, false, operr.Errorf("journal: read %s: %w", path, err)
	}
	return kv, true, nil
}

// writeKV writes a key=value file durably.
func writeKV(fs vfs.FS, dir, name string, kvs [][2]string) error {
	var sb strings.Builder
	for _, kv := range kvs {
		fmt.Fprintf(&sb, "%s=%s\n", kv[0], kv[1])
	}
	return writeFileSynced(fs, dir, name, []byte(sb.String()))
}

// writeFileSynced replaces dir/name durably (durable.WriteFile).
func writeFileSynced(fs vfs.FS, dir, name string, data []byte) error {
	if err := durable.WriteFile(fs, dir, name, data); err != nil {
		return operr.Errorf("journal: %w", err)
	}
	return nil
}

// membersFile is a synced copy of the newest membership (with addresses).
// The store's membership records are written without fsync (they are
// rebuilt by replaying the log), but replaying needs the peers' addresses
// first: a node that joined, or applied a conf change, and lost power
// before the next synced write must still find its peers.
const membersFile = "MEMBERS"

func (j *Journal) writeMembers(m *membership) error {
	c := m.clone()
	c.Keys = nil
	return writeFileSynced(j.cfg.FS, j.cfg.Dir, membersFile, c.encode())
}

func (j *Journal) readMembers() (*membership, error) { return readMembersFile(j.cfg.FS, j.cfg.Dir) }

// readMembersFile reads dir's MEMBERS file (nil, nil when there is none).
func readMembersFile(fs vfs.FS, dir string) (*membership, error) {
	path := filepath.Join(dir, membersFile)
	f, err := fs.Open(path)
	if err != nil {
		if isNotExist(err) {
			return nil, nil
		}
		return nil, operr.Errorf("journal: open %s: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 16<<20))
	if err != nil {
		return nil, operr.Errorf("journal: read %s: %w", path, err)
	}
	m, err := decodeMembership(b)
	if err != nil {
		return nil, operr.Errorf("journal: %s: %w", path, err)
	}
	return m, nil
}

func isNotExist(err error) bool { return errors.Is(err, iofs.ErrNotExist) }
