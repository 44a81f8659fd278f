package loadgen

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/byollm/relay-go/internal/grantengine"
	"github.com/byollm/relay-go/internal/protocol"
)

// checkGrant accepts a grant the engine signed for this job and device, and
// refuses every way a grant can be wrong, so a -grants run's "grants
// verified" counts only grants a daemon would take.
func TestCheckGrant(t *testing.T) {
	t.Parallel()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	_, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	const now = int64(1_800_000_000_000)
	d := &daemon{owner: "alice", controlPlanePublic: pub}
	stub := claimedStub{JobStub: protocol.JobStub{ID: "job-1", Kind: protocol.KindGenerate, Owner: "bob", Site: "SITE-KEY"}}
	claims := grantengine.Claims{GrantID: "grant_1", JobID: "job-1", Site: "SITE-KEY", User: "bob", Owner: "alice",
		Purpose: "default", Kind: protocol.KindGenerate, Service: "loadgen", IssuedAt: now - 1000}
	sign := func(c grantengine.Claims, key ed25519.PrivateKey) claimedStub {
		doc, err := grantengine.SignGrant(context.Background(), grantengine.NewKeySigner(key), c)
		if err != nil {
			t.Fatal(err)
		}
		s := stub
		s.Grant = doc
		return s
	}
	if err := checkGrant(sign(claims, priv), d, now); err != nil {
		t.Fatalf("a good grant: %v", err)
	}
	with := func(f func(*grantengine.Claims)) grantengine.Claims { c := claims; f(&c); return c }
	tampered := sign(claims, priv)
	tampered.Grant = []byte(strings.Replace(string(tampered.Grant), `"service":"loadgen"`, `"service":"other"`, 1))
	for name, tc := range map[string]struct {
		cs   claimedStub
		want string
	}{
		"none":          {stub, "no grant"},
		"other key":     {sign(claims, otherPriv), "does not verify"},
		"tampered":      {tampered, "does not verify"},
		"other job":     {sign(with(func(c *grantengine.Claims) { c.JobID = "job-2" }), priv), "names job"},
		"other owner":   {sign(with(func(c *grantengine.Claims) { c.Owner = "carol" }), priv), "for owner"},
		"other user":    {sign(with(func(c *grantengine.Claims) { c.User = "carol" }), priv), "names user"},
		"aged past 120": {sign(with(func(c *grantengine.Claims) { c.IssuedAt = now - 120_001 }), priv), "ms from now"},
		"from a future": {sign(with(func(c *grantengine.Claims) { c.IssuedAt = now + 60_000 }), priv), "ms from now"},
	} {
		if err := checkGrant(tc.cs, d, now); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}
