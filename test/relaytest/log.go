package relaytest

import (
	"bytes"
	"log/slog"
	"strings"
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
	also func(string) // RecordLogs's
}

func (w *tbWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	line := string(bytes.TrimRight(p, "\n"))
	if w.also != nil {
		w.also(line)
	}
	if !w.done {
		w.t.Log(line)
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

// Logs is a logger whose lines a test can look for (each is also written
// through t.Log, like Logger's), to wait for something that is only
// logged: a refusal, a retry.
type Logs struct {
	*slog.Logger
	mu    sync.Mutex
	lines []string
}

// RecordLogs is a Logs for t.
func RecordLogs(t testing.TB) *Logs {
	l := &Logs{}
	w := &tbWriter{t: t, also: l.add}
	t.Cleanup(w.close)
	l.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return l
}

func (l *Logs) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
}

// Count is how many lines logged so far contain s.
func (l *Logs) Count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}
