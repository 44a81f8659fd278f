// Package relay serves the two HTTP planes of the BYOLLM relay (the daemon
// plane under basePath and the site plane under /relay/site/) plus the
// optional per-site /debug page, wire-compatible with @byollm/relay@0.1.1
// (shared/spec/wire.md). It holds no routing state of its own: every decision
// is one store operation (internal/store, atomic in Valkey), and every policy
// question is answered by the current projection (internal/projection).
//
// Deliberate departures from 0.1.1, each closing a trap of wire.md §17 that
// no client depends on, or covering what a shared deployment adds:
//   - The projection decides a runner's key and existence (§17.10): a
//     device deleted from the projection is "not recognised" and a re-keyed
//     device must sign with its new key, whatever presence has cached.
//   - /debug is per-site (§17.29): the named site's jobs and the devices
//     whose owner holds a consent for that site, nothing else.
//   - updateTo never offers a version at or below the daemon's (§17.33).
//   - POST bodies are capped at MaxBodyBytes before reading (MaxPairBodyBytes
//     on the unauthenticated pair route): 400
//     {"error":"bad-request","message":"this request is too large for the relay to read"}.
//     They are read as they arrive and charged to a byte budget shared by
//     every connection (internal/httpserve), of which one client holds at
//     most its share, together with an estimate of what parsing them costs
//     (protocol.BodyCost); a body the budget or the client's share cannot
//     hold now is a retryable 503 server-error, one it could never hold the
//     same 400 as an oversized body, one that stops arriving a 400.
//   - A results answer carries at most MaxResultsAnswerBytes; the rest come
//     in later reads (capResults).
//   - A client address (Config.TrustedProxies decides whether
//     X-Forwarded-For is believed) holds a bounded number of live pairing
//     codes; past it a start answers 429 rate-limited, like the reference's
//     full code store.
//   - Per-site limits of the store (unfinished jobs, stored bytes, enqueue
//     rate) refuse enqueue and payload with 429 rate-limited, which the
//     cloud lane retries.
//   - Until a projection is loaded the planes answer 503
//     {"error":"not-ready",...}; when the store cannot answer (unreachable,
//     overloaded, timed out: store.Classify), 503
//     {"error":"server-error",...}. Both clients retry both (§7.1, §17.40).
//     A failure that is the relay's own (a store reply it does not
//     understand, a broken invariant, a panic) is 500 server-error, as §2
//     says for a handler that throws, logged at error level.
//   - A store input refusal (store.ErrInvalidInput: U+0000 or a lone
//     surrogate in an id, an id or blob over the store's limits) is the
//     schema refusal, on enqueue row 32 "that stub was not accepted", and on
//     a pair poll {"status":"expired"} (such a code was never minted).
//   - Heartbeat activeLeases and release leases hold at most
//     protocol.MaxGrantRefs entries (schema refusal beyond).
//   - Unsigned pairing (fixture, device-code poll) records the projection's
//     key set in presence, never the presented one, so an older key set of
//     an approved identity cannot roll back what sites seal to.
//   - A store call slower than Config.StoreTimeout is the retryable 503
//     server-error, and a refusal a newer projection could reverse is only
//     given after checking the stored version (Relay.decide).
//   - A grant authority (Config.Grants) that fails or does not answer
//     within Config.GrantTimeout is a transient decline at claim (the job
//     goes back to its queue with the 30 s retry-after) and row 28 at
//     enqueue; the reference lets the callback's exception become a 500
//     and leaves the claimed jobs leased until their lease lapses.
package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/byollm/relay-go/internal/httpserve"
	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
)

// Defaults of the reference RelayOptions.
const (
	DefaultBasePath = "/byollm"
	DefaultLeaseMs  = 60_000
)

// MaxBodyBytes bounds a POST body before it is read. The largest legitimate
// request carries one 6 MiB envelope (measured in UTF-16 units of its JSON);
// 13 MiB leaves room for JSON escaping of that envelope plus the rest of the
// request. A larger body is refused with the protocol's own bad-request body
// (see bodyTooLarge) without being read.
const MaxBodyBytes = 13 << 20

// MaxPairBodyBytes bounds a pair request (start, poll or fixture), which is
// unauthenticated and whose start is kept for the code's ten minutes. A
// real daemon's start is its keys, its label and a few capabilities of
// some 300 bytes each: a few KiB. The store's own bound on a stored
// pairing (store.DefaultMaxPairingBytes) is this plus room for the codes
// and expiry the relay adds to what the start carried.
const MaxPairBodyBytes = 64 << 10

// clockResample is how often the default plane clock re-reads Valkey TIME to
// correct the local clock's offset.
const clockResample = 5 * time.Second

