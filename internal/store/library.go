package store

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/valkey-io/valkey-go"
)

// libOrder is the order the libraries of lua/lib/ are defined in, after
// lib/common.lua: each may use what an earlier one defines (store uses
// blob's get_blob, presence common's next_seq). A library missing from it
// is refused when the scripts are built.
var libOrder = []string{"blob", "store", "stub", "pages", "pairing", "presence"}

// library is every operation of lua/ as one Valkey Functions library.
//
// Why: a script sent with EVALSHA runs its whole source on every call, so
// each call rebuilds the libraries it carries (their functions and
// tables) before its first command; measured with callgrind on Redis 7.0,
// that is about 64,000 server instructions of a claim's 89,000 when it
// does nothing else, while a function call whose library was built once
// at FUNCTION LOAD costs 21,600. The library is named by a digest of its
// source, so replicas of different versions each load their own and never
// replace each other's functions during a rolling upgrade.
type library struct {
	name string            // relay_<16 hex>, also each function's prefix
	src  string            // "#!lua name=..." and the code FUNCTION LOAD takes
	fn   map[string]string // operation -> function name
}

// evalPrelude opens a script sent with EVAL: common's per-call KEYS and
// ARGV are the globals the server sets.
const evalPrelude = "local KEYS, ARGV = KEYS, ARGV\n"

// functionPrelude opens the library: KEYS and ARGV are set by begin()
// on each call (lib/common.lua).
const functionPrelude = "local KEYS, ARGV\n"

// callStart is what every operation runs first, in either form.
const callStart = "local begin_err = begin(KEYS, ARGV)\nif begin_err then return begin_err end\n"

// buildLibrary defines common and every library once, then registers one
// function per script of scripts, flagged no-writes when it is read-only.
func buildLibrary(fsys fs.FS, scripts []Script) (library, error) {
	var body strings.Builder
	body.WriteString(functionPrelude)
	common, err := fs.ReadFile(fsys, "lib/common.lua")
	if err != nil {
		return library{}, fmt.Errorf("build library: %w", err)
	}
	body.Write(common)
	libs, err := fs.Glob(fsys, "lib/*.lua")
	if err != nil {
		return library{}, fmt.Errorf("build library: %w", err)
	}
	for _, l := range libs {
		name := strings.TrimSuffix(strings.TrimPrefix(l, "lib/"), ".lua")
		if name != "common" && !slices.Contains(libOrder, name) {
			return library{}, fmt.Errorf("build library: lua/%s is not in libOrder (internal/store/library.go)", l)
		}
	}
	for _, name := range libOrder {
		src, err := fs.ReadFile(fsys, "lib/"+name+".lua")
		if err != nil {
			return library{}, fmt.Errorf("build library: %w", err)
		}
		body.Write(src)
	}
	ops := make([][2]string, 0, len(scripts))
	for _, sc := range scripts {
		src, err := fs.ReadFile(fsys, sc.Name+".lua")
		if err != nil {
			return library{}, fmt.Errorf("build library: %w", err)
		}
		ops = append(ops, [2]string{sc.Name, string(src)})
	}
	// The name is the digest of everything but itself; function names
	// carry it, so they are written after it is known.
	sum := sha1.New()
	sum.Write([]byte(body.String()))
	for i, op := range ops {
		fmt.Fprintf(sum, "%s\x00%t\x00%s\x00", op[0], scripts[i].ReadOnly, op[1])
	}
	lib := library{name: "relay_" + hex.EncodeToString(sum.Sum(nil))[:16], fn: make(map[string]string, len(ops))}
	for i, op := range ops {
		fname := lib.name + "_" + op[0]
		lib.fn[op[0]] = fname
		flags := ""
		if scripts[i].ReadOnly {
			flags = ", flags = {'no-writes'}"
		}
		fmt.Fprintf(&body, "\n-- %s\nredis.register_function{function_name = '%s'%s, callback = function(KEYS, ARGV)\n%s%s\nend}\n",
			op[0], fname, flags, callStart, op[1])
	}
	lib.src = "#!lua name=" + lib.name + "\n" + body.String()
	return lib, nil
}

// FunctionScript is the operation a function of a relay library runs
// ("relay_<16 hex>_claim" -> "claim"), for tools reading SLOWLOG, MONITOR
// or commandstats.
func FunctionScript(fname string) (string, bool) {
	rest, ok := strings.CutPrefix(fname, "relay_")
	if !ok || len(rest) < 18 || rest[16] != '_' || strings.Trim(rest[:16], "0123456789abcdef") != "" {
		return "", false
	}
	return rest[17:], true
}

// functions runs the store's operations as the library's functions and
// loads the library where it is missing.
type functions struct {
	lib library
	mu  sync.Mutex    // one load at a time
	gen atomic.Uint64 // loads so far; written under mu
}

// errNoFunctions: the server cannot load the library (no FUNCTION
// command, an ACL that forbids it, a full server): scripts run with EVALSHA.
var errNoFunctions = errors.New("valkey functions unavailable")

// generation is the number of loads so far: a caller takes it before a
// call, so that after "Function not found" it reloads only if nobody has
// since (reload).
func (f *functions) generation() uint64 { return f.gen.Load() }

// reload loads the library unless another caller did after generation
// seen: a server that lost it answers every caller at once, and one load
// serves them all.
func (f *functions) reload(ctx context.Context, c valkey.Client, seen uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gen.Load() != seen {
		return nil
	}
	return f.loadLocked(ctx, c)
}

// load puts the library on every node the client knows.
func (f *functions) load(ctx context.Context, c valkey.Client) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.loadLocked(ctx, c)
}

// loadLocked sends FUNCTION LOAD to each node: a node that has the library
// already keeps it (same name, same code: the name is its digest), a
// cluster's replicas refuse with READONLY and get it from their primary.
// A node that cannot be reached now is passed over as long as another
// took the library: a replica gets it by replication when it is back, a
// primary that comes back without its data answers "Function not found"
// and is loaded then (fcall), so one node down does not stop a relay from
// starting. It fails with errNoFunctions when a server answered but would
// not take it.
func (f *functions) loadLocked(ctx context.Context, c valkey.Client) error {
	loaded := 0
	var unreachable error
	for addr, node := range c.Nodes() {
		err := node.Do(ctx, node.B().FunctionLoad().FunctionCode(f.lib.src).Build()).Error()
		if ve, ok := valkey.IsValkeyErr(err); ok {
			switch msg := ve.Error(); {
			case strings.Contains(msg, "already exists"):
				err = nil
			case strings.HasPrefix(msg, "READONLY"):
				continue
			default:
				return fmt.Errorf("%w: %s: %v", errNoFunctions, addr, ve)
			}
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

// command is the FCALL (FCALL_RO when read-only) of script with keys and
// args as sent (guard and common ARGV included).
func (f *functions) command(c valkey.Client, script Script, keys, args []string) valkey.Completed {
	name := f.lib.fn[script.Name]
	if script.ReadOnly {
		return c.B().FcallRo().Function(name).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	}
	return c.B().Fcall().Function(name).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

// isFunctionMissing: the node that answered lacks the library (a new or
// restarted node without its data, a FUNCTION FLUSH or DELETE).
func isFunctionMissing(err error) bool {
	ve, ok := valkey.IsValkeyErr(err)
	return ok && strings.Contains(ve.Error(), "Function not found")
}
