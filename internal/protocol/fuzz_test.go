package protocol

// Native fuzz targets for everything a client's bytes reach in this package:
// the JS-exact JSON parser and encoder, every request schema, the signature
// headers, base64url keys and key ids, daemon versions and query strings.
// `go test ./internal/protocol` runs each target's seed corpus (the test
// vectors and the zod corpus below) as ordinary tests; .ci/fuzz fuzzes each
// one for a bounded time. Each target checks properties, not only "no
// panic". Whether strict decoding refuses what zod 4 refuses cannot be
// checked without zod, so TestDecodeMatchesZod keeps that differential over
// testdata/zod_decode.json; the fuzz targets start from the same bodies.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// zodRows is testdata/zod_decode.json: [schema, body, outcome, re-emitted].
func zodRows(f *testing.F) [][4]string {
	f.Helper()
	raw, err := os.ReadFile("testdata/zod_decode.json")
	if err != nil {
		f.Fatal(err)
	}
	var rows [][4]string
	if err := json.Unmarshal(raw, &rows); err != nil {
		f.Fatal(err)
	}
	return rows
}

func vectors(f *testing.F) nodeVectors {
	f.Helper()
	raw, err := os.ReadFile("testdata/node_vectors.json")
	if err != nil {
		f.Fatal(err)
	}
	var v nodeVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		f.Fatal(err)
	}
	return v
}

// jsonSeeds are JSON texts from every vector file of the package.
func jsonSeeds(f *testing.F) []string {
	var out []string
	for _, r := range zodRows(f) {
		out = append(out, r[1])
		if r[3] != "" {
			out = append(out, r[3])
		}
	}
	v := vectors(f)
	for _, s := range v.Stringify {
		out = append(out, s.JSON)
	}
	for _, e := range v.Envelopes {
		out = append(out, e.Text, e.JSON)
	}
	return append(out, ``, ` `, `null`, `-0`, `1e400`, `-1e-400`, `[1,2.5,-3e21,1e-7]`,
		`{"1":0,"a":1,"0":2,"a":3}`, `"\ud800\udc00\udbff\ud800x"`, `{"\ud800":1,"\udbff":2}`,
		"\xef\xbb\xbf{}", "\"\xff\xed\xa0\x80\"", `[[[[[]]]]]`, `{"a":"\u2028<&>"}`)
}

// units is s as JS UTF-16 code units (an invalid byte reads as U+FFFD).
func units(s string) []uint16 {
	var out []uint16
	u := utf16Units{s: s, low: -1}
	for r := u.next(); r >= 0; r = u.next() {
		out = append(out, uint16(r))
	}
	return out
}

// jsEqual compares a ParseJSON value with what encoding/json decoded from
// the same text (UseNumber). They agree on everything but lone surrogates,
// which the caller keeps out.
func jsEqual(ours, theirs any) bool {
	switch o := ours.(type) {
	case nil, bool, string:
		return o == theirs
	case Number:
		n, ok := theirs.(json.Number)
		if !ok {
			return false
		}
		f, err := strconv.ParseFloat(string(n), 64)
		var ne *strconv.NumError
		if err != nil && !(errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange)) {
			return false
		}
		return float64(o) == f
	case []any:
		t, ok := theirs.([]any)
		if !ok || len(t) != len(o) {
			return false
		}
		for i := range o {
			if !jsEqual(o[i], t[i]) {
				return false
			}
		}
		return true
	case *Object:
		t, ok := theirs.(map[string]any)
		if !ok || len(t) != len(o.Vals) || len(o.Keys) != len(o.Vals) {
			return false
		}
		for k, v := range o.Vals {
			tv, ok := t[k]
			if !ok || !jsEqual(v, tv) {
				return false
			}
		}
		return true
	}
	return false
}

// hasSurrogate reports a lone surrogate (WTF-8 ED A0..BF) anywhere in v.
func hasSurrogate(v any) bool {
	lone := func(s string) bool {
		for i := 0; i < len(s); {
			r, w := decodeWTF8(s[i:])
			if r >= 0xd800 && r <= 0xdfff {
				return true
			}
			i += w
		}
		return false
	}
	switch x := v.(type) {
	case string:
		return lone(x)
	case []any:
		return slices.ContainsFunc(x, hasSurrogate)
	case *Object:
		for k, e := range x.Vals {
			if lone(k) || hasSurrogate(e) {
				return true
			}
		}
	}
	return false
}

