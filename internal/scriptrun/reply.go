package scriptrun

import (
	"fmt"
	"strconv"

	"github.com/valkey-io/valkey-go"
)

// Scripts answer with arrays of strings and integers (each script's header
// gives the shape); these read the two shapes every caller meets.

// Elems is an array reply's elements, refused when it has fewer than min.
func Elems(m valkey.ValkeyMessage, min int) ([]valkey.ValkeyMessage, error) {
	a, err := m.ToArray()
	if err != nil {
		return nil, err
	}
	if len(a) < min {
		return nil, fmt.Errorf("reply has %d elements, want at least %d", len(a), min)
	}
	return a, nil
}

// Text is a string reply, or an integer reply in decimal.
func Text(m valkey.ValkeyMessage) (string, error) {
	if m.IsInt64() {
		n, _ := m.AsInt64()
		return strconv.FormatInt(n, 10), nil
	}
	return m.ToString()
}
