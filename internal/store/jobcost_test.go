package store

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/test/relaytest"
)

// BenchmarkJobCost is the store's share of one job: enqueue, claim, seal,
// take, complete and the site's results read, with a heartbeat-style sweep
// before the claim and the results read (as the planes do), one site and
// one device. valkey-us/op as in BenchmarkIdleTick (a private server):
//
//	RELAY_TEST_VALKEY_URL=redis://127.0.0.1:6397/0 go test ./internal/store -run '^$' -bench JobCost -benchtime 3000x
//
// In "direct" and "view" every job stays done on the one site, so the
// results read lists all b.N of them by the end (as a site that never lets
// its results expire); "view-site64" moves to a new site every 64 jobs, so
// a results read lists at most 64, and the figure is a job's own cost.
// "view-site64-scripts" is that with the operations sent as scripts
// (EVALSHA, Options.evalScripts) instead of the functions library.
//
// reads/op is the job's round trips (the server's read events); floor-us/rt
// is the server's CPU per round trip of a script that does nothing, timed
// right after (roundTripFloor); x-floor is valkey-us/op over reads/op such
// round trips: how far a job's Valkey CPU is above what its round trips
// alone cost on this machine.
func BenchmarkJobCost(b *testing.B) {
	b.Run("direct", func(b *testing.B) { benchJobCost(b, false, 0, false) })
	b.Run("view", func(b *testing.B) { benchJobCost(b, true, 0, false) })
	b.Run("view-site64", func(b *testing.B) { benchJobCost(b, true, 64, false) })
	b.Run("view-site64-scripts", func(b *testing.B) { benchJobCost(b, true, 64, true) })
}

func benchJobCost(b *testing.B, view bool, perSite int, evalScripts bool) {
	be := realBackend(b)
	s := newStore(b, be, Options{Logger: relaytest.Discard(), evalScripts: evalScripts})
	if s.RunsFunctions() == evalScripts {
		b.Fatalf("RunsFunctions() = %v with evalScripts %v", s.RunsFunctions(), evalScripts)
	}
	ctx := context.Background()
	if view {
		withView(b, s)
	}
	dev := freshDevice()
	in := ClaimInput{RunnerID: "r1", Owner: "alice", Device: dev, Kinds: []string{protocol.KindGenerate},
		Routes: []Route{{SiteID: site, Owner: "alice"}}, Max: 1, LeaseMs: 60000}
	one := func(i int) {
		id := uuid.NewString() // the relay's job ids, stored in their compact form
		site := site
		if perSite > 0 {
			site = fmt.Sprint("site-", i/perSite)
			in.Routes = []Route{{SiteID: site, Owner: "alice"}}
		}
		if _, err := s.Enqueue(ctx, EnqueueInput{ID: id, SiteID: site, Stub: stub(id, "alice")}); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Sweep(ctx); err != nil {
			b.Fatal(err)
		}
		got, err := s.Claim(ctx, in)
		if err != nil || len(got) != 1 {
			b.Fatalf("claim: %d %v", len(got), err)
		}
		if r, err := s.Seal(ctx, site, id, envelope); err != nil || r.State != StateReady {
			b.Fatalf("seal: %+v %v", r, err)
		}
		h := HolderInput{JobID: id, RunnerID: "r1", LeaseID: got[0].Lease.ID}
		if r, err := s.TakePayload(ctx, h); err != nil || r.Envelope == nil {
			b.Fatalf("take: %+v %v", r, err)
		}
		if r, err := s.Complete(ctx, CompleteInput{JobID: id, RunnerID: "r1", LeaseID: h.LeaseID, Envelope: envelope, Disposition: "ok"}); err != nil || !r.Accepted {
			b.Fatalf("complete: %+v %v", r, err)
		}
		if _, err := s.Sweep(ctx); err != nil {
			b.Fatal(err)
		}
		if _, err := s.ResultJobs(ctx, site); err != nil {
			b.Fatal(err)
		}
	}
	before := serverCost(b, be.client)
	b.ResetTimer()
	for i := range b.N {
		one(i)
	}
	b.StopTimer()
	after := serverCost(b, be.client)
	after.report(b, before)
	reads := after.reads - before.reads
	floor := roundTripFloor(b, be.client, int(min(reads, 20000)))
	b.ReportMetric(floor, "floor-us/rt")
	b.ReportMetric((after.cpu-before.cpu)*1e6/(float64(reads)*floor), "x-floor")
}

