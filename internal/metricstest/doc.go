// Package metricstest reads Prometheus collectors in tests: each series'
// value by its name and labels, so a test can assert exact values after
// known operations.
package metricstest