// Store is the part of *store.Store the planes use. It is declared here, at
// the consumer, so tests and other backends can stand in for it.
type Store interface {
	Now(ctx context.Context) (int64, error)
	Enqueue(ctx context.Context, in store.EnqueueInput) (store.Job, error)
	Jobs(ctx context.Context) ([]store.Job, error)
	PendingJobs(ctx context.Context, siteID string) ([]store.PendingJob, error)
	ResultJobs(ctx context.Context, siteID string) ([]*store.ResultJob, error)
	ClaimVerified(ctx context.Context, in store.ClaimInput) ([]store.ClaimedStub, bool, error)
	TakePayload(ctx context.Context, in store.HolderInput) (store.TakeResult, error)
	Complete(ctx context.Context, in store.CompleteInput) (store.CompleteResult, error)
	ReleaseLeases(ctx context.Context, in store.ReleaseInput) ([]string, error)
	Seal(ctx context.Context, siteID, jobID string, envelope json.RawMessage) (store.SealResult, error)
	Cancel(ctx context.Context, siteID, jobID string) (bool, error)
	CancelRequests(ctx context.Context, runnerID string) ([]protocol.GrantRef, error)
	Seen(ctx context.Context, p store.Presence) (store.Presence, error)
	Heartbeat(ctx context.Context, in store.HeartbeatInput) (store.HeartbeatResult, error)
	// PresenceHead is a presence record without the lists the runner
	// advertised: authentication needs only its owner and key set.
	PresenceHead(ctx context.Context, runnerID string) (*store.Presence, error)
	Everyone(ctx context.Context) ([]store.Presence, error)
	DropPresence(ctx context.Context, runnerID string) error
	Sweep(ctx context.Context) ([]store.Job, error)
	PutPairing(ctx context.Context, p store.PendingPairing) (store.PairingOutcome, error)
	PairingByDeviceCode(ctx context.Context, code string) (*store.PendingPairing, error)
	DropPairing(ctx context.Context, deviceCode string) error
	// GiveBack hands back the grants of a claim whose answer was lost
	// (store.UnansweredClaim); it is idempotent.
	GiveBack(ctx context.Context, u store.UnansweredClaim) ([]string, error)
	// AwaitPayload registers a fetch waiting for the seal of its grant;
	// once sealed, taken is the payload when the seal took it for the
	// fetch, else nil. ok false: a seal might go unheard, so do not wait.
	AwaitPayload(in store.HolderInput) (sealed <-chan struct{}, taken func() []byte, done func(), ok bool)
	// PayloadUnsealed: leaseID was granted here and no seal of it heard
	// since (ask after AwaitPayload); a fetch can wait before reading.
	PayloadUnsealed(leaseID string) bool
	// GrantAwaitsPayload: a plain read (no script) shows that a fetch of
	// in's grant would now be answered not-ready; false when in doubt.
	GrantAwaitsPayload(ctx context.Context, in store.HolderInput) bool
}

// ProjectionSource hands out the projection in force. Current returns nil
// until one has been loaded; the planes answer 503 not-ready until then.
// Fresh makes sure the latest stored version is in force (a read of its
// version, a load when newer) and returns it; the planes call it only
// before a refusal a newer projection could reverse.
type ProjectionSource interface {
	Current() *projection.Projection
	Fresh(ctx context.Context) (*projection.Projection, error)
}

