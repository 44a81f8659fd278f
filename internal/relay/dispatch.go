package relay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/byollm/relay-go/internal/httpserve"
	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/internal/telemetry"
)

// request is what a handler sees of one HTTP request, already normalised the
// way the reference's WHATWG Request does it.
type request struct {
	ctx      context.Context
	path     string     // WHATWG pathname: escapes kept, dot segments resolved
	endpoint string     // text after the last '/'
	query    url.Values // URLSearchParams of the raw query
	header   http.Header
	hr       *http.Request
	rawBody  []byte // BOM-stripped, invalid UTF-8 replaced; empty unless POST
	body     any    // JSON.parse(rawBody), nil when absent or invalid
	proj     *projection.Projection
}

const sitePrefix = "/relay/site/"

// handler is one endpoint of the planes.
type handler func(*Relay, *request) (reply, error)

// endpoint is one row of the planes' routing table.
type endpoint struct {
	plane string
	h     handler
}

// routes is the planes' one routing table, keyed by route name: the name
// telemetry labels a request with is the key its handler is found under.
// Site routes are exact paths; daemon routes are basePath + "/" + the
// endpoint, found by the path's last segment (see routeOf).
func (r *Relay) routeTable() map[string]endpoint {
	t := map[string]endpoint{"/debug": {telemetry.PlaneDebug, (*Relay).debugPage}}
	for name, h := range map[string]handler{
		"enqueue": (*Relay).enqueue, "payload": (*Relay).payload, "cancel": (*Relay).cancel,
		"pending": (*Relay).pending, "results": (*Relay).results,
	} {
		t[sitePrefix+name] = endpoint{telemetry.PlaneSite, h}
	}
	for name, h := range map[string]handler{
		"pair": (*Relay).pair, "claim": (*Relay).claim, "fetch": (*Relay).fetch,
		"result": (*Relay).result, "heartbeat": (*Relay).heartbeat, "release": (*Relay).release,
	} {
		t[r.basePath+"/"+name] = endpoint{telemetry.PlaneDaemon, h}
	}
	return t
}

var unmatched = telemetry.Route{Name: telemetry.RouteUnmatched, Plane: telemetry.PlaneNone, CallerKind: telemetry.CallerAnonymous}

// routeOf decides which route a request path belongs to, as the
// reference's dispatch does (wire.md §3): /debug (at the root or under
// basePath) first, then the exact site paths, then the daemon endpoints by
// the last path segment under basePath, whatever segments sit in between.
// The caller kind is what the request claims to be (never its id).
func (r *Relay) routeOf(path string, h http.Header) telemetry.Route {
	if path == "/debug" || path == r.basePath+"/debug" {
		return telemetry.Route{Name: "/debug", Plane: telemetry.PlaneDebug, CallerKind: telemetry.CallerAnonymous}
	}
	if ep, ok := r.routes[path]; ok && ep.plane == telemetry.PlaneSite {
		kind := telemetry.CallerAnonymous
		if h.Get(protocol.HeaderSite) != "" {
			kind = telemetry.CallerSite
		}
		return telemetry.Route{Name: path, Plane: telemetry.PlaneSite, CallerKind: kind}
	}
	if strings.HasPrefix(path, r.basePath+"/") {
		name := r.basePath + path[strings.LastIndexByte(path, '/'):]
		if ep, ok := r.routes[name]; ok && ep.plane == telemetry.PlaneDaemon {
			kind := telemetry.CallerAnonymous
			if name != r.basePath+"/pair" && h.Get(protocol.HeaderRunner) != "" {
				kind = telemetry.CallerRunner
			}
			return telemetry.Route{Name: name, Plane: telemetry.PlaneDaemon, CallerKind: kind}
		}
	}
	return unmatched
}

// pathKey is where route keeps the request's WHATWG pathname for serve.
const pathKey = "relay.pathname"

// route is the planes' first middleware: it decides the request's route
// once, and records it where telemetry and serve both read it.
func (r *Relay) route(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		path := pathname(c.Request())
		c.Set(pathKey, path)
		telemetry.SetRoute(c, r.routeOf(path, c.Request().Header))
		return next(c)
	}
}

