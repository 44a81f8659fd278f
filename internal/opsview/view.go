package opsview

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/byollm/relay-go/internal/opsstore"
	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/internal/store"
)

// Options configure the view.
type Options struct {
	Source     Source
	AdminToken string // "" disables admin access (site tokens still need one to be minted)
	Secure     bool   // always mark the login cookie Secure (TLS ends at a proxy that sends no X-Forwarded-Proto)
	Logger     *slog.Logger
	// OnlineWithinMs is how recent a presence must be to count as online
	// (default 90 s: daemons heartbeat every few seconds).
	OnlineWithinMs int64
	// StoreTimeout bounds each store call a page makes (config
	// RELAY_STORE_TIMEOUT); 0 leaves them unbounded.
	StoreTimeout time.Duration
	// SiteRate is the sustained site-token pages a second, per token and
	// per address, on this replica (limits.go); default DefaultSiteRate.
	SiteRate float64
}

// Handler serves /ui/. Mount it without the admin listener's own token
// check: it checks the admin token itself and also accepts site tokens.
type Handler struct {
	src      Source
	adminSet bool
	adminSum [32]byte
	secure   bool
	sessions sessions
	limits   limits
	log      *slog.Logger
	online   int64
	mux      *http.ServeMux
}

// New builds the view.
func New(o Options) *Handler {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.OnlineWithinMs <= 0 {
		o.OnlineWithinMs = 90_000
	}
	if o.StoreTimeout > 0 {
		o.Source = timedSource{s: o.Source, d: o.StoreTimeout}
	}
	h := &Handler{src: o.Source, adminSet: o.AdminToken != "", adminSum: sha256.Sum256([]byte(o.AdminToken)),
		secure: o.Secure, sessions: newSessions(o.AdminToken), limits: newLimits(o.SiteRate), log: o.Logger.With(slog.String("component", "opsview")), online: o.OnlineWithinMs,
		mux: http.NewServeMux()}
	h.mux.HandleFunc("GET /ui/login", func(w http.ResponseWriter, r *http.Request) {
		h.render(w, r, "login", page{Title: "Log in"})
	})
	h.mux.HandleFunc("POST /ui/login", h.login)
	h.mux.HandleFunc("POST /ui/logout", h.logout)
	h.mux.HandleFunc("POST /ui/tokens", h.mintToken)
	h.mux.HandleFunc("GET /ui/tokens", h.listTokens)
	h.mux.HandleFunc("DELETE /ui/tokens/{id}", h.revokeToken)
	h.mux.HandleFunc("GET /ui/{$}", h.authed(h.fleet))
	h.mux.HandleFunc("GET /ui/site/{site}", h.authed(h.site))
	h.mux.HandleFunc("GET /ui/device/{runner}", h.authed(h.device))
	h.mux.HandleFunc("GET /ui/job/{site}/{id}", h.authed(h.job))
	h.mux.HandleFunc("GET /ui/job", h.authed(h.jobLookup))
	return h
}

// ServeHTTP answers /ui/...; everything else under it is a JSON 404/405.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	// No script at all, no third-party anything: inline styles only.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	if _, pattern := h.mux.Handler(r); pattern == "" {
		writeError(w, http.StatusNotFound, "not-found", "no such page under /ui/")
		return
	}
	h.mux.ServeHTTP(w, r)
}

type pageFunc func(w http.ResponseWriter, r *http.Request, p principal)

