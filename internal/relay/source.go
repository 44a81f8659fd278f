package relay

import (
	"net/http"
	"net/netip"
	"strings"
)

// clientAddress names the source of a request for per-address limits. It is
// the connection's peer unless that peer is a trusted proxy; then
// X-Forwarded-For is read from the right, skipping trusted hops, and the
// first untrusted address is the source (the left part of the header is
// whatever the client wrote, so it is never believed). An IPv6 source is
// its /64, which is what one client usually controls. "" when nothing
// parses (a test server without a peer address).
func clientAddress(hr *http.Request, trusted []netip.Prefix) string {
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
