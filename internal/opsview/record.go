package opsview

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// siteRoutes are the site plane's paths (wire.md §3): the requests whose
// refusals a site page shows.
var siteRoutes = map[string]bool{
	"/relay/site/enqueue": true, "/relay/site/payload": true, "/relay/site/cancel": true,
	"/relay/site/pending": true, "/relay/site/results": true,
}

// Refusals wraps the planes' handler: a site-plane request that names a
// site the projection knows (x-byollm-site) and is answered 4xx/5xx is
// counted under that site by its error code (wire.md §7.1 body). The
// header is what the caller claimed, checked by the handler, not here:
// the counts say what was refused, not that the site sent it. Only the
// first 512 bytes of a refusal body are kept, to read its code.
func (a *Activity) Refusals(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		site := r.Header.Get("x-byollm-site")
		if a == nil || site == "" || !siteRoutes[r.URL.Path] {
			next.ServeHTTP(w, r)
			return
		}
		rw := &refusalWriter{ResponseWriter: w}
		next.ServeHTTP(rw, r)
		if rw.status >= 400 {
			a.Refused(site, refusalCode(rw.status, rw.head.Bytes()))
		}
	})
}

func refusalCode(status int, body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" && len(e.Error) <= 64 {
		return e.Error
	}
	return http.StatusText(status)
}

type refusalWriter struct {
	http.ResponseWriter
	status int
	head   bytes.Buffer
}

func (w *refusalWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *refusalWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.status >= 400 && w.head.Len() < 512 {
		w.head.Write(b[:min(len(b), 512-w.head.Len())])
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *refusalWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *refusalWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
