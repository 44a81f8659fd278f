package store

import (
	"context"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/protocol"
)

// enqueueMany pipelines the enqueue script (EVALSHA via ExecMulti), so tests
// and benchmarks can queue 100k jobs in seconds.
func enqueueMany(t testing.TB, s *Store, c valkey.Client, siteID string, stubs []protocol.JobStub) {
	t.Helper()
	ctx := context.Background()
	const chunk = 2000
	churn := "0"
	if s.opts.OnChurn != nil {
		churn = "1"
	}
	if err := s.placeSites(ctx, siteID); err != nil {
		t.Fatal(err)
	}
	for len(stubs) > 0 {
		n := min(chunk, len(stubs))
		execs := make([]valkey.LuaExec, 0, n)
		for _, st := range stubs[:n] {
			raw, err := protocol.Marshal(st)
			if err != nil {
				t.Fatal(err)
			}
			keys, args := s.enqueueCall(siteID, st, raw)
			keys = append(keys, GuardKey(prefixOf(keys[0]))) // as Store.run does
			execs = append(execs, valkey.LuaExec{Keys: keys, Args: append([]string{prefixOf(keys[0]), "0", churn}, args...)})
		}
		for _, r := range valkey.NewLuaScript(s.scripts[scEnqueue.Name].Source()).ExecMulti(ctx, c, execs...) {
			if err := r.Error(); err != nil {
				t.Fatalf("bulk enqueue: %v", err)
			}
		}
		stubs = stubs[n:]
	}
}
