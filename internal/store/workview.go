package store

import (
	"context"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/workview"
)

// DefaultWorkViewQueues is Options.WorkViewQueues' default
// (workview.DefaultQueues).
const DefaultWorkViewQueues = workview.DefaultQueues

// RunWorkView keeps this Store's work view (internal/workview) until ctx
// ends: one sharded subscription per shard, each restarted after a failure
// (that shard's view is off meanwhile). While a shard's view is live, an
// empty claim or a sweep with nothing due asks that shard nothing. It
// returns at once when the server has no sharded pub/sub (the embedded
// store).
func (s *Store) RunWorkView(ctx context.Context) {
	if !s.announce {
		return
	}
	s.view.Run(ctx)
}

// viewPubSub gives the work view the shards' channels.
type viewPubSub struct{ c valkey.Client }

func (p viewPubSub) Publish(ctx context.Context, channel, msg string) error {
	return p.c.Do(ctx, p.c.B().Spublish().Channel(channel).Message(msg).Build()).Error()
}

func (p viewPubSub) Receive(ctx context.Context, channel string, fn func(string)) error {
	return p.c.Receive(ctx, p.c.B().Ssubscribe().Channel(channel).Build(), func(m valkey.PubSubMessage) { fn(m.Message) })
}
