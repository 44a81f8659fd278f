package protocol

// Request bodies (wire.md §1.2) and the version handshake (§4).

import (
	"net/url"
	"strings"
	"unicode/utf8"
)

// Body is a request body as the reference sees it.
type Body struct {
	// Text is rawBody: the bytes after WHATWG UTF-8 decoding (BOM stripped,
	// invalid sequences replaced with U+FFFD). Signatures hash these bytes.
	Text []byte
	// Value is JSON.parse(rawBody), or nil when Present is false.
	Value any
	// Present is false for an empty body and for invalid JSON, which the
	// reference treats as absent rather than as an error.
	Present bool
}

// ReadBody turns the bytes of a POST body into the reference's rawBody and
// body. Callers pass nil for any method other than POST (only POST bodies
// are read).
func ReadBody(raw []byte) Body {
	text := RequestText(raw)
	if len(text) == 0 {
		return Body{Text: text}
	}
	v, err := ParseJSON(text)
	if err != nil {
		return Body{Text: text}
	}
	return Body{Text: text, Value: v, Present: true}
}

// RequestText decodes raw bytes the way WHATWG Request.text() does: a
// leading UTF-8 BOM is stripped, and each maximal invalid subsequence becomes
// one U+FFFD. Valid UTF-8 without a BOM is returned unchanged (same slice).
func RequestText(raw []byte) []byte {
	if len(raw) >= 3 && raw[0] == 0xef && raw[1] == 0xbb && raw[2] == 0xbf {
		raw = raw[3:]
	}
	return decodeUTF8(raw)
}

// decodeUTF8 is WHATWG "UTF-8 decode without BOM".
func decodeUTF8(raw []byte) []byte {
	if utf8.Valid(raw) {
		return raw
	}
	var out []byte
	var cp rune
	needed, seen := 0, 0
	lower, upper := byte(0x80), byte(0xbf)
	for i := 0; i < len(raw); i++ {
		b := raw[i]
		if needed == 0 {
			switch {
			case b <= 0x7f:
				out = append(out, b)
			case b >= 0xc2 && b <= 0xdf:
				needed, cp = 1, rune(b&0x1f)
			case b >= 0xe0 && b <= 0xef:
				if b == 0xe0 {
					lower = 0xa0
				}
				if b == 0xed {
					upper = 0x9f
				}
				needed, cp = 2, rune(b&0xf)
			case b >= 0xf0 && b <= 0xf4:
				if b == 0xf0 {
					lower = 0x90
				}
				if b == 0xf4 {
					upper = 0x8f
				}
				needed, cp = 3, rune(b&0x7)
			default:
				out = append(out, "\uFFFD"...)
			}
			continue
		}
		if b < lower || b > upper {
			cp, needed, seen = 0, 0, 0
			lower, upper = 0x80, 0xbf
			out = append(out, "\uFFFD"...)
			i-- // reprocess this byte as the start of something new
			continue
		}
		lower, upper = 0x80, 0xbf
		cp = cp<<6 | rune(b&0x3f)
		seen++
		if seen == needed {
			out = appendWTF8(out, cp)
			cp, needed, seen = 0, 0, 0
		}
	}
	if needed != 0 {
		out = append(out, "\uFFFD"...)
	}
	return out
}

// Protocol version handshake constants (§4, §16).
const (
	MinProtocolVersion = "2"
	UpgradeCommand     = "npm i -g byollm@latest"
)

// SupportedProtocolVersions lists the versions this relay speaks.
var SupportedProtocolVersions = []string{"2"}

// DeclaredVersion is declaredVersion (§4.1): if body is a JSON object with an
// own protocolVersion key, that value whatever its type (nil for JSON null);
// otherwise the first protocolVersion query parameter; otherwise nil with
// present=false. A present query value is always a string.
func DeclaredVersion(body any, query url.Values) (v any, present bool) {
	if o, ok := body.(*Object); ok {
		if pv, ok := o.Get("protocolVersion"); ok {
			return pv, true
		}
	}
	if vals, ok := query["protocolVersion"]; ok && len(vals) > 0 {
		return vals[0], true
	}
	return nil, false
}

// CheckProtocolVersion is checkProtocolVersion (§4.2) on a declared value
// (from DeclaredVersion). It returns nil to proceed, or the 400 refusal.
func CheckProtocolVersion(declared any) *Refusal {
	s, ok := declared.(string)
	if !ok || s == "" {
		return versionRefusal("this request declared no protocol version. Upgrade the daemon: `" + UpgradeCommand + "`.")
	}
	for _, v := range SupportedProtocolVersions {
		if v == s {
			return nil
		}
	}
	msg := "this server speaks protocol " + strings.Join(SupportedProtocolVersions, ", ") +
		" and the daemon asked for " + s + ". "
	if LessUTF16(s, MinProtocolVersion) {
		msg += "Upgrade the daemon: `" + UpgradeCommand + "`."
	} else {
		msg += "This daemon is newer than the server; the server needs upgrading."
	}
	return versionRefusal(msg)
}

func versionRefusal(message string) *Refusal {
	return &Refusal{Status: 400, Body: RefusalBody{
		Error:     CodeUnsupportedProtocolVersion,
		Message:   message,
		Supported: append([]string(nil), SupportedProtocolVersions...),
		Minimum:   MinProtocolVersion,
	}}
}

// ParseQuery parses a raw query string as URLSearchParams does: pairs split
// on "&" (";" is an ordinary character), "+" is a space, percent-escapes are
// decoded leniently (a malformed one stays literal), and the decoded bytes
// are read as UTF-8 with replacement. Use it instead of url.ParseQuery, which
// drops pairs that URLSearchParams keeps. Values keep their order, so
// values[name][0] is URLSearchParams.get(name).
func ParseQuery(rawQuery string) url.Values {
	out := url.Values{}
	for _, pair := range strings.Split(rawQuery, "&") {
		if pair == "" {
			continue
		}
		name, value, _ := strings.Cut(pair, "=")
		k, v := formDecode(name), formDecode(value)
		out[k] = append(out[k], v)
	}
	return out
}

func formDecode(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '+':
			b = append(b, ' ')
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
		default:
			b = append(b, c)
		}
	}
	return string(decodeUTF8(b))
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}
