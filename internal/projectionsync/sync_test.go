package projectionsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/test/relaytest"
)

// testClient is the test Valkey and a fresh namespace whose keys are
// deleted when the test ends.
func testClient(t *testing.T) (valkey.Client, string) {
	t.Helper()
	c := relaytest.Client(t)
	return c, relaytest.Namespace(t, c)
}

// follower starts a Sync running in the background, as a replica would.
// tweak, if given, adjusts it before it starts.
func follower(t *testing.T, c valkey.Client, ns string, tweak ...func(*Sync)) *Sync {
	t.Helper()
	s := New(c, Options{Namespace: ns, Logger: relaytest.Logger(t)})
	for _, f := range tweak {
		f(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-s.Loaded():
	case <-time.After(5 * time.Second):
		t.Fatal("no projection loaded within 5s")
	}
	return s
}

const site1 = `{"siteId":"site-1","site":{"identity":"aWRlbnRpdHktMQ","encryption":"ZW5jLTE","encryptionSig":"c2lnLTE"}}`

func fixture(consents ...string) string {
	return fmt.Sprintf(`{"sites":[%s],"consents":[%s]}`, site1, strings.Join(consents, ","))
}

func consent(owner string, paused bool) string {
	return fmt.Sprintf(`{"owner":%q,"siteId":"site-1","paused":%t}`, owner, paused)
}

func TestEmptyBeforeAnyWrite(t *testing.T) {
	t.Parallel()
	c, ns := testClient(t)
	s := New(c, Options{Namespace: ns, Logger: relaytest.Logger(t)})
	if s.Current() != nil {
		t.Fatal("Current must be nil before the first load")
	}
	if err := s.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := s.Current()
	if p == nil {
		t.Fatal("with nothing stored, the empty projection is in force after a load")
	}
	if st := s.State(); !st.Loaded || st.Version != 0 {
		t.Fatalf("state %+v", st)
	}
	doc, err := s.Get(context.Background())
	if err != nil || doc.Version != 0 {
		t.Fatalf("Get: %+v %v", doc, err)
	}
	var f map[string]json.RawMessage
	if err := json.Unmarshal(doc.JSON, &f); err != nil || string(f["consents"]) != "[]" {
		t.Fatalf("empty document %s (%v)", doc.JSON, err)
	}
}

// TestFollowsAnotherReplica: a write made through one instance is in force
// on another within one second, with the subscription and with polling
// alone.
func TestFollowsAnotherReplica(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"subscribe+poll", "poll only"} {
		t.Run(mode, func(t *testing.T) {
			c, ns := testClient(t)
			writer := New(c, Options{Namespace: ns, Logger: relaytest.Logger(t)})
			var tweak []func(*Sync)
			if mode == "poll only" {
				// A different channel: messages never arrive, so only the
				// 500 ms poll can notice.
				tweak = append(tweak, func(s *Sync) { s.channel += ":elsewhere" })
			}
			reader := follower(t, c, ns, tweak...)
			for i := 1; i <= 3; i++ {
				owner := fmt.Sprintf("owner-%d", i)
				res, err := writer.Replace(context.Background(), []byte(fixture(consent(owner, false))))
				if err != nil {
					t.Fatalf("Replace: %v", err)
				}
				if !res.Changed || res.Version != int64(i) || res.Consents != 1 || res.Sites != 1 {
					t.Fatalf("result %+v", res)
				}
				start := time.Now()
				relaytest.WaitFor(t, time.Second, fmt.Sprintf("the reader follows version %d", res.Version), func() bool { return reader.Version() == res.Version })
				took := time.Since(start)
				if !mayRoute(reader.Current(), owner) {
					t.Fatalf("version %d in force but %s has no route", res.Version, owner)
				}
				t.Logf("version %d followed in %v", res.Version, took)
			}
		})
	}
}

