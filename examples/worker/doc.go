// Command worker is the example worker: it answers the leader's heartbeats
// with its epoch, runs demo query fragments, and cancels a fragment when its
// coordinator frontend restarts, dies or is removed. Its HTTP API is in
// examples/API.md.
//
//	worker -id N -addr HOST:PORT -token T    # or -tls-cert F -tls-key F -tls-ca F, or -insecure
package main