// afterStringify is what JSON.parse(JSON.stringify(v)) gives: ±Infinity
// becomes null, -0 becomes 0.
func afterStringify(v any) any {
	switch x := v.(type) {
	case Number:
		if math.IsInf(float64(x), 0) {
			return nil
		}
		if x == 0 {
			return Number(0)
		}
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = afterStringify(x[i])
		}
		return out
	case *Object:
		out := &Object{Keys: x.Keys, Vals: map[string]any{}}
		for k, e := range x.Vals {
			out.Vals[k] = afterStringify(e)
		}
		return out
	}
	return v
}

// FuzzParseJSON: on the decoded text of any body, ParseJSON accepts exactly
// the texts encoding/json calls valid, decodes them to the same values (lone surrogates
// aside, which encoding/json cannot represent), and parse→Marshal→parse
// gives the value JSON.parse(JSON.stringify(v)) would, with Marshal a fixed
// point from there.
func FuzzParseJSON(f *testing.F) {
	for _, s := range jsonSeeds(f) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		// Every caller parses the WHATWG-decoded text (ReadBody,
		// projection.Parse), so that is what is fuzzed.
		text := RequestText(raw)
		v, err := ParseJSON(text)
		// ParseJSONUnique (the admin documents' parser) is ParseJSON that
		// refuses a key named twice: the same value when it accepts, and a
		// *DuplicateKeyError as its only refusal of valid JSON.
		uv, uerr := ParseJSONUnique(text)
		var dup *DuplicateKeyError
		switch {
		case uerr == nil && (err != nil || !reflect.DeepEqual(uv, v)):
			t.Fatalf("ParseJSONUnique accepted %q as %#v; ParseJSON: %#v, %v", text, uv, v, err)
		case uerr != nil && err == nil && !errors.As(uerr, &dup):
			t.Fatalf("ParseJSONUnique refused valid JSON %q with %v", text, uerr)
		case dup != nil && !bytes.Contains(text, []byte(`"`)):
			t.Fatalf("duplicate key %q in a text without strings", dup.Key)
		}
		if !utf8.Valid(text) {
			t.Fatalf("RequestText(%q) = %q is not UTF-8", raw, text)
		}
		if deep := bytes.Count(text, []byte("[")) + bytes.Count(text, []byte("{")); deep < maxDepth-10 {
			if (err == nil) != json.Valid(text) {
				t.Fatalf("ParseJSON err = %v, encoding/json valid = %v", err, json.Valid(text))
			}
			if err == nil && !hasSurrogate(v) {
				dec := json.NewDecoder(bytes.NewReader(text))
				dec.UseNumber()
				var theirs any
				if err := dec.Decode(&theirs); err != nil {
					t.Fatalf("encoding/json: %v", err)
				}
				if !jsEqual(v, theirs) {
					t.Fatalf("ParseJSON = %#v, encoding/json = %#v", v, theirs)
				}
			}
		}
		if err != nil {
			return
		}
		m, err := Marshal(v)
		if err != nil {
			t.Fatalf("Marshal of a parsed value: %v", err)
		}
		v2, err := ParseJSON(m)
		if err != nil {
			t.Fatalf("Marshal wrote %q, which does not parse: %v", m, err)
		}
		if !reflect.DeepEqual(v2, afterStringify(v)) {
			t.Fatalf("round trip:\n%#v\n%#v", v2, afterStringify(v))
		}
		if m2 := MustMarshal(v2); !bytes.Equal(m2, m) {
			t.Fatalf("Marshal is not a fixed point: %q then %q", m, m2)
		}
	})
}

