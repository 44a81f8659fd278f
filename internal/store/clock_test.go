package store

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/byollm/relay-go/internal/protocol"
)

// Exact clock arithmetic (store.md §7.3, traps 9 and 30) with the clock
// frozen at T: a private miniredis whose TIME stands still, so every
// boundary can be hit to the millisecond.
func TestFrozenClockArithmetic(t *testing.T) {
	t.Parallel()
	at := time.UnixMilli(1_900_000_000_123)
	T := at.UnixMilli()
	cases := []struct {
		name string
		run  func(h *storeFixture)
	}{
		{"now is TIME in ms plus the offset", func(h *storeFixture) {
			if n := h.now(); n != T {
				h.t.Fatalf("now %d, want %d", n, T)
			}
			h.s.Testing().SetClockOffset(-123)
			if n := h.now(); n != T-123 {
				h.t.Fatalf("now %d, want %d", n, T-123)
			}
		}},
		{"lease.expiresAt is T+leaseMs and awaitingUntil is T+10000", func(h *storeFixture) {
			h.enqueue("a", "alice")
			g := h.claim(leaseMs(45000))[0]
			j := h.job(site, "a")
			if g.Lease.ExpiresAt != T+45000 || j.ClaimedBy.LeaseExpiresAt != T+45000 || j.AwaitingUntil != T+10000 {
				h.t.Fatalf("grant %+v job %+v", g.Lease, j)
			}
			if g.Lease.RunnerID != "runner_1" {
				h.t.Fatalf("lease runner %s", g.Lease.RunnerID)
			}
		}},
		{"lastSeenAt is T", func(h *storeFixture) {
			if p := h.seen("runner_1", "alice", freshDevice(), "[]", "[]"); p.LastSeenAt != T {
				h.t.Fatalf("lastSeenAt %d", p.LastSeenAt)
			}
		}},
		{"the window is due at awaitingUntil, not a millisecond before", func(h *storeFixture) {
			h.enqueue("a", "alice")
			h.claim()
			h.s.Testing().SetClockOffset(AwaitingPayloadMs - 1)
			if swept := h.sweep(); len(swept) != 0 {
				h.t.Fatalf("swept at -1: %+v", swept)
			}
			h.mustState("a", StateAwaitingPayload)
			h.s.Testing().SetClockOffset(AwaitingPayloadMs)
			if swept := h.sweep(); len(swept) != 1 || swept[0].State != StateQueued {
				h.t.Fatalf("at awaitingUntil: %+v", swept)
			}
		}},
		{"the lease is due at leaseExpiresAt", func(h *storeFixture) {
			h.enqueue("a", "alice")
			h.claim(leaseMs(1000))
			h.seal("a")
			h.s.Testing().SetClockOffset(999)
			if len(h.sweep()) != 0 {
				h.t.Fatal("requeued before expiry")
			}
			h.s.Testing().SetClockOffset(1000)
			if len(h.sweep()) != 1 {
				h.t.Fatal("not requeued at expiry")
			}
		}},
		{"the deadline is due at deadlineAt", func(h *storeFixture) {
			st := stub("a", "alice")
			st.DeadlineAt = T + 100
			h.enqueueStub(site, st)
			h.s.Testing().SetClockOffset(99)
			if len(h.sweep()) != 0 {
				h.t.Fatal("removed before the deadline")
			}
			h.s.Testing().SetClockOffset(100)
			if swept := h.sweep(); len(swept) != 1 || !swept[0].SweptAway {
				h.t.Fatalf("at deadline: %+v", swept)
			}
		}},
		{"retryAfter blocks while strictly later than now", func(h *storeFixture) {
			h.enqueue("a", "alice")
			g := h.claim()[0]
			ra := T + 500
			h.release("runner_1", []protocol.GrantRef{grant(g)}, "", &ra)
			h.s.Testing().SetClockOffset(499)
			if len(h.claim()) != 0 {
				h.t.Fatal("granted before retryAfter")
			}
			h.s.Testing().SetClockOffset(500)
			if len(h.claim()) != 1 {
				h.t.Fatal("not granted at retryAfter")
			}
		}},
		{"a pairing is live while expiresAt is later than now", func(h *storeFixture) {
			p := pending("dc1", "ABCD-EFGH", "id1", T+PairingCodeTTLMs)
			if ok, err := h.s.PutPairing(h.ctx, p); ok != PairingStored || err != nil {
				h.t.Fatalf("put %v %v", ok, err)
			}
			h.s.Testing().SetClockOffset(PairingCodeTTLMs - 1)
			if got, _ := h.s.PairingByDeviceCode(h.ctx, "dc1"); got == nil {
				h.t.Fatal("not live before expiry")
			}
			h.s.Testing().SetClockOffset(PairingCodeTTLMs)
			if got, _ := h.s.PairingByDeviceCode(h.ctx, "dc1"); got != nil {
				h.t.Fatal("live at expiry")
			}
			if got, _ := h.s.PairingByUserCode(h.ctx, "abcd-efgh"); got != nil {
				h.t.Fatal("live by user code at expiry")
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, _ := frozenBackend(t, at)
			c.run(newFixture(t, b, Options{}))
		})
	}
}

// On a real server TIME moves, but one claim reads it once: the two instants
// it stamps differ by exactly AWAITING_PAYLOAD_MS - leaseMs.
func TestOneClockReadingPerClaim(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		h.enqueue("a", "alice")
		before := h.now()
		g := h.claim(leaseMs(45000))[0]
		after := h.now()
		j := h.job(site, "a")
		T := g.Lease.ExpiresAt - 45000
		if T < before || T > after || j.AwaitingUntil != T+AwaitingPayloadMs || j.ClaimedBy.LeaseExpiresAt != T+45000 {
			t.Fatalf("before %d after %d grant %+v job %+v", before, after, g.Lease, j)
		}
	})
}

func pending(dc, uc, identity string, expiresAt int64) PendingPairing {
	return PendingPairing{DeviceCode: dc, UserCode: uc,
		Device: protocol.PublicIdentity{Identity: identity, Encryption: "e-" + identity, EncryptionSig: "s-" + identity},
		Label:  "laptop", Platform: "darwin", Capabilities: json.RawMessage(`[]`), ExpiresAt: expiresAt}
}
