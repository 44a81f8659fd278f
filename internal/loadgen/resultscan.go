package loadgen

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// resultRef is one entry of a results answer: its bytes, and its jobId
// ("" when the entry has none or it is not a string).
type resultRef struct {
	raw   []byte
	jobID string
}

// resultsValidEvery: one results answer in this many is also checked in full
// with json.Valid. A results read repeats every result until its deadline
// (wire.md §9.5), so at a few hundred jobs a second an answer is megabytes
// of results the site has already collected; running encoding/json over all
// of it on every read made the load generator, not the relay, the limit of
// a ramp. Entries the site has not collected yet are always decoded in full.
const resultsValidEvery = 32

// scanResults walks a results answer ({"jobs":[{...},...]}) once and returns
// every entry of its jobs array with that entry's jobId. It checks the
// structure the walk depends on: objects of "key": value pairs, arrays,
// strings that end, nothing after the answer. Inside values it skips over
// it does not tell [ from {, nor check numbers, literals or control bytes
// in strings; json.Valid (resultsValidEvery) covers those.
func scanResults(b []byte) ([]resultRef, error) {
	s := scan{b: b}
	var out []resultRef
	err := s.object(func(key string) error {
		if key != "jobs" {
			return s.skip()
		}
		var err error
		out, err = s.entries()
		return err
	})
	if err != nil {
		return nil, err
	}
	if s.ws(); s.i != len(b) {
		return nil, fmt.Errorf("results answer: %d bytes after its end", len(b)-s.i)
	}
	return out, nil
}

type scan struct {
	b []byte
	i int
}

var errEnd = errors.New("answer ends early")

func (s *scan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

// peek is the next byte that is not white space, or 0 at the end.
func (s *scan) peek() byte {
	if s.ws(); s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scan) expect(c byte) error {
	switch got := s.peek(); {
	case got == c:
		s.i++
		return nil
	case got == 0:
		return fmt.Errorf("results answer: want %q: %w", c, errEnd)
	default:
		return fmt.Errorf("results answer: want %q at byte %d, got %q", c, s.i, got)
	}
}

// str reads a string at s.i and returns it decoded.
func (s *scan) str() (string, error) {
	start, escaped, err := s.over()
	switch {
	case err != nil:
		return "", err
	case !escaped:
		return string(s.b[start+1 : s.i-1]), nil
	}
	var v string
	if err := json.Unmarshal(s.b[start:s.i], &v); err != nil {
		return "", fmt.Errorf("results answer: string at byte %d: %w", start, err)
	}
	return v, nil
}

// over reads over a string at s.i and says where it began and whether it
// holds an escape. It finds the closing quote with bytes.IndexByte (most of
// an answer is long base64url strings), so it does not look for raw
// control characters; json.Valid does.
func (s *scan) over() (start int, escaped bool, err error) {
	if err := s.expect('"'); err != nil {
		return 0, false, err
	}
	start = s.i - 1
	for {
		k := bytes.IndexByte(s.b[s.i:], '"')
		if k < 0 {
			s.i = len(s.b)
			return 0, false, fmt.Errorf("results answer: string at byte %d: %w", start, errEnd)
		}
		end := s.i + k
		s.i = end + 1
		n := 0 // backslashes right before the quote: an odd count escapes it
		for end-n-1 > start && s.b[end-n-1] == '\\' {
			n++
		}
		if !escaped {
			escaped = bytes.IndexByte(s.b[start+1:end], '\\') >= 0
		}
		if n%2 == 0 {
			return start, escaped, nil
		}
	}
}

// object reads {"key": value, ...}, calling member with s.i at each value;
// member must read the value.
func (s *scan) object(member func(key string) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		key, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := member(key); err != nil {
			return err
		}
		if s.peek() == '}' {
			s.i++
			return nil
		}
		if err := s.expect(','); err != nil {
			return err
		}
	}
}

// entries reads the jobs array.
func (s *scan) entries() ([]resultRef, error) {
	if err := s.expect('['); err != nil {
		return nil, err
	}
	var out []resultRef
	if s.peek() == ']' {
		s.i++
		return out, nil
	}
	for {
		if s.peek() != '{' {
			return nil, fmt.Errorf("results answer: entry %d is not an object", len(out))
		}
		start := s.i
		var ref resultRef
		err := s.object(func(key string) error {
			if key == "jobId" && s.peek() == '"' {
				var err error
				ref.jobID, err = s.str()
				return err
			}
			return s.skip()
		})
		if err != nil {
			return nil, err
		}
		ref.raw = s.b[start:s.i]
		out = append(out, ref)
		if s.peek() == ']' {
			s.i++
			return out, nil
		}
		if err := s.expect(','); err != nil {
			return nil, err
		}
	}
}

// skip reads over one value of any kind.
func (s *scan) skip() error {
	switch c := s.peek(); c {
	case 0:
		return fmt.Errorf("results answer: want a value: %w", errEnd)
	case '"':
		_, _, err := s.over()
		return err
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if _, _, err := s.over(); err != nil {
					return err
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return nil
				}
			}
			s.i++
		}
		return fmt.Errorf("results answer: unclosed %q: %w", c, errEnd)
	case ',', '}', ']', ':':
		return fmt.Errorf("results answer: want a value at byte %d, got %q", s.i, c)
	default: // a number or a literal: up to the next delimiter
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return nil
			case '{', '[', '"', ':':
				return fmt.Errorf("results answer: want a value at byte %d, got %q", s.i, s.b[s.i])
			}
			s.i++
		}
		return nil
	}
}
