// Package responder is the member side of the heartbeat: a Responder, an
// http.Handler mounted at Path on every member (worker or frontend), that
// answers the leader's heartbeats and turns the frontend lists they carry
// into events (epoch.Event) for the member's own work.
//
// Contract:
//   - It answers with the member's current epoch: Config.Epoch, or
//     a fresh one once a heartbeat says the log ended the current one
//     (Request.Ended).
//   - It checks a heartbeat's credential (TokenHeader, a peer certificate)
//     before anything of it is looked at, and refuses a lower raft term than
//     it has seen, before taking any lock, while that term's sender keeps
//     beating; after StaleAfter of silence a lower term is accepted again.
//   - It follows one cluster at a time: a heartbeat whose cluster replaced
//     the one it follows (Request.Replaced: a restore of its backup) moves
//     it to that cluster at once, whatever the terms, and the replaced
//     clusters' heartbeats are refused from then on, until the process
//     restarts.
//   - From the leader's frontend lists it emits, in order and one call at a
//     time, an event when a frontend was added, restarted, was declared dead,
//     came back or was removed. Silence is never evidence: a member that
//     hears from no leader (Stale) emits nothing.
//   - Request, Response and FrontendEpoch are the JSON bodies of the
//     protocol; package heartbeat's monitor sends the requests.
//
// Goroutines: a Responder owns none. ServeHTTP runs on the HTTP server's
// goroutine and calls Config.OnEvent there, under the responder's
// lock, before it answers. Every method is safe for concurrent use.
//
// The package imports neither the catalog nor the journal: a worker links
// it without them (internal/lint's TestWorkerSideLinksNoCatalog checks
// examples/internal/worker).
//
// Wiring on a worker:
//
//	frags := cancel.New(cancel.Config{})
//	resp, err := responder.New(responder.Config{
//		ID: id, Epoch: epoch.New(),
//		OnEvent: func(ev epoch.Event) { frags.Apply(ev) },
//	})
//	mux.Handle(responder.Path, resp)
package responder
