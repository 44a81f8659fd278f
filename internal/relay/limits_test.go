package relay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
)

// A heartbeat or release naming more than protocol.MaxGrantRefs grants is
// the schema refusal and touches nothing; one at the cap is served (in
// store.GrantChunk script calls) with the held grant renewed or released
// wherever it sits in the list.
func TestGrantListCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newWorld(t)
	w.install(e)
	lease := e.enqueueAndClaim(t, w, "cap1", "bob", w.bob, "runner_bob")
	held := protocol.GrantRef{JobID: "cap1", LeaseID: lease.ID}

	grants := func(n int) []protocol.GrantRef {
		out := make([]protocol.GrantRef, n)
		for i := range out {
			out[i] = protocol.GrantRef{JobID: fmt.Sprintf("ghost-%d", i), LeaseID: "no-such-lease"}
		}
		out[n-1] = held // in the last chunk
		return out
	}

	t.Run("over the cap is refused", func(t *testing.T) {
		before, _ := e.st.Job(t.Context(), "site_a", "cap1")
		expect(t, e.daemonPost(w.bob, "runner_bob", "heartbeat",
			heartbeatJSON(t, "runner_bob", "0.1.1", grants(protocol.MaxGrantRefs+1)...)), 400, schemaBody)
		expect(t, e.daemonPost(w.bob, "runner_bob", "release",
			releaseJSON(t, "runner_bob", "pause", grants(protocol.MaxGrantRefs+1)...)), 400, schemaBody)
		after, _ := e.st.Job(t.Context(), "site_a", "cap1")
		if after.State != before.State || after.ClaimedBy.LeaseExpiresAt != before.ClaimedBy.LeaseExpiresAt {
			t.Fatalf("a refused request changed the job: %+v -> %+v", before, after)
		}
	})

	t.Run("at the cap is served", func(t *testing.T) {
		got := e.daemonPost(w.bob, "runner_bob", "heartbeat", heartbeatJSON(t, "runner_bob", "0.1.1", grants(protocol.MaxGrantRefs)...))
		var r hbResponse
		if got.status != 200 || json.Unmarshal(got.body, &r) != nil {
			t.Fatalf("heartbeat: %d %s", got.status, got.body)
		}
		if len(r.Lost) != protocol.MaxGrantRefs-1 || r.Lost[0].JobID != "ghost-0" {
			t.Fatalf("lost %d grants (first %+v), want the %d unknown ones in order", len(r.Lost), r.Lost[0], protocol.MaxGrantRefs-1)
		}
		expect(t, e.daemonPost(w.bob, "runner_bob", "release",
			releaseJSON(t, "runner_bob", "pause", grants(protocol.MaxGrantRefs)...)), 200, `{"released":["cap1"]}`)
	})
}

// advertBody is a heartbeat (or, with max, a claim) body carrying a matrix
// and a withheld list.
func advertBody(t *testing.T, endpoint string, caps []protocol.Capability, withheld []protocol.WithheldKind) []byte {
	t.Helper()
	if endpoint == "claim" {
		return mustJSON(t, map[string]any{"protocolVersion": "2", "runnerId": "runner_bob", "capabilities": caps, "max": 1})
	}
	if withheld == nil {
		withheld = []protocol.WithheldKind{}
	}
	return mustJSON(t, map[string]any{"protocolVersion": "2", "runnerId": "runner_bob", "daemonVersion": "0.1.1",
		"capabilities": caps, "withheld": withheld, "activeLeases": []protocol.GrantRef{}})
}

// exactly returns n items made by item(length) whose Marshal is exactly
// size bytes: full-length items, then the last two shortened to fit (the
// lengths are ASCII characters, one byte each).
func exactly[T any](t *testing.T, size int, item func(length int) T) []T {
	t.Helper()
	var out []T
	for len(protocol.MustMarshal(out)) < size {
		out = append(out, item(protocol.MaxAdvertText))
	}
	excess := len(protocol.MustMarshal(out)) - size
	n := len(out)
	out[n-1] = item(protocol.MaxAdvertText - excess/2)
	out[n-2] = item(protocol.MaxAdvertText - (excess - excess/2))
	if got := len(protocol.MustMarshal(out)); got != size {
		t.Fatalf("built %d bytes, want %d", got, size)
	}
	return out
}

