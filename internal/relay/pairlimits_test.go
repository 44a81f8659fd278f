package relay

import (
	"bytes"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/internal/store"
	"github.com/byollm/relay-go/internal/valkeyconn"
	"github.com/byollm/relay-go/test/relaytest"
)

// namespaceKeys is every key of st's namespace but its layout record.
func namespaceKeys(t *testing.T, c valkey.Client, st *store.Store) []string {
	t.Helper()
	all, err := valkeyconn.Keys(t.Context(), c, st.KeyPattern())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range all {
		if k != st.Namespace()+":{"+st.Namespace()+"}:layout" { // written by store.New
			out = append(out, k)
		}
	}
	return out
}

// startOfSize is a valid pair start of exactly n bytes (n large enough),
// padded through capability rows whose model names stay within
// protocol.MaxAdvertText (a longer name is the schema refusal).
func startOfSize(t *testing.T, id protocol.PublicIdentity, n int) []byte {
	t.Helper()
	build := func(caps []protocol.Capability) []byte {
		return mustJSON(t, pairStart{"2", "start", protocol.DaemonInfo{Version: "0.1.1", Label: "laptop", Platform: "linux"}, id, caps})
	}
	row := func(length int) protocol.Capability {
		c := chatCapability
		c.Model = strings.Repeat("m", length)
		return c
	}
	caps := []protocol.Capability{row(1)}
	for len(build(caps)) < n {
		caps = append(caps, row(protocol.MaxAdvertText))
	}
	// Shorten the last rows by the excess (one byte per character).
	excess := len(build(caps)) - n
	for i := len(caps) - 1; excess > 0 && i >= 0; i-- {
		cut := min(excess, len(caps[i].Model)-1)
		caps[i].Model = caps[i].Model[:len(caps[i].Model)-cut]
		excess -= cut
	}
	b := build(caps)
	if len(b) != n {
		t.Fatalf("built %d bytes, want %d", len(b), n)
	}
	return b
}

// postChunked sends body without a Content-Length, so only the bytes read
// can tell its size.
func (e *env) postChunked(path string, body []byte) resp {
	e.t.Helper()
	req, err := http.NewRequest("POST", e.srv.URL+path, io.MultiReader(bytes.NewReader(body)))
	if err != nil {
		e.t.Fatal(err)
	}
	req.ContentLength = -1
	res, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, ctype: res.Header.Get("Content-Type"), body: b}
}

// A pair start is unauthenticated and kept for ten minutes, so it has its
// own small body bound (MaxPairBodyBytes), checked on Content-Length and on
// the bytes read; a larger one is refused and nothing is stored.
func TestPairStartBodyBound(t *testing.T) {
	t.Parallel()
	c := relaytest.Client(t)
	st := newStore(t, c, store.Options{})
	e := newEnvOn(t, st)
	newWorld(t).install(e)

	tooBig := `{"error":"bad-request","message":"this request is too large for the relay to read"}`
	over := startOfSize(t, newKeys(t).id, MaxPairBodyBytes+1)
	expect(t, e.do("POST", "/byollm/pair", nil, over), 400, tooBig)
	expect(t, e.postChunked("/byollm/pair", over), 400, tooBig)
	// Under another basePath prefix the route is the same (last segment).
	expect(t, e.do("POST", "/byollm/x/pair", nil, over), 400, tooBig)
	if keys := namespaceKeys(t, c, st); len(keys) != 0 {
		t.Fatalf("a refused start left keys behind: %q", keys)
	}

	// The largest legal start is stored, by either framing.
	at := startOfSize(t, newKeys(t).id, MaxPairBodyBytes)
	if got := e.do("POST", "/byollm/pair", nil, at); got.status != 200 {
		t.Fatalf("start at the bound: %d %s", got.status, got.body)
	}
	if got := e.postChunked("/byollm/pair", startOfSize(t, newKeys(t).id, MaxPairBodyBytes)); got.status != 200 {
		t.Fatalf("chunked start at the bound: %d %s", got.status, got.body)
	}

	// Other routes keep the plane's bound: a 1 MiB site-plane body is read
	// (and refused for what it says, not for its size).
	big := append([]byte(`{"pad":"`), append(bytes.Repeat([]byte("x"), 1<<20), `"}`...)...)
	if got := e.do("POST", "/relay/site/enqueue", nil, big); got.status == 400 && strings.Contains(string(got.body), "too large") {
		t.Fatalf("site plane refused 1 MiB as too large: %s", got.body)
	}
}

