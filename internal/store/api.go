package store

// This file is the store's public vocabulary. The HTTP planes, the contract
// bridge and the tests code against it; lua/ and the rest of this package
// implement it. Semantics are those of @byollm/relay@0.1.1's RelayState
// (shared/spec/store.md); the comments here only name what each value is.

import (
	"encoding/json"

	"github.com/byollm/relay-go/internal/protocol"
)

// Job states.
const (
	StateQueued          = "queued"
	StateAwaitingPayload = "awaiting-payload"
	StateReady           = "ready"
	StateRunning         = "running"
	StateDone            = "done"
)

// Routing constants of the reference store.
const (
	AwaitingPayloadMs          = 10_000
	UnsealedPerPair            = 2
	SealAttemptsBeforeEviction = 3
	ChurnExpiries              = 6
	ChurnWindowMs              = 300_000
	ChurnQuietMs               = 3_600_000
	PairingCodeTTLMs           = 600_000
	MaxOutstandingPairings     = 500
	// DefaultPairingsPerSource is how many live codes one source address
	// may hold: a person pairs one machine at a time, and a handful covers
	// several machines behind one NAT being set up together.
	DefaultPairingsPerSource = 5
	// DefaultPairingsPerNetwork is how many live codes one /24 (IPv4) or
	// /48 (IPv6) may hold: an office or campus setting up a few machines
	// at once, while a client renting a block of addresses counts as one.
	DefaultPairingsPerNetwork = 20
	// PairingReserveDivisor: 1/PairingReserveDivisor of the capacity is
	// only for starts from a network holding no live code, so a fresh
	// network still gets a code when every other slot is taken.
	PairingReserveDivisor = 5
)

// Holder refusals (takePayload, complete) and seal refusals.
const (
	RefusedNotFound   = "not-found"
	RefusedNotHolder  = "not-holder"
	RefusedStaleLease = "stale-lease"
	RefusedNotReady   = "not-ready"
	RefusedTerminal   = "terminal"
	RefusedTooLate    = "too-late"
)

// Release reasons.
const (
	ReasonShutdown    = "shutdown"
	ReasonPause       = "pause"
	ReasonRevoked     = "revoked"
	ReasonBackendDown = "backend-down"
	ReasonRefused     = "refused"
)

// ClaimedBy records who holds a job and under which lease. Owner is the
// device's owner, not the job's.
type ClaimedBy struct {
	RunnerID       string                  `json:"runnerId"`
	Owner          string                  `json:"owner"`
	Device         protocol.PublicIdentity `json:"device"`
	LeaseID        string                  `json:"leaseId"`
	LeaseExpiresAt int64                   `json:"leaseExpiresAt"`
}

// Job is a RoutedJob snapshot. Stub, Payload and Result are the exact bytes
// Go stored; Stub may fail to parse (a quarantined job still reads back).
// Optional fields are zero/nil when absent and are omitted from JSON.
type Job struct {
	ID            string           `json:"id"`
	SiteID        string           `json:"siteId"`
	Stub          json.RawMessage  `json:"stub"`
	State         string           `json:"state"`
	ClaimedBy     *ClaimedBy       `json:"claimedBy,omitempty"`
	AwaitingUntil int64            `json:"awaitingUntil,omitempty"`
	SealAttempts  int              `json:"sealAttempts,omitempty"`
	ReofferTo     string           `json:"reofferTo,omitempty"`
	RefusedBy     []string         `json:"refusedBy"` // never nil
	RetryAfter    map[string]int64 `json:"retryAfter,omitempty"`
	Cancelled     bool             `json:"cancelled,omitempty"`
	Payload       json.RawMessage  `json:"payload,omitempty"`
	Result        json.RawMessage  `json:"result,omitempty"`
	Disposition   string           `json:"disposition,omitempty"`
	// SweptAway marks a snapshot taken just before a sweep removed the job.
	SweptAway bool `json:"sweptAway,omitempty"`
}

// Route is one (site, job owner) pair a claimant may take work from
// (protocol.Route; the projection decides them, the store claims by them).
type Route = protocol.Route

// ClaimInput is what the daemon plane asks of claim. Routes and Kinds are
// sets; duplicates are harmless.
type ClaimInput struct {
	RunnerID string
	Owner    string
	Device   protocol.PublicIdentity
	Routes   []Route
	Kinds    []string
	Max      int
	LeaseMs  int64
	// RequirePresence makes the claim conditional on the runner's presence
	// record holding exactly Owner and Device, checked in the claim's own
	// script: otherwise Claim returns ErrPresenceChanged and writes
	// nothing. The planes use it to claim with a remembered device without
	// a separate presence read. A claim that cannot grant anything (Max 0,
	// no routes or no kinds) only sweeps and checks nothing.
	RequirePresence bool
}

// ClaimedStub is a granted stub: the stored stub bytes plus the lease. Its
// JSON is the stub's own keys followed by "lease".
type ClaimedStub struct {
	SiteID string          // the job's site id (not part of the wire form)
	seq    int64           // first-enqueue order (orders a claim's grants across shards)
	Stub   json.RawMessage // exact stored stub bytes
	Lease  protocol.Lease
}

// HolderInput names a grant from the holder's side: takePayload.
type HolderInput struct {
	JobID    string
	RunnerID string
	LeaseID  string
}

