package httpserve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultBodyBytesInFlight is the default Budget: room for several of the
// largest bodies at once (13 MiB on the planes, 16 MiB on the admin
// listener) and for thousands of ordinary small ones.
const DefaultBodyBytesInFlight = 128 << 20

// DefaultClientShareDivisor: by default one client may hold a quarter of
// the budget (32 MiB of the default 128 MiB: two of the largest bodies with
// their parse cost), so at least three other clients' worth stays free
// whatever one address sends.
const DefaultClientShareDivisor = 4

// Errors of Budget.ReadAll; each maps to an answer in the caller's protocol.
var (
	// ErrTooLarge: the body is (or declares itself) larger than allowed, or
	// with what parsing it costs could never fit in the budget or in one
	// client's share of it; nothing beyond the limit was read. Retrying
	// cannot help.
	ErrTooLarge = errors.New("request body too large")
	// ErrBusy: the relay (or this client, within its share) already holds
	// as many body bytes as allowed; the request is refused before it grows
	// further (retryable).
	ErrBusy = errors.New("too many request body bytes in flight")
	// ErrBodyTimeout: the body stopped arriving (see Options.BodyTimeout).
	ErrBodyTimeout = errors.New("request body did not arrive in time")
)

// firstBuffer is the buffer a body starts in once its first byte has
// arrived; it then doubles as bytes fill it.
const firstBuffer = 64 << 10

// Budget caps the bytes of request bodies held in memory at once across all
// connections, and what one client (ClientAddress) may hold of it. Memory is
// taken as bytes arrive, never for a declared length, so a client that
// announces 13 MiB and sends nothing holds nothing; a request whose next
// buffer would overrun the budget or its client's share is refused with
// ErrBusy at once rather than queued, since waiting would hold its
// connection and what it already read. Both real clients retry the 503 that
// answers it. A request that alone would overrun either is ErrTooLarge.
type Budget struct {
	mu      sync.Mutex
	limit   int64
	share   int64
	held    int64
	clients map[string]int64
	reading atomic.Int64
}

// NewBudget returns a budget of limit bytes (DefaultBodyBytesInFlight if
// limit ≤ 0), of which one client may hold a quarter (SetClientShare).
func NewBudget(limit int64) *Budget {
	if limit <= 0 {
		limit = DefaultBodyBytesInFlight
	}
	return &Budget{limit: limit, share: limit / DefaultClientShareDivisor, clients: map[string]int64{}}
}

// SetClientShare sets the bytes one client may hold (≤ 0 or more than the
// budget: the whole budget). Call it before the budget is used.
func (b *Budget) SetClientShare(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n <= 0 || n > b.limit {
		n = b.limit
	}
	b.share = n
}

// Limit is the budget in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// ClientShare is the bytes one client may hold.
func (b *Budget) ClientShare() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.share
}

// Held is the bytes currently held by bodies being read or in use.
func (b *Budget) Held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

// HeldBy is the bytes one client currently holds.
func (b *Budget) HeldBy(client string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.clients[client]
}

// Reading is the number of ReadAll calls in progress (waiting for or reading
// bytes); tests use it to know every request has reached its body.
func (b *Budget) Reading() int { return int(b.reading.Load()) }

// ceiling is the most one request of client may hold: the budget, or the
// client's share of it.
func (b *Budget) ceiling(client string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if client == "" {
		return b.limit
	}
	return b.share
}

// take charges n more bytes to a request of client already holding own.
func (b *Budget) take(client string, own, n int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if own+n > b.limit || client != "" && own+n > b.share {
		return ErrTooLarge // could never fit, however idle the relay
	}
	if b.held+n > b.limit || client != "" && b.clients[client]+n > b.share {
		return ErrBusy
	}
	b.held += n
	if client != "" {
		b.clients[client] += n
	}
	return nil
}

func (b *Budget) give(client string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held -= n
	if client != "" {
		if left := b.clients[client] - n; left > 0 {
			b.clients[client] = left
		} else {
			delete(b.clients, client)
		}
	}
}

