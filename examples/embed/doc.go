// Command embed is a control plane built on metatree from a module of its
// own, as a downstream service builds one: it imports the public frontend
// package (github.com/metatree/metatree/examples/frontend) and nothing
// internal. It starts three frontends on loopback, writes a typed table
// with a precondition through a follower, sees it on a watch and in a
// linearizable read on another follower, and runs a query that is
// cancelled when a member it runs on restarts.
//
//	go run .   (from examples/embed)
package main
