package store

import (
	"context"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/scriptrun"
)

// ScriptError is a failed call with its class, as the observer is told
// it (scriptrun.Error: "timeout", "canceled", "cluster", "busy", "full",
// "script", "connection").
type ScriptError = scriptrun.Error

// do runs one plain command (no script), observed under name like a script.
func (s *Store) do(ctx context.Context, name string, cmd valkey.Completed) valkey.ValkeyResult {
	return s.runner.Do(ctx, name, cmd)
}

// doMulti pipelines plain single-key commands (each routed to its own
// slot), observed under name as one call.
func (s *Store) doMulti(ctx context.Context, name string, cmds ...valkey.Completed) []valkey.ValkeyResult {
	return s.runner.DoMulti(ctx, name, cmds...)
}
