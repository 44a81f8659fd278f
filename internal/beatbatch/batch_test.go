package beatbatch

import (
	"testing"
	"time"
)

// sink receives the batches a Batch sends.
func sink() (func([]int), chan []int) {
	ch := make(chan []int, 16)
	return func(c []int) { ch <- c }, ch
}

func next(t *testing.T, ch chan []int, within time.Duration) ([]int, time.Duration) {
	t.Helper()
	start := time.Now()
	select {
	case got := <-ch:
		return got, time.Since(start)
	case <-time.After(within):
		t.Fatalf("no batch within %v", within)
		return nil, 0
	}
}

// Calls within a window go out together, in arrival order, once the window
// after the first has passed.
func TestWindowCollects(t *testing.T) {
	t.Parallel()
	send, ch := sink()
	b := New(50*time.Millisecond, 0, 100, send)
	b.Add(1, false)
	b.Add(2, false)
	b.Add(3, false)
	got, _ := next(t, ch, 5*time.Second)
	if len(got) != 3 || got[0] != 1 || got[2] != 3 {
		t.Fatalf("batch %v, want [1 2 3]", got)
	}
	select {
	case extra := <-ch:
		t.Fatalf("a second batch %v", extra)
	case <-time.After(100 * time.Millisecond):
	}
}

// A full batch goes out at once, without waiting for its window.
func TestFullBatchGoesAtOnce(t *testing.T) {
	t.Parallel()
	send, ch := sink()
	b := New(time.Hour, time.Hour, 3, send)
	for i := range 4 {
		b.Add(i, false)
	}
	got, _ := next(t, ch, 5*time.Second)
	if len(got) != 3 {
		t.Fatalf("batch of %d, want the limit 3", len(got))
	}
	b.Add(9, false)
	b.Add(10, false)
	if got, _ := next(t, ch, 5*time.Second); len(got) != 3 || got[0] != 3 {
		t.Fatalf("second batch %v, want [3 9 10]", got)
	}
}

// An idle call waits for the idle window, unless a call with a shorter
// window arrives: the batch goes at the earliest instant any call may wait
// to, and takes the idle call along.
func TestIdleWaitsLongerUnlessTakenAlong(t *testing.T) {
	t.Parallel()
	send, ch := sink()
	b := New(20*time.Millisecond, 400*time.Millisecond, 100, send)
	if b.IdleWindow() != 400*time.Millisecond {
		t.Fatalf("IdleWindow() = %v", b.IdleWindow())
	}
	b.Add(1, true)
	select {
	case got := <-ch:
		t.Fatalf("an idle call went out after its short window: %v", got)
	case <-time.After(150 * time.Millisecond):
	}
	got, _ := next(t, ch, 5*time.Second)
	if len(got) != 1 {
		t.Fatalf("idle batch %v", got)
	}

	b.Add(2, true)
	b.Add(3, false)
	got, took := next(t, ch, 5*time.Second)
	if len(got) != 2 || took > 300*time.Millisecond {
		t.Fatalf("batch %v after %v, want [2 3] at the short window", got, took)
	}
}

// The idle window is never shorter than the window.
func TestIdleWindowAtLeastWindow(t *testing.T) {
	t.Parallel()
	if got := New(time.Second, time.Millisecond, 1, func([]int) {}).IdleWindow(); got != time.Second {
		t.Fatalf("IdleWindow() = %v, want 1s", got)
	}
}

// Flush sends what waits at once, and its window's timer then sends
// nothing more; a Flush with nothing waiting sends nothing.
func TestFlushSendsWhatWaits(t *testing.T) {
	t.Parallel()
	send, ch := sink()
	b := New(50*time.Millisecond, time.Hour, 100, send)
	b.Flush()
	b.Add(1, true)
	b.Add(2, true)
	b.Flush()
	got, _ := next(t, ch, 5*time.Second)
	if len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("flushed %v, want [1 2]", got)
	}
	b.Add(3, false)
	if got, _ := next(t, ch, 5*time.Second); len(got) != 1 || got[0] != 3 {
		t.Fatalf("the next window sent %v, want [3]", got)
	}
	select {
	case extra := <-ch:
		t.Fatalf("a batch %v after everything was sent", extra)
	case <-time.After(150 * time.Millisecond):
	}
}
