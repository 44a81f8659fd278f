package store

import (
	"fmt"
	"strings"
	"testing"
)

func TestSourceNetwork(t *testing.T) {
	t.Parallel()
	for src, want := range map[string]string{
		"192.0.2.77":               "192.0.2.0/24",
		"::ffff:192.0.2.77":        "192.0.2.0/24",
		"2001:db8:1:2::/64":        "2001:db8:1::/48", // the planes' form of an IPv6 client
		"2001:db8:1:2::9":          "2001:db8:1::/48",
		"fe80::1%eth0":             "fe80::/48",
		"10.1.2.0/16":              "10.1.0.0/16", // never wider than given
		"::ffff:192.0.2.0/120":     "192.0.2.0/24",
		"":                         "",
		"not an address":           "",
		"192.0.2.300":              "",
		strings.Repeat("1", 1_000): "",
	} {
		if got := SourceNetwork(src); got != want {
			t.Errorf("SourceNetwork(%q) = %q, want %q", src, got, want)
		}
	}
}

// Live codes are bounded per network (IPv4 /24, IPv6 /48) as well as per
// address; drops and expiry free the network, leaving no key behind; the
// last fifth of the capacity goes only to networks holding no live code.
func TestPairingPerNetworkAndReserve(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{PairingCapacity: 20, PairingsPerSource: 2, PairingsPerNetwork: 4})
		exp := h.now() + PairingCodeTTLMs
		n := 0
		from := func(src string) PendingPairing {
			n++
			p := pending(fmt.Sprint("dc-", n), fmt.Sprintf("CODE-%04d", n), fmt.Sprint("id-", n), exp)
			p.Source = src
			return p
		}
		outcome := func(src string) PairingOutcome {
			t.Helper()
			out, err := h.s.PutPairing(h.ctx, from(src))
			if err != nil {
				t.Fatalf("put from %s: %v", src, err)
			}
			return out
		}
		for _, src := range []string{"10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2"} {
			if out := outcome(src); out != PairingStored {
				t.Fatalf("from %s: %s", src, out)
			}
		}
		if out := outcome("10.0.0.3"); out != PairingNetworkBusy {
			t.Fatalf("a fifth code of 10.0.0.0/24: %s", out)
		}
		if out := outcome("10.0.0.1"); out != PairingSourceBusy {
			t.Fatalf("a third code of one address: %s, want the address's own refusal first", out)
		}
		for _, src := range []string{"2001:db8:1:2::/64", "2001:db8:1:2::/64", "2001:db8:1:3::/64", "2001:db8:1:3::/64"} {
			if out := outcome(src); out != PairingStored {
				t.Fatalf("from %s: %s", src, out)
			}
		}
		if out := outcome("2001:db8:1:ff::/64"); out != PairingNetworkBusy {
			t.Fatalf("a fifth code of 2001:db8:1::/48: %s", out)
		}
		// A dropped (approved) code frees its network.
		if err := h.s.DropPairing(h.ctx, "dc-1"); err != nil {
			t.Fatal(err)
		}
		if out := outcome("10.0.0.9"); out != PairingStored {
			t.Fatalf("after a drop: %s", out)
		}
		// Fill to the unreserved 16 from fresh networks, one code each.
		for i := 0; h.live() < 16; i++ {
			if out := outcome(fmt.Sprintf("10.1.%d.1", i)); out != PairingStored {
				t.Fatalf("filling: %s", out)
			}
		}
		if out := outcome("10.1.0.2"); out != PairingAtCapacity {
			t.Fatalf("a network holding a code, past the unreserved part: %s", out)
		}
		if out := outcome(""); out != PairingStored {
			t.Fatalf("a start without a source (counted nowhere): %s", out)
		}
		for i := range 3 {
			if out := outcome(fmt.Sprintf("10.2.%d.1", i)); out != PairingStored {
				t.Fatalf("fresh network %d in the reserve: %s", i, out)
			}
		}
		if out := outcome("10.3.0.1"); out != PairingAtCapacity {
			t.Fatalf("a fresh network with the relay full: %s", out)
		}
		// Expiry frees everything, and leaves no network index behind.
		h.s.Testing().AdvanceClock(PairingCodeTTLMs + 1)
		for i := range 30 {
			_, _ = h.s.PutPairing(h.ctx, pending(fmt.Sprint("late-", i), fmt.Sprintf("LATE-%04d", i), fmt.Sprint("late-", i), exp+PairingCodeTTLMs+1))
		}
		for _, k := range scanKeys(t, b.client, h.s.k.pairing("n:*")) {
			zn, err := b.client.Do(h.ctx, b.client.B().Zcard().Key(k).Build()).AsInt64()
			if err != nil || zn != 0 {
				t.Errorf("network index %s holds %d after every code expired (%v)", k, zn, err)
			}
		}
		if mn, _ := b.client.Do(h.ctx, b.client.B().Hlen().Key(h.s.k.pairing("mn")).Build()).AsInt64(); mn != 0 {
			t.Errorf("pc:mn holds %d entries after every code expired", mn)
		}
	})
}

func (h *storeFixture) live() int {
	h.t.Helper()
	n, err := h.b.client.Do(h.ctx, h.b.client.B().Zcount().Key(h.s.k.pairing("x")).Min(fmt.Sprint("(", h.now())).Max("+inf").Build()).AsInt64()
	if err != nil {
		h.t.Fatal(err)
	}
	return int(n)
}
