// Package worker wires a metatree worker: a process that runs query
// fragments, answers the leader's heartbeats with its epoch, and cancels a
// fragment when its coordinator frontend restarts, dies or is removed.
package worker
