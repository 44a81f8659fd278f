package admin

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byollm/relay-go/internal/policy"
	"github.com/byollm/relay-go/internal/projectionsync"
	"github.com/byollm/relay-go/test/relaytest"
)

// setupPolicy starts an admin server with the projection and policy routes
// over a real Valkey, in a fresh namespace removed afterwards.
func setupPolicy(t *testing.T) (*httptest.Server, *policy.Store, *projectionsync.Sync) {
	t.Helper()
	c := relaytest.Client(t)
	ns := relaytest.Namespace(t, c)
	sync := projectionsync.New(c, projectionsync.Options{Namespace: ns, Logger: relaytest.Logger(t)})
	if err := sync.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.NewStore(c, ns)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Options{Token: token, Projections: sync, Policies: pol, Logger: relaytest.Logger(t), MaxBody: 64 << 10}))
	t.Cleanup(srv.Close)
	return srv, pol, sync
}

const policyDoc = `{"consents":[{"siteId":"site-1","user":"alice","mappings":[{"purpose":"default","kind":"llm.generate","service":"qwen","owner":null}]}],` +
	`"teams":[{"owner":"bob","members":["alice"]}],"declares":[]}`

func TestPolicyRoutes(t *testing.T) {
	t.Parallel()
	srv, pol, _ := setupPolicy(t)
	auth := "Bearer " + token
	if a := call(t, srv, "PUT", "/policy", "", policyDoc); a.status != 401 {
		t.Fatalf("no token: %d", a.status)
	}
	// The projection routes alice (and has no roster): one consent agrees,
	// bob's team does not.
	if a := call(t, srv, "PUT", "/projection", auth, doc("alice")); a.status != 200 {
		t.Fatalf("projection: %d %s", a.status, a.body)
	}
	a := call(t, srv, "PUT", "/policy", auth, policyDoc)
	if a.status != 200 || !strings.Contains(a.body, `"version":1`) || !strings.Contains(a.body, `"agrees":false`) ||
		!strings.Contains(a.body, `team of \"bob\": \"alice\" is on the policy's team, not on the projection's roster`) {
		t.Fatalf("put: %d %s", a.status, a.body)
	}
	a = call(t, srv, "GET", "/policy", auth, "")
	if a.status != 200 || a.header.Get("X-Policy-Version") != "1" ||
		a.body != `{"consents":[{"siteId":"site-1","user":"alice","paused":false,"mappings":[{"purpose":"default","kind":"llm.generate","service":"qwen","owner":null}]}],"teams":[{"owner":"bob","members":["alice"]}],"declares":[]}` {
		t.Fatalf("get: %d %v %s", a.status, a.header, a.body)
	}

	// Malformed documents are refused whole, naming the field, and leave
	// the policy as it was.
	for _, bad := range []struct{ method, path, body, want string }{
		{"PUT", "/policy", `{"consents":[{"siteId":"site-1","user":"carol","mappings":[{"purpose":"p","kind":"k","service":"s","owner":1}]}]}`,
			"consents[0].mappings[0].owner"},
		{"PUT", "/policy", `{"teams":[{"owner":"bob"}]}`, "teams[0].members: required"},
		{"POST", "/policy/merge", `{"consents":[],"revoke":[{"siteId":"site-1"}]}`, "revoke[0].user: required"},
		{"PUT", "/policy", `{"consents":[{"siteId":"a\u0000b","user":"u","mappings":[]}]}`, "consents[0].siteId: holds U+0000"},
		{"PUT", "/policy", `not json`, "not valid JSON"},
		{"PUT", "/policy", `{"consents":[{"siteId":"` + strings.Repeat("s", 70<<10) + `","user":"u","mappings":[]}]}`, "body exceeds"},
	} {
		a := call(t, srv, bad.method, bad.path, auth, bad.body)
		if (a.status != 400 && a.status != 413) || !strings.Contains(a.body, bad.want) || !strings.HasPrefix(a.body, `{"error":"`) {
			t.Fatalf("%s %.60s: %d %s, want 400 naming %q", bad.path, bad.body, a.status, a.body, bad.want)
		}
	}
	if _, v, _ := pol.Get(context.Background()); v != 1 {
		t.Fatalf("refused writes moved the version to %d", v)
	}

	// A merge that makes them agree: bob's team emptied.
	a = call(t, srv, "POST", "/policy/merge", auth, `{"teams":[{"owner":"bob","members":[]}]}`)
	if a.status != 200 || !strings.Contains(a.body, `"version":2`) || !strings.Contains(a.body, `"agrees":true`) || !strings.Contains(a.body, `"driftCount":0`) {
		t.Fatalf("merge: %d %s", a.status, a.body)
	}
	a = call(t, srv, "GET", "/policy/status", auth, "")
	if a.status != 200 || a.body != `{"version":2,"agrees":true,"drift":[],"driftCount":0}` {
		t.Fatalf("status: %d %s", a.status, a.body)
	}
}

