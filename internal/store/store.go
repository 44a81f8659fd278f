package store

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/layout"
	"github.com/byollm/relay-go/internal/payloadwait"
	"github.com/byollm/relay-go/internal/scriptrun"
	"github.com/byollm/relay-go/internal/workview"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/lua"
)

// ErrInvalidInput marks a call the store refuses before touching Valkey: an
// identifier holding U+0000 or longer than Options.MaxIDBytes, a blob that is
// not JSON or is larger than Options.MaxBlobBytes, a negative lease length.
// Nothing is written when it is returned.
var ErrInvalidInput = errors.New("invalid input")

// Defaults of Options.
const (
	DefaultNamespace         = "byollm"
	DefaultSweepBatch        = 24 // ~0.75 ms per sweep script (BenchmarkScriptTime)
	DefaultClaimSettleBudget = 16 // settling plus the claim itself stay under ~1 ms
	DefaultClaimScanBudget   = 10_000
	DefaultMaxIDBytes        = 4096
	DefaultMaxBlobBytes      = 32 << 20
	// DefaultMaxPresenceBytes bounds what one presence record holds of a
	// client's own: its capabilities and withheld lists together. The
	// planes refuse either list over protocol.MaxAdvertBytes first.
	DefaultMaxPresenceBytes = 2 * protocol.MaxAdvertBytes
	// DefaultMaxPairingBytes is 65 KiB: the planes' 64 KiB bound on a pair
	// start plus room for the codes and expiry added to it. A real daemon's
	// start is its keys, label and a few capabilities of some 300 bytes
	// each (one per service and kind), a few KiB; 500 codes at this bound
	// are under 33 MiB.
	DefaultMaxPairingBytes = 65 << 10
	// DefaultShardRecheckMs: two minutes, a dozen ticks of an idle daemon,
	// so an idle device reads its record of shards about once in twelve
	// heartbeats (Options.ShardRecheckMs).
	DefaultShardRecheckMs  = 120_000
	maxSweepBatchesPerCall = 10_000
	maxLeaseMs             = int64(1) << 40 // about 35 years; keeps now+leaseMs exact in a double
)

