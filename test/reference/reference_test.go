package reference

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestAdminPlane checks server.mjs's projection admin interface against the
// real relay it hosts: token, replace, merge (upsert keys, order kept), and
// a bad fixture refused with the old one kept.
func TestAdminPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const token = "reference-admin-token-0123"
	s := Start(t, Config{AdminToken: token})

	call := func(method, path, auth, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, s.AdminURL()+path, strings.NewReader(body))
		if auth != "" {
			req.Header.Set("authorization", "Bearer "+auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	site := func(id, key string) string {
		return `{"siteId":"` + id + `","site":{"identity":"` + key + `","encryption":"e","encryptionSig":"s"}}`
	}
	steps := []struct {
		name       string
		method     string
		path       string
		auth       string
		body       string
		wantStatus int
		wantBody   string // substring
	}{
		{"no token", http.MethodGet, "/projection", "", "", 401, "unauthorized"},
		{"wrong token", http.MethodGet, "/projection", "nope", "", 401, "unauthorized"},
		{"replace", http.MethodPut, "/projection", token, `{"sites":[` + site("a", "k1") + `,` + site("b", "k2") + `],"consents":[{"owner":"o","siteId":"a"}]}`, 200, `"sites":2,"consents":1`},
		{"bad fixture refused", http.MethodPut, "/projection", token, `{"sites":[]}`, 400, "consents"},
		{"unknown merge key refused", http.MethodPost, "/projection/merge", token, `{"nope":[]}`, 400, "unknown projection key"},
		{"merge upserts", http.MethodPost, "/projection/merge", token, `{"sites":[` + site("a", "k3") + `,` + site("c", "k4") + `],"consents":[{"owner":"o","siteId":"a","paused":true}],"devices":[{"owner":"o","runnerId":"r","device":{"identity":"i","encryption":"e","encryptionSig":"s"}}]}`, 200, `"sites":3,"consents":1,"devices":1`},
		{"unknown path", http.MethodGet, "/nope", token, "", 404, "not-found"},
	}
	for _, st := range steps {
		status, body := call(st.method, st.path, st.auth, st.body)
		if status != st.wantStatus || !strings.Contains(body, st.wantBody) {
			t.Fatalf("%s: HTTP %d %s, want %d containing %q", st.name, status, body, st.wantStatus, st.wantBody)
		}
	}
	_, body := call(http.MethodGet, "/projection", token, "")
	var fx struct {
		Sites []struct {
			SiteID string `json:"siteId"`
			Site   struct {
				Identity string `json:"identity"`
			} `json:"site"`
		} `json:"sites"`
		Consents []struct {
			Paused bool `json:"paused"`
		} `json:"consents"`
	}
	if err := json.Unmarshal([]byte(body), &fx); err != nil {
		t.Fatal(err)
	}
	got := ""
	for _, s := range fx.Sites {
		got += s.SiteID + "=" + s.Site.Identity + " "
	}
	if got != "a=k3 b=k2 c=k4 " || len(fx.Consents) != 1 || !fx.Consents[0].Paused {
		t.Fatalf("merged projection %s", body)
	}

	// The relay planes answer as the reference does.
	res, err := http.Get(s.URL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 404 || string(b) != `{"error":"not-found"}` || res.Header.Get("content-type") != "application/json" {
		t.Fatalf("/healthz: %d %q %q", res.StatusCode, b, res.Header.Get("content-type"))
	}
}
