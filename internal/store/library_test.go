package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/scriptrun"
	"github.com/byollm/relay-go/lua"
	"github.com/byollm/relay-go/test/relaytest"
)

// The library registers one function per operation, flagged no-writes
// exactly when the operation is read-only; its name follows its code and
// nothing else, and a library file it does not know of is refused.
func TestBuildLibrary(t *testing.T) {
	t.Parallel()
	lib, err := buildLibrary(lua.FS, Scripts)
	if err != nil {
		t.Fatal(err)
	}
	again, err := buildLibrary(lua.FS, Scripts)
	if err != nil || again.name != lib.name || again.src != lib.src {
		t.Fatalf("two builds of the same code differ: %q %q %v", lib.name, again.name, err)
	}
	if len(lib.fn) != len(Scripts) {
		t.Fatalf("%d functions for %d operations", len(lib.fn), len(Scripts))
	}
	for _, sc := range Scripts {
		fname := lib.fn[sc.Name]
		if op, ok := FunctionScript(fname); !ok || op != sc.Name {
			t.Errorf("%s: function %q reads back as %q %v", sc.Name, fname, op, ok)
		}
		decl := "function_name = '" + fname + "'"
		if n := strings.Count(lib.src, decl+","); n != 1 {
			t.Errorf("%s: registered %d times", sc.Name, n)
		}
		if flagged := strings.Contains(lib.src, decl+", flags = {'no-writes'}"); flagged != sc.ReadOnly {
			t.Errorf("%s: no-writes %v, read-only %v", sc.Name, flagged, sc.ReadOnly)
		}
	}

	// One byte of one operation changes the name; so does its mode.
	changed := fstest.MapFS{}
	if err := fs.WalkDir(lua.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(lua.FS, path)
		changed[path] = &fstest.MapFile{Data: body}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	changed["claim.lua"] = &fstest.MapFile{Data: append(append([]byte{}, changed["claim.lua"].Data...), '\n')}
	other, err := buildLibrary(changed, Scripts)
	if err != nil || other.name == lib.name {
		t.Fatalf("a changed operation kept the name %q: %v", other.name, err)
	}
	flipped := append([]Script(nil), Scripts...)
	flipped[0].ReadOnly = !flipped[0].ReadOnly
	if other, err := buildLibrary(lua.FS, flipped); err != nil || other.name == lib.name {
		t.Fatalf("a changed mode kept the name %q: %v", other.name, err)
	}

	changed["lib/extra.lua"] = &fstest.MapFile{Data: []byte("local X = 1\n")}
	if _, err := buildLibrary(changed, Scripts); err == nil || !strings.Contains(err.Error(), "libOrder") {
		t.Fatalf("a library outside libOrder: %v", err)
	}
	delete(changed, "lib/extra.lua")
	delete(changed, "claim.lua")
	if _, err := buildLibrary(changed, Scripts); err == nil {
		t.Fatal("built a library without claim.lua")
	}
}

func TestFunctionScript(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, op string
		ok     bool
	}{
		{"relay_0123456789abcdef_claim", "claim", true},
		{"relay_0123456789abcdef_presence_seen_batch", "presence_seen_batch", true},
		{"relay_0123456789abcdef_", "", false}, // no operation has an empty name
		{"", "", false},
		{"relay_", "", false},
		{"relay_0123456789abcdef", "", false},
		{"relay_0123456789ABCDEF_claim", "", false},
		{"relay_0123456789abcdeg_claim", "", false},
		{"relay_0123456789abcdef-claim", "", false},
		{"other_0123456789abcdef_claim", "", false},
		{"relay_0123456789abcdé_claim", "", false},
	} {
		if op, ok := FunctionScript(tc.in); op != tc.op || ok != tc.ok {
			t.Errorf("FunctionScript(%q) = %q %v, want %q %v", tc.in, op, ok, tc.op, tc.ok)
		}
	}
}

// On a server with FUNCTION the store loads the library and calls it; the
// embedded server has none, and the same operations run as scripts.
func TestStoreRunsFunctionsWhereTheServerHasThem(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		want := b.name != "embedded"
		if h.s.RunsFunctions() != want {
			t.Fatalf("RunsFunctions() = %v on %s", h.s.RunsFunctions(), b.name)
		}
		if want {
			lib, _ := h.s.runner.Library()
			for _, node := range b.client.Nodes() {
				libs, err := node.Do(h.ctx, node.B().FunctionList().Libraryname(lib.Name).Build()).ToArray()
				if err != nil || len(libs) != 1 {
					t.Fatalf("FUNCTION LIST on a node: %d libraries named %s, %v", len(libs), lib.Name, err)
				}
			}
		}
		h.enqueueStub(site, stub("j1", "alice"))
		if got := h.claim(routes([]string{site}, []string{"alice"})); len(got) != 1 {
			t.Fatalf("claimed %d", len(got))
		}
		scripts := newFixture(t, b, Options{evalScripts: true})
		if scripts.s.RunsFunctions() {
			t.Fatal("evalScripts: true still runs functions")
		}
		scripts.enqueueStub(site, stub("j1", "alice"))
		if got := scripts.claim(routes([]string{site}, []string{"alice"})); len(got) != 1 {
			t.Fatalf("claimed %d as scripts", len(got))
		}
	})
}

