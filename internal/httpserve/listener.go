package httpserve

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Over the connection cap, answering the refused connection may have to
// wait for its client; at most this many such answers are in progress, and
// connections beyond that are closed without one.
const maxRejecting = 64

// rejectLinger bounds how long a refused connection is kept to deliver its
// 503 (write, then read what the client had already sent so closing does not
// reset the connection before the answer is read).
const rejectLinger = time.Second

// listener counts connections against a cap and a per-address share of it,
// and wraps each accepted one. It also knows which connections are idle
// between requests (net/http's ConnState), so that near the cap idle ones
// are closed sooner, and at the cap the longest idle one makes room for a
// new client instead of the newcomer being refused.
type listener struct {
	net.Listener
	slots    chan struct{}
	maxConns int
	perAddr  int
	trusted  []netip.Prefix
	// writeTimeout: how long a client may take to read one MinWriteChunk.
	writeTimeout time.Duration
	rejecting    chan struct{}
	tls          *tls.Config
	log          *slog.Logger
	busy         []byte
	busyAddr     []byte

	mu    sync.Mutex
	addrs map[string]int      // open connections per address (untrusted peers)
	idle  map[*conn]time.Time // idle since
	full  bool                // over the high-water mark at the last check

	refusedFull, refusedAddr, closedIdle atomic.Int64

	stop     chan struct{}
	stopOnce sync.Once
}

// Near the cap (highWaterPercent of MaxConns open), connections idle for
// busyIdleTimeout are closed instead of after IdleTimeout; reapEvery is how
// often that is checked.
const (
	highWaterPercent = 75
	busyIdleTimeout  = 5 * time.Second
	reapEvery        = time.Second
)

func newListener(ln net.Listener, opts Options, tlsConfig *tls.Config, log *slog.Logger) *listener {
	l := &listener{
		Listener:     ln,
		slots:        make(chan struct{}, opts.MaxConns),
		maxConns:     opts.MaxConns,
		perAddr:      opts.MaxConnsPerAddress,
		trusted:      opts.TrustedProxies,
		writeTimeout: opts.WriteTimeout,
		rejecting:    make(chan struct{}, maxRejecting),
		tls:          tlsConfig,
		log:          log,
		busy: jsonAnswer(http.StatusServiceUnavailable, "server-error",
			"the relay is serving as many connections as it allows — try again shortly"),
		busyAddr: jsonAnswer(http.StatusServiceUnavailable, "server-error",
			"this address holds as many connections as the relay allows one address — close idle ones or try again shortly"),
		addrs: map[string]int{},
		idle:  map[*conn]time.Time{},
		stop:  make(chan struct{}),
	}
	go l.reap()
	return l
}

func (l *listener) open() int { return len(l.slots) }

// Close stops the idle reaper and closes the listener.
func (l *listener) Close() error {
	l.stopOnce.Do(func() { close(l.stop) })
	return l.Listener.Close()
}

// peerKey is the address a connection counts against, or "" for a trusted
// proxy (its connections carry many clients; their bodies are still shared
// per client by X-Forwarded-For).
func (l *listener) peerKey(c net.Conn) string {
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return ""
	}
	if isTrusted(ap.Addr().Unmap(), l.trusted) {
		return ""
	}
	return addressKey(ap.Addr())
}

// Accept returns the next connection within the cap and its address's
// share; connections over either are refused here and never reach the
// server.
func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := l.peerKey(c)
		if key != "" {
			l.mu.Lock()
			over := l.addrs[key] >= l.perAddr
			if !over {
				l.addrs[key]++
			}
			l.mu.Unlock()
			if over {
				l.refusedAddr.Add(1)
				l.reject(c, l.busyAddr)
				continue
			}
		}
		if !l.takeSlot() {
			l.forget(key)
			l.refusedFull.Add(1)
			l.reject(c, l.busy)
			continue
		}
		bc := &conn{raw: c, inner: c, l: l, key: key}
		if l.tls != nil {
			// Read through a small buffer so the first byte can be
			// looked at before the TLS layer consumes anything.
			bc.sniff = bufio.NewReaderSize(c, 1024)
			bc.tls = tls.Server(&sniffedConn{Conn: c, r: bc.sniff}, l.tls)
			bc.inner = bc.tls
		}
		return bc, nil
	}
}

