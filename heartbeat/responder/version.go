package responder

import "runtime/debug"

// DefaultVersion is the version a member reports in its heartbeat answers
// when its config names none: the metatree module's version in the
// running binary's build info ("(devel)" for a build from a checkout).
func DefaultVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	const module = "github.com/metatree/metatree"
	if bi.Main.Path == module {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == module {
			return d.Version
		}
	}
	return bi.Main.Version
}
