package scriptrun

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/test/relaytest"
)

func testClient(t *testing.T) valkey.Client { return relaytest.Client(t) }

// recorder is an Observer that keeps each call's name and error class.
type recorder struct {
	mu    sync.Mutex
	names []string
	class map[string]string
}

func (r *recorder) observe(ctx context.Context, name string) (context.Context, func(error)) {
	return ctx, func(err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.names = append(r.names, name)
		if r.class == nil {
			r.class = map[string]string{}
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				panic("the observer was told an error without its class")
			}
			r.class[name] = e.ErrorClass()
		}
	}
}

const echoSrc = "-- mode: read-only\nreturn ARGV[1]\n"

// A script's mode is its header's; one without a mode is refused.
func TestScriptModeFromItsHeader(t *testing.T) {
	ro, err := New("echo", echoSrc)
	if err != nil || !ro.ReadOnly() || ro.Name() != "echo" || len(ro.SHA1()) != 40 {
		t.Fatalf("read-only header: %+v %v", ro, err)
	}
	w, err := New("w", "-- mode: write (reads TIME)\nreturn 1\n")
	if err != nil || w.ReadOnly() {
		t.Fatalf("write header: %+v %v", w, err)
	}
	if _, err := New("none", "return 1\n"); err == nil {
		t.Fatal("a script without a mode was taken")
	}
	if _, err := New("odd", "-- mode: sometimes\nreturn 1\n"); err == nil {
		t.Fatal("an unknown mode was taken")
	}
}

// Run observes each call under the script's name, a nil reply is no
// error, and an error reply reaches the observer classified.
func TestRunObservesAndClassifies(t *testing.T) {
	rec := &recorder{}
	r := NewRunner(testClient(t), Options{Observe: rec.observe})
	ctx := context.Background()
	msg, err := r.Run(ctx, Must("echo", echoSrc), []string{"k"}, []string{"hi"})
	if s, _ := msg.ToString(); err != nil || s != "hi" {
		t.Fatalf("echo: %q %v", s, err)
	}
	if _, err := r.Run(ctx, Must("nil", "-- mode: read-only\nreturn false\n"), []string{"k"}, nil); err != nil {
		t.Fatalf("a nil reply: %v", err)
	}
	_, err = r.Run(ctx, Must("oom", "-- mode: write\nreturn redis.error_reply('OOM command not allowed')\n"), []string{"k"}, nil)
	if ReplyPrefix(err) != "OOM" {
		t.Fatalf("the caller gets the reply as it came: %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.names) != 3 || rec.names[0] != "echo" || rec.class["oom"] != "full" || rec.class["echo"] != "" {
		t.Fatalf("observed %v %v", rec.names, rec.class)
	}
}

// A call past the runner's bound, or WithTimeout's for its context, fails
// with the deadline (a frozen server answers nothing), and the observer
// records it as a timeout.
func TestRunIsBounded(t *testing.T) {
	srv := relaytest.StartServer(t)
	c := relaytest.Open(t, srv.URL())
	rec := &recorder{}
	r := NewRunner(c, Options{Observe: rec.observe, Timeout: 200 * time.Millisecond})
	ctx := context.Background()
	if _, err := r.Run(ctx, Must("echo", echoSrc), []string{"k"}, []string{"x"}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Signal(syscall.SIGCONT) }()
	for name, call := range map[string]func() error{
		"run": func() error {
			_, err := r.Run(ctx, Must("echo", echoSrc), []string{"k"}, []string{"x"})
			return err
		},
		"do": func() error { return r.Do(ctx, "do", c.B().Get().Key("k").Build()).Error() },
		// A runner without a bound of its own, bounded by the context.
		"context": func() error {
			return NewRunner(c, Options{}).Do(WithTimeout(ctx, 100*time.Millisecond), "context", c.B().Get().Key("k").Build()).Error()
		},
	} {
		start := time.Now()
		err := call()
		if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > 3*time.Second {
			t.Fatalf("%s on a frozen server: %v after %v", name, err, took)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.class["echo"] != "timeout" || rec.class["do"] != "timeout" {
		t.Fatalf("classes %v", rec.class)
	}
}

// Unreachable turns on at a call that fails in transport, calling
// OnUnreachable once for the turn, and off at the next call Valkey
// answers (an error reply included); a deadline on a frozen server says
// nothing either way.
func TestUnreachableUntilAnswered(t *testing.T) {
	srv := relaytest.StartServer(t)
	c := relaytest.Open(t, srv.URL())
	var turns atomic.Int32
	r := NewRunner(c, Options{OnUnreachable: func() { turns.Add(1) }, Timeout: 300 * time.Millisecond})
	ctx := context.Background()
	echo := Must("echo", echoSrc)
	run := func() error {
		_, err := r.Run(ctx, echo, []string{"k"}, []string{"x"})
		return err
	}
	if err := run(); err != nil || r.Unreachable() {
		t.Fatalf("a call to a live server: %v, unreachable %v", err, r.Unreachable())
	}

	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	err := run()
	if cerr := srv.Signal(syscall.SIGCONT); cerr != nil {
		t.Fatal(cerr)
	}
	if !errors.Is(err, context.DeadlineExceeded) || r.Unreachable() || turns.Load() != 0 {
		t.Fatalf("a frozen server: %v, unreachable %v, %d turns", err, r.Unreachable(), turns.Load())
	}

	if _, err := srv.Stop(syscall.SIGKILL, 10*time.Second); err != nil && !strings.Contains(err.Error(), "signal: killed") {
		t.Fatalf("stop: %v", err)
	}
	for i := range 3 {
		err := run()
		if err == nil || Class(err) != "connection" && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call %d to a stopped server: %v", i, err)
		}
	}
	if !r.Unreachable() || turns.Load() != 1 {
		t.Fatalf("after three failed calls: unreachable %v, %d turns, want true and 1", r.Unreachable(), turns.Load())
	}

	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	relaytest.WaitFor(t, 10*time.Second, "no call answered after the restart", func() bool { return run() == nil })
	if r.Unreachable() {
		t.Fatal("a call was answered and the runner still says unreachable")
	}
	// Down again: a second turn; then an error reply is an answer too.
	if _, err := srv.Stop(syscall.SIGKILL, 10*time.Second); err != nil && !strings.Contains(err.Error(), "signal: killed") {
		t.Fatalf("stop: %v", err)
	}
	_ = run()
	if !r.Unreachable() || turns.Load() != 2 {
		t.Fatalf("down again: unreachable %v, %d turns, want true and 2", r.Unreachable(), turns.Load())
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	oom := Must("oom", "-- mode: write\nreturn redis.error_reply('OOM command not allowed')\n")
	relaytest.WaitFor(t, 10*time.Second, "no error reply after the restart", func() bool {
		_, err := r.Run(ctx, oom, []string{"k"}, nil)
		return ReplyPrefix(err) == "OOM"
	})
	if r.Unreachable() {
		t.Fatal("an error reply and the runner still says unreachable")
	}
}
