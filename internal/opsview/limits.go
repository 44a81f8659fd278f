package opsview

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Site-token pages are rate-limited per token and per client address, on
// each replica: a page costs a few store scripts (about 10 ms of Valkey
// time for a busy site), and 50 concurrent pages of one token took 7.7 s
// of Valkey time in 10 s. A token bucket per token id and per address:
// Options.SiteRate pages a second sustained, bursts of ten seconds' worth
// (a person opening a dozen tabs). The per-address bucket is charged for
// every site-token lookup, valid or not, so guessing tokens costs no store
// calls beyond the same rate. The admin is never limited. The limit is per
// replica: behind N replicas a client may get N times the rate.

// DefaultSiteRate is the sustained pages per second per site token and per
// address (a page refreshes itself every 5 s: ten open pages are 2/s).
const DefaultSiteRate = 2.0

// maxBuckets bounds the limiter's memory; past it, idle buckets go, and if
// that is not enough, all of them (a flood of addresses starts afresh).
const maxBuckets = 16384

type bucket struct {
	tokens float64
	last   time.Time
}

type limiter struct {
	rate, burst float64
	now         func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

func newLimiter(rate float64) *limiter {
	if rate <= 0 {
		rate = DefaultSiteRate
	}
	return &limiter{rate: rate, burst: max(1, 10*rate), now: time.Now, buckets: map[string]*bucket{}}
}

// take spends one page from key's bucket; it returns 0, or how long to
// wait before one is there.
func (l *limiter) take(key string) time.Duration {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			l.prune(now)
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	return time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

func (l *limiter) prune(now time.Time) {
	full := time.Duration(l.burst / l.rate * float64(time.Second))
	for k, b := range l.buckets {
		if now.Sub(b.last) >= full {
			delete(l.buckets, k)
		}
	}
	if len(l.buckets) >= maxBuckets {
		clear(l.buckets)
	}
}

// limits are the two limiters of site-token pages.
type limits struct{ byToken, byAddress *limiter }

func newLimits(rate float64) limits {
	return limits{byToken: newLimiter(rate), byAddress: newLimiter(rate)}
}

func (l limits) token(id string) time.Duration  { return l.byToken.take(id) }
func (l limits) address(a string) time.Duration { return l.byAddress.take(a) }

// clientAddress is the connection's address without its port (the admin
// listener is reached directly: no forwarding header is trusted).
func clientAddress(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// slowDown is a site-token request over its rate.
type slowDown struct{ wait time.Duration }

func (e *slowDown) Error() string {
	return fmt.Sprintf("too many site-token pages; retry in %v", e.wait)
}

// tooMany answers 429 with Retry-After in whole seconds (at least 1).
func (h *Handler) tooMany(w http.ResponseWriter, e *slowDown) {
	secs := max(1, int(math.Ceil(e.wait.Seconds())))
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeError(w, http.StatusTooManyRequests, "rate-limited",
		fmt.Sprintf("too many pages for this site token or address; retry in %d s (RELAY_UI_SITE_RATE)", secs))
}
