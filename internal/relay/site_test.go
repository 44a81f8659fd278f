package relay

import (
	"encoding/json"
	"testing"

	"github.com/byollm/relay-go/internal/protocol"
)

// appendDevice copies stored device JSON only where decoding and encoding it
// again (what the answers did before) gives the same bytes.
func TestAppendDeviceMatchesRoundTrip(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		s    string
	}{
		{"plain base64url", "iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w"},
		{"quotes and backslashes", `a"b\c`},
		{"short escapes", "tab\tnl\ncr\rff\fbs\b"},
		{"control character", "x\x01y\x1f"},
		{"lone surrogate (WTF-8)", "a\xed\xa0\x80b"},
		{"line separators and emoji", "\u2028\u2029😀<>&"},
		{"invalid byte", "a\xffb"},
		{"empty", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stored := protocol.MustMarshal(protocol.PublicIdentity{Identity: tc.s, Encryption: "e" + tc.s, EncryptionSig: tc.s + "s"})
			var d protocol.PublicIdentity
			if err := json.Unmarshal(stored, &d); err != nil {
				t.Fatal(err)
			}
			want := protocol.MustMarshal(d)
			got, err := appendDevice([]byte("x"), stored)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != "x"+string(want) {
				t.Fatalf("got %s\nwant x%s", got, want)
			}
		})
	}
}
