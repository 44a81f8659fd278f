// Command storebench measures the Valkey routing store in isolation: claim
// latency and Valkey time per claim with many jobs queued (on routes the
// claimer cannot take, and claimable), sweep latency with 1% of 100k jobs
// due, Valkey memory per queued and per finished job, and the SLOWLOG.
//
// It is meant for a private Valkey/Redis instance (test/bench/run.sh starts
// one): it reconfigures SLOWLOG and reads INFO, whose numbers are only
// meaningful when nothing else uses the server. Keys live under a fresh
// namespace, deleted at the end.
//
//	storebench -valkey redis://127.0.0.1:6390/0 -json out.json            # the scenarios
//	storebench -valkey ... -mode slowlog-reset                            # arm SLOWLOG at 1 ms
//	storebench -valkey ... -mode stats                                    # eval calls/usec, memory (JSON)
//	storebench -valkey ... -mode slowlog                                  # script calls over 1 ms (JSON)
//	storebench -valkey ... -mode profile-reset / profile                  # log every call: per-script time distribution
package main

import (
	"context"
	"crypto/sha1" //nolint:gosec // names Lua scripts by their EVALSHA digest
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/envelope"
	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/lua"
	"github.com/byollm/relay-go/test/relaytest"
)

func main() {
	var (
		url     = flag.String("valkey", "redis://127.0.0.1:6379/0", "Valkey URL (a private instance: INFO and SLOWLOG are server-wide)")
		mode    = flag.String("mode", "scenarios", "scenarios | stats | slowlog-reset | slowlog | profile-reset | profile")
		sizes   = flag.String("sizes", "1000,10000,100000", "queued-job counts for the claim scenarios")
		claims  = flag.Int("claims", 200, "claims timed per size")
		sweepN  = flag.Int("sweep-jobs", 100000, "jobs in the sweep scenario (1% due)")
		memN    = flag.Int("mem-jobs", 2000, "jobs taken to done for the per-finished-job memory figure")
		jsonOut = flag.String("json", "", "write the result as JSON here (default stdout)")
	)
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	opt, err := valkey.ParseURL(*url)
	if err != nil {
		fail(err)
	}
	c, err := valkey.NewClient(opt)
	if err != nil {
		fail(err)
	}
	defer c.Close()

	var out any
	switch *mode {
	case "stats":
		out, err = serverStats(ctx, c)
	case "slowlog-reset":
		err = slowlogReset(ctx, c, 1000, 1024)
		out = map[string]bool{"armed": err == nil}
	case "profile-reset":
		// Every call logged: a full per-script distribution of execution time.
		err = slowlogReset(ctx, c, 0, 200000)
		out = map[string]bool{"armed": err == nil}
	case "slowlog", "profile":
		out, err = slowlogReport(ctx, c)
	case "scenarios":
		var ns []int
		for _, s := range strings.Split(*sizes, ",") {
			n, perr := strconv.Atoi(strings.TrimSpace(s))
			if perr != nil || n <= 0 {
				fail(fmt.Errorf("bad size %q", s))
			}
			ns = append(ns, n)
		}
		out, err = scenarios(ctx, c, ns, *claims, *sweepN, *memN)
	default:
		err = fmt.Errorf("unknown mode %q", *mode)
	}
	if err != nil {
		fail(err)
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	if *jsonOut == "" {
		os.Stdout.Write(append(b, '\n'))
		return
	}
	if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "storebench: %v\n", err)
	os.Exit(1)
}

// Stats is the server-wide state the bench reads before and after a phase.
type Stats struct {
	EvalCalls  int64 `json:"evalCalls"`  // EVAL, EVALSHA, FCALL and their _RO forms
	EvalUsec   int64 `json:"evalUsec"`   // time Valkey spent in them
	UsedMemory int64 `json:"usedMemory"` // INFO memory used_memory
	Keys       int64 `json:"keys"`       // DBSIZE
}

// settledStats waits for lazy freeing (UNLINK) to finish and used_memory to
// stop moving, so a memory delta measures only what was written.
func settledStats(ctx context.Context, c valkey.Client) (Stats, error) {
	prev, err := serverStats(ctx, c)
	if err != nil {
		return prev, err
	}
	for range 100 {
		time.Sleep(50 * time.Millisecond)
		mem, err := c.Do(ctx, c.B().Info().Section("memory").Build()).ToString()
		if err != nil {
			return prev, fmt.Errorf("info memory: %w", err)
		}
		cur, err := serverStats(ctx, c)
		if err != nil {
			return prev, err
		}
		if strings.Contains(mem, "lazyfree_pending_objects:0") && cur.UsedMemory == prev.UsedMemory {
			return cur, nil
		}
		prev = cur
	}
	return prev, nil
}

