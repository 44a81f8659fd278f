package relay

import "github.com/byollm/relay-go/internal/protocol"

// jsonObj writes one JSON object key by key, so responses keep the
// reference's key order and can embed stored JSON (stubs, envelopes) without
// decoding it.
type jsonObj struct {
	b []byte
}

func newObj() *jsonObj { return &jsonObj{b: []byte{'{'}} }

func (o *jsonObj) key(k string) {
	if len(o.b) > 1 {
		o.b = append(o.b, ',')
	}
	o.b = protocol.AppendJSString(o.b, k)
	o.b = append(o.b, ':')
}

// raw adds a value that is already JSON.
func (o *jsonObj) raw(k string, v []byte) *jsonObj {
	o.key(k)
	o.b = append(o.b, v...)
	return o
}

// val adds a Go value, encoded JS-style.
func (o *jsonObj) val(k string, v any) *jsonObj {
	return o.raw(k, protocol.MustMarshal(v))
}

func (o *jsonObj) bytes() []byte { return append(o.b, '}') }

// jsonArr joins already-encoded elements.
func jsonArr(elems [][]byte) []byte {
	out := []byte{'['}
	for i, e := range elems {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, e...)
	}
	return append(out, ']')
}

// orderedObj is Object.fromEntries: a repeated key keeps its first position
// and takes the last value.
type orderedObj struct {
	keys []string
	vals map[string][]byte
}

func (m *orderedObj) set(k string, v []byte) {
	if m.vals == nil {
		m.vals = map[string][]byte{}
	}
	if _, seen := m.vals[k]; !seen {
		m.keys = append(m.keys, k)
	}
	m.vals[k] = v
}

func (m *orderedObj) bytes() []byte {
	o := newObj()
	for _, k := range m.keys {
		o.raw(k, m.vals[k])
	}
	return o.bytes()
}
