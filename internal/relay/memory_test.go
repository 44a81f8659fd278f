package relay

// Memory under hostile bodies: the planes behind the real bounded listener
// (internal/httpserve), as cmd/relay serves them, measured in this process.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/httpserve"
	"github.com/byollm/relay-go/test/relaytest"
)

// heapInUse is the live heap after a full collection.
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// boundedPlanes serves e's planes through httpserve on loopback.
func boundedPlanes(t *testing.T, e *env, opts httpserve.Options) *httpserve.Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts.Handler = e.relay.Handler()
	opts.Logger = relaytest.Logger(t)
	s := httpserve.New(ln, opts)
	go s.Serve() //nolint:errcheck // ends with Close below
	t.Cleanup(func() { s.HTTP.Close() })
	return s
}

// The attack of the hardening issue: connections that send only headers
// declaring the largest body the planes accept (13 MiB), with no credentials
// and no body. The planes used to allocate every declared body at once (150
// connections took the heap to 1.96 GB); now a body costs memory only as its
// bytes arrive. The heap is checked every 10 connections so a regression
// fails at the first batch instead of exhausting the machine.
func TestHeadersOnlyBodiesHoldNoMemory(t *testing.T) {
	const (
		conns = 150
		// Bound on live-heap growth over the baseline for all 150: each
		// connection legitimately costs its goroutine, buffers and parsed
		// headers (tens of KiB), nothing near one body.
		bound = 16 << 20
	)
	bodies := httpserve.NewBudget(0)
	e := newEnv(t, func(c *Config) { c.Bodies = bodies })
	// The body timeout only has to outlast opening the 150 connections
	// (well under a second, a few on a loaded machine).
	const bodyTimeout = 5 * time.Second
	s := boundedPlanes(t, e, httpserve.Options{MaxConns: 1000, MaxConnsPerAddress: 1000, BodyTimeout: bodyTimeout})
	addr := s.Addr().String()
	// Each also sends nearly as much header as the listener accepts
	// (16 KiB), which it holds while waiting for the body.
	headers := fmt.Sprintf("POST /byollm/claim HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nX-Pad: %s\r\nContent-Length: %d\r\n\r\n",
		strings.Repeat("p", 15<<10), MaxBodyBytes)

	baseline := heapInUse()
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	var peak int64
	for i := 1; i <= conns; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		open = append(open, c)
		if _, err := io.WriteString(c, headers); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		if i%10 == 0 {
			// Every request so far has reached its body read.
			relaytest.WaitFor(t, 30*time.Second, fmt.Sprintf("%d bodies being read", i), func() bool { return bodies.Reading() == i })
			grew := heapInUse() - baseline
			peak = max(peak, grew)
			if grew > bound {
				t.Fatalf("after %d headers-only connections the heap grew %.1f MiB (bound %d MiB)", i, float64(grew)/(1<<20), bound>>20)
			}
		}
	}
	t.Logf("%d connections each declaring %d bytes and sending none: heap grew at most %.2f MiB over %.1f MiB; budget holds %d bytes",
		conns, MaxBodyBytes, float64(peak)/(1<<20), float64(baseline)/(1<<20), bodies.Held())
	if bodies.Held() != 0 {
		t.Fatalf("the budget holds %d bytes for bodies that sent nothing", bodies.Held())
	}

	// Every one of them is answered once the body timeout passes, in the
	// protocol's shape, well before the two minutes the server used to wait.
	start := time.Now()
	var wg sync.WaitGroup
	var answered atomic.Int64
	for _, c := range open {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(time.Now().Add(60 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Errorf("no answer: %v", err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 400 || string(b) != `{"error":"bad-request","message":"the request body did not arrive in time"}` {
				t.Errorf("answer %d %s", resp.StatusCode, b)
				return
			}
			answered.Add(1)
		}()
	}
	wg.Wait()
	if answered.Load() != conns {
		t.Fatalf("%d of %d answered", answered.Load(), conns)
	}
	t.Logf("all %d answered 400 within %v of the last headers (body timeout %v)", conns, time.Since(start).Round(time.Millisecond), bodyTimeout)
}

// Bodies that do send bytes are charged to the shared budget: with a 32 MiB
// budget and 24 connections each sending 3 MiB of a declared 13 MiB body,
// the ones the budget cannot hold get a retryable 503 at once, and the heap
// never holds much more than the budget.
func TestPartialBodiesBoundedByBudget(t *testing.T) {
	const (
		conns  = 24
		sent   = 3 << 20
		budget = 32 << 20
		// The budget, plus buffers outgrown but not yet collected (at most
		// as much again), plus per-connection overhead.
		bound = 2*budget + 16<<20
	)
	bodies := httpserve.NewBudget(budget)
	bodies.SetClientShare(budget) // every connection is one address here; this is about the whole budget
	e := newEnv(t, func(c *Config) { c.Bodies = bodies })
	s := boundedPlanes(t, e, httpserve.Options{MaxConns: 1000, MaxConnsPerAddress: 1000, BodyTimeout: 3 * time.Second})
	addr := s.Addr().String()
	headers := fmt.Sprintf("POST /byollm/claim HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", MaxBodyBytes)
	chunk := []byte(`{"x":"` + strings.Repeat("a", sent-8) + `",`)

	baseline := heapInUse()
	var busy, slow atomic.Int64
	var wg sync.WaitGroup
	for range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(60 * time.Second))
		wg.Add(2)
		go func() {
			defer wg.Done()
			io.WriteString(c, headers) //nolint:errcheck // a refused body may reset the connection
			c.Write(chunk)             //nolint:errcheck // as above
		}()
		go func() {
			defer wg.Done()
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Errorf("no answer: %v", err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			switch {
			case resp.StatusCode == 503 && strings.Contains(string(b), `"error":"server-error"`):
				busy.Add(1)
			case resp.StatusCode == 400 && strings.Contains(string(b), "did not arrive in time"):
				slow.Add(1)
			default:
				t.Errorf("answer %d %s", resp.StatusCode, b)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var peak int64
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-time.After(50 * time.Millisecond):
		}
		if held := bodies.Held(); held > budget {
			t.Fatalf("budget holds %d bytes, over its %d", held, budget)
		}
		peak = max(peak, heapInUse()-baseline)
	}
	t.Logf("%d connections × %d MiB sent, budget %d MiB: %d refused 503, %d held until the body timeout; heap grew at most %.1f MiB",
		conns, sent>>20, budget>>20, busy.Load(), slow.Load(), float64(peak)/(1<<20))
	if busy.Load() == 0 || slow.Load() == 0 {
		t.Fatalf("want both refusals by the budget and bodies held until their timeout; got %d and %d", busy.Load(), slow.Load())
	}
	if peak > bound {
		t.Fatalf("heap grew %.1f MiB, bound %d MiB", float64(peak)/(1<<20), bound>>20)
	}
}

// Parsing can take thirty times a body's size ("{}," repeated: 13 MiB parses
// to about 426 MiB of heap), before any signature is checked. The planes
// charge an estimate of it to the body budget first: a body whose parse
// could never fit is refused unparsed.
func TestParseCostCharged(t *testing.T) {
	bodies := httpserve.NewBudget(0)
	e := newEnv(t, func(c *Config) { c.Bodies = bodies })
	s := boundedPlanes(t, e, httpserve.Options{})
	body := "[" + strings.Repeat("{},", MaxBodyBytes/3-1) + "{}]"
	if len(body) > MaxBodyBytes {
		t.Fatalf("test body %d bytes", len(body))
	}
	before := heapInUse()
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak.Store(max(peak.Load(), int64(m.HeapInuse)))
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	resp, err := http.Post("http://"+s.Addr().String()+"/byollm/claim", "application/json", strings.NewReader(body))
	close(stop)
	<-sampled
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || string(b) != `{"error":"bad-request","message":"this request is too large for the relay to read"}` {
		t.Fatalf("answer %d %s", resp.StatusCode, b)
	}
	if bodies.Held() != 0 {
		t.Fatalf("budget holds %d bytes after the request", bodies.Held())
	}
	// The body itself and the client's copy of it are in this heap; the
	// parse (hundreds of MiB) is not.
	grew := peak.Load() - before
	t.Logf("13 MiB of {} refused unparsed; heap peaked %.1f MiB over the baseline", float64(grew)/(1<<20))
	if grew > 100<<20 {
		t.Fatalf("heap grew %.1f MiB while refusing the body", float64(grew)/(1<<20))
	}
}
