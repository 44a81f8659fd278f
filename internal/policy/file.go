package policy

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"time"
)

// FileSource keeps the policy equal to a file (RELAY_POLICY_FILE): pushed
// (replace) at start and whenever its content changes. Every replica may
// watch the same file; a replica whose file already matches the stored
// policy writes nothing, so the version moves only when the policy does.
type FileSource struct {
	store *Store
	path  string
	log   *slog.Logger

	sum     [sha256.Size]byte
	modTime time.Time
	size    int64
	checked bool // sum holds the last content pushed or refused
	refused bool // that content was refused
	missing bool
}

// NewFileSource watches path for s.
func NewFileSource(s *Store, path string, logger *slog.Logger) *FileSource {
	if logger == nil {
		logger = slog.Default()
	}
	return &FileSource{store: s, path: path, log: logger.With(slog.String("component", "policy-file"), slog.String("file", path))}
}

// Push reads the file and makes the stored policy equal to it. A malformed
// document is an error naming the field, and the policy in force stays.
// changed is false when the stored policy already said the same.
func (f *FileSource) Push(ctx context.Context) (version int64, changed bool, err error) {
	fi, err := os.Stat(f.path)
	if err != nil {
		return 0, false, fmt.Errorf("policy file: %w", err)
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return 0, false, fmt.Errorf("policy file: %w", err)
	}
	sum := sha256.Sum256(b)
	doc, err := Parse(b, false)
	if err != nil {
		f.refused = true
		f.sum, f.modTime, f.size, f.checked = sum, fi.ModTime(), fi.Size(), true
		return 0, false, fmt.Errorf("policy file %s: %w", f.path, err)
	}
	version, changed, err = f.replaceIfDifferent(ctx, doc)
	if err != nil {
		return 0, false, err
	}
	f.refused = false
	f.sum, f.modTime, f.size, f.checked = sum, fi.ModTime(), fi.Size(), true
	return version, changed, nil
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

// Watch polls the file every interval until ctx ends, pushing each new
// content; a malformed or missing file is logged once and the policy in
// force stays.
func (f *FileSource) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for tick := 1; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.poll(ctx, tick%10 == 0)
	}
}

func (f *FileSource) poll(ctx context.Context, force bool) {
	fi, err := os.Stat(f.path)
	if err != nil {
		if !f.missing {
			f.log.Error("policy file unreadable; keeping the policy in force", slog.Any("err", err))
			f.missing = true
		}
		return
	}
	f.missing = false
	if !force && f.checked && fi.ModTime().Equal(f.modTime) && fi.Size() == f.size {
		return
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		f.log.Error("policy file unreadable; keeping the policy in force", slog.Any("err", err))
		return
	}
	if f.checked && sha256.Sum256(b) == f.sum {
		// Pushed or refused already: an unchanged bad file is logged once.
		f.modTime, f.size = fi.ModTime(), fi.Size()
		return
	}
	version, changed, err := f.Push(ctx)
	switch {
	case err != nil && f.refused:
		f.log.Error("policy file refused; keeping the policy in force", slog.String("reason", err.Error()))
	case err != nil:
		if ctx.Err() == nil {
			f.log.Error("policy file: cannot push to Valkey; will retry", slog.Any("err", err))
		}
	default:
		f.log.Info("policy file pushed", slog.Int64("version", version), slog.Bool("changed", changed))
	}
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
