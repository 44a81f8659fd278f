package replica

import (
	"slices"
	"testing"

	"github.com/byollm/relay-go/internal/projection"
)

// removedDevices names exactly the runners a projection change dropped
// or revoked, once each; the first projection a replica sees names none
// (it cannot know what was there before).
func TestRemovedDevices(t *testing.T) {
	t.Parallel()
	dev := func(id string, revoked bool) projection.DeviceRecord {
		return projection.DeviceRecord{Owner: "o", RunnerID: id, Revoked: revoked}
	}
	var cur *projection.Projection
	r := &removedDevices{current: func() *projection.Projection { return cur }}
	if got := r.take(); got != nil {
		t.Fatalf("no projection: %v", got)
	}
	cur = projection.New(projection.Fixture{Devices: []projection.DeviceRecord{dev("a", false), dev("b", false), dev("c", false), dev("x", true)}})
	if got := r.take(); got != nil {
		t.Fatalf("first projection: %v", got)
	}
	if got := r.take(); got != nil {
		t.Fatalf("unchanged projection: %v", got)
	}
	cur = projection.New(projection.Fixture{Devices: []projection.DeviceRecord{dev("a", false), dev("b", true), dev("d", false)}})
	got := r.take()
	slices.Sort(got)
	if !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("after unpairing c and revoking b: %v, want [b c]", got)
	}
	if got := r.take(); got != nil {
		t.Fatalf("named twice: %v", got)
	}
}