// BenchmarkJobSteps is BenchmarkJobCost taken apart: what each step of a
// job costs the server on its own, so a change to one script can be
// measured on that step. Jobs go through in rounds of one job on each of
// jobStepSites sites (placed before the timer starts), a step at a time
// over the whole round: enqueue, claim (Max 1, one device whose presence
// record exists, as a heartbeating daemon's does), seal, take, complete.
// The work view runs, as on a replica. Per step it reports valkey-us, reads,
// scripts and cmds a job (INFO around each step of each round, so each
// figure carries 1/jobStepSites of one INFO call) and x-floor: valkey-us
// over reads × the cost of a do-nothing round trip measured right after.
// Server-wide, so a private server:
//
//	RELAY_TEST_VALKEY_URL=redis://127.0.0.1:6397/0 go test ./internal/store -run '^$' -bench JobSteps -benchtime 3072x
func BenchmarkJobSteps(b *testing.B) {
	be := realBackend(b)
	s := newStore(b, be, Options{Logger: relaytest.Discard()})
	withView(b, s)
	ctx := context.Background()
	sites := make([]string, jobStepSites)
	for i := range sites {
		sites[i] = fmt.Sprint("site-", i)
	}
	if err := s.placeSites(ctx, sites...); err != nil {
		b.Fatal(err)
	}
	dev := freshDevice()
	if _, err := s.Heartbeat(ctx, HeartbeatInput{Presence: Presence{RunnerID: "r1", Owner: "alice", Device: dev}}); err != nil {
		b.Fatal(err)
	}
	in := ClaimInput{RunnerID: "r1", Owner: "alice", Device: dev, Kinds: []string{protocol.KindGenerate}, Max: 1, LeaseMs: 60000}
	type job struct{ id, site, lease string }
	steps := []struct {
		name string
		do   func(j *job)
	}{
		{"enqueue", func(j *job) {
			if _, err := s.Enqueue(ctx, EnqueueInput{ID: j.id, SiteID: j.site, Stub: stub(j.id, "alice")}); err != nil {
				b.Fatal(err)
			}
		}},
		{"claim", func(j *job) {
			in.Routes = []Route{{SiteID: j.site, Owner: "alice"}}
			got, err := s.Claim(ctx, in)
			if err != nil || len(got) != 1 {
				b.Fatalf("claim on %s: %d %v", j.site, len(got), err)
			}
			j.lease = got[0].Lease.ID
		}},
		{"seal", func(j *job) {
			if r, err := s.Seal(ctx, j.site, j.id, envelope); err != nil || r.State != StateReady {
				b.Fatalf("seal: %+v %v", r, err)
			}
		}},
		{"take", func(j *job) {
			if r, err := s.TakePayload(ctx, HolderInput{JobID: j.id, RunnerID: "r1", LeaseID: j.lease}); err != nil || r.Envelope == nil {
				b.Fatalf("take: %+v %v", r, err)
			}
		}},
		{"complete", func(j *job) {
			done := CompleteInput{JobID: j.id, RunnerID: "r1", LeaseID: j.lease, Envelope: envelope, Disposition: "ok"}
			if r, err := s.Complete(ctx, done); err != nil || !r.Accepted {
				b.Fatalf("complete: %+v %v", r, err)
			}
		}},
	}
	spent := make([]serverCounters, len(steps))
	b.ResetTimer()
	for done := 0; done < b.N; {
		round := make([]job, min(jobStepSites, b.N-done))
		for i := range round {
			round[i] = job{id: uuid.NewString(), site: sites[i]}
		}
		for k, st := range steps {
			before := serverCost(b, be.client)
			for i := range round {
				st.do(&round[i])
			}
			after := serverCost(b, be.client)
			spent[k] = spent[k].plus(after, before)
		}
		done += len(round)
	}
	b.StopTimer()
	floor := roundTripFloor(b, be.client, 5000)
	b.ReportMetric(floor, "floor-us/rt")
	n := float64(b.N)
	for k, st := range steps {
		c := spent[k]
		b.ReportMetric(c.cpu*1e6/n, st.name+"-us/job")
		b.ReportMetric(float64(c.reads)/n, st.name+"-reads/job")
		b.ReportMetric(float64(c.scripts)/n, st.name+"-scripts/job")
		b.ReportMetric(float64(c.cmds)/n, st.name+"-cmds/job")
		b.ReportMetric(c.cpu*1e6/(float64(c.reads)*floor), st.name+"-x-floor")
	}
}

// jobStepSites is how many jobs a round of BenchmarkJobSteps holds, one a
// site: a site and owner may have only two jobs awaiting their payload,
// and a claim step claims a whole round before the seal step seals it.
const jobStepSites = 64

// plus is c with what the counters grew by from before to after added.
func (c serverCounters) plus(after, before serverCounters) serverCounters {
	c.cpu += after.cpu - before.cpu
	c.reads += after.reads - before.reads
	c.scripts += after.scripts - before.scripts
	c.cmds += after.cmds - before.cmds
	return c
}