func TestPolicyPushCommand(t *testing.T) {
	t.Parallel()
	srv, pol, _ := setupPolicy(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "policy.json")
	bad := filepath.Join(dir, "bad.json")
	patch := filepath.Join(dir, "patch.json")
	os.WriteFile(good, []byte(policyDoc), 0o600)                                          //nolint:errcheck
	os.WriteFile(bad, []byte(`{"consents":[{"siteId":"s","user":"u"}]}`), 0o600)          //nolint:errcheck
	os.WriteFile(patch, []byte(`{"revoke":[{"siteId":"site-1","user":"alice"}]}`), 0o600) //nolint:errcheck
	getenv := func(k string) string {
		return map[string]string{"RELAY_ADMIN_TOKEN": token, "RELAY_ADMIN_URL": srv.URL}[k]
	}
	for _, tt := range []struct {
		name      string
		args      []string
		code      int
		out, errs string
		version   int64
	}{
		{"push replaces", []string{"push", good}, ExitOK, `"version":1`, "", 1},
		{"bad file refused", []string{"push", bad}, ExitRefused, "", "relay policy push: refused (400): bad-request: policy: consents[0].mappings: required", 1},
		{"merge revokes", []string{"push", "--merge", patch}, ExitOK, `"version":2`, "", 2},
		{"get", []string{"get"}, ExitOK, `"consents":[]`, "", 2},
		{"status", []string{"status"}, ExitOK, `"version":2`, "", 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out, errs bytes.Buffer
			code := RunPolicyCLI(context.Background(), tt.args, getenv, &out, &errs)
			if code != tt.code || !strings.Contains(out.String(), tt.out) || !strings.Contains(errs.String(), tt.errs) {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errs.String())
			}
			if _, v, _ := pol.Get(context.Background()); v != tt.version {
				t.Fatalf("version %d, want %d", v, tt.version)
			}
		})
	}
}

// Issue 27, defect 8: admin documents name each key once (a second
// "consents" was read as the last one), and an empty merge, or one that
// writes what is there already, keeps the version ("changed":false), as the
// projection's merge does. A projection naming a key twice is refused too.
func TestPolicyDuplicateKeysAndEmptyMerge(t *testing.T) {
	t.Parallel()
	srv, pol, _ := setupPolicy(t)
	auth := "Bearer " + token
	if a := call(t, srv, "PUT", "/policy", auth, policyDoc); a.status != 200 || !strings.Contains(a.body, `"version":1`) {
		t.Fatalf("put: %d %s", a.status, a.body)
	}
	for _, bad := range []struct{ method, path, body, want string }{
		{"PUT", "/policy", `{"consents":[],"consents":[{"siteId":"s","user":"u","mappings":[]}]}`, `names the key \"consents\" twice`},
		{"POST", "/policy/merge", `{"teams":[{"owner":"bob","owner":"eve","members":[]}]}`, `names the key \"owner\" twice`},
		{"PUT", "/projection", `{"sites":[],"consents":[],"consents":[{"owner":"a","siteId":"site-1"}]}`, `names the key \"consents\" twice`},
		{"POST", "/projection/merge", `{"consents":[{"owner":"a","owner":"b","siteId":"site-1"}]}`, `names the key \"owner\" twice`},
	} {
		a := call(t, srv, bad.method, bad.path, auth, bad.body)
		if a.status != 400 || !strings.Contains(a.body, bad.want) {
			t.Fatalf("%s %s %s: %d %s, want 400 naming %q", bad.method, bad.path, bad.body, a.status, a.body, bad.want)
		}
	}
	if a := call(t, srv, "GET", "/projection/status", auth, ""); !strings.HasPrefix(a.body, `{"version":0,`) {
		t.Fatalf("refused projections wrote: %s", a.body)
	}
	for _, same := range []string{`{}`, `{"consents":[],"teams":[],"declares":[],"revoke":[]}`, policyDoc, `{"revoke":[{"siteId":"nowhere","user":"nobody"}]}`} {
		a := call(t, srv, "POST", "/policy/merge", auth, same)
		if a.status != 200 || !strings.Contains(a.body, `"version":1`) || !strings.Contains(a.body, `"changed":false`) {
			t.Fatalf("merge %s: %d %s, want version 1 unchanged", same, a.status, a.body)
		}
	}
	if _, v, _ := pol.Get(context.Background()); v != 1 {
		t.Fatalf("no-op merges moved the version to %d", v)
	}
	// A merge that changes something still bumps it.
	a := call(t, srv, "POST", "/policy/merge", auth, `{"teams":[{"owner":"bob","members":["alice","carol"]}]}`)
	if a.status != 200 || !strings.Contains(a.body, `"version":2`) || !strings.Contains(a.body, `"changed":true`) {
		t.Fatalf("merge: %d %s", a.status, a.body)
	}
	// The same members in another order are the same team.
	a = call(t, srv, "POST", "/policy/merge", auth, `{"teams":[{"owner":"bob","members":["carol","alice"]}]}`)
	if a.status != 200 || !strings.Contains(a.body, `"version":2`) || !strings.Contains(a.body, `"changed":false`) {
		t.Fatalf("merge, same team: %d %s", a.status, a.body)
	}
}
