package store

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/lua"
	"github.com/byollm/relay-go/test/relaytest"
)

// BenchmarkScriptTime reports how long one call of each script holds the
// server (execution time inside the server, not the round trip) with 100k
// jobs queued in the namespace. The budget is 1 ms for every call. It reads
// SLOWLOG armed at 50 µs (at 0, the server also logs every command a script
// calls, which inflates the script's own time two- to threefold) and INFO
// commandstats, both server-wide: run it against a private server, e.g.
//
//	redis-server --port 6391 --save '' &
//	RELAY_TEST_VALKEY_URL=redis://127.0.0.1:6391/0 go test ./internal/store -run '^$' -bench ScriptTime -benchtime 20x
//
// Metrics: p50-us and max-us of the calls of the script under test that took
// 50 µs or more (other scripts the case runs carry their name as a suffix;
// max-us 0 when no call reached 50 µs), logged/op (such calls per op:
// p50-us is the median of all calls when it equals the script's calls per
// op) and mean-us over every script call of the case (setup excluded only
// where the case pauses the timer around it... commandstats cannot tell, so
// it includes setup calls).
func BenchmarkScriptTime(b *testing.B) {
	be := realBackend(b)
	e := env(b, "scripttime", be, 0)
	ctx := context.Background()
	if e.round == 0 {
		enqueueMany(b, e.s, be.client, "site_theirs", foreignStubs(100_000, 1000))
	}
	bigEnvelope := envelopeOf(2500)
	uniq := 0 // setups run once per b.N tried: fresh ids each time

	// Finished and awaiting jobs of one site, read by the site plane.
	finished := func(b *testing.B, n int) string {
		uniq++
		siteID := fmt.Sprintf("site_fin_%d", uniq)
		rs := make([]Route, n)
		stubs := make([]protocol.JobStub, n)
		for i := range n {
			owner := fmt.Sprintf("fo%d_%d", uniq, i)
			stubs[i] = stub(fmt.Sprintf("f%d", i), owner)
			stubs[i].Audience = protocol.AudienceTeam
			rs[i] = Route{SiteID: siteID, Owner: owner}
		}
		enqueueMany(b, e.s, be.client, siteID, stubs)
		for len(rs) > 0 {
			k := min(len(rs), 64)
			got, err := e.s.Claim(ctx, claimArgs(deviceOwner("dev"), maxJobs(64), func(in *ClaimInput) { in.Routes = rs[:k] }))
			if err != nil || len(got) != k {
				b.Fatalf("claim: %d %v", len(got), err)
			}
			for _, g := range got {
				if _, err := e.s.Seal(ctx, siteID, stubID(g), bigEnvelope); err != nil {
					b.Fatal(err)
				}
				if r, err := e.s.Complete(ctx, CompleteInput{JobID: stubID(g), RunnerID: "runner_1", LeaseID: g.Lease.ID, Envelope: bigEnvelope, Disposition: "ok"}); err != nil || !r.Accepted {
					b.Fatalf("complete: %+v %v", r, err)
				}
			}
			rs = rs[k:]
		}
		return siteID
	}
	awaiting := func(b *testing.B, n int) string {
		uniq++
		siteID := fmt.Sprintf("site_aw_%d", uniq)
		rs := make([]Route, n)
		stubs := make([]protocol.JobStub, n)
		for i := range n {
			owner := fmt.Sprintf("ao%d_%d", uniq, i)
			stubs[i] = stub(fmt.Sprintf("a%d", i), owner)
			stubs[i].Audience = protocol.AudienceTeam
			rs[i] = Route{SiteID: siteID, Owner: owner}
		}
		enqueueMany(b, e.s, be.client, siteID, stubs)
		for len(rs) > 0 {
			k := min(len(rs), 64)
			got, err := e.s.Claim(ctx, claimArgs(deviceOwner("dev"), maxJobs(64), func(in *ClaimInput) { in.Routes = rs[:k] }))
			if err != nil || len(got) != k {
				b.Fatalf("claim: %d %v", len(got), err)
			}
			rs = rs[k:]
		}
		return siteID
	}

	cases := []struct {
		name   string
		script string
		setup  func(b *testing.B) func(i int)
	}{
		{"finished-5000", "finished", func(b *testing.B) func(int) {
			siteID := finished(b, 5000)
			return func(int) {
				if jobs, err := e.s.Finished(ctx, siteID); err != nil || len(jobs) != 5000 {
					b.Fatalf("finished: %d %v", len(jobs), err)
				}
			}
		}},
		{"awaiting-1000", "awaiting", func(b *testing.B) func(int) {
			siteID := awaiting(b, 1000)
			return func(int) {
				if jobs, err := e.s.Awaiting(ctx, siteID); err != nil || len(jobs) != 1000 {
					b.Fatalf("awaiting: %d %v", len(jobs), err)
				}
			}
		}},
		{"jobs", "jobs_page", func(b *testing.B) func(int) {
			return func(int) {
				if _, err := e.s.Jobs(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"claim-claimable", "claim", func(b *testing.B) func(int) {
			e.round++
			rs := e.targets(b, b.N)
			return func(i int) {
				got, err := e.s.Claim(ctx, claimArgs(deviceOwner("dev"), func(in *ClaimInput) { in.Routes = rs[i : i+1] }))
				if err != nil || len(got) != 1 {
					b.Fatalf("claim: %d %v", len(got), err)
				}
			}
		}},
		{"claim-settling-budget-due", "claim", func(b *testing.B) func(int) {
			e.round++
			rs := e.targets(b, b.N)
			return func(i int) {
				b.StopTimer()
				now, err := e.s.Now(ctx)
				if err != nil {
					b.Fatal(err)
				}
				stubs := foreignStubs(DefaultClaimSettleBudget, 10)
				for j := range stubs {
					stubs[j].ID = fmt.Sprintf("cdue%d_%d_%d", e.round, i, j)
					stubs[j].DeadlineAt = now - 1
				}
				enqueueMany(b, e.s, be.client, site, stubs)
				b.StartTimer()
				got, err := e.s.Claim(ctx, claimArgs(deviceOwner("dev"), func(in *ClaimInput) { in.Routes = rs[i : i+1] }))
				if err != nil || len(got) != 1 {
					b.Fatalf("claim: %d %v", len(got), err)
				}
			}
		}},
		{"claim-granting-64", "claim", func(b *testing.B) func(int) {
			e.round++
			rs := e.targets(b, 64*b.N)
			return func(i int) {
				got, err := e.s.Claim(ctx, claimArgs(deviceOwner("dev"), maxJobs(64), func(in *ClaimInput) { in.Routes = rs[64*i : 64*i+64] }))
				if err != nil || len(got) != 64 {
					b.Fatalf("claim: %d %v", len(got), err)
				}
			}
		}},
		{"claim-past-500-refused", "claim", func(b *testing.B) func(int) {
			uniq++
			owner := fmt.Sprint("refused_owner_", uniq)
			stubs := make([]protocol.JobStub, 500)
			for j := range stubs {
				stubs[j] = stub(fmt.Sprintf("rf%d_%d", uniq, j), owner)
			}
			enqueueMany(b, e.s, be.client, site, stubs)
			runnerID := fmt.Sprint("refuser_", uniq)
			in := claimArgs(deviceOwner(owner), runner(runnerID), maxJobs(2), func(in *ClaimInput) { in.Routes = []Route{{SiteID: site, Owner: owner}} })
			for {
				got, err := e.s.Claim(ctx, in)
				if err != nil {
					b.Fatal(err)
				}
				if len(got) == 0 {
					break
				}
				var refs []protocol.GrantRef
				for _, g := range got {
					refs = append(refs, grant(g))
				}
				if _, err := e.s.ReleaseLeases(ctx, ReleaseInput{RunnerID: runnerID, Leases: refs, Reason: ReasonRefused}); err != nil {
					b.Fatal(err)
				}
			}
			return func(i int) {
				b.StopTimer()
				e.s.Enqueue(ctx, EnqueueInput{ID: fmt.Sprintf("rfresh%d_%d", uniq, i), SiteID: site, Stub: stub(fmt.Sprintf("rfresh%d_%d", uniq, i), owner)})
				b.StartTimer()
				got, err := e.s.Claim(ctx, in)
				if err != nil || len(got) != 1 {
					b.Fatalf("claim: %d %v", len(got), err)
				}
				b.StopTimer()
				if _, err := e.s.ReleaseLeases(ctx, ReleaseInput{RunnerID: runnerID, Leases: []protocol.GrantRef{grant(got[0])}, Reason: ReasonRefused}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		}},
		{"sweep-batch-100-of-100k", "sweep", func(b *testing.B) func(int) {
			uniq++
			return func(i int) {
				b.StopTimer()
				now, err := e.s.Now(ctx)
				if err != nil {
					b.Fatal(err)
				}
				stubs := foreignStubs(100, 10)
				for j := range stubs {
					stubs[j].ID = fmt.Sprintf("due%d_%d_%d", uniq, i, j)
					stubs[j].DeadlineAt = now - 1
				}
				enqueueMany(b, e.s, be.client, site, stubs)
				b.StartTimer()
				if got, more, err := e.s.SweepBatch(ctx, 100); err != nil || len(got) != 100 || more {
					b.Fatalf("sweep: %d %v %v", len(got), more, err)
				}
			}
		}},
		{"sweep-batch-50-of-100k", "sweep", func(b *testing.B) func(int) {
			uniq++
			return func(i int) {
				b.StopTimer()
				now, err := e.s.Now(ctx)
				if err != nil {
					b.Fatal(err)
				}
				stubs := foreignStubs(50, 10)
				for j := range stubs {
					stubs[j].ID = fmt.Sprintf("due%d_%d_%d", uniq, i, j)
					stubs[j].DeadlineAt = now - 1
				}
				enqueueMany(b, e.s, be.client, site, stubs)
				b.StartTimer()
				if got, more, err := e.s.SweepBatch(ctx, 50); err != nil || len(got) != 50 || more {
					b.Fatalf("sweep: %d %v %v", len(got), more, err)
				}
			}
		}},
		{"sweep-batch-25-of-100k", "sweep", func(b *testing.B) func(int) {
			uniq++
			return func(i int) {
				b.StopTimer()
				now, err := e.s.Now(ctx)
				if err != nil {
					b.Fatal(err)
				}
				stubs := foreignStubs(25, 10)
				for j := range stubs {
					stubs[j].ID = fmt.Sprintf("due%d_%d_%d", uniq, i, j)
					stubs[j].DeadlineAt = now - 1
				}
				enqueueMany(b, e.s, be.client, site, stubs)
				b.StartTimer()
				if got, more, err := e.s.SweepBatch(ctx, 25); err != nil || len(got) != 25 || more {
					b.Fatalf("sweep: %d %v %v", len(got), more, err)
				}
			}
		}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			op := tc.setup(b)
			stop := armSlowlog(b, be.client)
			b.ResetTimer()
			for i := range b.N {
				op(i)
			}
			b.StopTimer()
			times := stop(e.s.k.p)
			for name, us := range times.slow {
				slices.Sort(us)
				suffix := ""
				if name != tc.script {
					suffix = "-" + name
				}
				b.ReportMetric(float64(us[len(us)/2]), "p50-us"+suffix)
				b.ReportMetric(float64(us[len(us)-1]), "max-us"+suffix)
				b.ReportMetric(float64(len(us))/float64(b.N), "logged/op"+suffix)
			}
			if _, ok := times.slow[tc.script]; !ok {
				b.ReportMetric(0, "max-us")
			}
			if times.calls > 0 {
				b.ReportMetric(float64(times.usec)/float64(times.calls), "mean-us")
				b.ReportMetric(float64(times.calls)/float64(b.N), "calls/op")
			}
		})
	}
}

// envelopeOf is a sealed-envelope-shaped JSON object of about n bytes.
func envelopeOf(n int) []byte {
	return []byte(`{"ciphertext":"` + strings.Repeat("A", n) + `","recipientKeyId":"r","senderKeyId":"s","direction":"result","deadlineAt":4102444800000}`)
}

type scriptTimes struct {
	slow        map[string][]int64 // script -> µs of its calls over the threshold
	calls, usec int64              // every script call (commandstats)
}

const slowlogThresholdUs = "50"

// armSlowlog logs commands of 50 µs or more; the returned stop reads the log
// back (per script, the calls naming prefix) with the commandstats totals of
// EVALSHA, FCALL and their _RO forms since arming, and restores the server's settings.
func armSlowlog(tb testing.TB, c valkey.Client) func(prefix string) scriptTimes {
	tb.Helper()
	ctx := context.Background()
	get := func(name string) string {
		kv, err := c.Do(ctx, c.B().ConfigGet().Parameter(name).Build()).AsStrMap()
		if err != nil {
			tb.Fatalf("config get %s: %v", name, err)
		}
		return kv[name]
	}
	set := func(name, v string) {
		if err := c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue(name, v).Build()).Error(); err != nil {
			tb.Fatalf("config set %s: %v", name, err)
		}
	}
	stats := func() (calls, usec int64) {
		all, err := relaytest.CommandStats(ctx, c)
		if err != nil {
			tb.Fatal(err)
		}
		for _, name := range []string{"evalsha", "evalsha_ro", "fcall", "fcall_ro"} {
			calls, usec = calls+all[name].Calls, usec+all[name].Usec
		}
		return calls, usec
	}
	oldThreshold, oldLen := get("slowlog-log-slower-than"), get("slowlog-max-len")
	set("slowlog-max-len", "100000")
	set("slowlog-log-slower-than", slowlogThresholdUs)
	if err := c.Do(ctx, c.B().SlowlogReset().Build()).Error(); err != nil {
		tb.Fatal(err)
	}
	calls0, usec0 := stats()
	names := map[string]string{}
	sources, err := loadScripts(lua.FS)
	if err != nil {
		tb.Fatal(err)
	}
	for name, src := range sources {
		sum := sha1.Sum([]byte(src))
		names[hex.EncodeToString(sum[:])] = name
	}
	return func(prefix string) scriptTimes {
		calls1, usec1 := stats()
		set("slowlog-log-slower-than", oldThreshold)
		defer set("slowlog-max-len", oldLen)
		out := scriptTimes{slow: map[string][]int64{}, calls: calls1 - calls0 - 1, usec: usec1 - usec0}
		entries, err := c.Do(ctx, c.B().SlowlogGet().Count(-1).Build()).ToArray()
		if err != nil {
			tb.Fatal(err)
		}
		for _, en := range entries {
			f, err := en.ToArray()
			if err != nil || len(f) < 4 {
				continue
			}
			us, _ := f[2].AsInt64()
			args, _ := f[3].AsStrSlice()
			if len(args) < 2 || !slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, prefix) }) {
				continue
			}
			cmd := strings.ToLower(args[0])
			if cmd != "evalsha" && cmd != "evalsha_ro" && cmd != "fcall" && cmd != "fcall_ro" {
				continue
			}
			name := names[args[1]]
			if strings.HasPrefix(cmd, "fcall") {
				name, _ = FunctionScript(args[1])
			}
			if name == "" {
				name = "sha:" + args[1][:12]
			}
			out.slow[name] = append(out.slow[name], us)
		}
		return out
	}
}
