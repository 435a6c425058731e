// Package lint holds no code: its tests check conventions of the whole
// module that the compiler and go vet do not, as Pebble's internal/lint
// does. `go test ./...` runs them with the rest:
//
//   - every tracked .go file is gofmt-clean ([TestGofmt]);
//   - fmt.Errorf never formats an error with %v or %s, which drops it from
//     the chain that errors.Is and errors.As walk; %w keeps it
//     ([TestErrorfWrapsErrors]);
//   - the worker side (examples/internal/worker, heartbeat/responder,
//     heartbeat/epoch) links no catalog or journal package
//     ([TestWorkerSideLinksNoCatalog]).
package lint