// TakeResult is either an envelope or a refusal.
type TakeResult struct {
	Envelope json.RawMessage
	Refused  string // "" when Envelope is set
}

// CompleteInput records a result under a grant.
type CompleteInput struct {
	JobID       string
	RunnerID    string
	LeaseID     string
	Envelope    json.RawMessage
	Disposition string // ok | error | canceled
}

// CompleteResult: Accepted, or Duplicate (same lease, already done), or Refused.
type CompleteResult struct {
	Accepted  bool
	Duplicate bool
	State     string // "done" unless Refused
	Refused   string
}

// SealResult: State "ready", or Refused with Was (the state found) on too-late.
type SealResult struct {
	State   string
	Refused string
	Was     string
	Limit   string // with RefusedSiteLimit: the limit (LimitBytes)
	// TakenForFetch: a fetch of the grant was waiting on this Store, and
	// the seal took the payload for it (the job is running; State still
	// says ready, the seal's own answer) and handed it over.
	TakenForFetch bool
}

// ReleaseInput hands grants back. RetryAfter is an absolute instant (ms) on
// the caller's clock; nil means none.
type ReleaseInput struct {
	RunnerID   string
	Leases     []protocol.GrantRef
	Reason     string // may be ""
	RetryAfter *int64
}

// RenewInput extends grants still held.
type RenewInput struct {
	RunnerID string
	Leases   []protocol.GrantRef
	LeaseMs  int64
}

// Renewed is one renewed grant.
type Renewed struct {
	JobID     string `json:"jobId"`
	ExpiresAt int64  `json:"expiresAt"`
}

// RenewResult lists renewed grants and lost ones (echoed exactly).
type RenewResult struct {
	Renewed []Renewed           `json:"renewed"`
	Lost    []protocol.GrantRef `json:"lost"`
}

// Presence is what the store remembers of a device. Capabilities and Withheld
// are the exact JSON arrays Go produced (an empty array is a value).
type Presence struct {
	RunnerID     string                  `json:"runnerId"`
	Owner        string                  `json:"owner"`
	Device       protocol.PublicIdentity `json:"device"`
	LastSeenAt   int64                   `json:"lastSeenAt"`
	Capabilities json.RawMessage         `json:"capabilities"`
	Withheld     json.RawMessage         `json:"withheld"`
}

// HeartbeatInput is one daemon heartbeat's presence write (Heartbeat).
type HeartbeatInput struct {
	Presence
	// RequirePresence: the record must already exist holding exactly Owner
	// and Device (what the caller remembered of it); otherwise nothing is
	// written and Heartbeat answers ErrPresenceChanged.
	RequirePresence bool
	// Cancels: also answer the runner's cancel requests (CancelRequests).
	Cancels bool
	// Idle, when set, says the device runs nothing (it reported no active
	// lease) and names what its next claim asks for. If the work view
	// knows that claim would find nothing (every queue of the routes seen
	// empty, nothing due on their shards), the presence write may wait for
	// Options.HeartbeatIdleBatch: no answer it carries can lead to work
	// sooner. The write and its answer are the same either way.
	Idle *IdleClaim
	// Renew, when set, also renews these grants (RenewLeases; its
	// RunnerID must be Presence's), answered in HeartbeatResult.Renew.
	// On a server that is not a cluster a short-form presence write
	// carries them, so a busy device's heartbeat is one script call;
	// otherwise they are renewed after the cancel requests are read.
	Renew *RenewInput
}

// IdleClaim is what an idle device's next claim would ask for
// (ClaimInput's Routes and Kinds).
type IdleClaim struct {
	Routes []Route
	Kinds  []string
}

// HeartbeatResult is Heartbeat's answer.
type HeartbeatResult struct {
	Presence Presence
	Cancel   []protocol.GrantRef // when Cancels
	Renew    RenewResult         // when Renew was set
}

// ChurnReport says a (site, owner) pair keeps claiming without sealing.
type ChurnReport struct {
	SiteID   string `json:"siteId"`
	Owner    string `json:"owner"`
	Expiries int    `json:"expiries"`
	WindowMs int64  `json:"windowMs"`
}

// PendingPairing is one outstanding device-code pairing.
type PendingPairing struct {
	DeviceCode   string                  `json:"deviceCode"`
	UserCode     string                  `json:"userCode"`
	Device       protocol.PublicIdentity `json:"device"`
	Label        string                  `json:"label"`
	Platform     string                  `json:"platform"`
	Capabilities json.RawMessage         `json:"capabilities"`
	ExpiresAt    int64                   `json:"expiresAt"`
	// Source is the client address the start came from, as the planes
	// determine it, used only to count its live codes (never stored in the
	// pairing, never returned by a lookup). "" is counted nowhere.
	Source string `json:"-"`
}

// PairingOutcome is what PutPairing did.
type PairingOutcome string

// PutPairing outcomes.
const (
	PairingStored     PairingOutcome = "stored"
	PairingAtCapacity PairingOutcome = "at-capacity" // PairingCapacity live codes
	PairingSourceBusy PairingOutcome = "source-busy" // PairingsPerSource live codes of p.Source
	// PairingsPerNetwork live codes of p.Source's network (SourceNetwork)
	PairingNetworkBusy PairingOutcome = "network-busy"
)
