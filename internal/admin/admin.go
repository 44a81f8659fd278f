// Package admin serves the relay's admin listener: a separate address
// (loopback by default) for operators and the control plane, never for
// daemons or sites.
//
// The listener is an echo app: routes on echo's router, and echo middleware
// for what every route shares: Options.Middleware (telemetry), recovery
// (a panic is a 500 {"error":"server-error"}), one debug log line per
// request, and the token check. Every route is behind a bearer token taken
// from the environment (RELAY_ADMIN_TOKEN), compared in constant time.
// Without a configured token the listener refuses every authenticated
// route, so forgetting the token fails closed. Routes that must answer
// without a token (health probes) are registered explicitly with
// HandleOpen. Write routes read their body through the bodyLimit
// middleware, charged to the body budget shared with the planes
// (internal/httpserve).
//
// The projection routes mirror the reference host (test/reference/server.mjs)
// so tools drive both relays the same way:
//
//	GET  /projection         the stored RelayFixture (version in X-Projection-Version)
//	PUT  /projection         replace it with the body (a whole RelayFixture)
//	POST /projection/merge   upsert the body's records into it
//	GET  /projection/status  stored version and this replica's version in force
//	GET  /placement[?sites=1] sites per shard and per primary (and each site's shard)
//	DELETE /projection/approved/{runnerId}  forget a device approved by code
//
// The pairing routes (pairing.go) approve a device by the user code its
// person reads off the daemon:
//
//	GET  /pairings/{userCode}          the live pending pairing (404 otherwise)
//	POST /pairings/{userCode}/approve  {"owner", "runnerId"?}: approve it
//	POST /pairings/{userCode}/deny     drop it
//
// The policy routes (internal/policy; the built-in grant engine's policy):
//
//	GET  /policy             the stored policy (version in X-Policy-Version)
//	PUT  /policy             replace it with the body (a whole policy document)
//	POST /policy/merge       upsert the body's entries, withdraw its "revoke" list
//	GET  /policy/status      version, and where the policy and the projection disagree
//
// Go's runtime profiles (pprof.go), behind the token like everything else:
//
//	GET  /debug/pprof/...    net/http/pprof (profile, heap, allocs, goroutine, trace, ...)
package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/byollm/relay-go/internal/httpserve"
	"github.com/byollm/relay-go/internal/projectionsync"
	"github.com/byollm/relay-go/internal/store"
)

// DefaultMaxBody caps request bodies when Options.MaxBody is zero.
const DefaultMaxBody = 16 << 20

// Projections is the projection store the admin routes drive; the relay
// passes its *projectionsync.Sync.
type Projections interface {
	Get(ctx context.Context) (projectionsync.Document, error)
	Replace(ctx context.Context, raw []byte) (projectionsync.Result, error)
	Merge(ctx context.Context, patch []byte) (projectionsync.Result, error)
	State() projectionsync.State
	Unapprove(ctx context.Context, runnerID string) (bool, int64, error)
}

// Placement reports how sites are placed on shards (store.Store).
type Placement interface {
	Placement(ctx context.Context, withSites bool) (store.PlacementReport, error)
}

// Options configures the admin server.
type Options struct {
	// Token is the bearer token; "" refuses every authenticated route.
	Token string
	// Projections backs the /projection routes; nil leaves them out.
	Projections Projections
	// Pairings backs the /pairings routes; nil leaves them out.
	Pairings Pairings
	// Policies backs the /policy routes (the built-in grant engine's
	// policy); nil leaves them out.
	Policies Policies
	// Placement backs GET /placement (which shard and primary each site
	// is on); nil leaves it out. The relay passes its *store.Store.
	Placement Placement
	// MaxBody caps request bodies in bytes; default DefaultMaxBody.
	MaxBody int64
	// Bodies is the request-body budget shared with the planes; nil gives
	// the admin listener one of its own.
	Bodies *httpserve.Budget
	// StoreTimeout bounds each store call of the pairing, policy and
	// placement routes (config RELAY_STORE_TIMEOUT, as the planes); 0
	// leaves them unbounded. The projection's calls (projectionsync, also
	// those an approval makes) are bounded per call through the request's
	// context (projectionsync.WithStoreTimeout).
	StoreTimeout time.Duration
	Logger       *slog.Logger
	// Middleware runs around every request, outermost (telemetry).
	Middleware []echo.MiddlewareFunc
}

