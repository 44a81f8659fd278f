// Package admin serves the relay's admin listener: a separate address
// (loopback by default) for operators and the control plane, never for
// daemons or sites.
//
// Every route is behind a bearer token taken from the environment
// (RELAY_ADMIN_TOKEN), compared in constant time. Without a configured token
// the listener refuses every authenticated route, so forgetting the token
// fails closed. Routes that must answer without a token (health probes) are
// registered explicitly with HandleOpen.
//
// The projection routes mirror the reference host (test/reference/server.mjs)
// so tools drive both relays the same way:
//
//	GET  /projection         the stored RelayFixture (version in X-Projection-Version)
//	PUT  /projection         replace it with the body (a whole RelayFixture)
//	POST /projection/merge   upsert the body's records into it
//	GET  /projection/status  stored version and this replica's version in force
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
	"strconv"
	"strings"
	"time"

	"github.com/byollm/relay-go/internal/httpserve"
	"github.com/byollm/relay-go/internal/projectionsync"
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
	// MaxBody caps request bodies in bytes; default DefaultMaxBody.
	MaxBody int64
	// Bodies is the request-body budget shared with the planes; nil gives
	// the admin listener one of its own.
	Bodies *httpserve.Budget
	Logger *slog.Logger
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
	open     *http.ServeMux
	authed   *http.ServeMux
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
		open:     http.NewServeMux(),
		authed:   http.NewServeMux(),
	}
	if s.proj != nil {
		s.authed.HandleFunc("GET /projection", s.getProjection)
		s.authed.HandleFunc("PUT /projection", s.putProjection)
		s.authed.HandleFunc("POST /projection/merge", s.mergeProjection)
		s.authed.HandleFunc("GET /projection/status", s.projectionStatus)
		s.authed.HandleFunc("DELETE /projection/approved/{runnerId}", s.unapprove)
	}
	if opts.Pairings != nil {
		s.registerPairings(opts.Pairings)
	}
	if s.pol != nil {
		s.authed.HandleFunc("GET /policy", s.getPolicy)
		s.authed.HandleFunc("PUT /policy", s.putPolicy)
		s.authed.HandleFunc("POST /policy/merge", s.mergePolicy)
		s.authed.HandleFunc("GET /policy/status", s.policyStatus)
	}
	return s
}

// Handle registers a route behind the token (ServeMux pattern syntax, e.g.
// "GET /metrics").
func (s *Server) Handle(pattern string, h http.Handler) { s.authed.Handle(pattern, h) }

// HandleOpen registers a route that answers without a token, for probes
// such as /healthz that carry nothing secret.
func (s *Server) HandleOpen(pattern string, h http.Handler) { s.open.Handle(pattern, h) }

// TokenConfigured reports whether authenticated routes can ever succeed.
func (s *Server) TokenConfigured() bool { return s.hasToken }

