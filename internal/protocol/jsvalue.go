package protocol

// JSON.parse-compatible parsing into generic values.
//
// Strings are JavaScript strings, i.e. UTF-16. Go strings here hold them as
// WTF-8: well-formed UTF-8 for every scalar value, and the three-byte
// generalised UTF-8 form (ED A0..BF xx) for a lone surrogate that arrived as a
// \uXXXX escape. A surrogate pair of escapes becomes one astral character,
// exactly as JS sees it. Marshal writes a lone surrogate back as \udxxx, so a
// parsed value re-serialises to the bytes JSON.stringify would give.

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Object is a parsed JSON object. Keys is JS property order: array-index
// keys ("0", "17", ...) first in ascending numeric order, then the rest in
// first-occurrence order. Vals holds the last value given for a key, as
// JSON.parse does with duplicates.
type Object struct {
	Keys []string
	Vals map[string]any
}

// Get returns the value under key and whether the key is present.
func (o *Object) Get(key string) (any, bool) {
	v, ok := o.Vals[key]
	return v, ok
}

func (o *Object) addKey(k string) {
	idx, ok := arrayIndex(k)
	if !ok {
		o.Keys = append(o.Keys, k)
		return
	}
	// Index keys stay ahead of every other key, in numeric order.
	at := 0
	for at < len(o.Keys) {
		other, isIdx := arrayIndex(o.Keys[at])
		if !isIdx || other > idx {
			break
		}
		at++
	}
	o.Keys = slices.Insert(o.Keys, at, k)
}

// arrayIndex reports whether k is a canonical array index (0 .. 2^32-2).
func arrayIndex(k string) (uint64, bool) {
	if k == "" || len(k) > 10 || (len(k) > 1 && k[0] == '0') {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(k); i++ {
		if k[i] < '0' || k[i] > '9' {
			return 0, false
		}
		n = n*10 + uint64(k[i]-'0')
	}
	return n, n < 1<<32-1
}

// Number is a parsed JSON number: the IEEE double JS would hold.
type Number float64

// maxDepth bounds nesting so a hostile body cannot grow the stack without
// limit. V8's JSON.parse has no such bound: a body nested deeper than this
// is "absent" here but parsed there, which changes only which 400 a
// pathological request gets (version refusal instead of schema refusal).
const maxDepth = 10000

var errInvalidJSON = errors.New("invalid JSON")

// ParseJSON parses text with JSON.parse semantics. Values are nil (null),
// bool, Number, string (WTF-8), []any and *Object.
func ParseJSON(text []byte) (any, error) {
	return parseJSON(text, false)
}

// DuplicateKeyError is ParseJSONUnique's refusal of an object that names a
// key twice.
type DuplicateKeyError struct{ Key string }

func (e *DuplicateKeyError) Error() string {
	return fmt.Sprintf("an object names the key %q twice", e.Key)
}

// ParseJSONUnique is ParseJSON that refuses an object naming a key twice
// (a *DuplicateKeyError) instead of keeping the last value. The wire keeps
// JSON.parse's rule, as the reference does; the documents people and tools
// write for the admin listener (projection, policy, approvals) use this, so
// {"owner":"alice","owner":"mallory"} is refused, not read as mallory.
func ParseJSONUnique(text []byte) (any, error) {
	return parseJSON(text, true)
}

func parseJSON(text []byte, unique bool) (any, error) {
	p := parser{s: text, unique: unique}
	p.ws()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.ws()
	if p.i != len(p.s) {
		return nil, errInvalidJSON
	}
	return v, nil
}

type parser struct {
	s      []byte
	i      int
	unique bool // refuse a key an object names twice
}

func (p *parser) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) (any, error) {
	if depth > maxDepth || p.i >= len(p.s) {
		return nil, errInvalidJSON
	}
	switch c := p.s[p.i]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		return p.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case bytes.HasPrefix(p.s[p.i:], []byte("true")):
		p.i += 4
		return true, nil
	case bytes.HasPrefix(p.s[p.i:], []byte("false")):
		p.i += 5
		return false, nil
	case bytes.HasPrefix(p.s[p.i:], []byte("null")):
		p.i += 4
		return nil, nil
	}
	return nil, errInvalidJSON
}

func (p *parser) object(depth int) (any, error) {
	p.i++ // {
	o := &Object{Vals: map[string]any{}}
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return o, nil
	}
	for {
		p.ws()
		if p.i >= len(p.s) || p.s[p.i] != '"' {
			return nil, errInvalidJSON
		}
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		p.ws()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return nil, errInvalidJSON
		}
		p.i++
		p.ws()
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		if _, seen := o.Vals[k]; !seen {
			o.addKey(k)
		} else if p.unique {
			return nil, &DuplicateKeyError{Key: k}
		}
		o.Vals[k] = v
		p.ws()
		if p.i >= len(p.s) {
			return nil, errInvalidJSON
		}
		switch p.s[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return o, nil
		default:
			return nil, errInvalidJSON
		}
	}
}

func (p *parser) array(depth int) (any, error) {
	p.i++ // [
	arr := []any{}
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == ']' {
		p.i++
		return arr, nil
	}
	for {
		p.ws()
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		arr = append(arr, v)
		p.ws()
		if p.i >= len(p.s) {
			return nil, errInvalidJSON
		}
		switch p.s[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			return arr, nil
		default:
			return nil, errInvalidJSON
		}
	}
}

