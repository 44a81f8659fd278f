package relaytest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/byollm/relay-go/internal/valkeyconn"
	"github.com/byollm/relay-go/test/relaytest"
)

// A namespace's keys are gone after its test, on every backend; on a
// cluster the keys spread over several primaries and each is deleted once.
func TestNamespaceCleanup(t *testing.T) {
	t.Parallel()
	backends := map[string]func(testing.TB) valkey.Client{
		"valkey": relaytest.Client, "embedded": relaytest.Embedded, "cluster": relaytest.Cluster,
	}
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := open(t)
			var ns string
			const n = 64
			t.Run("use", func(t *testing.T) {
				ns = relaytest.Namespace(t, c)
				for i := range n { // 64 hash tags: spread over every primary of a cluster
					k := fmt.Sprintf("%s:{%s}", ns, strings.Repeat("x", i+1))
					if err := c.Do(t.Context(), c.B().Set().Key(k).Value("1").Build()).Error(); err != nil {
						t.Fatal(err)
					}
				}
				if got, err := valkeyconn.Keys(t.Context(), c, ns+":*"); err != nil || len(got) != n {
					t.Fatalf("wrote %d keys, found %d (%v)", n, len(got), err)
				}
			})
			if left, err := valkeyconn.Keys(context.Background(), c, ns+":*"); err != nil || len(left) != 0 {
				t.Fatalf("after the test: %q left (%v)", left, err)
			}
		})
	}
}

func TestDeleteKeysCounts(t *testing.T) {
	t.Parallel()
	c := relaytest.Client(t)
	ns := relaytest.Namespace(t, c)
	for i := range 3 {
		k := fmt.Sprintf("%s:k%d", ns, i)
		if err := c.Do(t.Context(), c.B().Set().Key(k).Value("1").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := relaytest.DeleteKeys(t.Context(), c, ns+":*"); err != nil || n != 3 {
		t.Fatalf("deleted %d, want 3 (%v)", n, err)
	}
}

// fakeTB records a failure instead of ending the test.
type fakeTB struct {
	testing.TB
	failed string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
}

func TestWaitFor(t *testing.T) {
	t.Parallel()
	calls := 0
	relaytest.WaitFor(t, time.Minute, "third call", func() bool { calls++; return calls == 3 })
	if calls != 3 {
		t.Fatalf("polled %d times, want 3", calls)
	}
	f := &fakeTB{TB: t}
	relaytest.WaitFor(f, time.Millisecond, "the sky falls", func() bool { return false })
	if !strings.Contains(f.failed, "the sky falls") {
		t.Fatalf("failure %q does not say what never happened", f.failed)
	}
}

// A line logged after the test has ended is dropped, not a panic.
func TestLoggerAfterTheEnd(t *testing.T) {
	t.Parallel()
	var logger interface{ Info(string, ...any) }
	t.Run("inner", func(t *testing.T) {
		l := relaytest.Logger(t)
		l.Info("during")
		logger = l
	})
	logger.Info("after")
}