// Config configures a Relay. Zero values take the reference defaults.
type Config struct {
	Store      Store
	Projection ProjectionSource
	// BasePath is where the daemon plane is mounted; trailing slashes are
	// stripped. Default "/byollm" (the real daemon hard-codes it).
	BasePath string
	// LeaseMs is the lease granted at claim and on renewal. Default 60000.
	LeaseMs int64
	// VerificationURL is where a human approves a device code. Empty turns
	// device-code start into 501, as in the reference.
	VerificationURL string
	// Debug serves the per-site /debug page.
	Debug bool
	// UpdateOffer is the version offered in heartbeat updateTo; DaemonFloor
	// the oldest daemon version served (426 below it). Empty means none.
	UpdateOffer, DaemonFloor string
	Logger                   *slog.Logger
	// Bodies is the request-body budget shared with the other listeners;
	// nil gives the planes one of their own (httpserve.DefaultBodyBytesInFlight).
	Bodies *httpserve.Budget
	// TrustedProxies are the networks whose X-Forwarded-For is believed
	// when the planes name a request's source address (the per-address
	// pairing limit). Empty: the connection's peer address is the source.
	TrustedProxies []netip.Prefix
	// StoreTimeout bounds the projection recheck's read. The store's own
	// calls are bounded by its runner (store.Options.CallTimeout, set from
	// the same setting), and a call past it is answered with the
	// retryable 503 server-error. Default DefaultStoreTimeout; negative
	// disables the bound (tests).
	StoreTimeout time.Duration
	// Grants is the grant authority (wire.md §14.1, §14.2). nil: claims
	// carry no grant and enqueue refuses nothing for satisfiability.
	Grants GrantAuthority
	// ControlPlanePublic is the grant-signing public key handed to devices
	// at pairing, verbatim. Setting it without Grants is refused, as the
	// reference refuses it at construction (§2).
	ControlPlanePublic string
	// GrantTimeout bounds each authority call (default
	// DefaultGrantTimeout); GrantBudget bounds all calls of one claim
	// together (default DefaultGrantBudget).
	GrantTimeout, GrantBudget time.Duration
	// GrantRetryAfter is how long a transiently declined job stays away
	// from the runner it was declined for (default DefaultGrantRetryAfter,
	// the reference's).
	GrantRetryAfter time.Duration
	// FetchWait (RELAY_FETCH_WAIT, default DefaultFetchWait in the relay's
	// configuration) is how long a fetch whose payload is not sealed yet waits
	// for the seal before answering not-ready (0: at once, as the
	// reference). The daemon asks again after a pause that doubles from
	// 50 ms to 1 s, so a wait saves it requests and answers it as soon as
	// the site seals.
	FetchWait time.Duration
	// Work, if set, is told what the planes' store calls meant (metrics,
	// the operations view's activity).
	Work WorkObserver
	// GrantObserver, if set, counts authority calls by outcome.
	GrantObserver GrantObserver
	// LeaseObserver, if set, counts claims whose answer was lost and how
	// many of their leases were given back.
	LeaseObserver LeaseObserver
	// Middleware runs around every request after its route is decided
	// (telemetry reads the route with telemetry.RouteOf).
	Middleware []echo.MiddlewareFunc
	// Clock is the plane clock in epoch ms (signature freshness, pairing
	// expiry, serverTime, retryAfter). Default: the local clock corrected by
	// its offset to Valkey TIME, re-sampled every few seconds via Store.Now,
	// so every replica reads (close to) the store's one clock.
	Clock func() int64
}

// Relay is a configured pair of planes. It is safe for concurrent use and
// keeps no state besides the clock offset, the grants it is giving back and
// the results answers in flight.
type Relay struct {
	store       Store
	projections ProjectionSource
	basePath    string
	leaseMs     int64
	verifyURL   string
	debug       bool
	updateOffer string
	floor       string
	log         *slog.Logger
	now         func() int64
	echo        *echo.Echo
	routes      map[string]endpoint
	presence    presenceChecks
	bodies      *httpserve.Budget
	proxies     []netip.Prefix
	// storeTimeout bounds the projection recheck's read (the store calls
	// are bounded by the store's runner); 0 leaves it to the request.
	storeTimeout time.Duration

	grants             GrantAuthority
	controlPlanePublic string
	grantTimeout       time.Duration
	grantBudget        time.Duration
	grantRetryAfter    time.Duration
	fetchWait          time.Duration
	grantObs           GrantObserver
	work               WorkObserver

	// returns gives back the grants of claims answered 503 after their
	// script may have run (giveback.go).
	returns *leaseReturns
	// answers counts each site's results answers in flight (answers.go).
	answers siteAnswers
}

// ErrControlPlaneWithoutAuthor is the reference's construction error (wire.md
// §2) for a control-plane key configured without a grant author.
var ErrControlPlaneWithoutAuthor = errors.New("controlPlanePublic is set but authorGrant is not: devices would be " +
	"told to expect signed grants that nothing here can produce, and " +
	"would refuse every job")

// DefaultStoreTimeout bounds each store call (RELAY_STORE_TIMEOUT). A
// healthy store answers in well under a millisecond; one that has not
// answered within half a second is stuck (frozen, failing over, swapping),
// and the request is better answered with the retryable 503 at once than
// held until the connection is declared dead many seconds later.
const DefaultStoreTimeout = 500 * time.Millisecond

