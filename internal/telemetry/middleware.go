package telemetry

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Planes a request can belong to.
const (
	PlaneDaemon = "daemon"
	PlaneSite   = "site"
	PlaneDebug  = "debug"
	PlaneAdmin  = "admin"
	PlaneNone   = "none"
)

// Caller kinds. A caller's id is never recorded, only which kind it claims.
const (
	CallerRunner    = "runner"
	CallerSite      = "site"
	CallerAnonymous = "anonymous"
)

// RouteUnmatched labels every request that reaches no handler, so unknown
// paths cannot inflate label cardinality.
const RouteUnmatched = "unmatched"

// Route is what a request is labelled with.
type Route struct {
	Name       string // a route template from a closed set, e.g. "/byollm/claim"
	Plane      string
	CallerKind string
}

// Classifier derives a request's route before the handler runs.
type Classifier func(r *http.Request) Route

var daemonEndpoints = map[string]bool{
	"pair": true, "claim": true, "fetch": true, "result": true, "heartbeat": true, "release": true,
}

var siteRoutes = map[string]bool{
	"/relay/site/enqueue": true, "/relay/site/payload": true, "/relay/site/cancel": true,
	"/relay/site/pending": true, "/relay/site/results": true,
}

// ProtocolRoutes classifies like the relay's dispatch (wire spec §3): /debug
// first, then the exact site paths, then the daemon endpoints by last segment
// under basePath. The route name of a daemon request is basePath + "/" +
// endpoint whatever segments sat in between, so labels stay bounded.
func ProtocolRoutes(basePath string) Classifier {
	basePath = strings.TrimRight(basePath, "/")
	return func(r *http.Request) Route {
		p := normalizePath(requestPath(r))
		switch {
		case p == "/debug" || p == basePath+"/debug":
			return Route{Name: "/debug", Plane: PlaneDebug, CallerKind: CallerAnonymous}
		case siteRoutes[p]:
			kind := CallerAnonymous
			if r.Header.Get("x-byollm-site") != "" {
				kind = CallerSite
			}
			return Route{Name: p, Plane: PlaneSite, CallerKind: kind}
		case strings.HasPrefix(p, basePath+"/"):
			ep := p[strings.LastIndexByte(p, '/')+1:]
			if !daemonEndpoints[ep] {
				break
			}
			kind := CallerAnonymous
			if ep != "pair" && r.Header.Get("x-byollm-runner") != "" {
				kind = CallerRunner
			}
			return Route{Name: basePath + "/" + ep, Plane: PlaneDaemon, CallerKind: kind}
		}
		return Route{Name: RouteUnmatched, Plane: PlaneNone, CallerKind: CallerAnonymous}
	}
}

// AdminRoutes classifies the admin listener: the exact paths given (and any
// path under one ending in "/") keep their name, everything else is unmatched.
func AdminRoutes(paths ...string) Classifier {
	exact := map[string]bool{}
	var prefixes []string
	for _, p := range paths {
		if strings.HasSuffix(p, "/") {
			prefixes = append(prefixes, p)
		} else {
			exact[p] = true
		}
	}
	return func(r *http.Request) Route {
		p := r.URL.Path
		if exact[p] {
			return Route{Name: p, Plane: PlaneAdmin, CallerKind: CallerAnonymous}
		}
		for _, pre := range prefixes {
			if strings.HasPrefix(p, pre) {
				return Route{Name: pre + "*", Plane: PlaneAdmin, CallerKind: CallerAnonymous}
			}
		}
		return Route{Name: RouteUnmatched, Plane: PlaneAdmin, CallerKind: CallerAnonymous}
	}
}

// requestPath is the path as the client sent it: RequestURI keeps a raw
// backslash (which WHATWG treats as a slash) apart from a sent %5C, which
// EscapedPath cannot.
func requestPath(r *http.Request) string {
	if u := r.RequestURI; strings.HasPrefix(u, "/") {
		if i := strings.IndexByte(u, '?'); i >= 0 {
			u = u[:i]
		}
		return u
	}
	return r.URL.EscapedPath()
}

