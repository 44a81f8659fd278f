// Package scriptrun runs the relay's Lua scripts against Valkey: one place
// for the store, the policy and the projection that observes every call
// (its span, its latency under the script's name, its error class),
// bounds it (a per-call deadline) and classifies its errors (errors.go).
// A script runs as a function of a loaded library (FCALL) where the
// Runner has one that holds it, else with EVALSHA (EVAL on NOSCRIPT).
package scriptrun

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/valkey-io/valkey-go"
)

// Script is one Lua operation: its name (metrics and spans name it so),
// its source as sent with EVAL, and whether it is read-only, as its header
// says ("-- mode: read-only" or "-- mode: write"); a read-only script runs
// with FCALL_RO or EVALSHA_RO, so a replica may serve it.
type Script struct {
	name     string
	src      string
	readOnly bool
	sha      string
	lua      *valkey.Lua
}

// New is the script name whose source (as EVAL takes it) is src. Its mode
// is read from src's header; a script without one is refused.
func New(name, src string) (*Script, error) {
	ro, err := headerMode(src)
	if err != nil {
		return nil, fmt.Errorf("script %s: %w", name, err)
	}
	sum := sha1.Sum([]byte(src))
	sc := &Script{name: name, src: src, readOnly: ro, sha: hex.EncodeToString(sum[:])}
	if ro {
		sc.lua = valkey.NewLuaScriptReadOnly(src)
	} else {
		sc.lua = valkey.NewLuaScript(src)
	}
	return sc, nil
}

// Must is New for the scripts a package ships, whose headers its tests
// check: a missing mode is a build mistake.
func Must(name, src string) *Script {
	sc, err := New(name, src)
	if err != nil {
		panic(err)
	}
	return sc
}

// Name is the script's name.
func (s *Script) Name() string { return s.name }

// ReadOnly says whether the script writes nothing (its header's mode).
func (s *Script) ReadOnly() bool { return s.readOnly }

// SHA1 is the digest EVALSHA names the script by.
func (s *Script) SHA1() string { return s.sha }

// Source is the script as EVAL takes it.
func (s *Script) Source() string { return s.src }

// headerMode reads the "-- mode:" line of a script's header: read-only or
// write (what follows the word is a comment).
func headerMode(src string) (readOnly bool, err error) {
	for line := range strings.Lines(src) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "-- mode:")
		if !ok {
			continue
		}
		switch word, _, _ := strings.Cut(strings.TrimSpace(rest), " "); word {
		case "read-only":
			return true, nil
		case "write":
			return false, nil
		default:
			return false, fmt.Errorf("mode %q: write read-only or write", word)
		}
	}
	return false, fmt.Errorf("no \"-- mode:\" header line")
}
