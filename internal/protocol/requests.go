package protocol

// Request bodies of the daemon plane (wire.md §8) and site plane (§9), with
// strict decoders. Every Decode* takes a ParseJSON value (Body.Value; nil for
// an absent body, which fails) and returns a *SchemaError on failure. Field
// order is schema order, so Marshal re-emits what zod's parse would.

// Enumerations of protocol 2.
var (
	JobKinds      = []string{KindGenerate, KindChat}
	Audiences     = []string{AudiencePrivate, AudienceTeam}
	OfferScopes   = []string{"private", "team"}
	SizeClasses   = []string{"small", "medium", "large", "unbounded"}
	BackendIDs    = []string{"ollama", "mlx", "llamacpp", "vllm", "lmstudio", "jan", "localai", "anthropic", "openai", "gemini", "grok", "groq", "openrouter", "together", "deepseek", "mistral", "openai-http", "claude-cli", "codex-cli"}
	BackendClass  = []string{"http", "process"}
	Directions    = []string{"payload", "result"}
	Dispositions  = []string{"ok", "error", "canceled"}
	ReleaseReason = []string{"shutdown", "pause", "revoked", "backend-down", "refused"}
	Platforms     = []string{"darwin", "linux", "win32"}
)

// Limits of the request schemas.
const (
	MaxClaim           = 64
	MaxLabel           = 120
	MinDeviceCode      = 20
	MaxSuccessionChain = 64
	// MaxGrantRefs bounds heartbeat activeLeases and release leases, which
	// the reference leaves unbounded (a departure). A real daemon lists
	// only the grants it holds, at most its concurrency (32 at most), and
	// one claim grants at most MaxClaim (64); 1024 is sixteen full claims,
	// far beyond any honest client, and keeps the store's work for one
	// request at 32 bounded script calls (store.GrantChunk each).
	MaxGrantRefs = 1024
)

// SignedGrant is a control-plane grant, carried verbatim on a claimed stub.
type SignedGrant struct {
	GrantID   string `json:"grantId"`
	JobID     string `json:"jobId"`
	Site      string `json:"site"`
	User      string `json:"user"`
	Owner     string `json:"owner"`
	Purpose   string `json:"purpose"`
	Kind      string `json:"kind"`
	Service   string `json:"service"`
	IssuedAt  int64  `json:"issuedAt"`
	Signature string `json:"signature"`
}

// ClaimRequest is POST {basePath}/claim.
type ClaimRequest struct {
	ProtocolVersion string       `json:"protocolVersion"`
	RunnerID        string       `json:"runnerId"`
	Capabilities    []Capability `json:"capabilities"`
	Max             int          `json:"max"`
}

// FetchRequest is POST {basePath}/fetch.
type FetchRequest struct {
	ProtocolVersion string `json:"protocolVersion"`
	RunnerID        string `json:"runnerId"`
	JobID           string `json:"jobId"`
	LeaseID         string `json:"leaseId"`
}

// ResultRequest is POST {basePath}/result.
type ResultRequest struct {
	ProtocolVersion string         `json:"protocolVersion"`
	RunnerID        string         `json:"runnerId"`
	JobID           string         `json:"jobId"`
	LeaseID         string         `json:"leaseId"`
	Envelope        SealedEnvelope `json:"envelope"`
	Disposition     string         `json:"disposition"`
}

// HeartbeatRequest is POST {basePath}/heartbeat. Withheld is [] when absent.
type HeartbeatRequest struct {
	ProtocolVersion string         `json:"protocolVersion"`
	RunnerID        string         `json:"runnerId"`
	DaemonVersion   string         `json:"daemonVersion"`
	Capabilities    []Capability   `json:"capabilities"`
	Withheld        []WithheldKind `json:"withheld"`
	ActiveLeases    []GrantRef     `json:"activeLeases"`
}

// ReleaseRequest is POST {basePath}/release.
type ReleaseRequest struct {
	ProtocolVersion string     `json:"protocolVersion"`
	RunnerID        string     `json:"runnerId"`
	Leases          []GrantRef `json:"leases"`
	Reason          string     `json:"reason"`
}

// DaemonInfo is the daemon block of a pair start.
type DaemonInfo struct {
	Version  string `json:"version"`
	Label    string `json:"label"`
	Platform string `json:"platform"`
}

// PairStartRequest is the device-code start shape of POST {basePath}/pair.
type PairStartRequest struct {
	ProtocolVersion string         `json:"protocolVersion"`
	Action          string         `json:"action"`
	Daemon          DaemonInfo     `json:"daemon"`
	Device          PublicIdentity `json:"device"`
	Capabilities    []Capability   `json:"capabilities"`
}