// normalizePath applies what a WHATWG URL parser does to a pathname that
// matters for routing: backslashes are slashes and dot segments (including
// their %2e spellings) resolve. Percent-escapes otherwise stay as sent.
func normalizePath(p string) string {
	p = strings.ReplaceAll(p, `\`, "/")
	if !strings.Contains(p, ".") {
		return p
	}
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		last := i == len(segs)-1
		switch strings.ToLower(s) {
		case ".", "%2e":
			if last {
				out = append(out, "")
			}
		case "..", ".%2e", "%2e.", "%2e%2e":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	return "/" + strings.Join(out, "/")
}

type labelsKey struct{}

// SetRoute lets a handler correct the route its request is labelled with
// (it knows what it dispatched to). name must come from a closed set.
func SetRoute(ctx context.Context, name, plane string) {
	if l, ok := ctx.Value(labelsKey{}).(*Route); ok {
		l.Name, l.Plane = name, plane
	}
}

// SetCallerKind lets a handler record which kind of caller it authenticated.
func SetCallerKind(ctx context.Context, kind string) {
	if l, ok := ctx.Value(labelsKey{}).(*Route); ok {
		l.CallerKind = kind
	}
}

// MiddlewareConfig tunes HTTPMiddleware.
type MiddlewareConfig struct {
	// Classify derives the route; nil means ProtocolRoutes("/byollm").
	Classify Classifier
	// Logger, when set, gets one debug line per response with status >= 400
	// (route, plane, status, caller kind; never a body, header or id).
	Logger *slog.Logger
}

// HTTPMiddleware wraps a handler with a server span per request (parented by
// an incoming W3C traceparent) and the request count, latency and in-flight
// instruments.
func (t *Telemetry) HTTPMiddleware(cfg MiddlewareConfig) func(http.Handler) http.Handler {
	classify := cfg.Classify
	if classify == nil {
		classify = ProtocolRoutes("/byollm")
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			labels := classify(r)
			method := normalizeMethod(r.Method)

			ctx := t.propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			ctx, span := t.tracer.Start(ctx, method+" "+labels.Name,
				trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(
					attribute.String("http.request.method", method),
					attribute.String("http.route", labels.Name),
					attribute.String("relay.plane", labels.Plane),
				))
			ctx = context.WithValue(ctx, labelsKey{}, &labels)

			inflight := attribute.NewSet(attribute.String("plane", labels.Plane))
			t.metrics.activeRequests.Add(ctx, 1, withSet(inflight))
			defer t.metrics.activeRequests.Add(ctx, -1, withSet(inflight))

			sw := &statusWriter{ResponseWriter: w}
			next.ServeHTTP(sw, r.WithContext(ctx))
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			elapsed := time.Since(start)

			span.SetName(method + " " + labels.Name)
			span.SetAttributes(
				attribute.String("http.route", labels.Name),
				attribute.String("relay.plane", labels.Plane),
				attribute.String("relay.caller_kind", labels.CallerKind),
				attribute.Int("http.response.status_code", status),
			)
			if status >= 500 {
				span.SetStatus(codes.Error, http.StatusText(status))
			}
			t.metrics.recordRequest(ctx, attribute.NewSet(
				attribute.String("route", labels.Name),
				attribute.String("plane", labels.Plane),
				attribute.String("status", strconv.Itoa(status)),
			), elapsed)
			if cfg.Logger != nil && status >= 400 {
				cfg.Logger.DebugContext(ctx, "request refused",
					slog.String("route", labels.Name),
					slog.String("plane", labels.Plane),
					slog.Int("status", status),
					slog.String("caller_kind", labels.CallerKind),
					slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000),
				)
			}
			span.End()
		})
	}
}

func normalizeMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodHead,
		http.MethodOptions, http.MethodPatch, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
