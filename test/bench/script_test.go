package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/relaytest"
)

// runScript runs the bench script name (in this folder) on the suite's
// server, writing into a fresh BENCH_OUT, with env added, for at most
// limit. It returns the script's standard output (its report) and the
// output folder; a script that fails fails t with its standard error.
func runScript(t *testing.T, name string, limit time.Duration, env ...string) (report []byte, out string) {
	t.Helper()
	server := relaytest.ServerBinary(t) // the suite's server: the script runs on it too
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	out = t.TempDir()
	cmd := exec.CommandContext(ctx, "bash", name)
	cmd.Env = append(append(os.Environ(), "BENCH_OUT="+out, "BENCH_SERVER="+server), env...)
	// A server the script started and left behind would keep its output
	// pipes open; once the script itself has exited, stop waiting on them.
	cmd.WaitDelay = 10 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	report, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, stderr.String())
	}
	return report, out
}