// PairPollRequest is the device-code poll shape.
type PairPollRequest struct {
	ProtocolVersion string `json:"protocolVersion"`
	Action          string `json:"action"`
	DeviceCode      string `json:"deviceCode"`
}

// PairFixtureRequest is the pre-approved (test harness) shape.
type PairFixtureRequest struct {
	ProtocolVersion string         `json:"protocolVersion"`
	Owner           string         `json:"owner"`
	Device          PublicIdentity `json:"device"`
}

// PairRequest is whichever pair shape matched first (start, poll, fixture);
// exactly one field is non-nil.
type PairRequest struct {
	Start   *PairStartRequest
	Poll    *PairPollRequest
	Fixture *PairFixtureRequest
}

// EnqueueRequest is POST /relay/site/enqueue.
type EnqueueRequest struct {
	ProtocolVersion string  `json:"protocolVersion"`
	SiteID          string  `json:"siteId"`
	Stub            JobStub `json:"stub"`
}

// PayloadRequest is POST /relay/site/payload.
type PayloadRequest struct {
	ProtocolVersion string         `json:"protocolVersion"`
	SiteID          string         `json:"siteId"`
	JobID           string         `json:"jobId"`
	Envelope        SealedEnvelope `json:"envelope"`
}

// CancelRequest is POST /relay/site/cancel.
type CancelRequest struct {
	ProtocolVersion string `json:"protocolVersion"`
	SiteID          string `json:"siteId"`
	JobID           string `json:"jobId"`
}

// SiteQuery is the object a site read (pending, results) is checked as.
type SiteQuery struct {
	SiteID string `json:"siteId"`
}

// ---- nested schemas ----

// DecodePublicIdentity checks PublicIdentity.
func DecodePublicIdentity(v any, path string) (PublicIdentity, error) {
	f, err := StrictObject(v, path, "identity", "encryption", "encryptionSig")
	if err != nil {
		return PublicIdentity{}, err
	}
	var id PublicIdentity
	if id.Identity, err = f.String("identity", 1, -1); err != nil {
		return id, err
	}
	if id.Encryption, err = f.String("encryption", 1, -1); err != nil {
		return id, err
	}
	id.EncryptionSig, err = f.String("encryptionSig", 1, -1)
	return id, err
}

// DecodeSuccession checks Succession.
func DecodeSuccession(v any, path string) (Succession, error) {
	f, err := StrictObject(v, path, "identity", "signature")
	if err != nil {
		return Succession{}, err
	}
	var s Succession
	idv, idp, ok := f.Raw("identity")
	if !ok {
		return s, schemaErr(idp, "required")
	}
	if s.Identity, err = DecodePublicIdentity(idv, idp); err != nil {
		return s, err
	}
	s.Signature, err = f.String("signature", 1, -1)
	return s, err
}

// DecodeCapability checks Capability.
func DecodeCapability(v any, path string) (Capability, error) {
	f, err := StrictObject(v, path, "kind", "service", "backendId", "backendClass", "model", "knownModels", "offerScope")
	if err != nil {
		return Capability{}, err
	}
	var c Capability
	if c.Kind, err = f.Enum("kind", JobKinds...); err != nil {
		return c, err
	}
	if c.Service, err = f.String("service", 1, -1); err != nil {
		return c, err
	}
	if c.BackendID, err = f.Enum("backendId", BackendIDs...); err != nil {
		return c, err
	}
	if c.BackendClass, err = f.Enum("backendClass", BackendClass...); err != nil {
		return c, err
	}
	if c.Model, err = f.String("model", 1, -1); err != nil {
		return c, err
	}
	items, p, present, err := f.OptArray("knownModels", 0, -1)
	if err != nil {
		return c, err
	}
	if present {
		models, err := Each(items, p, DecodeStringItem)
		if err != nil {
			return c, err
		}
		c.KnownModels = &models
	}
	c.OfferScope, err = f.Enum("offerScope", OfferScopes...)
	return c, err
}

func decodeCapabilities(f *Fields, key string) ([]Capability, error) {
	items, p, err := f.Array(key, 0, -1)
	if err != nil {
		return nil, err
	}
	return Each(items, p, DecodeCapability)
}

// DecodeClaimant checks one withheld-kind claimant.
func DecodeClaimant(v any, path string) (Claimant, error) {
	f, err := StrictObject(v, path, "service", "offer")
	if err != nil {
		return Claimant{}, err
	}
	var c Claimant
	if c.Service, err = f.String("service", 1, -1); err != nil {
		return c, err
	}
	c.Offer, err = f.Enum("offer", OfferScopes...)
	return c, err
}

