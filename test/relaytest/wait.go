package relaytest

import (
	"testing"
	"time"
)

// WaitFor polls cond until it returns true, or fails t once within has
// passed, saying msg (what never happened). It polls quickly at first and
// backs off to every 50 ms. Call it from the test's goroutine: it may call
// t.Fatalf.
func WaitFor(t testing.TB, within time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("relaytest: not within %v: %s", within, msg)
			return
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// Closed reports whether ch is closed, without waiting.
func Closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
