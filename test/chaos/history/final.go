package history

import (
	"context"
	"fmt"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/loadgen"
	"github.com/byollm/relay-go/internal/store"
)

// StoredFinalOps reads every job's state out of the store in namespace ns
// after a run, and returns one final op per job ops enqueued ("absent" when
// the store no longer has it), to be checked with the run's own ops.
func StoredFinalOps(ctx context.Context, c valkey.Client, ns string, ops []loadgen.Op) ([]loadgen.Op, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := store.New(ctx, c, store.Options{Namespace: ns})
	if err != nil {
		return nil, fmt.Errorf("history: open the store: %w", err)
	}
	jobs, err := st.Jobs(ctx)
	if err != nil {
		return nil, fmt.Errorf("history: read the store after the run: %w", err)
	}
	state := map[string]string{}
	for _, j := range jobs {
		state[j.ID] = j.State
	}
	return loadgen.FinalOps(ops, state, time.Now()), nil
}
