// Package bridge exposes internal/store over loopback HTTP so the store
// contract published in @byollm/relay (a vitest suite) can drive the Go store
// unmodified. It is test-only: it has test hooks (clock offset, raw stub
// writes) and no authentication.
//
// Protocol, every call a POST with a JSON body and a JSON answer:
//
//	/make                          {}                          -> {"store": id}
//	/done                          {"store": id}               -> {}
//	/advance                       {"store": id, "ms": n}      -> {}
//	/writeRawStub                  {"store": id, "id": j, "raw": s} -> {}
//	/op/<RoutingStore method>      {"store": id, "args": [...]} -> {"result": ...}
//
// Each /make creates a store on a fresh random key namespace; /done and Close
// delete that namespace's keys (the store's KeyPattern). Results are shaped exactly like the
// TypeScript RoutingStore's, since the contract compares them with deep
// equality: optional keys are omitted rather than null or false.
package bridge

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/test/relaytest"
	"github.com/byollm/relay-go/test/storehooks"
)

// ContractSite is the site id the contract routes under (CONTRACT_SITE);
// writeRawStub always addresses a job of this site.
const ContractSite = "site_store"

// NamespacePrefix starts every namespace the bridge creates, so stray keys
// from an interrupted run are recognisable.
const NamespacePrefix = "ctr"

type entry struct {
	store  *store.Store
	offset int64
}

// Bridge serves the store operations of many independent stores, one per
// contract case.
type Bridge struct {
	client valkey.Client
	logger *slog.Logger

	mu     sync.Mutex
	stores map[string]*entry
}

// New returns a bridge that creates its stores on client.
func New(client valkey.Client, logger *slog.Logger) *Bridge {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Bridge{client: client, logger: logger, stores: map[string]*entry{}}
}

