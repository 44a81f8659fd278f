package projectionsync

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/byollm/relay-go/internal/filewatch"
)

// FileSource pushes a projection file to Valkey (replace) when its content
// changes. Every replica may watch the same file (a mounted ConfigMap, say):
// the first to push writes a new version, the rest find the same document and
// write nothing.
type FileSource struct {
	w *filewatch.Watcher[Result]
}

// NewFileSource watches path for s.
func NewFileSource(s *Sync, path string, logger *slog.Logger) *FileSource {
	push := func(ctx context.Context, b []byte) (Result, error) {
		err := UniqueKeys(b)
		var res Result
		if err == nil {
			res, err = s.Replace(ctx, b)
		}
		if invalid := (*InvalidError)(nil); errors.As(err, &invalid) {
			return Result{}, filewatch.Invalid(err)
		}
		return res, err
	}
	describe := func(r Result) []any {
		return []any{slog.Int64("version", r.Version), slog.Bool("changed", r.Changed)}
	}
	return &FileSource{w: filewatch.New("projection", path, push, describe, logger)}
}

// Push reads the file and replaces the projection with it. An invalid
// document returns an error wrapping *InvalidError, naming the field; the
// projection in force is unchanged.
func (f *FileSource) Push(ctx context.Context) (Result, error) { return f.w.Push(ctx) }

// Watch polls the file every interval until ctx ends, pushing each new
// content. A file that fails validation is logged with the field at fault
// and the projection in force stays; so does a file that disappears.
func (f *FileSource) Watch(ctx context.Context, interval time.Duration) { f.w.Watch(ctx, interval) }
