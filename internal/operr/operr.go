package operr

import (
	"fmt"
	"slices"
	"strings"
)

// Errorf is fmt.Errorf for a message that starts with its package's name
// ("journal: propose: %w"): each error among args whose own message starts
// with that name too is formatted without it, so that "journal: propose:
// journal: no leader" reads "journal: propose: no leader". Other arguments
// are formatted as they are. errors.Is and errors.As see the errors
// themselves.
func Errorf(format string, args ...any) error {
	pkg, _, ok := strings.Cut(format, ": ")
	if !ok || strings.ContainsAny(pkg, " %") {
		return fmt.Errorf(format, args...)
	}
	prefix := pkg + ": "
	copied := false
	for i, a := range args {
		if err, ok := a.(error); ok && err != nil && strings.HasPrefix(err.Error(), prefix) {
			if !copied { // the caller's slice, when it passed one
				args, copied = slices.Clone(args), true
			}
			args[i] = &trimmed{err: err, prefix: prefix}
		}
	}
	return fmt.Errorf(format, args...)
}

// trimmed is err, its message without prefix.
type trimmed struct {
	err    error
	prefix string
}

func (e *trimmed) Error() string { return strings.TrimPrefix(e.err.Error(), e.prefix) }

func (e *trimmed) Unwrap() error { return e.err }
