// Command metaserver is the example frontend: a process that holds the
// whole catalog in memory, replicated through a raft journal in Pebble, and
// serves the HTTP API of examples/API.md. It runs the public frontend
// package (examples/frontend) with the demo API as its handler.
//
//	metaserver -id N -dir DIR -addr HOST:PORT -bootstrap
//	metaserver -id N -dir DIR -addr HOST:PORT -join HOST:PORT [-role follower|observer]
//	metaserver -id N -dir DIR -addr HOST:PORT            # restart from DIR
//	metaserver -id N -dir DIR -addr HOST:PORT -force-new-cluster
//
// Each also needs a credential (-token, -tls-cert/-tls-key/-tls-ca or
// -auth-file) or -insecure; without any it exits with status 2.
package main