// Options configures a Store. Zero values mean the defaults named below.
type Options struct {
	// Namespace prefixes every key ("<ns>:{<ns>}:..."); default "byollm".
	// NamespacePattern says what one may be. Two stores share state exactly when they share
	// a Valkey database and a namespace.
	Namespace string
	// OnChurn is told when a (site, owner) pair lets CHURN_EXPIRIES grants
	// expire unsealed within CHURN_WINDOW_MS (store.md §1.6). It runs after the
	// script that noticed it, on its own goroutine; a panic is recovered and
	// logged. At most one report per pair per hour across all replicas. When
	// nil, no churn is recorded at all, as in the reference.
	OnChurn func(ChurnReport)
	// Logger receives warnings (quarantined stubs, scan budget hits, recovered
	// callback panics); default slog.Default().
	Logger *slog.Logger
	// PairingCapacity bounds outstanding pairings; default 500
	// (MaxOutstandingPairings, the reference's). A fifth of it is kept for
	// networks holding no live code (see PairingsPerNetwork).
	PairingCapacity int
	// PairingsPerSource bounds the live codes of one source address
	// (PendingPairing.Source); default DefaultPairingsPerSource.
	PairingsPerSource int
	// PairingsPerNetwork bounds the live codes of one source network (the
	// source's /24, or /48 for IPv6: SourceNetwork); default
	// DefaultPairingsPerNetwork, and never below PairingsPerSource.
	PairingsPerNetwork int
	// MaxPairingBytes bounds one stored pending pairing (its JSON); default
	// DefaultMaxPairingBytes. The planes bound the pair-start body below it.
	MaxPairingBytes int
	// PresenceTTLMs, when positive, expires presence records that long after
	// their last heartbeat. 0 keeps them, as the reference does. The relay
	// sets DeviceRetention instead, which ends a device's other keys too.
	PresenceTTLMs int64
	// DeviceRetention, when positive, is how long a silent device keeps
	// its presence record, owner-index and runner-index entries and record
	// of shards: ReapDevices (the relay's background sweep) forgets them
	// after it. 0 keeps them, as the reference does. The relay's
	// RELAY_DEVICE_RETENTION is at least MinDeviceRetention; the store takes
	// any positive value, so tests can shorten it.
	DeviceRetention time.Duration
	// ShardRecheckMs is how long a heartbeat's read of the runner's record
	// of shards that found no live grant stands (lua/presence_beat.lua);
	// default DefaultShardRecheckMs. Every grant this store makes clears
	// it at once; the bound matters only for grants written by a relay
	// that predates it (during a rolling upgrade), whose cancel requests
	// reach the daemon at most this late.
	ShardRecheckMs int64
	// SweepBatch is the most due jobs one sweep script settles; default 24,
	// which keeps one script under about 1 ms (each settled job costs some
	// 25-30 µs of server time: its record, its snapshot, every index).
	SweepBatch int
	// ClaimSettleBudget is the most due jobs a claim settles inside its own
	// script. With more due, claim first drains them with Sweep and retries,
	// so no single script runs long; default 16.
	ClaimSettleBudget int
	// ClaimScanBudget is the most queue entries one claim examines in all
	// (one script examines at most 48; a claim needing more continues in
	// further scripts where the last stopped). Only
	// entries skipped for this runner (refusedBy, retryAfter) cost scans
	// without granting, so the default 10000 is never reached in practice; it
	// bounds a pathological claim rather than shaping a normal one.
	ClaimScanBudget int
	// MaxIDBytes bounds identifiers (site, job, owner, runner, lease, kind,
	// audience, disposition, pairing codes); default 4096.
	MaxIDBytes int
	// MaxBlobBytes bounds stored JSON (stubs, envelopes, identities,
	// capabilities); default 32 MiB. The planes enforce the wire's 6 MiB.
	MaxBlobBytes int
	// MaxPresenceBytes bounds a presence record's capabilities and withheld
	// JSON together; Seen refuses more with ErrInvalidInput. Default
	// DefaultMaxPresenceBytes (512 KiB).
	MaxPresenceBytes int
	// SiteLimits bounds what each site may hold (see SiteLimit); the zero
	// value limits nothing, as in the reference.
	SiteLimits SiteLimits
	// ObserveScript, when set, is called around every script call this
	// Store makes (whoever asked for it: a plane, the sweeper, the admin
	// API): it returns the context to run the script under (carrying its
	// span) and a func told the call's error, nil for any reply, refusals
	// included. A non-nil error is a *ScriptError naming its class.
	ObserveScript func(ctx context.Context, script string) (context.Context, func(error))
	// CallTimeout, when positive, bounds each call this Store makes (a
	// script, a named command or pipeline): one past it fails with
	// context.DeadlineExceeded, an unavailable store (config
	// RELAY_STORE_TIMEOUT). The bound is the runner's (internal/scriptrun),
	// so a heartbeat waiting for its batch is not charged for the wait.
	CallTimeout time.Duration
	// ResultCacheBytes bounds the results this Store keeps in memory so that
	// a site's repeated results reads fetch only new results from Valkey
	// (see ResultJobs); default 64 MiB, negative disables the cache.
	ResultCacheBytes int
	// HeartbeatBatch, when positive, is how long Heartbeat's presence
	// write may wait for others to share its round trip (see beatBatch):
	// the server pays about one round trip per batch instead of one per
	// heartbeat. Zero writes each heartbeat at once.
	HeartbeatBatch time.Duration
	// HeartbeatIdleBatch, when longer than HeartbeatBatch, is how long the
	// presence write of an idle heartbeat (HeartbeatInput.Idle: the device
	// runs nothing and the work view knows its next claim would find
	// nothing) may wait. Such a write can be late without delaying any
	// work, and on a cluster, where heartbeats share a script call only
	// per shard, a longer window is what fills the calls. Any flush of the
	// short window takes the waiting idle writes along.
	HeartbeatIdleBatch time.Duration
	// evalScripts runs every operation with EVALSHA even when the server
	// has FUNCTION (see library): for this package's benchmarks and tests
	// that compare the two in one run. A server without FUNCTION, or one
	// that refuses to load the library, gets EVALSHA whatever this says.
	evalScripts bool
	// PlacementCacheSites bounds this Store's copy of the placement
	// record: at most two generations of this many sites (about 100 B
	// each), the older forgotten when the newer fills; a forgotten site
	// costs one read of the record when next used. Default
	// DefaultPlacementCacheSites.
	PlacementCacheSites int
	// PlacementRefresh is how long a cached placement is trusted before
	// the record is read again (default layout.DefaultRefreshAge). Sites
	// no replica has read for DeviceRetention are forgotten (ReapSites)
	// when DeviceRetention exceeds it, else kept.
	PlacementRefresh time.Duration
	// WorkViewQueues bounds the empty queues the work view remembers per
	// shard (about 80 B each); default DefaultWorkViewQueues. A fleet with
	// more queues on a shard than this sends some empty claims to Valkey.
	WorkViewQueues int

	// migrating lets Migrate's own Store open a namespace of an older
	// layout it is about to move (loadLayout refuses it otherwise).
	migrating bool
}

