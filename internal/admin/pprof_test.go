package admin

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"strings"
	"testing"
)

// The profiles are behind the admin token: without it every pprof route is
// the usual 401; with it the heap profile is a gzipped protobuf profile and
// a one-second CPU profile is served.
func TestPprofBehindToken(t *testing.T) {
	srv, _ := setup(t, Options{Token: token})
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/profile?seconds=1", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=1"} {
		for _, auth := range []string{"", "Bearer wrong-token-wrong-token"} {
			a := call(t, srv, "GET", path, auth, "")
			if a.status != 401 || a.body != `{"error":"unauthorized","message":"admin token required"}` {
				t.Fatalf("GET %s with %q: %d %.200s, want 401", path, auth, a.status, a.body)
			}
		}
	}
	a := call(t, srv, "GET", "/debug/pprof/", "Bearer "+token, "")
	if a.status != 200 || !strings.Contains(a.body, "goroutine") {
		t.Fatalf("index: %d %.200s", a.status, a.body)
	}
	a = call(t, srv, "GET", "/debug/pprof/goroutine?debug=1", "Bearer "+token, "")
	if a.status != 200 || !strings.Contains(a.body, "goroutine profile:") {
		t.Fatalf("goroutine: %d %.200s", a.status, a.body)
	}
	for _, path := range []string{"/debug/pprof/heap", "/debug/pprof/profile?seconds=1"} {
		a = call(t, srv, "GET", path, "Bearer "+token, "")
		if a.status != 200 {
			t.Fatalf("%s: %d %.200s", path, a.status, a.body)
		}
		// A pprof profile is a gzipped protobuf.
		zr, err := gzip.NewReader(bytes.NewReader([]byte(a.body)))
		if err != nil {
			t.Fatalf("%s: not gzip: %v", path, err)
		}
		raw, err := io.ReadAll(zr)
		if err != nil || len(raw) == 0 {
			t.Fatalf("%s: empty or corrupt profile (%d bytes, %v)", path, len(raw), err)
		}
		if ct := a.header.Get("Content-Type"); ct != "application/octet-stream" {
			t.Fatalf("%s: content type %q", path, ct)
		}
	}
	if a := call(t, srv, "GET", "/debug/pprof/no-such-profile", "Bearer "+token, ""); a.status != http.StatusNotFound {
		t.Fatalf("unknown profile: %d", a.status)
	}
}
