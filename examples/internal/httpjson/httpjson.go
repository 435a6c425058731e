package httpjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// MaxBody is the largest request body the examples accept. Larger bodies
// are answered with 413 before they are read into memory.
const MaxBody = 4 << 20

// Error is an API error: a status, a short machine-readable code and a
// message for people.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf builds an *Error.
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Decode reads a JSON body of at most MaxBody bytes into v. Unknown fields
// are rejected so that a typo is an error rather than a silent default.
func Decode(w http.ResponseWriter, r *http.Request, v any) error {
	if r.ContentLength > MaxBody {
		return Errorf(http.StatusRequestEntityTooLarge, "too_large", "request body of %d bytes is over the limit of %d", r.ContentLength, MaxBody)
	}
	body := http.MaxBytesReader(w, r.Body, MaxBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return Errorf(http.StatusRequestEntityTooLarge, "too_large", "request body is over %d bytes", MaxBody)
		}
		if errors.Is(err, io.EOF) {
			return Errorf(http.StatusBadRequest, "bad_request", "request body is empty; want a JSON object")
		}
		return Errorf(http.StatusBadRequest, "bad_request", "request body is not valid JSON for this endpoint: %v", err)
	}
	if dec.More() {
		return Errorf(http.StatusBadRequest, "bad_request", "request body has data after the JSON value")
	}
	return nil
}

// Write answers with status and v as JSON.
func Write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError answers with err: an *Error keeps its status and code; any
// other error is a 500, which the examples never return on purpose.
func WriteError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Status: http.StatusInternalServerError, Code: "internal", Message: err.Error()}
	}
	Write(w, e.Status, map[string]string{"error": e.Code, "message": e.Message})
}

// Handler adapts a function that returns an error to an http.Handler, and
// turns a panic in it into a 500 instead of a dropped connection.
func Handler(f func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				WriteError(w, fmt.Errorf("panic serving %s %s: %v", r.Method, r.URL.Path, p))
			}
		}()
		if err := f(w, r); err != nil {
			WriteError(w, err)
		}
	})
}

// NotFound answers every request that no other route took: a JSON 404, so
// that even a mistyped path gets the API's error shape.
var NotFound = Handler(func(_ http.ResponseWriter, r *http.Request) error {
	return Errorf(http.StatusNotFound, "not_found", "no endpoint %s %s", r.Method, r.URL.Path)
})