// FuzzJSString: for any Go string (WTF-8 or not), AppendJSString writes a
// literal that parses back to the same JS string (the same UTF-16 units),
// and the UTF-16 helpers agree with an explicit unit-by-unit computation.
func FuzzJSString(f *testing.F) {
	v := vectors(f)
	for _, s := range v.Stringify {
		f.Add(wtf8FromUnits(s.Units), "")
	}
	for _, c := range v.Numbers {
		f.Add(c.Header, c.Str)
	}
	f.Add("r\xed\xa0\x80", "r\ufffd")
	f.Add("\xed\xa0\x80\xed\xb0\x80", "\U00010000")
	f.Add("a\x00", "\x00b")
	f.Fuzz(func(t *testing.T, a, b string) {
		enc := AppendJSString(nil, a)
		if !utf8.Valid(enc) {
			t.Fatalf("AppendJSString(%q) = %q is not UTF-8", a, enc)
		}
		pv, err := ParseJSON(enc)
		if err != nil {
			t.Fatalf("AppendJSString(%q) = %q does not parse: %v", a, enc, err)
		}
		back, ok := pv.(string)
		ua := units(a)
		if !ok || !slices.Equal(units(back), ua) {
			t.Fatalf("%q -> %q -> %q: units %x, want %x", a, enc, back, units(back), ua)
		}
		if back != wtf8FromUnits(ua) {
			t.Fatalf("%q parsed back as %q, not its canonical WTF-8 %q", a, back, wtf8FromUnits(ua))
		}
		// The canonical form (what parsing gives) is a fixed point. A Go
		// string whose WTF-8 splits a surrogate pair in two (no decoder
		// here produces one) is written as two escapes, and so differs.
		if again, err := ParseJSON(AppendJSString(nil, back)); err != nil || again != back {
			t.Fatalf("re-encoding %q parses as %q (%v)", back, again, err)
		}
		if UTF16Len(a) != len(ua) {
			t.Fatalf("UTF16Len(%q) = %d, want %d", a, UTF16Len(a), len(ua))
		}
		if n := JSONStringLen(a); n != UTF16Len(string(enc)) {
			t.Fatalf("JSONStringLen(%q) = %d, JSON.stringify is %d units", a, n, UTF16Len(string(enc)))
		}
		// Code points as zod counts them: a surrogate pair is one.
		pairs := 0
		for i := 0; i+1 < len(ua); i++ {
			if utf16.IsSurrogate(rune(ua[i])) && ua[i] < 0xdc00 && ua[i+1] >= 0xdc00 && ua[i+1] <= 0xdfff {
				pairs++
				i++
			}
		}
		if n := CodePoints(back); n != len(ua)-pairs {
			t.Fatalf("CodePoints(%q) = %d, want %d", back, n, len(ua)-pairs)
		}
		want := slices.Compare(ua, units(b))
		if got := CompareUTF16(a, b); got != want {
			t.Fatalf("CompareUTF16(%q, %q) = %d, want %d", a, b, got, want)
		}
		if LessUTF16(a, b) != (want < 0) {
			t.Fatalf("LessUTF16(%q, %q) disagrees with CompareUTF16", a, b)
		}
	})
}

// requestDecoders are the request schemas, each wrapped to one signature.
var requestDecoders = map[string]func(any) (any, error){
	"claim":     func(v any) (any, error) { return DecodeClaimRequest(v) },
	"fetch":     func(v any) (any, error) { return DecodeFetchRequest(v) },
	"result":    func(v any) (any, error) { return DecodeResultRequest(v) },
	"heartbeat": func(v any) (any, error) { return DecodeHeartbeatRequest(v) },
	"release":   func(v any) (any, error) { return DecodeReleaseRequest(v) },
	"enqueue":   func(v any) (any, error) { return DecodeEnqueueRequest(v) },
	"payload":   func(v any) (any, error) { return DecodePayloadRequest(v) },
	"cancel":    func(v any) (any, error) { return DecodeCancelRequest(v) },
	"pair": func(v any) (any, error) {
		r, ok := DecodePairRequest(v)
		if !ok {
			return nil, &SchemaError{Msg: "no pair shape"}
		}
		return r, nil
	},
	"envelope": func(v any) (any, error) { return DecodeSealedEnvelope(v, "") },
	"stub":     func(v any) (any, error) { return DecodeJobStub(v, "") },
}