// takeSlot takes a connection slot; at the cap it closes the connection
// idle longest to make room (a keep-alive connection nobody uses should not
// keep a new client out).
func (l *listener) takeSlot() bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
	}
	var oldest *conn
	var since time.Time
	l.mu.Lock()
	for c, at := range l.idle {
		if oldest == nil || at.Before(since) {
			oldest, since = c, at
		}
	}
	if oldest != nil {
		delete(l.idle, oldest)
	}
	l.mu.Unlock()
	if oldest == nil {
		return false
	}
	l.closedIdle.Add(1)
	oldest.Close() // frees its slot now
	select {
	case l.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

func (l *listener) forget(key string) {
	if key == "" {
		return
	}
	l.mu.Lock()
	if l.addrs[key] <= 1 {
		delete(l.addrs, key)
	} else {
		l.addrs[key]--
	}
	l.mu.Unlock()
}

// connState follows net/http's view of each connection (Server.ConnState).
func (l *listener) connState(nc net.Conn, st http.ConnState) {
	c, ok := nc.(*conn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if st == http.StateIdle && !c.done.Load() {
		l.idle[c] = time.Now()
	} else {
		delete(l.idle, c)
	}
}

// reap closes connections idle for busyIdleTimeout while the listener is
// near its cap, and logs when it becomes and stops being saturated.
func (l *listener) reap() {
	t := time.NewTicker(reapEvery)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		open := l.open()
		near := open*100 >= l.maxConns*highWaterPercent
		var victims []*conn
		l.mu.Lock()
		was := l.full
		l.full = near
		if near {
			cutoff := time.Now().Add(-busyIdleTimeout)
			for c, at := range l.idle {
				if at.Before(cutoff) {
					victims = append(victims, c)
					delete(l.idle, c)
				}
			}
		}
		l.mu.Unlock()
		for _, c := range victims {
			l.closedIdle.Add(1)
			c.Close()
		}
		switch {
		case near && !was:
			l.log.Warn("httpserve: listener near its connection cap; closing idle connections after "+busyIdleTimeout.String(),
				"open", open, "maxConns", l.maxConns, "closedIdle", len(victims))
		case !near && was:
			l.log.Info("httpserve: listener back under its connection high-water mark", "open", open, "maxConns", l.maxConns)
		}
	}
}

// reject answers a connection over the cap with a retryable 503 (both real
// clients retry 503 server-error) and closes it. A TLS client could not read
// a plaintext answer, so it is just closed.
func (l *listener) reject(c net.Conn, answer []byte) {
	if l.tls != nil {
		c.Close()
		return
	}
	select {
	case l.rejecting <- struct{}{}:
	default:
		c.Close()
		return
	}
	go func() {
		defer func() { <-l.rejecting }()
		answerAndClose(c, answer)
	}()
}

// answerAndClose writes a whole answer, then half-closes and reads what the
// client sent (briefly, a bounded amount) so the kernel does not reset the
// connection over unread bytes before the client has read the answer.
func answerAndClose(c net.Conn, answer []byte) {
	defer c.Close()
	deadline := time.Now().Add(rejectLinger)
	c.SetDeadline(deadline) //nolint:errcheck // a closed conn fails the write below
	if _, err := c.Write(answer); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite() //nolint:errcheck // best effort; Close follows
	}
	io.Copy(io.Discard, io.LimitReader(c, 64<<10)) //nolint:errcheck // draining only
}

// conn is one accepted connection: it frees its slot once on Close, rewrites
// net/http's plain-text error answers into JSON, and on a TLS listener wraps
// the TLS session (net/http then sees a plain net.Conn and serves HTTP/1.1;
// the handshake runs on the first read, under the header deadline).
type conn struct {
	raw     net.Conn
	inner   net.Conn // raw, or tls
	tls     *tls.Conn
	sniff   *bufio.Reader // TLS only: what the TLS layer reads from
	sniffed bool
	l       *listener
	key     string // the address it counts against ("" for a trusted proxy)
	done    atomic.Bool
	// writeBy is the write deadline in force (see Write).
	writeBy time.Time
}

