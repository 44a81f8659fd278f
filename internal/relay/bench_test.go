package relay

import "testing"

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
