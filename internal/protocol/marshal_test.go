package protocol

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestMarshalJSEscaping(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   any
		want string
	}{
		{"html not escaped", "<a href=\"x\">&</a>", `"<a href=\"x\">&</a>"`},
		{"line separators raw", "a\u2028b\u2029c", "\"a\u2028b\u2029c\""},
		{"short escapes", "\b\t\n\f\r\\", `"\b\t\n\f\r\\"`},
		{"control lowercase hex", "\x00\x01\x1f\x7f", "\"\\u0000\\u0001\\u001f\x7f\""},
		{"non-ascii raw", "é😀", `"é😀"`},
		{"lone surrogate", "a\xed\xa0\x80b", `"a\ud800b"`},
		{"invalid byte", "a\xffb", "\"a\uFFFDb\""},
		{"slash not escaped", "a/b", `"a/b"`},
		{"int", int64(1800000000000), `1800000000000`},
		{"float int", 1.0, `1`},
		{"float", 0.1, `0.1`},
		{"float big", 1e21, `1e+21`},
		{"float small", 1e-7, `1e-7`},
		{"float mid", 123456.789, `123456.789`},
		{"float 1e20", 1e20, `100000000000000000000`},
		{"float tiny", 0.000001, `0.000001`},
		{"NaN", math.NaN(), `null`},
		{"negative zero", math.Copysign(0, -1), `0`},
		{"nil slice field", struct {
			A []string `json:"a"`
		}{}, `{"a":[]}`},
		{"omitempty", JobStub{ID: "j", Kind: KindChat, Owner: "o", Site: "s", Audience: AudienceTeam, SizeClass: "small", DeadlineAt: 5},
			`{"id":"j","kind":"llm.chat","owner":"o","site":"s","audience":"team","sizeClass":"small","streaming":false,"deadlineAt":5}`},
		{"raw message", struct {
			R json.RawMessage `json:"r"`
		}{json.RawMessage(`{"z":1,"a":2}`)}, `{"r":{"z":1,"a":2}}`},
		{"map sorted", map[string]int{"b": 1, "a": 2}, `{"a":2,"b":1}`},
		{"empty known models kept", Capability{Kind: KindChat, Service: "s", BackendID: "ollama", BackendClass: "http", Model: "m", KnownModels: &[]string{}, OfferScope: "team"},
			`{"kind":"llm.chat","service":"s","backendId":"ollama","backendClass":"http","model":"m","knownModels":[],"offerScope":"team"}`},
		{"nil pointer", (*Lease)(nil), `null`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Marshal(c.in)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestParseJSONRoundTrip(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{`{"b":1,"a":2,"b":3}`, `{"b":3,"a":2}`},
		{`{"b":1,"10":2,"2":3,"01":4,"4294967295":5,"4294967294":6,"-1":7}`, `{"2":3,"10":2,"4294967294":6,"b":1,"01":4,"4294967295":5,"-1":7}`},
		{` [1.0, 1e3, -0, 1E-7, 12345678901234567890] `, `[1,1000,0,1e-7,12345678901234567000]`},
		{`"\ud83d\ude00"`, `"😀"`},
		{`"\ud800x"`, `"\ud800x"`},
		{`"\udc00\ud800"`, `"\udc00\ud800"`},
		{`"\u00e9\/"`, `"é/"`},
		{`"\u2028"`, "\"\u2028\""},
		{`{"a":[true,false,null,{}]}`, `{"a":[true,false,null,{}]}`},
		{`1e400`, `null`},
	}
	for _, c := range cases {
		v, err := ParseJSON([]byte(c.in))
		if err != nil {
			t.Errorf("ParseJSON(%s): %v", c.in, err)
			continue
		}
		got, err := Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != c.want {
			t.Errorf("round trip %s = %s, want %s", c.in, got, c.want)
		}
	}
	for _, bad := range []string{``, `{`, `{"a":1,}`, `[1,]`, `01`, `1.`, `.5`, `+1`, `"\x"`, "\"a\x01\"", `{"a" 1}`, `nul`, `{} x`, `'a'`, `NaN`, `"\u12"`} {
		if _, err := ParseJSON([]byte(bad)); err == nil {
			t.Errorf("ParseJSON(%q) accepted", bad)
		}
	}
}

func TestRequestText(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{"\xef\xbb\xbf{}", "{}"},
		{"\xef\xbb\xbf\xef\xbb\xbf{}", "\ufeff{}"},
		{"a\xffb", "a\uFFFDb"},
		{"a\xe2\x82b", "a\uFFFDb"},                 // one maximal subpart, one U+FFFD
		{"a\xed\xa0\x80b", "a\uFFFD\uFFFD\uFFFDb"}, // encoded surrogate: three
		{"a\xf0\x9f\x98", "a\uFFFD"},
		{"\xc0\xaf", "\uFFFD\uFFFD"},
		{"é😀", "é😀"},
	}
	for _, c := range cases {
		if got := string(RequestText([]byte(c.in))); got != c.want {
			t.Errorf("RequestText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if b := ReadBody([]byte("{bad")); b.Present || string(b.Text) != "{bad" {
		t.Errorf("invalid JSON body = %+v", b)
	}
	if b := ReadBody(nil); b.Present {
		t.Error("empty body present")
	}
	if b := ReadBody([]byte("\xef\xbb\xbf{\"a\":1}")); !b.Present || string(b.Text) != `{"a":1}` {
		t.Errorf("BOM body = %+v", b)
	}
}

func TestCodePointsAndUTF16(t *testing.T) {
	t.Parallel()
	cases := []struct {
		s         string
		cp, utf16 int
	}{
		{"ab", 2, 2},
		{"😀", 1, 2},
		{"\xed\xa0\x80\xed\xa0\x80", 2, 2},
		{"é", 1, 1},
	}
	for _, c := range cases {
		if got := CodePoints(c.s); got != c.cp {
			t.Errorf("CodePoints(%q) = %d, want %d", c.s, got, c.cp)
		}
		if got := UTF16Len(c.s); got != c.utf16 {
			t.Errorf("UTF16Len(%q) = %d, want %d", c.s, got, c.utf16)
		}
	}
	// JS order: U+FF61 (one unit 0xff61) sorts after 😀 (0xd83d 0xde00),
	// though its code point is lower.
	if !LessUTF16("😀", "\uff61") || LessUTF16("\uff61", "😀") {
		t.Error("UTF-16 order wrong for astral vs BMP")
	}
	if !LessUTF16("a", "ab") || LessUTF16("ab", "a") || LessUTF16("a", "a") {
		t.Error("prefix order wrong")
	}
}

func TestParseJSONDepth(t *testing.T) {
	t.Parallel()
	deep := func(n int) []byte {
		return []byte(strings.Repeat("[", n) + strings.Repeat("]", n))
	}
	if _, err := ParseJSON(deep(maxDepth)); err != nil {
		t.Errorf("depth %d refused: %v", maxDepth, err)
	}
	if _, err := ParseJSON(deep(maxDepth + 2)); err == nil {
		t.Error("unbounded depth accepted")
	}
}

// appendJSStringByByte is the byte-at-a-time encoder AppendJSString
// replaced; the two must agree on every input.
func appendJSStringByByte(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < 0x80 {
			i++
			switch c {
			case '"':
				b = append(b, '\\', '"')
			case '\\':
				b = append(b, '\\', '\\')
			case '\b':
				b = append(b, '\\', 'b')
			case '\t':
				b = append(b, '\\', 't')
			case '\n':
				b = append(b, '\\', 'n')
			case '\f':
				b = append(b, '\\', 'f')
			case '\r':
				b = append(b, '\\', 'r')
			default:
				if c < 0x20 {
					b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
				} else {
					b = append(b, c)
				}
			}
			continue
		}
		r, w := decodeWTF8(s[i:])
		switch {
		case r >= 0xd800 && r <= 0xdfff:
			b = append(b, '\\', 'u', hexDigits[r>>12], hexDigits[r>>8&0xf], hexDigits[r>>4&0xf], hexDigits[r&0xf])
		case w == 1:
			b = append(b, "\uFFFD"...)
		default:
			b = append(b, s[i:i+w]...)
		}
		i += w
	}
	return append(b, '"')
}

func TestAppendJSStringMatchesByteEncoder(t *testing.T) {
	t.Parallel()
	pieces := []string{"a", "Z", " ", "~", "\x7f", "\"", "\\", "/", "\b", "\t", "\n", "\f", "\r", "\x00", "\x1f",
		"é", "😀", "\u2028", "\xed\xa0\x80", "\xed\xbf\xbf", "\xff", "\xc3", "\xe2\x82", "<>&", "plain text run "}
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 20000 {
		var sb strings.Builder
		for range n % 12 {
			sb.WriteString(pieces[rng.IntN(len(pieces))])
		}
		s := sb.String()
		if got, want := AppendJSString([]byte("x"), s), appendJSStringByByte([]byte("x"), s); string(got) != string(want) {
			t.Fatalf("%q: got %s want %s", s, got, want)
		}
	}
}