// Body is a request body read through a Budget: its bytes, charged to the
// budget (and to its client) until Release.
type Body struct {
	Data   []byte
	b      *Budget
	client string
	mu     sync.Mutex
	held   int64
	done   bool
}

// Reserve charges n more bytes to this body (what parsing it allocates)
// until Release: ErrTooLarge when the body with n more could never fit in
// the budget or its client's share, ErrBusy when it does not fit now.
func (h *Body) Reserve(n int64) error {
	if h == nil || h.b == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return nil
	}
	if err := h.b.take(h.client, h.held, n); err != nil {
		return err
	}
	h.held += n
	return nil
}

// Release gives the body's bytes back; safe to call more than once and on
// nil.
func (h *Body) Release() {
	if h == nil || h.b == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.done {
		h.done = true
		h.b.give(h.client, h.held)
	}
}

// ReadRequest reads hr's body, at most max bytes, charged to the client
// ClientOf(hr) names (its share of the budget). On any error the rest of
// the body is abandoned: the connection closes after the answer instead of
// waiting for bytes nobody will read. The returned Body is never nil;
// Release it after the request is handled.
func (b *Budget) ReadRequest(hr *http.Request, max int64) (*Body, error) {
	body, err := b.read(hr.Body, hr.ContentLength, max, ClientOf(hr))
	if err != nil {
		abandon(hr.Body)
	}
	return body, err
}

// ReadAll reads a request body of declared length (-1 when unknown, e.g.
// chunked) and at most max bytes, charged to no client (the whole budget).
// The body is charged to the budget until release is called (after the
// request is handled); release is never nil. A declared length over max is
// ErrTooLarge without reading anything.
func (b *Budget) ReadAll(body io.Reader, declared, max int64) (data []byte, release func(), err error) {
	h, err := b.read(body, declared, max, "")
	return h.Data, h.Release, err
}

func (b *Budget) read(body io.Reader, declared, max int64, client string) (*Body, error) {
	h := &Body{b: b, client: client}
	if declared > max || declared > b.ceiling(client) {
		return h, ErrTooLarge
	}
	if body == nil || body == http.NoBody || declared == 0 {
		return h, nil
	}
	b.reading.Add(1)
	defer b.reading.Add(-1)

	// Wait for the first byte before allocating anything: a client that
	// sends headers and then nothing costs no buffer.
	var first [1]byte
	n, err := io.ReadAtLeast(body, first[:], 1)
	if n == 0 {
		if errors.Is(err, io.EOF) {
			return h, nil
		}
		return h, readError(err)
	}

	limit := max + 1 // unknown length: one byte more proves "too large"
	if declared > 0 {
		limit = declared // net/http yields exactly this many bytes, or an error
	}
	fail := func(err error) (*Body, error) {
		h.Release()
		return &Body{}, err
	}
	buf, err := h.grow(nil, min(limit, firstBuffer))
	if err != nil {
		return fail(err)
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
					h.Data = buf
					return h, nil
				}
				return fail(ErrTooLarge)
			}
			if buf, err = h.grow(buf, min(limit, int64(cap(buf))*2)); err != nil {
				return fail(err)
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
			h.Data = buf
			return h, nil
		}
		if err != nil {
			return fail(readError(err))
		}
	}
}

// Reserve charges n bytes that a body will cost beyond its own buffer (what
// parsing it allocates) until release is called, to no client. More than the
// whole budget is ErrTooLarge (it could never be granted); more than is free
// now is ErrBusy.
func (b *Budget) Reserve(n int64) (release func(), err error) {
	h := &Body{b: b}
	if err := h.Reserve(n); err != nil {
		return func() {}, err
	}
	return h.Release, nil
}