func modelRow(length int) protocol.Capability {
	c := chatCapability
	c.Model = strings.Repeat("m", length)
	return c
}

func claimantOf(length int) protocol.Claimant {
	return protocol.Claimant{Service: strings.Repeat("s", length), Offer: "team"}
}

// A signed heartbeat advertising more than the bounds allow is the schema
// refusal and leaves the runner's presence record exactly as it was; one
// at every bound is served and stored byte for byte, and so is what a real
// daemon sends. Claim refuses the same matrix.
func TestAdvertCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newWorld(t)
	w.install(e)
	presence := func() store.Presence {
		t.Helper()
		p, err := e.st.Presence(t.Context(), "runner_bob")
		if err != nil || p == nil {
			t.Fatalf("presence: %+v %v", p, err)
		}
		return *p
	}
	if got := e.daemonPost(w.bob, "runner_bob", "heartbeat", heartbeatJSON(t, "runner_bob", "0.1.1")); got.status != 200 {
		t.Fatalf("first heartbeat: %d %s", got.status, got.body)
	}

	// The encoded withheld list at its byte bound; 256 claimants of 1,024
	// characters are past it.
	withheldAt := []protocol.WithheldKind{{Kind: protocol.KindChat}}
	withheldAt[0].Claimants = exactly(t, protocol.MaxAdvertBytes-len(`[{"kind":"llm.chat","claimants":}]`), claimantOf)
	if n := len(protocol.MustMarshal(withheldAt)); n != protocol.MaxAdvertBytes {
		t.Fatalf("withheld is %d bytes", n)
	}
	manyClaimants := make([]protocol.Claimant, protocol.MaxClaimants)
	for i := range manyClaimants {
		manyClaimants[i] = claimantOf(protocol.MaxAdvertText)
	}
	rows := func(n int) []protocol.Capability {
		out := make([]protocol.Capability, n)
		for i := range out {
			out[i] = chatCapability
		}
		return out
	}
	known := make([]string, protocol.MaxKnownModels+1)
	for i := range known {
		known[i] = "k"
	}
	tooManyKnown := chatCapability
	tooManyKnown.KnownModels = &known

	hostile := []struct {
		name     string
		caps     []protocol.Capability
		withheld []protocol.WithheldKind
	}{
		{"rows", rows(protocol.MaxCapabilities + 1), nil},
		{"model characters", []protocol.Capability{modelRow(protocol.MaxAdvertText + 1)}, nil},
		{"known models", []protocol.Capability{tooManyKnown}, nil},
		{"matrix bytes", exactly(t, protocol.MaxAdvertBytes+1, modelRow), nil},
		{"withheld bytes", []protocol.Capability{chatCapability}, []protocol.WithheldKind{{Kind: protocol.KindChat, Claimants: manyClaimants}}},
		// What a hostile daemon sent before the bound: a body's worth (12 MiB) of capabilities.
		{"a body's worth", []protocol.Capability{modelRow(12 << 20)}, nil},
	}
	for _, h := range hostile {
		t.Run("refused: "+h.name, func(t *testing.T) {
			before := presence()
			expect(t, e.daemonPost(w.bob, "runner_bob", "heartbeat", advertBody(t, "heartbeat", h.caps, h.withheld)), 400, schemaBody)
			if h.withheld == nil {
				expect(t, e.daemonPost(w.bob, "runner_bob", "claim", advertBody(t, "claim", h.caps, nil)), 400, schemaBody)
			}
			if after := presence(); !reflect.DeepEqual(before, after) {
				t.Fatalf("a refused heartbeat changed the presence record:\n%+v\n->\n%+v", before, after)
			}
		})
	}

	real := realDaemonMatrix()
	legal := []struct {
		name     string
		caps     []protocol.Capability
		withheld []protocol.WithheldKind
	}{
		{"a real daemon's matrix", real, nil},
		{"every bound at once", exactly(t, protocol.MaxAdvertBytes, modelRow), withheldAt},
		{"most rows", rows(protocol.MaxCapabilities), nil},
	}
	for _, l := range legal {
		t.Run("served: "+l.name, func(t *testing.T) {
			got := e.daemonPost(w.bob, "runner_bob", "heartbeat", advertBody(t, "heartbeat", l.caps, l.withheld))
			if got.status != 200 {
				t.Fatalf("heartbeat: %d %s", got.status, got.body)
			}
			p := presence()
			wantW := l.withheld
			if wantW == nil {
				wantW = []protocol.WithheldKind{}
			}
			if !bytes.Equal(p.Capabilities, protocol.MustMarshal(l.caps)) || !bytes.Equal(p.Withheld, protocol.MustMarshal(wantW)) {
				t.Fatalf("stored %d+%d bytes, want the advertised %d+%d", len(p.Capabilities), len(p.Withheld),
					len(protocol.MustMarshal(l.caps)), len(protocol.MustMarshal(wantW)))
			}
			got = e.daemonPost(w.bob, "runner_bob", "claim", advertBody(t, "claim", l.caps, nil))
			if got.status != 200 {
				t.Fatalf("claim: %d %s", got.status, got.body)
			}
		})
	}
}

