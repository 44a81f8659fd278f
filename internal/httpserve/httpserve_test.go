package httpserve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/relaytest"
)

// serve starts a bounded server on loopback and returns it with its address.
func serve(t *testing.T, opts Options) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if opts.Logger == nil {
		opts.Logger = relaytest.Logger(t)
	}
	s := New(ln, opts)
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	t.Cleanup(func() {
		s.HTTP.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, s.Addr().String()
}

// echoBody reads the body through budget and answers with its length, or
// with the error the way the planes do.
func echoBody(budget *Budget, max int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, release, err := budget.ReadAll(r.Body, r.ContentLength, max)
		defer release()
		switch {
		case errors.Is(err, ErrBusy):
			http.Error(w, "busy", http.StatusServiceUnavailable)
		case errors.Is(err, ErrTooLarge):
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
		case errors.Is(err, ErrBodyTimeout):
			http.Error(w, "slow", http.StatusRequestTimeout)
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadRequest)
		default:
			io.WriteString(w, strconv.Itoa(len(data)))
		}
	})
}

// rawExchange writes req on a fresh connection and reads one answer.
func rawExchange(t *testing.T, addr, req string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	return readAnswer(t, bufio.NewReader(c))
}

func readAnswer(t *testing.T, r *bufio.Reader) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read answer body: %v", err)
	}
	return resp, string(b)
}

// net/http answers these before any handler runs; each must come back as
// the protocol's JSON error with a correct Content-Length.
func TestGoErrorsAnswerJSON(t *testing.T) {
	t.Parallel()
	_, addr := serve(t, Options{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})})
	tests := []struct {
		name    string
		req     string
		status  int
		message string
	}{
		{"malformed request line", "GARBAGE\r\n\r\n", 400, "the request could not be read as HTTP"},
		{"no Host", "GET / HTTP/1.1\r\n\r\n", 400, "the request could not be read as HTTP: missing required Host header"},
		{"bad header line", "GET / HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", 400, "the request could not be read as HTTP"},
		{"oversized headers", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 40<<10) + "\r\n\r\n", 431,
			"the request headers are too large for the relay to read"},
		{"HTTP/3.0", "GET / HTTP/3.0\r\nHost: x\r\n\r\n", 505, "this HTTP version is not supported — send HTTP/1.1"},
		{"unknown transfer encoding", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501,
			"this transfer encoding is not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := rawExchange(t, addr, tt.req)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d %q, want %d", resp.StatusCode, body, tt.status)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q", ct)
			}
			if resp.Header.Get("Content-Length") != strconv.Itoa(len(body)) {
				t.Fatalf("Content-Length %q for a %d-byte body", resp.Header.Get("Content-Length"), len(body))
			}
			want, _ := json.Marshal(map[string]string{"error": "bad-request", "message": tt.message})
			var got, exp map[string]string
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatalf("body %q is not JSON: %v", body, err)
			}
			json.Unmarshal(want, &exp)
			if got["error"] != exp["error"] || got["message"] != exp["message"] || len(got) != 2 {
				t.Fatalf("body %s, want %s", body, want)
			}
		})
	}

	// A malformed second request on a kept-alive connection is rewritten
	// too, and the handler's own answer before it is left alone.
	t.Run("second request on a connection", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/3.0\r\nHost: x\r\n\r\n")
		r := bufio.NewReader(c)
		if resp, body := readAnswer(t, r); resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("first answer %d %q", resp.StatusCode, body)
		}
		if resp, body := readAnswer(t, r); resp.StatusCode != 505 || !strings.Contains(body, `"error":"bad-request"`) {
			t.Fatalf("second answer %d %q", resp.StatusCode, body)
		}
	})
}

