package grantengine_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/grant"
	"github.com/byollm/relay-go/internal/grantengine"
	"github.com/byollm/relay-go/internal/policy"
	"github.com/byollm/relay-go/internal/valkeyconn"
	"github.com/byollm/relay-go/test/relaytest"
)

// Both key file forms load the same key; anything else is refused with what
// is wrong.
func TestParseKeyForms(t *testing.T) {
	t.Parallel()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	want := base64.RawURLEncoding.EncodeToString(pub)
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	stored := func(public string) string {
		b, _ := json.Marshal(map[string]any{"version": 1, "identityPublic": public,
			"identityPrivate": base64.StdEncoding.EncodeToString(der), "encryptionPublic": "x", "createdAt": 1})
		return string(b)
	}
	for name, text := range map[string]string{
		"seed base64url":       base64.RawURLEncoding.EncodeToString(priv.Seed()) + "\n",
		"seed base64 padded":   base64.StdEncoding.EncodeToString(priv.Seed()),
		"StoredKeys JSON":      stored(want),
		"SeedText round trip":  string(grantengine.SeedText(priv)),
		"seed with whitespace": "  " + base64.RawURLEncoding.EncodeToString(priv.Seed()) + "\n\n",
	} {
		k, err := grantengine.ParseKey([]byte(text))
		if err != nil || k.Public() != want {
			t.Errorf("%s: %v %v", name, err, k)
		}
	}
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	for name, tc := range map[string]struct{ text, want string }{
		"empty":           {"", "empty"},
		"not base64":      {"!!!", "not base64"},
		"short seed":      {"AAECAw", "want 32"},
		"public mismatch": {stored(base64.RawURLEncoding.EncodeToString(other)), "identityPublic: is not the public half"},
		"no private":      {`{"identityPublic":"x"}`, "identityPrivate"},
		"private not DER": {`{"identityPublic":"x","identityPrivate":"AAAA"}`, "not PKCS#8"},
		"broken JSON":     {`{"identityPublic":`, "not valid JSON"},
	} {
		if _, err := grantengine.ParseKey([]byte(tc.text)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.want)
		}
	}
}

// The statement is JSON.stringify of the sorted fields: a lone surrogate in
// an id is written as \udxxx (JS), U+2028 raw, quotes escaped.
func TestStatementEscapesAsJS(t *testing.T) {
	t.Parallel()
	got := string(grantengine.Statement(grantengine.Claims{GrantID: "g", JobID: "j\xed\xa0\x80", Site: "s\"", User: "u\u2028",
		Owner: "o", Purpose: "default", Kind: "k", Service: "q", IssuedAt: 1760000000000}))
	want := `["byollm/v1/grant","g",1760000000000,"j\ud800","k","o","default","q","s\"","u` + "\u2028" + `"]`
	if got != want {
		t.Fatalf("statement\n got %s\nwant %s", got, want)
	}
}

func job(owner string) json.RawMessage {
	return json.RawMessage(`{"id":"job-1","kind":"llm.generate","owner":"` + owner + `","site":"KEY","audience":"team","sizeClass":"small","streaming":false,"deadlineAt":1,"lease":{"id":"l","runnerId":"r","expiresAt":2}}`)
}

const caps = `[{"kind":"llm.generate","service":"qwen","backendId":"ollama","backendClass":"local","model":"m","offerScope":"team"}]`