// realDaemonMatrix is what byollm 0.1.1 advertises with twelve services
// answering both kinds (one row per service and kind; knownModels only for
// the CLI backends); see internal/protocol's test of the same name.
func realDaemonMatrix() []protocol.Capability {
	claude := []string{"opus", "sonnet", "haiku", "claude-opus-4-1", "claude-sonnet-4-5", "claude-haiku-4-5"}
	codex := []string{"gpt-5-codex", "gpt-5", "o4-mini"}
	services := []struct {
		name, backend, class, model string
		known                       []string
	}{
		{"claude", "claude-cli", "process", "sonnet", claude},
		{"codex", "codex-cli", "process", "gpt-5-codex", codex},
		{"ollama", "ollama", "http", "llama3.1:8b-instruct-q4_K_M", nil},
		{"mlx", "mlx", "http", "mlx-community/Meta-Llama-3.1-8B-Instruct-4bit", nil},
		{"lmstudio", "lmstudio", "http", "qwen2.5-coder-32b-instruct", nil},
		{"llamacpp", "llamacpp", "http", "Meta-Llama-3.1-70B-Instruct-Q4_K_M.gguf", nil},
		{"openai", "openai", "http", "gpt-4o-2024-08-06", nil},
		{"anthropic", "anthropic", "http", "claude-sonnet-4-5-20250929", nil},
		{"openrouter", "openrouter", "http", "meta-llama/llama-3.1-405b-instruct", nil},
		{"groq", "groq", "http", "llama-3.3-70b-versatile", nil},
		{"together", "together", "http", "meta-llama/Meta-Llama-3.1-405B-Instruct-Turbo", nil},
		{"gemini", "gemini", "http", "gemini-2.5-pro", nil},
	}
	var out []protocol.Capability
	for _, s := range services {
		for _, kind := range protocol.JobKinds {
			c := protocol.Capability{Kind: kind, Service: s.name, BackendID: s.backend, BackendClass: s.class, Model: s.model, OfferScope: "team"}
			if s.known != nil {
				k := append([]string(nil), s.known...)
				c.KnownModels = &k
			}
			out = append(out, c)
		}
	}
	return out
}

// A stub's purpose is stored and handed to every claimer: one longer than
// an identifier may be (store.DefaultMaxIDBytes) is refused like an
// oversized id and stores nothing; one at the bound is queued.
func TestStubPurposeBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := newWorld(t)
	w.install(e)
	over := e.stub("p-over", "alice", w.siteA)
	over.Purpose = strings.Repeat("p", store.DefaultMaxIDBytes+1)
	expect(t, e.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", over)), 400, stubNotAcceptedBody)
	if j, err := e.st.Job(t.Context(), "site_a", "p-over"); err != nil || j != nil {
		t.Fatalf("refused stub stored: %+v %v", j, err)
	}
	at := e.stub("p-at", "alice", w.siteA)
	at.Purpose = strings.Repeat("p", store.DefaultMaxIDBytes)
	expect(t, e.sitePost(w.siteA, "site_a", "enqueue", enqueueJSON(t, "site_a", at)), 200, `{"jobId":"p-at","state":"queued"}`)
}