// errPlaintext ends a plaintext request on the TLS port after its answer. It
// is a read OpError so net/http hangs up without writing its own 400 (which
// would go through the TLS layer and start a handshake).
var errPlaintext = &net.OpError{Op: "read", Net: "tcp", Err: errors.New("plaintext on the TLS port")}

func (c *conn) Read(b []byte) (int, error) {
	if c.tls != nil && !c.sniffed {
		// net/http reads one request at a time, so this runs once, before
		// the handshake, under the header deadline.
		c.sniffed = true
		first, err := c.sniff.Peek(1)
		if err != nil {
			return 0, err
		}
		if first[0] != tlsHandshakeRecord {
			if peek, _ := c.sniff.Peek(5); len(peek) == 5 && looksLikeHTTP([5]byte(peek)) {
				answerPlaintext(c.sniff, c.raw)
			}
			return 0, errPlaintext
		}
	}
	return c.inner.Read(b)
}

// tlsHandshakeRecord is the first byte of every TLS ClientHello.
const tlsHandshakeRecord = 0x16

// sniffedConn is the raw connection as the TLS layer sees it: reads go
// through the buffer that looked at the first byte.
type sniffedConn struct {
	net.Conn
	r *bufio.Reader
}

func (s *sniffedConn) Read(b []byte) (int, error) { return s.r.Read(b) }

func (c *conn) Write(b []byte) (int, error) {
	if status, text, ok := cannedError(b); ok {
		if _, err := c.write(jsonAnswer(status, "bad-request", cannedMessage(status, text))); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return c.write(b)
}

// write writes b in pieces of at most MinWriteChunk, each of which the
// client must take within the write timeout: a client that stops reading
// is cut on that schedule, and the answer it was sent is released, while
// one reading at the floor rate or faster is never cut, however large the
// answer.
func (c *conn) write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		piece := b[:min(len(b), MinWriteChunk)]
		if by := time.Now().Add(c.l.writeTimeout); by.Sub(c.writeBy) >= deadlineStep {
			c.writeBy = by
			c.inner.SetWriteDeadline(by) //nolint:errcheck // a closed conn fails the write below
		}
		n, err := c.inner.Write(piece)
		written += n
		if err != nil {
			return written, err
		}
		b = b[n:]
	}
	return written, nil
}

// deadlineStep is the least a write deadline moves, so an answer written in
// small pieces does not reset the connection's timer on every write.
const deadlineStep = 100 * time.Millisecond

func (c *conn) Close() error {
	if c.done.CompareAndSwap(false, true) {
		c.l.mu.Lock()
		delete(c.l.idle, c)
		c.l.mu.Unlock()
		c.l.forget(c.key)
		<-c.l.slots
	}
	return c.inner.Close()
}

// CloseWrite lets net/http half-close after an error answer, as it does on a
// bare *net.TCPConn, so the client reads the answer before the connection
// goes.
func (c *conn) CloseWrite() error {
	if cw, ok := c.inner.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *conn) LocalAddr() net.Addr               { return c.raw.LocalAddr() }
func (c *conn) RemoteAddr() net.Addr              { return c.raw.RemoteAddr() }
func (c *conn) SetDeadline(t time.Time) error     { return c.inner.SetDeadline(t) }
func (c *conn) SetReadDeadline(t time.Time) error { return c.inner.SetReadDeadline(t) }
func (c *conn) SetWriteDeadline(t time.Time) error {
	c.writeBy = time.Time{} // the next write sets its own again
	return c.inner.SetWriteDeadline(t)
}

