package store

import (
	"context"
	"strings"

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

// viewPubSub gives the work view the shards' channels. A channel also
// carries seals ("!" and the grant's lease id, lib/store.lua
// announce_sealed), which go to sealed instead of the view.
type viewPubSub struct {
	c      valkey.Client
	sealed func(lease string)
}

func (p viewPubSub) Publish(ctx context.Context, channel, msg string) error {
	return p.c.Do(ctx, p.c.B().Spublish().Channel(channel).Message(msg).Build()).Error()
}

func (p viewPubSub) Receive(ctx context.Context, channel string, fn func(string)) error {
	return p.c.Receive(ctx, p.c.B().Ssubscribe().Channel(channel).Build(), func(m valkey.PubSubMessage) {
		if lease, ok := strings.CutPrefix(m.Message, "!"); ok {
			p.sealed(lease)
			return
		}
		fn(m.Message)
	})
}

// AwaitPayload registers in's fetch waiting for the payload of its grant
// (internal/payloadwait): sealed is closed when this Store learns of the
// seal, from its own Seal or, through its work view's subscriptions, from
// another replica's. Once it is, taken answers the payload when this
// Store's seal took it for the fetch (the job is running), else nil: read
// it with TakePayload. done must be called when the fetch stops waiting.
// ok is false when a seal elsewhere might go unheard (a shard's
// subscription is not live): the caller should not wait then; a
// subscription that ends while fetches wait wakes them all (OnDown), so
// a store going away costs a waiting fetch no more than any other
// request. The embedded store has one replica, so its own seals are all
// there are.
func (s *Store) AwaitPayload(in HolderInput) (sealed <-chan struct{}, taken func() []byte, done func(), ok bool) {
	// Registered before liveness is read: a subscription that ends after
	// the read wakes this wait (the view marks itself down, then wakes).
	sealed, taken, done = s.payloads.Wait(in.LeaseID, in.JobID, in.RunnerID)
	if s.announce && !s.view.Live() {
		done()
		return nil, nil, func() {}, false
	}
	return sealed, taken, done, true
}

// PayloadUnsealed reports whether this Store granted leaseID (the claim
// ran here) and has heard no seal of it since, with every shard's
// subscription live throughout: reading the store would answer not-ready,
// so a fetch that has registered with AwaitPayload can wait for the seal
// before its first read. Call it after AwaitPayload: a seal heard after
// this answers true wakes that wait. false says nothing: read first.
func (s *Store) PayloadUnsealed(leaseID string) bool {
	return s.payloads.Unsealed(leaseID, s.view.Now())
}
