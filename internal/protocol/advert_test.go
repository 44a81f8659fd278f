package protocol

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// realDaemonMatrix is what byollm 0.1.1 advertises for a generous setup:
// one row per configured service and kind (runner.ts detectCapabilities),
// knownModels only for the CLI backends (known-models.ts), model names as
// people write them. Twelve services answering both kinds.
func realDaemonMatrix() []Capability {
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
	var out []Capability
	for _, s := range services {
		for _, kind := range JobKinds {
			c := Capability{Kind: kind, Service: s.name, BackendID: s.backend, BackendClass: s.class, Model: s.model, OfferScope: "team"}
			if s.known != nil {
				k := append([]string(nil), s.known...)
				c.KnownModels = &k
			}
			out = append(out, c)
		}
	}
	return out
}

// row is a small valid capability whose model is n copies of "é" (two
// UTF-8 bytes, one character: limits count characters, not bytes).
func row(n int) Capability {
	return Capability{Kind: KindChat, Service: "s", BackendID: "ollama", BackendClass: "http", Model: strings.Repeat("é", n), OfferScope: "private"}
}

func heartbeatValue(t *testing.T, caps []Capability, withheld []WithheldKind) any {
	t.Helper()
	body := map[string]any{"protocolVersion": "2", "runnerId": "r", "daemonVersion": "0.1.1",
		"capabilities": caps, "activeLeases": []GrantRef{}}
	if withheld != nil {
		body["withheld"] = withheld
	}
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	v, err := ParseJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func wantSchemaError(t *testing.T, err error, what string) {
	t.Helper()
	var se *SchemaError
	if !errors.As(err, &se) {
		t.Fatalf("%s: got %v, want a schema error", what, err)
	}
}

// matrixOfBytes is a matrix whose encoded JSON is exactly n bytes, built
// from rows of long models (ASCII, so one byte per character).
func matrixOfBytes(t *testing.T, n int) []Capability {
	t.Helper()
	base := len(MustMarshal(Capability{Kind: KindChat, Service: "s", BackendID: "ollama", BackendClass: "http", Model: "", OfferScope: "private"}))
	var caps []Capability
	size := 2
	for size < n {
		sep := 0
		if len(caps) > 0 {
			sep = 1
		}
		left := n - size - sep - base // model characters that would fill it exactly
		if left < 1 {
			t.Fatalf("cannot hit %d bytes exactly (at %d)", n, size)
		}
		if left > MaxAdvertText {
			// leave room so that the last row is never shorter than one character
			left = min(MaxAdvertText, left-base-2)
		}
		c := Capability{Kind: KindChat, Service: "s", BackendID: "ollama", BackendClass: "http", Model: strings.Repeat("m", left), OfferScope: "private"}
		caps = append(caps, c)
		size += sep + base + left
	}
	if got := len(MustMarshal(caps)); got != n {
		t.Fatalf("built %d bytes, want %d", got, n)
	}
	return caps
}

// What a real daemon advertises is accepted, and is far below every bound.
func TestAdvertRealDaemon(t *testing.T) {
	t.Parallel()
	caps := realDaemonMatrix()
	withheld := []WithheldKind{{Kind: KindChat, Claimants: []Claimant{{"ollama", "private"}, {"mlx", "team"}}}}
	r, err := DecodeHeartbeatRequest(heartbeatValue(t, caps, withheld))
	if err != nil {
		t.Fatalf("a real daemon's heartbeat refused: %v", err)
	}
	n := len(MustMarshal(r.Capabilities))
	t.Logf("real daemon matrix: %d rows, %d bytes of JSON (bound %d rows, %d bytes)", len(caps), n, MaxCapabilities, MaxAdvertBytes)
	if len(caps) > MaxCapabilities/8 || n > MaxAdvertBytes/32 {
		t.Fatalf("the bounds leave a real daemon too little room: %d rows, %d bytes", len(caps), n)
	}
}

// Every list and name a daemon advertises is accepted at its bound and
// refused one past it, with a schema error (the protocol's schema refusal
// on the wire); heartbeat, claim and pair start share the matrix schema.
func TestAdvertBounds(t *testing.T) {
	t.Parallel()
	many := func(n int) []Capability {
		out := make([]Capability, n)
		for i := range out {
			out[i] = row(1)
		}
		return out
	}
	known := func(n, length int) []Capability {
		models := make([]string, n)
		for i := range models {
			models[i] = strings.Repeat("k", length)
		}
		c := row(1)
		c.KnownModels = &models
		return []Capability{c}
	}
	longService := func(n int) []Capability {
		c := row(1)
		c.Service = strings.Repeat("ß", n)
		return []Capability{c}
	}
	claimants := func(n, length int) []WithheldKind {
		cs := make([]Claimant, n)
		for i := range cs {
			cs[i] = Claimant{Service: strings.Repeat("c", length), Offer: "team"}
		}
		return []WithheldKind{{Kind: KindChat, Claimants: cs}}
	}
	withheldKinds := func(n int) []WithheldKind {
		out := make([]WithheldKind, n)
		for i := range out {
			out[i] = claimants(2, 1)[0]
		}
		return out
	}
	cases := []struct {
		name          string
		atCap, over   []Capability
		atCapW, overW []WithheldKind
	}{
		{name: "capability rows", atCap: many(MaxCapabilities), over: many(MaxCapabilities + 1)},
		{name: "model characters", atCap: []Capability{row(MaxAdvertText)}, over: []Capability{row(MaxAdvertText + 1)}},
		{name: "service characters", atCap: longService(MaxAdvertText), over: longService(MaxAdvertText + 1)},
		{name: "known models", atCap: known(MaxKnownModels, 1), over: known(MaxKnownModels+1, 1)},
		{name: "known model characters", atCap: known(1, MaxAdvertText), over: known(1, MaxAdvertText+1)},
		{name: "matrix bytes", atCap: matrixOfBytes(t, MaxAdvertBytes), over: matrixOfBytes(t, MaxAdvertBytes+1)},
		{name: "withheld kinds", atCapW: withheldKinds(MaxWithheld), overW: withheldKinds(MaxWithheld + 1)},
		{name: "claimants", atCapW: claimants(MaxClaimants, 1), overW: claimants(MaxClaimants+1, 1)},
		{name: "claimant characters", atCapW: claimants(2, MaxAdvertText), overW: claimants(2, MaxAdvertText+1)},
		// 256 claimants of 1,024 characters are about 280 KB of JSON.
		{name: "withheld bytes", atCapW: claimants(200, MaxAdvertText), overW: claimants(MaxClaimants, MaxAdvertText)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			atCap, over := c.atCap, c.over
			if atCap == nil {
				atCap, over = []Capability{}, []Capability{}
			}
			r, err := DecodeHeartbeatRequest(heartbeatValue(t, atCap, c.atCapW))
			if err != nil {
				t.Fatalf("at the bound: refused: %v", err)
			}
			if len(r.Capabilities) != len(atCap) || len(r.Withheld) != len(c.atCapW) {
				t.Fatalf("at the bound: decoded %d rows, %d withheld", len(r.Capabilities), len(r.Withheld))
			}
			_, err = DecodeHeartbeatRequest(heartbeatValue(t, over, c.overW))
			wantSchemaError(t, err, "heartbeat past the bound")
			if c.over == nil {
				return
			}
			for name, body := range map[string]map[string]any{
				"claim": {"protocolVersion": "2", "runnerId": "r", "capabilities": over, "max": 1},
				"pair start": {"protocolVersion": "2", "action": "start",
					"daemon": map[string]any{"version": "0.1.1", "label": "l", "platform": "linux"},
					"device": map[string]any{"identity": "i", "encryption": "e", "encryptionSig": "s"}, "capabilities": over},
			} {
				raw, _ := json.Marshal(body)
				v, err := ParseJSON(raw)
				if err != nil {
					t.Fatal(err)
				}
				if name == "claim" {
					_, err = DecodeClaimRequest(v)
				} else {
					_, err = DecodePairStartRequest(v)
				}
				wantSchemaError(t, err, name+" past the bound")
				// The same body at the bound decodes.
				body["capabilities"] = atCap
				raw, _ = json.Marshal(body)
				v, _ = ParseJSON(raw)
				if name == "claim" {
					_, err = DecodeClaimRequest(v)
				} else {
					_, err = DecodePairStartRequest(v)
				}
				if err != nil {
					t.Fatalf("%s at the bound: refused: %v", name, err)
				}
			}
		})
	}
}