func (o Options) withDefaults() Options {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.PairingCapacity <= 0 {
		o.PairingCapacity = MaxOutstandingPairings
	}
	if o.PairingsPerSource <= 0 {
		o.PairingsPerSource = DefaultPairingsPerSource
	}
	if o.PairingsPerNetwork <= 0 {
		o.PairingsPerNetwork = DefaultPairingsPerNetwork
	}
	// An address is inside its network: a network bound below the
	// address bound would only make the address bound a lie.
	o.PairingsPerNetwork = max(o.PairingsPerNetwork, o.PairingsPerSource)
	if o.MaxPairingBytes <= 0 {
		o.MaxPairingBytes = DefaultMaxPairingBytes
	}
	if o.SweepBatch <= 0 {
		o.SweepBatch = DefaultSweepBatch
	}
	if o.ClaimSettleBudget <= 0 {
		o.ClaimSettleBudget = DefaultClaimSettleBudget
	}
	if o.ClaimScanBudget <= 0 {
		o.ClaimScanBudget = DefaultClaimScanBudget
	}
	if o.MaxIDBytes <= 0 {
		o.MaxIDBytes = DefaultMaxIDBytes
	}
	if o.MaxBlobBytes <= 0 {
		o.MaxBlobBytes = DefaultMaxBlobBytes
	}
	if o.MaxPresenceBytes <= 0 {
		o.MaxPresenceBytes = DefaultMaxPresenceBytes
	}
	if o.ResultCacheBytes == 0 {
		o.ResultCacheBytes = DefaultResultCacheBytes
	}
	return o
}

// Store is the routing store and the pairing-code store of one namespace in
// Valkey. It holds no routing state of its own: every decision is one Lua
// script, so any number of Stores (replicas) may share a namespace.
type Store struct {
	c      valkey.Client
	k      keys
	opts   Options
	log    *slog.Logger
	offset atomic.Int64
	// runner runs every call: FCALL of the library (library.go) where the
	// server took it, else EVALSHA of scripts.
	runner  *scriptrun.Runner
	scripts map[string]*scriptrun.Script
	beats   *beatBatch
	// jobScripts: RunJobScript's, from outside lua/ (test/storehooks).
	jobScripts jobScripts
	churnWG    sync.WaitGroup // OnChurn calls in flight (tests wait on it)
	// announce: the server has sharded pub/sub, so scripts announce queue
	// entries (lib/store.lua announce()) for the replicas' work views.
	announce bool
	view     *workview.View
	// payloads: fetches waiting for their payload (AwaitPayload), woken by
	// this Store's seals and by the seals announced on the shards' channels.
	payloads *payloadwait.Waiters
	results  resultCache
	limits   pageLimits
	// epochSeed and epochN make every enqueue's epoch candidate unique, so
	// the epoch written after a data loss never equals one written before.
	epochSeed string
	epochN    atomic.Uint64
	// placer places sites on shards (internal/layout).
	placer *layout.Placer
	// layoutV is the namespace's layout version as read at start:
	// LayoutVersion, except in Migrate's own Store while it moves one.
	layoutV atomic.Int32
	// retention: what ReapDevices and BackfillRetention remember.
	retention retentionState
}

// epochCandidate is the epoch the next enqueue writes if the namespace has
// none (see resultCache).
func (s *Store) epochCandidate() string {
	return s.epochSeed + "." + strconv.FormatUint(s.epochN.Add(1), 36)
}

