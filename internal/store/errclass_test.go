package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/relaytest"
)

// Every class Classify tells apart, each from a real failure of a real
// server where one can be made: a busy server and a dead one are
// "unavailable" (retry), a reply of the wrong type and a script error are
// "bug" (no retry helps), a store limit is the caller's.
func TestClassify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A server of this test only (the shared one is never made busy or
	// killed), with a 10 ms script time limit so that a looping script makes
	// it answer BUSY at once.
	srv := relaytest.StartServer(t, "--lua-time-limit", "10")
	c, url := relaytest.Open(t, srv.URL()), srv.URL()
	// The server and its keys die with the test: no namespace cleanup.
	s, err := New(ctx, c, Options{Namespace: relaytest.NewName(), Logger: relaytest.Discard()})
	if err != nil {
		t.Fatal(err)
	}

	if _, err := s.Presence(ctx, "runner-1"); Classify(err) != ClassNone {
		t.Fatalf("a healthy call: %v (%v)", err, Classify(err))
	}

	t.Run("input refused by the store is the caller's", func(t *testing.T) {
		_, err := s.Presence(ctx, "bad\x00id")
		if got := Classify(err); got != ClassInvalidInput {
			t.Fatalf("Classify(%v) = %v, want invalid-input", err, got)
		}
	})

	t.Run("a reply the code does not understand is a bug", func(t *testing.T) {
		if err := c.Do(ctx, c.B().Set().Key("classify-string").Value("v").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		// A decode failure: a string read as an array.
		_, err := c.Do(ctx, c.B().Get().Key("classify-string").Build()).ToArray()
		if err == nil {
			t.Fatal("a string decoded as an array")
		}
		if got := Classify(fmt.Errorf("claim: %w", err)); got != ClassBug {
			t.Fatalf("decode failure %v: %v, want bug", err, got)
		}
		// A Valkey error reply that says the data is not what the code
		// expects (a broken key layout).
		err = c.Do(ctx, c.B().Hget().Key("classify-string").Field("f").Build()).Error()
		if err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
			t.Fatalf("HGET on a string: %v", err)
		}
		if got := Classify(fmt.Errorf("claim: %w", err)); got != ClassBug {
			t.Fatalf("%v: %v, want bug", err, got)
		}
		// A script that fails.
		err = c.Do(ctx, c.B().Eval().Script("return redis.error_reply('ERR broken invariant')").Numkeys(0).Build()).Error()
		if got := Classify(err); err == nil || got != ClassBug {
			t.Fatalf("script error %v: %v, want bug", err, got)
		}
		if got := Classify(fmt.Errorf("x: %w", ErrUnexpectedReply)); got != ClassBug {
			t.Fatalf("ErrUnexpectedReply: %v", got)
		}
	})

	t.Run("a server busy with a script is unavailable", func(t *testing.T) {
		// A second client runs a script that never ends; the server
		// answers every other command BUSY until it is killed.
		loop := relaytest.Open(t, url)
		looped := make(chan error, 1)
		go func() {
			looped <- loop.Do(ctx, loop.B().Eval().Script("while true do end").Numkeys(0).Build()).Error()
		}()
		var busy error
		for deadline := time.Now().Add(10 * time.Second); busy == nil; {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := s.Presence(cctx, "runner-1")
			cancel()
			if err != nil && strings.Contains(err.Error(), "BUSY") {
				busy = err
			} else if time.Now().After(deadline) {
				t.Fatalf("no BUSY reply while a script loops (last: %v)", err)
			}
		}
		if got := Classify(busy); got != ClassUnavailable {
			t.Fatalf("Classify(%v) = %v, want unavailable", busy, got)
		}
		if err := c.Do(ctx, c.B().ScriptKill().Build()).Error(); err != nil {
			t.Fatalf("SCRIPT KILL: %v", err)
		}
		if err := <-looped; err == nil {
			t.Fatal("the looping script ended without an error")
		}
	})

	t.Run("a deadline is unavailable", func(t *testing.T) {
		dctx, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
		defer cancel()
		_, err := s.Presence(dctx, "runner-1")
		if got := Classify(err); got != ClassUnavailable {
			t.Fatalf("Classify(%v) = %v, want unavailable", err, got)
		}
	})

	t.Run("a dead server is unavailable", func(t *testing.T) {
		srv.Kill()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := s.Presence(cctx, "runner-1")
		if err == nil {
			t.Fatal("a call on a killed server succeeded")
		}
		if got := Classify(err); got != ClassUnavailable {
			t.Fatalf("Classify(%v) = %v, want unavailable", err, got)
		}
		var ne interface{ Timeout() bool }
		if errors.As(err, &ne) && ne.Timeout() {
			t.Logf("answered by a timeout, not a refused connection: %v", err)
		}
	})
}