// FuzzDecodeRequests runs every request schema on each body. A refusal is
// always a *SchemaError; an accepted body is refused again with an unknown
// key or a null anywhere (zod's strict objects, nothing nullable); it
// re-marshals to JSON that decodes
// to the same value and marshals to the same bytes (what zod's parse
// re-emits: TestDecodeMatchesZod pins those bytes for the corpus), and an
// envelope's measured size is the length of that JSON.
func FuzzDecodeRequests(f *testing.F) {
	for _, r := range zodRows(f) {
		f.Add([]byte(r[1]))
	}
	for _, e := range vectors(f).Envelopes {
		f.Add([]byte(e.Text))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		body := ReadBody(raw)
		if declared, present := DeclaredVersion(body.Value, nil); CheckProtocolVersion(declared) == nil && (!present || declared != "2") {
			t.Fatalf("version %#v (present %v) accepted", declared, present)
		}
		for name, dec := range requestDecoders {
			v, err := dec(body.Value)
			if err != nil {
				var se *SchemaError
				if !errors.As(err, &se) {
					t.Fatalf("%s: refusal %v is not a *SchemaError", name, err)
				}
				continue
			}
			if name == "pair" {
				v = pairShape(t, v.(PairRequest))
			}
			m, err := Marshal(v)
			if err != nil {
				t.Fatalf("%s: Marshal: %v", name, err)
			}
			again := ReadBody(m)
			v2, err := dec(again.Value)
			if err != nil {
				t.Fatalf("%s: accepted %q, refused its own re-emission %q: %v", name, raw, m, err)
			}
			if name == "pair" {
				v2 = pairShape(t, v2.(PairRequest))
			}
			if !reflect.DeepEqual(v, v2) {
				t.Fatalf("%s: %q decodes to\n%#v\nits re-emission %q to\n%#v", name, raw, v, m, v2)
			}
			if m2 := MustMarshal(v2); !bytes.Equal(m, m2) {
				t.Fatalf("%s: re-emission not stable: %q then %q", name, m, m2)
			}
			// Strictness zod would enforce, checked without zod: every
			// object of every schema is strict and nothing is nullable, so
			// an unknown key, or null for any key, anywhere, is refused.
			for i := range countObjects(body.Value) {
				for _, mutate := range objectMutations(body.Value, i) {
					if _, err := dec(mutate.value); err == nil {
						t.Fatalf("%s: accepted %q, and also with %s", name, raw, mutate.what)
					}
				}
			}
			var env *SealedEnvelope
			switch x := v.(type) {
			case SealedEnvelope:
				env = &x
			case ResultRequest:
				env = &x.Envelope
			case PayloadRequest:
				env = &x.Envelope
			}
			if env != nil {
				if got, want := EnvelopeBytes(*env), UTF16Len(string(MustMarshal(*env))); got != want {
					t.Fatalf("%s: EnvelopeBytes = %d, JSON.stringify length %d", name, got, want)
				}
			}
		}
	})
}

// deepCopy copies a ParseJSON value.
func deepCopy(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = deepCopy(x[i])
		}
		return out
	case *Object:
		out := &Object{Keys: slices.Clone(x.Keys), Vals: make(map[string]any, len(x.Vals))}
		for k, e := range x.Vals {
			out.Vals[k] = deepCopy(e)
		}
		return out
	}
	return v
}

// objects lists v's objects, depth first.
func objects(v any, out []*Object) []*Object {
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			out = objects(e, out)
		}
	case *Object:
		out = append(out, x)
		for _, k := range x.Keys {
			out = objects(x.Vals[k], out)
		}
	}
	return out
}

func countObjects(v any) int { return len(objects(v, nil)) }

type mutation struct {
	what  string
	value any
}

// objectMutations are copies of v whose i-th object has an unknown key
// added, or one of its keys set to null.
func objectMutations(v any, i int) []mutation {
	var out []mutation
	c := deepCopy(v)
	o := objects(c, nil)[i]
	if _, taken := o.Vals["fuzzUnknownKey"]; !taken {
		o.Keys = append(o.Keys, "fuzzUnknownKey")
		o.Vals["fuzzUnknownKey"] = Number(1)
		out = append(out, mutation{fmt.Sprintf("an unknown key in object %d", i), c})
	}
	for _, k := range objects(v, nil)[i].Keys {
		c := deepCopy(v)
		objects(c, nil)[i].Vals[k] = nil
		out = append(out, mutation{fmt.Sprintf("%q: null in object %d", k, i), c})
	}
	return out
}

