package deploy_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/relay"
	"github.com/byollm/relay-go/test/relaytest"
)

// procStatus reads one "Name: N kB" field of /proc/<pid>/status in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("read the relay's status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q", field, line)
			}
			return kb << 10
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

// answered reports whether the relay has written something on c within
// wait (a refusal), or is still reading from it.
func answered(c net.Conn, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	var one [1]byte
	n, err := c.Read(one[:])
	_ = c.SetReadDeadline(time.Time{})
	var ne net.Error
	return n > 0 || !(errors.As(err, &ne) && ne.Timeout())
}

// TestRelayMemoryBound runs the relay as the Kubernetes base runs it (its
// RELAY_MAX_CONNS, RELAY_BODY_BYTES_IN_FLIGHT and GOMEMLIMIT) in its
// documented worst case, and requires its peak resident memory to stay
// under the base's container limit: the body budget full of partly sent
// bodies, and every other connection of both listeners holding a request
// with nearly 16 KiB of headers whose body has not come. Then the held
// bodies complete (each is read whole and parsed) and the peak is read
// again.
func TestRelayMemoryBound(t *testing.T) {
	if testing.Short() {
		t.Skip("opens RELAY_MAX_CONNS x 2 connections")
	}
	plan, cfg := basePlan(t)
	if probs, _ := plan.problems(); probs != nil {
		t.Fatalf("the base's memory plan is broken: %v", probs)
	}
	limit := plan.relayLimit
	const token = "memory-bound-token"
	r := startRelay(t, relaytest.ValkeyURL(),
		"RELAY_MAX_CONNS="+strconv.Itoa(cfg.MaxConns),
		// The worst case is the whole cap and the whole body budget held,
		// which takes many client addresses; the test has one, so it may
		// hold them all.
		"RELAY_MAX_CONNS_PER_ADDRESS="+strconv.Itoa(cfg.MaxConns),
		"RELAY_BODY_BYTES_PER_CLIENT="+strconv.FormatInt(cfg.BodyBytesInFlight, 10),
		"RELAY_BODY_BYTES_IN_FLIGHT="+strconv.FormatInt(cfg.BodyBytesInFlight, 10),
		"GOMEMLIMIT="+plan.goMemLimit,
		"RELAY_ADMIN_TOKEN="+token,
		"RELAY_PROJECTION_FILE="+filepath.Join(root(t), "deploy", "kubernetes", "base", "projection.json"),
		// Long enough for the whole set-up; the memory held does not
		// depend on it.
		"RELAY_BODY_TIMEOUT=2m",
		"RELAY_SHUTDOWN_TIMEOUT=1s",
		"RELAY_LOG_LEVEL=warn",
	)
	pid := r.Pid()
	start := time.Now()
	baseline := procStatus(t, pid, "VmRSS")

	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	dial := func(addr string) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", len(conns)+1, err)
		}
		conns = append(conns, c)
		return c
	}

	// 1. The body budget, filled with bodies sent but for their last
	// byte: the largest the planes take first, then smaller ones into
	// what is left, until even 1 MiB is refused (503). Not smaller: a
	// refused request with under 256 KiB unread is not answered until
	// net/http has read the rest, which never comes.
	type heldBody struct {
		c    net.Conn
		size int64
	}
	var held []heldBody
	var heldBytes int64
	chunk := bytes.Repeat([]byte("a"), 256<<10)
	for _, size := range []int64{relay.MaxBodyBytes, 2 << 20, 1 << 20} {
		for {
			c := dial(r.Listen)
			_ = c.SetWriteDeadline(time.Now().Add(20 * time.Second))
			_, err := fmt.Fprintf(c, "POST /byollm/claim HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", size)
			for left := size - 1; err == nil && left > 0; {
				n := min(left, int64(len(chunk)))
				_, err = c.Write(chunk[:n])
				left -= n
			}
			// A refusal comes at once; one that comes later is found
			// below, before the measurement.
			if err != nil || answered(c, 150*time.Millisecond) {
				c.Close() // refused: the budget has no room for this size
				conns = conns[:len(conns)-1]
				break
			}
			held = append(held, heldBody{c, size})
			heldBytes += size
		}
	}

	// 2. Every other connection of both listeners: a request whose
	// headers (nearly the 16 KiB allowed) have all come and whose body
	// has not started.
	pad := strings.Repeat("p", 15<<10)
	planes := fmt.Sprintf("POST /byollm/claim HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nX-Pad: %s\r\nContent-Length: %d\r\n\r\n", pad, relay.MaxBodyBytes)
	admin := fmt.Sprintf("PUT /projection HTTP/1.1\r\nHost: relay\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nX-Pad: %s\r\nContent-Length: %d\r\n\r\n", token, pad, 1<<20)
	listeners := []struct {
		name, addr, req string
		n               int
	}{{"planes", r.Listen, planes, cfg.MaxConns - len(held)}, {"admin", r.Admin, admin, cfg.MaxConns}}
	for _, l := range listeners {
		for range l.n {
			c := dial(l.addr)
			_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, l.req); err != nil {
				t.Fatalf("connection %d: %v", len(conns), err)
			}
		}
	}

	// Both listeners are full: one more connection is refused with a 503
	// as soon as it is accepted, before it sends anything. A connection
	// that hears nothing found a free slot (a held body whose refusal came
	// later than the wait above gave its slot back): it takes the slot
	// with its listener's request, and the next one is tried.
	freed := map[string]int{} // slots found free, by listener
	for _, l := range listeners {
		for attempt := 1; ; attempt++ {
			if attempt > 32 {
				t.Fatalf("no connection past RELAY_MAX_CONNS on %s was answered 503 in 32 tries", l.addr)
			}
			c := dial(l.addr)
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			_ = c.SetReadDeadline(time.Time{})
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
				if _, err := io.WriteString(c, l.req); err != nil {
					t.Fatalf("connection %d: %v", len(conns), err)
				}
				freed[l.name]++
				continue
			}
			c.Close()
			conns = conns[:len(conns)-1]
			if err != nil {
				continue // closed unanswered: the relay was answering many refusals at once
			}
			res.Body.Close()
			if res.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("a connection past RELAY_MAX_CONNS on %s answered %d, want 503", l.addr, res.StatusCode)
			}
			break
		}
	}
	// Only bodies the relay still reads count (a refusal slower than the
	// wait above is dropped here).
	kept := held[:0]
	heldBytes = 0
	for _, h := range held {
		if !answered(h.c, time.Millisecond) {
			kept = append(kept, h)
			heldBytes += h.size
		}
	}
	held = kept
	if heldBytes < cfg.BodyBytesInFlight*9/10 {
		t.Fatalf("held only %d MiB of bodies in a budget of %d MiB", heldBytes>>20, cfg.BodyBytesInFlight>>20)
	}
	full := procStatus(t, pid, "VmHWM")
	t.Logf("worst case reached in %v: %d connections (%d per listener; slots found free after the fill %v), %d bodies holding %.1f MiB of the %d MiB budget; RSS %.1f MiB at start, peak %.1f MiB",
		time.Since(start).Round(time.Millisecond), len(conns), cfg.MaxConns, freed, len(held), float64(heldBytes)/(1<<20), cfg.BodyBytesInFlight>>20,
		float64(baseline)/(1<<20), float64(full)/(1<<20))

	// 3. The held bodies complete: each is read whole and parsed (not a
	// claim: 400), or refused (503, retryable) when its parse finds the
	// budget still full, while every other connection still waits.
	for i, h := range held {
		_ = h.c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := h.c.Write([]byte("a")); err != nil {
			t.Fatalf("held body %d: last byte: %v", i, err)
		}
	}
	parsed := 0
	for i, h := range held {
		res, err := http.ReadResponse(bufio.NewReader(h.c), nil)
		if err != nil {
			t.Fatalf("held body %d: %v", i, err)
		}
		res.Body.Close()
		switch res.StatusCode {
		case http.StatusBadRequest:
			parsed++
		case http.StatusServiceUnavailable:
		default:
			t.Errorf("held body %d answered %d, want 400 (not a claim) or 503 (budget full)", i, res.StatusCode)
		}
	}
	if parsed == 0 {
		t.Error("no held body was parsed")
	}
	peak := procStatus(t, pid, "VmHWM")
	t.Logf("SUMMARY memory bound: peak RSS (VmHWM) %.1f MiB with the worst case held, %.1f MiB after %d of the %d bodies were parsed; container limit %d MiB, GOMEMLIMIT %s, documented bound %d MiB; %v in all",
		float64(full)/(1<<20), float64(peak)/(1<<20), parsed, len(held), limit>>20, plan.goMemLimit, worstCase(cfg.MaxConns, cfg.BodyBytesInFlight)>>20, time.Since(start).Round(time.Millisecond))
	if peak >= limit {
		t.Errorf("peak RSS %d MiB reached the container limit %d MiB: the kernel would have killed the pod", peak>>20, limit>>20)
	}
}

