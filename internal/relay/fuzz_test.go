package relay

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// FuzzPathname fuzzes the path normaliser every request goes through
// before routing. The result is an absolute path with no backslash, query,
// fragment or dot segment (in any %2e spelling); normalising it again
// changes nothing; the shortcut for plain paths answers as the general
// case does; what follows '?' or '#' never matters; and '\' is '/'
// in a path.
func FuzzPathname(f *testing.F) {
	for _, p := range []string{"/", "/healthz", "/byollm", "/byollm/claim", "/byollm/claim/", "/byollm/cl%61im",
		"/byollm/a/b/claim", "/byollm//claim", "/byollm/x/../claim", "/byollm/x/%2E%2e/claim", "/relay/site/enqueue",
		"/relay/site/pending?siteId=site_a&protocolVersion=2", "/debug?site=site_a", "http://h/byollm/claim",
		"HTTPS://h", "byollm\\claim", "/a/./b/.%2E/%2e/..", "/..", "/a#/../b", "*", ""} {
		f.Add(p)
	}
	r := &Relay{basePath: DefaultBasePath}
	r.routes = r.routeTable()
	f.Fuzz(func(t *testing.T, target string) {
		norm := func(s string) string { return pathname(&http.Request{RequestURI: s, URL: &url.URL{}}) }
		p := norm(target)
		// The shortcut for plain paths agrees with the general case.
		if i := strings.IndexAny(target, "?#"); i < 0 && target != "" {
			if slow := resolvePath(target); slow != p {
				t.Fatalf("pathname(%q) = %q, resolvePath %q", target, p, slow)
			}
		}
		if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\\?#") {
			t.Fatalf("pathname(%q) = %q", target, p)
		}
		for _, seg := range strings.Split(p[1:], "/") {
			switch strings.ToLower(seg) {
			case ".", "..", "%2e", ".%2e", "%2e.", "%2e%2e":
				t.Fatalf("pathname(%q) = %q keeps the dot segment %q", target, p, seg)
			}
		}
		if again := norm(p); again != p {
			t.Fatalf("pathname(%q) = %q, normalised again %q", target, p, again)
		}
		if !strings.ContainsAny(target, "?#") {
			for _, tail := range []string{"?x/../..", "#/..", "?protocolVersion=2#f"} {
				if got := norm(target + tail); got != p {
					t.Fatalf("pathname(%q) = %q, but %q with %q after it", target, p, got, tail)
				}
			}
		}
		// In an origin-form target (the only one with '\\' that Node's
		// HTTP parser lets through to the reference) '\\' is '/'.
		if strings.HasPrefix(target, "/") && !strings.ContainsAny(target, "?#") {
			if got := norm(strings.ReplaceAll(target, "\\", "/")); got != p {
				t.Fatalf("pathname(%q) = %q, with '\\' as '/' %q", target, p, got)
			}
		}
		// Routing on the result never panics.
		r.routeOf(p, http.Header{})
	})
}