// Server is the admin handler. Add routes with Handle or HandleOpen before
// serving; it is an http.Handler.
type Server struct {
	tokenSum [sha256.Size]byte
	hasToken bool
	maxBody  int64
	bodies   *httpserve.Budget
	proj     Projections
	pol      Policies
	log      *slog.Logger
	echo     *echo.Echo
	// open holds the "METHOD /path" of the routes that answer without a
	// token (the token middleware skips them).
	open map[string]bool
}

// New builds the admin server with the projection routes registered.
func New(opts Options) *Server {
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Bodies == nil {
		opts.Bodies = httpserve.NewBudget(0)
	}
	if d := opts.StoreTimeout; d > 0 {
		if opts.Pairings != nil {
			opts.Pairings = timedPairings{p: opts.Pairings, d: d}
		}
		if opts.Policies != nil {
			opts.Policies = timedPolicies{p: opts.Policies, d: d}
		}
		if opts.Placement != nil {
			opts.Placement = timedPlacement{p: opts.Placement, d: d}
		}
	}
	s := &Server{
		hasToken: opts.Token != "",
		// Comparing digests keeps the comparison constant-time even in
		// length, which subtle.ConstantTimeCompare alone is not.
		tokenSum: sha256.Sum256([]byte(opts.Token)),
		maxBody:  opts.MaxBody,
		bodies:   opts.Bodies,
		proj:     opts.Projections,
		pol:      opts.Policies,
		log:      opts.Logger.With(slog.String("component", "admin")),
		open:     map[string]bool{},
	}
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = s.httpError
	e.Use(opts.Middleware...)
	if d := opts.StoreTimeout; d > 0 {
		e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error {
				r := c.Request()
				c.SetRequest(r.WithContext(projectionsync.WithStoreTimeout(r.Context(), d)))
				return next(c)
			}
		})
	}
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{
		LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
			s.log.ErrorContext(c.Request().Context(), "admin: handler panic", slog.Any("err", err), slog.String("stack", string(stack)))
			return err
		},
	}))
	e.Use(middleware.RequestLoggerWithConfig(middleware.RequestLoggerConfig{
		LogMethod: true, LogRoutePath: true, LogStatus: true, LogLatency: true, LogRemoteIP: true,
		LogValuesFunc: func(c echo.Context, v middleware.RequestLoggerValues) error {
			// Never the path itself: it may hold a user code.
			s.log.DebugContext(c.Request().Context(), "admin request", slog.String("method", v.Method),
				slog.String("route", v.RoutePath), slog.Int("status", v.Status), slog.Duration("took", v.Latency),
				slog.String("remote", c.Request().RemoteAddr))
			return nil
		},
	}))
	// The token is checked before routing decides anything but which open
	// route this is: without the token, an unknown path or a wrong method
	// is 401, like every other request, and reveals no route.
	e.Use(s.requireToken)
	s.echo = e
	s.registerPprof()
	if s.proj != nil {
		e.GET("/projection", s.getProjection)
		e.PUT("/projection", s.putProjection, s.bodyLimit(s.maxBody, tooLarge(s.maxBody)))
		e.POST("/projection/merge", s.mergeProjection, s.bodyLimit(s.maxBody, tooLarge(s.maxBody)))
		e.GET("/projection/status", s.projectionStatus)
		e.DELETE("/projection/approved/:runnerId", s.unapprove)
	}
	if opts.Pairings != nil {
		s.registerPairings(opts.Pairings)
	}
	if pl := opts.Placement; pl != nil {
		// Read-only: a placement is written once by the store and no
		// route moves it.
		e.GET("/placement", func(c echo.Context) error {
			rep, err := pl.Placement(c.Request().Context(), c.QueryParam("sites") == "1")
			if err != nil {
				return s.storeFailed(c, err)
			}
			return writeJSON(c, http.StatusOK, rep)
		})
	}
	if s.pol != nil {
		e.GET("/policy", s.getPolicy)
		e.PUT("/policy", s.putPolicy, s.bodyLimit(s.maxBody, tooLarge(s.maxBody)))
		e.POST("/policy/merge", s.mergePolicy, s.bodyLimit(s.maxBody, tooLarge(s.maxBody)))
		e.GET("/policy/status", s.policyStatus)
	}
	return s
}

// Handle registers a route behind the token.
func (s *Server) Handle(method, path string, h http.Handler) {
	s.echo.Add(method, path, echo.WrapHandler(h))
}

// HandleOpen registers a route that answers without a token, for probes
// such as /healthz that carry nothing secret.
func (s *Server) HandleOpen(method, path string, h http.Handler) {
	s.open[method+" "+path] = true
	s.echo.Add(method, path, echo.WrapHandler(h))
}

