package store

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/byollm/relay-go/internal/protocol"
)

// Pending pairings (§6). Liveness (expiresAt > now) is judged on the store
// clock, the same clock the planes use to compute expiresAt.

// PutPairing stores p unless the store is at capacity or p.Source already
// holds PairingsPerSource live codes. Expired entries are purged first and
// the same keypair's previous code is replaced, so re-pairing never needs a
// free slot. The stored record is at most MaxPairingBytes.
func (s *Store) PutPairing(ctx context.Context, p PendingPairing) (PairingOutcome, error) {
	for _, f := range []struct{ name, v string }{
		{"device code", p.DeviceCode}, {"user code", p.UserCode}, {"identity", p.Device.Identity},
		{"source", p.Source},
	} {
		if err := s.checkID(f.name, f.v); err != nil {
			return "", fmt.Errorf("put pairing: %w", err)
		}
	}
	p.Capabilities = orEmptyArray(p.Capabilities)
	raw, err := protocol.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("put pairing: %w", err)
	}
	if len(raw) > s.opts.MaxPairingBytes {
		return "", fmt.Errorf("put pairing: %w: the pairing is %d bytes, the limit is %d", ErrInvalidInput, len(raw), s.opts.MaxPairingBytes)
	}
	if err := s.checkBlob("pairing", raw); err != nil {
		return "", fmt.Errorf("put pairing: %w", err)
	}
	source, network := "", ""
	if p.Source != "" {
		source = enc(p.Source)
		if n := SourceNetwork(p.Source); n != "" {
			network = enc(n)
		}
	}
	msg, err := s.run(ctx, scPairingPut,
		[]string{s.k.pairing("d"), s.k.pairing("x"), s.k.pairing("mi"), s.k.pairing("mu"), s.k.pairing("i"), s.k.pairing("u"),
			s.k.pairing("ms"), s.k.pairing("a:" + source), s.k.pairing("mn"), s.k.pairing("n:" + network)},
		strconv.Itoa(s.opts.PairingCapacity), p.DeviceCode, p.UserCode, p.Device.Identity,
		strconv.FormatInt(p.ExpiresAt, 10), string(raw), source, strconv.Itoa(s.opts.PairingsPerSource),
		network, strconv.Itoa(s.opts.PairingsPerNetwork), strconv.Itoa(s.opts.PairingCapacity/PairingReserveDivisor))
	if err != nil {
		return "", fmt.Errorf("put pairing: %w", err)
	}
	status, err := str(msg)
	if err != nil {
		return "", fmt.Errorf("put pairing: %w", err)
	}
	switch out := PairingOutcome(status); out {
	case PairingStored, PairingAtCapacity, PairingSourceBusy, PairingNetworkBusy:
		return out, nil
	}
	return "", fmt.Errorf("put pairing: unexpected reply %q", status)
}

// SourceNetwork is the network a pairing source is counted in beyond its
// own address: an IPv4 address's /24, an IPv6 address's or prefix's /48 (the
// planes name an IPv6 client by its /64). A source that is neither names no
// network ("") and is bounded by its address alone.
func SourceNetwork(source string) string {
	bitsOf := func(a netip.Addr) int {
		if a.Is4() {
			return 24
		}
		return 48
	}
	if a, err := netip.ParseAddr(source); err == nil {
		a = a.Unmap().WithZone("")
		p, _ := a.Prefix(bitsOf(a))
		return p.String()
	}
	if p, err := netip.ParsePrefix(source); err == nil {
		a := p.Addr().Unmap()
		n, _ := a.Prefix(min(bitsOf(a), p.Bits()))
		return n.String()
	}
	return ""
}

// PairingByDeviceCode returns the live pairing of deviceCode, else nil.
func (s *Store) PairingByDeviceCode(ctx context.Context, deviceCode string) (*PendingPairing, error) {
	if err := s.checkID("device code", deviceCode); err != nil {
		return nil, fmt.Errorf("pairing by device code: %w", err)
	}
	msg, err := s.run(ctx, scPairingGet, []string{s.k.pairing("d")}, deviceCode)
	if err != nil {
		return nil, fmt.Errorf("pairing by device code: %w", err)
	}
	return parsePairing(msg.IsNil(), msg.ToString)
}

// PairingByUserCode returns the live pairing of a user code; the input is
// trimmed and upper-cased first, stored codes already are.
func (s *Store) PairingByUserCode(ctx context.Context, userCode string) (*PendingPairing, error) {
	code := strings.ToUpper(strings.TrimSpace(userCode))
	if err := s.checkID("user code", code); err != nil {
		return nil, fmt.Errorf("pairing by user code: %w", err)
	}
	msg, err := s.run(ctx, scPairingByUser, []string{s.k.pairing("u")}, code)
	if err != nil {
		return nil, fmt.Errorf("pairing by user code: %w", err)
	}
	return parsePairing(msg.IsNil(), msg.ToString)
}

func parsePairing(isNil bool, get func() (string, error)) (*PendingPairing, error) {
	if isNil {
		return nil, nil
	}
	raw, err := get()
	if err != nil {
		return nil, fmt.Errorf("pairing: %w", err)
	}
	var p PendingPairing
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		return nil, fmt.Errorf("pairing: %w", err)
	}
	return &p, nil
}

// DropPairing deletes a pairing by device code (single use after approval).
func (s *Store) DropPairing(ctx context.Context, deviceCode string) error {
	if err := s.checkID("device code", deviceCode); err != nil {
		return fmt.Errorf("drop pairing: %w", err)
	}
	if _, err := s.run(ctx, scPairingDrop, []string{s.k.pairing("d")}, deviceCode); err != nil {
		return fmt.Errorf("drop pairing: %w", err)
	}
	return nil
}
