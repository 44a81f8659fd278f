package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/test/relaytest"
)

// BenchmarkIdleTick is what one idle device costs per tick: the store calls
// the relay makes for a heartbeat (Sweep, Heartbeat with the remembered
// record and the cancel requests, RenewLeases with nothing held) and for an
// empty claim (the remembered record checked, routes on three sites,
// nothing queued), over 1,000 devices. valkey-us/op is the server's CPU (user+sys from INFO), so
// run it against a private server:
//
//	redis-server --port 6391 --save '' &
//	RELAY_TEST_VALKEY_URL=redis://127.0.0.1:6391/0 go test ./internal/store -run '^$' -bench IdleTick -benchtime 5000x
//
// scripts/op and cmds/op count script calls (EVALSHA, FCALL) and all calls (INFO
// commandstats) per tick. "view" ticks one device after another, so every
// store call is its own round trip; "view-batch" ticks 100 devices at once
// with heartbeats batched (Options.HeartbeatBatch), the way a replica
// serving many devices sends them. The "-scripts" forms send the same
// operations as scripts (EVALSHA, Options.evalScripts) instead of the
// functions library.
func BenchmarkIdleTick(b *testing.B) {
	b.Run("direct", func(b *testing.B) { benchIdleTick(b, false, 0, false) })
	b.Run("view", func(b *testing.B) { benchIdleTick(b, true, 0, false) })
	b.Run("view-scripts", func(b *testing.B) { benchIdleTick(b, true, 0, true) })
	b.Run("view-batch", func(b *testing.B) { benchIdleTick(b, true, 100, false) })
	b.Run("view-batch-scripts", func(b *testing.B) { benchIdleTick(b, true, 100, true) })
}

// benchIdleTick: with view, the Store runs its work view (RunWorkView),
// as the relay does; with parallel > 0, that many devices tick at once
// and heartbeats are batched.
func benchIdleTick(b *testing.B, view bool, parallel int, evalScripts bool) {
	be := realBackend(b)
	opts := Options{Logger: relaytest.Discard(), evalScripts: evalScripts}
	if parallel > 0 {
		opts.HeartbeatBatch = 5 * time.Millisecond
	}
	s := newStore(b, be, opts)
	ctx := context.Background()
	if view {
		withView(b, s)
	}
	const devices = 1000
	devs := make([]protocol.PublicIdentity, devices)
	for i := range devices {
		devs[i] = freshDevice()
		if _, err := s.Seen(ctx, Presence{RunnerID: fmt.Sprint("idle-", i), Owner: "alice", Device: devs[i],
			Capabilities: []byte("[]"), Withheld: []byte("[]")}); err != nil {
			b.Fatal(err)
		}
	}
	sites := []string{"site_a", "site_b", "site_c"}
	tick := func(i int) {
		r := fmt.Sprint("idle-", i%devices)
		if _, err := s.Sweep(ctx); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Heartbeat(ctx, HeartbeatInput{Presence: Presence{RunnerID: r, Owner: "alice", Device: devs[i%devices],
			Capabilities: []byte("[]"), Withheld: []byte("[]")}, RequirePresence: true, Cancels: true}); err != nil {
			b.Fatal(err)
		}
		if _, err := s.RenewLeases(ctx, RenewInput{RunnerID: r, LeaseMs: 60000}); err != nil {
			b.Fatal(err)
		}
		in := ClaimInput{RunnerID: r, Owner: "alice", Device: devs[i%devices], Kinds: []string{protocol.KindGenerate}, Max: 4, LeaseMs: 60000,
			RequirePresence: true}
		for _, st := range sites {
			in.Routes = append(in.Routes, Route{SiteID: st, Owner: "alice"}, Route{SiteID: st, Owner: "bob"})
		}
		if got, err := s.Claim(ctx, in); err != nil || len(got) != 0 {
			b.Fatalf("claim: %d %v", len(got), err)
		}
	}
	for i := range devices { // every device ticks once before the measured ticks
		tick(i)
	}
	before := serverCost(b, be.client)
	b.ResetTimer()
	if parallel == 0 {
		for i := range b.N {
			tick(i)
		}
	} else {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range parallel {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1) - 1; i < int64(b.N); i = next.Add(1) - 1 {
					tick(int(i))
				}
			}()
		}
		wg.Wait()
	}
	b.StopTimer()
	serverCost(b, be.client).report(b, before)
}

// serverCounters are the server-wide counters a cost benchmark reads before
// and after its loop (INFO): CPU seconds (used_cpu_sys+used_cpu_user), read
// events on client connections (total_reads_processed: a round trip, or one
// pipelined batch), script calls (EVAL*, FCALL*) and all calls.
type serverCounters struct {
	cpu                  float64
	reads, scripts, cmds int64
}

// benchServerCost runs op b.N times and reports the server's cost per op
// (serverCounters.report), measured around the timed loop alone.
func benchServerCost(b *testing.B, c valkey.Client, op func()) {
	before := serverCost(b, c)
	b.ResetTimer()
	for range b.N {
		op()
	}
	b.StopTimer()
	serverCost(b, c).report(b, before)
}

// serverCost reads the counters so far.
func serverCost(b *testing.B, c valkey.Client) (n serverCounters) {
	info, err := c.Do(context.Background(), c.B().Info().Section("all").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_cpu_sys:"); ok {
			f, _ := strconv.ParseFloat(v, 64)
			n.cpu += f
		}
		if v, ok := strings.CutPrefix(line, "used_cpu_user:"); ok {
			f, _ := strconv.ParseFloat(v, 64)
			n.cpu += f
		}
		if v, ok := strings.CutPrefix(line, "total_reads_processed:"); ok {
			n.reads, _ = strconv.ParseInt(v, 10, 64)
		}
		if rest, ok := strings.CutPrefix(line, "cmdstat_"); ok {
			name, stats, _ := strings.Cut(rest, ":")
			calls := strings.TrimPrefix(strings.Split(stats, ",")[0], "calls=")
			k, _ := strconv.ParseInt(calls, 10, 64)
			n.cmds += k
			if strings.HasPrefix(name, "eval") || strings.HasPrefix(name, "fcall") {
				n.scripts += k
			}
		}
	}
	return n
}

// report puts what the server did between from and to, per op of b.N, on
// b: valkey-us/op, reads/op, scripts/op and cmds/op.
func (to serverCounters) report(b *testing.B, from serverCounters) {
	n := float64(b.N)
	b.ReportMetric((to.cpu-from.cpu)*1e6/n, "valkey-us/op")
	b.ReportMetric(float64(to.reads-from.reads)/n, "reads/op")
	b.ReportMetric(float64(to.scripts-from.scripts)/n, "scripts/op")
	b.ReportMetric(float64(to.cmds-from.cmds)/n, "cmds/op")
}
