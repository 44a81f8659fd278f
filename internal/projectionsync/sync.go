// Package projectionsync distributes the projection (the RelayFixture: sites,
// consents, devices, rosters, revocations) to every replica through Valkey.
//
// The projection is one versioned document in a hash,
// <ns>:{<ns>}:projection {version, json, sha, updatedAt}. Writers validate
// and canonicalise in Go, then lua/projection/projection_put.lua installs the document and
// bumps the version in one step and PUBLISHes the version. Each replica keeps
// the decoded projection in memory and follows the document two ways: the
// PUB/SUB message (prompt) and a poll of {version, sha} every PollInterval
// (the fallback when a message is lost across a reconnect). Either way a
// change made through any replica is in force everywhere within about one
// poll interval.
//
// A document is validated whole before it is written, so a bad one never
// reaches Valkey. Should one get there anyway (written by hand), replicas
// log it once and keep the projection they have.
package projectionsync

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/byollm/relay-go/lua"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/internal/scriptrun"
	"github.com/byollm/relay-go/internal/store"
)

// The projection's scripts, self-contained (no common prefix).
var (
	putScript       = scriptrun.Must("projection_put", lua.ProjectionPut)
	getScript       = scriptrun.Must("projection_get", lua.ProjectionGet)
	unapproveScript = scriptrun.Must("projection_unapprove", lua.ProjectionUnapprove)
)

// Defaults.
const (
	DefaultPollInterval = 500 * time.Millisecond
	// mergeAttempts bounds the optimistic merge loop; each conflict means
	// another writer got in between our read and our write.
	mergeAttempts = 16
)

// ErrConflict is returned when a merge lost the race mergeAttempts times in a
// row; nothing was written and the caller may simply try again.
var ErrConflict = errors.New("projection changed concurrently too many times; nothing was written, try again")

// InvalidError is a document (or merge patch) refused by validation. The
// message names the offending field; nothing was written.
type InvalidError struct{ Err error }

func (e *InvalidError) Error() string { return e.Err.Error() }
func (e *InvalidError) Unwrap() error { return e.Err }

// Options configures a Sync.
type Options struct {
	// Namespace is the key namespace (config RELAY_NAMESPACE).
	Namespace string
	// PollInterval is the fallback poll period; default 500 ms.
	PollInterval time.Duration
	Logger       *slog.Logger
	// Runner runs every call but the subscription (observed, bounded and
	// classified as the store's); nil: an unobserved, unbounded one on the
	// client New is given.
	Runner *scriptrun.Runner
}

// Counts is how many records of each kind a document holds.
type Counts struct {
	Sites    int `json:"sites"`
	Consents int `json:"consents"`
	Devices  int `json:"devices"`
	Rosters  int `json:"rosters"`
	Revoked  int `json:"revoked"`
}

// Result describes a write.
type Result struct {
	Counts
	// Version is the document's version after the call.
	Version int64 `json:"version"`
	// Changed is false when the document was byte-identical to the stored
	// one and nothing was written.
	Changed bool `json:"changed"`
	// UpdatedAt is the Valkey TIME (ms) of the version's write.
	UpdatedAt int64 `json:"updatedAt"`
}

// Document is the stored document as Valkey has it.
type Document struct {
	Version   int64  // 0: no document stored (JSON is then the empty projection)
	UpdatedAt int64  // Valkey TIME ms of the write; 0 when none
	JSON      []byte // canonical RelayFixture JSON
	// Approved is how many devices approved through the admin API the
	// JSON includes beyond the stored document (see approved.go).
	Approved int

	sha string // the stored document's digest ("" when none)
}

// State is what a replica has in force, for metrics and readiness.
type State struct {
	Loaded   bool
	Version  int64
	LoadedAt time.Time
}

// installed is one decoded version held in memory.
type installed struct {
	proj     *projection.Projection
	version  int64
	sha      string
	loadedAt time.Time
}

// Sync follows the projection document. Its methods are safe for
// concurrent use.
type Sync struct {
	client    valkey.Client
	run       *scriptrun.Runner
	namespace string
	key       string
	channel   string
	poll      time.Duration
	log       *slog.Logger
	// approvedKey holds the devices approved through the admin API
	// (approved.go); the projection in force is the document plus them.
	approvedKey string

	mu      sync.Mutex
	cur     *installed // nil until the first load
	badSha  string     // last stored document that failed to decode (logged once)
	loaded  chan struct{}
	kick    chan struct{}
	running bool
}

