package store

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/byollm/relay-go/internal/protocol"
	"github.com/byollm/relay-go/test/relaytest"
)

// scriptCall is one script call as the server saw it.
type scriptCall struct {
	keys []string
	argv []string
}

// monitor watches the real server's MONITOR feed. Only Redis can show what
// each script call received; miniredis has no MONITOR.
type monitor struct {
	conn net.Conn
	rd   *bufio.Reader
}

func startMonitor(t *testing.T) *monitor {
	t.Helper()
	u, err := url.Parse(relaytest.ValkeyURL())
	if err != nil {
		t.Fatalf("valkey url: %v", err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatalf("monitor: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	m := &monitor{conn: conn, rd: bufio.NewReader(conn)}
	if pw, ok := u.User.Password(); ok {
		m.send(t, "AUTH", u.User.Username(), pw)
	}
	m.send(t, "MONITOR")
	return m
}

func (m *monitor) send(t *testing.T, args ...string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := m.conn.Write([]byte(b.String())); err != nil {
		t.Fatalf("monitor: %v", err)
	}
	line, err := m.rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "+OK") {
		t.Fatalf("monitor: %s: %q %v", args[0], line, err)
	}
}

// until collects the script calls naming a key under prefix, until the feed
// shows ECHO marker (sent after the calls of interest, so every one of them
// has been fed by then).
func (m *monitor) until(t *testing.T, prefix, marker string) []scriptCall {
	t.Helper()
	var calls []scriptCall
	for {
		line, err := m.rd.ReadString('\n')
		if err != nil {
			t.Fatalf("monitor: %v", err)
		}
		toks := monitorTokens(line)
		if len(toks) == 0 {
			continue
		}
		switch strings.ToLower(toks[0]) {
		case "echo":
			if len(toks) == 2 && toks[1] == marker {
				return calls
			}
		case "evalsha", "eval", "fcall", "fcall_ro":
			if len(toks) < 3 {
				continue
			}
			n, err := strconv.Atoi(toks[2])
			if err != nil || len(toks) < 3+n {
				continue
			}
			c := scriptCall{keys: toks[3 : 3+n], argv: toks[3+n:]}
			if len(c.keys) == 0 || !strings.HasPrefix(c.keys[0], prefix) {
				continue
			}
			// Every call ends with its migration guard; the tests look at
			// the keys the script body sees, so it is taken off here.
			if g := GuardKey(prefixOf(c.keys[0])); len(c.keys) < 2 || c.keys[len(c.keys)-1] != g {
				t.Fatalf("a script call's last key is not its migration guard %q: %q", g, c.keys)
			}
			c.keys = c.keys[:len(c.keys)-1]
			// An EVALSHA answered NOSCRIPT is sent again as EVAL, an FCALL
			// answered "Function not found" again after the load: one call.
			if k := len(calls) - 1; k >= 0 && slices.Equal(calls[k].keys, c.keys) && slices.Equal(calls[k].argv, c.argv) {
				continue
			}
			calls = append(calls, c)
		}
	}
}

// monitorTokens splits a MONITOR line (+<time> [<db> <addr>] "cmd" "arg"...)
// into its unquoted arguments.
func monitorTokens(line string) []string {
	i := strings.IndexByte(line, ']')
	if !strings.HasPrefix(line, "+") || i < 0 {
		return nil
	}
	s := line[i+1:]
	var out []string
	for {
		j := strings.IndexByte(s, '"')
		if j < 0 {
			return out
		}
		s = s[j+1:]
		var b strings.Builder
		for len(s) > 0 && s[0] != '"' {
			if s[0] == '\\' && len(s) > 1 {
				switch s[1] {
				case 'x':
					if len(s) >= 4 {
						v, _ := strconv.ParseUint(s[2:4], 16, 8)
						b.WriteByte(byte(v))
						s = s[4:]
						continue
					}
				case 'n':
					b.WriteByte('\n')
				case 'r':
					b.WriteByte('\r')
				case 't':
					b.WriteByte('\t')
				default:
					b.WriteByte(s[1])
				}
				s = s[2:]
				continue
			}
			b.WriteByte(s[0])
			s = s[1:]
		}
		out = append(out, b.String())
		if len(s) > 0 {
			s = s[1:]
		}
	}
}

// A long grant list reaches Valkey as several renew or release calls of at
// most GrantChunk grants each, and the answer is the one a single call
// would give: renewed and lost in input order, repeats renewed twice but
// released once, grants split across chunk boundaries handled alike.
func TestLongGrantListsRunInBoundedChunks(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	h := newFixture(t, b, Options{})
	m := startMonitor(t)

	// Four real grants: two claims, the first pair sealed in between (the
	// unsealed cap is 2 per site and owner).
	for i := range 4 {
		h.enqueue(fmt.Sprintf("job-%d", i), "alice")
	}
	var held []protocol.GrantRef
	for range 2 {
		got := h.claim(maxJobs(2))
		for _, g := range got {
			held = append(held, grant(g))
			h.seal(stubID(g))
		}
	}
	if len(held) != 4 {
		t.Fatalf("held %d grants, want 4", len(held))
	}

	// 300 entries: the real grants at 0, 70, 140, 299 (the first, third,
	// fifth and last chunks), held[0] again at 200, everything else unknown.
	const n = 300
	at := map[int]protocol.GrantRef{0: held[0], 70: held[1], 140: held[2], 200: held[0], 299: held[3]}
	list := make([]protocol.GrantRef, n)
	var wantLost []protocol.GrantRef
	var wantRenewed []string
	for i := range list {
		if g, ok := at[i]; ok {
			list[i] = g
			wantRenewed = append(wantRenewed, g.JobID)
			continue
		}
		// Ghost leases name the real grants' shard (a lease id's first
		// byte), so every entry reaches that shard's scripts.
		list[i] = protocol.GrantRef{JobID: fmt.Sprintf("ghost-%d", i), LeaseID: held[0].LeaseID[:2] + fmt.Sprintf("-lease-%d", i)}
		wantLost = append(wantLost, list[i])
	}

	renewed, err := h.s.RenewLeases(h.ctx, RenewInput{RunnerID: "runner_1", Leases: list, LeaseMs: 60000})
	if err != nil {
		t.Fatalf("renew: %v", err)
	}
	var gotRenewed []string
	for _, r := range renewed.Renewed {
		gotRenewed = append(gotRenewed, r.JobID)
	}
	equalStrings(t, "renewed", gotRenewed, wantRenewed)
	if !slices.Equal(renewed.Lost, wantLost) {
		t.Fatalf("lost: %d entries, want %d in input order", len(renewed.Lost), len(wantLost))
	}

	released, err := h.s.ReleaseLeases(h.ctx, ReleaseInput{RunnerID: "runner_1", Leases: list, Reason: "pause"})
	if err != nil {
		t.Fatalf("release: %v", err)
	}
	equalStrings(t, "released", released, []string{held[0].JobID, held[1].JobID, held[2].JobID, held[3].JobID})
	for _, g := range held {
		h.mustState(g.JobID, StateQueued)
	}

	marker := h.s.k.p + "chunks-done"
	if err := b.client.Do(h.ctx, b.client.B().Echo().Message(marker).Build()).Error(); err != nil {
		t.Fatalf("echo: %v", err)
	}
	calls := m.until(t, h.s.k.ns+":", marker)
	var renews, releases int
	for _, c := range calls {
		var nAt int
		switch {
		case len(c.keys) != 1 || !strings.HasSuffix(c.keys[0], "}:lease") || len(c.argv) < 7:
			continue
		case len(c.argv) == 6+2*countArg(c.argv[5]):
			renews, nAt = renews+1, 5 // ARGV[6]: renew's count
		case len(c.argv) == 7+2*countArg(c.argv[6]):
			releases, nAt = releases+1, 6 // ARGV[7]: release's count
		default:
			continue
		}
		got, err := strconv.Atoi(c.argv[nAt])
		if err != nil || got < 1 || got > GrantChunk || len(c.argv) != nAt+1+2*got {
			t.Fatalf("a script call was given %q grants (%d arguments); want 1..%d", c.argv[nAt], len(c.argv), GrantChunk)
		}
	}
	want := (n + GrantChunk - 1) / GrantChunk
	if renews != want || releases != want {
		t.Fatalf("saw %d renew and %d release calls, want %d each", renews, releases, want)
	}
}

// countArg is a call's grant count, or -1 when the argument is no number.
func countArg(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}
