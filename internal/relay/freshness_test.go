package relay

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/internal/projectionsync"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/test/relaytest"
)

// A refusal a newer projection would reverse is only given on the latest
// one. Two replicas share a namespace; the one serving requests loaded the
// projection once and never follows it (no Run: no pub/sub, no poll), so
// it sees a change made through the other only if it checks the stored
// version before refusing.
func TestRefusalsCheckTheLatestProjection(t *testing.T) {
	t.Parallel()
	c := relaytest.Client(t)
	st := newStore(t, c, store.Options{})
	ns := st.Namespace()
	ctx := context.Background()
	writer := projectionsync.New(c, projectionsync.Options{Namespace: ns, Logger: relaytest.Logger(t)})
	follower := projectionsync.New(c, projectionsync.Options{Namespace: ns, Logger: relaytest.Logger(t)})
	e := newEnvOn(t, st, func(cfg *Config) { cfg.Projection = follower })

	w := newWorld(t)
	carol := newKeys(t)
	push := func(fx projection.Fixture) {
		t.Helper()
		if fx.Rosters == nil {
			fx.Rosters = []projection.RosterRecord{}
		}
		if fx.Revoked == nil {
			fx.Revoked = []projection.RevocationRecord{}
		}
		doc, err := json.Marshal(fx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := writer.Replace(ctx, doc); err != nil {
			t.Fatalf("replace: %v", err)
		}
	}
	push(w.fx)
	if err := follower.Refresh(ctx); err != nil {
		t.Fatalf("first load: %v", err)
	}
	hb := func(k keys, runner string) resp {
		return e.daemonPost(k, runner, "heartbeat", heartbeatJSON(t, runner, "0.1.1"))
	}

	t.Run("a runner just approved elsewhere is recognised", func(t *testing.T) {
		expect(t, hb(carol, "runner_carol"), 401, string(runnerUnknown.body))
		w.fx.Devices = append(w.fx.Devices, projection.DeviceRecord{Owner: "alice", RunnerID: "runner_carol", Device: carol.id})
		push(w.fx)
		if got := hb(carol, "runner_carol"); got.status != 200 {
			t.Fatalf("heartbeat right after approval: %d %s", got.status, got.body)
		}
	})

	t.Run("a revocation just lifted elsewhere is lifted here", func(t *testing.T) {
		w.fx.Devices[1].Revoked = true // runner_bob
		push(w.fx)
		// The follower learns of the revocation (as its poll would), then
		// it is lifted through the writer alone.
		if err := follower.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		expect(t, hb(w.bob, "runner_bob"), 403, string(revokedRunner.body))
		w.fx.Devices[1].Revoked = false
		push(w.fx)
		if got := hb(w.bob, "runner_bob"); got.status != 200 {
			t.Fatalf("heartbeat right after the revocation was lifted: %d %s", got.status, got.body)
		}
	})

	t.Run("a site just registered elsewhere is known", func(t *testing.T) {
		siteC := newKeys(t)
		body := enqueueJSON(t, "site_c", e.stub("fresh-1", "alice", siteC))
		expect(t, e.sitePost(siteC, "site_c", "enqueue", body), 401, string(siteUnknown.body))
		w.fx.Sites = append(w.fx.Sites, projection.SiteRecord{SiteID: "site_c", Site: siteC.id})
		push(w.fx)
		expect(t, e.sitePost(siteC, "site_c", "enqueue", body), 200, `{"jobId":"fresh-1","state":"queued"}`)
	})

	t.Run("a device approved elsewhere is approved at its next poll", func(t *testing.T) {
		dave := newKeys(t)
		code := e.start(t, dave.id).DeviceCode
		expect(t, e.do("POST", "/byollm/pair", nil, pollJSON(code)), 200, `{"status":"pending"}`)
		w.fx.Devices = append(w.fx.Devices, projection.DeviceRecord{Owner: "alice", RunnerID: "runner_dave", Device: dave.id})
		push(w.fx)
		got := e.do("POST", "/byollm/pair", nil, pollJSON(code))
		if got.status != 200 || !strings.HasPrefix(string(got.body), `{"status":"approved","runnerId":"runner_dave"`) {
			t.Fatalf("poll right after approval: %d %s", got.status, got.body)
		}
	})
}
