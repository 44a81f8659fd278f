// Package httpserve builds the relay's HTTP listeners and servers: the public
// planes and the admin listener are both made here, so both get the same
// bounds whatever clients send.
//
//   - At most MaxConns connections per listener, of which one address (an
//     IPv4 address or an IPv6 /64; a trusted proxy is not counted) may hold
//     MaxConnsPerAddress. One more is answered at once with a retryable 503
//     in the protocol's JSON shape and closed (on a TLS listener it is
//     closed without an answer: there is no session to answer in). At the
//     cap the connection idle longest is closed to make room first, and
//     from 75% of the cap idle connections are closed after 5 s instead of
//     IdleTimeout; Stats counts all of it.
//   - Headers must arrive within HeaderTimeout and fit in MaxHeaderBytes.
//   - A body must keep arriving: every MinBodyChunk bytes within BodyTimeout
//     of the previous ones, so a slow link sending a large envelope gets the
//     time it needs while a stalled or trickling one is cut off within
//     BodyTimeout.
//   - An answer must keep leaving: every MinWriteChunk bytes must be taken
//     by the client within WriteTimeout, so an answer nobody reads is
//     released.
//   - Bodies are read through a Budget shared by every connection of both
//     listeners, which grows buffers as bytes arrive (never to a declared
//     Content-Length up front) and caps the bytes held across all of them
//     and by any one client. A request that stops reading its body (refused
//     as too large, busy or slow) closes its connection after the answer.
//   - net/http's own answers to malformed requests (400, 431, 501, 505), which
//     it writes as plain text before any handler runs, are rewritten into the
//     protocol's {"error":"bad-request","message":...} body.
//   - Optionally TLS (1.2 and later, HTTP/1.1), with the certificate reloaded
//     when its files change; plaintext HTTP sent to the TLS port is answered
//     with a redirect to https instead of a dropped connection.
package httpserve

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// Defaults for Options fields left zero.
const (
	DefaultMaxConns    = 2048
	DefaultBodyTimeout = 10 * time.Second
	// HeaderTimeout bounds the request line and headers (and, on a TLS
	// listener, the handshake before them).
	HeaderTimeout = 5 * time.Second
	// MaxHeaderBytes matches Node's default (16 KiB), what the reference
	// relay accepts; net/http adds 4 KiB of slack on top.
	MaxHeaderBytes = 16 << 10
	// DefaultWriteTimeout is how long a client may take to read each
	// MinWriteChunk of an answer: 6.4 KiB/s in every window.
	DefaultWriteTimeout = 10 * time.Second
	// MinWriteChunk is the piece of an answer that must leave within
	// WriteTimeout.
	MinWriteChunk = 64 << 10
	// DefaultConnsPerAddressDivisor: by default one address may hold a
	// quarter of MaxConns (512 of 2048): room for a NAT or a load generator
	// of a few hundred clients, while three quarters stay for everyone else.
	DefaultConnsPerAddressDivisor = 4
	// IdleTimeout closes keep-alive connections nobody uses; they count
	// against MaxConns.
	IdleTimeout = 2 * time.Minute
)

// Options configures one listener and its server.
type Options struct {
	// Name appears in logs ("planes", "admin").
	Name    string
	Handler http.Handler
	// MaxConns caps open connections on this listener; default
	// DefaultMaxConns.
	MaxConns int
	// MaxConnsPerAddress caps what one address holds of MaxConns; default
	// MaxConns/DefaultConnsPerAddressDivisor (at least 1).
	MaxConnsPerAddress int
	// TrustedProxies are peers not counted per address (a load balancer
	// carries many clients), and whose X-Forwarded-For names the client of
	// a request for the body budget's per-client share.
	TrustedProxies []netip.Prefix
	// BodyTimeout is how long each MinBodyChunk of a request body may take
	// to arrive; default DefaultBodyTimeout.
	BodyTimeout time.Duration
	// WriteTimeout is how long the client may take to read each
	// MinWriteChunk of an answer; default DefaultWriteTimeout.
	WriteTimeout time.Duration
	// TLS, when set, makes the listener serve only TLS with its certificate.
	TLS    *CertReloader
	Logger *slog.Logger
}

// Server is one bounded listener and the http.Server serving it.
type Server struct {
	// HTTP is the server; shut it down with Shutdown as usual.
	HTTP *http.Server
	ln   *listener
}

// Listen opens addr ("host:port") and builds its bounded server; call Serve.
func Listen(addr string, opts Options) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return New(ln, opts), nil
}

// New builds a bounded server on an open listener, which it takes over.
func New(ln net.Listener, opts Options) *Server {
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.MaxConnsPerAddress <= 0 {
		opts.MaxConnsPerAddress = max(opts.MaxConns/DefaultConnsPerAddressDivisor, 1)
	}
	opts.MaxConnsPerAddress = min(opts.MaxConnsPerAddress, opts.MaxConns)
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	var tlsConfig *tls.Config
	if opts.TLS != nil {
		tlsConfig = opts.TLS.Config()
	}
	bl := newListener(ln, opts, tlsConfig, opts.Logger.With(slog.String("listener", opts.Name)))
	srv := &http.Server{
		Handler:           bound(opts.Handler, opts.BodyTimeout, opts.TrustedProxies),
		ReadHeaderTimeout: HeaderTimeout,
		// No ReadTimeout: bound sets a per-request deadline that moves
		// as the body arrives, and clears it once the body is read so a
		// slow handler is never cut off by it. No WriteTimeout either:
		// each connection's writes carry their own deadline (conn.write),
		// so a long poll is not cut and a large answer read steadily is
		// not either.
		ConnState:      bl.connState,
		IdleTimeout:    IdleTimeout,
		MaxHeaderBytes: MaxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
	}
	return &Server{HTTP: srv, ln: bl}
}

// Addr is the listener's address (useful with port 0).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves until Shutdown or Close; like http.Server.Serve it returns
// http.ErrServerClosed after a shutdown.
func (s *Server) Serve() error {
	err := s.HTTP.Serve(s.ln)
	if errors.Is(err, http.ErrServerClosed) {
		return err
	}
	if err != nil {
		return fmt.Errorf("serve %s: %w", s.ln.Addr(), err)
	}
	return nil
}

// OpenConns is the number of connections currently counted against MaxConns.
func (s *Server) OpenConns() int { return s.ln.open() }

// Stats is a listener's connection use, for metrics.
type Stats struct {
	Open, Max, MaxPerAddress int
	// RefusedFull and RefusedAddress count connections refused at the
	// cap and at an address's share; ClosedIdle the idle connections
	// closed early to make room (at or near the cap).
	RefusedFull, RefusedAddress, ClosedIdle int64
}

// Stats reads the listener's counters.
func (s *Server) Stats() Stats {
	l := s.ln
	return Stats{Open: l.open(), Max: l.maxConns, MaxPerAddress: l.perAddr,
		RefusedFull: l.refusedFull.Load(), RefusedAddress: l.refusedAddr.Load(), ClosedIdle: l.closedIdle.Load()}
}
