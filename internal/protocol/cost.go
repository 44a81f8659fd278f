package protocol

import "unicode/utf8"

// valueCost is what one JSON token costs once ReadBody has parsed it and a
// handler has decoded it: an empty object parses to about 100 bytes of heap
// and an empty array or a number to 20-40, so 256 bytes per token covers the
// parse and the typed decode after it.
const valueCost = 256

// BodyCost bounds the heap that ReadBody and the decoding after it can take
// for raw, beyond raw itself, without parsing it: valueCost for every
// '{', '[', ',' and ':' outside strings (one per value, roughly), plus three
// bytes per byte when the text is not valid UTF-8 (each invalid byte may
// become a three-byte U+FFFD). Parsing can cost thirty times the body ("{},"
// repeated: 13 MiB parses to 426 MiB), so callers charge this to their body
// budget before calling ReadBody. Strings cost nothing extra: an envelope is
// one long string and parses to about its own size.
func BodyCost(raw []byte) int64 {
	var tokens int64 = 1
	inString, escaped := false, false
	for _, c := range raw {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch c {
			case '\\':
				escaped = true
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[' || c == ',' || c == ':':
			tokens++
		}
	}
	cost := tokens * valueCost
	if !utf8.Valid(raw) {
		cost += 3 * int64(len(raw))
	}
	return cost
}
