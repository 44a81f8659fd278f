package relaytest

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
)

// Logger is a text slog.Logger (level Debug) that writes each record through
// t.Log: silent for a passing test unless -v, printed beside a failing one.
// Background goroutines often log after their test has ended, when t.Log
// would panic; such lines are dropped.
func Logger(t testing.TB) *slog.Logger {
	w := &tbWriter{t: t}
	t.Cleanup(w.close)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tbWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *tbWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(bytes.TrimRight(p, "\n")))
	}
	return len(p), nil
}

// close runs as t's last cleanup (registered first): after it t is over.
func (w *tbWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
}

// Discard is a logger that drops everything, for loggers a test must pass
// but never wants to read (benchmarks, hot loops).
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
