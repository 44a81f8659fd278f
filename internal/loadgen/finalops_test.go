package loadgen

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestFinalOps(t *testing.T) {
	t.Parallel()
	at := time.Unix(100, 0)
	enq := func(id string) Op { return Op{Kind: OpEnqueue, JobID: id, Site: "s"} }
	for _, tc := range []struct {
		name  string
		ops   []Op
		state map[string]string
		want  []string // job:outcome, in order
	}{
		{"empty history", nil, map[string]string{"x": "done"}, nil},
		{"one job stored", []Op{enq("a")}, map[string]string{"a": "done"}, []string{"a:done"}},
		{"enqueued twice (a retry) counts once", []Op{enq("a"), {Kind: OpGrant, JobID: "a"}, enq("a")}, map[string]string{"a": "queued"}, []string{"a:queued"}},
		{"gone from the store", []Op{enq("a"), enq("b")}, map[string]string{"b": "done"}, []string{"a:" + OutcomeAbsent, "b:done"}},
		{"odd ids", []Op{enq("é\u2028"), enq("")}, map[string]string{"": "done"}, []string{"é\u2028:" + OutcomeAbsent, ":done"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := FinalOps(tc.ops, tc.state, at)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d ops, want %d: %+v", len(got), len(tc.want), got)
			}
			for i, op := range got {
				if op.Kind != OpFinal || op.Start != at || op.End != at || op.Site != "s" || op.JobID+":"+op.Outcome != tc.want[i] {
					t.Fatalf("op %d: %+v, want %s", i, op, tc.want[i])
				}
			}
		})
	}
}

func TestBackgroundWait(t *testing.T) {
	t.Parallel()
	// A run that fails at once: Wait hands its error back.
	if rep, err := Start(context.Background(), Config{}).Wait(context.Background()); err == nil || rep != nil || !strings.Contains(err.Error(), "no admin token") {
		t.Fatalf("invalid run: %v %v", rep, err)
	}
	// A run that has not ended when the wait does: Wait says so.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	stuck := &Background{done: make(chan struct{})}
	if rep, err := stuck.Wait(ctx); err == nil || rep != nil || !strings.Contains(err.Error(), "did not finish") {
		t.Fatalf("unfinished run: %v %v", rep, err)
	}
}