// New checks the options, loads the operations as a Valkey Functions
// library where the server takes one (else they are scripts, loaded on
// first use: EVALSHA, EVAL on NOSCRIPT) and reads the namespace's layout.
func New(ctx context.Context, c valkey.Client, opts Options) (*Store, error) {
	if c == nil {
		return nil, errors.New("store: nil valkey client")
	}
	opts = opts.withDefaults()
	k, err := newKeys(opts.Namespace)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	sources, err := loadScripts(lua.FS)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	s := &Store{c: c, k: k, opts: opts, log: opts.Logger, scripts: make(map[string]*scriptrun.Script, len(sources))}
	runOpts := scriptrun.Options{Observe: opts.ObserveScript, Timeout: opts.CallTimeout}
	if opts.HeartbeatBatch > 0 {
		s.beats = newBeatBatch(s, opts.HeartbeatBatch, opts.HeartbeatIdleBatch)
		// Heartbeats waiting for their window while Valkey goes away are
		// refused now, not at the window's end (Heartbeat sends the next
		// ones unbatched until a call is answered again).
		runOpts.OnUnreachable = s.beats.queue.Flush
	}
	s.runner = scriptrun.NewRunner(c, runOpts)
	s.results.limit = max(opts.ResultCacheBytes, 0)
	var seed [12]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("store: epoch seed: %w", err)
	}
	s.epochSeed = hex.EncodeToString(seed[:])
	s.limits = defaultPageLimits
	for _, sc := range Scripts {
		src, ok := sources[sc.Name]
		if !ok {
			return nil, fmt.Errorf("store: no lua/%s.lua", sc.Name)
		}
		if s.scripts[sc.Name], err = scriptrun.New(sc.Name, src); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		// The header's mode rules (FCALL_RO, EVALSHA_RO); the library's
		// no-writes flag comes from Scripts and must say the same.
		if s.scripts[sc.Name].ReadOnly() != sc.ReadOnly {
			return nil, fmt.Errorf("store: lua/%s.lua: its header's mode disagrees with Scripts (scripts.go)", sc.Name)
		}
	}
	if !opts.evalScripts {
		if err := s.loadFunctions(ctx); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
	}
	if err := s.loadLayout(ctx); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	s.payloads = payloadwait.New()
	s.view = workview.New(s.k.shards, cmp.Or(opts.WorkViewQueues, DefaultWorkViewQueues), viewPubSub{c: s.c, sealed: s.payloads.Sealed})
	s.view.OnDown(s.payloads.WakeAll)
	// The embedded store has no SPUBLISH: no announcements, no view (and
	// one replica, nobody to tell).
	s.announce = s.c.Do(ctx, s.c.B().Spublish().Channel(s.k.p+"probe").Message("~").Build()).Error() == nil
	return s, nil
}

// loadFunctions builds the library and loads it. A server that refuses
// it (no FUNCTION command, an ACL, a full server) leaves the store on
// EVALSHA, said once in the log.
func (s *Store) loadFunctions(ctx context.Context) error {
	lib, err := shippedLibrary()
	if err != nil {
		return err
	}
	if err := s.runner.LoadLibrary(ctx, lib.forRunner()); err != nil {
		if errors.Is(err, scriptrun.ErrNoFunctions) {
			reason := err.Error()
			if len(reason) > 160 { // a server may echo the library back
				reason = reason[:160] + "…"
			}
			s.log.Info("store: operations run as scripts (EVALSHA), not as a functions library", "reason", reason)
			return nil
		}
		return err
	}
	return nil
}

// shippedLibrary is the library of lua/ and Scripts, built once per
// process: it depends on nothing else, and every Store (a test makes
// hundreds) would otherwise read and hash the same 97 KB again.
var shippedLibrary = sync.OnceValues(func() (library, error) { return buildLibrary(lua.FS, Scripts) })

// RunsFunctions says whether operations run as the Valkey Functions
// library (FCALL) rather than as scripts (EVALSHA).
func (s *Store) RunsFunctions() bool { return s.runner.Command() == "FCALL" }

// ScriptCommand is how operations are sent: "FCALL" or "EVALSHA" (the
// read-only ones with the _RO form).
func (s *Store) ScriptCommand() string { return s.runner.Command() }

