package relaytest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// GetJSON GETs url and decodes its JSON body into v, failing t when the
// request fails, the body is not JSON or the content type is not
// application/json; it returns the status.
func GetJSON(t testing.TB, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: body is not JSON: %v", url, err)
	}
	if ct := resp.Header.Get("content-type"); ct != "application/json" {
		t.Errorf("GET %s: content-type %q", url, ct)
	}
	return resp.StatusCode
}

// Post POSTs a JSON body with hc and returns the status and body; a
// transport failure is status 0 with the error as the body, so load and
// fault tests can count it like any other answer.
func Post(ctx context.Context, hc *http.Client, url, body string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("content-type", "application/json")
	res, err := hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(res.Body)
	return res.StatusCode, b.String()
}

// ErrorCode is the "error" field of a JSON refusal body ("" if none).
func ErrorCode(body string) string {
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal([]byte(body), &e)
	return e.Error
}
