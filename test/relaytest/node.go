package relaytest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// npmInstalls remembers, per directory, the outcome of its one `npm ci`.
var npmInstalls sync.Map // dir -> *npmInstall

type npmInstall struct {
	once sync.Once
	err  error
}

// NodeModules runs `npm ci` in dir (from its committed package-lock.json)
// once per test process, unless marker, a path under dir such as
// "node_modules/.bin/vitest", is already there. It fails t if npm fails.
func NodeModules(t testing.TB, dir, marker string) {
	t.Helper()
	v, _ := npmInstalls.LoadOrStore(dir, &npmInstall{})
	in := v.(*npmInstall)
	in.once.Do(func() {
		if _, err := os.Stat(filepath.Join(dir, marker)); err == nil {
			return
		}
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			in.err = fmt.Errorf("npm ci in %s: %w\n%s", dir, err, out)
		}
	})
	if in.err != nil {
		t.Fatal(in.err)
	}
}

// VitestReport is the part of vitest's JSON reporter output (the
// Jest-compatible shape) the contract suites read.
type VitestReport struct {
	NumTotalTests   int `json:"numTotalTests"`
	NumPassedTests  int `json:"numPassedTests"`
	NumFailedTests  int `json:"numFailedTests"`
	NumPendingTests int `json:"numPendingTests"`
	TestResults     []struct {
		Name             string `json:"name"`
		Message          string `json:"message"`
		AssertionResults []struct {
			FullName        string   `json:"fullName"`
			Status          string   `json:"status"`
			FailureMessages []string `json:"failureMessages"`
		} `json:"assertionResults"`
	} `json:"testResults"`
}

// Vitest runs `vitest run` in dir (NodeModules first) with env added to
// the environment, and returns its report. It fails t when vitest writes
// no report, or exits non-zero with no failed case.
func Vitest(ctx context.Context, t testing.TB, dir string, env ...string) VitestReport {
	t.Helper()
	NodeModules(t, dir, filepath.Join("node_modules", ".bin", "vitest"))
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.CommandContext(ctx, filepath.Join(abs, "node_modules", ".bin", "vitest"),
		"run", "--reporter=json", "--outputFile="+out)
	cmd.Dir = abs
	cmd.Env = append(append(os.Environ(), "NO_COLOR=1"), env...)
	var stdio bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdio, &stdio
	start := time.Now()
	runErr := cmd.Run() // non-zero when a case fails; the report says which
	t.Logf("vitest in %s took %v", dir, time.Since(start).Round(time.Millisecond))
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("vitest wrote no report (%v): %v\n%s", runErr, err, stdio.String())
	}
	var report VitestReport
	if err := json.Unmarshal(data, &report); err != nil {
		t.Fatalf("parse vitest report: %v\n%s", err, data)
	}
	if runErr != nil && report.NumFailedTests == 0 {
		t.Errorf("vitest failed with no failed case: %v\n%s", runErr, stdio.String())
	}
	return report
}

// RequireAll fails t unless the report has exactly want cases and all of
// them passed (a suite that silently lost cases fails too), naming each
// case that did not pass.
func (r VitestReport) RequireAll(t testing.TB, want int) {
	t.Helper()
	for _, file := range r.TestResults {
		if file.Message != "" {
			t.Errorf("%s: %s", file.Name, file.Message)
		}
		for _, a := range file.AssertionResults {
			if a.Status != "passed" {
				t.Errorf("[%s] %s\n    %s", a.Status, a.FullName,
					strings.ReplaceAll(strings.Join(a.FailureMessages, "\n"), "\n", "\n    "))
			}
		}
	}
	t.Logf("%d/%d passed (%d failed, %d pending)", r.NumPassedTests, r.NumTotalTests, r.NumFailedTests, r.NumPendingTests)
	if r.NumTotalTests != want || r.NumPassedTests != want {
		t.Fatalf("%d of %d cases passed, want %d of %d", r.NumPassedTests, r.NumTotalTests, want, want)
	}
}