// pairShape returns the one shape a pair request matched.
func pairShape(t *testing.T, r PairRequest) any {
	t.Helper()
	n := 0
	var v any
	if r.Start != nil {
		n, v = n+1, r.Start
	}
	if r.Poll != nil {
		n, v = n+1, r.Poll
	}
	if r.Fixture != nil {
		n, v = n+1, r.Fixture
	}
	if n != 1 {
		t.Fatalf("pair request matched %d shapes: %+v", n, r)
	}
	return v
}

// FuzzSignatureHeaders: a request is signed exactly when the caller and
// signature headers are non-empty and JS Number() of issued-at is a safe
// positive integer; Number() ignores surrounding JS whitespace, and a number
// it yields survives String() and Number() again.
func FuzzSignatureHeaders(f *testing.F) {
	v := vectors(f)
	for i, c := range v.Numbers {
		s := v.Signatures[i%len(v.Signatures)]
		f.Add("r\u00fc", c.Header, s.Sig)
	}
	f.Add("", "1800000000000", "sig")
	f.Add("site_a", "0x1A3185C5000", "")
	f.Add("r\xfc", " \u00a01e3\ufeff", "s")
	f.Fuzz(func(t *testing.T, caller, issued, sig string) {
		h := http.Header{}
		h[http.CanonicalHeaderKey(HeaderRunner)] = []string{caller}
		h[http.CanonicalHeaderKey(HeaderIssuedAt)] = []string{issued}
		h[http.CanonicalHeaderKey(HeaderSignature)] = []string{sig}
		rs, ok := SignatureFromHeaders(h, HeaderRunner)
		n := JSNumber(latin1ToUTF8(issued))
		want := caller != "" && sig != "" && isSafeInteger(n) && n > 0
		if ok != want {
			t.Fatalf("signed = %v, want %v (Number(issued) = %v)", ok, want, n)
		}
		if ok && (rs.IssuedAt != int64(n) || rs.RunnerID != latin1ToUTF8(caller) || rs.Signature != latin1ToUTF8(sig)) {
			t.Fatalf("signature %+v from %q %q %q", rs, caller, issued, sig)
		}
		if _, ok := SignatureFromHeaders(h, HeaderSite); ok {
			t.Fatal("signed on the site plane without a site header")
		}
		for _, s := range []string{issued, latin1ToUTF8(issued)} {
			x := JSNumber(s)
			if y := JSNumber(" \t\n\u00a0\u2028\ufeff" + s + "\u3000\r "); !(x == y || math.IsNaN(x) && math.IsNaN(y)) {
				t.Fatalf("Number(%q) = %v, with whitespace around it %v", s, x, y)
			}
			if !math.IsNaN(x) {
				if back := JSNumber(JSNumberString(x)); back != x {
					t.Fatalf("Number(%q) = %v, Number(String(that)) = %v", s, x, back)
				}
			}
		}
		// Verification of garbage never panics and never passes.
		if ok, _ := VerifyRequest(caller, "claim", caller, rs.IssuedAt, []byte(issued), sig, rs.IssuedAt); ok {
			t.Fatalf("garbage verified: key %q sig %q", caller, sig)
		}
	})
}

var keyIDPattern = regexp.MustCompile(`^BYOLLM(-[0-9A-HJKMNP-TV-Z]{4}){6}$`)

