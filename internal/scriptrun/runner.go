package scriptrun

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/valkey-io/valkey-go"
)

// Observer is called around every call a Runner makes with the call's
// name (a script's, or a named plain command's): it returns the context to
// run the call under (carrying its span) and a func told the call's error,
// nil for any reply. A non-nil error is an *Error naming its class.
type Observer func(ctx context.Context, name string) (context.Context, func(error))

// Options configures a Runner.
type Options struct {
	// Observe, when set, sees every call (see Observer).
	Observe Observer
	// Timeout, when positive, bounds each call: one past it returns
	// context.DeadlineExceeded, which callers answer as an unavailable
	// store (a frozen or failing-over Valkey), not when the connection is
	// finally declared dead many seconds later.
	Timeout time.Duration
	// OnUnreachable, when set, is called when a call fails in transport
	// (class "connection") after the last call before it was answered: a
	// caller that holds calls back to share a round trip sends them now,
	// so they are refused at once rather than at the end of their wait.
	// It runs on the failed call's goroutine and must not block.
	OnUnreachable func()
}

// Runner runs scripts and named plain commands on one client, each
// observed, bounded and classified alike.
type Runner struct {
	c           valkey.Client
	opts        Options
	fns         *functions // nil: every script runs with EVALSHA
	unreachable atomic.Bool
}

// NewRunner is a Runner on c; its scripts run with EVALSHA until
// LoadLibrary succeeds.
func NewRunner(c valkey.Client, opts Options) *Runner {
	return &Runner{c: c, opts: opts}
}

// LoadLibrary loads lib on every node and runs the scripts it holds as
// its functions from then on. With ErrNoFunctions (the server will not
// take it) the Runner stays on EVALSHA. Call it before the Runner is
// shared.
func (r *Runner) LoadLibrary(ctx context.Context, lib Library) error {
	f := &functions{lib: lib}
	if err := f.load(ctx, r.c); err != nil {
		return err
	}
	r.fns = f
	return nil
}

// Library is the loaded library, if any.
func (r *Runner) Library() (Library, bool) {
	if r.fns == nil {
		return Library{}, false
	}
	return r.fns.lib, true
}

// Command is how scripts are sent: "FCALL" with a library, else "EVALSHA"
// (read-only ones with the _RO form).
func (r *Runner) Command() string {
	if r.fns != nil {
		return "FCALL"
	}
	return "EVALSHA"
}

// Client is the client the Runner sends on, for what is not a call:
// subscriptions and the pipelines a caller observes itself (Observe).
func (r *Runner) Client() valkey.Client { return r.c }

// Observe opens one observed, bounded call named name: the returned
// context carries its span and deadline, and end, which must be called
// once, records the call's outcome and releases the deadline. Run, Do and
// DoMulti are built on it; a caller that sends a call of its own (a
// pipeline of scripts, one outcome per caller) uses it directly.
func (r *Runner) Observe(ctx context.Context, name string) (context.Context, func(error)) {
	ctx, cancel := r.Bound(ctx)
	obs := r.opts.Observe
	if obs == nil {
		return ctx, func(err error) {
			r.note(err)
			cancel()
		}
	}
	ctx, end := obs(ctx, name)
	return ctx, func(err error) {
		err = classify(err)
		r.note(err)
		end(err)
		cancel()
	}
}

// note keeps whether Valkey was reachable at the last call that says:
// an answer (an error reply included) says it was, a transport failure
// says it was not; a deadline, a caller gone or the relay's own refusal
// of a reply says nothing either way.
func (r *Runner) note(err error) {
	// Read before writing: every call passes here, and a write per call
	// would bounce the flag's cache line between cores.
	switch Class(err) {
	case "connection":
		if transportFailure(err) && !r.unreachable.Load() && !r.unreachable.Swap(true) && r.opts.OnUnreachable != nil {
			r.opts.OnUnreachable()
		}
	case "timeout", "canceled":
	default: // an answer: a reply, or an error reply
		if r.unreachable.Load() {
			r.unreachable.Store(false)
		}
	}
}

// Unreachable says whether the last call that reached a verdict failed in
// transport (Valkey down, or the network to it), until a call is answered
// again.
func (r *Runner) Unreachable() bool { return r.unreachable.Load() }

// Bound is ctx under the per-call deadline (WithTimeout's, else
// Options.Timeout), for a call the caller observes per request (Observe)
// but sends as one.
func (r *Runner) Bound(ctx context.Context) (context.Context, context.CancelFunc) {
	d := r.opts.Timeout
	if v, ok := ctx.Value(timeoutKey{}).(time.Duration); ok {
		d = v
	}
	if d > 0 {
		return context.WithTimeout(ctx, d)
	}
	return ctx, func() {}
}

type timeoutKey struct{}