// Close deletes the keys of every store that was not disposed of with /done.
func (b *Bridge) Close(ctx context.Context) error {
	b.mu.Lock()
	entries := b.stores
	b.stores = map[string]*entry{}
	b.mu.Unlock()
	var errs []error
	for _, e := range entries {
		if _, err := relaytest.DeleteKeys(ctx, b.client, e.store.KeyPattern()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func randomHex(n int) string {
	buf := make([]byte, n)
	_, _ = rand.Read(buf) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(buf)
}

func (b *Bridge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	path := strings.TrimPrefix(r.URL.Path, "/")
	result, err := b.handle(r.Context(), path, body)
	if err != nil {
		b.logger.Warn("bridge call failed", "path", path, "err", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(result)
}

type storeRef struct {
	Store string `json:"store"`
}

func (b *Bridge) lookup(id string) (*entry, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.stores[id]
	if !ok {
		return nil, fmt.Errorf("unknown store %q", id)
	}
	return e, nil
}

func (b *Bridge) handle(ctx context.Context, path string, body []byte) ([]byte, error) {
	switch {
	case path == "make":
		return b.make(ctx)
	case path == "done":
		var in storeRef
		if err := decodeStrict(body, &in); err != nil {
			return nil, fmt.Errorf("done: %w", err)
		}
		return b.done(ctx, in.Store)
	case path == "advance":
		var in struct {
			Store string `json:"store"`
			Ms    int64  `json:"ms"`
		}
		if err := decodeStrict(body, &in); err != nil {
			return nil, fmt.Errorf("advance: %w", err)
		}
		e, err := b.lookup(in.Store)
		if err != nil {
			return nil, fmt.Errorf("advance: %w", err)
		}
		b.mu.Lock()
		e.offset += in.Ms
		offset := e.offset
		b.mu.Unlock()
		e.store.Testing().SetClockOffset(offset)
		return []byte("{}"), nil
	case path == "writeRawStub":
		var in struct {
			Store string `json:"store"`
			ID    string `json:"id"`
			Raw   string `json:"raw"`
		}
		if err := decodeStrict(body, &in); err != nil {
			return nil, fmt.Errorf("writeRawStub: %w", err)
		}
		e, err := b.lookup(in.Store)
		if err != nil {
			return nil, fmt.Errorf("writeRawStub: %w", err)
		}
		n, err := e.store.Testing().RunJobScript(ctx, storehooks.WriteRawStub, ContractSite, in.ID, in.Raw)
		if err != nil {
			return nil, fmt.Errorf("writeRawStub: %w", err)
		}
		if n != 1 {
			return nil, fmt.Errorf("writeRawStub: no job %q at site %q", in.ID, ContractSite)
		}
		return []byte("{}"), nil
	case strings.HasPrefix(path, "op/"):
		var in struct {
			Store string            `json:"store"`
			Args  []json.RawMessage `json:"args"`
		}
		if err := decodeStrict(body, &in); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		e, err := b.lookup(in.Store)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		op := strings.TrimPrefix(path, "op/")
		result, err := call(ctx, e.store, op, in.Args)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		out, err := json.Marshal(struct {
			Result any `json:"result"`
		}{result})
		if err != nil {
			return nil, fmt.Errorf("%s: encode result: %w", op, err)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("no such bridge call %q", path)
	}
}

func (b *Bridge) make(ctx context.Context) ([]byte, error) {
	namespace := NamespacePrefix + randomHex(8)
	s, err := store.New(ctx, b.client, store.Options{Namespace: namespace, Logger: b.logger})
	if err != nil {
		return nil, fmt.Errorf("make: %w", err)
	}
	id := randomHex(8)
	b.mu.Lock()
	b.stores[id] = &entry{store: s}
	b.mu.Unlock()
	return json.Marshal(storeRef{Store: id})
}

func (b *Bridge) done(ctx context.Context, id string) ([]byte, error) {
	b.mu.Lock()
	e, ok := b.stores[id]
	delete(b.stores, id)
	b.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("done: unknown store %q", id)
	}
	if _, err := relaytest.DeleteKeys(ctx, b.client, e.store.KeyPattern()); err != nil {
		return nil, fmt.Errorf("done: %w", err)
	}
	return []byte("{}"), nil
}

// decodeStrict rejects unknown fields, so an argument the contract passes and
// the bridge does not forward fails loudly instead of being dropped.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode %s: %w", data, err)
	}
	if dec.More() {
		return fmt.Errorf("decode %s: trailing data", data)
	}
	return nil
}

// args decodes the positional arguments of one method call.
func args(raw []json.RawMessage, into ...any) error {
	if len(raw) != len(into) {
		return fmt.Errorf("want %d arguments, got %d", len(into), len(raw))
	}
	for i, v := range into {
		if err := decodeStrict(raw[i], v); err != nil {
			return fmt.Errorf("argument %d: %w", i, err)
		}
	}
	return nil
}

// Argument shapes of the TypeScript RoutingStore.

type enqueueArg struct {
	ID     string           `json:"id"`
	SiteID string           `json:"siteId"`
	Stub   protocol.JobStub `json:"stub"`
}

type claimArg struct {
	RunnerID string                  `json:"runnerId"`
	Owner    string                  `json:"owner"`
	Device   protocol.PublicIdentity `json:"device"`
	Routes   []string                `json:"routes"` // routeKey strings: site + "\u0000" + owner
	Kinds    []string                `json:"kinds"`
	Max      int                     `json:"max"`
	LeaseMs  int64                   `json:"leaseMs"`
}

type holderArg struct {
	JobID    string `json:"jobId"`
	RunnerID string `json:"runnerId"`
	LeaseID  string `json:"leaseId"`
}

type completeArg struct {
	JobID       string          `json:"jobId"`
	RunnerID    string          `json:"runnerId"`
	LeaseID     string          `json:"leaseId"`
	Envelope    json.RawMessage `json:"envelope"`
	Disposition string          `json:"disposition"`
}

type releaseArg struct {
	RunnerID   string              `json:"runnerId"`
	Leases     []protocol.GrantRef `json:"leases"`
	Reason     string              `json:"reason"`
	RetryAfter *int64              `json:"retryAfter"`
}

type siteJobArg struct {
	JobID  string `json:"jobId"`
	SiteID string `json:"siteId"`
}

type sealArg struct {
	JobID    string          `json:"jobId"`
	SiteID   string          `json:"siteId"`
	Envelope json.RawMessage `json:"envelope"`
}

type renewArg struct {
	RunnerID string              `json:"runnerId"`
	Leases   []protocol.GrantRef `json:"leases"`
	LeaseMs  int64               `json:"leaseMs"`
}

type seenArg struct {
	RunnerID     string                  `json:"runnerId"`
	Owner        string                  `json:"owner"`
	Device       protocol.PublicIdentity `json:"device"`
	Capabilities json.RawMessage         `json:"capabilities"`
	Withheld     json.RawMessage         `json:"withheld"`
}

// ParseRoute splits a routeKey string. The contract builds routes with the
// relay's own routeKey, so a key without the separator is a bridge bug.
func ParseRoute(key string) (store.Route, error) {
	site, owner, ok := strings.Cut(key, "\u0000")
	if !ok {
		return store.Route{}, fmt.Errorf("route %q has no U+0000 separator", key)
	}
	return store.Route{SiteID: site, Owner: owner}, nil
}

// call runs one RoutingStore method and returns its JS-shaped result.
func call(ctx context.Context, s *store.Store, op string, raw []json.RawMessage) (any, error) {
	switch op {
	case "now":
		if err := args(raw); err != nil {
			return nil, err
		}
		return s.Now(ctx)
	case "enqueue":
		var in enqueueArg
		if err := args(raw, &in); err != nil {
			return nil, err
		}
		job, err := s.Enqueue(ctx, store.EnqueueInput{ID: in.ID, SiteID: in.SiteID, Stub: in.Stub})
		if err != nil {
			return nil, err
		}
		return job, nil
	case "job":
		var site, id string
		if err := args(raw, &site, &id); err != nil {
			return nil, err
		}
		job, err := s.Job(ctx, site, id)
		if err != nil || job == nil {
			return nil, err
		}
		return job, nil
	case "jobs":
		if err := args(raw); err != nil {
			return nil, err
		}
		return s.Jobs(ctx)
	case "awaiting", "finished":
		var site string
		if err := args(raw, &site); err != nil {
			return nil, err
		}
		if op == "awaiting" {
			return s.Awaiting(ctx, site)
		}
		return s.Finished(ctx, site)
	case "sweep":
		if err := args(raw); err != nil {
			return nil, err
		}
		return s.Sweep(ctx)
	case "claim":
		return claim(ctx, s, raw)
	case "takePayload":
		var in holderArg
		if err := args(raw, &in); err != nil {
			return nil, err
		}
		res, err := s.TakePayload(ctx, store.HolderInput{JobID: in.JobID, RunnerID: in.RunnerID, LeaseID: in.LeaseID})
		if err != nil {
			return nil, err
		}
		if res.Refused != "" {
			return map[string]any{"refused": res.Refused}, nil
		}
		return map[string]any{"envelope": res.Envelope}, nil
	case "complete":
		var in completeArg
		if err := args(raw, &in); err != nil {
			return nil, err
		}
		res, err := s.Complete(ctx, store.CompleteInput{
			JobID: in.JobID, RunnerID: in.RunnerID, LeaseID: in.LeaseID,
			Envelope: in.Envelope, Disposition: in.Disposition,
		})
		if err != nil {
			return nil, err
		}
		switch {
		case res.Refused != "":
			return map[string]any{"refused": res.Refused}, nil
		case res.Duplicate:
			return map[string]any{"accepted": res.Accepted, "duplicate": true, "state": res.State}, nil
		default:
			return map[string]any{"accepted": res.Accepted, "state": res.State}, nil
		}
	case "releaseLeases":
		var in releaseArg
		if err := args(raw, &in); err != nil {
			return nil, err
		}
		ids, err := s.ReleaseLeases(ctx, store.ReleaseInput{
			RunnerID: in.RunnerID, Leases: in.Leases, Reason: in.Reason, RetryAfter: in.RetryAfter,
		})
		if err != nil {
			return nil, err
		}
		return ids, nil
	case "seal":
		var in sealArg
		if err := args(raw, &in); err != nil {
			return nil, err
		}
		res, err := s.Seal(ctx, in.SiteID, in.JobID, in.Envelope)
		if err != nil {
			return nil, err
		}
		if res.Refused == "" {
			return map[string]any{"state": res.State}, nil
		}
		out := map[string]any{"refused": res.Refused}
		if res.Was != "" {
			out["was"] = res.Was
		}
		return out, nil
	case "cancel":
		var in siteJobArg
		if err := args(raw, &in); err != nil {
			return nil, err
		}
		return s.Cancel(ctx, in.SiteID, in.JobID)
	case "cancelRequests":
		var runner string
		if err := args(raw, &runner); err != nil {
			return nil, err
		}
		grants, err := s.CancelRequests(ctx, runner)
		if err != nil {
			return nil, err
		}
		return grants, nil
	case "renewLeases":
		var in renewArg
		if err := args(raw, &in); err != nil {
			return nil, err
		}
		res, err := s.RenewLeases(ctx, store.RenewInput{RunnerID: in.RunnerID, Leases: in.Leases, LeaseMs: in.LeaseMs})
		if err != nil {
			return nil, err
		}
		return map[string]any{"renewed": res.Renewed, "lost": res.Lost}, nil
	case "seen":
		var in seenArg
		if err := args(raw, &in); err != nil {
			return nil, err
		}
		return s.Seen(ctx, store.Presence{
			RunnerID: in.RunnerID, Owner: in.Owner, Device: in.Device,
			Capabilities: in.Capabilities, Withheld: in.Withheld,
		})
	case "presence":
		var runner string
		if err := args(raw, &runner); err != nil {
			return nil, err
		}
		p, err := s.Presence(ctx, runner)
		if err != nil || p == nil {
			return nil, err
		}
		return p, nil
	case "everyone":
		if err := args(raw); err != nil {
			return nil, err
		}
		all, err := s.Everyone(ctx)
		if err != nil {
			return nil, err
		}
		return all, nil
	case "dropPresenceForTests":
		var runner string
		if err := args(raw, &runner); err != nil {
			return nil, err
		}
		return nil, s.DropPresence(ctx, runner)
	default:
		return nil, fmt.Errorf("no such store method")
	}
}

func claim(ctx context.Context, s *store.Store, raw []json.RawMessage) (any, error) {
	var in claimArg
	if err := args(raw, &in); err != nil {
		return nil, err
	}
	routes := make([]store.Route, 0, len(in.Routes))
	for _, key := range in.Routes {
		route, err := ParseRoute(key)
		if err != nil {
			return nil, err
		}
		routes = append(routes, route)
	}
	granted, err := s.Claim(ctx, store.ClaimInput{
		RunnerID: in.RunnerID, Owner: in.Owner, Device: in.Device,
		Routes: routes, Kinds: in.Kinds, Max: in.Max, LeaseMs: in.LeaseMs,
	})
	if err != nil {
		return nil, err
	}
	out := make([]json.RawMessage, 0, len(granted))
	for _, g := range granted {
		wire, err := ClaimedStubJSON(g)
		if err != nil {
			return nil, err
		}
		out = append(out, wire)
	}
	return out, nil
}

// ClaimedStubJSON is the TypeScript ClaimedStub: the stored stub's own keys
// plus "lease". If the store gives ClaimedStub its own JSON form, that form is
// what the planes will send, so it is the one tested.
func ClaimedStubJSON(g store.ClaimedStub) (json.RawMessage, error) {
	if m, ok := any(g).(json.Marshaler); ok {
		return m.MarshalJSON()
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(g.Stub, &fields); err != nil {
		return nil, fmt.Errorf("claimed stub %s: %w", g.Stub, err)
	}
	lease, err := json.Marshal(g.Lease)
	if err != nil {
		return nil, fmt.Errorf("claimed stub lease: %w", err)
	}
	fields["lease"] = lease
	return json.Marshal(fields)
}
