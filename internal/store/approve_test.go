package store

import (
	"errors"
	"reflect"
	"testing"
)

// Approval by user code (pairing_approve.lua) on both backends. The script
// judges liveness and approval itself, on its own TIME reading: these call
// it directly, without the lookup the admin API makes first, so each check
// in the script is what refuses.
func TestApprovePairing(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{})
		target := ProjectionTarget{
			Document: h.s.k.p + "projection", Approved: h.s.k.p + "projection:approved", Channel: h.s.k.p + "projection:changed",
		}
		approve := func(code, dc string, version int64, runner string) (int64, error) {
			v, _, err := h.s.ApprovePairing(h.ctx, target, Approval{UserCode: code, DeviceCode: dc, Version: version,
				RunnerID: runner, Record: []byte(`{"owner":"o","runnerId":"` + runner + `"}`)})
			return v, err
		}
		unchanged := func(what string, f func() error, want error) {
			t.Helper()
			before := dump(t, b, h.s)
			if err := f(); !errors.Is(err, want) {
				t.Fatalf("%s: %v, want %v", what, err, want)
			}
			if after := dump(t, b, h.s); !reflect.DeepEqual(before, after) {
				t.Fatalf("%s changed the store", what)
			}
		}
		exp := h.now() + PairingCodeTTLMs
		h.put(pending("dc-1", "AAAA-1111", "id-1", exp), true)
		h.put(pending("dc-2", "BBBB-2222", "id-2", exp), true)

		unchanged("unknown code", func() error { _, err := approve("ZZZZ-ZZZZ", "dc-1", 0, "r1"); return err }, ErrPairingUnknown)
		unchanged("another code's device code", func() error { _, err := approve("AAAA-1111", "dc-2", 0, "r1"); return err }, ErrProjectionMoved)
		unchanged("stale projection version", func() error { _, err := approve("AAAA-1111", "dc-1", 7, "r1"); return err }, ErrProjectionMoved)

		v, err := approve(" aaaa-1111 ", "dc-1", 0, "r1")
		if err != nil || v != 1 {
			t.Fatalf("approve: %d %v", v, err)
		}
		view, err := h.s.ShowPairing(h.ctx, "aaaa-1111")
		if err != nil || view == nil || view.ApprovedAs != "r1" || view.DeviceCode != "dc-1" {
			t.Fatalf("show: %+v %v", view, err)
		}
		rec, err := b.client.Do(h.ctx, b.client.B().Hget().Key(target.Approved).Field("r1").Build()).ToString()
		if err != nil || rec != `{"owner":"o","runnerId":"r1"}` {
			t.Fatalf("record %q %v", rec, err)
		}
		unchanged("approved twice", func() error { _, err := approve("AAAA-1111", "dc-1", 1, "r9"); return err }, ErrPairingApproved)
		unchanged("deny an approved code", func() error { return h.s.DenyPairing(h.ctx, "AAAA-1111") }, ErrPairingApproved)

		// The daemon's approved poll drops the code, approval mark included.
		if err := h.s.DropPairing(h.ctx, "dc-1"); err != nil {
			t.Fatal(err)
		}
		if n, _ := b.client.Do(h.ctx, b.client.B().Hlen().Key(h.s.k.pairing("a")).Build()).AsInt64(); n != 0 {
			t.Fatalf("%d approval marks left after the code was dropped", n)
		}

		// Deny drops a live code whole.
		if err := h.s.DenyPairing(h.ctx, "bbbb-2222"); err != nil {
			t.Fatal(err)
		}
		if got, _ := h.s.PairingByDeviceCode(h.ctx, "dc-2"); got != nil {
			t.Fatal("denied code still found")
		}

		// Past the expiry (expiresAt <= now): refused by the script itself.
		h.put(pending("dc-3", "CCCC-3333", "id-3", exp), true)
		h.s.Testing().SetClockOffset(PairingCodeTTLMs)
		unchanged("expired", func() error { _, err := approve("CCCC-3333", "dc-3", 1, "r3"); return err }, ErrPairingExpired)
		unchanged("deny expired", func() error { return h.s.DenyPairing(h.ctx, "CCCC-3333") }, ErrPairingExpired)
		if _, err := h.s.ShowPairing(h.ctx, "CCCC-3333"); !errors.Is(err, ErrPairingExpired) {
			t.Fatalf("show expired: %v", err)
		}

		// Keys outside the namespace are refused before any script runs.
		if _, _, err := h.s.ApprovePairing(h.ctx, ProjectionTarget{Document: "elsewhere", Approved: "x"}, Approval{
			UserCode: "CCCC-3333", DeviceCode: "dc-3", RunnerID: "r", Record: []byte(`{}`)}); err == nil {
			t.Fatal("foreign keys accepted")
		}
	})
}
