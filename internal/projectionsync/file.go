package projectionsync

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// FileSource pushes a projection file to Valkey (replace) when its content
// changes. Every replica may watch the same file (a mounted ConfigMap, say):
// the first to push writes a new version, the rest find the same document and
// write nothing.
type FileSource struct {
	sync *Sync
	path string
	log  *slog.Logger

	// What was last read, to skip unchanged files cheaply.
	modTime time.Time
	size    int64
	sum     [sha256.Size]byte
	checked bool // sum holds a read of the file
	// failed remembers a content that was refused (or unreadable), so one
	// bad edit is logged once, not every second.
	failed    [sha256.Size]byte
	hasFailed bool
	missing   bool
}

// NewFileSource watches path for s.
func NewFileSource(s *Sync, path string, logger *slog.Logger) *FileSource {
	if logger == nil {
		logger = slog.Default()
	}
	return &FileSource{sync: s, path: path, log: logger.With(slog.String("component", "projection-file"), slog.String("file", path))}
}

// Push reads the file and replaces the projection with it. An invalid
// document returns *InvalidError naming the field; the projection in force
// is unchanged.
func (f *FileSource) Push(ctx context.Context) (Result, error) {
	fi, err := os.Stat(f.path)
	if err != nil {
		return Result{}, fmt.Errorf("projection file: %w", err)
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return Result{}, fmt.Errorf("projection file: %w", err)
	}
	sum := sha256.Sum256(b)
	err = UniqueKeys(b)
	var res Result
	if err == nil {
		res, err = f.sync.Replace(ctx, b)
	}
	var invalid *InvalidError
	if err == nil || errors.As(err, &invalid) {
		// Either way this content has been dealt with; only a store error
		// leaves it to be tried again on the next poll.
		f.modTime, f.size, f.sum, f.checked = fi.ModTime(), fi.Size(), sum, true
	}
	if invalid != nil {
		f.failed, f.hasFailed = sum, true
		return Result{}, fmt.Errorf("projection file %s: %w", f.path, err)
	}
	if err != nil {
		return Result{}, err
	}
	f.hasFailed = false
	return res, nil
}

// Watch polls the file every interval until ctx ends, pushing each new
// content. A file that fails validation is logged with the field at fault
// and the projection in force stays; so does a file that disappears.
func (f *FileSource) Watch(ctx context.Context, interval time.Duration) {
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
		f.poll(ctx, tick%10 == 0)
	}
}

func (f *FileSource) poll(ctx context.Context, force bool) {
	fi, err := os.Stat(f.path)
	if err != nil {
		if !f.missing {
			f.log.Error("projection file unreadable; keeping the projection in force", slog.Any("err", err))
			f.missing = true
		}
		return
	}
	if f.missing {
		f.log.Info("projection file readable again")
		f.missing = false
	}
	if !force && f.checked && fi.ModTime().Equal(f.modTime) && fi.Size() == f.size {
		return
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		f.log.Error("projection file unreadable; keeping the projection in force", slog.Any("err", err))
		return
	}
	sum := sha256.Sum256(b)
	if f.checked && sum == f.sum {
		f.modTime, f.size = fi.ModTime(), fi.Size()
		return
	}
	if f.hasFailed && sum == f.failed {
		return
	}
	res, err := f.sync.Replace(ctx, b)
	var invalid *InvalidError
	switch {
	case errors.As(err, &invalid):
		f.log.Error("projection file refused; keeping the projection in force", slog.String("reason", invalid.Error()))
		f.failed, f.hasFailed = sum, true
		f.modTime, f.size, f.sum, f.checked = fi.ModTime(), fi.Size(), sum, true
	case err != nil:
		if ctx.Err() == nil {
			f.log.Error("projection file: cannot push to Valkey; will retry", slog.Any("err", err))
		}
	default:
		f.hasFailed = false
		f.modTime, f.size, f.sum, f.checked = fi.ModTime(), fi.Size(), sum, true
		f.log.Info("projection file pushed", slog.Int64("version", res.Version), slog.Bool("changed", res.Changed))
	}
}