// SitesKey is the hash of each site's generation: the projection version
// at which it (last) entered the projection (lua/projection/projection_put.lua).
// The operations view binds its site tokens to it (store.PutViewToken).
func SitesKey(namespace string) string { return store.KeyPrefix(namespace) + "projection:sites" }

// Keys returns the document key and the change channel for a namespace.
func Keys(namespace string) (key, channel string) {
	key = store.KeyPrefix(namespace) + "projection"
	return key, key + ":changed"
}

// New builds a Sync. It does no I/O; call Run to start following.
func New(client valkey.Client, opts Options) *Sync {
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	key, channel := Keys(opts.Namespace)
	run := opts.Runner
	if run == nil {
		run = scriptrun.NewRunner(client, scriptrun.Options{})
	}
	return &Sync{
		namespace: opts.Namespace,
		client:    client,
		run:       run,
		key:       key,
		channel:   channel,
		poll:      opts.PollInterval,
		log:       opts.Logger.With(slog.String("component", "projection")),
		loaded:    make(chan struct{}),
		kick:      make(chan struct{}, 1),

		approvedKey: ApprovedKey(opts.Namespace),
	}
}

// Current returns the projection in force, or nil before the first load.
// With no document stored it is the empty projection.
func (s *Sync) Current() *projection.Projection {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return nil
	}
	return s.cur.proj
}

// Fresh reads the stored {version, sha} and, when it differs from what is
// in force, loads it (Refresh), then returns the projection in force. It
// costs one HMGET when this replica is already current. The planes call it
// before a refusal a newer projection could reverse, so that a change made
// through another replica is never refused here in the moments before
// pub/sub or the poll brings it.
func (s *Sync) Fresh(ctx context.Context) (*projection.Projection, error) {
	if err := s.Refresh(ctx); err != nil {
		return nil, err
	}
	return s.Current(), nil
}

// Version returns the version in force (0: none stored, or not loaded).
func (s *Sync) Version() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return 0
	}
	return s.cur.version
}

// LoadedAt returns when the version in force was installed on this replica.
func (s *Sync) LoadedAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return time.Time{}
	}
	return s.cur.loadedAt
}

// State returns the replica's view in one read.
func (s *Sync) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return State{}
	}
	return State{Loaded: true, Version: s.cur.version, LoadedAt: s.cur.loadedAt}
}

// Loaded is closed once a projection is in force.
func (s *Sync) Loaded() <-chan struct{} { return s.loaded }

// Run loads the document and follows it until ctx ends. It retries a failed
// load forever (logging), because a replica without a projection answers
// 503 and should recover on its own when Valkey comes back.
func (s *Sync) Run(ctx context.Context) {
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		panic("projectionsync: Run called twice")
	}
	s.running = true
	s.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.subscribe(ctx)
	}()
	defer wg.Wait()

	ticker := time.NewTicker(s.poll)
	defer ticker.Stop()
	failing := false
	for {
		if err := s.Refresh(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			if !failing {
				s.log.Error("projection: cannot read from Valkey; keeping the projection in force", slog.Any("err", err))
			}
			failing = true
		} else if failing {
			s.log.Info("projection: reading from Valkey again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-s.kick:
		}
	}
}

