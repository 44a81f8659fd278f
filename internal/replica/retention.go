package replica

import (
	"github.com/byollm/relay-go/internal/projection"
)

// removedDevices names the runners the projection dropped or revoked
// since its last call, for the sweeper to forget at once (the rest of a
// device's end is the retention: store.Options.DeviceRetention). A
// replica knows only the changes it saw: devices removed before it
// started, or while it was down, end by the retention instead.
type removedDevices struct {
	current func() *projection.Projection
	last    *projection.Projection
	active  map[string]bool // runner ids the last projection holds unrevoked
}

func (r *removedDevices) take() []string {
	p := r.current()
	if p == nil || p == r.last {
		return nil
	}
	active := make(map[string]bool, len(r.active))
	for _, d := range p.Fixture().Devices {
		if !d.Revoked {
			active[d.RunnerID] = true
		}
	}
	var gone []string
	if r.last != nil {
		for id := range r.active {
			if !active[id] {
				gone = append(gone, id)
			}
		}
	}
	r.last, r.active = p, active
	return gone
}
