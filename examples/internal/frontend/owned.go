package frontend

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/internal/httpjson"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/epoch"
)

// Owned nodes and epoch fences in the HTTP API (examples/API.md, State
// tied to a member's epoch): a create's "owner" and "on_owner_lost", a
// write's "if_epoch", and the owner a node view shows.

// memberEpoch is a member's epoch as a write body names it: a create's
// "owner" (without "epoch": the epoch the member runs with when the batch
// applies) or a write's "if_epoch".
type memberEpoch struct {
	Node  uint64 `json:"node"`
	Epoch string `json:"epoch"`
}

// ownerJSON is a node view's "owner": the member whose epoch owns the node.
type ownerJSON struct {
	Node  uint64 `json:"node"`
	Epoch string `json:"epoch"`
}

// On_owner_lost values: what becomes of an owned node when its epoch ends.
const (
	onLostDelete = "delete" // the default: deleted with its subtree
	onLostOrphan = "orphan" // kept, with the attribute catalog.OrphanedAttr
)

// epochChecks are the operations that tie a write to members' epochs, put
// first in its batch: the if_epoch fence and one check for each owner (a
// heartbeat.Fence of the record, which holds only while the member is
// alive with the epoch when the batch applies). A failed batch whose
// failing operation is one of them is answered by what it checked.
type epochChecks struct {
	ops  []catalog.Op
	what []epochCheck // what ops[i] checks
	seen map[memberEpoch]bool
}

type epochCheck struct {
	field string // "if_epoch", or the owner's field, "ops[2].owner"
	m     memberEpoch
	owner bool
}

// ifEpoch adds the write's if_epoch fence.
func (c *epochChecks) ifEpoch(m *memberEpoch) error {
	e, err := parseMemberEpoch("if_epoch", m)
	if err != nil {
		return err
	}
	if e.IsZero() {
		return httpjson.Errorf(http.StatusBadRequest, "bad_request", "if_epoch: an epoch is required")
	}
	c.add(epochCheck{field: "if_epoch", m: *m}, heartbeat.Fence(m.Node, e))
	return nil
}

// owner adds the check of a create's owner, named in field, and returns
// the catalog owner that ties the node to the member's epoch as it is
// when the batch applies. onLost is the create's "on_owner_lost".
func (f *Frontend) owner(c *epochChecks, field string, m *memberEpoch, onLost string) (catalog.Owner, error) {
	e, err := parseMemberEpoch(field, m)
	if err != nil {
		return catalog.Owner{}, err
	}
	orphan := false
	switch onLost {
	case "", onLostDelete:
	case onLostOrphan:
		orphan = true
	default:
		return catalog.Owner{}, httpjson.Errorf(http.StatusBadRequest, "bad_request", "%s: on_owner_lost %q: want %q or %q", strings.TrimSuffix(field, ".owner"), onLost, onLostDelete, onLostOrphan)
	}
	if e.IsZero() {
		// Without an epoch the check holds for any while the member is
		// alive, also before its first heartbeat answer, when the record
		// has none yet and the node would go at that answer. A member that
		// this frontend sees so is refused here; one that has answered
		// since is asked again.
		if rec, ok := f.members.Member(m.Node); ok && rec.Status == heartbeat.StatusAlive && rec.Epoch.IsZero() {
			return catalog.Owner{}, httpjson.Errorf(http.StatusConflict, "owner_not_current", "%s: member %d has not answered a heartbeat yet: it has no epoch to own nodes", field, m.Node)
		}
	}
	check, owner := heartbeat.OwnerOf(m.Node, e, orphan)
	c.add(epochCheck{field: field, m: *m, owner: true}, check)
	return owner, nil
}

func (c *epochChecks) add(what epochCheck, op catalog.Op) {
	key := what.m
	if c.seen[key] {
		return // the same check, once: for another owner or the fence
	}
	if c.seen == nil {
		c.seen = map[memberEpoch]bool{}
	}
	c.seen[key] = true
	c.ops = append(c.ops, op)
	c.what = append(c.what, what)
}

