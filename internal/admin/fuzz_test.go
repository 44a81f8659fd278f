package admin

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/byollm/relay-go/internal/pairings"
)

// FuzzDecodeApproval: the approval body's decoder never panics; what it
// accepts is an owner (and maybe a runner id) that pass the id rules, that
// encoding/json's strict reading of the same body agrees with (no key
// named twice, so no last-wins), and that decode again to themselves once
// re-encoded. Which bodies are refused with which message is
// TestPairingRequestsRefused's job.
func FuzzDecodeApproval(f *testing.F) {
	for _, s := range []string{
		`{"owner":"alice"}`, `{"owner":"alice","runnerId":"r1"}`, `{"owner":"alice","owner":"mallory"}`,
		`{"owner":"al\u0007ice"}`, `{"owner":"a","runnerId":"r-\ud800"}`, `{"owner":"\ud83d\ude00"}`,
		`{"runnerId":"r"}`, `{"owner":"a","x":1}`, `{"owner":"a"} {}`, `[]`, `null`, ``, "\xef\xbb\xbf{\"owner\":\"a\"}",
		`{"owner":"` + strings.Repeat("o", 4097) + `"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var a pairings.Approval
		if msg := decodeApproval(body, &a); msg != "" {
			if a.Owner != "" && a.RunnerID != "" {
				t.Fatalf("refused (%s) but filled %+v", msg, a)
			}
			return
		}
		if a.Owner == "" || pairings.CheckID("owner", a.Owner) != nil || (a.RunnerID != "" && pairings.CheckID("runnerId", a.RunnerID) != nil) {
			t.Fatalf("accepted %+v, which the id rules refuse", a)
		}
		if !utf8.ValidString(a.Owner) || !utf8.ValidString(a.RunnerID) {
			t.Fatalf("accepted ids that are not UTF-8: %+v", a)
		}
		// encoding/json reads the same body (BOM aside) to the same ids.
		var theirs struct {
			Owner    string `json:"owner"`
			RunnerID string `json:"runnerId,omitempty"`
		}
		dec := json.NewDecoder(bytes.NewReader(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&theirs); err != nil || theirs.Owner != a.Owner || theirs.RunnerID != a.RunnerID {
			t.Fatalf("encoding/json reads %q as %+v (%v); decodeApproval as %+v", body, theirs, err, a)
		}
		again, _ := json.Marshal(theirs)
		var b pairings.Approval
		if msg := decodeApproval(again, &b); msg != "" || b != a {
			t.Fatalf("re-encoded %s: %q %+v, want %+v", again, msg, b, a)
		}
	})
}
