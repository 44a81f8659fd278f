package filewatch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/relaytest"
)

// doc is a stored document: content starting with "bad" is refused, and
// down makes every push fail as a store that does not answer.
type doc struct {
	mu     sync.Mutex
	value  string
	pushes int
	down   bool
}

func (d *doc) push(_ context.Context, b []byte) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pushes++
	if strings.HasPrefix(string(b), "bad") {
		return "", Invalid(errors.New("field x: required"))
	}
	if d.down {
		return "", errors.New("store down")
	}
	d.value = string(b)
	return d.value, nil
}

func (d *doc) get() (string, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.value, d.pushes
}

func (d *doc) setDown(v bool) {
	d.mu.Lock()
	d.down = v
	d.mu.Unlock()
}

func write(t *testing.T, path, content string) {
	t.Helper()
	// Write then rename, as an editor or a ConfigMap update would.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestPushRefusesInvalidAndNamesTheFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "doc.json")
	d := &doc{}
	w := New("thing", path, d.push, func(string) []any { return nil }, relaytest.Logger(t))
	if _, err := w.Push(context.Background()); err == nil || !strings.Contains(err.Error(), "thing file:") {
		t.Fatalf("push of a missing file: %v", err)
	}
	write(t, path, "bad one")
	_, err := w.Push(context.Background())
	if err == nil || !IsInvalid(err) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "field x: required") {
		t.Fatalf("push of a refused file: %v", err)
	}
	write(t, path, "good")
	if v, err := w.Push(context.Background()); err != nil || v != "good" {
		t.Fatalf("push of a good file: %q %v", v, err)
	}
}

// The watcher picks up a changed file; a refused, then a missing file is
// reported once each and the last good value stays; a store that fails is
// tried again; cancelling ctx ends Watch.
func TestWatch(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "doc.json")
	d := &doc{}
	logs := relaytest.RecordLogs(t)
	w := New("thing", path, d.push, func(v string) []any { return []any{"value", v} }, logs.Logger)
	write(t, path, "one")
	if _, err := w.Push(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Watch(ctx, 5*time.Millisecond); close(done) }()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-done
		}
	}()

	write(t, path, "two")
	relaytest.WaitFor(t, 5*time.Second, "the watcher pushes the changed file", func() bool { v, _ := d.get(); return v == "two" })

	write(t, path, "bad edit")
	relaytest.WaitFor(t, 5*time.Second, "the watcher refuses the bad edit", func() bool { return logs.Count("thing file refused") == 1 })
	_, pushes := d.get()
	time.Sleep(100 * time.Millisecond) // many polls, and more than one forced full read
	if v, p := d.get(); v != "two" || p != pushes || logs.Count("thing file refused") != 1 {
		t.Fatalf("after a bad edit: value %q, pushes %d (were %d), refusals logged %d", v, p, pushes, logs.Count("thing file refused"))
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	relaytest.WaitFor(t, 5*time.Second, "the watcher reports the missing file", func() bool { return logs.Count("thing file unreadable") == 1 })
	time.Sleep(50 * time.Millisecond)
	if v, _ := d.get(); v != "two" || logs.Count("thing file unreadable") != 1 {
		t.Fatalf("after the file went: value %q, reported %d times", v, logs.Count("thing file unreadable"))
	}

	// A store that fails is tried again until it answers.
	d.setDown(true)
	write(t, path, "three")
	relaytest.WaitFor(t, 5*time.Second, "the watcher reports the store failure", func() bool { return logs.Count("cannot push to Valkey") >= 2 })
	d.setDown(false)
	relaytest.WaitFor(t, 5*time.Second, "the watcher pushes once the store answers", func() bool { v, _ := d.get(); return v == "three" })
	if logs.Count("thing file readable again") != 1 || logs.Count("value=three") != 1 {
		t.Fatalf("logs: readable again %d, pushed three %d", logs.Count("thing file readable again"), logs.Count("value=three"))
	}

	cancel()
	select {
	case <-done:
		stopped = true
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not return after its context ended")
	}
	_, before := d.get()
	write(t, path, "four")
	time.Sleep(50 * time.Millisecond)
	if _, after := d.get(); after != before {
		t.Fatalf("pushes after Watch returned: %d -> %d", before, after)
	}
}
