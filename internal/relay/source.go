package relay

import (
	"net/http"
	"net/netip"

	"github.com/byollm/relay-go/internal/httpserve"
)

// clientAddress names the source of a request for per-address limits: the
// same rule the listeners use for the body budget's per-client share
// (httpserve.ClientAddress: the peer, or behind trusted proxies the first
// untrusted X-Forwarded-For hop from the right; an IPv6 source is its /64).
func clientAddress(hr *http.Request, trusted []netip.Prefix) string {
	return httpserve.ClientAddress(hr, trusted)
}