// loadScripts assembles every operation: lib/common.lua, then each library
// named on a "-- lib: <name>" header line, then the operation itself.
func loadScripts(fsys fs.FS) (map[string]string, error) {
	common, err := fs.ReadFile(fsys, "lib/common.lua")
	if err != nil {
		return nil, fmt.Errorf("load lua lib: %w", err)
	}
	ops, err := fs.Glob(fsys, "*.lua")
	if err != nil {
		return nil, fmt.Errorf("list lua scripts: %w", err)
	}
	out := make(map[string]string, len(ops))
	for _, op := range ops {
		body, err := fs.ReadFile(fsys, op)
		if err != nil {
			return nil, fmt.Errorf("load lua %s: %w", op, err)
		}
		if out[strings.TrimSuffix(op, ".lua")], err = assemble(fsys, common, string(body)); err != nil {
			return nil, fmt.Errorf("lua %s: %w", op, err)
		}
	}
	return out, nil
}

// ScriptSource is lua/<name>.lua as a script (EVAL), assembled as the
// store assembles its own: for callers that run an operation of lua/ by
// themselves (the policy store) or name scripts by digest (storebench).
func ScriptSource(name string) (string, error) {
	common, err := fs.ReadFile(lua.FS, "lib/common.lua")
	if err != nil {
		return "", err
	}
	body, err := fs.ReadFile(lua.FS, name+".lua")
	if err != nil {
		return "", err
	}
	return assemble(lua.FS, common, string(body))
}

// assemble is one operation's source as a script (EVAL): the globals
// bound, common, each library its header names (from fsys's lib/), the
// call's start, then body.
func assemble(fsys fs.FS, common []byte, body string) (string, error) {
	var b strings.Builder
	b.WriteString(evalPrelude)
	b.Write(common)
	for _, line := range strings.Split(body, "\n") {
		name, ok := strings.CutPrefix(strings.TrimSpace(line), "-- lib:")
		if !ok {
			continue
		}
		lib, err := fs.ReadFile(fsys, "lib/"+strings.TrimSpace(name)+".lua")
		if err != nil {
			return "", err
		}
		b.Write(lib)
	}
	b.WriteString(callStart)
	b.WriteString(body)
	return b.String(), nil
}

// Namespace is the namespace this store works in.
func (s *Store) Namespace() string { return s.opts.Namespace }

// KeyPattern matches every key of this store's namespace (SCAN MATCH).
func (s *Store) KeyPattern() string { return s.k.pattern() }

// Now is the store clock: Valkey TIME in ms (microseconds floored) plus the
// test offset, the same formula every script uses.
func (s *Store) Now(ctx context.Context) (int64, error) {
	return s.timeReply(s.do(ctx, "now", s.c.B().Time().Build()))
}

// timeReply is the store clock from a TIME reply (see Now).
func (s *Store) timeReply(r valkey.ValkeyResult) (int64, error) {
	parts, err := r.AsStrSlice()
	if err != nil {
		return 0, fmt.Errorf("now: %w", err)
	}
	if len(parts) != 2 {
		return 0, fmt.Errorf("now: TIME replied %d parts", len(parts))
	}
	sec, err1 := strconv.ParseInt(parts[0], 10, 64)
	usec, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("now: %w", err)
	}
	return sec*1000 + usec/1000 + s.offset.Load(), nil
}

// run executes one script with the common ARGV prefix (key prefix, clock
// offset, flags) in front of args. Every script call passes here, whoever
// the caller (planes, sweeper, admin, tests), and goes to the runner, which
// observes, bounds and classifies it.
func (s *Store) run(ctx context.Context, script Script, keys []string, args ...string) (msg valkey.ValkeyMessage, err error) {
	sc, ok := s.scripts[script.Name]
	if !ok {
		return valkey.ValkeyMessage{}, fmt.Errorf("no script %q", script.Name)
	}
	return s.exec(ctx, script, sc, keys, args...)
}

// exec runs sc as script (run and RunJobScript).
func (s *Store) exec(ctx context.Context, script Script, sc *scriptrun.Script, keys []string, args ...string) (valkey.ValkeyMessage, error) {
	withGuard, all, err := s.scriptArgs(script, keys, args)
	if err != nil {
		return valkey.ValkeyMessage{}, err
	}
	if script.Work {
		defer s.view.Touched(prefixOf(keys[0]))
	}
	return s.runner.Run(ctx, sc, withGuard, all)
}

