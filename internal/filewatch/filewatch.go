// Package filewatch keeps a stored document equal to a file an operator
// edits (RELAY_PROJECTION_FILE, RELAY_POLICY_FILE): the file is pushed at
// start and again whenever its content changes. A file that is refused,
// unreadable or gone is reported once and what is in force stays.
package filewatch

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// Push makes the stored document equal to content. It returns an error
// wrapped by Invalid when the content itself is refused; any other error
// (the store did not answer) is tried again on the next poll.
type Push[T any] func(ctx context.Context, content []byte) (T, error)

// invalidError marks content that was refused: pushing it again is useless
// until the file changes.
type invalidError struct{ err error }

func (e *invalidError) Error() string { return e.err.Error() }
func (e *invalidError) Unwrap() error { return e.err }

// Invalid marks err as a refusal of the content (a malformed document).
func Invalid(err error) error {
	if err == nil {
		return nil
	}
	return &invalidError{err: err}
}

// IsInvalid reports whether err is a refusal of the content.
func IsInvalid(err error) bool {
	var inv *invalidError
	return errors.As(err, &inv)
}

// Watcher pushes one file. Its methods are not safe for concurrent use:
// Push at start, then Watch in one goroutine.
type Watcher[T any] struct {
	what     string // "projection": names the file and the document in logs and errors
	path     string
	push     Push[T]
	describe func(T) []any // the attributes of a "pushed" log line
	log      *slog.Logger

	// What was last dealt with (pushed or refused), to skip unchanged files
	// cheaply and log a bad edit once, not every poll.
	modTime time.Time
	size    int64
	sum     [sha256.Size]byte
	checked bool
	missing bool
}

// New watches path, pushing its content with push; what names the document
// ("policy"), describe gives the attributes logged after a push.
func New[T any](what, path string, push Push[T], describe func(T) []any, logger *slog.Logger) *Watcher[T] {
	if logger == nil {
		logger = slog.Default()
	}
	return &Watcher[T]{what: what, path: path, push: push, describe: describe,
		log: logger.With(slog.String("component", what+"-file"), slog.String("file", path))}
}

// Push reads the file and pushes it. A refused document is an error naming
// the file (and wrapping the refusal); what is in force stays.
func (w *Watcher[T]) Push(ctx context.Context) (T, error) {
	var zero T
	fi, err := os.Stat(w.path)
	if err != nil {
		return zero, fmt.Errorf("%s file: %w", w.what, err)
	}
	b, err := os.ReadFile(w.path)
	if err != nil {
		return zero, fmt.Errorf("%s file: %w", w.what, err)
	}
	res, err := w.pushContent(ctx, fi, b)
	if IsInvalid(err) {
		return zero, fmt.Errorf("%s file %s: %w", w.what, w.path, err)
	}
	return res, err
}

// pushContent pushes b, read from a file described by fi, and remembers it
// unless the store failed (then the next poll tries again).
func (w *Watcher[T]) pushContent(ctx context.Context, fi os.FileInfo, b []byte) (T, error) {
	res, err := w.push(ctx, b)
	if err == nil || IsInvalid(err) {
		w.modTime, w.size, w.sum, w.checked = fi.ModTime(), fi.Size(), sha256.Sum256(b), true
	}
	return res, err
}

// Watch polls the file every interval until ctx ends, pushing each new
// content.
func (w *Watcher[T]) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for tick := 1; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// The stat comparison catches ordinary edits; a full read every
		// tenth tick also catches a rewrite that kept size and mtime.
		w.poll(ctx, tick%10 == 0)
	}
}

func (w *Watcher[T]) poll(ctx context.Context, force bool) {
	fi, err := os.Stat(w.path)
	if err != nil {
		if !w.missing {
			w.log.Error(w.what+" file unreadable; keeping the "+w.what+" in force", slog.Any("err", err))
			w.missing = true
		}
		return
	}
	if w.missing {
		w.log.Info(w.what + " file readable again")
		w.missing = false
	}
	if !force && w.checked && fi.ModTime().Equal(w.modTime) && fi.Size() == w.size {
		return
	}
	b, err := os.ReadFile(w.path)
	if err != nil {
		w.log.Error(w.what+" file unreadable; keeping the "+w.what+" in force", slog.Any("err", err))
		return
	}
	if w.checked && sha256.Sum256(b) == w.sum {
		// Pushed or refused already: an unchanged bad file is logged once.
		w.modTime, w.size = fi.ModTime(), fi.Size()
		return
	}
	res, err := w.pushContent(ctx, fi, b)
	switch {
	case IsInvalid(err):
		w.log.Error(w.what+" file refused; keeping the "+w.what+" in force", slog.String("reason", err.Error()))
	case err != nil:
		if ctx.Err() == nil {
			w.log.Error(w.what+" file: cannot push to Valkey; will retry", slog.Any("err", err))
		}
	default:
		w.log.Info(w.what+" file pushed", w.describe(res)...)
	}
}