// parseMemberEpoch checks a member's epoch as a body names it.
func parseMemberEpoch(field string, m *memberEpoch) (epoch.Epoch, error) {
	if m.Node == 0 {
		return epoch.Epoch{}, httpjson.Errorf(http.StatusBadRequest, "bad_request", "%s: a member needs a non-zero \"node\"", field)
	}
	e, err := epoch.Parse(m.Epoch)
	if err != nil {
		return epoch.Epoch{}, httpjson.Errorf(http.StatusBadRequest, "bad_request", "%s: %v", field, err)
	}
	if e.Temporary() {
		// The epoch GET /v1/members publishes for a dead member: never one
		// that is current.
		return epoch.Epoch{}, httpjson.Errorf(http.StatusConflict, ownerOrConflict(field), "%s: %s is the temporary epoch of a member declared dead, not a current one", field, m.Epoch)
	}
	return e, nil
}

// ownerOrConflict is the error code of a failed epoch check named field.
func ownerOrConflict(field string) string {
	if field == "if_epoch" {
		return "conflict"
	}
	return "owner_not_current"
}

// write commits b, whose first operations are c's, and maps its error:
// a failed check of c is answered by what it checked (an owner's epoch
// not current 409 owner_not_current, an unknown owner 404 not_found, the
// if_epoch fence 409 conflict); any other error as apiError does.
func (f *Frontend) write(r *http.Request, c *epochChecks, b catalog.Batch) (*catalog.Result, error) {
	res, err := f.Write(r.Context(), b)
	var oe *catalog.OpError
	if err == nil || !errors.As(err, &oe) {
		return res, apiError(err)
	}
	if oe.Op >= len(c.what) {
		if n := len(c.what); n > 0 && err == error(oe) {
			// Name the operation as the client counts them.
			shifted := *oe
			shifted.Op -= n
			err = &shifted
		}
		return res, apiError(err)
	}
	if !errors.Is(err, catalog.ErrConflict) {
		return res, apiError(err)
	}
	w := c.what[oe.Op]
	// The batch applied (and failed) here: this frontend's catalog holds
	// the record as the check saw it, or a later one.
	why := f.whyNotCurrent(w.m)
	if w.owner {
		if _, ok := f.tree.Get(heartbeat.MemberPath(w.m.Node)); !ok {
			return res, httpjson.Errorf(http.StatusNotFound, "not_found", "%s: no member %d", w.field, w.m.Node)
		}
	}
	return res, httpjson.Errorf(http.StatusConflict, ownerOrConflict(w.field), "%s: %s (at index %d)", w.field, why, res.Index)
}

// whyNotCurrent says why m is not a current epoch, as the catalog shows
// the member now.
func (f *Frontend) whyNotCurrent(m memberEpoch) string {
	rec, ok := f.members.Member(m.Node)
	switch {
	case !ok:
		return fmt.Sprintf("no member %d", m.Node)
	case rec.Status != heartbeat.StatusAlive:
		return fmt.Sprintf("member %d is %s", m.Node, rec.Status)
	case m.Epoch != "":
		return fmt.Sprintf("member %d runs epoch %s, not %s", m.Node, rec.Epoch, m.Epoch)
	}
	return fmt.Sprintf("member %d's epoch is not current", m.Node)
}

// ownerView returns the owner and on_owner_lost of the node at path for
// its view: the member whose epoch owns it. A node owned by anything but a
// member's record (a library user's owner) shows none.
func (f *Frontend) ownerView(path string) (*ownerJSON, string) {
	o, ok := f.tree.Owned(path)
	if !ok {
		return nil, ""
	}
	name, found := strings.CutPrefix(o.Path, heartbeat.MembersPath+"/")
	id, err := strconv.ParseUint(name, 10, 64)
	if !found || err != nil {
		return nil, ""
	}
	rec, ok := f.members.Member(id)
	if !ok || rec.Modified != o.Version {
		// The membership has not yet followed the catalog to this
		// version: the epoch is the record's own.
		n, ok := f.tree.Get(o.Path)
		if !ok || n.Modified != o.Version {
			return nil, "" // the owner changed since: so did the node
		}
		rec.Epoch, _ = epoch.Parse(n.Attrs["epoch"].Str())
	}
	onLost := onLostDelete
	if o.Orphan {
		onLost = onLostOrphan
	}
	return &ownerJSON{Node: id, Epoch: rec.Epoch.String()}, onLost
}
