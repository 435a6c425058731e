package datadir

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/metatree/metatree/internal/durable"
	"github.com/metatree/metatree/internal/operr"
	"github.com/metatree/metatree/journal/internal/errs"
	"github.com/metatree/metatree/journal/internal/membership"
)

// The names of the data dir's files beside the raft store.
const (
	// VersionFile names the cluster, the join token and the node (see
	// WriteVersion).
	VersionFile = "VERSION"
	// RoleFile holds the node's role: role=follower or role=observer.
	RoleFile = "ROLE"
	// MembersFile is a synced copy of the newest membership (with
	// addresses). The store's membership records are written without
	// fsync (they are rebuilt by replaying the log), but replaying needs
	// the peers' addresses first: a node that joined, or applied a conf
	// change, and lost power before the next synced write must still find
	// its peers.
	MembersFile = "MEMBERS"
)

// ReadKV reads a key=value file (VERSION, ROLE). ok is false when the file
// does not exist.
func ReadKV(fs vfs.FS, path string) (map[string]string, bool, error) {
	f, err := fs.Open(path)
	if err != nil {
		if errors.Is(err, io.EOF) || IsNotExist(err) {
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
			return nil, false, operr.Errorf("journal: %s: %w: line %q is not key=value", path, errs.ErrMalformed, line)
		}
		kv[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	if err := sc.Err(); err != nil {
		return nil, false, operr.Errorf("journal: read %s: %w", path, err)
	}
	return kv, true, nil
}

// WriteKV writes a key=value file durably.
func WriteKV(fs vfs.FS, dir, name string, kvs [][2]string) error {
	var sb strings.Builder
	for _, kv := range kvs {
		fmt.Fprintf(&sb, "%s=%s\n", kv[0], kv[1])
	}
	return WriteFileSynced(fs, dir, name, []byte(sb.String()))
}

// WriteFileSynced replaces dir/name durably (durable.WriteFile).
func WriteFileSynced(fs vfs.FS, dir, name string, data []byte) error {
	if err := durable.WriteFile(fs, dir, name, data); err != nil {
		return operr.Errorf("journal: %w", err)
	}
	return nil
}

// WriteMembers replaces dir's MEMBERS file with m, without its keys.
func WriteMembers(fs vfs.FS, dir string, m *membership.Membership) error {
	return WriteFileSynced(fs, dir, MembersFile, m.Clone().Encode())
}

// ReadMembers reads dir's MEMBERS file (nil, nil when there is none).
func ReadMembers(fs vfs.FS, dir string) (*membership.Membership, error) {
	path := filepath.Join(dir, MembersFile)
	f, err := fs.Open(path)
	if err != nil {
		if IsNotExist(err) {
			return nil, nil
		}
		return nil, operr.Errorf("journal: open %s: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 16<<20))
	if err != nil {
		return nil, operr.Errorf("journal: read %s: %w", path, err)
	}
	m, err := membership.Decode(b)
	if err != nil {
		return nil, operr.Errorf("journal: %s: %w", path, err)
	}
	return m, nil
}

// IsNotExist reports whether err says a file does not exist.
func IsNotExist(err error) bool { return errors.Is(err, iofs.ErrNotExist) }

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

// WriteVersion writes VERSION durably.
func WriteVersion(fs vfs.FS, dir, clusterID, token string, id uint64) error {
	return WriteKV(fs, dir, VersionFile, [][2]string{
		{"cluster_id", clusterID}, {"token", token}, {"node_id", strconv.FormatUint(id, 10)},
	})
}

// VersionNodeID returns VERSION's node_id (0 when it has none).
func VersionNodeID(dir string, ver map[string]string) (uint64, error) {
	v, ok := ver["node_id"]
	if !ok {
		return 0, nil
	}
	id, err := strconv.ParseUint(v, 10, 64)
	if err != nil || id == 0 {
		return 0, operr.Errorf("journal: %s: %w: VERSION node_id %q is not a positive integer", dir, errs.ErrMalformed, v)
	}
	return id, nil
}

// WriteRole writes ROLE durably.
func WriteRole(fs vfs.FS, dir string, r membership.Role) error {
	return WriteKV(fs, dir, RoleFile, [][2]string{{"role", r.String()}})
}
