package store

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/valkey-io/valkey-go"
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

// transientPrefixes are Valkey error replies that mean "not now", never
// "never": a server loading its data set (LOADING), running a slow script
// (BUSY), in a cluster that is down or resharding (CLUSTERDOWN, TRYAGAIN,
// MOVED, ASK: valkey-go follows redirects itself, so one that reaches us is
// a redirect storm), a replica whose primary is gone (MASTERDOWN), a
// primary demoted under us (READONLY), or a full server (OOM; the operator
// must act, but the request itself was sound and may succeed later).
var transientPrefixes = []string{"LOADING", "BUSY", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "READONLY", "MOVED", "ASK", "OOM"}

// Classify is the one place that decides whose fault a store error is.
// A transport failure is recognised by its type (a network error, a
// deadline, a connection closed mid-reply, valkey-go giving up on its
// connections), a server that cannot answer now by the prefix of its error
// reply; context.Canceled (the caller went away) counts as unavailable.
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
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, valkey.ErrClosing) || errors.Is(err, valkey.ErrNoSlot) ||
		errors.Is(err, valkey.ErrDoCacheAborted) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return ClassUnavailable
	}
	// Concurrent changes the store already retried once: the next request
	// will see the settled record.
	if errors.Is(err, ErrPresenceChanged) || errors.Is(err, ErrProjectionMoved) {
		return ClassUnavailable
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return ClassUnavailable
	}
	var ve *valkey.ValkeyError
	if errors.As(err, &ve) && !ve.IsNil() {
		msg := ve.Error()
		for _, p := range transientPrefixes {
			if strings.HasPrefix(msg, p+" ") || msg == p {
				return ClassUnavailable
			}
		}
		// A node still without the functions library after the store
		// loaded it (it was replaced or flushed in between): the next call
		// loads it again.
		if isFunctionMissing(err) {
			return ClassUnavailable
		}
	}
	return ClassBug
}
