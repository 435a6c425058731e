// Package wire holds what the leader's monitor (package heartbeat) and the
// member's responder (package heartbeat/responder) must do alike on the
// wire: the body size limit, the JSON codec of heartbeat bodies, the body
// of a refusal, and the temporary epoch published for a dead member.
//
// It is internal: the public request and response types are
// responder.Request, responder.Response and responder.FrontendEpoch. The
// package imports neither the catalog nor the journal, owns no goroutines
// and keeps no state.
package wire
