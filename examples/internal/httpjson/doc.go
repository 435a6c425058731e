// Package httpjson holds the small JSON-over-HTTP helpers the example
// binaries share: bounded request bodies, JSON answers, and the error shape
// of examples/API.md ({"error": code, "message": text}).
package httpjson