// WithTimeout returns ctx under which each call a Runner makes is bounded
// by d instead of its Options.Timeout, for callers that answer a person
// or a tool and must fail fast on a frozen Valkey whatever the runner's
// own bound (the admin listener passes RELAY_STORE_TIMEOUT). d <= 0
// leaves ctx as it is.
func WithTimeout(ctx context.Context, d time.Duration) context.Context {
	if d <= 0 {
		return ctx
	}
	return context.WithValue(ctx, timeoutKey{}, d)
}

// Run runs sc with keys and args, observed, bounded and classified. A nil
// reply is no error.
func (r *Runner) Run(ctx context.Context, sc *Script, keys, args []string) (msg valkey.ValkeyMessage, err error) {
	ctx, end := r.Observe(ctx, sc.name)
	defer func() { end(err) }()
	msg, err = r.exec(ctx, sc, keys, args)
	if err != nil && valkey.IsValkeyNil(err) {
		return msg, nil
	}
	return msg, err
}

// exec runs sc once: its function where the library holds it (loading
// the library again where a node lost it), else EVALSHA (EVAL on
// NOSCRIPT).
func (r *Runner) exec(ctx context.Context, sc *Script, keys, args []string) (valkey.ValkeyMessage, error) {
	fn, ok := r.function(sc)
	if !ok {
		return sc.lua.Exec(ctx, r.c, keys, args).ToMessage()
	}
	gen := r.fns.gen.Load()
	msg, err := r.c.Do(ctx, r.fns.command(r.c, fn, sc, keys, args)).ToMessage()
	if ReplyPrefix(err) != "ERR" {
		return msg, err
	}
	again, lerr := r.fns.reload(ctx, r.c, gen)
	if lerr != nil {
		return msg, fmt.Errorf("%s: reload functions: %w", sc.name, lerr)
	}
	if !again {
		return msg, err
	}
	return r.c.Do(ctx, r.fns.command(r.c, fn, sc, keys, args)).ToMessage()
}

func (r *Runner) function(sc *Script) (string, bool) {
	if r.fns == nil {
		return "", false
	}
	fn, ok := r.fns.lib.Fn[sc.name]
	return fn, ok
}

// ScriptCommand is sc's call as one command for a pipeline (DoMulti):
// FCALL of its function, or EVALSHA of its digest. A reply that Resend
// accepts is sent again with Resend.
func (r *Runner) ScriptCommand(sc *Script, keys, args []string) valkey.Completed {
	if fn, ok := r.function(sc); ok {
		return r.fns.command(r.c, fn, sc, keys, args)
	}
	if sc.readOnly {
		return r.c.B().EvalshaRo().Sha1(sc.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	}
	return r.c.B().Evalsha().Sha1(sc.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

// Resend makes a pipelined call of sc (ScriptCommand) once more on its own
// when its reply err says its node lacked the script (NOSCRIPT) or may
// lack the library (an error reply to FCALL): the library is loaded again
// where it is missing. Any other reply is returned as it came. seen is
// Generation before the pipeline was sent. The caller has observed the
// pipeline; this call is part of it.
func (r *Runner) Resend(ctx context.Context, seen uint64, sc *Script, keys, args []string, msg valkey.ValkeyMessage, err error) (valkey.ValkeyMessage, error) {
	switch ReplyPrefix(err) {
	case "NOSCRIPT":
		return sc.lua.Exec(ctx, r.c, keys, args).ToMessage()
	case "ERR":
		if _, ok := r.function(sc); !ok {
			break
		}
		again, lerr := r.fns.reload(ctx, r.c, seen)
		if lerr != nil {
			return msg, fmt.Errorf("%s: reload functions: %w", sc.name, lerr)
		}
		if again {
			return r.exec(ctx, sc, keys, args)
		}
	}
	return msg, err
}

// Generation counts the library's loads, for Resend: taken before a
// pipeline, it tells whether another caller has loaded the library since.
func (r *Runner) Generation() uint64 {
	if r.fns == nil {
		return 0
	}
	return r.fns.gen.Load()
}

// Do sends one plain command, observed and bounded under name like a
// script.
func (r *Runner) Do(ctx context.Context, name string, cmd valkey.Completed) (res valkey.ValkeyResult) {
	ctx, end := r.Observe(ctx, name)
	defer func() { end(res.NonValkeyError()) }()
	return r.c.Do(ctx, cmd)
}

// DoMulti pipelines plain commands, observed and bounded under name as
// one call.
func (r *Runner) DoMulti(ctx context.Context, name string, cmds ...valkey.Completed) (res []valkey.ValkeyResult) {
	ctx, end := r.Observe(ctx, name)
	defer func() {
		var err error
		for _, x := range res {
			if err = x.NonValkeyError(); err != nil {
				break
			}
		}
		end(err)
	}()
	return r.c.DoMulti(ctx, cmds...)
}