// A handler's own plain-text error must pass through untouched.
func TestHandlerAnswersNotRewritten(t *testing.T) {
	t.Parallel()
	_, addr := serve(t, Options{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "400 Bad Request", http.StatusBadRequest)
	})})
	resp, body := rawExchange(t, addr, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != 400 || body != "400 Bad Request\n" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("handler answer changed: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
}

func TestCannedErrorRecogniser(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in     string
		status int
		text   string
		ok     bool
	}{
		{"HTTP/1.1 400 Bad Request" + goErrorHeaders + "400 Bad Request", 400, "", true},
		{"HTTP/1.1 400 Bad Request: invalid header" + goErrorHeaders + "400 Bad Request: invalid header", 400, "invalid header", true},
		{"HTTP/1.1 501 Not Implemented" + goErrorHeaders + "Unsupported transfer encoding", 501, "", true},
		{"HTTP/1.1 400 Bad Request" + goErrorHeaders + "something else", 0, "", false},
		{"HTTP/1.1 200 OK" + goErrorHeaders + "200 OK", 0, "", false},
		{"HTTP/1.1 400 Bad Request\r\nDate: x" + goErrorHeaders + "400 Bad Request", 0, "", false},
		{"HTTP/1.0 400 Bad Request" + goErrorHeaders + "400 Bad Request", 0, "", false},
	} {
		status, text, ok := cannedError([]byte(tt.in))
		if status != tt.status || text != tt.text || ok != tt.ok {
			t.Errorf("cannedError(%q) = %d %q %v", tt.in, status, text, ok)
		}
	}
}

func TestConnectionCap(t *testing.T) {
	t.Parallel()
	s, addr := serve(t, Options{MaxConns: 3, MaxConnsPerAddress: 3, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})})
	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	relaytest.WaitFor(t, 20*time.Second, "three connections accepted", func() bool { return s.OpenConns() == 3 })

	// The fourth (from another address: the first holds its share) is
	// answered at once, retryably, in the protocol's shape.
	fourth := dialFrom(t, "127.0.0.2", addr)
	fourth.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(fourth, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body := readAnswer(t, bufio.NewReader(fourth))
	if resp.StatusCode != 503 || body != `{"error":"server-error","message":"the relay is serving as many connections as it allows — try again shortly"}` {
		t.Fatalf("over the cap: %d %s", resp.StatusCode, body)
	}
	if s.OpenConns() != 3 {
		t.Fatalf("a refused connection was counted: %d open", s.OpenConns())
	}

	// A held connection still works; closing one frees its slot.
	held[0].SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(held[0], "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, body := readAnswer(t, bufio.NewReader(held[0])); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("held connection: %d %s", resp.StatusCode, body)
	}
	held[1].Close()
	relaytest.WaitFor(t, 20*time.Second, "a slot freed", func() bool { return s.OpenConns() == 2 })
	if resp, body := rawExchange(t, addr, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("after a slot freed: %d %s", resp.StatusCode, body)
	}
}

// A body that stops arriving is cut off at BodyTimeout, far sooner than the
// two minutes the old server allowed; one that trickles is too.
func TestSlowBodies(t *testing.T) {
	t.Parallel()
	budget := NewBudget(4 << 20)
	_, addr := serve(t, Options{BodyTimeout: time.Second, Handler: echoBody(budget, 2<<20)})
	for _, tt := range []struct {
		name    string
		trickle bool
		burst   int // bytes sent at once before the stall
	}{{"stalled", false, 0}, {"trickling", true, 0}, {"1 MiB then stalled", false, 1 << 20}} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			start := time.Now()
			io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n0123456789")
			c.Write(make([]byte, tt.burst))
			if tt.trickle {
				go func() {
					for i := 0; i < 100; i++ {
						if _, err := c.Write([]byte("x")); err != nil {
							return
						}
						time.Sleep(100 * time.Millisecond)
					}
				}()
			}
			resp, body := readAnswer(t, bufio.NewReader(c))
			took := time.Since(start)
			if resp.StatusCode != http.StatusRequestTimeout {
				t.Fatalf("answer %d %q, want the handler's timeout answer", resp.StatusCode, body)
			}
			// One second of timeout; allow scheduling slack on a busy
			// machine, still far from the old 2 minutes.
			if took > 8*time.Second {
				t.Fatalf("cut off after %v, want about 1s", took)
			}
			if budget.Held() != 0 {
				t.Fatalf("budget still holds %d bytes", budget.Held())
			}
		})
	}
}