// TokenConfigured reports whether authenticated routes can ever succeed.
func (s *Server) TokenConfigured() bool { return s.hasToken }

// ServeHTTP serves the admin routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.echo.ServeHTTP(w, r) }

// requireToken answers 401 unless the request carries the token or is for
// an open route (its method and echo's matched pattern).
func (s *Server) requireToken(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.open[c.Request().Method+" "+c.Path()] {
			return next(c)
		}
		if !s.hasToken {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="relay-admin"`)
			return writeJSON(c, http.StatusUnauthorized, errorBody{Error: "unauthorized",
				Message: "admin is disabled: RELAY_ADMIN_TOKEN is not set on this relay"})
		}
		if !s.authorized(c.Request().Header.Values("Authorization")) {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="relay-admin"`)
			return writeJSON(c, http.StatusUnauthorized, errorBody{Error: "unauthorized", Message: "admin token required"})
		}
		return next(c)
	}
}

// httpError answers, in JSON like every route, what echo's router and the
// recovery middleware hand on: 404 (no route), 405 (with echo's Allow
// header), anything else a 500.
func (s *Server) httpError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		switch he.Code {
		case http.StatusNotFound:
			_ = writeJSON(c, http.StatusNotFound, errorBody{Error: "not-found"})
			return
		case http.StatusMethodNotAllowed:
			_ = writeJSON(c, http.StatusMethodNotAllowed, errorBody{Error: "method-not-allowed"})
			return
		}
	}
	// A panic was logged by Recover (with its stack); anything else here is
	// a write to a client that went away.
	_ = writeJSON(c, http.StatusInternalServerError, errorBody{Error: "server-error", Message: "the admin listener failed to handle this request"})
}

// bodyKey is where bodyLimit leaves the request body for the handler.
const bodyKey = "admin.body"

// refusal is a status and body to answer with.
type refusal struct {
	status int
	body   errorBody
}

func tooLarge(limit int64) refusal {
	return refusal{http.StatusRequestEntityTooLarge, errorBody{Error: "too-large",
		Message: fmt.Sprintf("body exceeds %d bytes (raise RELAY_ADMIN_MAX_BODY to accept more)", limit)}}
}

// bodyLimit reads the request body, at most limit bytes, through the body
// budget shared with the planes, and hands it to the handler (body); the
// budget is released when the handler returns. A body over the limit is
// refused with overLimit, one the budget cannot hold now with a retryable
// 503, one that cannot be read with a 400.
func (s *Server) bodyLimit(limit int64, overLimit refusal) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			body, err := s.bodies.ReadRequest(r, limit)
			defer body.Release()
			raw := body.Data
			switch {
			case errors.Is(err, httpserve.ErrTooLarge):
				return writeJSON(c, overLimit.status, overLimit.body)
			case errors.Is(err, httpserve.ErrBusy):
				return writeJSON(c, http.StatusServiceUnavailable, errorBody{Error: "unavailable",
					Message: "the relay is reading as many request bodies as RELAY_BODY_BYTES_IN_FLIGHT allows; try again shortly"})
			case err != nil:
				return writeJSON(c, http.StatusBadRequest, errorBody{Error: "bad-request", Message: "cannot read body: " + err.Error()})
			}
			c.Set(bodyKey, raw)
			return next(c)
		}
	}
}

// param is a path parameter, unescaped as net/http's PathValue does: echo
// matches on the escaped path when there is one (URL.RawPath) and hands
// its parameters on escaped.
func param(c echo.Context, name string) string {
	v := c.Param(name)
	if c.Request().URL.RawPath == "" {
		return v
	}
	if u, err := url.PathUnescape(v); err == nil {
		return u
	}
	return v
}

// body is the request body bodyLimit read.
func body(c echo.Context) []byte {
	b, _ := c.Get(bodyKey).([]byte)
	return b
}

// authorized checks the request's one Authorization header: the scheme
// "Bearer" in any case (RFC 9110 §11.1: schemes are case-insensitive), one
// or more spaces (RFC 6750 §2.1: "Bearer" 1*SP b64token), then exactly the
// token, compared by digest in constant time. Several Authorization headers,
// another scheme, a tab, an empty token or any other token are refused.
func (s *Server) authorized(values []string) bool {
	if len(values) != 1 {
		return false
	}
	scheme, token, found := strings.Cut(values[0], " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	token = strings.TrimLeft(token, " ")
	if token == "" {
		return false
	}
	got := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(got[:], s.tokenSum[:]) == 1
}

type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message,omitempty"`
}

