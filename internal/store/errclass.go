package store

import (
	"errors"

	"github.com/byollm/relay-go/internal/scriptrun"
)

// ErrorClass says whose fault a store error is, so callers answer each
// class the same way wherever the error came from.
type ErrorClass int

const (
	// ClassNone: no error.
	ClassNone ErrorClass = iota
	// ClassInvalidInput: the caller's input broke one of the store's limits
	// (ErrInvalidInput). Retrying the same input fails the same way.
	ClassInvalidInput
	// ClassUnavailable: Valkey could not answer now: unreachable, timed
	// out, loading, busy, failing over, redirecting, or the record changed
	// under a conditional write that was already retried. Retrying later
	// may succeed, and nothing was written.
	ClassUnavailable
	// ClassBug: anything else, above all a reply the code does not
	// understand (ErrUnexpectedReply, a script error, a malformed stored
	// record). Retrying will not help; it needs a person to look.
	ClassBug
)

func (c ErrorClass) String() string {
	switch c {
	case ClassNone:
		return "none"
	case ClassInvalidInput:
		return "invalid-input"
	case ClassUnavailable:
		return "unavailable"
	}
	return "bug"
}

// ErrUnexpectedReply marks a reply whose shape no script header promises.
// Wrapping it is optional (Classify already calls every error it does not
// recognise a bug); it makes the class explicit for code and tests that
// produce such an error themselves.
var ErrUnexpectedReply = errors.New("unexpected reply from the store")

// Classify is the one place that decides whose fault a store error is.
// Transport failures, deadlines and error replies are the runner's one
// table (scriptrun.Unavailable); context.Canceled (the caller went away)
// counts as unavailable.
func Classify(err error) ErrorClass {
	if err == nil {
		return ClassNone
	}
	if errors.Is(err, ErrInvalidInput) {
		return ClassInvalidInput
	}
	if errors.Is(err, ErrUnexpectedReply) {
		return ClassBug
	}
	// Concurrent changes the store already retried once: the next request
	// will see the settled record.
	if errors.Is(err, ErrPresenceChanged) || errors.Is(err, ErrProjectionMoved) {
		return ClassUnavailable
	}
	if scriptrun.Unavailable(err) {
		return ClassUnavailable
	}
	return ClassBug
}
