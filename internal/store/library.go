package store

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/byollm/relay-go/internal/scriptrun"
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

// forRunner is the library as the runner loads and calls it.
func (l library) forRunner() scriptrun.Library {
	return scriptrun.Library{Name: l.name, Src: l.src, Fn: l.fn}
}