// A body arriving steadily faster than MinBodyChunk per BodyTimeout may take longer than
// BodyTimeout in all.
func TestSteadyBodyOutlastsTimeout(t *testing.T) {
	t.Parallel()
	budget := NewBudget(4 << 20)
	_, addr := serve(t, Options{BodyTimeout: time.Second, Handler: echoBody(budget, 2<<20)})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	const pieces, piece = 25, 24 << 10 // 600 KiB over 2.5 s: 240 KiB/s
	go func() {
		io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: "+strconv.Itoa(pieces*piece)+"\r\n\r\n")
		for range pieces {
			if _, err := c.Write(make([]byte, piece)); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	start := time.Now()
	resp, body := readAnswer(t, bufio.NewReader(c))
	if resp.StatusCode != 200 || body != strconv.Itoa(pieces*piece) {
		t.Fatalf("steady body: %d %q", resp.StatusCode, body)
	}
	if took := time.Since(start); took < 2*time.Second {
		t.Fatalf("took %v; the test meant to outlast the 1s timeout", took)
	}
}

// Once the body is read the deadline is gone: a handler that takes longer
// than BodyTimeout afterwards keeps its context and answers.
func TestBodyDeadlineClearedAfterBody(t *testing.T) {
	t.Parallel()
	budget := NewBudget(1 << 20)
	_, addr := serve(t, Options{BodyTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, release, err := budget.ReadAll(r.Body, r.ContentLength, 1<<20)
		defer release()
		if err != nil {
			t.Errorf("read body: %v", err)
		}
		select {
		case <-r.Context().Done():
			http.Error(w, "context ended", http.StatusInternalServerError)
			return
		case <-time.After(2 * time.Second):
		}
		io.WriteString(w, "done")
	})})
	resp, body := rawExchange(t, addr, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
	if resp.StatusCode != 200 || body != "done" {
		t.Fatalf("slow handler after its body: %d %q", resp.StatusCode, body)
	}
}

func TestBudget(t *testing.T) {
	t.Parallel()
	t.Run("declared over max is refused unread", func(t *testing.T) {
		b := NewBudget(1 << 20)
		r := &countingReader{r: strings.NewReader("x")}
		if _, _, err := b.ReadAll(r, 101, 100); !errors.Is(err, ErrTooLarge) || r.n != 0 {
			t.Fatalf("err %v, read %d bytes", err, r.n)
		}
	})
	t.Run("unknown length over max", func(t *testing.T) {
		b := NewBudget(1 << 20)
		if _, _, err := b.ReadAll(strings.NewReader(strings.Repeat("x", 101)), -1, 100); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("err %v", err)
		}
		if b.Held() != 0 {
			t.Fatalf("held %d after a refusal", b.Held())
		}
	})
	t.Run("exact sizes and release", func(t *testing.T) {
		b := NewBudget(1 << 20)
		for _, n := range []int{1, 100, firstBuffer, firstBuffer + 1, 300_000} {
			for _, declared := range []int64{int64(n), -1} {
				data, release, err := b.ReadAll(bytes.NewReader(bytes.Repeat([]byte{'y'}, n)), declared, 1<<20-1)
				if err != nil || len(data) != n {
					t.Fatalf("n=%d declared=%d: %d bytes, %v", n, declared, len(data), err)
				}
				if b.Held() < int64(n) {
					t.Fatalf("held %d for a %d-byte body", b.Held(), n)
				}
				release()
				release() // a second call must not give back twice
				if b.Held() != 0 {
					t.Fatalf("held %d after release", b.Held())
				}
			}
		}
	})
	t.Run("budget exhausted", func(t *testing.T) {
		b := NewBudget(200_000)
		_, release, err := b.ReadAll(bytes.NewReader(make([]byte, 150_000)), 150_000, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.ReadAll(bytes.NewReader(make([]byte, 100_000)), 100_000, 1<<20); !errors.Is(err, ErrBusy) {
			t.Fatalf("second body: %v, want ErrBusy", err)
		}
		if b.Held() != 150_000 {
			t.Fatalf("held %d; the refused body must give back what it took", b.Held())
		}
		release()
		if _, release, err := b.ReadAll(bytes.NewReader(make([]byte, 100_000)), 100_000, 1<<20); err != nil {
			t.Fatalf("after release: %v", err)
		} else {
			release()
		}
	})
	t.Run("short body", func(t *testing.T) {
		b := NewBudget(1 << 20)
		if _, _, err := b.ReadAll(io.LimitReader(strings.NewReader("abc"), 3), 10, 100); err == nil {
			t.Fatal("a body shorter than declared must fail")
		}
	})
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestReserve(t *testing.T) {
	t.Parallel()
	b := NewBudget(1000)
	if _, err := b.Reserve(1001); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("more than the budget: %v", err)
	}
	release, err := b.Reserve(600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Reserve(600); !errors.Is(err, ErrBusy) {
		t.Fatalf("more than is free: %v", err)
	}
	release()
	release()
	if b.Held() != 0 {
		t.Fatalf("held %d after release", b.Held())
	}
}
