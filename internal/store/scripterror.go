package store

import (
	"context"
	"errors"
	"strings"

	"github.com/valkey-io/valkey-go"
)

// ScriptError is a failed script call with its class, for metrics and
// spans: "timeout", "canceled", "cluster" (MOVED, ASK, CLUSTERDOWN,
// TRYAGAIN: the slot is moving or its shard is failing over), "busy"
// (BUSY, LOADING, MASTERDOWN, READONLY: the server cannot run it now),
// "script" (the script itself raised an error), "connection" (anything
// between the relay and Valkey).
type ScriptError struct {
	Class string
	Err   error
}

func (e *ScriptError) Error() string { return e.Err.Error() }
func (e *ScriptError) Unwrap() error { return e.Err }

// ErrorClass is the error's class (see ScriptError); "" for nil.
func (e *ScriptError) ErrorClass() string { return e.Class }

// classify wraps a script call's error with its class; nil stays nil.
func classify(err error) error {
	if err == nil {
		return nil
	}
	return &ScriptError{Class: errorClass(err), Err: err}
}

func errorClass(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	var ve *valkey.ValkeyError
	if errors.As(err, &ve) {
		msg := ve.Error()
		for _, p := range []string{"MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN", "CROSSSLOT"} {
			if strings.HasPrefix(msg, p) {
				return "cluster"
			}
		}
		for _, p := range []string{"BUSY", "LOADING", "MASTERDOWN", "READONLY"} {
			if strings.HasPrefix(msg, p) {
				return "busy"
			}
		}
		return "script"
	}
	return "connection"
}

// do runs one plain command (no script), observed under name like a script.
func (s *Store) do(ctx context.Context, name string, cmd valkey.Completed) (res valkey.ValkeyResult) {
	if obs := s.opts.ObserveScript; obs != nil {
		var end func(error)
		ctx, end = obs(ctx, name)
		defer func() { end(classify(res.NonValkeyError())) }()
	}
	return s.c.Do(ctx, cmd)
}

// doMulti pipelines plain single-key commands (each routed to its own
// slot), observed under name as one call.
func (s *Store) doMulti(ctx context.Context, name string, cmds ...valkey.Completed) (res []valkey.ValkeyResult) {
	if obs := s.opts.ObserveScript; obs != nil {
		var end func(error)
		ctx, end = obs(ctx, name)
		defer func() {
			var err error
			for _, r := range res {
				if e := r.NonValkeyError(); e != nil {
					err = e
					break
				}
			}
			end(classify(err))
		}()
	}
	return s.c.DoMulti(ctx, cmds...)
}
