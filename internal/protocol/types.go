// Package protocol holds the wire vocabulary of BYOLLM protocol 2 as spoken by
// @byollm/relay@0.1.1: schemas, strict decoding, request signatures, key ids,
// version handshake and the refusal catalogue.
//
// Field order in these structs is the reference's key order; encoding them with
// Marshal (JS-style escaping, no trailing newline) reproduces its bytes.
package protocol

// ProtocolVersion is the only version this relay speaks.
const ProtocolVersion = "2"

// PublicIdentity is a device's or site's public key set. The relay never holds
// the matching private keys.
type PublicIdentity struct {
	Identity      string `json:"identity"`
	Encryption    string `json:"encryption"`
	EncryptionSig string `json:"encryptionSig"`
}

// Job kinds, audiences, size classes and offer scopes of protocol 2.
const (
	KindGenerate = "llm.generate"
	KindChat     = "llm.chat"

	AudiencePrivate = "private"
	AudienceTeam    = "team"
)

// JobStub is the routing metadata a site publishes. Site is the site's key id,
// not its site id.
type JobStub struct {
	ID         string `json:"id"`
	Kind       string `json:"kind"`
	Owner      string `json:"owner"`
	Site       string `json:"site"`
	Audience   string `json:"audience"`
	Purpose    string `json:"purpose,omitempty"`
	SizeClass  string `json:"sizeClass"`
	Streaming  bool   `json:"streaming"`
	DeadlineAt int64  `json:"deadlineAt"`
}

// SealedEnvelope is ciphertext the relay carries and can never open.
type SealedEnvelope struct {
	Ciphertext     string `json:"ciphertext"`
	RecipientKeyID string `json:"recipientKeyId"`
	SenderKeyID    string `json:"senderKeyId"`
	Direction      string `json:"direction"`
	DeadlineAt     int64  `json:"deadlineAt"`
}

// Capability is one row of a daemon's capability matrix.
type Capability struct {
	Kind         string    `json:"kind"`
	Service      string    `json:"service"`
	BackendID    string    `json:"backendId"`
	BackendClass string    `json:"backendClass"`
	Model        string    `json:"model"`
	KnownModels  *[]string `json:"knownModels,omitempty"` // nil: absent; empty is a value
	OfferScope   string    `json:"offerScope"`
}

// Claimant is one service competing for a withheld kind.
type Claimant struct {
	Service string `json:"service"`
	Offer   string `json:"offer"`
}

// WithheldKind is a kind the daemon will not serve until its owner chooses
// between at least two claimants.
type WithheldKind struct {
	Kind      string     `json:"kind"`
	Claimants []Claimant `json:"claimants"`
}

// GrantRef names one grant: a job and the lease under which it is held.
type GrantRef struct {
	JobID   string `json:"jobId"`
	LeaseID string `json:"leaseId"`
}

// Lease is the grant handed to a daemon with a claimed stub.
type Lease struct {
	ID        string `json:"id"`
	RunnerID  string `json:"runnerId"`
	ExpiresAt int64  `json:"expiresAt"`
}

// Succession links a site's current key to a predecessor.
type Succession struct {
	Identity  PublicIdentity `json:"identity"`
	Signature string         `json:"signature"`
}

// Route is one (site, job owner) pair a device may take work from: a job
// stub is routed by its siteId and owner. The projection decides which
// routes a device has (projection.RoutesFor); the store claims by them.
type Route struct {
	SiteID string
	Owner  string
}