func (h *Handler) authed(f pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, ok, err := h.identify(r.Context(), r, true)
		var slow *slowDown
		switch {
		case errors.As(err, &slow):
			h.tooMany(w, slow)
			return
		case err != nil:
			h.fail(w, r, err)
			return
		}
		if !ok {
			if wantsJSON(r) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="relay-admin"`)
				writeError(w, http.StatusUnauthorized, "unauthorized", "a view token is required (Authorization: Bearer, or log in at /ui/login)")
				return
			}
			w.WriteHeader(http.StatusUnauthorized)
			h.render(w, r, "login", page{Title: "Log in", Message: "Log in with the admin token or a site token."})
			return
		}
		f(w, r, p)
	}
}

func wantsJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"error": code, "message": msg})
}

func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	h.log.WarnContext(r.Context(), "ops view: store read failed", slog.String("path", r.URL.Path), slog.Any("err", err))
	writeError(w, http.StatusServiceUnavailable, "unavailable", "the store did not answer; try again")
}

// notFound answers the same for a missing thing and a thing the token may
// not see, so a site token learns nothing about other sites' ids.
func notFound(w http.ResponseWriter, what string) {
	writeError(w, http.StatusNotFound, "not-found", "no such "+what+" (or not visible with this token)")
}

// page is what every template gets.
type page struct {
	Title   string
	Message string
	Scope   string // "" for the admin, else the one site
	Refresh bool
	Data    any
}

// show answers JSON when asked, else the page's HTML.
func (h *Handler) show(w http.ResponseWriter, r *http.Request, p principal, name, title string, data any) {
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, data)
		return
	}
	h.render(w, r, name, page{Title: title, Scope: p.Site, Refresh: true, Data: data})
}

func (h *Handler) render(w http.ResponseWriter, r *http.Request, name string, pg page) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := templates.ExecuteTemplate(w, name, pg); err != nil {
		h.log.WarnContext(r.Context(), "ops view: render", slog.String("page", name), slog.Any("err", err))
	}
}

func pageArg(r *http.Request) int {
	n, err := strconv.Atoi(r.URL.Query().Get("page"))
	if err != nil || n < 0 || n > 1_000_000 {
		return 0
	}
	return n
}

func window[T any](all []T, page int) ([]T, bool) {
	from := page * ListPage
	if from >= len(all) {
		return []T{}, false
	}
	to := min(from+ListPage, len(all))
	return all[from:to], to < len(all)
}

// ---- fleet ----

// FleetView is GET /ui/.
type FleetView struct {
	Now        int64       `json:"now"`
	Replicas   []Replica   `json:"replicas"`
	Valkey     *ValkeyInfo `json:"valkey,omitempty"`
	ValkeyErr  string      `json:"valkeyError,omitempty"`
	Events     []Event     `json:"events"`
	Projection struct {
		Loaded bool `json:"loaded"`
		Sites  int  `json:"sites"`
		Device int  `json:"devices"`
	} `json:"projection"`
	Sites    []string `json:"sites"` // this page of the projection's site ids
	Page     int      `json:"page"`
	NextPage int      `json:"nextPage,omitempty"`
}

func (h *Handler) fleet(w http.ResponseWriter, r *http.Request, p principal) {
	if !p.Admin {
		// A site token's whole world is its site.
		http.Redirect(w, r, "/ui/site/"+pathSegment(p.Site), http.StatusSeeOther)
		return
	}
	ctx := r.Context()
	var v FleetView
	var err error
	if v.Now, err = h.src.Now(ctx); err != nil {
		h.fail(w, r, err)
		return
	}
	if v.Replicas, err = h.src.Replicas(ctx); err != nil {
		h.fail(w, r, err)
		return
	}
	sort.Slice(v.Replicas, func(i, j int) bool { return v.Replicas[i].ID < v.Replicas[j].ID })
	v.Events = []Event{}
	for i := range v.Replicas {
		for _, e := range v.Replicas[i].Events {
			v.Events = append(v.Events, e)
		}
		v.Replicas[i].Sites, v.Replicas[i].Events = nil, nil // per-site detail lives on site pages
	}
	sort.Slice(v.Events, func(i, j int) bool { return v.Events[i].At > v.Events[j].At })
	if len(v.Events) > recentEvents {
		v.Events = v.Events[:recentEvents]
	}
	if info, err := h.src.Valkey(ctx); err != nil {
		v.ValkeyErr = err.Error()
	} else {
		v.Valkey = &info
	}
	v.Sites = []string{}
	if proj := h.src.Projection(); proj != nil {
		f := proj.Fixture()
		v.Projection.Loaded, v.Projection.Sites, v.Projection.Device = true, len(f.Sites), len(f.Devices)
		ids := make([]string, 0, len(f.Sites))
		for _, s := range f.Sites {
			ids = append(ids, s.SiteID)
		}
		v.Page = pageArg(r)
		var more bool
		v.Sites, more = window(ids, v.Page)
		if more {
			v.NextPage = v.Page + 1
		}
	}
	h.show(w, r, p, "fleet", "Fleet", v)
}

// ---- site ----

// SiteView is GET /ui/site/{site}.
type SiteView struct {
	Now               int64            `json:"now"`
	SiteID            string           `json:"siteId"`
	KeyID             string           `json:"keyId"`
	Jobs              map[string]int64 `json:"jobs"` // by state
	Live              int64            `json:"live"`
	Partial           bool             `json:"partial,omitempty"`
	OldestQueued      string           `json:"oldestQueuedJob,omitempty"`
	OldestQueuedAt    int64            `json:"oldestQueuedAt,omitempty"`    // ms: its first enqueue (the store's seq)
	OldestQueuedAgeMs int64            `json:"oldestQueuedAgeMs,omitempty"` // now - OldestQueuedAt; a lower bound when Partial
	PerMinute         []Minute         `json:"perMinute"`                   // newest first, summed over replicas
	Refusals          map[string]int64 `json:"refusals"`                    // last 10 minutes, by reason
	UnsealedLapses    int64            `json:"unsealedLapses"`              // awaiting timeouts in the churn window
	LapsesByOwner     map[string]int64 `json:"unsealedLapsesByOwner"`
	Devices           []DeviceRow      `json:"devices"` // this page of the devices that may serve it
	DevicesTotal      int              `json:"devicesTotal"`
	Page              int              `json:"page"`
	NextPage          int              `json:"nextPage,omitempty"`
}

// DeviceRow is a device on a site page.
type DeviceRow struct {
	RunnerID     string          `json:"runnerId"`
	Owner        string          `json:"owner"`
	Online       bool            `json:"online"`
	Paused       bool            `json:"paused"`
	LastSeenAt   int64           `json:"lastSeenAt,omitempty"`
	Capabilities json.RawMessage `json:"capabilities,omitempty"`
}

// siteDevices is the projection's devices whose owner has a consent for
// the site (paused included, revoked routes and revoked devices not).
func siteDevices(proj *projection.Projection, siteID string) []projection.DeviceRecord {
	var out []projection.DeviceRecord
	seen := map[string]bool{}
	for _, d := range proj.Fixture().Devices {
		if d.Revoked || seen[d.RunnerID] || proj.ConsentFor(d.Owner, siteID) == nil {
			continue
		}
		seen[d.RunnerID] = true // the first record of a runner id is the one in force
		out = append(out, d)
	}
	return out
}

func (h *Handler) site(w http.ResponseWriter, r *http.Request, p principal) {
	siteID := r.PathValue("site")
	proj := h.src.Projection()
	if !p.sees(siteID) || proj == nil || proj.SiteFor(siteID) == nil {
		notFound(w, "site")
		return
	}
	ctx := r.Context()
	v := SiteView{SiteID: siteID, KeyID: proj.SiteFor(siteID).KeyID()}
	var err error
	if v.Now, err = h.src.Now(ctx); err != nil {
		h.fail(w, r, err)
		return
	}
	st, err := h.src.SiteStates(ctx, siteID)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	v.Live, v.Partial = st.Live, st.Partial
	v.Jobs = map[string]int64{store.StateQueued: st.Queued, store.StateAwaitingPayload: st.AwaitingPayload,
		store.StateReady: st.Ready, store.StateRunning: st.Running, store.StateDone: st.Done}
	if st.OldestQueuedID != "" {
		// seq is the enqueue instant on the site's shard's clock; Now may
		// come from another node's, so a skew of a few ms is clamped.
		v.OldestQueued, v.OldestQueuedAt = st.OldestQueuedID, st.OldestQueuedAt
		v.OldestQueuedAgeMs = max(v.Now-st.OldestQueuedAt, 0)
	}
	reps, err := h.src.Replicas(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	v.PerMinute, v.Refusals = siteActivity(reps, siteID, v.Now)

	devs := siteDevices(proj, siteID)
	owners := []string{}
	seen := map[string]bool{}
	for _, c := range proj.Fixture().Consents {
		if c.SiteID == siteID && !seen[c.Owner] && proj.ConsentFor(c.Owner, siteID) != nil {
			seen[c.Owner] = true
			owners = append(owners, c.Owner)
		}
	}
	if len(owners) > 256 {
		owners = owners[:256] // one script's keys; lapses of further owners are not summed
	}
	if v.LapsesByOwner, err = h.src.Churn(ctx, siteID, owners); err != nil {
		h.fail(w, r, err)
		return
	}
	for _, n := range v.LapsesByOwner {
		v.UnsealedLapses += n
	}
	v.DevicesTotal = len(devs)
	v.Page = pageArg(r)
	pageDevs, more := window(devs, v.Page)
	if more {
		v.NextPage = v.Page + 1
	}
	ids := make([]string, len(pageDevs))
	for i, d := range pageDevs {
		ids[i] = d.RunnerID
	}
	presence, err := h.src.PresenceMany(ctx, ids)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	v.Devices = []DeviceRow{}
	for _, d := range pageDevs {
		row := DeviceRow{RunnerID: d.RunnerID, Owner: d.Owner, Paused: proj.PausedFor(d.Owner, siteID)}
		if pr, ok := presence[d.RunnerID]; ok && pr.Owner == d.Owner {
			row.LastSeenAt, row.Capabilities = pr.LastSeenAt, pr.Capabilities
			row.Online = v.Now-pr.LastSeenAt <= h.online
		}
		v.Devices = append(v.Devices, row)
	}
	// Online first, then by last seen, so "who can serve it now" leads.
	sort.SliceStable(v.Devices, func(i, j int) bool {
		if v.Devices[i].Online != v.Devices[j].Online {
			return v.Devices[i].Online
		}
		return v.Devices[i].LastSeenAt > v.Devices[j].LastSeenAt
	})
	h.show(w, r, p, "site", "Site "+siteID, v)
}

// ---- device ----

// DeviceView is GET /ui/device/{runner}.
type DeviceView struct {
	Now          int64              `json:"now"`
	RunnerID     string             `json:"runnerId"`
	Owner        string             `json:"owner"`
	Revoked      bool               `json:"revoked"`
	Online       bool               `json:"online"`
	LastSeenAt   int64              `json:"lastSeenAt,omitempty"`
	Capabilities json.RawMessage    `json:"capabilities,omitempty"`
	Held         int64              `json:"leasesHeld"`   // grants it holds, done jobs included (admin only)
	Active       []opsstore.HeldJob `json:"activeLeases"` // not done: awaiting payload, ready, running
	Sites        []ServedSite       `json:"sites"`
}

// ServedSite is a site a device's owner has a consent for.
type ServedSite struct {
	SiteID string `json:"siteId"`
	Paused bool   `json:"paused"`
}

func (h *Handler) device(w http.ResponseWriter, r *http.Request, p principal) {
	runner := r.PathValue("runner")
	proj := h.src.Projection()
	if proj == nil {
		notFound(w, "device")
		return
	}
	d := proj.DeviceFor(runner)
	// A site token sees a device only while its owner consents to the site.
	if d == nil || (!p.Admin && proj.ConsentFor(d.Owner, p.Site) == nil) {
		notFound(w, "device")
		return
	}
	ctx := r.Context()
	v := DeviceView{RunnerID: d.RunnerID, Owner: d.Owner, Revoked: d.Revoked}
	var err error
	if v.Now, err = h.src.Now(ctx); err != nil {
		h.fail(w, r, err)
		return
	}
	pr, err := h.src.Presence(ctx, runner)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if pr != nil && pr.Owner == d.Owner {
		v.LastSeenAt, v.Capabilities = pr.LastSeenAt, pr.Capabilities
		v.Online = v.Now-pr.LastSeenAt <= h.online
	}
	leases, err := h.src.DeviceLeases(ctx, runner)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	v.Active = []opsstore.HeldJob{}
	for _, j := range leases.Active {
		if p.sees(j.SiteID) {
			v.Active = append(v.Active, j)
		}
	}
	if p.Admin {
		v.Held = leases.Held
	} else {
		v.Held = int64(len(v.Active)) // other sites' grants are not this token's business
	}
	v.Sites = []ServedSite{}
	for _, s := range proj.SitesFor(d.Owner) {
		if p.sees(s.SiteID) {
			v.Sites = append(v.Sites, ServedSite{SiteID: s.SiteID, Paused: proj.PausedFor(d.Owner, s.SiteID)})
		}
	}
	h.show(w, r, p, "device", "Device "+runner, v)
}

// ---- job ----

// JobView is GET /ui/job/{site}/{id}: never a payload or result byte.
type JobView struct {
	Now            int64    `json:"now"`
	SiteID         string   `json:"siteId"`
	JobID          string   `json:"jobId"`
	State          string   `json:"state"`
	Kind           string   `json:"kind,omitempty"`
	Owner          string   `json:"owner,omitempty"`
	Audience       string   `json:"audience,omitempty"`
	DeadlineAt     int64    `json:"deadlineAt,omitempty"`
	Holder         string   `json:"holder,omitempty"`
	HolderOwner    string   `json:"holderOwner,omitempty"`
	LeaseExpiresAt int64    `json:"leaseExpiresAt,omitempty"`
	AwaitingUntil  int64    `json:"awaitingUntil,omitempty"`
	SealAttempts   int      `json:"sealAttempts"`
	RefusedBy      []string `json:"refusedBy"`
	ReofferTo      string   `json:"reofferTo,omitempty"`
	Cancelled      bool     `json:"cancelled"`
	HasPayload     bool     `json:"hasPayload"`
	HasResult      bool     `json:"hasResult"`
	Disposition    string   `json:"disposition,omitempty"`
}

func (h *Handler) jobLookup(w http.ResponseWriter, r *http.Request, p principal) {
	q := r.URL.Query()
	site, id := q.Get("site"), q.Get("id")
	if site == "" && !p.Admin {
		site = p.Site
	}
	if site == "" || id == "" {
		writeError(w, http.StatusBadRequest, "invalid-request", "site and id are required")
		return
	}
	http.Redirect(w, r, "/ui/job/"+pathSegment(site)+"/"+pathSegment(id), http.StatusSeeOther)
}

func (h *Handler) job(w http.ResponseWriter, r *http.Request, p principal) {
	siteID, jobID := r.PathValue("site"), r.PathValue("id")
	if !p.sees(siteID) || len(siteID) > 1024 || len(jobID) > 1024 {
		notFound(w, "job")
		return
	}
	ctx := r.Context()
	now, err := h.src.Now(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	j, err := h.src.Job(ctx, siteID, jobID)
	if err != nil && !errors.Is(err, store.ErrInvalidInput) {
		h.fail(w, r, err)
		return
	}
	if j == nil {
		notFound(w, "job")
		return
	}
	v := JobView{Now: now, SiteID: j.SiteID, JobID: j.ID, State: j.State, AwaitingUntil: j.AwaitingUntil,
		SealAttempts: j.SealAttempts, RefusedBy: j.RefusedBy, ReofferTo: j.ReofferTo, Cancelled: j.Cancelled,
		HasPayload: len(j.Payload) > 0, HasResult: len(j.Result) > 0, Disposition: j.Disposition}
	var stub struct {
		Kind       string `json:"kind"`
		Owner      string `json:"owner"`
		Audience   string `json:"audience"`
		DeadlineAt int64  `json:"deadlineAt"`
	}
	if json.Unmarshal(j.Stub, &stub) == nil {
		v.Kind, v.Owner, v.Audience, v.DeadlineAt = stub.Kind, stub.Owner, stub.Audience, stub.DeadlineAt
	}
	if c := j.ClaimedBy; c != nil {
		v.Holder, v.HolderOwner, v.LeaseExpiresAt = c.RunnerID, c.Owner, c.LeaseExpiresAt
	}
	h.show(w, r, p, "job", "Job "+jobID, v)
}
