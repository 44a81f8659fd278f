package grantremote

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/byollm/relay-go/internal/grant"
)

// remote is a test control plane over real HTTP: it records what it was
// sent and answers with whatever the test sets.
type remote struct {
	mu     sync.Mutex
	path   string
	auth   string
	ctype  string
	body   string
	status int
	reply  string
	srv    *httptest.Server
}

func newRemote(t *testing.T) *remote {
	r := &remote{status: 200}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.path, r.auth, r.ctype, r.body = req.URL.Path, req.Header.Get("Authorization"), req.Header.Get("Content-Type"), string(b)
		status, reply := r.status, r.reply
		r.mu.Unlock()
		w.WriteHeader(status)
		io.WriteString(w, reply)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *remote) answer(status int, reply string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status, r.reply = status, reply
}

const job = `{"id":"j1","kind":"llm.chat","owner":"bob","site":"BYOLLM-SITE","audience":"team","sizeClass":"small","streaming":false,"deadlineAt":1,"lease":{"id":"l1","runnerId":"r1","expiresAt":2}}`

var request = grant.Request{
	Job: json.RawMessage(job), SiteID: "site_a", SiteKey: "BYOLLM-SITE", Purpose: "summarise", HasPurpose: true,
	Owner: "alice", RunnerID: "r1", Capabilities: json.RawMessage(`[{"kind":"llm.chat","service":"svc"}]`),
}

// TestAuthorGrantContract pins the request the relay sends and the replies
// it accepts: exactly {granted} or {declined:{permanent, reason?}}.
func TestAuthorGrantContract(t *testing.T) {
	r := newRemote(t)
	a, err := NewAuthority(r.srv.URL+"/cp/", Options{Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	signed := `{"grantId":"g1","jobId":"j1","signature":"c2ln"}`
	r.answer(200, `{"granted":`+signed+`}`)
	d, err := a.AuthorGrant(t.Context(), request)
	if err != nil || string(d.Granted) != signed {
		t.Fatalf("granted: %+v %v", d, err)
	}
	wantBody := `{"job":` + job + `,"siteId":"site_a","siteKey":"BYOLLM-SITE","purpose":"summarise","owner":"alice","runnerId":"r1","capabilities":[{"kind":"llm.chat","service":"svc"}]}`
	if r.path != "/cp/author-grant" || r.auth != "Bearer s3cret" || r.ctype != "application/json" || r.body != wantBody {
		t.Fatalf("request: %s %q %q\n%s\nwant\n%s", r.path, r.auth, r.ctype, r.body, wantBody)
	}

	noPurpose := request
	noPurpose.HasPurpose, noPurpose.Purpose = false, ""
	r.answer(200, `{"declined":{"permanent":true,"reason":"not-a-member"}}`)
	d, err = a.AuthorGrant(t.Context(), noPurpose)
	if err != nil || d.Granted != nil || !d.Permanent || d.Reason != "not-a-member" {
		t.Fatalf("permanent decline: %+v %v", d, err)
	}
	if strings.Contains(r.body, "purpose") {
		t.Fatalf("purpose sent for a stub without one: %s", r.body)
	}
	r.answer(200, `{"declined":{"permanent":false}}`)
	if d, err = a.AuthorGrant(t.Context(), request); err != nil || d.Permanent || d.Granted != nil {
		t.Fatalf("transient decline: %+v %v", d, err)
	}

	for name, reply := range map[string]struct {
		status int
		body   string
	}{
		"not JSON":                {200, `granted`},
		"empty":                   {200, ``},
		"both":                    {200, `{"granted":` + signed + `,"declined":{"permanent":false}}`},
		"neither":                 {200, `{}`},
		"unknown key":             {200, `{"granted":` + signed + `,"extra":1}`},
		"grant not an object":     {200, `{"granted":"yes"}`},
		"grant null":              {200, `{"granted":null}`},
		"grant for another job":   {200, `{"granted":{"jobId":"j2","signature":"c2ln"}}`},
		"grant without signature": {200, `{"granted":{"jobId":"j1"}}`},
		"permanent missing":       {200, `{"declined":{"reason":"x"}}`},
		"permanent not a boolean": {200, `{"declined":{"permanent":"yes"}}`},
		"unknown key in declined": {200, `{"declined":{"permanent":false,"why":"x"}}`},
		"trailing data":           {200, `{"declined":{"permanent":false}} {}`},
		"status 500":              {500, `{"declined":{"permanent":false}}`},
		"status 401":              {401, `unauthorized`},
		"larger than the bound":   {200, `{"declined":{"permanent":false,"reason":"` + strings.Repeat("x", MaxReplyBytes) + `"}}`},
	} {
		t.Run(name, func(t *testing.T) {
			r.answer(reply.status, reply.body)
			if d, err := a.AuthorGrant(t.Context(), request); err == nil {
				t.Fatalf("accepted %q as %+v", reply.body, d)
			}
		})
	}

	t.Run("unreachable", func(t *testing.T) {
		dead, _ := NewAuthority("http://127.0.0.1:1", Options{})
		if _, err := dead.AuthorGrant(t.Context(), request); err == nil {
			t.Fatal("no error from an unreachable authority")
		}
	})
	t.Run("the context bounds the call", func(t *testing.T) {
		block := make(chan struct{})
		slow := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-block }))
		defer slow.Close()
		defer close(block)
		s, _ := NewAuthority(slow.URL, Options{})
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := s.AuthorGrant(ctx, request); err == nil {
			t.Fatal("no error from a cancelled call")
		}
	})
}

