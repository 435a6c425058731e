package secure

import (
	"bufio"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Role is what a client API token may do. Each role includes the ones
// below it.
type Role int

const (
	// RoleNone is what an endpoint that needs no token requires.
	RoleNone Role = iota
	// RoleRead: every GET under /v1/.
	RoleRead
	// RoleWrite: read, plus catalog writes, transactions and queries.
	RoleWrite
	// RoleAdmin: everything: members, leadership, checkpoints, image
	// downloads.
	RoleAdmin
)

func (r Role) String() string {
	switch r {
	case RoleNone:
		return "none"
	case RoleRead:
		return "read"
	case RoleWrite:
		return "write"
	case RoleAdmin:
		return "admin"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// parseRole reads a role's name in an auth file.
func parseRole(s string) (Role, bool) {
	switch s {
	case "read":
		return RoleRead, true
	case "write":
		return RoleWrite, true
	case "admin":
		return RoleAdmin, true
	}
	return RoleNone, false
}

// maxAuthLine bounds one line of an auth file.
const maxAuthLine = 64 << 10

// Tokens maps client API bearer tokens to roles. Safe for concurrent use
// (it is never modified after parsing).
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	token []byte
	role  Role
}

// LoadAuthFile reads an auth file (ParseAuthFile).
func LoadAuthFile(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("auth file: %w", err)
	}
	defer f.Close()
	t, err := ParseAuthFile(f)
	if err != nil {
		return nil, fmt.Errorf("auth file %s: %w", path, err)
	}
	return t, nil
}

// ParseAuthFile reads one token a line, "<token> <role>" with role read,
// write or admin; a line whose first non-blank character is # is a
// comment, and blank lines are ignored. An error names the line, never the
// token. A file with no token is an error (it would lock every client
// out), and so is a token listed twice.
func ParseAuthFile(r io.Reader) (*Tokens, error) {
	t := &Tokens{}
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxAuthLine)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 2 {
			return nil, fmt.Errorf("line %d: want \"<token> <role>\", got %d fields", line, len(fields))
		}
		role, ok := parseRole(fields[1])
		if !ok {
			return nil, fmt.Errorf("line %d: role %q: want read, write or admin", line, fields[1])
		}
		if seen[fields[0]] {
			return nil, fmt.Errorf("line %d: the token is listed twice", line)
		}
		seen[fields[0]] = true
		t.entries = append(t.entries, tokenEntry{token: []byte(fields[0]), role: role})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("a line is over %d bytes", maxAuthLine)
		}
		return nil, err
	}
	if len(t.entries) == 0 {
		return nil, errors.New("no token in the file")
	}
	return t, nil
}

// Role returns the role of token. It compares token with every entry in
// constant time, so the time taken tells nothing of which entry, or how
// much of one, matched.
func (t *Tokens) Role(token string) (Role, bool) {
	role, found := RoleNone, 0
	b := []byte(token)
	for _, e := range t.entries {
		eq := subtle.ConstantTimeCompare(b, e.token)
		role = Role(subtle.ConstantTimeSelect(eq, int(e.role), int(role)))
		found |= eq
	}
	return role, found == 1 && len(b) > 0
}

// ErrNoBearer is an Authorization header that carries no bearer token.
var ErrNoBearer = errors.New("no bearer token")

// ParseBearer returns the token of an Authorization header value
// "Bearer <token>" (the scheme in any case, RFC 6750); the token is one or
// more token68 characters.
func ParseBearer(header string) (string, error) {
	if header == "" {
		return "", fmt.Errorf("%w: no Authorization header", ErrNoBearer)
	}
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", fmt.Errorf("%w: the Authorization header is not \"Bearer <token>\"", ErrNoBearer)
	}
	token = strings.TrimLeft(token, " ")
	if token == "" {
		return "", fmt.Errorf("%w: the bearer token is empty", ErrNoBearer)
	}
	for i := 0; i < len(token); i++ {
		if !isToken68(token[i]) {
			return "", fmt.Errorf("%w: the bearer token holds a character outside token68 at byte %d", ErrNoBearer, i)
		}
	}
	return token, nil
}

// isToken68 reports whether c may appear in an RFC 7235 token68.
func isToken68(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~+/=", c) >= 0
}