// roundTripFloor is the server's CPU per round trip of the cheapest script
// call (EVALSHA of "return 1", sent one at a time on the benchmark's own
// client), in µs, over n calls (at least 1,000): what a job's round trips
// would cost the server if every one of them did nothing. Measured right
// after the job loop, so the ratio to it (x-floor) holds on a guest whose
// cost per wake-up varies from run to run.
func roundTripFloor(b *testing.B, c valkey.Client, n int) float64 {
	n = max(n, 1000)
	nop := valkey.NewLuaScript("return 1")
	ctx := context.Background()
	before := serverCost(b, c)
	for range n {
		if err := nop.Exec(ctx, c, nil, nil).Error(); err != nil {
			b.Fatal(err)
		}
	}
	after := serverCost(b, c)
	rts := after.reads - before.reads
	if rts <= 0 {
		b.Fatalf("the floor's %d calls show %d reads on the server", n, rts)
	}
	return (after.cpu - before.cpu) * 1e6 / float64(rts)
}

// BenchmarkJobMemory is what a job costs in Valkey memory: used_memory
// (INFO, after lazy frees settle) over b.N jobs queued on one site, then the
// same jobs taken the whole way to done with envelopes of loadgen's sizes
// (a 1,200 B payload and a 1,349 B result, 2,549 B together as in the
// README's figures). Stubs have the relay's shape (UUID job id, a site key
// id of a real identity's length). Server-wide, so a private server:
//
//	RELAY_TEST_VALKEY_URL=redis://127.0.0.1:6397/0 go test ./internal/store -run '^$' -bench JobMemory -benchtime 5000x
//
// queued-B/job is the per-job delta with every job queued; finished-B/job
// the delta with every job done; beyond-envelopes-B/job that minus the
// envelope bytes each done job keeps.
func BenchmarkJobMemory(b *testing.B) {
	be := realBackend(b)
	s := newStore(b, be, Options{Logger: relaytest.Discard()})
	ctx := context.Background()
	const siteKey = "ed25519:Zm9yLWEtc2l0ZS1rZXktaWQtb2YtcmVhbC1sZW5ndGg" // a real key id's length
	pad := func(dir string, n int) json.RawMessage {
		head := `{"direction":"` + dir + `","ciphertext":"`
		tail := `"}`
		return json.RawMessage(head + strings.Repeat("A", n-len(head)-len(tail)) + tail)
	}
	payload, result := pad("payload", 1200), pad("result", 1349)
	ids := make([]string, b.N)
	for i := range ids {
		var r [16]byte
		_, _ = rand.Read(r[:])
		ids[i] = fmt.Sprintf("%x-%x-%x-%x-%x", r[0:4], r[4:6], r[6:8], r[8:10], r[10:16])
	}
	b.ResetTimer()
	mem0 := usedMemory(b, be.client)
	for _, id := range ids {
		st := protocol.JobStub{ID: id, Kind: protocol.KindGenerate, Owner: "alice", Site: siteKey,
			Audience: protocol.AudiencePrivate, SizeClass: "small", DeadlineAt: farDeadline}
		if _, err := s.Enqueue(ctx, EnqueueInput{ID: id, SiteID: site, Stub: st}); err != nil {
			b.Fatal(err)
		}
	}
	mem1 := usedMemory(b, be.client)
	if b.N >= 100 {
		b.Logf("queued, MEMORY USAGE per job by key: %s", keyUsage(b, be.client, s.opts.Namespace, b.N))
		b.Logf("queued record in other shapes: %s", recordShapes(b, be.client, s.k.job(site, ids[0])))
	}
	in := ClaimInput{RunnerID: "r1", Owner: "alice", Device: freshDevice(), Kinds: []string{protocol.KindGenerate},
		Routes: []Route{{SiteID: site, Owner: "alice"}}, Max: 1, LeaseMs: 60000}
	for range ids {
		got, err := s.Claim(ctx, in)
		if err != nil || len(got) != 1 {
			b.Fatalf("claim: %d %v", len(got), err)
		}
		id := stubID(got[0])
		if r, err := s.Seal(ctx, site, id, payload); err != nil || r.State != StateReady {
			b.Fatalf("seal: %+v %v", r, err)
		}
		h := HolderInput{JobID: id, RunnerID: "r1", LeaseID: got[0].Lease.ID}
		if r, err := s.TakePayload(ctx, h); err != nil || r.Envelope == nil {
			b.Fatalf("take: %+v %v", r, err)
		}
		if r, err := s.Complete(ctx, CompleteInput{JobID: id, RunnerID: "r1", LeaseID: h.LeaseID, Envelope: result, Disposition: "ok"}); err != nil || !r.Accepted {
			b.Fatalf("complete: %+v %v", r, err)
		}
	}
	mem2 := usedMemory(b, be.client)
	b.StopTimer()
	if b.N >= 100 {
		b.Logf("finished, MEMORY USAGE per job by key: %s", keyUsage(b, be.client, s.opts.Namespace, b.N))
		b.Logf("finished record in other shapes: %s", recordShapes(b, be.client, s.k.job(site, ids[0])))
	}
	n := float64(b.N)
	b.ReportMetric(float64(mem1-mem0)/n, "queued-B/job")
	b.ReportMetric(float64(mem2-mem0)/n, "finished-B/job")
	b.ReportMetric(float64(mem2-mem0)/n-float64(len(payload)+len(result)), "beyond-envelopes-B/job")
	b.ReportMetric(0, "ns/op")
}

