// Package frontend is the example binaries' demo HTTP API (examples/API.md)
// on top of the public frontend package (examples/frontend), which does
// all the wiring: this package adds the /v1/ endpoints, the client API
// tokens (-auth-file), the operator endpoints and the demo queries. The
// metaserver binary and the quickstart run it.
package frontend