// New validates cfg and builds a Relay.
func New(cfg Config) (*Relay, error) {
	if cfg.Store == nil {
		return nil, errors.New("relay: Config.Store is required")
	}
	if cfg.Projection == nil {
		return nil, errors.New("relay: Config.Projection is required")
	}
	if cfg.StoreTimeout == 0 {
		cfg.StoreTimeout = DefaultStoreTimeout
	}
	storeTimeout := max(cfg.StoreTimeout, 0)
	if cfg.ControlPlanePublic != "" && cfg.Grants == nil {
		return nil, ErrControlPlaneWithoutAuthor
	}
	if cfg.GrantTimeout <= 0 {
		cfg.GrantTimeout = DefaultGrantTimeout
	}
	if cfg.GrantBudget <= 0 {
		cfg.GrantBudget = DefaultGrantBudget
	}
	if cfg.GrantRetryAfter <= 0 {
		cfg.GrantRetryAfter = DefaultGrantRetryAfter
	}
	if cfg.LeaseMs < 0 {
		return nil, fmt.Errorf("relay: LeaseMs must be positive, got %d", cfg.LeaseMs)
	}
	r := &Relay{
		store:       cfg.Store,
		projections: cfg.Projection,
		basePath:    strings.TrimRight(cfg.BasePath, "/"),
		leaseMs:     cfg.LeaseMs,
		verifyURL:   cfg.VerificationURL,
		debug:       cfg.Debug,
		updateOffer: cfg.UpdateOffer,
		floor:       cfg.DaemonFloor,
		log:         cfg.Logger,
		now:         cfg.Clock,
		bodies:      cfg.Bodies,
		proxies:     cfg.TrustedProxies,

		storeTimeout: storeTimeout,

		grants:             cfg.Grants,
		controlPlanePublic: cfg.ControlPlanePublic,
		grantTimeout:       cfg.GrantTimeout,
		grantBudget:        cfg.GrantBudget,
		grantRetryAfter:    cfg.GrantRetryAfter,
		fetchWait:          max(cfg.FetchWait, 0),
		grantObs:           cfg.GrantObserver,
		work:               cfg.Work,
	}
	if r.work == nil {
		r.work = noWork{}
	}
	if r.bodies == nil {
		r.bodies = httpserve.NewBudget(0)
	}
	if cfg.BasePath == "" {
		r.basePath = DefaultBasePath
	}
	if r.leaseMs == 0 {
		r.leaseMs = DefaultLeaseMs
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.now == nil {
		r.now = newStoreClock(cfg.Store, r.log).now
	}
	r.returns = newLeaseReturns(r.store, r.log, cfg.LeaseObserver, r.leaseMs)
	r.routes = r.routeTable()
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = r.httpError
	// The route is decided first (route), so every later middleware
	// (telemetry) reads it; panics become the 500 server-error.
	e.Use(r.route)
	e.Use(cfg.Middleware...)
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{
		LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
			r.log.ErrorContext(c.Request().Context(), "relay: handler panic", "err", err, "path", c.Request().URL.Path, "stack", string(stack))
			return err
		},
	}))
	// One route for every path and method (see serve): Any covers the
	// methods echo knows, RouteNotFound on the same pattern every other
	// method, which echo's router would otherwise answer 405.
	e.Any("/*", r.serve)
	e.RouteNotFound("/*", r.serve)
	r.echo = e
	return r, nil
}

// Handler serves both planes and /debug.
func (r *Relay) Handler() http.Handler { return r.echo }

// Close ends the relay's background work once the planes serve no more
// requests: give-backs of lost claims under way may finish until ctx ends;
// what is left then is logged, and those leases lapse by themselves.
func (r *Relay) Close(ctx context.Context) { r.returns.close(ctx) }

// storeClock is the default plane clock: local time plus the last measured
// offset to the store's clock. Sampling is lazy and asynchronous so a request
// never waits on it, except the very first one.
type storeClock struct {
	st       Store
	log      *slog.Logger
	offset   atomic.Int64
	sampled  atomic.Int64 // local ms of the last sample attempt; 0 = never
	inflight atomic.Bool
	first    sync.Once
}

func newStoreClock(st Store, log *slog.Logger) *storeClock {
	return &storeClock{st: st, log: log}
}

func (c *storeClock) now() int64 {
	local := time.Now().UnixMilli()
	c.first.Do(func() { c.sample(local) })
	if local-c.sampled.Load() >= clockResample.Milliseconds() && c.inflight.CompareAndSwap(false, true) {
		go func() {
			defer c.inflight.Store(false)
			c.sample(time.Now().UnixMilli())
		}()
	}
	return local + c.offset.Load()
}

func (c *storeClock) sample(at int64) {
	c.sampled.Store(at)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	before := time.Now().UnixMilli()
	server, err := c.st.Now(ctx)
	if err != nil {
		c.log.Warn("plane clock: cannot read store clock; keeping last offset", "err", err)
		return
	}
	after := time.Now().UnixMilli()
	// Assume the server read TIME half way through the round trip.
	c.offset.Store(server - (before+after)/2)
}
