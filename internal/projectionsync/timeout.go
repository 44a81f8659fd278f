package projectionsync

import (
	"context"
	"time"

	"github.com/valkey-io/valkey-go"
)

type storeTimeoutKey struct{}

// WithStoreTimeout returns ctx under which each command the Sync sends to
// Valkey (its reads, writes and scripts) is bounded by d, for callers that
// answer a person or a tool and must fail fast on a frozen Valkey: the
// admin listener passes RELAY_STORE_TIMEOUT. Calls without it keep the
// caller's own deadline (start-up, the follower), so a slow start is not
// cut at the request bound. d <= 0 leaves ctx as it is.
func WithStoreTimeout(ctx context.Context, d time.Duration) context.Context {
	if d <= 0 {
		return ctx
	}
	return context.WithValue(ctx, storeTimeoutKey{}, d)
}

// timedClient applies WithStoreTimeout's bound to every Do and DoMulti
// (a Lua script's EVALSHA, and its EVAL fallback, go through Do). The
// subscription (Dedicate, Receive) is long-lived and never bounded.
type timedClient struct {
	valkey.Client
}

func bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Value(storeTimeoutKey{}).(time.Duration); ok {
		return context.WithTimeout(ctx, d)
	}
	return ctx, func() {}
}

func (c timedClient) Do(ctx context.Context, cmd valkey.Completed) valkey.ValkeyResult {
	ctx, cancel := bound(ctx)
	defer cancel()
	return c.Client.Do(ctx, cmd)
}

func (c timedClient) DoMulti(ctx context.Context, multi ...valkey.Completed) []valkey.ValkeyResult {
	ctx, cancel := bound(ctx)
	defer cancel()
	return c.Client.DoMulti(ctx, multi...)
}
