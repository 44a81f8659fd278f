package scriptrun

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/valkey-io/valkey-go"
)

// Error is a failed call with its class, for metrics and spans (the
// observer reads ErrorClass); it unwraps to the error the call returned.
type Error struct {
	Class string
	Err   error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// ErrorClass is the error's class: one of the classes of replyClasses,
// "timeout", "canceled", "script" (any other error reply: the script
// raised it, or the call was refused for good) or "connection" (anything
// between the relay and Valkey).
func (e *Error) ErrorClass() string { return e.Class }

// replyClass is what an error reply's first word says: its class and
// whether the same call may succeed later (Unavailable).
type replyClass struct {
	class       string
	unavailable bool
}

// replyClasses is the one table of Valkey error replies, keyed by the
// reply's first word. Unavailable ones mean "not now", never "never": a
// slot moving or a shard failing over (MOVED, ASK: valkey-go follows
// redirects itself, so one that reaches us is a redirect storm), a server
// loading, running a slow script, without its primary or demoted under
// us, a full server (the operator must act, but the request was sound).
// CROSSSLOT is the caller's key naming, a bug like a script's own error.
var replyClasses = map[string]replyClass{
	"MOVED":       {"cluster", true},
	"ASK":         {"cluster", true},
	"CLUSTERDOWN": {"cluster", true},
	"TRYAGAIN":    {"cluster", true},
	"CROSSSLOT":   {"script", false},
	"BUSY":        {"busy", true},
	"LOADING":     {"busy", true},
	"MASTERDOWN":  {"busy", true},
	"READONLY":    {"busy", true},
	"OOM":         {"full", true},
	// The relay's own: place.lua found no layout record (Valkey lost its
	// data since the relay started); the placer writes it again and
	// retries, so the same call succeeds later.
	CodeNoLayout: {"lost", true},
}

// CodeNoLayout is the code of lua/place.lua's reply when the namespace
// has no layout record.
const CodeNoLayout = "NOLAYOUT"

// ReplyPrefix is the error code of err's Valkey error reply, its first
// word ("NOSCRIPT", "CROSSSLOT"), or "" when err is not an error reply.
// A reply without a code of its own is "ERR": valkey-go takes that code
// off ("ERR Function not found" reads "Function not found"), and a
// script's error_reply may carry none.
func ReplyPrefix(err error) string {
	var ve *valkey.ValkeyError
	if !errors.As(err, &ve) || ve.IsNil() {
		return ""
	}
	word, _, _ := strings.Cut(ve.Error(), " ")
	if word == "" || strings.TrimLeft(word, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
		return "ERR"
	}
	return word
}

// Class is err's class (see Error); "" for nil.
func Class(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	if p := ReplyPrefix(err); p != "" {
		if rc, ok := replyClasses[p]; ok {
			return rc.class
		}
		return "script"
	}
	return "connection"
}

// Unavailable says whether err means Valkey could not answer now (a
// transport failure, a deadline, the caller gone, an error reply the table
// calls unavailable), so the same call may succeed later and nothing was
// written. Every other error is a reply the caller must not retry.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	if p := ReplyPrefix(err); p != "" {
		return replyClasses[p].unavailable
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, valkey.ErrNoSlot) || errors.Is(err, valkey.ErrDoCacheAborted) ||
		transportFailure(err)
}

// transportFailure says whether err is the connection to Valkey failing:
// refused, reset, closed, or a network error of its own.
func transportFailure(err error) bool {
	if errors.Is(err, valkey.ErrClosing) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// classify wraps a call's error with its class; nil stays nil.
func classify(err error) error {
	if err == nil {
		return nil
	}
	return &Error{Class: Class(err), Err: err}
}