func TestReplaceSameDocumentWritesNothing(t *testing.T) {
	t.Parallel()
	c, ns := testClient(t)
	s := New(c, Options{Namespace: ns, Logger: relaytest.Logger(t)})
	ctx := context.Background()
	first, err := s.Replace(ctx, []byte(fixture(consent("alice", false))))
	if err != nil {
		t.Fatal(err)
	}
	// Same records, different spelling: canonicalisation makes it the same.
	again, err := s.Replace(ctx, []byte(" {\"consents\":["+consent("alice", false)+"],\n\"sites\":["+site1+"]} "))
	if err != nil {
		t.Fatal(err)
	}
	if again.Changed || again.Version != first.Version || again.UpdatedAt != first.UpdatedAt {
		t.Fatalf("identical document rewrote: first %+v, again %+v", first, again)
	}
}

func TestBadDocumentRefusedWhole(t *testing.T) {
	t.Parallel()
	c, ns := testClient(t)
	ctx := context.Background()
	writer := New(c, Options{Namespace: ns, Logger: relaytest.Logger(t)})
	reader := follower(t, c, ns)
	good, err := writer.Replace(ctx, []byte(fixture(consent("alice", false))))
	if err != nil {
		t.Fatal(err)
	}
	relaytest.WaitFor(t, time.Second, "the reader follows version "+fmt.Sprint(good.Version), func() bool { return reader.Version() == good.Version })

	tests := []struct {
		name  string
		doc   string
		merge bool
		field string // must appear in the message
	}{
		{"unknown top-level key", `{"consents":[],"extra":1}`, false, "extra"},
		{"missing consents", `{"sites":[]}`, false, "consents"},
		{"unknown key deep inside", fixture(`{"owner":"bob","siteId":"site-1","colour":"red"}`), false, "colour"},
		{"wrong type", fixture(`{"owner":"bob","siteId":"site-1","paused":"yes"}`), false, "paused"},
		{"null optional", fixture(`{"owner":"bob","siteId":"site-1","paused":null}`), false, "paused"},
		{"not JSON", `{"consents":[`, false, ""},
		{"merge: bad record", `{"consents":[{"owner":"bob"}]}`, true, "merge body: projection: consents[0].siteId: required"},
		{"merge: bad record in another array", `{"devices":[{"owner":"bob","runnerId":"r"}]}`, true, "merge body: projection: devices[0].device: required"},
		{"merge: unknown array", `{"robots":[]}`, true, "robots"},
		{"merge: not an array", `{"sites":{}}`, true, "sites"},
		{"merge: not an object", `[]`, true, "object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.merge {
				_, err = writer.Merge(ctx, []byte(tt.doc))
			} else {
				_, err = writer.Replace(ctx, []byte(tt.doc))
			}
			var invalid *InvalidError
			if !errors.As(err, &invalid) {
				t.Fatalf("want *InvalidError, got %v", err)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("message %q does not name %q", err, tt.field)
			}
			t.Logf("refused: %v", err)
			doc, err := writer.Get(ctx)
			if err != nil || doc.Version != good.Version {
				t.Fatalf("stored version moved to %d (%v)", doc.Version, err)
			}
			if writer.Version() != good.Version || !mayRoute(writer.Current(), "alice") {
				t.Fatal("the writer's projection in force changed")
			}
		})
	}
	// What a poll does, now rather than after a sleep.
	if err := reader.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if reader.Version() != good.Version || !mayRoute(reader.Current(), "alice") {
		t.Fatal("the reader's projection in force changed")
	}
}

