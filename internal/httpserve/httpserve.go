// Package httpserve builds the relay's HTTP listeners and servers: the public
// planes and the admin listener are both made here, so both get the same
// bounds whatever clients send.
//
//   - At most MaxConns connections per listener. One more is answered at once
//     with a retryable 503 in the protocol's JSON shape and closed (on a TLS
//     listener it is closed without an answer: there is no session to answer
//     in).
//   - Headers must arrive within HeaderTimeout and fit in MaxHeaderBytes.
//   - A body must keep arriving: no pause longer than BodyTimeout, and no
//     longer in all than BodyTimeout plus one second per MinBodyRate bytes
//     received, so a slow link sending a large envelope gets the time it
//     needs while a stalled or trickling one is cut off within seconds.
//   - Bodies are read through a Budget shared by every connection of both
//     listeners, which grows buffers as bytes arrive (never to a declared
//     Content-Length up front) and caps the bytes held across all of them.
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
	// MinBodyRate is the slowest a body may arrive on average once
	// BodyTimeout is spent: each MinBodyRate bytes received buys one more
	// second. 64 KiB/s (about 0.5 Mbit/s) lets a 13 MiB envelope take three
	// and a half minutes while a trickle of a few bytes a second ends at
	// BodyTimeout.
	MinBodyRate = 64 << 10
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
	// BodyTimeout is the longest pause in a request body, and how long it
	// may take beyond the MinBodyRate allowance; default DefaultBodyTimeout.
	BodyTimeout time.Duration
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
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	var tlsConfig *tls.Config
	if opts.TLS != nil {
		tlsConfig = opts.TLS.Config()
	}
	bl := newListener(ln, opts.MaxConns, tlsConfig, opts.Logger.With(slog.String("listener", opts.Name)))
	srv := &http.Server{
		Handler:           bodyDeadlines(opts.Handler, opts.BodyTimeout),
		ReadHeaderTimeout: HeaderTimeout,
		// No ReadTimeout: bodyDeadlines sets a per-request deadline that
		// grows with the bytes received, and clears it once the body is
		// read so a slow handler is never cut off by it.
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