// subscribe turns change messages into kicks of the poll loop, re-
// subscribing after connection loss. Messages are only a hint: the loop
// re-reads {version, sha}, so a lost or duplicated message is harmless.
func (s *Sync) subscribe(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		// A connection of its own: on RESP2 (and on the embedded miniredis)
		// a subscribed connection accepts nothing else, so subscribing on
		// the shared pipeline would break every other command.
		dc, release := s.client.Dedicate()
		err := dc.Receive(ctx, dc.B().Subscribe().Channel(s.channel).Build(), func(valkey.PubSubMessage) {
			select {
			case s.kick <- struct{}{}:
			default:
			}
		})
		release()
		if ctx.Err() != nil {
			return
		}
		s.log.Debug("projection: subscription ended; polling covers the gap", slog.Any("err", err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// Refresh reads {version, sha} and, when they differ from what is in force,
// fetches, decodes and installs the document. It is what Run calls on every
// tick and message; tests and start-up call it directly.
func (s *Sync) Refresh(ctx context.Context) error {
	head, err := s.run.Do(ctx, "projection_head", s.client.B().Hmget().Key(s.key).Field("version", "sha").Build()).ToArray()
	if err != nil {
		return fmt.Errorf("projection: read version: %w", err)
	}
	version, err := optInt(head[0])
	if err != nil {
		return fmt.Errorf("projection: version field: %w", err)
	}
	sha, _ := head[1].ToString()

	s.mu.Lock()
	cur, bad := s.cur, s.badSha
	s.mu.Unlock()
	if cur != nil && cur.version == version && cur.sha == sha {
		return nil
	}
	if version == 0 {
		// Nothing stored: the reference's default fixture, the empty
		// projection. A deleted key takes every replica back to it.
		if cur != nil && cur.version != 0 {
			s.log.Warn("projection: the document is gone from Valkey; the empty projection is now in force", slog.Int64("was", cur.version))
		}
		s.install(emptyDoc(), 0, "")
		return nil
	}
	if bad != "" && sha == bad {
		return nil // already refused and logged; wait for the next write
	}

	doc, err := s.Get(ctx)
	if err != nil {
		return err
	}
	if doc.Version == 0 {
		return nil // deleted between the two reads; the next tick sees it
	}
	d, err := decodeDoc(doc.JSON)
	// The stored document's digest, not the effective one's: it is what
	// the poll above compares, and approvals change the version instead.
	sum := doc.sha
	if err != nil {
		s.mu.Lock()
		s.badSha = sum
		s.mu.Unlock()
		s.log.Error("projection: the document in Valkey is invalid; keeping the projection in force",
			slog.Int64("version", doc.Version), slog.Any("err", err))
		return nil
	}
	s.install(d, doc.Version, sum)
	return nil
}

// install puts a decoded document in force unless a newer version is
// already there. Only the poll path may go backwards (a re-created key).
func (s *Sync) install(d decoded, version int64, sha string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil && s.cur.version == version && s.cur.sha == sha {
		return
	}
	first := s.cur == nil
	s.cur = &installed{proj: d.proj, version: version, sha: sha, loadedAt: time.Now()}
	if first {
		close(s.loaded)
	}
	s.log.Info("projection: in force", slog.Int64("version", version),
		slog.Int("sites", d.counts.Sites), slog.Int("consents", d.counts.Consents),
		slog.Int("devices", d.counts.Devices), slog.Int("rosters", d.counts.Rosters),
		slog.Int("revoked", d.counts.Revoked))
}

// installIfNewer is install for the write path: the writer knows its
// version is current, but a concurrent poll may already hold a later one.
func (s *Sync) installIfNewer(d decoded, version int64, sha string) {
	s.mu.Lock()
	newer := s.cur == nil || version > s.cur.version
	s.mu.Unlock()
	if newer {
		s.install(d, version, sha)
	}
}

// stored reads the stored document alone, without the approved devices:
// the base a merge rewrites. With none stored it returns version 0 and the
// empty projection's JSON.
func (s *Sync) stored(ctx context.Context) (Document, error) {
	vals, err := s.run.Do(ctx, "projection_stored", s.client.B().Hmget().Key(s.key).Field("version", "json", "updatedAt").Build()).ToArray()
	if err != nil {
		return Document{}, fmt.Errorf("projection: read document: %w", err)
	}
	version, err := optInt(vals[0])
	if err != nil {
		return Document{}, fmt.Errorf("projection: version field: %w", err)
	}
	updated, err := optInt(vals[2])
	if err != nil {
		return Document{}, fmt.Errorf("projection: updatedAt field: %w", err)
	}
	body, err := vals[1].ToString()
	if version == 0 {
		return Document{Version: 0, JSON: emptyDoc().canon}, nil
	}
	if err != nil {
		// Devices were approved before any document was written: the
		// version counts those approvals over the empty projection.
		return Document{Version: version, UpdatedAt: updated, JSON: emptyDoc().canon}, nil
	}
	return Document{Version: version, UpdatedAt: updated, JSON: []byte(body)}, nil
}

// Replace validates raw as a whole RelayFixture and makes it the projection.
// An invalid document returns *InvalidError and changes nothing. The
// replica that writes has the new version in force when Replace returns.
func (s *Sync) Replace(ctx context.Context, raw []byte) (Result, error) {
	d, err := decodeDoc(raw)
	if err != nil {
		return Result{}, &InvalidError{Err: err}
	}
	return s.write(ctx, d, "")
}

// Merge upserts a patch into the stored document: records are matched by
// their key (sites by siteId, consents and revoked by owner+siteId, devices
// by runnerId, rosters by id); a match is replaced in place, a new record is
// appended, and arrays the patch leaves out are kept. With no document
// stored the patch merges onto the empty projection. The result is
// validated whole. Concurrent merges never lose each other's records: each
// is written only if the version it read is still the stored one, and
// retried otherwise.
//
// A merge that changes nothing (empty lists, or records identical to the
// stored ones) writes nothing: the version stays, Changed is false, and with
// no document stored there is still none (version 0), so a control plane
// sending "nothing new" on a timer does not wake every replica.
func (s *Sync) Merge(ctx context.Context, patch []byte) (Result, error) {
	for attempt := 0; attempt < mergeAttempts; attempt++ {
		base, err := s.stored(ctx)
		if err != nil {
			return Result{}, err
		}
		d, err := mergeDocs(base.JSON, patch)
		if err != nil {
			return Result{}, &InvalidError{Err: err}
		}
		if bytes.Equal(d.canon, base.JSON) {
			sha := ""
			if base.Version > 0 {
				sha = shaHex(base.JSON)
			}
			// Not installIfNewer: with approved devices the document alone
			// is not the projection of base.Version (approved.go).
			s.installWritten(ctx, d, base.Version, sha)
			return Result{Counts: d.counts, Version: base.Version, UpdatedAt: base.UpdatedAt}, nil
		}
		res, err := s.write(ctx, d, strconv.FormatInt(base.Version, 10))
		if !errors.Is(err, errConflict) {
			return res, err
		}
		// Another writer won; back off a little so a burst of merges
		// does not retry in lockstep.
		select {
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-time.After(time.Duration(rand.IntN(5*(attempt+1))+1) * time.Millisecond):
		}
	}
	return Result{}, ErrConflict
}

var errConflict = errors.New("projection: version conflict")

// write runs lua/projection/projection_put.lua with the expected version ("" = any).
func (s *Sync) write(ctx context.Context, d decoded, expected string) (Result, error) {
	sum := shaHex(d.canon)
	args := []string{expected, string(d.canon), sum, s.channel}
	for _, site := range d.proj.Fixture().Sites {
		args = append(args, site.SiteID)
	}
	msg, err := s.run.Run(ctx, putScript, []string{s.key, SitesKey(s.namespace)}, args)
	if err != nil {
		return Result{}, fmt.Errorf("projection: write: %w", err)
	}
	reply, err := msg.ToArray()
	if err != nil {
		return Result{}, fmt.Errorf("projection: write: %w", err)
	}
	if len(reply) != 3 {
		return Result{}, fmt.Errorf("projection: write: unexpected reply of %d elements", len(reply))
	}
	status, err := reply[0].ToString()
	if err != nil {
		return Result{}, fmt.Errorf("projection: write status: %w", err)
	}
	version, err := reply[1].AsInt64()
	if err != nil {
		return Result{}, fmt.Errorf("projection: write version: %w", err)
	}
	updated, err := reply[2].AsInt64()
	if err != nil {
		return Result{}, fmt.Errorf("projection: write updatedAt: %w", err)
	}
	res := Result{Counts: d.counts, Version: version, UpdatedAt: updated}
	switch status {
	case "ok":
		res.Changed = true
		s.installWritten(ctx, d, version, sum)
		s.log.Info("projection: written", slog.Int64("version", version))
	case "same":
		s.installWritten(ctx, d, version, sum)
	case "conflict":
		return Result{}, errConflict
	default:
		return Result{}, fmt.Errorf("projection: write: unknown status %q", status)
	}
	return res, nil
}

func optInt(m valkey.ValkeyMessage) (int64, error) {
	if m.IsNil() {
		return 0, nil
	}
	return m.AsInt64()
}

func shaHex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
