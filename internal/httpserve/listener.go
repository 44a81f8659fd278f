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
	"strconv"
	"strings"
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

// listener counts connections against a cap and wraps each accepted one.
type listener struct {
	net.Listener
	slots     chan struct{}
	rejecting chan struct{}
	tls       *tls.Config
	log       *slog.Logger
	busy      []byte
}

func newListener(ln net.Listener, maxConns int, tlsConfig *tls.Config, log *slog.Logger) *listener {
	return &listener{
		Listener:  ln,
		slots:     make(chan struct{}, maxConns),
		rejecting: make(chan struct{}, maxRejecting),
		tls:       tlsConfig,
		log:       log,
		busy: jsonAnswer(http.StatusServiceUnavailable, "server-error",
			"the relay is serving as many connections as it allows — try again shortly"),
	}
}

func (l *listener) open() int { return len(l.slots) }

// Accept returns the next connection within the cap; connections over it are
// refused here and never reach the server.
func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
		default:
			l.reject(c)
			continue
		}
		bc := &conn{raw: c, inner: c, l: l}
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

// reject answers a connection over the cap with a retryable 503 (both real
// clients retry 503 server-error) and closes it. A TLS client could not read
// a plaintext answer, so it is just closed.
func (l *listener) reject(c net.Conn) {
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
		answerAndClose(c, l.busy)
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
	done    atomic.Bool
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
		if _, err := c.inner.Write(jsonAnswer(status, "bad-request", cannedMessage(status, text))); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return c.inner.Write(b)
}

func (c *conn) Close() error {
	if c.done.CompareAndSwap(false, true) {
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

func (c *conn) LocalAddr() net.Addr                { return c.raw.LocalAddr() }
func (c *conn) RemoteAddr() net.Addr               { return c.raw.RemoteAddr() }
func (c *conn) SetDeadline(t time.Time) error      { return c.inner.SetDeadline(t) }
func (c *conn) SetReadDeadline(t time.Time) error  { return c.inner.SetReadDeadline(t) }
func (c *conn) SetWriteDeadline(t time.Time) error { return c.inner.SetWriteDeadline(t) }

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
