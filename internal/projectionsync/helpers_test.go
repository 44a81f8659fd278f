package projectionsync

import "github.com/byollm/relay-go/internal/projection"

// mayRoute: owner may route work to site-1 under p.
func mayRoute(p *projection.Projection, owner string) bool {
	return p != nil && p.MayRouteFor(owner, "site-1")
}
