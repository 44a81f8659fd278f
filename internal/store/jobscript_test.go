package store

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/byollm/relay-go/test/storehooks"
)

// RunJobScript, the seam the contract's hooks use, checks its input like
// every store call: a bad id or an argument past the blob bound is
// ErrInvalidInput and changes nothing; a job that is not there is 0.
func TestRunJobScript(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		h := newFixture(t, b, Options{MaxBlobBytes: 1024})
		h.enqueue("a", "alice")
		before := dump(t, b, h.s)
		for name, call := range map[string]func() (int64, error){
			"bad site id": func() (int64, error) {
				return h.s.Testing().RunJobScript(h.ctx, storehooks.WriteRawStub, "s\x00", "a", "{}")
			},
			"bad job id": func() (int64, error) {
				return h.s.Testing().RunJobScript(h.ctx, storehooks.WriteRawStub, site, "a\x00", "{}")
			},
			"argument too large": func() (int64, error) {
				return h.s.Testing().RunJobScript(h.ctx, storehooks.WriteRawStub, site, "a", strings.Repeat("x", 1025))
			},
		} {
			if _, err := call(); !errors.Is(err, ErrInvalidInput) {
				t.Errorf("%s: %v, want ErrInvalidInput", name, err)
			}
		}
		if n, err := h.s.Testing().RunJobScript(h.ctx, storehooks.WriteRawStub, site, "nope", "{}"); err != nil || n != 0 {
			t.Errorf("no such job: %d %v, want 0", n, err)
		}
		if !reflect.DeepEqual(before, dump(t, b, h.s)) {
			t.Fatal("a refused call changed the store")
		}
		if n, err := h.s.Testing().RunJobScript(h.ctx, storehooks.WriteRawStub, site, "a", `{"bad":1}`); err != nil || n != 1 {
			t.Fatalf("write: %d %v", n, err)
		}
	})
}