// Without a now, issuedAt is the store clock the policy read returned (the
// relay's Valkey TIME), and the grant verifies.
func TestIssuedAtFromStoreClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := relaytest.Embedded(t)
	pol, err := policy.NewStore(c, relaytest.Namespace(t, c))
	if err != nil {
		t.Fatal(err)
	}
	if err := pol.Consent(ctx, "site", "alice", []grantengine.Mapping{{Purpose: "default", Kind: "llm.generate", Service: "qwen"}}); err != nil {
		t.Fatal(err)
	}
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer := grantengine.NewKeySigner(priv)
	eng, err := grantengine.New(pol, nil, signer, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := timeMs(t, ctx, c)
	d, err := eng.AuthorGrant(ctx, grant.Request{Job: job("alice"), SiteID: "site", SiteKey: "KEY", Owner: "alice", RunnerID: "r", Capabilities: json.RawMessage(caps)})
	after := timeMs(t, ctx, c)
	if err != nil || d.Granted == nil {
		t.Fatalf("decision %+v %v", d, err)
	}
	var g struct {
		IssuedAt  int64  `json:"issuedAt"`
		Signature string `json:"signature"`
		Purpose   string `json:"purpose"`
	}
	json.Unmarshal(d.Granted, &g) //nolint:errcheck
	if g.IssuedAt < before || g.IssuedAt > after || g.Purpose != "default" {
		t.Fatalf("issuedAt %d not within the store clock [%d, %d] (or purpose %q)", g.IssuedAt, before, after, g.Purpose)
	}
	if !strings.HasPrefix(string(d.Granted), `{"grantId":"grant_`) || !strings.Contains(string(d.Granted), `"issuedAt":`+strconv.FormatInt(g.IssuedAt, 10)+`,"signature":"`) {
		t.Fatalf("document %s", d.Granted)
	}
	sig, _ := base64.RawURLEncoding.DecodeString(g.Signature)
	pubBytes, _ := base64.RawURLEncoding.DecodeString(eng.Public())
	var claims map[string]any
	json.Unmarshal(d.Granted, &claims) //nolint:errcheck
	st := grantengine.Statement(grantengine.Claims{GrantID: claims["grantId"].(string), JobID: "job-1", Site: "KEY", User: "alice", Owner: "alice",
		Purpose: "default", Kind: "llm.generate", Service: "qwen", IssuedAt: g.IssuedAt})
	if !ed25519.Verify(pubBytes, st, sig) {
		t.Fatal("signature does not verify")
	}
}

// timeMs reads the store's clock as the scripts do: TIME in ms.
func timeMs(t *testing.T, ctx context.Context, c valkey.Client) int64 {
	t.Helper()
	parts, err := c.Do(ctx, c.B().Time().Build()).AsStrSlice()
	if err != nil || len(parts) != 2 {
		t.Fatalf("TIME: %v %v", parts, err)
	}
	sec, _ := strconv.ParseInt(parts[0], 10, 64)
	usec, _ := strconv.ParseInt(parts[1], 10, 64)
	return sec*1000 + usec/1000
}

// A policy store that cannot answer is a transient decline at claim
// (store-unavailable, never permanent) and an error at enqueue (the relay
// answers 503).
func TestStoreFailureIsTransient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, closeFn, _, err := valkeyconn.Open(ctx, "", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.NewStore(c, "enginefail")
	if err != nil {
		t.Fatal(err)
	}
	closeFn() // the store is gone
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	eng, _ := grantengine.New(pol, nil, grantengine.NewKeySigner(priv), func() int64 { return 1 })
	d, err := eng.AuthorGrant(ctx, grant.Request{Job: job("alice"), SiteID: "site", SiteKey: "KEY", Owner: "bob", Capabilities: json.RawMessage(caps)})
	if err != nil || d.Granted != nil || d.Permanent || d.Reason != grantengine.ReasonStoreUnavailable {
		t.Fatalf("decision %+v %v", d, err)
	}
	if v, err := eng.Satisfiable(ctx, grant.SatisfiableRequest{SiteID: "site", Owner: "alice", Kind: "llm.generate"}); err == nil {
		t.Fatalf("satisfiable answered %q with the store gone", v)
	}
	// A job the engine cannot read is an error (the relay declines it
	// transiently), not a grant.
	if _, err := eng.AuthorGrant(ctx, grant.Request{Job: json.RawMessage(`{"id":"j"}`), Owner: "bob"}); err == nil {
		t.Fatal("a job without owner and kind was decided")
	}
}