// A server that lost the library (FUNCTION FLUSH, as after a restart
// without its data) gets it again on the next call, alone and in a
// heartbeat batch, and no call fails for it. A private server: the
// shared one's library is in use by other tests.
func TestFunctionsReloadWhereTheLibraryIsGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := relaytest.StartServer(t)
	c := relaytest.Open(t, srv.URL())
	s, err := New(ctx, c, Options{Namespace: relaytest.NewName(), Logger: relaytest.Discard(), HeartbeatBatch: 20 * time.Millisecond})
	if err != nil || !s.RunsFunctions() {
		t.Fatalf("New: functions %v, %v", s != nil && s.RunsFunctions(), err)
	}
	flush := func() {
		t.Helper()
		if err := c.Do(ctx, c.B().FunctionFlush().Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	h := &storeFixture{t: t, s: s, ctx: ctx}
	dev := freshDevice()

	flush()
	h.seen("runner_1", "alice", dev, `[]`, `[]`) // alone: presence_seen
	flush()
	if _, err := s.Presence(ctx, "runner_1"); err != nil {
		t.Fatalf("a read-only call after FUNCTION FLUSH: %v", err)
	}
	flush()
	errs := make(chan error, 2)
	for _, r := range []string{"runner_1", "runner_2"} {
		go func() {
			_, err := s.Heartbeat(ctx, HeartbeatInput{Presence: Presence{RunnerID: r, Owner: "alice", Device: dev,
				Capabilities: json.RawMessage(`["after"]`)}})
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("a batched heartbeat after FUNCTION FLUSH: %v", err)
		}
	}
	for _, r := range []string{"runner_1", "runner_2"} {
		if p := h.presence(r); string(p.Capabilities) != `["after"]` {
			t.Fatalf("%s: %s", r, p.Capabilities)
		}
	}

	// Many callers at once find it gone: one load serves them all.
	loads := func() int64 {
		t.Helper()
		st, err := relaytest.CommandStats(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		return st["function|load"].Calls
	}
	flush()
	before := loads()
	var wg sync.WaitGroup
	failed := make(chan error, 32)
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Presence(ctx, fmt.Sprint("runner_", i%3)); err != nil {
				failed <- err
			}
		}()
	}
	wg.Wait()
	close(failed)
	for err := range failed {
		t.Fatalf("a call among many after FUNCTION FLUSH: %v", err)
	}
	if n := loads() - before; n != 1 {
		t.Fatalf("32 callers after one flush loaded the library %d times, want 1", n)
	}

	// A server that refuses FUNCTION LOAD (here: its ACL) leaves a new
	// store on scripts, which work.
	if err := c.Do(ctx, c.B().AclSetuser().Username("noload").Rule("on", "nopass", "~*", "&*", "+@all", "-function").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	limited := relaytest.Open(t, strings.Replace(srv.URL(), "redis://", "redis://noload:x@", 1))
	s2, err := New(ctx, limited, Options{Namespace: relaytest.NewName(), Logger: relaytest.Discard()})
	if err != nil {
		t.Fatalf("New under an ACL without FUNCTION: %v", err)
	}
	if s2.RunsFunctions() {
		t.Fatal("runs functions under an ACL that forbids FUNCTION")
	}
	if _, err := s2.Presence(ctx, "runner_1"); err != nil {
		t.Fatalf("scripts under that ACL: %v", err)
	}
}

// nodesClient is a client whose Nodes() are the given ones: a cluster with
// one node that cannot be reached, without stopping a real cluster's node.
type nodesClient struct {
	valkey.Client
	nodes map[string]valkey.Client
}

func (c nodesClient) Nodes() map[string]valkey.Client { return c.nodes }

// A node that cannot be reached when the library loads is passed over
// while another takes it (a relay starts with one node of its cluster
// down); with every node unreachable the load fails with the transport's
// error, not errNoFunctions (a store would not silently fall back to
// scripts because Valkey was down).
func TestFunctionsLoadPastAnUnreachableNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	live := relaytest.Open(t, relaytest.StartServer(t).URL())
	downSrv := relaytest.StartServer(t)
	down := relaytest.Open(t, downSrv.URL())
	if err := down.Do(ctx, down.B().Ping().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	downSrv.Kill()
	<-downSrv.Done()
	lib, err := buildLibrary(lua.FS, Scripts)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	f := scriptrun.NewRunner(nodesClient{live, map[string]valkey.Client{"live": live, "down": down}}, scriptrun.Options{})
	if err := f.LoadLibrary(short, lib.forRunner()); err != nil {
		t.Fatalf("one node of two down: %v", err)
	}
	if f.Generation() != 1 {
		t.Fatalf("generation %d after one load", f.Generation())
	}
	libs, err := live.Do(ctx, live.B().FunctionList().Libraryname(lib.name).Build()).ToArray()
	if err != nil || len(libs) != 1 {
		t.Fatalf("the reachable node lacks the library: %d %v", len(libs), err)
	}
	g := scriptrun.NewRunner(nodesClient{down, map[string]valkey.Client{"down": down}}, scriptrun.Options{})
	err = g.LoadLibrary(short, lib.forRunner())
	if err == nil || errors.Is(err, scriptrun.ErrNoFunctions) || !strings.Contains(err.Error(), "down") {
		t.Fatalf("every node down: %v", err)
	}
	if g.Generation() != 0 || g.Command() != "EVALSHA" {
		t.Fatalf("a failed load moved the generation to %d (%s)", g.Generation(), g.Command())
	}
}