func serverStats(ctx context.Context, c valkey.Client) (Stats, error) {
	var st Stats
	cmds, err := relaytest.CommandStats(ctx, c)
	if err != nil {
		return st, err
	}
	for name, cs := range cmds {
		if strings.HasPrefix(name, "eval") || strings.HasPrefix(name, "fcall") {
			st.EvalCalls += cs.Calls
			st.EvalUsec += cs.Usec
		}
	}
	mem, err := c.Do(ctx, c.B().Info().Section("memory").Build()).ToString()
	if err != nil {
		return st, fmt.Errorf("info memory: %w", err)
	}
	for _, line := range strings.Split(mem, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			st.UsedMemory, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	st.Keys, err = c.Do(ctx, c.B().Dbsize().Build()).AsInt64()
	if err != nil {
		return st, fmt.Errorf("dbsize: %w", err)
	}
	return st, nil
}

// slowlogReset logs every command slower than thresholdUs from now on, in a
// log of up to maxLen entries.
func slowlogReset(ctx context.Context, c valkey.Client, thresholdUs, maxLen int) error {
	for _, cmd := range []valkey.Completed{
		c.B().ConfigSet().ParameterValue().ParameterValue("slowlog-log-slower-than", strconv.Itoa(thresholdUs)).Build(),
		c.B().ConfigSet().ParameterValue().ParameterValue("slowlog-max-len", strconv.Itoa(maxLen)).Build(),
		c.B().ConfigSet().ParameterValue().ParameterValue("latency-monitor-threshold", "1").Build(),
		c.B().SlowlogReset().Build(),
		c.B().LatencyReset().Build(),
	} {
		if err := c.Do(ctx, cmd).Error(); err != nil {
			return fmt.Errorf("arm slowlog: %w", err)
		}
	}
	return nil
}

// CommandTimes is the distribution of one script's (or command's) execution
// time as SLOWLOG recorded it.
type CommandTimes struct {
	Calls    int   `json:"calls"`
	Over1ms  int   `json:"over1ms"`
	P50Us    int64 `json:"p50Us"`
	P99Us    int64 `json:"p99Us"`
	MaxUs    int64 `json:"maxUs"`
	Complete bool  `json:"complete"` // false when the log overflowed: counts are a sample
}

// Slowlog summarises SLOWLOG. Armed at 1 ms it holds only the slow calls;
// armed at 0 (profile) it holds every call and gives full distributions.
type Slowlog struct {
	Entries       int   `json:"entries"`
	ScriptEntries int   `json:"scriptEntries"` // script calls over 1 ms: must be 0
	MaxScriptUs   int64 `json:"maxScriptUs"`
	// ByScript is per script name (EVALSHA digests mapped back to lua/*.lua).
	ByScript map[string]CommandTimes `json:"byScript"`
	// Plain is every O(1) command (HSET, HGET, ZSCORE, TIME...), including
	// those scripts call (Redis 7 logs those too): any of it over 1 ms means
	// the server was descheduled, and script times in the same window carry
	// the same noise.
	Plain CommandTimes `json:"plain"`
	// PlainByCommand counts every non-script command by name, O(1) or not.
	PlainByCommand map[string]int `json:"plainByCommand"`
	Latency        []string       `json:"latencyLatest"` // LATENCY LATEST events
}

// scriptNames maps script digests to operation names, each script
// assembled as internal/store sends it (store.ScriptSource).
func scriptNames() map[string]string {
	out := map[string]string{}
	ops, _ := fs.Glob(lua.FS, "*.lua")
	for _, op := range ops {
		name := strings.TrimSuffix(op, ".lua")
		if src, err := store.ScriptSource(name); err == nil {
			out[sha1Hex(src)] = name
		}
	}
	return out
}

func sha1Hex(s string) string {
	sum := sha1.Sum([]byte(s)) //nolint:gosec // EVALSHA's digest
	return hex.EncodeToString(sum[:])
}

// scriptName names the script of an EVAL/EVALSHA/FCALL entry. SLOWLOG truncates
// long arguments, so an EVAL body (first run, before the script cache) is
// recognised by its opening text when its digest cannot be recomputed.
func scriptName(names map[string]string, cmd, arg string) string {
	if cmd == "FCALL" || cmd == "FCALL_RO" {
		if n, ok := store.FunctionScript(arg); ok {
			return n
		}
		return "function:" + arg
	}
	if cmd == "EVALSHA" || cmd == "EVALSHA_RO" {
		if n, ok := names[strings.ToLower(arg)]; ok {
			return n
		}
		return "sha:" + arg[:min(len(arg), 12)]
	}
	if n, ok := names[sha1Hex(arg)]; ok {
		return n
	}
	// A truncated body: the operation's own header follows lib/common.lua,
	// so the best available name is "eval (first run)".
	if strings.Contains(arg, "projection") {
		return "projection (eval)"
	}
	return "eval (first run, script load)"
}

func slowlogReport(ctx context.Context, c valkey.Client) (Slowlog, error) {
	r := Slowlog{ByScript: map[string]CommandTimes{}, PlainByCommand: map[string]int{}}
	names := scriptNames()
	maxLen, err := c.Do(ctx, c.B().ConfigGet().Parameter("slowlog-max-len").Build()).AsStrMap()
	if err != nil {
		return r, fmt.Errorf("config get: %w", err)
	}
	limit, _ := strconv.Atoi(maxLen["slowlog-max-len"])
	length, err := c.Do(ctx, c.B().SlowlogLen().Build()).AsInt64()
	if err != nil {
		return r, fmt.Errorf("slowlog len: %w", err)
	}
	complete := int(length) < limit
	entries, err := c.Do(ctx, c.B().SlowlogGet().Count(max(int64(limit), 1)).Build()).ToArray()
	if err != nil {
		return r, fmt.Errorf("slowlog get: %w", err)
	}
	times := map[string][]int64{}
	var plain []int64
	for _, e := range entries {
		f, err := e.ToArray()
		if err != nil || len(f) < 4 {
			continue
		}
		us, _ := f[2].AsInt64()
		args, _ := f[3].AsStrSlice()
		cmd := ""
		if len(args) > 0 {
			cmd = strings.ToUpper(args[0])
		}
		if cmd == "SLOWLOG" || cmd == "CONFIG" {
			continue
		}
		r.Entries++
		if (strings.HasPrefix(cmd, "EVAL") || strings.HasPrefix(cmd, "FCALL")) && len(args) > 1 {
			name := scriptName(names, cmd, args[1])
			times[name] = append(times[name], us)
			if us > 1000 {
				r.ScriptEntries++
			}
			r.MaxScriptUs = max(r.MaxScriptUs, us)
			continue
		}
		if constantTime[cmd] {
			plain = append(plain, us)
		}
		r.PlainByCommand[cmd]++
	}
	for name, v := range times {
		r.ByScript[name] = distribution(v, complete)
	}
	r.Plain = distribution(plain, complete)
	lat, err := c.Do(ctx, c.B().LatencyLatest().Build()).ToArray()
	if err == nil {
		for _, ev := range lat {
			f, _ := ev.ToArray()
			if len(f) >= 4 {
				name, _ := f[0].ToString()
				latest, _ := f[2].AsInt64()
				maxMs, _ := f[3].AsInt64()
				r.Latency = append(r.Latency, fmt.Sprintf("%s latest=%dms max=%dms", name, latest, maxMs))
			}
		}
	}
	if r.Latency == nil {
		r.Latency = []string{}
	}
	return r, nil
}

// constantTime are commands whose own work is O(1) (HMGET: O(fields asked)).
var constantTime = map[string]bool{
	"HSET": true, "HGET": true, "HDEL": true, "HMGET": true, "HEXISTS": true, "INCR": true, "EXISTS": true,
	"ZSCORE": true, "SADD": true, "SREM": true, "SISMEMBER": true, "TIME": true, "PING": true, "GET": true, "SET": true,
}

func distribution(v []int64, complete bool) CommandTimes {
	if len(v) == 0 {
		return CommandTimes{Complete: complete}
	}
	slices.Sort(v)
	over := 0
	for _, x := range v {
		if x > 1000 {
			over++
		}
	}
	q := func(p float64) int64 { return v[min(len(v)-1, int(p*float64(len(v))))] }
	return CommandTimes{Calls: len(v), Over1ms: over, P50Us: q(0.5), P99Us: q(0.99), MaxUs: v[len(v)-1], Complete: complete}
}

// Timing is one timed operation's distribution plus Valkey's own time.
type Timing struct {
	Queued       int     `json:"queued"`
	Ops          int     `json:"ops"`
	P50Ms        float64 `json:"p50Ms"`
	P99Ms        float64 `json:"p99Ms"`
	MaxMs        float64 `json:"maxMs"`
	ValkeyUsPer  float64 `json:"valkeyUsPerOp"`   // INFO commandstats eval usec / ops
	ScriptsPerOp float64 `json:"scriptsPerOp"`    // eval calls / ops
	Granted      int     `json:"granted"`         // claims only: jobs granted in total
	Settled      int     `json:"settled"`         // sweep only: jobs removed
	WallMs       float64 `json:"wallMs,omitzero"` // sweep only
}

// Result is the whole scenario run.
type Result struct {
	Backend               string   `json:"backend"`
	ClaimBlocked          []Timing `json:"claimBlocked"`   // N queued on routes the claimer cannot take
	ClaimClaimable        []Timing `json:"claimClaimable"` // N queued on the claimer's route
	Sweep                 Timing   `json:"sweep"`          // N jobs, 1% due
	MemPerQueuedJobBytes  float64  `json:"memPerQueuedJobBytes"`
	MemPerFinishedJobByte float64  `json:"memPerFinishedJobBytes"`
	FinishedJobEnvelopes  int      `json:"finishedJobEnvelopeBytes"` // payload+result envelope bytes per finished job
	Slowlog               Slowlog  `json:"slowlog"`
}

type bench struct {
	c      valkey.Client
	st     *store.Store
	ns     string
	site   *envelope.Identity
	device *envelope.Identity
}

func scenarios(ctx context.Context, c valkey.Client, sizes []int, claims, sweepN, memN int) (*Result, error) {
	if err := slowlogReset(ctx, c, 1000, 1024); err != nil {
		return nil, err
	}
	res := &Result{Backend: "go store on valkey"}
	var err error
	b := &bench{c: c}
	if b.site, err = envelope.Generate(time.Now().UnixMilli(), nil); err != nil {
		return nil, err
	}
	if b.device, err = envelope.Generate(time.Now().UnixMilli(), nil); err != nil {
		return nil, err
	}
	quiet := relaytest.Discard()

	// Each scenario gets its own namespace so the counts are exact.
	fresh := func() error {
		b.ns = relaytest.NewName()
		b.st, err = store.New(ctx, c, store.Options{Namespace: b.ns, Logger: quiet})
		return err
	}
	defer func() { _ = b.dropAll(context.WithoutCancel(ctx)) }()

	// Claims with N queued where the claimer has no route; grown in place.
	if err := fresh(); err != nil {
		return nil, err
	}
	memBefore, err := settledStats(ctx, c)
	if err != nil {
		return nil, err
	}
	have := 0
	for _, n := range sizes {
		if err := b.enqueueMany(ctx, "blocked-site", "other-owner", n-have, time.Hour); err != nil {
			return nil, err
		}
		have = n
		if n == sizes[len(sizes)-1] {
			after, err := settledStats(ctx, c)
			if err != nil {
				return nil, err
			}
			res.MemPerQueuedJobBytes = float64(after.UsedMemory-memBefore.UsedMemory) / float64(n)
		}
		t, err := b.timeClaims(ctx, n, claims, false)
		if err != nil {
			return nil, err
		}
		res.ClaimBlocked = append(res.ClaimBlocked, t)
	}
	if err := b.dropAll(ctx); err != nil {
		return nil, err
	}

	// Claims with N claimable on the claimer's own route; each grant is
	// released again so N stays N.
	if err := fresh(); err != nil {
		return nil, err
	}
	have = 0
	for _, n := range sizes {
		if err := b.enqueueMany(ctx, "my-site", "me", n-have, time.Hour); err != nil {
			return nil, err
		}
		have = n
		t, err := b.timeClaims(ctx, n, claims, true)
		if err != nil {
			return nil, err
		}
		res.ClaimClaimable = append(res.ClaimClaimable, t)
	}
	if err := b.dropAll(ctx); err != nil {
		return nil, err
	}

	// Sweep: N jobs, 1% with a deadline a minute out, the rest an hour out;
	// then the store clock moves two minutes ahead.
	if err := fresh(); err != nil {
		return nil, err
	}
	due := sweepN / 100
	if err := b.enqueueMany(ctx, "sweep-site", "me", sweepN-due, time.Hour); err != nil {
		return nil, err
	}
	if err := b.enqueueMany(ctx, "sweep-site", "me", due, time.Minute); err != nil {
		return nil, err
	}
	b.st.Testing().SetClockOffset(2 * 60 * 1000)
	before, err := serverStats(ctx, c)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	swept, err := b.st.Sweep(ctx)
	wall := time.Since(start)
	if err != nil {
		return nil, err
	}
	after, err := serverStats(ctx, c)
	if err != nil {
		return nil, err
	}
	scripts := after.EvalCalls - before.EvalCalls
	res.Sweep = Timing{
		Queued: sweepN, Ops: 1, P50Ms: msf(wall), P99Ms: msf(wall), MaxMs: msf(wall), WallMs: msf(wall),
		ValkeyUsPer: float64(after.EvalUsec - before.EvalUsec), ScriptsPerOp: float64(scripts), Settled: len(swept),
	}
	if len(swept) != due {
		return nil, fmt.Errorf("sweep settled %d jobs, want %d", len(swept), due)
	}
	if err := b.dropAll(ctx); err != nil {
		return nil, err
	}

	// Memory per finished job: memN jobs through claim, seal, fetch, complete
	// with envelopes the size loadgen's are.
	if err := fresh(); err != nil {
		return nil, err
	}
	memBefore, err = settledStats(ctx, c)
	if err != nil {
		return nil, err
	}
	envBytes, err := b.finishMany(ctx, memN)
	if err != nil {
		return nil, err
	}
	memAfter, err := settledStats(ctx, c)
	if err != nil {
		return nil, err
	}
	res.MemPerFinishedJobByte = float64(memAfter.UsedMemory-memBefore.UsedMemory) / float64(memN)
	res.FinishedJobEnvelopes = envBytes
	if err := b.dropAll(ctx); err != nil {
		return nil, err
	}

	res.Slowlog, err = slowlogReport(ctx, c)
	return res, err
}

func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (b *bench) stub(siteKey, owner string, ttl time.Duration) protocol.JobStub {
	return protocol.JobStub{
		ID: uuid.NewString(), Kind: protocol.KindGenerate, Owner: owner, Site: siteKey,
		Audience: protocol.AudiencePrivate, SizeClass: "small", DeadlineAt: time.Now().Add(ttl).UnixMilli(),
	}
}

// enqueueMany enqueues n jobs with 64 callers (valkey-go pipelines them).
func (b *bench) enqueueMany(ctx context.Context, siteID, owner string, n int, ttl time.Duration) error {
	if n <= 0 {
		return nil
	}
	work := make(chan struct{}, n)
	for range n {
		work <- struct{}{}
	}
	close(work)
	errs := make(chan error, 64)
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				st := b.stub(b.site.KeyID(), owner, ttl)
				if _, err := b.st.Enqueue(ctx, store.EnqueueInput{ID: st.ID, SiteID: siteID, Stub: st}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// timeClaims times claims by one runner whose only route is (my-site, me).
func (b *bench) timeClaims(ctx context.Context, queued, n int, claimable bool) (Timing, error) {
	in := store.ClaimInput{
		RunnerID: "bench-runner", Owner: "me", Device: b.device.Public(),
		Routes: []store.Route{{SiteID: "my-site", Owner: "me"}}, Kinds: []string{protocol.KindGenerate},
		Max: 1, LeaseMs: 60_000,
	}
	var lat []time.Duration
	var valkeyUs, scripts int64
	granted := 0
	for range n {
		before, err := serverStats(ctx, b.c)
		if err != nil {
			return Timing{}, err
		}
		start := time.Now()
		got, err := b.st.Claim(ctx, in)
		lat = append(lat, time.Since(start))
		if err != nil {
			return Timing{}, err
		}
		after, err := serverStats(ctx, b.c)
		if err != nil {
			return Timing{}, err
		}
		valkeyUs += after.EvalUsec - before.EvalUsec
		scripts += after.EvalCalls - before.EvalCalls
		granted += len(got)
		if claimable && len(got) != 1 {
			return Timing{}, fmt.Errorf("claim with %d claimable granted %d", queued, len(got))
		}
		if !claimable && len(got) != 0 {
			return Timing{}, fmt.Errorf("claim with no route granted %d", len(got))
		}
		if len(got) > 0 {
			refs := make([]protocol.GrantRef, len(got))
			for i, g := range got {
				var s protocol.JobStub
				_ = json.Unmarshal(g.Stub, &s)
				refs[i] = protocol.GrantRef{JobID: s.ID, LeaseID: g.Lease.ID}
			}
			if _, err := b.st.ReleaseLeases(ctx, store.ReleaseInput{RunnerID: in.RunnerID, Leases: refs, Reason: store.ReasonShutdown}); err != nil {
				return Timing{}, err
			}
		}
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return msf(lat[min(len(lat)-1, int(p*float64(len(lat))))]) }
	return Timing{
		Queued: queued, Ops: n, P50Ms: q(0.50), P99Ms: q(0.99), MaxMs: msf(lat[len(lat)-1]),
		ValkeyUsPer: float64(valkeyUs) / float64(n), ScriptsPerOp: float64(scripts) / float64(n), Granted: granted,
	}, nil
}

// finishMany takes n jobs the whole way to done and returns the envelope
// bytes stored per job.
func (b *bench) finishMany(ctx context.Context, n int) (int, error) {
	if err := b.enqueueMany(ctx, "mem-site", "me", n, time.Hour); err != nil {
		return 0, err
	}
	prompt := strings.Repeat("x", 256)
	in := store.ClaimInput{
		RunnerID: "bench-runner", Owner: "me", Device: b.device.Public(),
		Routes: []store.Route{{SiteID: "mem-site", Owner: "me"}}, Kinds: []string{protocol.KindGenerate},
		Max: 1, LeaseMs: 60_000,
	}
	envBytes := 0
	for range n {
		got, err := b.st.Claim(ctx, in)
		if err != nil || len(got) != 1 {
			return 0, fmt.Errorf("finish: claim: %v (%d granted)", err, len(got))
		}
		var s protocol.JobStub
		_ = json.Unmarshal(got[0].Stub, &s)
		deadline := time.Now().UnixMilli() + envelope.MaxAgeMs
		pe, err := envelope.Seal(`{"prompt":"`+prompt+`"}`, b.site, b.device.Stored.EncryptionPublic, envelope.Context{
			JobID: s.ID, SenderKeyID: b.site.KeyID(), RecipientKeyID: b.device.KeyID(), DeadlineAt: deadline, Direction: envelope.DirectionPayload}, nil)
		if err != nil {
			return 0, err
		}
		re, err := envelope.Seal(`{"outcome":{"outcome":"ok","text":"sha256:`+strings.Repeat("0", 64)+`"},"ran":{"model":"loadgen","backendClass":"http","durationMs":0,"stop":"end","stopReported":true}}`,
			b.device, b.site.Stored.EncryptionPublic, envelope.Context{
				JobID: s.ID, SenderKeyID: b.device.KeyID(), RecipientKeyID: b.site.KeyID(), DeadlineAt: deadline, Direction: envelope.DirectionResult}, nil)
		if err != nil {
			return 0, err
		}
		pj, _ := protocol.Marshal(pe)
		rj, _ := protocol.Marshal(re)
		envBytes = len(pj) + len(rj)
		if r, err := b.st.Seal(ctx, "mem-site", s.ID, pj); err != nil || r.Refused != "" {
			return 0, fmt.Errorf("finish: seal: %v %+v", err, r)
		}
		hi := store.HolderInput{JobID: s.ID, RunnerID: in.RunnerID, LeaseID: got[0].Lease.ID}
		if r, err := b.st.TakePayload(ctx, hi); err != nil || r.Refused != "" {
			return 0, fmt.Errorf("finish: take: %v %+v", err, r)
		}
		if r, err := b.st.Complete(ctx, store.CompleteInput{JobID: s.ID, RunnerID: in.RunnerID, LeaseID: got[0].Lease.ID, Envelope: rj, Disposition: "ok"}); err != nil || !r.Accepted {
			return 0, fmt.Errorf("finish: complete: %v %+v", err, r)
		}
	}
	return envBytes, nil
}

// dropAll deletes the current namespace's keys.
func (b *bench) dropAll(ctx context.Context) error {
	if b.st == nil {
		return nil
	}
	if _, err := relaytest.DeleteKeys(ctx, b.c, b.st.KeyPattern()); err != nil {
		return fmt.Errorf("drop %s: %w", b.ns, err)
	}
	return nil
}
