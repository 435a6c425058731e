package catalog

// Node is a copy of one node of the tree; it is safe to keep and to modify
// (except the nodes in watch events, which are shared between watchers and
// must be treated as read-only).
type Node struct {
	ID       uint64 // assigned at apply time from the tree's counter; the root is 1
	Parent   uint64 // the parent's id; 0 for the root
	Name     string // unique among its siblings; "" for the root
	Path     string // "/db1/orders"; "/" for the root
	Kind     string // "" for the root
	Attrs    map[string]Value
	Created  uint64 // log index of the batch that created it
	Modified uint64 // log index of the batch that last changed it (attributes, name or parent)
}