func (s *Server) getProjection(c echo.Context) error {
	doc, err := s.proj.Get(c.Request().Context())
	if err != nil {
		return s.storeFailed(c, err)
	}
	h := c.Response().Header()
	h.Set("X-Projection-Version", strconv.FormatInt(doc.Version, 10))
	h.Set("X-Projection-Updated-At", strconv.FormatInt(doc.UpdatedAt, 10))
	// How many of the devices are approved by code rather than the document's.
	h.Set("X-Projection-Approved", strconv.Itoa(doc.Approved))
	return c.Blob(http.StatusOK, "application/json", doc.JSON)
}

type statusBody struct {
	Version   int64         `json:"version"`
	UpdatedAt int64         `json:"updatedAt"`
	Replica   replicaStatus `json:"replica"`
}

type replicaStatus struct {
	Loaded   bool   `json:"loaded"`
	Version  int64  `json:"version"`
	LoadedAt *int64 `json:"loadedAt,omitempty"`
}

func (s *Server) projectionStatus(c echo.Context) error {
	doc, err := s.proj.Get(c.Request().Context())
	if err != nil {
		return s.storeFailed(c, err)
	}
	st := s.proj.State()
	body := statusBody{Version: doc.Version, UpdatedAt: doc.UpdatedAt,
		Replica: replicaStatus{Loaded: st.Loaded, Version: st.Version}}
	if st.Loaded {
		ms := st.LoadedAt.UnixMilli()
		body.Replica.LoadedAt = &ms
	}
	return writeJSON(c, http.StatusOK, body)
}

func (s *Server) putProjection(c echo.Context) error {
	return s.write(c, "replace", s.proj.Replace)
}

func (s *Server) mergeProjection(c echo.Context) error {
	return s.write(c, "merge", s.proj.Merge)
}

func (s *Server) write(c echo.Context, op string, apply func(context.Context, []byte) (projectionsync.Result, error)) error {
	r := c.Request()
	start := time.Now()
	// A key named twice is refused before the document is read, as the
	// other admin documents are (projectionsync.UniqueKeys says why here).
	if err := projectionsync.UniqueKeys(body(c)); err != nil {
		s.log.Warn("projection "+op+" refused; the projection in force is unchanged",
			slog.String("remote", r.RemoteAddr), slog.String("reason", err.Error()))
		return writeJSON(c, http.StatusBadRequest, errorBody{Error: "bad-request", Message: err.Error()})
	}
	res, err := apply(r.Context(), body(c))
	var invalid *projectionsync.InvalidError
	switch {
	case errors.As(err, &invalid):
		s.log.Warn("projection "+op+" refused; the projection in force is unchanged",
			slog.String("remote", r.RemoteAddr), slog.String("reason", invalid.Error()))
		return writeJSON(c, http.StatusBadRequest, errorBody{Error: "bad-request", Message: invalid.Error()})
	case errors.Is(err, projectionsync.ErrConflict):
		return writeJSON(c, http.StatusConflict, errorBody{Error: "conflict", Message: err.Error()})
	case err != nil:
		return s.storeFailed(c, err)
	}
	s.log.Info("projection "+op, slog.String("remote", r.RemoteAddr), slog.Int64("version", res.Version),
		slog.Bool("changed", res.Changed), slog.Duration("took", time.Since(start)))
	return writeJSON(c, http.StatusOK, res)
}

// storeFailed answers an error of the store behind a route by whose fault
// it is (store.Classify): Valkey cannot answer now, the retryable 503
// {"error":"unavailable"}; anything else is a bug here, a 500
// {"error":"server-error"} and an error-level log line.
func (s *Server) storeFailed(c echo.Context, err error) error {
	if store.Classify(err) == store.ClassUnavailable {
		s.log.WarnContext(c.Request().Context(), "admin request failed: the store is unavailable", slog.String("route", c.Path()), slog.Any("err", err))
		return writeJSON(c, http.StatusServiceUnavailable, errorBody{Error: "unavailable", Message: err.Error()})
	}
	s.log.ErrorContext(c.Request().Context(), "admin request failed", slog.String("route", c.Path()), slog.Any("err", err))
	return writeJSON(c, http.StatusInternalServerError, errorBody{Error: "server-error", Message: err.Error()})
}

func writeJSON(c echo.Context, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"server-error"}`)
	}
	return c.Blob(status, "application/json", b)
}
