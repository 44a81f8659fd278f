package telemetry

import (
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
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

// ContextKeyRoute is where a request's route is recorded in its echo
// context: the one place the handler chain's routing decision lives.
// Whoever routes the request stores it there (SetRoute) before Middleware
// runs (the planes' dispatcher, which routes as wire.md §3 says, not by
// echo's router); on listeners that route with echo's router nobody needs
// to, and the route is echo's own pattern (c.Path()).
const ContextKeyRoute = "telemetry.route"

// SetRoute records the route a request was dispatched to. Name must come
// from a closed set (bounded label cardinality).
func SetRoute(c echo.Context, r Route) { c.Set(ContextKeyRoute, r) }

// RouteOf returns the route SetRoute recorded, if any.
func RouteOf(c echo.Context) (Route, bool) {
	r, ok := c.Get(ContextKeyRoute).(Route)
	return r, ok
}

// MiddlewareConfig tunes Middleware.
type MiddlewareConfig struct {
	// Plane labels requests of a listener that routes with echo's router
	// (no route recorded by SetRoute); default PlaneNone.
	Plane string
	// Logger, when set, gets one debug line per response with status >= 400
	// (route, plane, status, caller kind; never a body, header or id).
	Logger *slog.Logger
}

// routeFor is the request's route: the one recorded with SetRoute, else
// echo's matched pattern. Catch-all and not-found patterns (ending "/*")
// and no match at all are RouteUnmatched, so unknown paths cannot inflate
// label cardinality.
func routeFor(c echo.Context, plane string) Route {
	if r, ok := RouteOf(c); ok {
		return r
	}
	name := c.Path()
	if name == "" || strings.HasSuffix(name, "/*") {
		name = RouteUnmatched
	}
	return Route{Name: name, Plane: plane, CallerKind: CallerAnonymous}
}

// Middleware gives each request a server span (parented by an incoming W3C
// traceparent) and the request count, latency and in-flight instruments,
// labelled with the route the handler chain decided (routeFor).
func (t *Telemetry) Middleware(cfg MiddlewareConfig) echo.MiddlewareFunc {
	plane := cfg.Plane
	if plane == "" {
		plane = PlaneNone
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			r := c.Request()
			labels := routeFor(c, plane)
			method := normalizeMethod(r.Method)

			// Without tracing the span would be a no-op that only carries
			// the incoming trace context (for log lines), which Extract has
			// put in ctx already; so skip starting it, and skip Extract too
			// when the request carries no context to extract.
			ctx := r.Context()
			if t.tracing || r.Header[headerTraceparent] != nil || r.Header[headerBaggage] != nil {
				ctx = t.propagator.Extract(ctx, propagation.HeaderCarrier(r.Header))
			}
			var span trace.Span
			if t.tracing {
				ctx, span = t.tracer.Start(ctx, method+" "+labels.Name,
					trace.WithSpanKind(trace.SpanKindServer),
					trace.WithAttributes(
						attribute.String("http.request.method", method),
						attribute.String("http.route", labels.Name),
						attribute.String("relay.plane", labels.Plane),
					))
			}
			if ctx != r.Context() {
				c.SetRequest(r.WithContext(ctx))
			}

			inflight := withSet(t.metrics.sets.plane(labels.Plane))
			t.metrics.activeRequests.Add(ctx, 1, inflight)
			defer t.metrics.activeRequests.Add(ctx, -1, inflight)

			if err := next(c); err != nil {
				// Have the error handler answer now, so the status it
				// writes is the one recorded.
				c.Error(err)
			}
			status := c.Response().Status
			if !c.Response().Committed {
				status = http.StatusOK
			}
			elapsed := time.Since(start)
			// A handler may have refined the route (e.g. the caller kind).
			labels = routeFor(c, plane)

			if span != nil {
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
			}
			t.metrics.recordRequestWith(ctx, t.metrics.sets.request(labels.Name, labels.Plane, status), elapsed)
			if cfg.Logger != nil && status >= 400 {
				cfg.Logger.DebugContext(ctx, "request refused",
					slog.String("route", labels.Name),
					slog.String("plane", labels.Plane),
					slog.Int("status", status),
					slog.String("caller_kind", labels.CallerKind),
					slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000),
				)
			}
			if span != nil {
				span.End()
			}
			return nil
		}
	}
}

// The W3C headers Extract reads, in Go's canonical spelling.
const (
	headerTraceparent = "Traceparent"
	headerBaggage     = "Baggage"
)

// attrSets hands out the metric attribute sets of requests and store
// scripts, each built once: the labels come from closed sets (routes,
// planes, statuses, script names), and building a set sorts and hashes its
// attributes, which on every request cost more than recording it.
type attrSets struct {
	planes   sync.Map // plane -> metric.MeasurementOption
	requests sync.Map // requestLabels -> metric.MeasurementOption
	scripts  sync.Map // scriptLabels -> metric.MeasurementOption
}

type requestLabels struct {
	route, plane string
	status       int
}

type scriptLabels struct{ script, outcome string }

func (a *attrSets) plane(plane string) attribute.Set {
	if v, ok := a.planes.Load(plane); ok {
		return v.(attribute.Set)
	}
	s := attribute.NewSet(attribute.String("plane", plane))
	a.planes.Store(plane, s)
	return s
}

func (a *attrSets) request(route, plane string, status int) metric.MeasurementOption {
	k := requestLabels{route, plane, status}
	if v, ok := a.requests.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	o := metric.WithAttributeSet(attribute.NewSet(
		attribute.String("route", route),
		attribute.String("plane", plane),
		attribute.String("status", strconv.Itoa(status)),
	))
	a.requests.Store(k, o)
	return o
}

func (a *attrSets) script(script, outcome string) metric.MeasurementOption {
	k := scriptLabels{script, outcome}
	if v, ok := a.scripts.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	o := metric.WithAttributeSet(attribute.NewSet(attribute.String("script", script), attribute.String("outcome", outcome)))
	a.scripts.Store(k, o)
	return o
}

func normalizeMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodHead,
		http.MethodOptions, http.MethodPatch, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "_OTHER"
}
