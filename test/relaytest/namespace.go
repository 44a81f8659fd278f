package relaytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/valkeyconn"
)

// NewName is a fresh random namespace ("t" and 12 hex digits), valid under
// the store's namespace rule. Nothing cleans it up: prefer Namespace.
func NewName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:])
}

// Namespace is a fresh namespace for t alone; when t ends every key of it
// ("<ns>:*", the store's KeyPattern) is deleted from c.
func Namespace(t testing.TB, c valkey.Client) string {
	t.Helper()
	ns := NewName()
	CleanupKeys(t, c, ns+":*")
	return ns
}

// CleanupKeys deletes every key matching pattern from c when t ends, and
// fails t if it cannot. It tries three times: a test that restarted its
// own server leaves the client a dead connection, whose first command
// fails (EOF) before the client dials again.
func CleanupKeys(t testing.TB, c valkey.Client, pattern string) {
	t.Helper()
	t.Cleanup(func() {
		var err error
		for try := range 3 {
			if try > 0 {
				time.Sleep(100 * time.Millisecond)
			}
			if _, err = DeleteKeys(context.Background(), c, pattern); err == nil {
				return
			}
		}
		t.Errorf("relaytest: cleanup %s: %v", pattern, err)
	})
}

// DeleteKeys deletes every key matching pattern (a SCAN MATCH glob) and
// reports how many it deleted. On a cluster it walks every primary
// (valkeyconn.Keys) and sends one UNLINK per key, so that each goes to its
// own slot's owner; pipelined in batches.
func DeleteKeys(ctx context.Context, c valkey.Client, pattern string) (int, error) {
	keys, err := valkeyconn.Keys(ctx, c, pattern)
	if err != nil {
		return 0, fmt.Errorf("delete %s: %w", pattern, err)
	}
	deleted := 0
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		cmds := make(valkey.Commands, 0, n)
		for _, k := range keys[:n] {
			cmds = append(cmds, c.B().Unlink().Key(k).Build())
		}
		for _, r := range c.DoMulti(ctx, cmds...) {
			d, err := r.AsInt64()
			if err != nil {
				return deleted, fmt.Errorf("delete %s: %w", pattern, err)
			}
			deleted += int(d)
		}
		keys = keys[n:]
	}
	return deleted, nil
}
