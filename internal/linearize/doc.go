// Package linearize holds the porcupine model the module's linearizability
// tests check their histories against: a register per key.
package linearize
