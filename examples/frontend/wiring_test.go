package frontend

import (
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/image"
	"github.com/metatree/metatree/journal"
)

// The library's packages fit together with no adapter: image and journal
// import neither each other nor heartbeat, so the checks live here, where
// all three are imported. A signature that drifts fails the build.
var (
	_ heartbeat.Journal     = (*journal.Journal)(nil)
	_ image.Journal         = (*journal.Journal)(nil)
	_ journal.Snapshots     = (*image.Store)(nil)
	_ journal.HaltSource    = (*image.Store)(nil)
	_ journal.FetchReleaser = (*image.Store)(nil)
)
