package loadgen

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/byollm/relay-go/internal/grantengine"
)

// grantMaxAgeMs is how old a grant the daemon still accepts (its
// GRANT_MAX_AGE_MS); a little clock skew is allowed the other way.
const (
	grantMaxAgeMs  = 120_000
	grantMaxSkewMs = 5_000
)

// checkGrant is the daemon's verifyGrant, as far as a load run needs it: the
// claimed stub carries a grant for this job and this device's owner, naming
// the stub's site, owner and kind, fresh, and signed over the grant
// statement (wire.md §14.1) with the key the device pinned at pairing.
func checkGrant(cs claimedStub, d *daemon, now int64) error {
	if len(cs.Grant) == 0 {
		return errors.New("no grant on a teammate's job")
	}
	var g struct {
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
	if err := json.Unmarshal(cs.Grant, &g); err != nil {
		return fmt.Errorf("grant is not a SignedGrant: %w", err)
	}
	switch {
	case g.JobID != cs.ID:
		return fmt.Errorf("grant names job %q", g.JobID)
	case g.Owner != d.owner:
		return fmt.Errorf("grant is for owner %q, the device's is %q", g.Owner, d.owner)
	case g.User != cs.Owner || g.Site != cs.Site || g.Kind != cs.Kind:
		return fmt.Errorf("grant names user %q site %q kind %q, the stub %q %q %q", g.User, g.Site, g.Kind, cs.Owner, cs.Site, cs.Kind)
	case now-g.IssuedAt > grantMaxAgeMs || g.IssuedAt-now > grantMaxSkewMs:
		return fmt.Errorf("grant issued at %d, %d ms from now", g.IssuedAt, now-g.IssuedAt)
	}
	sig, err := base64.RawURLEncoding.DecodeString(g.Signature)
	if err != nil {
		return errors.New("grant signature is not base64url")
	}
	statement := grantengine.Statement(grantengine.Claims{
		GrantID: g.GrantID, JobID: g.JobID, Site: g.Site, User: g.User, Owner: g.Owner,
		Purpose: g.Purpose, Kind: g.Kind, Service: g.Service, IssuedAt: g.IssuedAt,
	})
	if !ed25519.Verify(d.controlPlanePublic, statement, sig) {
		return errors.New("grant signature does not verify against the pinned controlPlanePublic")
	}
	return nil
}
