package policy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/relaytest"
)

// A policy file is pushed at start; the same content pushed again (another
// replica, a restart) writes nothing; an edit is picked up by the watcher;
// a malformed edit is refused and the policy in force stays.
func TestFileSource(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t, relaytest.Embedded)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "policy.json")
	write := func(doc string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	quiet := relaytest.Logger(t)
	write(`{"consents":[{"siteId":"s","user":"alice","mappings":[]}],"teams":[{"owner":"bob","members":["carol","alice"]},{"owner":"x","members":[]}]}`)
	f := NewFileSource(s, path, quiet)
	v, changed, err := f.Push(ctx)
	if err != nil || v != 1 || !changed {
		t.Fatalf("first push: %d %v %v", v, changed, err)
	}
	// A second replica with the same file: nothing written.
	v, changed, err = NewFileSource(s, path, quiet).Push(ctx)
	if err != nil || v != 1 || changed {
		t.Fatalf("same file again: %d %v %v", v, changed, err)
	}

	// An edit, pushed (the watcher's polling is internal/filewatch's test).
	write(`{"consents":[{"siteId":"s","user":"alice","paused":true,"mappings":[]}]}`)
	if _, _, err := f.Push(ctx); err != nil {
		t.Fatal(err)
	}
	if snap, _ := s.Read(ctx, "s", "alice", "bob"); snap.Consented != "paused" || snap.Member {
		t.Fatalf("after the edit: %+v", snap)
	}
	_, v, _ = s.Get(ctx)

	// A malformed edit: refused, the policy in force stays.
	write(`{"consents":[{"siteId":"s","user":"alice"}]}`)
	if _, _, err := NewFileSource(s, path, quiet).Push(ctx); err == nil || !strings.Contains(err.Error(), "consents[0].mappings: required") {
		t.Fatalf("bad file: %v", err)
	}
	if _, _, err := f.Push(ctx); err == nil {
		t.Fatal("the watcher's source pushed a malformed file")
	}
	if _, v2, _ := s.Get(ctx); v2 != v {
		t.Fatalf("a refused file moved the version %d -> %d", v, v2)
	}
	if snap, _ := s.Read(ctx, "s", "alice", "bob"); snap.Consented != "paused" {
		t.Fatalf("after the refused edit: %+v", snap)
	}

	// The watcher loop itself: a fixed file is pushed within a few ticks.
	write(`{"consents":[]}`)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { f.Watch(wctx, 10*time.Millisecond); close(done) }()
	relaytest.WaitFor(t, 5*time.Second, "the watcher pushes the fixed file", func() bool {
		snap, _ := s.Read(ctx, "s", "alice", "bob")
		return snap.Consented == "no"
	})
	cancel()
	<-done
}
