package store

import (
	"fmt"
	"reflect"
	"testing"
)

// PairingCodes (store.md §6) on both backends.
func TestPairing(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		run  func(h *storeFixture, exp int64)
	}{
		{"stores, finds by either code, and drops", func(h *storeFixture, exp int64) {
			p := pending("dc-1", "ABCD-EFGH", "id-1", exp)
			h.put(p, true)
			got, err := h.s.PairingByDeviceCode(h.ctx, "dc-1")
			if err != nil || !reflect.DeepEqual(got, &p) {
				h.t.Fatalf("by device code %+v %v", got, err)
			}
			got, _ = h.s.PairingByUserCode(h.ctx, "  abcd-efgh ")
			if !reflect.DeepEqual(got, &p) {
				h.t.Fatalf("by user code %+v", got)
			}
			if err := h.s.DropPairing(h.ctx, "dc-1"); err != nil {
				h.t.Fatal(err)
			}
			if got, _ := h.s.PairingByDeviceCode(h.ctx, "dc-1"); got != nil {
				h.t.Fatal("dropped code still found")
			}
			if got, _ := h.s.PairingByUserCode(h.ctx, "ABCD-EFGH"); got != nil {
				h.t.Fatal("dropped user code still found")
			}
		}},
		{"refuses at capacity", func(h *storeFixture, exp int64) {
			for i := range 3 {
				h.put(pending(fmt.Sprint("dc-", i), fmt.Sprint("CODE-000", i), fmt.Sprint("id-", i), exp), true)
			}
			h.put(pending("dc-x", "CODE-XXXX", "id-x", exp), false)
			if got, _ := h.s.PairingByDeviceCode(h.ctx, "dc-x"); got != nil {
				h.t.Fatal("refused pairing stored")
			}
		}},
		{"expiry frees capacity: no latch", func(h *storeFixture, exp int64) {
			for i := range 3 {
				h.put(pending(fmt.Sprint("dc-", i), fmt.Sprint("CODE-000", i), fmt.Sprint("id-", i), exp), true)
			}
			h.s.Testing().AdvanceClock(PairingCodeTTLMs + 1)
			h.put(pending("dc-x", "CODE-XXXX", "id-x", exp+PairingCodeTTLMs+1), true)
			if got, _ := h.s.PairingByDeviceCode(h.ctx, "dc-0"); got != nil {
				h.t.Fatal("expired code found")
			}
		}},
		{"one code per keypair: the old code disappears from both lookups", func(h *storeFixture, exp int64) {
			h.put(pending("dc-old", "OLDC-ODE1", "id-1", exp), true)
			h.put(pending("dc-new", "NEWC-ODE1", "id-1", exp), true)
			if got, _ := h.s.PairingByDeviceCode(h.ctx, "dc-old"); got != nil {
				h.t.Fatal("old device code found")
			}
			if got, _ := h.s.PairingByUserCode(h.ctx, "OLDC-ODE1"); got != nil {
				h.t.Fatal("old user code found")
			}
			if got, _ := h.s.PairingByUserCode(h.ctx, "NEWC-ODE1"); got == nil || got.DeviceCode != "dc-new" {
				h.t.Fatalf("new code %+v", got)
			}
		}},
		{"a repeating device cannot use up the capacity; re-pairing needs no free slot", func(h *storeFixture, exp int64) {
			h.put(pending("dc-a", "AAAA-AAAA", "id-a", exp), true)
			h.put(pending("dc-b", "BBBB-BBBB", "id-b", exp), true)
			for i := range 10 {
				h.put(pending(fmt.Sprint("dc-c", i), fmt.Sprint("CCCC-000", i), "id-c", exp), true)
			}
			h.put(pending("dc-d", "DDDD-DDDD", "id-d", exp), false)
		}},
		{"one source holds at most PairingsPerSource live codes; drops and expiry free it", func(h *storeFixture, exp int64) {
			h.s.opts.PairingCapacity = 10
			from := func(dc, id, src string) PendingPairing {
				p := pending(dc, "CODE-"+dc, id, exp)
				p.Source = src
				return p
			}
			h.put(from("a1", "id-a1", "10.0.0.1"), true)
			h.put(from("a2", "id-a2", "10.0.0.1"), true)
			out, err := h.s.PutPairing(h.ctx, from("a3", "id-a3", "10.0.0.1"))
			if out != PairingSourceBusy || err != nil {
				h.t.Fatalf("third code of one source: %v %v", out, err)
			}
			h.put(from("b1", "id-b1", "10.0.0.2"), true)         // another source
			h.put(pending("n1", "CODE-n1", "id-n1", exp), true)  // no source: not counted
			h.put(from("a1bis", "id-a1", "10.0.0.1"), true)      // same keypair: replaces a1
			if err := h.s.DropPairing(h.ctx, "a2"); err != nil { // an approved code is dropped
				h.t.Fatal(err)
			}
			h.put(from("a3", "id-a3", "10.0.0.1"), true)
			h.s.Testing().AdvanceClock(PairingCodeTTLMs + 1)
			exp += PairingCodeTTLMs + 1
			h.put(from("a4", "id-a4", "10.0.0.1"), true)
			h.put(from("a5", "id-a5", "10.0.0.1"), true)
			if out, _ := h.s.PutPairing(h.ctx, from("a6", "id-a6", "10.0.0.1")); out != PairingSourceBusy {
				h.t.Fatalf("after expiry, the limit still holds: %v", out)
			}
		}},
		{"a colliding user code keeps the first live holder", func(h *storeFixture, exp int64) {
			h.put(pending("dc-1", "SAME-CODE", "id-1", exp), true)
			h.put(pending("dc-2", "SAME-CODE", "id-2", exp), true)
			if got, _ := h.s.PairingByUserCode(h.ctx, "same-code"); got == nil || got.DeviceCode != "dc-1" {
				h.t.Fatalf("got %+v", got)
			}
		}},
		{"unknown codes answer nothing", func(h *storeFixture, exp int64) {
			if got, err := h.s.PairingByDeviceCode(h.ctx, "never"); got != nil || err != nil {
				h.t.Fatalf("%+v %v", got, err)
			}
			if got, err := h.s.PairingByUserCode(h.ctx, "NEVE-RXXX"); got != nil || err != nil {
				h.t.Fatalf("%+v %v", got, err)
			}
		}},
	}
	eachBackend(t, func(t *testing.T, b backend) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				h := newFixture(t, b, Options{PairingCapacity: 3, PairingsPerSource: 2})
				c.run(h, h.now()+PairingCodeTTLMs)
			})
		}
	})
}