// FuzzBase64URL: keys and signatures decode as Node's base64url decoder
// does: every standard spelling of some bytes gives those bytes back, other
// characters are skipped, decoding stops at "="; key ids are well formed and
// depend only on the decoded bytes.
func FuzzBase64URL(f *testing.F) {
	v := vectors(f)
	for _, k := range v.KeyIDs {
		f.Add([]byte(k.Key), k.Key)
	}
	for _, s := range v.Signatures {
		f.Add(DecodeBase64URL(s.Sig), s.Sig)
	}
	f.Add([]byte{}, "a=b")
	f.Fuzz(func(t *testing.T, data []byte, s string) {
		for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.StdEncoding} {
			text := enc.EncodeToString(data)
			if got := DecodeBase64URL(text); !bytes.Equal(got, data) && !(len(got) == 0 && len(data) == 0) {
				t.Fatalf("DecodeBase64URL(%q) = %x, want %x", text, got, data)
			}
		}
		clean := s
		if i := strings.IndexByte(clean, '='); i >= 0 {
			clean = clean[:i]
		}
		clean = strings.Map(func(r rune) rune {
			if r < 0x80 && (r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || strings.ContainsRune("+-/_", r)) {
				return r
			}
			return -1
		}, clean)
		got := DecodeBase64URL(s)
		if want := DecodeBase64URL(clean); !bytes.Equal(got, want) || len(got) != len(clean)*6/8 {
			t.Fatalf("DecodeBase64URL(%q) = %x; of its alphabet %q = %x", s, got, clean, want)
		}
		id := KeyID(s)
		if !keyIDPattern.MatchString(id) {
			t.Fatalf("KeyID(%q) = %q", s, id)
		}
		if id != KeyID(base64.RawURLEncoding.EncodeToString(got)) {
			t.Fatalf("KeyID(%q) depends on more than the decoded bytes", s)
		}
	})
}

// FuzzCompareVersions: compareVersions is a consistent order where defined
// (antisymmetric, reflexive), and the floor and offer checks built on it
// never refuse or offer on an unparsable version.
func FuzzCompareVersions(f *testing.F) {
	for _, c := range vectors(f).Versions {
		f.Add(c[0].(string), c[1].(string))
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ab, okAB := CompareVersions(a, b)
		ba, okBA := CompareVersions(b, a)
		if okAB != okBA || ab != -ba || ab < -1 || ab > 1 {
			t.Fatalf("compare(%q,%q) = %d,%v; compare(%q,%q) = %d,%v", a, b, ab, okAB, b, a, ba, okBA)
		}
		if okAB && a == b && ab != 0 {
			t.Fatalf("compare(%q,%q) = %d", a, a, ab)
		}
		if r := BelowFloorCheck(a, b); r != nil && (!okAB || ab >= 0) {
			t.Fatalf("floor %q refused %q (compare %d,%v)", b, a, ab, okAB)
		}
		// An offer is made only to a parsable daemon no older than
		// UpdateOfferSince, and never of the version it already runs.
		if UpdateOfferAllowed(b, a) {
			if since, ok := CompareVersions(a, UpdateOfferSince); !ok || since < 0 || a == b {
				t.Fatalf("offer %q made to %q", b, a)
			}
		}
	})
}

// FuzzParseQuery: URLSearchParams semantics keep every pair; names and
// values come out as UTF-8 and survive being escaped and parsed again; the
// site reads' query schema accepts exactly a non-empty siteId.
func FuzzParseQuery(f *testing.F) {
	for _, q := range []string{"siteId=site_a&protocolVersion=2", "protocolVersion=2&protocolVersion=3", "a=%zz&b=%e2%82&c=+x+;d=e",
		"=x&&y", "siteId=%F0%9F%98%80", "k=a=b", "%"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q := ParseQuery(raw)
		var parts []string
		for k, vs := range q {
			if !utf8.ValidString(k) {
				t.Fatalf("name %q is not UTF-8", k)
			}
			for _, v := range vs {
				if !utf8.ValidString(v) {
					t.Fatalf("value %q is not UTF-8", v)
				}
				parts = append(parts, url.QueryEscape(k)+"="+url.QueryEscape(v))
			}
		}
		if again := ParseQuery(strings.Join(parts, "&")); !reflect.DeepEqual(again, q) {
			t.Fatalf("ParseQuery(%q) = %v; escaped and parsed again %v", raw, q, again)
		}
		// A site read's query schema: the first siteId, refused when empty.
		site := ""
		if vs := q["siteId"]; len(vs) > 0 {
			site = vs[0]
		}
		if sq, err := DecodeSiteQuery(site); (err == nil) != (site != "") || (err == nil && sq.SiteID != site) {
			t.Fatalf("DecodeSiteQuery(%q) = %+v, %v", site, sq, err)
		}
	})
}
