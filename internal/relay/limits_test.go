package relay

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/byollm/relay-go/internal/protocol"
)

// A heartbeat or release naming more than protocol.MaxGrantRefs grants is
// the schema refusal and touches nothing; one at the cap is served (in
// store.GrantChunk script calls) with the held grant renewed or released
// wherever it sits in the list.
func TestGrantListCap(t *testing.T) {
	e := newEnv(t)
	w := newWorld(t)
	w.install(e)
	lease := e.enqueueAndClaim(t, w, "cap1", "bob", w.bob, "runner_bob")
	held := protocol.GrantRef{JobID: "cap1", LeaseID: lease.ID}

	grants := func(n int) []protocol.GrantRef {
		out := make([]protocol.GrantRef, n)
		for i := range out {
			out[i] = protocol.GrantRef{JobID: fmt.Sprintf("ghost-%d", i), LeaseID: "no-such-lease"}
		}
		out[n-1] = held // in the last chunk
		return out
	}

	t.Run("over the cap is refused", func(t *testing.T) {
		before, _ := e.st.Job(t.Context(), "site_a", "cap1")
		expect(t, e.daemonPost(w.bob, "runner_bob", "heartbeat",
			heartbeatJSON(t, "runner_bob", "0.1.1", grants(protocol.MaxGrantRefs+1)...)), 400, schemaBody)
		expect(t, e.daemonPost(w.bob, "runner_bob", "release",
			releaseJSON(t, "runner_bob", "pause", grants(protocol.MaxGrantRefs+1)...)), 400, schemaBody)
		after, _ := e.st.Job(t.Context(), "site_a", "cap1")
		if after.State != before.State || after.ClaimedBy.LeaseExpiresAt != before.ClaimedBy.LeaseExpiresAt {
			t.Fatalf("a refused request changed the job: %+v -> %+v", before, after)
		}
	})

	t.Run("at the cap is served", func(t *testing.T) {
		got := e.daemonPost(w.bob, "runner_bob", "heartbeat", heartbeatJSON(t, "runner_bob", "0.1.1", grants(protocol.MaxGrantRefs)...))
		var r hbResponse
		if got.status != 200 || json.Unmarshal(got.body, &r) != nil {
			t.Fatalf("heartbeat: %d %s", got.status, got.body)
		}
		if len(r.Lost) != protocol.MaxGrantRefs-1 || r.Lost[0].JobID != "ghost-0" {
			t.Fatalf("lost %d grants (first %+v), want the %d unknown ones in order", len(r.Lost), r.Lost[0], protocol.MaxGrantRefs-1)
		}
		expect(t, e.daemonPost(w.bob, "runner_bob", "release",
			releaseJSON(t, "runner_bob", "pause", grants(protocol.MaxGrantRefs)...)), 200, `{"released":["cap1"]}`)
	})
}
