package grantengine_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"testing"

	"github.com/byollm/relay-go/internal/grant"
	"github.com/byollm/relay-go/internal/grantengine"
	"github.com/byollm/relay-go/internal/policy"
	"github.com/byollm/relay-go/test/relaytest"
)

// BenchmarkAuthorGrant is one granted teammate's job against the real
// Valkey: the policy read (one script, which also reads TIME) and one
// Ed25519 signature. The issue budgets about 20 µs of relay CPU for it;
// wall time here includes the round trip.
//
//	go test -p 1 -run '^$' -bench AuthorGrant ./internal/grantengine/
func BenchmarkAuthorGrant(b *testing.B) {
	ctx := context.Background()
	c := relaytest.Client(b)
	pol, err := policy.NewStore(c, relaytest.Namespace(b, c))
	if err != nil {
		b.Fatal(err)
	}
	bob := "bob"
	if err := pol.Consent(ctx, "site", "alice", []grantengine.Mapping{{Purpose: "default", Kind: "llm.generate", Service: "qwen", Owner: &bob}}); err != nil {
		b.Fatal(err)
	}
	if err := pol.AddMember(ctx, "bob", "alice"); err != nil {
		b.Fatal(err)
	}
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	eng, _ := grantengine.New(pol, nil, grantengine.NewKeySigner(priv), nil)
	req := grant.Request{Job: job("alice"), SiteID: "site", SiteKey: "KEY", Owner: "bob", RunnerID: "r", Capabilities: json.RawMessage(caps)}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := relaytest.ProcessCPU(b)
	for i := 0; i < b.N; i++ {
		d, err := eng.AuthorGrant(ctx, req)
		if err != nil || d.Granted == nil {
			b.Fatalf("%+v %v", d, err)
		}
	}
	// The relay's own CPU per grant (this process: user + system), which is
	// what the budget is about; the wall time also waits on Valkey.
	b.ReportMetric(float64(relaytest.ProcessCPU(b)-cpu0)/float64(b.N)/1000, "relay-cpu-µs/op")
}

// BenchmarkSign is the signature alone (statement, Ed25519, document).
func BenchmarkSign(b *testing.B) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	s := grantengine.NewKeySigner(priv)
	c := grantengine.Claims{GrantID: "grant_0123456789", JobID: "job-1", Site: "BYOLLM-AAAA-BBBB-CCCC-DDDD-EEEE-FFFF", User: "alice",
		Owner: "bob", Purpose: "default", Kind: "llm.generate", Service: "qwen", IssuedAt: 1760000000000}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := grantengine.SignGrant(context.Background(), s, c); err != nil {
			b.Fatal(err)
		}
	}
}
