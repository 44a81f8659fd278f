package store

import (
	"context"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/relaytest"
)

// AwaitPayload offers a wait only while a seal anywhere would be heard
// (every shard's subscription live); the seal of the awaited grant, made
// through another Store of the namespace, wakes it, and no other seal does.
func TestAwaitPayloadHearsSealsOfOtherReplicas(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	h := newFixture(t, b, Options{})
	if !h.s.announce {
		t.Skip("the server has no sharded pub/sub")
	}
	other, err := New(context.Background(), b.client, Options{Namespace: h.s.Namespace(), Logger: relaytest.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	ho := &storeFixture{t: t, b: b, s: other, ctx: context.Background()}

	if _, done, ok := h.s.AwaitPayload("lease"); ok {
		done()
		t.Fatal("a wait offered before the work view subscribed: another replica's seal would go unheard")
	}
	withView(t, h.s)

	h.enqueue("j1", "alice")
	h.enqueue("j2", "alice")
	got := h.claim(runner("runner_1"))
	if len(got) != 2 {
		t.Fatalf("claimed %d, want 2", len(got))
	}
	lease := map[string]string{}
	for _, c := range got {
		lease[stubID(c)] = c.Lease.ID
	}
	s1, done1, ok := h.s.AwaitPayload(lease["j1"])
	if !ok {
		t.Fatal("no wait offered with the view live")
	}
	defer done1()
	s2, done2, _ := h.s.AwaitPayload(lease["j2"])
	defer done2()

	if r := ho.seal("j2"); r.State != StateReady {
		t.Fatalf("seal j2: %+v", r)
	}
	select {
	case <-s2:
	case <-time.After(5 * time.Second):
		t.Fatal("another replica's seal of j2 did not wake its fetch")
	}
	select {
	case <-s1:
		t.Fatal("j1's fetch woke on j2's seal")
	case <-time.After(100 * time.Millisecond):
	}
	if r := ho.seal("j1"); r.State != StateReady {
		t.Fatalf("seal j1: %+v", r)
	}
	select {
	case <-s1:
	case <-time.After(5 * time.Second):
		t.Fatal("another replica's seal of j1 did not wake its fetch")
	}
	done1()
	done2()
	if n := h.s.Testing().PayloadWaits(); n != 0 {
		t.Fatalf("%d waits left", n)
	}
}
