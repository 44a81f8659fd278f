package relay

import (
	"context"
	"slices"
	"sync"
	"testing"
)

// recordedWork is a WorkObserver that keeps the completions it is told of.
type recordedWork struct {
	noWork
	mu        sync.Mutex
	completed []string
}

func (w *recordedWork) Completed(_ context.Context, recipientKeyID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.completed = append(w.completed, recipientKeyID)
}

// An accepted result tells the observer once, with its envelope's
// recipient key id (what names the site in the operations view); a
// duplicate of it tells nothing.
func TestCompletedNamesTheRecipientKey(t *testing.T) {
	t.Parallel()
	obs := &recordedWork{}
	e := newEnv(t, func(c *Config) { c.Work = obs })
	w := newWorld(t)
	w.install(e)
	lease := e.enqueueAndClaim(t, w, "done-1", "alice", w.alice, "runner_alice")
	env := envelope("result")
	env.RecipientKeyID = "BYOLLM-RECP-SITE-A"
	body := resultJSON(t, "runner_alice", "done-1", lease.ID, env)
	expect(t, e.daemonPost(w.alice, "runner_alice", "result", body), 200, `{"accepted":true,"state":"done"}`)
	expect(t, e.daemonPost(w.alice, "runner_alice", "result", body), 200, `{"accepted":false,"duplicate":true,"state":"done"}`)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if want := []string{"BYOLLM-RECP-SITE-A"}; !slices.Equal(obs.completed, want) {
		t.Fatalf("completions told: %q, want %q", obs.completed, want)
	}
}