// keyUsage is where a namespace's bytes are: MEMORY USAGE (key name and
// dict entry included, allocator size classes as jemalloc rounds them)
// summed over its keys by kind (the key's first part after the hash tag;
// "j" is the job records, "j:ref" and the like their side keys), per job,
// largest first. It leaves out the keyspace's own hash table, which
// used_memory counts (about 10-30 B a key).
func keyUsage(b *testing.B, c valkey.Client, ns string, jobs int) string {
	keys, err := scan(c, ns+":*")
	if err != nil {
		b.Fatal(err)
	}
	sum := map[string]int64{}
	for _, k := range keys {
		_, rest, _ := strings.Cut(k, "}:")
		kind, tail, _ := strings.Cut(rest, ":")
		if kind == "j" && strings.Count(tail, ":") == 2 {
			kind = "j:" + tail[strings.LastIndex(tail, ":")+1:]
		}
		n, err := c.Do(context.Background(), c.B().MemoryUsage().Key(k).Samples(0).Build()).AsInt64()
		if err != nil {
			b.Fatalf("memory usage %s: %v", k, err)
		}
		sum[kind] += n
	}
	kinds := make([]string, 0, len(sum))
	var total int64
	for k, n := range sum {
		kinds = append(kinds, k)
		total += n
	}
	slices.SortFunc(kinds, func(x, y string) int { return cmp.Compare(sum[y], sum[x]) })
	var out strings.Builder
	for _, k := range kinds {
		if per := float64(sum[k]) / float64(jobs); per >= 0.5 {
			fmt.Fprintf(&out, "%s %.0f, ", k, per)
		}
	}
	fmt.Fprintf(&out, "total %.0f B", float64(total)/float64(jobs))
	return out.String()
}

// recordShapes is what the job record at key would take (MEMORY USAGE)
// in shapes a later layout could write, each copied under a key of the
// same length: as stored, and without the encoded key parts eO, eK and eA
// (scripts would then need the queue keys from elsewhere: a base64 encoder
// in Lua, or Go passing them). Layout v4's own cuts (no raw id, site,
// owner, kind or audience; numbered slices) were measured this way first.
func recordShapes(b *testing.B, c valkey.Client, key string) string {
	ctx := context.Background()
	rec, err := c.Do(ctx, c.B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil || len(rec) == 0 {
		b.Fatalf("record %s: %v (%d fields)", key, err, len(rec))
	}
	alt := key[:len(key)-1] + "~" // same length; no record key ends in '~'
	usage := func(drop ...string) int64 {
		cmd := c.B().Hset().Key(alt).FieldValue()
		for f, v := range rec {
			if !slices.Contains(drop, f) {
				cmd = cmd.FieldValue(f, v)
			}
		}
		if err := c.Do(ctx, cmd.Build()).Error(); err != nil {
			b.Fatalf("hset: %v", err)
		}
		defer c.Do(ctx, c.B().Del().Key(alt).Build())
		n, err := c.Do(ctx, c.B().MemoryUsage().Key(alt).Samples(0).Build()).AsInt64()
		if err != nil {
			b.Fatalf("memory usage: %v", err)
		}
		return n
	}
	return fmt.Sprintf("as stored %d B, without eO/eK/eA %d B", usage(), usage("eO", "eK", "eA"))
}

// usedMemory is INFO used_memory once lazy frees are done and it has held
// still between two readings.
func usedMemory(b *testing.B, c valkey.Client) int64 {
	var last int64 = -1
	for range 100 {
		info, err := c.Do(context.Background(), c.B().Info().Section("memory").Build()).ToString()
		if err != nil {
			b.Fatal(err)
		}
		var used int64
		pending := false
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
				used, _ = strconv.ParseInt(v, 10, 64)
			}
			if v, ok := strings.CutPrefix(line, "lazyfree_pending_objects:"); ok && v != "0" {
				pending = true
			}
		}
		if !pending && used == last {
			return used
		}
		last = used
		time.Sleep(20 * time.Millisecond)
	}
	return last
}
