package policy

import (
	"context"
	"log/slog"
	"reflect"
	"time"

	"github.com/byollm/relay-go/internal/filewatch"
)

// FileSource keeps the policy equal to a file (RELAY_POLICY_FILE): pushed
// (replace) at start and whenever its content changes. Every replica may
// watch the same file; a replica whose file already matches the stored
// policy writes nothing, so the version moves only when the policy does.
type FileSource struct {
	store *Store
	w     *filewatch.Watcher[pushed]
}

// pushed is what one push did.
type pushed struct {
	version int64
	changed bool
}

// NewFileSource watches path for s.
func NewFileSource(s *Store, path string, logger *slog.Logger) *FileSource {
	f := &FileSource{store: s}
	f.w = filewatch.New("policy", path, f.push, func(p pushed) []any {
		return []any{slog.Int64("version", p.version), slog.Bool("changed", p.changed)}
	}, logger)
	return f
}

// Push reads the file and makes the stored policy equal to it. A malformed
// document is an error naming the field, and the policy in force stays.
// changed is false when the stored policy already said the same.
func (f *FileSource) Push(ctx context.Context) (version int64, changed bool, err error) {
	p, err := f.w.Push(ctx)
	return p.version, p.changed, err
}

// Watch polls the file every interval until ctx ends, pushing each new
// content; a malformed or missing file is logged once and the policy in
// force stays.
func (f *FileSource) Watch(ctx context.Context, interval time.Duration) { f.w.Watch(ctx, interval) }

func (f *FileSource) push(ctx context.Context, b []byte) (pushed, error) {
	doc, err := Parse(b, false)
	if err != nil {
		return pushed{}, filewatch.Invalid(err)
	}
	version, changed, err := f.replaceIfDifferent(ctx, doc)
	return pushed{version, changed}, err
}

func (f *FileSource) replaceIfDifferent(ctx context.Context, doc Document) (int64, bool, error) {
	cur, version, err := f.store.Get(ctx)
	if err != nil {
		return 0, false, err
	}
	// Compare in the store's own order: Get sorts, so put the file's
	// document through the same normalisation.
	want := normalise(doc)
	if version > 0 && reflect.DeepEqual(normalise(cur), want) {
		return version, false, nil
	}
	version, err = f.store.Put(ctx, doc)
	return version, err == nil, err
}

// normalise orders a document as Get returns it and fills empty lists, so
// two documents saying the same thing compare equal.
func normalise(d Document) Document {
	blob, err := marshalForCompare(d)
	if err != nil {
		return d
	}
	n, err := Parse(blob, false)
	if err != nil {
		return d
	}
	// The store keeps no empty team: it is the same as no team.
	teams := n.Teams[:0]
	for _, t := range n.Teams {
		if len(t.Members) > 0 {
			teams = append(teams, t)
		}
	}
	n.Teams = teams
	sortDocument(&n)
	return n
}
