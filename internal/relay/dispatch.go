package relay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/byollm/relay-go/internal/httpserve"
	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
)

// request is what a handler sees of one HTTP request, already normalised the
// way the reference's WHATWG Request does it.
type request struct {
	ctx      context.Context
	path     string     // WHATWG pathname: escapes kept, dot segments resolved
	endpoint string     // text after the last '/'
	query    url.Values // URLSearchParams of the raw query
	header   http.Header
	source   string // client address (see clientAddress)
	rawBody  []byte // BOM-stripped, invalid UTF-8 replaced; empty unless POST
	body     any    // JSON.parse(rawBody), nil when absent or invalid
	proj     *projection.Projection
}

const sitePrefix = "/relay/site/"

// serve answers every request (wire.md §3, in order).
func (r *Relay) serve(c echo.Context) (err error) {
	hr := c.Request()
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("relay: handler panic", "panic", p, "path", hr.URL.Path)
			err = r.write(c, serverFailure)
		}
	}()
	rep, herr := r.dispatch(hr)
	if herr != nil {
		rep = r.failure(hr, herr)
	}
	return r.write(c, rep)
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
	return c.Blob(rep.status, ct, rep.body)
}

func (r *Relay) dispatch(hr *http.Request) (reply, error) {
	req := &request{
		ctx:    hr.Context(),
		path:   pathname(hr),
		query:  protocol.ParseQuery(hr.URL.RawQuery),
		header: hr.Header,
		source: clientAddress(hr, r.proxies),
	}

	// 1. Debug, before the body and the handshake.
	if req.path == "/debug" || req.path == r.basePath+"/debug" {
		return r.debugPage(req)
	}

	// 2. Body, only for POST (Fetch upper-cases the standard methods, so
	// "post" counts), bounded before it is read and charged to the shared
	// body budget while the request is handled.
	if strings.EqualFold(hr.Method, http.MethodPost) {
		raw, release, err := r.bodies.ReadAll(hr.Body, hr.ContentLength, r.bodyLimit(req.path))
		defer release()
		if err == nil && len(raw) > 0 {
			// Parsing may take many times the body's size; charge that
			// too before parsing.
			var releaseParse func()
			releaseParse, err = r.bodies.Reserve(protocol.BodyCost(raw))
			defer releaseParse()
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

	// 5. Site plane, exact paths.
	if site, isSite := siteEndpoint(req.path); isSite {
		if req.proj = r.projections.Current(); req.proj == nil {
			return notReady, nil
		}
		return r.decide(req, site)
	}

	// 6-7. Daemon plane, by last segment under basePath.
	if !strings.HasPrefix(req.path, r.basePath+"/") {
		return notFoundBare, nil
	}
	var h func(*Relay, *request) (reply, error)
	switch req.endpoint {
	case "pair":
		h = (*Relay).pair
	case "claim":
		h = (*Relay).claim
	case "fetch":
		h = (*Relay).fetch
	case "result":
		h = (*Relay).result
	case "heartbeat":
		h = (*Relay).heartbeat
	case "release":
		h = (*Relay).release
	default:
		return notFoundBare, nil
	}
	if req.proj = r.projections.Current(); req.proj == nil {
		return notReady, nil
	}
	return r.decide(req, h)
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
func (r *Relay) decide(req *request, h func(*Relay, *request) (reply, error)) (reply, error) {
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

func siteEndpoint(path string) (func(*Relay, *request) (reply, error), bool) {
	switch path {
	case sitePrefix + "enqueue":
		return (*Relay).enqueue, true
	case sitePrefix + "payload":
		return (*Relay).payload, true
	case sitePrefix + "cancel":
		return (*Relay).cancel, true
	case sitePrefix + "pending":
		return (*Relay).pending, true
	case sitePrefix + "results":
		return (*Relay).results, true
	}
	return nil, false
}

// bodyLimit is the largest body the request's route takes: the pair route
// (routed by its last segment under basePath, as dispatch does) has its own
// small bound, everything else MaxBodyBytes.
func (r *Relay) bodyLimit(path string) int64 {
	if strings.HasPrefix(path, r.basePath+"/") && path[strings.LastIndexByte(path, '/')+1:] == "pair" {
		return MaxPairBodyBytes
	}
	return MaxBodyBytes
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