// grow moves buf into a new buffer of capacity newCap, charging the extra
// capacity to the body (the old buffer is garbage from here on).
func (h *Body) grow(buf []byte, newCap int64) ([]byte, error) {
	if err := h.Reserve(newCap - int64(cap(buf))); err != nil {
		return buf, err
	}
	next := make([]byte, len(buf), newCap)
	copy(next, buf)
	return next, nil
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

// MinBodyChunk is the floor on how fast a body must keep arriving: every
// MinBodyChunk bytes (or the rest of a smaller body) must arrive within
// BodyTimeout of the previous ones. With the default 10 s that is 6.4 KiB/s
// (about 52 kbit/s) in every window, which a slow mobile link still meets,
// while a body that arrived fast and then trickles (a byte every few
// seconds, holding its buffer) is cut BodyTimeout after its last full
// chunk: an average over the whole body would let such a body stay as long
// as it had been fast.
const MinBodyChunk = 64 << 10

// bound wraps a listener's handler: it names the request's client for the
// per-client body share (ClientOf), and gives a request with a body a read
// deadline that moves only as whole MinBodyChunk pieces arrive (see
// MinBodyChunk). The deadline is cleared when the body ends: net/http reads
// the connection in the background after the body (to notice a client
// hanging up), and a deadline left behind would cancel a slow handler's
// context. The handler sees a copy of the request, so net/http still sees
// its own body type afterwards and closes the connection instead of waiting
// to discard a large unread rest.
func bound(next http.Handler, timeout time.Duration, trusted []netip.Prefix) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(context.WithValue(r.Context(), clientKey{}, ClientAddress(r, trusted)))
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			rc := http.NewResponseController(w)
			now := time.Now()
			if err := rc.SetReadDeadline(now.Add(timeout)); err == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc, timeout: timeout}
			}
		}
		next.ServeHTTP(w, r)
	})
}

type clientKey struct{}

// ClientOf names the client of a request served by a bounded listener (see
// ClientAddress); for other requests it is the peer address.
func ClientOf(hr *http.Request) string {
	if c, ok := hr.Context().Value(clientKey{}).(string); ok {
		return c
	}
	return ClientAddress(hr, nil)
}

// ClientAddress names the source of a request for per-client limits. It is
// the connection's peer unless that peer is a trusted proxy; then
// X-Forwarded-For is read from the right, skipping trusted hops, and the
// first untrusted address is the source (the left part of the header is
// whatever the client wrote, so it is never believed). An IPv6 source is
// its /64, which is what one client usually controls. "" when nothing
// parses (a test server without a peer address).
func ClientAddress(hr *http.Request, trusted []netip.Prefix) string {
	peer, err := netip.ParseAddrPort(hr.RemoteAddr)
	if err != nil {
		return ""
	}
	addr := peer.Addr().Unmap()
	if len(trusted) > 0 && isTrusted(addr, trusted) {
		hops := strings.Split(strings.Join(hr.Header.Values("X-Forwarded-For"), ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			hop, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
			if err != nil {
				break // a garbled hop: stop at the last address we could trust
			}
			addr = hop.Unmap()
			if !isTrusted(addr, trusted) {
				break
			}
		}
	}
	return addressKey(addr)
}

// addressKey is what one client controls: an IPv4 address or an IPv6 /64.
func addressKey(addr netip.Addr) string {
	addr = addr.Unmap()
	if addr.Is6() {
		p, _ := addr.WithZone("").Prefix(64)
		return p.String()
	}
	return addr.String()
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// abandon ends the wait for the rest of a body nobody will read: the read
// deadline passes at once, so net/http, finishing the request, fails to
// discard the rest and closes the connection after the answer (instead of
// waiting up to BodyTimeout for bytes the client may never send).
func abandon(body io.Reader) {
	if d, ok := body.(*deadlineBody); ok && !d.ended {
		d.ended = true
		d.rc.SetReadDeadline(time.Now()) //nolint:errcheck // the connection is going anyway if this fails
	}
}

type deadlineBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	timeout  time.Duration
	received int64 // bytes since the deadline last moved
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
	case d.received >= MinBodyChunk:
		// A whole chunk arrived in time: the next one gets a full timeout.
		d.received = 0
		d.rc.SetReadDeadline(time.Now().Add(d.timeout)) //nolint:errcheck // as above
	}
	return n, err
}