// TestSatisfiableContract: {siteId, owner, purpose?, kind} in, {verdict}
// out, one of the four verdicts or an error.
func TestSatisfiableContract(t *testing.T) {
	r := newRemote(t)
	a, err := NewAuthority(r.srv.URL, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []grant.Verdict{grant.VerdictOK, grant.VerdictNotDeclared, grant.VerdictUnmapped, grant.VerdictWaiting} {
		r.answer(200, `{"verdict":"`+string(v)+`"}`)
		got, err := a.Satisfiable(t.Context(), grant.SatisfiableRequest{SiteID: "s", Owner: "bob", Purpose: "p", HasPurpose: true, Kind: "llm.chat"})
		if err != nil || got != v {
			t.Fatalf("verdict %s: %q %v", v, got, err)
		}
	}
	if r.path != "/satisfiable" || r.auth != "" || r.body != `{"siteId":"s","owner":"bob","purpose":"p","kind":"llm.chat"}` {
		t.Fatalf("request %s %q %s", r.path, r.auth, r.body)
	}
	if _, err := a.Satisfiable(t.Context(), grant.SatisfiableRequest{SiteID: "s", Owner: "bob", Kind: "llm.chat"}); err != nil ||
		r.body != `{"siteId":"s","owner":"bob","kind":"llm.chat"}` {
		t.Fatalf("without purpose: %s %v", r.body, err)
	}
	for _, reply := range []string{`{"verdict":"maybe"}`, `{"verdict":1}`, `{}`, `{"verdict":"ok","x":1}`, `ok`} {
		r.answer(200, reply)
		if v, err := a.Satisfiable(t.Context(), grant.SatisfiableRequest{SiteID: "s", Owner: "bob", Kind: "llm.chat"}); err == nil {
			t.Fatalf("accepted %s as %q", reply, v)
		}
	}
}

func TestNewAuthorityRefusesBadURLs(t *testing.T) {
	for _, u := range []string{"", "cp:8080", "ftp://cp/x", "http://", "http://cp/x?y=1", "http://cp/#f"} {
		if _, err := NewAuthority(u, Options{}); err == nil {
			t.Errorf("accepted %q", u)
		}
	}
}

// TestSigner: the HTTP signer sends the statement base64url, reads the
// signature, and uses it only if it verifies against the configured key.
func TestSigner(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	var mu sync.Mutex
	key, mode, auth := priv, "ok", ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var in struct {
			Message string `json:"message"`
		}
		dec := json.NewDecoder(req.Body)
		dec.DisallowUnknownFields()
		msg := []byte(nil)
		if err := dec.Decode(&in); err == nil {
			msg, err = base64.RawURLEncoding.DecodeString(in.Message)
			if err != nil {
				http.Error(w, "bad message", 400)
				return
			}
		}
		mu.Lock()
		defer mu.Unlock()
		auth = req.Header.Get("Authorization")
		switch mode {
		case "ok":
			io.WriteString(w, `{"signature":"`+base64.RawURLEncoding.EncodeToString(ed25519.Sign(key, msg))+`"}`)
		case "short":
			io.WriteString(w, `{"signature":"c2ln"}`)
		case "padded":
			io.WriteString(w, `{"signature":"`+base64.URLEncoding.EncodeToString(ed25519.Sign(key, msg))+`"}`)
		case "down":
			w.WriteHeader(503)
		}
	}))
	defer srv.Close()
	public := base64.RawURLEncoding.EncodeToString(pub)
	s, err := NewSigner(srv.URL+"/sign", public, Options{Token: "kms-token"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Public() != public {
		t.Fatalf("Public %q", s.Public())
	}
	statement := []byte(`["byollm/v1/grant","g1",1,"j1","llm.chat","alice","default","svc","BYOLLM-SITE","bob"]`)
	sig, err := s.Sign(t.Context(), statement)
	if err != nil || !ed25519.Verify(pub, statement, sig) || auth != "Bearer kms-token" {
		t.Fatalf("Sign: %x %v (auth %q)", sig, err, auth)
	}
	for _, m := range []string{"short", "padded", "down"} {
		mu.Lock()
		mode = m
		mu.Unlock()
		if _, err := s.Sign(t.Context(), statement); err == nil {
			t.Fatalf("%s: accepted", m)
		}
	}
	mu.Lock()
	mode, key = "ok", otherPriv
	mu.Unlock()
	if _, err := s.Sign(t.Context(), statement); err == nil || !strings.Contains(err.Error(), "does not verify against RELAY_CONTROL_PLANE_PUBLIC") {
		t.Fatalf("a signature by another key: %v", err)
	}
	if _, err := NewSigner(srv.URL, "not-a-key", Options{}); err == nil {
		t.Fatal("accepted a malformed public key")
	}
}
