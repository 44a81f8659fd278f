package scriptrun_test

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/policy"
	"github.com/byollm/relay-go/internal/projectionsync"
	"github.com/byollm/relay-go/internal/scriptrun"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/test/relaytest"
)

// calls is an observer that keeps each call's name and error class.
type calls struct {
	mu    sync.Mutex
	seen  map[string]int
	class map[string]string
}

func (c *calls) observe(ctx context.Context, name string) (context.Context, func(error)) {
	return ctx, func(err error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.seen[name]++
		var e *scriptrun.Error
		if errors.As(err, &e) {
			c.class[name] = e.ErrorClass()
		}
	}
}

// callers is a store, a policy store and a projection on the store's one
// runner, as the relay wires them (cmd/relay).
type callers struct {
	st   *store.Store
	pol  *policy.Store
	proj *projectionsync.Sync
	obs  *calls
}

func newCallers(t *testing.T, srv *relaytest.ValkeyServer, timeout time.Duration) callers {
	t.Helper()
	c := relaytest.Open(t, srv.URL())
	obs := &calls{seen: map[string]int{}, class: map[string]string{}}
	ns := relaytest.NewName()
	st, err := store.New(context.Background(), c, store.Options{Namespace: ns, Logger: relaytest.Discard(),
		ObserveScript: obs.observe, CallTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.NewStoreOn(st.Runner(), ns)
	if err != nil {
		t.Fatal(err)
	}
	proj := projectionsync.New(c, projectionsync.Options{Namespace: ns, Logger: relaytest.Discard(), Runner: st.Runner()})
	return callers{st: st, pol: pol, proj: proj, obs: obs}
}

// each calls the store, the policy and the projection once, each a
// script that writes.
func (cs callers) each(ctx context.Context) map[string]error {
	_, perr := cs.pol.Merge(ctx, policy.Document{Consents: []policy.Consent{{SiteID: "site_a", User: "alice"}}})
	_, jerr := cs.proj.Replace(ctx, []byte(emptyProjection))
	_, serr := cs.st.Seen(ctx, store.Presence{RunnerID: "runner_1", Owner: "alice"})
	return map[string]error{"store": serr, "policy": perr, "projection": jerr}
}

// The store's, the policy's and the projection's calls are all observed:
// each script under its own name.
func TestEveryCallerIsObserved(t *testing.T) {
	cs := newCallers(t, relaytest.StartServer(t), 0)
	ctx := context.Background()
	if err := cs.proj.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.pol.Read(ctx, "site_a", "alice", "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.proj.Replace(ctx, []byte(emptyProjection)); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.st.Presence(ctx, "runner_1"); err != nil {
		t.Fatal(err)
	}
	cs.obs.mu.Lock()
	defer cs.obs.mu.Unlock()
	for _, name := range []string{"policy_read", "projection_head", "projection_put", "presence_get"} {
		if cs.obs.seen[name] == 0 {
			t.Errorf("no %s call observed (saw %v)", name, cs.obs.seen)
		}
	}
}

// Past the runner's bound (a frozen server), a store, a policy and a
// projection call alike fail with the deadline, classed as a timeout.
func TestEveryCallerIsBounded(t *testing.T) {
	srv := relaytest.StartServer(t)
	cs := newCallers(t, srv, 200*time.Millisecond)
	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Signal(syscall.SIGCONT) }()
	start := time.Now()
	for who, err := range cs.each(context.Background()) {
		if !errors.Is(err, context.DeadlineExceeded) || store.Classify(err) != store.ClassUnavailable {
			t.Errorf("%s on a frozen server: %v (%v)", who, err, store.Classify(err))
		}
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("three bounded calls took %v", took)
	}
	cs.obs.mu.Lock()
	defer cs.obs.mu.Unlock()
	for _, name := range []string{"policy_write", "projection_put", "presence_seen"} {
		if cs.obs.class[name] != "timeout" {
			t.Errorf("%s: class %q, want timeout (%v)", name, cs.obs.class[name], cs.obs.class)
		}
	}
}

// A full server's OOM reply classifies the same for every caller: the
// observer's "full", and an unavailable store.
func TestEveryCallerClassifiesAlike(t *testing.T) {
	srv := relaytest.StartServer(t)
	cs := newCallers(t, srv, 0)
	c := relaytest.Open(t, srv.URL())
	ctx := context.Background()
	if err := c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", "1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for who, err := range cs.each(ctx) {
		if scriptrun.ReplyPrefix(err) != "OOM" || store.Classify(err) != store.ClassUnavailable || scriptrun.Class(err) != "full" {
			t.Errorf("%s on a full server: %v (%v, %q)", who, err, store.Classify(err), scriptrun.Class(err))
		}
	}
	cs.obs.mu.Lock()
	defer cs.obs.mu.Unlock()
	for _, name := range []string{"policy_write", "projection_put", "presence_seen"} {
		if cs.obs.class[name] != "full" {
			t.Errorf("%s: class %q, want full (%v)", name, cs.obs.class[name], cs.obs.class)
		}
	}
}

const emptyProjection = `{"sites":[],"consents":[],"devices":[],"rosters":[],"revoked":[]}`
