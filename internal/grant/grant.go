// Package grant holds the types of the grant seam (wire.md §14.1, §14.2):
// what the relay hands a grant authority for each claimed job and for each
// enqueue, and what it reads back. The authorities themselves (the built-in
// engine, a remote signer, a remote authority) implement the relay's
// consumer-side interface with these types; the relay never reads a grant,
// it carries the signed document verbatim.
package grant

import "encoding/json"

// Request is the input of authorGrant for one claimed job: {job (the
// ClaimedStub with its lease), siteId, siteKey, purpose?, owner, runnerId,
// capabilities}.
type Request struct {
	// Job is the exact ClaimedStub JSON the daemon will receive (stub fields,
	// then lease), without a grant.
	Job          json.RawMessage
	SiteID       string
	SiteKey      string // the stub's site key id (job.site)
	Purpose      string // "" when the stub carries none
	HasPurpose   bool
	Owner        string
	RunnerID     string
	Capabilities json.RawMessage // the claim request's capability matrix, verbatim
}

// Decision is authorGrant's answer: a signed grant, or a decline.
type Decision struct {
	// Granted is the signed grant document, carried verbatim into the claim
	// reply; nil when declined.
	Granted json.RawMessage
	// Permanent marks a decline the runner must never be offered again
	// (released as "refused"); other declines are retried after 30 s.
	Permanent bool
	Reason    string // logged only; never sent to a client
}

// SatisfiableRequest is the relay's side of satisfiable: {siteId, owner,
// purpose, kind}. The engine's own parameter is "user"; adapters map it.
type SatisfiableRequest struct {
	SiteID     string
	Owner      string
	Purpose    string
	HasPurpose bool
	Kind       string
}

// Verdict is satisfiable's answer. Anything but the three refusals lets the
// enqueue continue.
type Verdict string

const (
	VerdictOK          Verdict = "ok"
	VerdictNotDeclared Verdict = "not-declared"
	VerdictUnmapped    Verdict = "unmapped"
	VerdictWaiting     Verdict = "waiting"
)
