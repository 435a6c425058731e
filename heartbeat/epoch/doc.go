// Package epoch holds what both sides of the heartbeat share: a process's
// start epoch (Epoch, New, Parse) and the member transitions derived from
// epochs (Event, EventType, Kind).
//
// Contract:
//   - An Epoch is a comparable 16-byte value; the zero Epoch is "unknown".
//     A real epoch is a version-7 UUID that a process draws once per start
//     (New); a temporary epoch (version 8) is what the cluster publishes for
//     a member it declared dead, and never equals a real one. Real epochs
//     of one member are ordered by their start (StartedBefore).
//   - Its text form (String, Parse, MarshalText, UnmarshalText) is the
//     canonical UUID form, the empty string for the zero epoch; it is what
//     member records in the catalog and heartbeat bodies carry.
//   - An Event is one transition of a member (added, restarted, dead, alive,
//     removed), delivered in log order on a frontend (package heartbeat) and
//     in list order on a worker (package heartbeat/responder); package cancel
//     consumes them.
//
// The package imports neither the catalog nor the journal, so a worker that
// links only heartbeat/responder and cancel links neither. It owns no
// goroutines and keeps no state: every function is safe for concurrent use.
package epoch
