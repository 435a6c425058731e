// Package logtest collects what code under test logs through a
// *slog.Logger, so a test can assert which warnings were logged.
package logtest
