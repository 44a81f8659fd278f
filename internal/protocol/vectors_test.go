package protocol

import (
	"encoding/json"
	"os"
	"testing"
	"unicode/utf16"
)

// testdata/node_vectors.json was generated on Node 20 with the real
// @byollm/protocol@0.1.1: JSON.stringify of awkward strings, Number() of
// issued-at headers through RequestSignature, keyId of lenient encodings,
// re-serialised envelope sizes, describeBytes, compareVersions over a grid,
// and verifyRequest with re-encoded signatures and keys.
type nodeVectors struct {
	Stringify []struct {
		Units []uint16 `json:"units"`
		JSON  string   `json:"json"`
		Len   int      `json:"len"`
	} `json:"stringify"`
	Numbers []struct {
		Header string `json:"header"`
		OK     bool   `json:"ok"`
		Str    string `json:"str"`
	} `json:"numbers"`
	KeyIDs []struct {
		Key   string `json:"key"`
		KeyID string `json:"keyId"`
	} `json:"keyIds"`
	Envelopes []struct {
		Text  string `json:"text"`
		JSON  string `json:"json"`
		Bytes int    `json:"bytes"`
	} `json:"envelopes"`
	Describe []struct {
		Bytes int    `json:"bytes"`
		S     string `json:"s"`
	} `json:"describe"`
	Versions   [][3]any `json:"versions"`
	Signatures []struct {
		Name string `json:"name"`
		Key  string `json:"key"`
		Sig  string `json:"sig"`
		OK   bool   `json:"ok"`
	} `json:"signatures"`
}

// wtf8FromUnits builds the Go form of a JS string given as UTF-16 units.
func wtf8FromUnits(units []uint16) string {
	var b []byte
	for i := 0; i < len(units); i++ {
		u := rune(units[i])
		if utf16.IsSurrogate(u) && u < 0xdc00 && i+1 < len(units) && units[i+1] >= 0xdc00 && units[i+1] <= 0xdfff {
			b = appendWTF8(b, utf16.DecodeRune(u, rune(units[i+1])))
			i++
			continue
		}
		b = appendWTF8(b, u)
	}
	return string(b)
}

func TestNodeVectors(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/node_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v nodeVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	for _, c := range v.Stringify {
		s := wtf8FromUnits(c.Units)
		got := string(AppendJSString(nil, s))
		if got != c.JSON {
			t.Errorf("stringify %x = %s, want %s", c.Units, got, c.JSON)
		}
		if UTF16Len(got) != c.Len {
			t.Errorf("stringify %x length = %d, want %d", c.Units, UTF16Len(got), c.Len)
		}
		if UTF16Len(s) != len(c.Units) {
			t.Errorf("UTF16Len(%x) = %d", c.Units, UTF16Len(s))
		}
	}
	for _, c := range v.Numbers {
		n, ok := IssuedAtFromHeader(c.Header)
		if ok != c.OK {
			t.Errorf("issued-at %q ok = %v, node %v", c.Header, ok, c.OK)
			continue
		}
		if ok && JSNumberString(float64(n)) != c.Str {
			t.Errorf("issued-at %q = %d, node %s", c.Header, n, c.Str)
		}
	}
	for _, c := range v.KeyIDs {
		if got := KeyID(c.Key); got != c.KeyID {
			t.Errorf("KeyID(%q) = %s, node %s", c.Key, got, c.KeyID)
		}
	}
	for _, c := range v.Envelopes {
		env, err := DecodeSealedEnvelope(ReadBody([]byte(c.Text)).Value, "")
		if err != nil {
			t.Errorf("envelope %s: %v", c.Text, err)
			continue
		}
		if got := EnvelopeBytes(env); got != c.Bytes {
			t.Errorf("EnvelopeBytes(%s) = %d, node %d", c.Text, got, c.Bytes)
		}
		if got := string(MustMarshal(env)); UTF16Len(got) != c.Bytes {
			t.Errorf("Marshal(%s) = %s", c.Text, got)
		}
	}
	for _, c := range v.Describe {
		if got := DescribeBytes(c.Bytes); got != c.S {
			t.Errorf("DescribeBytes(%d) = %s, node %s", c.Bytes, got, c.S)
		}
	}
	if len(v.Versions) < 400 {
		t.Fatalf("only %d version pairs", len(v.Versions))
	}
	for _, c := range v.Versions {
		a, b := c[0].(string), c[1].(string)
		got, ok := CompareVersions(a, b)
		if c[2] == nil {
			if ok {
				t.Errorf("CompareVersions(%q,%q) = %d, node undefined", a, b, got)
			}
			continue
		}
		if want := int(c[2].(float64)); !ok || got != want {
			t.Errorf("CompareVersions(%q,%q) = %d,%v node %d", a, b, got, ok, want)
		}
	}
	for _, c := range v.Signatures {
		ok, stale := VerifyRequest(c.Key, "claim", "r\u00fc", 1800000000000, []byte(`{"a":"\u00e9"}`), c.Sig, 1800000000000)
		if ok != c.OK || stale {
			t.Errorf("signature %s: ok=%v stale=%v, node %v", c.Name, ok, stale, c.OK)
		}
	}
}
