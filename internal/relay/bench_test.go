package relay

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/byollm/relay-go/internal/grant"
	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
)

// BenchmarkPlanes measures one replica end to end (HTTP, auth, Valkey) for
// the calls a fleet makes most: heartbeats, empty claims, site reads.
func BenchmarkPlanes(b *testing.B) {
	cases := []struct {
		name string
		run  func(b *testing.B, e *env, w *world) resp
	}{
		{"heartbeat", func(b *testing.B, e *env, w *world) resp {
			return e.daemonPost(w.alice, "runner_alice", "heartbeat", heartbeatJSON(b, "runner_alice", "0.1.1"))
		}},
		{"claim-empty", func(b *testing.B, e *env, w *world) resp {
			return e.daemonPost(w.alice, "runner_alice", "claim", claimJSON(b, "runner_alice", 4))
		}},
		{"pending", func(b *testing.B, e *env, w *world) resp { return e.siteGet(w.siteA, "site_a", "pending", "site_a") }},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			// The production clock: local time corrected by the sampled store offset.
			e := newEnv(b, func(c *Config) { c.Clock = nil })
			w := newWorld(b)
			w.install(e)
			for b.Loop() {
				if r := tc.run(b, e, w); r.status != 200 {
					b.Fatalf("%d %s", r.status, r.body)
				}
			}
		})
	}
}

// BenchmarkAuthorGrants is the relay's own cost of the grant seam per
// claimed job (reading the stub, building the §14.1 input, the bounded call,
// appending the grant), with an authority that answers at once: what the
// relay adds on top of whatever the authority itself costs.
func BenchmarkAuthorGrants(b *testing.B) {
	a := &instantAuthority{grant: grantFor("bench")}
	e := newEnv(b, func(c *Config) { c.Grants = a; c.ControlPlanePublic = testControlPlanePublic })
	w := newWorld(b)
	w.install(e)
	stub := mustJSON(b, e.stub("bench", "alice", w.siteA))
	granted := []store.ClaimedStub{{SiteID: "site_a", Stub: stub, Lease: protocol.Lease{ID: "0b4f1e9a-6c2d-4d8e-9f3a-5b7c1d2e3f40", RunnerID: "runner_alice", ExpiresAt: 1}}}
	req := &request{ctx: b.Context(), proj: e.proj.Current()}
	dev := device{runnerID: "runner_alice", owner: "alice"}
	caps := capabilitiesJSON([]protocol.Capability{chatCapability})
	for b.Loop() {
		if out := e.relay.authorGrants(req, dev, caps, granted); len(out) != 1 {
			b.Fatalf("granted %d", len(out))
		}
	}
}

type instantAuthority struct{ grant json.RawMessage }

func (a *instantAuthority) AuthorGrant(context.Context, grant.Request) (grant.Decision, error) {
	return grant.Decision{Granted: a.grant}, nil
}

func (a *instantAuthority) Satisfiable(context.Context, grant.SatisfiableRequest) (grant.Verdict, error) {
	return grant.VerdictOK, nil
}