// DecodeWithheldKind checks WithheldKind (at least two claimants).
func DecodeWithheldKind(v any, path string) (WithheldKind, error) {
	f, err := StrictObject(v, path, "kind", "claimants")
	if err != nil {
		return WithheldKind{}, err
	}
	var w WithheldKind
	if w.Kind, err = f.Enum("kind", JobKinds...); err != nil {
		return w, err
	}
	items, p, err := f.Array("claimants", 2, -1)
	if err != nil {
		return w, err
	}
	w.Claimants, err = Each(items, p, DecodeClaimant)
	return w, err
}

// DecodeGrantRef checks GrantRef.
func DecodeGrantRef(v any, path string) (GrantRef, error) {
	f, err := StrictObject(v, path, "jobId", "leaseId")
	if err != nil {
		return GrantRef{}, err
	}
	var g GrantRef
	if g.JobID, err = f.String("jobId", 1, -1); err != nil {
		return g, err
	}
	g.LeaseID, err = f.String("leaseId", 1, -1)
	return g, err
}

func decodeGrantRefs(f *Fields, key string) ([]GrantRef, error) {
	items, p, err := f.Array(key, 0, MaxGrantRefs)
	if err != nil {
		return nil, err
	}
	return Each(items, p, DecodeGrantRef)
}

// DecodeJobStub checks JobStub.
func DecodeJobStub(v any, path string) (JobStub, error) {
	f, err := StrictObject(v, path, "id", "kind", "owner", "site", "audience", "purpose", "sizeClass", "streaming", "deadlineAt")
	if err != nil {
		return JobStub{}, err
	}
	var s JobStub
	if s.ID, err = f.String("id", 1, -1); err != nil {
		return s, err
	}
	if s.Kind, err = f.Enum("kind", JobKinds...); err != nil {
		return s, err
	}
	if s.Owner, err = f.String("owner", 1, -1); err != nil {
		return s, err
	}
	if s.Site, err = f.String("site", 1, -1); err != nil {
		return s, err
	}
	if s.Audience, err = f.Enum("audience", Audiences...); err != nil {
		return s, err
	}
	if s.Purpose, _, err = f.OptString("purpose", 1, -1); err != nil {
		return s, err
	}
	if s.SizeClass, err = f.Enum("sizeClass", SizeClasses...); err != nil {
		return s, err
	}
	if s.Streaming, err = f.Bool("streaming"); err != nil {
		return s, err
	}
	s.DeadlineAt, err = f.Int("deadlineAt", 1, MaxSafeInteger)
	return s, err
}

// DecodeSealedEnvelope checks SealedEnvelope.
func DecodeSealedEnvelope(v any, path string) (SealedEnvelope, error) {
	f, err := StrictObject(v, path, "ciphertext", "recipientKeyId", "senderKeyId", "direction", "deadlineAt")
	if err != nil {
		return SealedEnvelope{}, err
	}
	var e SealedEnvelope
	if e.Ciphertext, err = f.String("ciphertext", 1, -1); err != nil {
		return e, err
	}
	if e.RecipientKeyID, err = f.String("recipientKeyId", 1, -1); err != nil {
		return e, err
	}
	if e.SenderKeyID, err = f.String("senderKeyId", 1, -1); err != nil {
		return e, err
	}
	if e.Direction, err = f.Enum("direction", Directions...); err != nil {
		return e, err
	}
	e.DeadlineAt, err = f.Int("deadlineAt", 1, MaxSafeInteger)
	return e, err
}

func nested[T any](f *Fields, key string, dec func(any, string) (T, error)) (T, error) {
	v, p, ok := f.Raw(key)
	if !ok {
		var zero T
		return zero, schemaErr(p, "required")
	}
	return dec(v, p)
}

// ---- daemon plane ----

// DecodeClaimRequest checks ClaimRequest.
func DecodeClaimRequest(v any) (ClaimRequest, error) {
	var r ClaimRequest
	f, err := StrictObject(v, "", "protocolVersion", "runnerId", "capabilities", "max")
	if err != nil {
		return r, err
	}
	if r.ProtocolVersion, err = f.Literal("protocolVersion", ProtocolVersion); err != nil {
		return r, err
	}
	if r.RunnerID, err = f.String("runnerId", 1, -1); err != nil {
		return r, err
	}
	if r.Capabilities, err = decodeCapabilities(f, "capabilities"); err != nil {
		return r, err
	}
	n, err := f.Int("max", 1, MaxClaim)
	r.Max = int(n)
	return r, err
}

