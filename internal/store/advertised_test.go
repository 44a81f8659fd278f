package store

import (
	"context"
	"encoding/json"
	"sort"
	"testing"

	"github.com/byollm/relay-go/internal/protocol"
)

// Advertised answers from one owner's presence records only, follows
// heartbeats (capabilities replaced), and forgets a dropped record; owners
// whose ids differ only in where ':' or '{' falls are kept apart.
func TestAdvertisedByOwner(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		s := newStore(t, b, Options{})
		ctx := context.Background()
		caps := func(services ...string) json.RawMessage {
			var out []protocol.Capability
			for _, sv := range services {
				out = append(out, protocol.Capability{Kind: "llm.generate", Service: sv, BackendID: "ollama", BackendClass: "local", Model: "m", OfferScope: "team"})
			}
			return protocol.MustMarshal(out)
		}
		seen := func(runner, owner string, c json.RawMessage) {
			t.Helper()
			if _, err := s.Seen(ctx, Presence{RunnerID: runner, Owner: owner, Capabilities: c}); err != nil {
				t.Fatal(err)
			}
		}
		services := func(owner string) []string {
			t.Helper()
			got, err := s.Advertised(ctx, owner)
			if err != nil {
				t.Fatal(err)
			}
			out := []string{}
			for _, c := range got {
				out = append(out, c.Service)
			}
			sort.Strings(out)
			return out
		}
		seen("r1", "bob", caps("qwen"))
		seen("r2", "bob", caps("llama", "mistral"))
		seen("r3", "bob:{x}", caps("other"))
		seen("r4", "bob:", caps("x"))
		if got := services("bob"); len(got) != 3 || got[0] != "llama" || got[1] != "mistral" || got[2] != "qwen" {
			t.Fatalf("bob advertises %v", got)
		}
		if got := services("bob:{x}"); len(got) != 1 || got[0] != "other" {
			t.Fatalf("bob:{x} advertises %v", got)
		}
		if got := services("nobody"); len(got) != 0 {
			t.Fatalf("nobody advertises %v", got)
		}
		seen("r2", "bob", caps()) // the service was withdrawn
		if got := services("bob"); len(got) != 1 || got[0] != "qwen" {
			t.Fatalf("after r2 withdrew: %v", got)
		}
		if err := s.DropPresence(ctx, "r1"); err != nil {
			t.Fatal(err)
		}
		if got := services("bob"); len(got) != 0 {
			t.Fatalf("after r1 dropped: %v", got)
		}
	})
}