// serve is the planes' one echo route. The planes cannot use echo's router:
// the reference dispatches by the last path segment under basePath
// (/byollm/a/b/claim is claim), never checks the method (Fetch accepts
// "post" for POST, and GET /byollm/claim is routed like POST), resolves dot
// segments in their %2e spellings and keeps other escapes (WHATWG URL
// pathname, see pathname), and orders debug, body, version handshake and
// routing as wire.md §3 says, so a bad body or version is refused before
// an unknown endpoint is. serve runs that dispatch on the route recorded
// by route.
func (r *Relay) serve(c echo.Context) error {
	ctx, written := withAfterWrite(c.Request().Context())
	defer written()
	hr := c.Request().WithContext(ctx)
	rt, _ := telemetry.RouteOf(c)
	path, _ := c.Get(pathKey).(string)
	rep, err := r.dispatch(hr, path, rt.Name)
	if err != nil {
		rep = r.failure(hr, err)
	}
	return r.write(c, rep)
}

// httpError answers what reaches echo's error handler: a panic recovered by
// the Recover middleware (500 server-error), or a request echo's router
// matched to nothing (a target that is not a path, such as "OPTIONS *"),
// which the dispatch would answer 404.
func (r *Relay) httpError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var he *echo.HTTPError
	if errors.As(err, &he) && he.Code == http.StatusNotFound {
		_ = r.write(c, notFoundBare)
		return
	}
	// A panic was logged by Recover (with its stack); anything else here is
	// a write to a client that went away.
	_ = r.write(c, serverFailure)
}

// failure answers a handler error by whose fault it is (store.Classify,
// the one place that decides): the client's input broke a store limit, the
// store cannot answer now (retryable), or the relay itself is wrong (a
// reply it does not understand, a broken invariant), which no retry fixes
// and a person must look at.
func (r *Relay) failure(hr *http.Request, err error) reply {
	switch store.Classify(err) {
	case store.ClassInvalidInput:
		// The store's own limits (no U+0000 in ids, id and blob sizes) act
		// as one more schema rule: a client error, never retryable.
		return schemaFailed
	case store.ClassUnavailable:
		if !errors.Is(err, context.Canceled) { // else the client hung up; nobody reads this
			r.log.WarnContext(hr.Context(), "relay: store unavailable", "err", err, "path", hr.URL.Path)
		}
		return storeDown
	default:
		// ErrorContext: the log line carries the request's trace id.
		r.log.ErrorContext(hr.Context(), "relay: request failed on a bug, not on the store being down", "err", err, "path", hr.URL.Path)
		return serverFailure
	}
}

func (r *Relay) write(c echo.Context, rep reply) error {
	ct := "application/json"
	if rep.html {
		ct = "text/html; charset=utf-8"
	}
	// Every answer is whole before it is written, so it goes out with its
	// length, as Node's res.end(body) sends the reference's: without one,
	// net/http chunks any answer over 2 KB, and a client then reads a
	// megabyte results answer in growing copies instead of one buffer.
	c.Response().Header().Set(echo.HeaderContentLength, strconv.Itoa(len(rep.body)))
	return c.Blob(rep.status, ct, rep.body)
}