// TestBadDocumentInValkeyKept: a document written around the validator
// (by hand) is refused by every replica, which keep what they have.
func TestBadDocumentInValkeyKept(t *testing.T) {
	t.Parallel()
	c, ns := testClient(t)
	ctx := context.Background()
	writer := New(c, Options{Namespace: ns, Logger: relaytest.Logger(t)})
	reader := follower(t, c, ns)
	good, err := writer.Replace(ctx, []byte(fixture(consent("alice", false))))
	if err != nil {
		t.Fatal(err)
	}
	relaytest.WaitFor(t, time.Second, "the reader follows version "+fmt.Sprint(good.Version), func() bool { return reader.Version() == good.Version })
	key, _ := Keys(ns)
	if err := c.Do(ctx, c.B().Hset().Key(key).FieldValue().FieldValue("version", "99").FieldValue("json", `{"nope":1}`).FieldValue("sha", "x").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := reader.Refresh(ctx); err != nil { // what a poll does
		t.Fatal(err)
	}
	if reader.Version() != good.Version || !mayRoute(reader.Current(), "alice") {
		t.Fatalf("reader installed a bad document (version %d)", reader.Version())
	}
	// The next valid write supersedes it everywhere.
	next, err := writer.Replace(ctx, []byte(fixture(consent("bob", false))))
	if err != nil {
		t.Fatal(err)
	}
	if next.Version != 100 {
		t.Fatalf("version after the hand-written 99: %d", next.Version)
	}
	relaytest.WaitFor(t, time.Second, "the reader follows version "+fmt.Sprint(100), func() bool { return reader.Version() == 100 })
}

func TestMergeUpserts(t *testing.T) {
	t.Parallel()
	c, ns := testClient(t)
	ctx := context.Background()
	s := New(c, Options{Namespace: ns, Logger: relaytest.Logger(t)})
	if _, err := s.Replace(ctx, []byte(fixture(consent("alice", false), consent("bob", false)))); err != nil {
		t.Fatal(err)
	}
	// alice's consent is replaced in place (paused), carol's appended; sites
	// untouched because the patch does not name them.
	res, err := s.Merge(ctx, []byte(`{"consents":[`+consent("alice", true)+`,`+consent("carol", false)+`]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Changed || res.Consents != 3 || res.Sites != 1 {
		t.Fatalf("merge result %+v", res)
	}
	doc, err := s.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Consents []struct {
			Owner  string `json:"owner"`
			Paused bool   `json:"paused"`
		} `json:"consents"`
		Sites []json.RawMessage `json:"sites"`
	}
	if err := json.Unmarshal(doc.JSON, &f); err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(f.Consents)
	if got != "[{alice true} {bob false} {carol false}]" || len(f.Sites) != 1 {
		t.Fatalf("merged document %s", doc.JSON)
	}
	p := s.Current()
	if mayRoute(p, "alice") || !mayRoute(p, "bob") || !mayRoute(p, "carol") {
		t.Fatal("merged projection not in force on the writer")
	}
	// Merging the same again changes nothing.
	again, err := s.Merge(ctx, []byte(`{"consents":[`+consent("carol", false)+`]}`))
	if err != nil || again.Changed || again.Version != res.Version {
		t.Fatalf("idempotent merge: %+v %v", again, err)
	}
}

// TestConcurrentMergesLoseNothing: many writers merging distinct records at
// once, from separate instances; every record must survive.
func TestConcurrentMergesLoseNothing(t *testing.T) {
	t.Parallel()
	c, ns := testClient(t)
	ctx := context.Background()
	base := New(c, Options{Namespace: ns, Logger: relaytest.Logger(t)})
	if _, err := base.Replace(ctx, []byte(fixture())); err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 5
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := New(c, Options{Namespace: ns, Logger: relaytest.Logger(t)})
			for i := range each {
				_, err := s.Merge(ctx, []byte(`{"consents":[`+consent(fmt.Sprintf("w%d-%d", w, i), false)+`]}`))
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("merge: %v", err)
	}
	if err := base.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	doc, _ := base.Get(ctx)
	var f struct{ Consents []json.RawMessage }
	json.Unmarshal(doc.JSON, &f)
	if len(f.Consents) != writers*each || doc.Version != writers*each+1 {
		t.Fatalf("%d consents at version %d, want %d at %d", len(f.Consents), doc.Version, writers*each, writers*each+1)
	}
	for w := range writers {
		for i := range each {
			if !mayRoute(base.Current(), fmt.Sprintf("w%d-%d", w, i)) {
				t.Fatalf("w%d-%d lost", w, i)
			}
		}
	}
}

func TestFileSource(t *testing.T) {
	t.Parallel()
	c, ns := testClient(t)
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "projection.json")
	write := func(doc string) {
		t.Helper()
		// Write then rename, as an editor or a ConfigMap update would.
		tmp := filepath.Join(dir, "tmp.json")
		if err := os.WriteFile(tmp, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(fixture(consent("alice", false)))
	writer := New(c, Options{Namespace: ns, Logger: relaytest.Logger(t)})
	reader := follower(t, c, ns)
	logs := relaytest.RecordLogs(t)
	fs := NewFileSource(writer, path, logs.Logger)
	res, err := fs.Push(ctx)
	if err != nil || !res.Changed {
		t.Fatalf("initial push: %+v %v", res, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { fs.Watch(wctx, 100*time.Millisecond); close(done) }()
	defer func() { cancel(); <-done }()

	// A second replica pushing the same file writes nothing.
	if again, err := NewFileSource(New(c, Options{Namespace: ns, Logger: relaytest.Logger(t)}), path, relaytest.Logger(t)).Push(ctx); err != nil || again.Changed {
		t.Fatalf("second replica's push: %+v %v", again, err)
	}

	write(fixture(consent("bob", false)))
	relaytest.WaitFor(t, 2*time.Second, "the reader routes for "+"bob", func() bool { return mayRoute(reader.Current(), "bob") })
	v := reader.Version()

	// A bad edit is refused and the projection in force stays.
	write(`{"consents":[{"owner":"carol"}]}`)
	relaytest.WaitFor(t, 5*time.Second, "the watcher refuses the bad edit", func() bool { return logs.Count("projection file refused") == 1 })
	if doc, _ := writer.Get(ctx); doc.Version != v || !mayRoute(reader.Current(), "bob") {
		t.Fatalf("bad file changed the projection (stored version %d, was %d)", doc.Version, v)
	}
	// A bad file at start-up is an error naming the field.
	if _, err := NewFileSource(writer, path, relaytest.Logger(t)).Push(ctx); err == nil || !strings.Contains(err.Error(), "siteId") {
		t.Fatalf("push of a bad file: %v", err)
	}
	// So is a file naming a key twice (issue 27: read last-wins before, so
	// the first "consents" vanished without a word).
	write(`{"consents":[{"owner":"dave","siteId":"s"}],"consents":[]}`)
	if _, err := NewFileSource(writer, path, relaytest.Logger(t)).Push(ctx); err == nil || !strings.Contains(err.Error(), `names the key "consents" twice`) {
		t.Fatalf("push of a file naming a key twice: %v", err)
	}
	if doc, _ := writer.Get(ctx); doc.Version != v {
		t.Fatalf("a file naming a key twice changed the projection (stored version %d, was %d)", doc.Version, v)
	}

	// Fixing the file is picked up.
	write(fixture(consent("carol", false)))
	relaytest.WaitFor(t, 2*time.Second, "the reader routes for "+"carol", func() bool { return mayRoute(reader.Current(), "carol") })

	// A deleted file keeps the projection in force.
	os.Remove(path)
	relaytest.WaitFor(t, 5*time.Second, "the watcher finds the file gone", func() bool { return logs.Count("projection file unreadable") == 1 })
	if !mayRoute(reader.Current(), "carol") {
		t.Fatal("deleting the file changed the projection")
	}
}

// device is a device record JSON; runner is spliced in raw, so a test can
// give it JSON escapes such as \ud800.
func device(runner string) string {
	return `{"owner":"o","runnerId":"` + runner + `","device":{"identity":"aWQ","encryption":"ZW5j","encryptionSig":"c2ln"}}`
}

const emptyLists = `{"sites":[],"consents":[],"devices":[],"rosters":[],"revoked":[]}`

// TestMergeDocs: the merge itself, without Valkey.
func TestMergeDocs(t *testing.T) {
	t.Parallel()
	empty := string(emptyDoc().canon)
	tests := []struct {
		name, base, patch, want, err string
	}{
		{"absent arrays kept", fixture(), `{"consents":[` + consent("o", false) + `]}`,
			fixture(consent("o", false)), ""},
		{"replace in place keeps order", fixture(consent("a", false), consent("b", false)), `{"consents":[` + consent("a", true) + `]}`,
			fixture(consent("a", true), consent("b", false)), ""},
		{"composite key", `{"consents":[],"revoked":[{"owner":"o","siteId":"a"}]}`, `{"revoked":[{"owner":"o","siteId":"b"},{"owner":"o","siteId":"a"}]}`,
			`{"consents":[],"revoked":[{"owner":"o","siteId":"a"},{"owner":"o","siteId":"b"}]}`, ""},
		{"a pair is not a joined string", `{"consents":[{"owner":"a\u0000","siteId":"b"}]}`, `{"consents":[{"owner":"a","siteId":"\u0000b"}]}`,
			`{"consents":[{"owner":"a\u0000","siteId":"b"},{"owner":"a","siteId":"\u0000b"}]}`, ""},
		{"rosters by id", `{"consents":[],"rosters":[{"id":"r","owner":"o","members":[]}]}`, `{"rosters":[{"id":"r","owner":"o","members":["x"]}]}`,
			`{"consents":[],"rosters":[{"id":"r","owner":"o","members":["x"]}]}`, ""},
		// Issue: lone surrogates were keyed through encoding/json, which
		// turns each into U+FFFD, so these three were one device.
		{"lone surrogates are distinct ids", empty, `{"devices":[` + device(`r\ud800`) + `,` + device(`r\udbff`) + `,` + device("r\ufffd") + `]}`,
			`{"consents":[],"devices":[` + device(`r\ud800`) + `,` + device(`r\udbff`) + `,` + device("r\ufffd") + `]}`, ""},
		// Issue: empty lists made the merged arrays null, refused as
		// "sites: expected array, received null".
		{"empty lists onto nothing", empty, emptyLists, empty, ""},
		{"empty lists onto a document", fixture(consent("a", false)), emptyLists, fixture(consent("a", false)), ""},
		{"empty object", fixture(consent("a", false)), `{}`, fixture(consent("a", false)), ""},
		{"unknown key", empty, `{"x":[]}`, "", `merge body: projection: unrecognized key "x"`},
		{"record not an object", empty, `{"sites":[1]}`, "", "merge body: projection: sites[0]: expected object, received number"},
		{"null list", empty, `{"sites":null}`, "", "merge body: projection: sites: expected array, received null"},
		{"not JSON", empty, `{"sites":[`, "", "merge body: projection: the document is not valid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := mergeDocs([]byte(tt.base), []byte(tt.patch))
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("want error %q, got %v", tt.err, err)
				}
				return
			}
			want, werr := decodeDoc([]byte(tt.want))
			if werr != nil {
				t.Fatalf("the expected document is invalid: %v", werr)
			}
			if err != nil || string(got.canon) != string(want.canon) {
				t.Fatalf("got %s (%v), want %s", got.canon, err, want.canon)
			}
		})
	}
}

// TestMergeLoneSurrogates: three runner ids that differ only in a lone
// surrogate (or a literal U+FFFD) stay three devices through Sync.Merge,
// in Valkey and in the projection in force.
func TestMergeLoneSurrogates(t *testing.T) {
	t.Parallel()
	c, ns := testClient(t)
	ctx := context.Background()
	s := New(c, Options{Namespace: ns, Logger: relaytest.Logger(t)})
	for _, id := range []string{`r\ud800`, `r\udbff`, "r\ufffd"} {
		if _, err := s.Merge(ctx, []byte(`{"devices":[`+device(id)+`]}`)); err != nil {
			t.Fatalf("merge %s: %v", id, err)
		}
	}
	doc, err := s.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, err := projection.Parse(doc.JSON)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Devices) != 3 || doc.Version != 3 {
		t.Fatalf("version %d, devices %s", doc.Version, doc.JSON)
	}
	// The ids as JS strings: \ud800 and \udbff are lone surrogates
	// (WTF-8 ED A0 80 and ED AF BF), the third a real U+FFFD.
	ids := []string{"r\xed\xa0\x80", "r\xed\xaf\xbf", "r\ufffd"}
	p := s.Current()
	for i, id := range ids {
		if f.Devices[i].RunnerID != id {
			t.Errorf("devices[%d].runnerId = %q, want %q", i, f.Devices[i].RunnerID, id)
		}
		if d := p.DeviceFor(id); d == nil || d.RunnerID != id {
			t.Errorf("DeviceFor(%q) = %+v", id, d)
		}
	}
}

// TestMergeNothingNew: a merge of empty lists (a control plane with nothing
// new) is a no-op: onto nothing it leaves nothing stored, onto a document it
// keeps the version; a merge onto nothing merges onto the empty projection.
func TestMergeNothingNew(t *testing.T) {
	t.Parallel()
	c, ns := testClient(t)
	ctx := context.Background()
	s := New(c, Options{Namespace: ns, Logger: relaytest.Logger(t)})
	res, err := s.Merge(ctx, []byte(emptyLists))
	if err != nil || res.Changed || res.Version != 0 {
		t.Fatalf("empty merge onto nothing: %+v %v", res, err)
	}
	if doc, err := s.Get(ctx); err != nil || doc.Version != 0 {
		t.Fatalf("stored version %d after a no-op merge (%v)", doc.Version, err)
	}
	if s.Current() == nil {
		t.Fatal("the writer has no projection in force after the merge")
	}
	res, err = s.Merge(ctx, []byte(`{"sites":[`+site1+`],"consents":[`+consent("alice", false)+`],"devices":[],"rosters":[],"revoked":[]}`))
	if err != nil || !res.Changed || res.Version != 1 || res.Sites != 1 || res.Consents != 1 {
		t.Fatalf("merge onto nothing: %+v %v", res, err)
	}
	if !mayRoute(s.Current(), "alice") {
		t.Fatal("merged projection not in force")
	}
	again, err := s.Merge(ctx, []byte(emptyLists))
	if err != nil || again.Changed || again.Version != 1 || again.UpdatedAt != res.UpdatedAt || again.Consents != 1 {
		t.Fatalf("empty merge onto version 1: %+v %v", again, err)
	}
}

// TestEmbeddedBackend runs the follower on the embedded miniredis, where a
// subscribed connection accepts nothing else: the subscription must not
// take the shared connection down with it.
func TestEmbeddedBackend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := relaytest.Open(t, "") // a server of its own: the namespace is the default one
	writer := New(c, Options{Namespace: "byollm", Logger: relaytest.Logger(t)})
	reader := follower(t, c, "byollm")
	for i := 1; i <= 3; i++ {
		owner := fmt.Sprintf("owner-%d", i)
		res, err := writer.Replace(ctx, []byte(fixture(consent(owner, false))))
		if err != nil || res.Version != int64(i) {
			t.Fatalf("Replace on the embedded store: %+v %v", res, err)
		}
		relaytest.WaitFor(t, 5*time.Second, "the reader routes for "+owner, func() bool { return mayRoute(reader.Current(), owner) })
	}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		t.Fatalf("the shared connection is unusable after subscribing: %v", err)
	}
}
