package httpserve

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultBodyBytesInFlight is the default Budget: room for several of the
// largest bodies at once (13 MiB on the planes, 16 MiB on the admin
// listener) and for thousands of ordinary small ones.
const DefaultBodyBytesInFlight = 128 << 20

// Errors of Budget.ReadAll; each maps to an answer in the caller's protocol.
var (
	// ErrTooLarge: the body is (or declares itself) larger than allowed;
	// nothing beyond the limit was read.
	ErrTooLarge = errors.New("request body too large")
	// ErrBusy: the relay already holds as many body bytes as the budget
	// allows; the request is refused before it grows further (retryable).
	ErrBusy = errors.New("too many request body bytes in flight")
	// ErrBodyTimeout: the body stopped arriving (see Options.BodyTimeout).
	ErrBodyTimeout = errors.New("request body did not arrive in time")
)

// firstBuffer is the buffer a body starts in once its first byte has
// arrived; it then doubles as bytes fill it.
const firstBuffer = 64 << 10

// Budget caps the bytes of request bodies held in memory at once across all
// connections. Memory is taken as bytes arrive, never for a declared length,
// so a client that announces 13 MiB and sends nothing holds nothing; a
// request whose next buffer would overrun the budget is refused with ErrBusy
// at once rather than queued, since waiting would hold its connection and
// what it already read. Both real clients retry the 503 that answers it.
type Budget struct {
	mu      sync.Mutex
	limit   int64
	held    int64
	reading atomic.Int64
}

// NewBudget returns a budget of limit bytes (DefaultBodyBytesInFlight if
// limit ≤ 0).
func NewBudget(limit int64) *Budget {
	if limit <= 0 {
		limit = DefaultBodyBytesInFlight
	}
	return &Budget{limit: limit}
}

// Limit is the budget in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// Held is the bytes currently held by bodies being read or in use.
func (b *Budget) Held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

// Reading is the number of ReadAll calls in progress (waiting for or reading
// bytes); tests use it to know every request has reached its body.
func (b *Budget) Reading() int { return int(b.reading.Load()) }

func (b *Budget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held+n > b.limit {
		return false
	}
	b.held += n
	return true
}

func (b *Budget) give(n int64) {
	b.mu.Lock()
	b.held -= n
	b.mu.Unlock()
}

// ReadAll reads a request body of declared length (-1 when unknown, e.g.
// chunked) and at most max bytes. The body is charged to the budget until
// release is called (after the request is handled); release is never nil.
// A declared length over max is ErrTooLarge without reading anything.
func (b *Budget) ReadAll(body io.Reader, declared, max int64) (data []byte, release func(), err error) {
	noop := func() {}
	if declared > max {
		return nil, noop, ErrTooLarge
	}
	if body == nil || body == http.NoBody || declared == 0 {
		return nil, noop, nil
	}
	b.reading.Add(1)
	defer b.reading.Add(-1)

	// Wait for the first byte before allocating anything: a client that
	// sends headers and then nothing costs no buffer.
	var first [1]byte
	n, err := io.ReadAtLeast(body, first[:], 1)
	if n == 0 {
		if errors.Is(err, io.EOF) {
			return nil, noop, nil
		}
		return nil, noop, readError(err)
	}

	limit := max + 1 // unknown length: one byte more proves "too large"
	if declared > 0 {
		limit = declared // net/http yields exactly this many bytes, or an error
	}
	var held int64
	var once sync.Once
	release = func() { once.Do(func() { b.give(held) }) }
	fail := func(err error) ([]byte, func(), error) {
		release()
		return nil, noop, err
	}
	buf, ok := b.grow(nil, min(limit, firstBuffer), &held)
	if !ok {
		return fail(ErrBusy)
	}
	buf = append(buf, first[0])
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) == limit {
				if declared > 0 {
					// Every declared byte is here; read once more to
					// see the end (and let net/http know it was seen).
					var extra [1]byte
					if n, err := body.Read(extra[:]); n > 0 || (err != nil && !errors.Is(err, io.EOF)) {
						if n > 0 {
							return fail(ErrTooLarge)
						}
						return fail(readError(err))
					}
					return buf, release, nil
				}
				return fail(ErrTooLarge)
			}
			if buf, ok = b.grow(buf, min(limit, int64(cap(buf))*2), &held); !ok {
				return fail(ErrBusy)
			}
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			if int64(len(buf)) > max {
				return fail(ErrTooLarge)
			}
			if declared > 0 && int64(len(buf)) != declared {
				return fail(readError(io.ErrUnexpectedEOF))
			}
			return buf, release, nil
		}
		if err != nil {
			return fail(readError(err))
		}
	}
}

// Reserve charges n bytes that a body will cost beyond its own buffer (what
// parsing it allocates) until release is called. More than the whole budget
// is ErrTooLarge (it could never be granted); more than is free now is
// ErrBusy.
func (b *Budget) Reserve(n int64) (release func(), err error) {
	if n > b.limit {
		return func() {}, ErrTooLarge
	}
	if !b.take(n) {
		return func() {}, ErrBusy
	}
	var once sync.Once
	return func() { once.Do(func() { b.give(n) }) }, nil
}

// grow moves buf into a new buffer of capacity newCap, charging the extra
// capacity to the budget (the old buffer is garbage from here on).
func (b *Budget) grow(buf []byte, newCap int64, held *int64) ([]byte, bool) {
	extra := newCap - int64(cap(buf))
	if !b.take(extra) {
		return buf, false
	}
	*held += extra
	next := make([]byte, len(buf), newCap)
	copy(next, buf)
	return next, true
}

func readError(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return ErrBodyTimeout
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return ErrTooLarge
	}
	return fmt.Errorf("read request body: %w", err)
}

// bodyDeadlines gives each request with a body a read deadline that moves
// as the body arrives: never more than timeout after the last bytes (a
// stall ends it) and never more than timeout plus one second per
// MinBodyRate bytes received after the headers (a trickle ends it). The
// deadline is cleared when the body ends: net/http reads the connection in
// the background after the body (to notice a client hanging up), and a
// deadline left behind would cancel a slow handler's context.
func bodyDeadlines(next http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			rc := http.NewResponseController(w)
			start := time.Now()
			if err := rc.SetReadDeadline(start.Add(timeout)); err == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc, start: start, timeout: timeout, set: start.Add(timeout)}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineStep is the least a deadline moves, so a body read in small
// pieces does not reset the connection's timer on every read.
const deadlineStep = 100 * time.Millisecond

type deadlineBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	start    time.Time
	timeout  time.Duration
	received int64
	set      time.Time // the deadline in force
	ended    bool
}

func (d *deadlineBody) Read(p []byte) (int, error) {
	n, err := d.ReadCloser.Read(p)
	d.received += int64(n)
	switch {
	case d.ended:
	case errors.Is(err, io.EOF):
		d.ended = true
		d.rc.SetReadDeadline(time.Time{}) //nolint:errcheck // the connection is going anyway if this fails
	case n > 0:
		// Both bounds only move forward, so the deadline does too.
		want := time.Now().Add(d.timeout)
		if byRate := d.start.Add(d.timeout + time.Duration(d.received)*time.Second/MinBodyRate); byRate.Before(want) {
			want = byRate
		}
		if want.Sub(d.set) >= deadlineStep {
			d.set = want
			d.rc.SetReadDeadline(want) //nolint:errcheck // as above
		}
	}
	return n, err
}
