package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/byollm/relay-go/test/relaytest"
)

// The version and revision stampedRelay links in, as the Dockerfile does.
const stampVersion, stampRevision = "v9.9.9-stamp-test", "feedfacefeedfacefeedfacefeedfacefeedface"

func stampedRelay(t *testing.T) string {
	t.Helper()
	return relaytest.Build(t, "relay-stamped", nil, "-ldflags",
		"-X github.com/byollm/relay-go/internal/buildinfo.version="+stampVersion+
			" -X github.com/byollm/relay-go/internal/buildinfo.revision="+stampRevision, "./cmd/relay")
}

// TestVersionStamped: a binary stamped at link time says which build it is
// in `relay version` and `--version`, on its start line, on the operations
// view's fleet page and as relay_build_info.
func TestVersionStamped(t *testing.T) {
	t.Parallel()
	bin := stampedRelay(t)
	for _, arg := range []string{"version", "--version", "-version"} {
		var out, errb bytes.Buffer
		cmd := exec.Command(bin, arg)
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("relay %s: %v (%s)", arg, err, errb.String())
		}
		if got := out.String(); !strings.Contains(got, stampVersion) || !strings.Contains(got, stampRevision) || !strings.Contains(got, "go1.") {
			t.Errorf("relay %s = %q, want the version, the revision and the Go version", arg, got)
		}
	}

	r := relaytest.StartRelay(t, relaytest.RelayConfig{Bin: bin, Token: token,
		Env: []string{"RELAY_VALKEY_URL=" + relaytest.ValkeyURL(), "RELAY_NAMESPACE=" + namespace(t), "RELAY_OPS_HEARTBEAT=100ms"}})
	start := r.Log()
	if !strings.Contains(start, `"version":"`+stampVersion+`"`) || !strings.Contains(start, `"revision":"`+stampRevision+`"`) {
		t.Errorf("the start line does not carry the version and revision:\n%s", firstLines(start, 3))
	}

	body := get(t, r.AdminURL()+"/metrics", "")
	want := `version="` + stampVersion + `"`
	found := false
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "relay_build_info{") && strings.Contains(l, want) && strings.Contains(l, `revision="`+stampRevision+`"`) && strings.Contains(l, `goversion="go1.`) && strings.HasSuffix(l, " 1") {
			found = true
		}
	}
	if !found {
		t.Errorf("/metrics has no relay_build_info{version=%q,revision=%q,goversion} 1", stampVersion, stampRevision)
	}

	short := stampVersion + " " + stampRevision[:12]
	relaytest.WaitFor(t, 10*time.Second, "the fleet page to show this replica's version", func() bool {
		var fleet struct {
			Replicas []struct{ Version string } `json:"replicas"`
		}
		if err := json.Unmarshal([]byte(get(t, r.AdminURL()+"/ui/", token)), &fleet); err != nil {
			return false
		}
		return len(fleet.Replicas) == 1 && fleet.Replicas[0].Version == short
	})
}

// get answers the body of a GET (JSON when bearer is set: the view's form).
func get(t *testing.T, url, bearer string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
		req.Header.Set("Accept", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func firstLines(s string, n int) string {
	ls := strings.SplitN(s, "\n", n+1)
	if len(ls) > n {
		ls = ls[:n]
	}
	return strings.Join(ls, "\n")
}