// DecodeFetchRequest checks FetchRequest.
func DecodeFetchRequest(v any) (FetchRequest, error) {
	var r FetchRequest
	f, err := StrictObject(v, "", "protocolVersion", "runnerId", "jobId", "leaseId")
	if err != nil {
		return r, err
	}
	if r.ProtocolVersion, err = f.Literal("protocolVersion", ProtocolVersion); err != nil {
		return r, err
	}
	if r.RunnerID, err = f.String("runnerId", 1, -1); err != nil {
		return r, err
	}
	if r.JobID, err = f.String("jobId", 1, -1); err != nil {
		return r, err
	}
	r.LeaseID, err = f.String("leaseId", 1, -1)
	return r, err
}

// DecodeResultRequest checks ResultRequest.
func DecodeResultRequest(v any) (ResultRequest, error) {
	var r ResultRequest
	f, err := StrictObject(v, "", "protocolVersion", "runnerId", "jobId", "leaseId", "envelope", "disposition")
	if err != nil {
		return r, err
	}
	if r.ProtocolVersion, err = f.Literal("protocolVersion", ProtocolVersion); err != nil {
		return r, err
	}
	if r.RunnerID, err = f.String("runnerId", 1, -1); err != nil {
		return r, err
	}
	if r.JobID, err = f.String("jobId", 1, -1); err != nil {
		return r, err
	}
	if r.LeaseID, err = f.String("leaseId", 1, -1); err != nil {
		return r, err
	}
	if r.Envelope, err = nested(f, "envelope", DecodeSealedEnvelope); err != nil {
		return r, err
	}
	r.Disposition, err = f.Enum("disposition", Dispositions...)
	return r, err
}

// DecodeHeartbeatRequest checks HeartbeatRequest; withheld defaults to [].
func DecodeHeartbeatRequest(v any) (HeartbeatRequest, error) {
	var r HeartbeatRequest
	f, err := StrictObject(v, "", "protocolVersion", "runnerId", "daemonVersion", "capabilities", "withheld", "activeLeases")
	if err != nil {
		return r, err
	}
	if r.ProtocolVersion, err = f.Literal("protocolVersion", ProtocolVersion); err != nil {
		return r, err
	}
	if r.RunnerID, err = f.String("runnerId", 1, -1); err != nil {
		return r, err
	}
	if r.DaemonVersion, err = f.String("daemonVersion", 1, -1); err != nil {
		return r, err
	}
	if r.Capabilities, err = decodeCapabilities(f, "capabilities"); err != nil {
		return r, err
	}
	items, p, present, err := f.OptArray("withheld", 0, -1)
	if err != nil {
		return r, err
	}
	r.Withheld = []WithheldKind{}
	if present {
		if r.Withheld, err = Each(items, p, DecodeWithheldKind); err != nil {
			return r, err
		}
	}
	r.ActiveLeases, err = decodeGrantRefs(f, "activeLeases")
	return r, err
}

// DecodeReleaseRequest checks ReleaseRequest (reason required).
func DecodeReleaseRequest(v any) (ReleaseRequest, error) {
	var r ReleaseRequest
	f, err := StrictObject(v, "", "protocolVersion", "runnerId", "leases", "reason")
	if err != nil {
		return r, err
	}
	if r.ProtocolVersion, err = f.Literal("protocolVersion", ProtocolVersion); err != nil {
		return r, err
	}
	if r.RunnerID, err = f.String("runnerId", 1, -1); err != nil {
		return r, err
	}
	if r.Leases, err = decodeGrantRefs(f, "leases"); err != nil {
		return r, err
	}
	r.Reason, err = f.Enum("reason", ReleaseReason...)
	return r, err
}

// DecodeDaemonInfo checks the pair start daemon block.
func DecodeDaemonInfo(v any, path string) (DaemonInfo, error) {
	f, err := StrictObject(v, path, "version", "label", "platform")
	if err != nil {
		return DaemonInfo{}, err
	}
	var d DaemonInfo
	if d.Version, err = f.String("version", 1, -1); err != nil {
		return d, err
	}
	if d.Label, err = f.String("label", 1, MaxLabel); err != nil {
		return d, err
	}
	d.Platform, err = f.Enum("platform", Platforms...)
	return d, err
}

