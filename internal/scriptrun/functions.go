package scriptrun

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/valkey-io/valkey-go"
)

// Library is a Valkey Functions library: its name, the code FUNCTION LOAD
// takes, and the function that runs each script (by script name).
type Library struct {
	Name string
	Src  string
	Fn   map[string]string
}

// ErrNoFunctions: the server cannot load the library (no FUNCTION
// command, an ACL that forbids it, a full server): scripts run with
// EVALSHA.
var ErrNoFunctions = errors.New("valkey functions unavailable")

// functions runs scripts as the library's functions and loads the library
// where it is missing.
type functions struct {
	lib Library
	mu  sync.Mutex    // one load at a time
	gen atomic.Uint64 // loads so far; written under mu
}

// load puts the library on every node the client knows.
func (f *functions) load(ctx context.Context, c valkey.Client) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.loadLocked(ctx, c)
}

// reload loads the library again when a node lacks it, unless another
// caller loaded it after generation seen: a server that lost it answers
// every caller at once, and one load serves them all. It reports whether
// the call is worth making again.
func (f *functions) reload(ctx context.Context, c valkey.Client, seen uint64) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gen.Load() != seen {
		return true, nil
	}
	missing, err := f.missing(ctx, c)
	if err != nil || !missing {
		return false, err
	}
	return true, f.loadLocked(ctx, c)
}

// missing asks every node whether it has the library: an error reply to
// a function call says nothing typed about why, so the library is looked
// for rather than the reply's text read.
func (f *functions) missing(ctx context.Context, c valkey.Client) (bool, error) {
	for _, node := range c.Nodes() {
		libs, err := node.Do(ctx, node.B().FunctionList().Libraryname(f.lib.Name).Build()).ToArray()
		if err != nil {
			return false, fmt.Errorf("list functions: %w", err)
		}
		if len(libs) == 0 {
			return true, nil
		}
	}
	return false, nil
}

// loadLocked sends FUNCTION LOAD REPLACE to each node (the name is the
// code's digest, so replacing a library of that name changes nothing); a
// cluster's replicas refuse with READONLY and get it from their primary.
// A node that cannot be reached now is passed over as long as another
// took the library: a replica gets it by replication when it is back, a
// primary that comes back without its data is loaded when a call finds
// the library missing, so one node down does not stop a relay from
// starting. It fails with ErrNoFunctions when a server answered but would
// not take it.
func (f *functions) loadLocked(ctx context.Context, c valkey.Client) error {
	loaded := 0
	var unreachable error
	for addr, node := range c.Nodes() {
		err := node.Do(ctx, node.B().FunctionLoad().Replace().FunctionCode(f.lib.Src).Build()).Error()
		if ve, ok := valkey.IsValkeyErr(err); ok {
			if ReplyPrefix(err) == "READONLY" {
				continue
			}
			return fmt.Errorf("%w: %s: %v", ErrNoFunctions, addr, ve)
		}
		if err != nil {
			unreachable = errors.Join(unreachable, fmt.Errorf("load functions on %s: %w", addr, err))
			continue
		}
		loaded++
	}
	if loaded == 0 {
		if unreachable != nil {
			return unreachable
		}
		return fmt.Errorf("load functions: no node took the library")
	}
	f.gen.Add(1)
	return nil
}

// command is the FCALL (FCALL_RO when read-only) of sc's function.
func (f *functions) command(c valkey.Client, fn string, sc *Script, keys, args []string) valkey.Completed {
	if sc.readOnly {
		return c.B().FcallRo().Function(fn).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	}
	return c.B().Fcall().Function(fn).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}
