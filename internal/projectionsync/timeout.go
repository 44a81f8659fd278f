package projectionsync

import (
	"context"
	"time"

	"github.com/byollm/relay-go/internal/scriptrun"
)

// WithStoreTimeout returns ctx under which each command the Sync sends to
// Valkey (its reads, writes and scripts) is bounded by d, for callers that
// answer a person or a tool and must fail fast on a frozen Valkey: the
// admin listener passes RELAY_STORE_TIMEOUT. The bound is the runner's
// (scriptrun.WithTimeout); the subscription is long-lived and never
// bounded. d <= 0 leaves ctx as it is.
func WithStoreTimeout(ctx context.Context, d time.Duration) context.Context {
	return scriptrun.WithTimeout(ctx, d)
}