// dispatch answers one request (wire.md §3, in order) on its route.
func (r *Relay) dispatch(hr *http.Request, path, route string) (reply, error) {
	req := &request{
		ctx:    hr.Context(),
		path:   path,
		query:  protocol.ParseQuery(hr.URL.RawQuery),
		header: hr.Header,
		hr:     hr,
	}
	ep, routed := r.routes[route]

	// 1. Debug, before the body and the handshake.
	if routed && ep.plane == telemetry.PlaneDebug {
		return r.debugPage(req)
	}

	// 2. Body, only for POST (Fetch upper-cases the standard methods, so
	// "post" counts), bounded before it is read and charged to the shared
	// body budget while the request is handled.
	if strings.EqualFold(hr.Method, http.MethodPost) {
		limit := int64(MaxBodyBytes)
		if route == r.basePath+"/pair" {
			limit = MaxPairBodyBytes
		}
		// Charged to this client's share of the budget (httpserve.ClientOf),
		// so one address cannot hold every body.
		body, err := r.bodies.ReadRequest(hr, limit)
		defer body.Release()
		raw := body.Data
		if err == nil && len(raw) > 0 {
			// Parsing may take many times the body's size; charge that
			// too before parsing. A body whose cost could never fit is
			// too large (ErrTooLarge), not busy: retrying cannot help.
			err = body.Reserve(protocol.BodyCost(raw))
		}
		switch {
		case errors.Is(err, httpserve.ErrTooLarge):
			return bodyTooLarge, nil
		case errors.Is(err, httpserve.ErrBusy):
			return bodiesBusy, nil
		case errors.Is(err, httpserve.ErrBodyTimeout):
			return bodyTooSlow, nil
		case err != nil:
			// The client went away mid-body; nobody is left to read a
			// meaningful answer.
			return bodyUnread, nil
		}
		b := protocol.ReadBody(raw)
		req.rawBody, req.body = b.Text, b.Value
	}

	// 3. Endpoint name.
	req.endpoint = req.path[strings.LastIndexByte(req.path, '/')+1:]

	// 4. Version handshake: a literal prefix test, independent of basePath.
	if strings.HasPrefix(req.path, "/byollm/") || strings.HasPrefix(req.path, "/relay/") {
		declared, _ := protocol.DeclaredVersion(req.body, req.query)
		if refusal := protocol.CheckProtocolVersion(declared); refusal != nil {
			return refused(refusal), nil
		}
	}

	// 5. Site plane, exact paths; 6-7. daemon plane, by last segment under
	// basePath (routeOf); anything else is not found.
	if !routed {
		return notFoundBare, nil
	}
	if req.proj = r.projections.Current(); req.proj == nil {
		return notReady, nil
	}
	return r.decide(req, ep.h)
}

// decide runs h on the projection in force and, when h answers with
// something only the projection decided (reply.recheck), makes sure that
// was the latest projection: one read of the stored version, and a reload
// when it is newer, after which h runs again on it. Replicas follow the
// projection within milliseconds over pub/sub and within the poll interval
// without it, so without this a daemon approved through one replica could
// be told "not recognised" by another in between. Only refusals pay the
// read; a refusal that cannot be checked (the store is unreachable) is the
// retryable 503, never a refusal the client would believe. Every recheck
// refusal comes before the handler writes anything, except "revoked",
// which follows the presence reconciliation that running again repeats.
func (r *Relay) decide(req *request, h handler) (reply, error) {
	rep, err := h(r, req)
	if err != nil || !rep.recheck {
		return rep, err
	}
	ctx := req.ctx
	if r.storeTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.storeTimeout)
		defer cancel()
	}
	latest, err := r.projections.Fresh(ctx)
	if err != nil {
		return reply{}, fmt.Errorf("check the projection is the latest: %w", err)
	}
	if latest == nil || latest == req.proj {
		return rep, nil
	}
	req.proj = latest
	return h(r, req)
}

// pathname approximates the WHATWG URL pathname of the request target:
// percent-escapes are kept, '\' is '/', and dot segments (including their
// %2e spellings) are resolved. Go's URL.Path would decode escapes.
func pathname(hr *http.Request) string {
	raw := hr.RequestURI
	if raw == "" {
		raw = hr.URL.RequestURI()
	}
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		raw = raw[:i]
	}
	// What every real client sends: an absolute path without '\', dot
	// segments or escapes, which the resolution below returns unchanged.
	if strings.HasPrefix(raw, "/") && !strings.ContainsAny(raw, "\\%") && !strings.Contains(raw, "/.") {
		return raw
	}
	return resolvePath(raw)
}

// resolvePath is pathname's general case, for a target without its query
// and fragment.
func resolvePath(raw string) string {
	lower := strings.ToLower(raw)
	if strings.HasPrefix(lower, "http://") || strings.HasPrefix(lower, "https://") {
		rest := raw[strings.Index(raw, "//")+2:]
		if j := strings.IndexAny(rest, "/\\"); j >= 0 {
			raw = rest[j:]
		} else {
			raw = "/"
		}
	}
	raw = strings.ReplaceAll(raw, "\\", "/")
	if !strings.HasPrefix(raw, "/") {
		raw = "/" + raw
	}
	segs := strings.Split(raw[1:], "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		last := i == len(segs)-1
		switch ls := strings.ToLower(s); ls {
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

// queryGet is URLSearchParams.get: the first occurrence.
func queryGet(q url.Values, name string) (string, bool) {
	if v, ok := q[name]; ok && len(v) > 0 {
		return v[0], true
	}
	return "", false
}
