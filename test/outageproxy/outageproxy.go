// Package outageproxy is a test-only TCP proxy that can take its target
// away: Down cuts every connection and refuses new ones, Up listens again on
// the same address. Tests put it between the relay and Valkey to stage an
// outage without touching the shared server.
package outageproxy

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards loopback TCP connections to one target.
type Proxy struct {
	target, addr string
	mu           sync.Mutex
	ln           net.Listener
	conns        map[net.Conn]bool
}

// New starts a proxy to target on a free loopback port; it is taken down
// when the test ends.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	p := &Proxy{target: target, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.Down)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.addr }

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[up] = true, true
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
}

// Down closes the listener and every open connection.
func (p *Proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

// Up listens again on the same address.
func (p *Proxy) Up(t testing.TB) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatalf("proxy relisten: %v", err)
	}
	p.serve(ln)
}
