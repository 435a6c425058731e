package operr

import (
	"fmt"
	"strings"
)

// Errorf is fmt.Errorf for a message that starts with its package's name
// ("journal: propose: %w"): the message drops that name where a wrapped
// error repeats it after a colon, so that "journal: propose: journal: no
// leader" reads "journal: propose: no leader". errors.Is and errors.As see
// what fmt.Errorf wraps.
func Errorf(format string, args ...any) error {
	return &opError{err: fmt.Errorf(format, args...)}
}

type opError struct{ err error }

func (e *opError) Error() string {
	msg := e.err.Error()
	pkg, rest, ok := strings.Cut(msg, ": ")
	if !ok || strings.Contains(pkg, " ") {
		return msg
	}
	rest = strings.TrimPrefix(rest, pkg+": ")
	return pkg + ": " + strings.ReplaceAll(rest, ": "+pkg+": ", ": ")
}

func (e *opError) Unwrap() error { return e.err }