// TestRelayWarnsSiteLimitOverMaxmemory: started on a Valkey whose
// maxmemory (64 MiB) is below the default per-site byte limit (1 GiB), the
// relay says so at start, with the fix; with a limit that fits it says
// nothing.
func TestRelayWarnsSiteLimitOverMaxmemory(t *testing.T) {
	vk := relaytest.StartServer(t, "--maxmemory", "64mb")
	const warning = "RELAY_SITE_LIMITS lets every site (*) store 1GiB, more than Valkey can hold (maxmemory 64MiB)"
	r := startRelay(t, vk.URL(), "RELAY_LOG_LEVEL=warn")
	relaytest.WaitFor(t, 10*time.Second, "the start-up warning about RELAY_SITE_LIMITS", func() bool { return strings.Contains(r.Log(), warning) })

	fits := startRelay(t, vk.URL(), "RELAY_LOG_LEVEL=warn", "RELAY_SITE_LIMITS=*=bytes:16MiB")
	ready := func() bool {
		res, err := http.Get(fits.AdminURL() + "/healthz")
		if err == nil {
			res.Body.Close()
		}
		return err == nil && res.StatusCode == http.StatusOK
	}
	relaytest.WaitFor(t, 10*time.Second, "the second relay serving", ready)
	if strings.Contains(fits.Log(), "RELAY_SITE_LIMITS lets") {
		t.Errorf("a limit that fits warned:\n%s", fits.Log())
	}
}