// ServeHTTP dispatches: open routes first, then the token check, then the
// authenticated routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h, pattern := s.open.Handler(r); pattern != "" {
		h.ServeHTTP(w, r)
		return
	}
	if !s.hasToken {
		w.Header().Set("WWW-Authenticate", `Bearer realm="relay-admin"`)
		writeJSON(w, http.StatusUnauthorized, errorBody{Error: "unauthorized",
			Message: "admin is disabled: RELAY_ADMIN_TOKEN is not set on this relay"})
		return
	}
	if !s.authorized(r.Header.Values("Authorization")) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="relay-admin"`)
		writeJSON(w, http.StatusUnauthorized, errorBody{Error: "unauthorized", Message: "admin token required"})
		return
	}
	h, pattern := s.authed.Handler(r)
	if pattern == "" {
		// ServeMux's own 404/405 answers are plain text; keep its status
		// and Allow header but answer in JSON like every other route.
		probe := &statusProbe{header: http.Header{}}
		h.ServeHTTP(probe, r)
		if allow := probe.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		if probe.status == http.StatusMethodNotAllowed {
			writeJSON(w, probe.status, errorBody{Error: "method-not-allowed"})
			return
		}
		writeJSON(w, http.StatusNotFound, errorBody{Error: "not-found"})
		return
	}
	// Through the mux, not h: only ServeMux.ServeHTTP sets the request's
	// path values ({userCode}).
	s.authed.ServeHTTP(w, r)
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

func (s *Server) getProjection(w http.ResponseWriter, r *http.Request) {
	doc, err := s.proj.Get(r.Context())
	if err != nil {
		s.unavailable(w, r, err)
		return
	}
	w.Header().Set("X-Projection-Version", strconv.FormatInt(doc.Version, 10))
	w.Header().Set("X-Projection-Updated-At", strconv.FormatInt(doc.UpdatedAt, 10))
	// How many of the devices are approved by code rather than the document's.
	w.Header().Set("X-Projection-Approved", strconv.Itoa(doc.Approved))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(doc.JSON) //nolint:errcheck // the client went away; nothing to do
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

func (s *Server) projectionStatus(w http.ResponseWriter, r *http.Request) {
	doc, err := s.proj.Get(r.Context())
	if err != nil {
		s.unavailable(w, r, err)
		return
	}
	st := s.proj.State()
	body := statusBody{Version: doc.Version, UpdatedAt: doc.UpdatedAt,
		Replica: replicaStatus{Loaded: st.Loaded, Version: st.Version}}
	if st.Loaded {
		ms := st.LoadedAt.UnixMilli()
		body.Replica.LoadedAt = &ms
	}
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) putProjection(w http.ResponseWriter, r *http.Request) {
	s.write(w, r, "replace", s.proj.Replace)
}

func (s *Server) mergeProjection(w http.ResponseWriter, r *http.Request) {
	s.write(w, r, "merge", s.proj.Merge)
}

func (s *Server) write(w http.ResponseWriter, r *http.Request, op string, apply func(context.Context, []byte) (projectionsync.Result, error)) {
	body, release, err := s.bodies.ReadAll(r.Body, r.ContentLength, s.maxBody)
	defer release()
	switch {
	case errors.Is(err, httpserve.ErrTooLarge):
		writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{Error: "too-large",
			Message: fmt.Sprintf("body exceeds %d bytes (raise RELAY_ADMIN_MAX_BODY to accept more)", s.maxBody)})
		return
	case errors.Is(err, httpserve.ErrBusy):
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: "unavailable",
			Message: "the relay is reading as many request bodies as RELAY_BODY_BYTES_IN_FLIGHT allows; try again shortly"})
		return
	case err != nil:
		writeJSON(w, http.StatusBadRequest, errorBody{Error: "bad-request", Message: "cannot read body: " + err.Error()})
		return
	}
	start := time.Now()
	res, err := apply(r.Context(), body)
	var invalid *projectionsync.InvalidError
	switch {
	case errors.As(err, &invalid):
		s.log.Warn("projection "+op+" refused; the projection in force is unchanged",
			slog.String("remote", r.RemoteAddr), slog.String("reason", invalid.Error()))
		writeJSON(w, http.StatusBadRequest, errorBody{Error: "bad-request", Message: invalid.Error()})
	case errors.Is(err, projectionsync.ErrConflict):
		writeJSON(w, http.StatusConflict, errorBody{Error: "conflict", Message: err.Error()})
	case err != nil:
		s.unavailable(w, r, err)
	default:
		s.log.Info("projection "+op, slog.String("remote", r.RemoteAddr), slog.Int64("version", res.Version),
			slog.Bool("changed", res.Changed), slog.Duration("took", time.Since(start)))
		writeJSON(w, http.StatusOK, res)
	}
}

func (s *Server) unavailable(w http.ResponseWriter, r *http.Request, err error) {
	s.log.Error("admin request failed", slog.String("path", r.URL.Path), slog.Any("err", err))
	writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: "unavailable", Message: err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"server-error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b) //nolint:errcheck // the client went away; nothing to do
}

// statusProbe records what ServeMux's fallback handler would answer.
type statusProbe struct {
	header http.Header
	status int
}

func (p *statusProbe) Header() http.Header         { return p.header }
func (p *statusProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *statusProbe) WriteHeader(code int)        { p.status = code }
