package relaytest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// PrivateCluster is a 3-primary Valkey Cluster with replicas replicas a
// primary (0 starts three servers instead of six), of t alone, started with .ci/cluster on FreeRun ports and stopped when t
// ends. A test that moves slots or stops nodes needs one: on the shared
// cluster (ClusterURL) other tests' keys may hash to the slot it moves,
// and they would be refused (TRYAGAIN, ASK) while it migrates. It returns
// the cluster's URL, its first port (the other nodes follow it) and the
// directory its nodes run in (<dir>/<port>/server.pid).
func PrivateCluster(t testing.TB, replicas int) (url string, base int, dir string) {
	t.Helper()
	base, dir = FreeRun(t, 3*(1+replicas)), t.TempDir()
	script := filepath.Join(ModuleRoot(), ".ci", "cluster")
	env := append(os.Environ(), fmt.Sprintf("CLUSTER_BASE_PORT=%d", base), "CLUSTER_DIR="+dir,
		fmt.Sprintf("CLUSTER_REPLICAS=%d", replicas))
	start := exec.Command("bash", script, "start")
	start.Env = env
	out, err := start.Output()
	if err != nil {
		var stderr []byte
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf(".ci/cluster start: %v\n%s%s", err, out, stderr)
	}
	t.Cleanup(func() {
		stop := exec.Command("bash", script, "stop")
		stop.Env = env
		if out, err := stop.CombinedOutput(); err != nil {
			t.Logf(".ci/cluster stop: %v\n%s", err, out)
		}
	})
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], base, dir
}