// DecodePairStartRequest checks PairStartRequest.
func DecodePairStartRequest(v any) (PairStartRequest, error) {
	var r PairStartRequest
	f, err := StrictObject(v, "", "protocolVersion", "action", "daemon", "device", "capabilities")
	if err != nil {
		return r, err
	}
	if r.ProtocolVersion, err = f.Literal("protocolVersion", ProtocolVersion); err != nil {
		return r, err
	}
	if r.Action, err = f.Literal("action", "start"); err != nil {
		return r, err
	}
	if r.Daemon, err = nested(f, "daemon", DecodeDaemonInfo); err != nil {
		return r, err
	}
	if r.Device, err = nested(f, "device", DecodePublicIdentity); err != nil {
		return r, err
	}
	r.Capabilities, err = decodeCapabilities(f, "capabilities")
	return r, err
}

// DecodePairPollRequest checks PairPollRequest.
func DecodePairPollRequest(v any) (PairPollRequest, error) {
	var r PairPollRequest
	f, err := StrictObject(v, "", "protocolVersion", "action", "deviceCode")
	if err != nil {
		return r, err
	}
	if r.ProtocolVersion, err = f.Literal("protocolVersion", ProtocolVersion); err != nil {
		return r, err
	}
	if r.Action, err = f.Literal("action", "poll"); err != nil {
		return r, err
	}
	r.DeviceCode, err = f.String("deviceCode", MinDeviceCode, -1)
	return r, err
}

// DecodePairFixtureRequest checks PairFixtureRequest.
func DecodePairFixtureRequest(v any) (PairFixtureRequest, error) {
	var r PairFixtureRequest
	f, err := StrictObject(v, "", "protocolVersion", "owner", "device")
	if err != nil {
		return r, err
	}
	if r.ProtocolVersion, err = f.Literal("protocolVersion", ProtocolVersion); err != nil {
		return r, err
	}
	if r.Owner, err = f.String("owner", 1, -1); err != nil {
		return r, err
	}
	r.Device, err = nested(f, "device", DecodePublicIdentity)
	return r, err
}

// DecodePairRequest tries start, poll and fixture in that order (§8.1). ok
// is false when none matched (refusal row 11).
func DecodePairRequest(v any) (PairRequest, bool) {
	if r, err := DecodePairStartRequest(v); err == nil {
		return PairRequest{Start: &r}, true
	}
	if r, err := DecodePairPollRequest(v); err == nil {
		return PairRequest{Poll: &r}, true
	}
	if r, err := DecodePairFixtureRequest(v); err == nil {
		return PairRequest{Fixture: &r}, true
	}
	return PairRequest{}, false
}

// ---- site plane ----

// DecodeEnqueueRequest checks the enqueue body.
func DecodeEnqueueRequest(v any) (EnqueueRequest, error) {
	var r EnqueueRequest
	f, err := StrictObject(v, "", "protocolVersion", "siteId", "stub")
	if err != nil {
		return r, err
	}
	if r.ProtocolVersion, err = f.Literal("protocolVersion", ProtocolVersion); err != nil {
		return r, err
	}
	if r.SiteID, err = f.String("siteId", 1, -1); err != nil {
		return r, err
	}
	r.Stub, err = nested(f, "stub", DecodeJobStub)
	return r, err
}

// DecodePayloadRequest checks the payload body.
func DecodePayloadRequest(v any) (PayloadRequest, error) {
	var r PayloadRequest
	f, err := StrictObject(v, "", "protocolVersion", "siteId", "jobId", "envelope")
	if err != nil {
		return r, err
	}
	if r.ProtocolVersion, err = f.Literal("protocolVersion", ProtocolVersion); err != nil {
		return r, err
	}
	if r.SiteID, err = f.String("siteId", 1, -1); err != nil {
		return r, err
	}
	if r.JobID, err = f.String("jobId", 1, -1); err != nil {
		return r, err
	}
	r.Envelope, err = nested(f, "envelope", DecodeSealedEnvelope)
	return r, err
}

// DecodeCancelRequest checks the cancel body.
func DecodeCancelRequest(v any) (CancelRequest, error) {
	var r CancelRequest
	f, err := StrictObject(v, "", "protocolVersion", "siteId", "jobId")
	if err != nil {
		return r, err
	}
	if r.ProtocolVersion, err = f.Literal("protocolVersion", ProtocolVersion); err != nil {
		return r, err
	}
	if r.SiteID, err = f.String("siteId", 1, -1); err != nil {
		return r, err
	}
	r.JobID, err = f.String("jobId", 1, -1)
	return r, err
}

// DecodeSiteQuery checks a read's query object, built as {siteId: query
// siteId or ""} (§9.4): an empty or missing siteId fails.
func DecodeSiteQuery(siteID string) (SiteQuery, error) {
	s, err := CheckString(siteID, "siteId", 1, -1)
	return SiteQuery{SiteID: s}, err
}