// goErrorHeaders is what net/http's conn.serve writes after the status line
// of every answer it makes without a handler (server.go, "errorHeaders").
const goErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// cannedError recognises one of net/http's own error answers, which it writes
// to the connection in one Write: "HTTP/1.1 " + line + goErrorHeaders + body,
// where body repeats line (or, for 501, names the transfer encoding). A
// handler's answer never matches: it carries a Date header.
func cannedError(b []byte) (status int, text string, ok bool) {
	rest, found := bytes.CutPrefix(b, []byte("HTTP/1.1 "))
	if !found {
		return 0, "", false
	}
	line, body, found := bytes.Cut(rest, []byte(goErrorHeaders))
	if !found || len(line) < 4 || line[3] != ' ' || bytes.ContainsAny(line, "\r\n") {
		return 0, "", false
	}
	if !bytes.Equal(body, line) && string(body) != "Unsupported transfer encoding" {
		return 0, "", false
	}
	status, err := strconv.Atoi(string(line[:3]))
	if err != nil || status < 400 || status > 599 {
		return 0, "", false
	}
	// "400 Bad Request: missing required Host header" → the part after ": ".
	_, text, _ = strings.Cut(string(line[4:]), ": ")
	return status, text, true
}

func cannedMessage(status int, text string) string {
	switch status {
	case http.StatusRequestHeaderFieldsTooLarge:
		return "the request headers are too large for the relay to read"
	case http.StatusHTTPVersionNotSupported:
		return "this HTTP version is not supported — send HTTP/1.1"
	case http.StatusNotImplemented:
		return "this transfer encoding is not supported"
	}
	if text != "" {
		return "the request could not be read as HTTP: " + text
	}
	return "the request could not be read as HTTP"
}

// jsonAnswer is a whole HTTP/1.1 answer carrying {"error":code,"message":msg}
// that closes the connection.
func jsonAnswer(status int, code, message string) []byte {
	body, _ := json.Marshal(struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}{code, message})
	return answer(status, nil, body)
}

func answer(status int, extra []string, body []byte) []byte {
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\n")
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n")
	b.Write(body)
	return b.Bytes()
}

// looksLikeHTTP is net/http's own test for a plaintext request on a TLS port.
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO", "DELET", "PATCH":
		return true
	}
	return false
}

var plaintextOnTLS = jsonAnswer(http.StatusBadRequest, "bad-request", "this port serves only TLS — use https://")

// answerPlaintext answers an HTTP request sent in plaintext to the TLS port
// with a permanent redirect to the same URL over https (308 keeps the method
// and body), so nothing is served in plaintext and a browser or scanner is
// told where to go. Without a usable Host it is a 400. The request is read
// from in (the buffered start of the connection), at most MaxHeaderBytes.
func answerPlaintext(in io.Reader, raw net.Conn) {
	raw.SetReadDeadline(time.Now().Add(HeaderTimeout)) //nolint:errcheck // bounded read below either way
	r := bufio.NewReaderSize(io.LimitReader(in, MaxHeaderBytes), 4096)
	out := plaintextOnTLS
	if req, err := http.ReadRequest(r); err == nil && validHost(req.Host) {
		body, _ := json.Marshal(struct {
			Error   string `json:"error"`
			Message string `json:"message"`
		}{"bad-request", "this port serves only TLS — use https://" + req.Host})
		out = answer(http.StatusPermanentRedirect, []string{"Location: https://" + req.Host + req.URL.RequestURI()}, body)
	}
	raw.SetWriteDeadline(time.Now().Add(rejectLinger)) //nolint:errcheck // the write fails if it cannot
	raw.Write(out)                                     //nolint:errcheck // nothing more to do for this client
	if cw, ok := raw.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite() //nolint:errcheck // best effort
	}
	// Let the client read the answer before the close (net/http closes
	// the connection when Read fails).
	raw.SetReadDeadline(time.Now().Add(rejectLinger)) //nolint:errcheck // bounded either way
	io.Copy(io.Discard, io.LimitReader(in, 64<<10))   //nolint:errcheck // draining only
}

// validHost accepts host[:port] made of the characters a hostname or an IP
// literal uses, so the Location header cannot be bent into something else.
func validHost(h string) bool {
	if h == "" || len(h) > 255 {
		return false
	}
	for _, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune(".-:[]", c)) {
			return false
		}
	}
	return true
}
