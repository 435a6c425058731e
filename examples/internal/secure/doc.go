// Package secure is the example binaries' security wiring: the TLS flags
// (-tls-cert, -tls-key, -tls-ca) turned into a listener that speaks only
// TLS and a client for member traffic, and the client API's bearer tokens
// (-auth-file) with their roles, as examples/API.md describes them.
package secure