func (h *storeFixture) put(p PendingPairing, want bool) {
	h.t.Helper()
	out, err := h.s.PutPairing(h.ctx, p)
	if ok := out == PairingStored; err != nil || ok != want {
		h.t.Fatalf("put %s = %v %v, want stored=%v", p.DeviceCode, out, err, want)
	}
}

// The purge is bounded per call, yet expired codes never count against the
// capacity and drain within a few calls.
func TestPairingPurgeIsBounded(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{PairingCapacity: 40})
		exp := h.now() + PairingCodeTTLMs
		for i := range 40 {
			h.put(pending(fmt.Sprint("dc-", i), fmt.Sprintf("CODE-%04d", i), fmt.Sprint("id-", i), exp), true)
		}
		h.put(pending("dc-full", "FULL-FULL", "id-full", exp), false)
		h.s.Testing().AdvanceClock(PairingCodeTTLMs + 1)
		count := func() int64 {
			n, err := b.client.Do(h.ctx, b.client.B().Zcard().Key(h.s.k.pairing("x")).Build()).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		for i := range 3 { // 16 purged per call: 40 expired are gone after 3
			h.put(pending(fmt.Sprint("dc-new", i), fmt.Sprintf("NEWC-%04d", i), fmt.Sprint("id-new", i), exp+PairingCodeTTLMs+1), true)
			if got, want := count(), int64(40-16*(i+1)); max(want, 0)+int64(i+1) != got {
				t.Fatalf("after put %d: %d codes stored, want %d", i, got, max(want, 0)+int64(i+1))
			}
		}
		if got, _ := h.s.PairingByUserCode(h.ctx, "CODE-0039"); got != nil {
			t.Fatalf("expired code found: %+v", got)
		}
	})
}