// One source address holds at most PairingsPerSource live codes; another
// address still pairs, re-pairing the same keypair needs no free slot, and
// expiry frees the address. X-Forwarded-For counts only from a trusted
// proxy.
func TestPairingPerAddress(t *testing.T) {
	t.Parallel()
	c := relaytest.Client(t)
	st := newStore(t, c, store.Options{PairingsPerSource: 2})
	proxied := newEnvOn(t, st, func(cfg *Config) {
		cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	})
	direct := newEnvOn(t, st) // no trusted proxies: X-Forwarded-For is ignored
	w := newWorld(t)
	w.install(proxied)
	w.install(direct)

	from := func(e *env, addr string, id protocol.PublicIdentity) resp {
		return e.do("POST", "/byollm/pair", http.Header{"X-Forwarded-For": {"203.0.113.99, " + addr}}, startJSON(t, id))
	}
	busy := `{"error":"rate-limited","message":"too many pairings are in progress from this address — finish or let one expire (codes last 10 minutes), then try again"}`

	a1, a2 := newKeys(t), newKeys(t)
	for _, k := range []keys{a1, a2} {
		if got := from(proxied, "198.51.100.1", k.id); got.status != 200 {
			t.Fatalf("start: %d %s", got.status, got.body)
		}
	}
	before := namespaceKeys(t, c, st)
	expect(t, from(proxied, "198.51.100.1", newKeys(t).id), 429, busy)
	if after := namespaceKeys(t, c, st); len(after) != len(before) {
		t.Fatalf("a refused start changed the keys: %q -> %q", before, after)
	}
	// The left part of the header is the client's own claim: not believed.
	expect(t, proxied.do("POST", "/byollm/pair", http.Header{"X-Forwarded-For": {"192.0.2.7, 198.51.100.1"}}, startJSON(t, newKeys(t).id)), 429, busy)
	// The same keypair starting again replaces its own code.
	if got := from(proxied, "198.51.100.1", a1.id); got.status != 200 {
		t.Fatalf("re-pair: %d %s", got.status, got.body)
	}
	// Another address is served.
	if got := from(proxied, "198.51.100.2", newKeys(t).id); got.status != 200 {
		t.Fatalf("other address: %d %s", got.status, got.body)
	}
	// IPv6 clients count per /64.
	for i, addr := range []string{"2001:db8:1:2::1", "2001:db8:1:2::2"} {
		if got := from(proxied, addr, newKeys(t).id); got.status != 200 {
			t.Fatalf("v6 start %d: %d %s", i, got.status, got.body)
		}
	}
	expect(t, from(proxied, "2001:db8:1:2:ffff::3", newKeys(t).id), 429, busy)

	// Without a trusted proxy the header means nothing: the peer (loopback)
	// is the source, whatever it claims.
	for i := range 2 {
		if got := from(direct, "198.51.100."+itoa(int64(10+i)), newKeys(t).id); got.status != 200 {
			t.Fatalf("direct start %d: %d %s", i, got.status, got.body)
		}
	}
	expect(t, from(direct, "198.51.100.12", newKeys(t).id), 429, busy)

	// Codes expire: the address may start again.
	st.Testing().AdvanceClock(store.PairingCodeTTLMs + 1)
	for range 2 {
		if got := from(proxied, "198.51.100.1", newKeys(t).id); got.status != 200 {
			t.Fatalf("after expiry: %d %s", got.status, got.body)
		}
	}
}

// What a pending code costs Valkey at the largest legal start: the
// namespace's keys summed with MEMORY USAGE (the server is shared, so
// used_memory deltas would include other tests' keys), per code.
func TestPairingMemoryPerCode(t *testing.T) {
	t.Parallel()
	c := relaytest.Client(t)
	const n = 40
	st := newStore(t, c, store.Options{PairingsPerSource: n})
	e := newEnvOn(t, st)
	newWorld(t).install(e)
	measure := func(body func() []byte) int64 {
		for range n {
			if got := e.do("POST", "/byollm/pair", nil, body()); got.status != 200 {
				t.Fatalf("start: %d %s", got.status, got.body)
			}
		}
		var total int64
		for _, k := range namespaceKeys(t, c, st) {
			m, err := c.Do(t.Context(), c.B().MemoryUsage().Key(k).Samples(0).Build()).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			total += m
		}
		if _, err := relaytest.DeleteKeys(t.Context(), c, st.KeyPattern()); err != nil {
			t.Fatal(err)
		}
		return total / n
	}
	largest := measure(func() []byte { return startOfSize(t, newKeys(t).id, MaxPairBodyBytes) })
	typical := measure(func() []byte { return startJSON(t, newKeys(t).id) })
	t.Logf("Valkey bytes per pending code: %d at the largest start (%d B body), %d for a one-capability start", largest, MaxPairBodyBytes, typical)
	// The allocator rounds a 64 KiB string up to its 80 KiB size class.
	if largest > 96<<10 {
		t.Fatalf("a code at the largest start costs %d bytes", largest)
	}
}