func (p *parser) number() (any, error) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	digits := func() int {
		n := 0
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.i >= len(p.s) {
		return nil, errInvalidJSON
	}
	if p.s[p.i] == '0' {
		p.i++
	} else if digits() == 0 {
		return nil, errInvalidJSON
	}
	if p.i < len(p.s) && p.s[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return nil, errInvalidJSON
		}
	}
	if p.i < len(p.s) && (p.s[p.i] == 'e' || p.s[p.i] == 'E') {
		p.i++
		if p.i < len(p.s) && (p.s[p.i] == '+' || p.s[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return nil, errInvalidJSON
		}
	}
	f, err := strconv.ParseFloat(string(p.s[start:p.i]), 64)
	if err != nil {
		// Out of range: JS yields ±Infinity (or 0 for underflow, which
		// ParseFloat already returns without error).
		var ne *strconv.NumError
		if !errors.As(err, &ne) || !errors.Is(ne.Err, strconv.ErrRange) {
			return nil, errInvalidJSON
		}
	}
	return Number(f), nil
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	return r, true
}

func (p *parser) str() (string, error) {
	p.i++ // opening quote
	var out []byte
	for {
		if p.i >= len(p.s) {
			return "", errInvalidJSON
		}
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return string(out), nil
		case c < 0x20:
			return "", errInvalidJSON
		case c != '\\':
			out = append(out, c)
			p.i++
			continue
		}
		// escape
		if p.i+1 >= len(p.s) {
			return "", errInvalidJSON
		}
		e := p.s[p.i+1]
		p.i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(p.s[p.i:])
			if !ok {
				return "", errInvalidJSON
			}
			p.i += 4
			if utf16.IsSurrogate(r) && r < 0xdc00 && p.i+6 <= len(p.s) && p.s[p.i] == '\\' && p.s[p.i+1] == 'u' {
				if lo, ok := hex4(p.s[p.i+2:]); ok && lo >= 0xdc00 && lo <= 0xdfff {
					p.i += 6
					out = utf8.AppendRune(out, utf16.DecodeRune(r, lo))
					continue
				}
			}
			out = appendWTF8(out, r)
		default:
			return "", errInvalidJSON
		}
	}
}

// appendWTF8 appends r, writing a surrogate code point in its generalised
// UTF-8 form (which utf8.AppendRune would replace with U+FFFD).
func appendWTF8(b []byte, r rune) []byte {
	if r >= 0xd800 && r <= 0xdfff {
		return append(b, 0xe0|byte(r>>12), 0x80|byte(r>>6)&0x3f, 0x80|byte(r)&0x3f)
	}
	return utf8.AppendRune(b, r)
}

// decodeWTF8 returns the code point at the start of s and its length. A lone
// surrogate in generalised UTF-8 is returned as itself; any other invalid
// byte is returned as U+FFFD with length 1.
func decodeWTF8(s string) (rune, int) {
	r, n := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && n == 1 && len(s) >= 3 && s[0] == 0xed && s[1] >= 0xa0 && s[1] <= 0xbf && s[2]&0xc0 == 0x80 {
		return rune(s[0]&0x0f)<<12 | rune(s[1]&0x3f)<<6 | rune(s[2]&0x3f), 3
	}
	return r, n
}

// CodePoints counts a string's Unicode code points the way zod 4.6.7 does
// for min/max: an astral character is one, a lone surrogate is one.
func CodePoints(s string) int {
	n := 0
	for i := 0; i < len(s); {
		_, w := decodeWTF8(s[i:])
		i += w
		n++
	}
	return n
}

// UTF16Len is the JS .length of a (WTF-8) string.
func UTF16Len(s string) int {
	n := 0
	for i := 0; i < len(s); {
		r, w := decodeWTF8(s[i:])
		i += w
		if r > 0xffff {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// LessUTF16 is JS `a < b` for strings: lexicographic over UTF-16 code units.
func LessUTF16(a, b string) bool {
	return CompareUTF16(a, b) < 0
}

// CompareUTF16 orders two strings by UTF-16 code units, as JS relational
// operators and the default sort do.
func CompareUTF16(a, b string) int {
	ia, ib := utf16Units{s: a, low: -1}, utf16Units{s: b, low: -1}
	for {
		ua, ub := ia.next(), ib.next()
		switch {
		case ua == -1 && ub == -1:
			return 0
		case ua < ub:
			return -1
		case ua > ub:
			return 1
		}
	}
}

// utf16Units walks a (WTF-8) string one UTF-16 code unit at a time.
type utf16Units struct {
	s   string
	i   int
	low rune // pending low surrogate of an astral char, or -1
}

// next returns the next code unit, or -1 at the end.
func (u *utf16Units) next() rune {
	if u.low >= 0 {
		r := u.low
		u.low = -1
		return r
	}
	if u.i >= len(u.s) {
		return -1
	}
	r, w := decodeWTF8(u.s[u.i:])
	u.i += w
	if r > 0xffff {
		hi, lo := utf16.EncodeRune(r)
		u.low = lo
		return hi
	}
	return r
}

// isSafeInteger is Number.isSafeInteger.
func isSafeInteger(f float64) bool {
	return !math.IsInf(f, 0) && !math.IsNaN(f) && math.Trunc(f) == f && math.Abs(f) <= 1<<53-1
}