// scriptArgs is what a script call sends: the caller's keys with the
// migration guard last (see GuardKey; lib/common.lua takes it off again,
// so a script's KEYS are what its caller passed), and the common ARGV
// (lib/common.lua) before the caller's args.
func (s *Store) scriptArgs(script Script, keys, args []string) (withGuard, all []string, err error) {
	if len(keys) == 0 {
		return nil, nil, fmt.Errorf("script %q: no keys (KEYS[1] names the slot)", script.Name)
	}
	// ARGV[3], the flags: churn callback set, announce queue entries.
	flags := []byte("00")
	if s.opts.OnChurn != nil {
		flags[0] = '1'
	}
	if s.announce {
		flags[1] = '1'
	}
	all = make([]string, 0, len(args)+3)
	all = append(all, prefixOf(keys[0]), strconv.FormatInt(s.offset.Load(), 10), string(flags))
	all = append(all, args...)
	withGuard = make([]string, 0, len(keys)+1)
	withGuard = append(append(withGuard, keys...), GuardKey(prefixOf(keys[0])))
	return withGuard, all, nil
}

// prefixOf is a key's prefix up to and including its hash tag and the colon
// after it: the part every key of the same shard shares. Every script
// builds the keys it discovers from KEYS[1]'s prefix (lib/common.lua), so
// they fall in KEYS[1]'s slot by construction.
func prefixOf(key string) string {
	if i := strings.Index(key, "}:"); i >= 0 {
		return key[:i+2]
	}
	return key
}

// GuardKey is the migration guard of the shard (or fleet-wide set) whose
// prefix is prefix: a key that is never written. Every script declares it
// as its last KEYS entry (Store.run appends it; lib/common.lua removes it
// before the script body sees KEYS). A script builds most of its keys from
// KEYS[1]'s prefix instead of declaring them, and on a cluster whose slot is
// migrating Redis aborts a script mid-way, its earlier writes kept, when it
// touches an undeclared key that is not there. Redis checks declared keys
// before running anything: while the slot is MIGRATING a missing declared
// key gets ASK (all missing) or TRYAGAIN (some), and on the IMPORTING side
// TRYAGAIN (several keys, some missing). The guard is always missing, so
// during a migration every script of that slot is refused before it starts
// (an unavailable store error, a retryable 503) and none runs half-way.
// Outside a migration a missing declared key costs nothing.
func GuardKey(prefix string) string { return prefix + "mguard" }

// checkID refuses identifiers that are too long or hold U+0000 (which the
// reference's joined keys rule out, §1.1). Every other byte is fine: key
// parts are base64url-encoded.
func (s *Store) checkID(field, v string) error {
	if len(v) > s.opts.MaxIDBytes {
		return fmt.Errorf("%w: %s is %d bytes, the limit is %d", ErrInvalidInput, field, len(v), s.opts.MaxIDBytes)
	}
	if strings.IndexByte(v, 0) >= 0 {
		return fmt.Errorf("%w: %s holds U+0000", ErrInvalidInput, field)
	}
	if !utf8.ValidString(v) {
		return fmt.Errorf("%w: %s is not UTF-8", ErrInvalidInput, field)
	}
	return nil
}

// checkBlob refuses stored JSON that is oversized or not JSON at all, so
// every snapshot can be re-encoded.
func (s *Store) checkBlob(field string, b []byte) error {
	if len(b) > s.opts.MaxBlobBytes {
		return fmt.Errorf("%w: %s is %d bytes, the limit is %d", ErrInvalidInput, field, len(b), s.opts.MaxBlobBytes)
	}
	if !json.Valid(b) {
		return fmt.Errorf("%w: %s is not JSON", ErrInvalidInput, field)
	}
	return nil
}

// fireChurn calls OnChurn for each report, after the script that raised it
// returned, each on its own goroutine, never letting a panic escape.
func (s *Store) fireChurn(reports []ChurnReport) {
	if s.opts.OnChurn == nil {
		return
	}
	for _, r := range reports {
		s.churnWG.Add(1)
		go func(r ChurnReport) {
			defer s.churnWG.Done()
			defer func() {
				if p := recover(); p != nil {
					s.log.Error("store: OnChurn panicked", "site", r.SiteID, "owner", r.Owner, "panic", p)
				}
			}()
			s.opts.OnChurn(r)
		}(r)
	}
}
