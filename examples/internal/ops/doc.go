// Package ops holds the operator endpoints the example binaries share: a
// Prometheus registry of their own with /metrics, /livez, and
// net/http/pprof under /debug/pprof/.
package ops
