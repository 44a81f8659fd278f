package lua

import (
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The header grammar every operation follows (lua/*.lua, lua/projection,
// test/storehooks), one entry a line:
//
//	-- KEYS[n]     name  what the key is            (more lines: "--" and spaces)
//	-- ARGV[n]     name  what the argument is
//	-- ARGV[n..]   name  a variable-length tail (a list), the last entry
//	-- ARGV[1..3] common ...   the calling convention of lib/common.lua,
//	                           in every script that takes it (not bound)
//
// and the body binds each entry, before any other statement (local
// functions aside), to a local of the same name:
//
//	local name = KEYS[n]          local name = tonumber(ARGV[n])
//	local name = tail(ARGV, n)    (a tail: lib/common.lua's tail)
//
// after which the body names KEYS and ARGV nowhere else.

var (
	entryRe   = regexp.MustCompile(`^--\s+(KEYS|ARGV)\[(\d+)(\.\.(\d*))?\]\s+(\S+)`)
	anyEntry  = regexp.MustCompile(`(?:^--\s+|\s{2,})(KEYS|ARGV)\[\d+(?:\.\.\d*)?\]\s`)
	bindRe    = regexp.MustCompile(`^local ([A-Za-z_]\w*) = (?:tonumber\()?(KEYS|ARGV)\[(\d+)\]\)?$`)
	tailRe    = regexp.MustCompile(`^local ([A-Za-z_]\w*) = tail\((KEYS|ARGV), (\d+)\)$`)
	rawRe     = regexp.MustCompile(`\b(KEYS|ARGV)\b`)
	identRe   = regexp.MustCompile(`^[A-Za-z_]\w*$`)
	commentRe = regexp.MustCompile(`--.*$`)
	// What a body declares: locals, loop variables, function parameters.
	declRes = []*regexp.Regexp{
		regexp.MustCompile(`\blocal\s+(?:function\s+)?([\w\s,]+?)\s*(?:=|\(|$)`),
		regexp.MustCompile(`\bfor\s+([\w\s,]+?)\s+(?:=|in)\b`),
		regexp.MustCompile(`\bfunction\s*[\w.:]*\(([^)]*)\)`),
	}
	stringRe = regexp.MustCompile(`'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"`)
)

// slot is one KEYS or ARGV entry, as documented or as bound.
type slot struct {
	kind string // KEYS or ARGV
	n    int
	tail bool // n.. (variable length)
	name string
}

func (s slot) String() string {
	if s.tail {
		return fmt.Sprintf("%s[%d..] %s", s.kind, s.n, s.name)
	}
	return fmt.Sprintf("%s[%d] %s", s.kind, s.n, s.name)
}

// checkBindings lints one operation's source against the grammar above;
// common says the script takes lib/common.lua's ARGV[1..3]. It returns the
// problems found.
func checkBindings(src string, common bool) []string {
	var bad []string
	lines := strings.Split(src, "\n")
	var doc []slot
	sawCommon := false
	i := 0
	for ; i < len(lines) && strings.HasPrefix(lines[i], "--"); i++ {
		line := lines[i]
		if n := len(anyEntry.FindAllStringIndex(line, -1)); n > 1 {
			bad = append(bad, fmt.Sprintf("header line %d documents %d entries; one a line: %q", i+1, n, line))
		}
		m := entryRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[2])
		if m[3] != "" && m[4] != "" {
			if m[1] == "ARGV" && n == 1 && m[4] == "3" && m[5] == "common" {
				sawCommon = true
				continue
			}
			bad = append(bad, fmt.Sprintf("header documents the closed range %s[%s..%s]: document each entry, or an open tail [n..]", m[1], m[2], m[4]))
			continue
		}
		if !identRe.MatchString(m[5]) {
			bad = append(bad, fmt.Sprintf("header entry %s[%s] is named %q, not a Lua name", m[1], m[2], m[5]))
			continue
		}
		doc = append(doc, slot{kind: m[1], n: n, tail: m[3] != "", name: m[5]})
	}
	if common && !sawCommon {
		bad = append(bad, `header lacks "-- ARGV[1..3] common ...", the calling convention`)
	}
	if !common && sawCommon {
		bad = append(bad, "header names ARGV[1..3] common, which this script does not take")
	}
	// The documented entries run 1.. (KEYS) and 4.. or 1.. (ARGV), no gap,
	// a tail last.
	for _, kind := range []string{"KEYS", "ARGV"} {
		want := 1
		if kind == "ARGV" && common {
			want = 4
		}
		var after bool
		for _, d := range doc {
			if d.kind != kind {
				continue
			}
			if after {
				bad = append(bad, fmt.Sprintf("header documents %s after a tail", d))
			}
			if d.n != want {
				bad = append(bad, fmt.Sprintf("header documents %s where %s[%d] comes next", d, kind, want))
			}
			want, after = d.n+1, d.tail
		}
	}

	var bound []slot
	inFunc, code := false, false
	var used strings.Builder
	for j := i; j < len(lines); j++ {
		// Strings first, so a "--" inside one is not a comment.
		line := strings.TrimRight(commentRe.ReplaceAllString(stringRe.ReplaceAllString(lines[j], "''"), ""), " \t")
		if line == "" {
			continue
		}
		if inFunc {
			inFunc = line != "end"
			if rawRe.MatchString(line) {
				bad = append(bad, fmt.Sprintf("line %d names KEYS or ARGV outside the bindings: %q", j+1, lines[j]))
			}
			used.WriteString(line + "\n")
			continue
		}
		if strings.HasPrefix(line, "local function ") {
			inFunc = !strings.HasSuffix(line, " end")
			if rawRe.MatchString(line) {
				bad = append(bad, fmt.Sprintf("line %d names KEYS or ARGV outside the bindings: %q", j+1, lines[j]))
			}
			used.WriteString(line + "\n")
			continue
		}
		var b *slot
		if m := bindRe.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[3])
			b = &slot{kind: m[2], n: n, name: m[1]}
		} else if m := tailRe.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[3])
			b = &slot{kind: m[2], n: n, tail: true, name: m[1]}
		}
		if b != nil {
			if code {
				bad = append(bad, fmt.Sprintf("line %d binds %s after the body began: bind at the top", j+1, *b))
			}
			bound = append(bound, *b)
			continue
		}
		code = true
		if rawRe.MatchString(line) {
			bad = append(bad, fmt.Sprintf("line %d names KEYS or ARGV outside the bindings: %q", j+1, lines[j]))
		}
		used.WriteString(line + "\n")
	}
	body := used.String()
	// A body local of a bound name would hide the binding from the lines
	// after it, and a reader would take one for the other.
	for _, re := range declRes {
		for _, m := range re.FindAllStringSubmatch(body, -1) {
			for _, name := range strings.Split(m[1], ",") {
				name = strings.TrimSpace(name)
				if slices.ContainsFunc(bound, func(b slot) bool { return b.name == name }) {
					bad = append(bad, fmt.Sprintf("the body declares %s again, hiding its binding", name))
				}
			}
		}
	}
	for _, d := range doc {
		if d.kind == "KEYS" && d.n == 1 && !slices.ContainsFunc(bound, func(b slot) bool { return b.kind == "KEYS" && b.n == 1 }) {
			continue // the slot's key, which lib/common.lua reads for P; the body need not
		}
		if !slices.Contains(bound, d) {
			bad = append(bad, fmt.Sprintf("header documents %s, which the body does not bind as documented", d))
		}
	}
	for _, b := range bound {
		if !slices.Contains(doc, b) {
			bad = append(bad, fmt.Sprintf("body binds %s, which the header does not document", b))
		}
		if !regexp.MustCompile(`\b` + b.name + `\b`).MatchString(body) {
			bad = append(bad, fmt.Sprintf("body binds %s and never uses it", b))
		}
	}
	return bad
}

// Every operation documents its KEYS and ARGV one entry a line and binds
// each to a local of the documented name; the body uses nothing else.
func TestScriptBindings(t *testing.T) {
	for op, fsys := range operationFS(t) {
		t.Run(op, func(t *testing.T) {
			body, err := fs.ReadFile(fsys, op)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range checkBindings(string(body), !strings.HasPrefix(op, "projection/")) {
				t.Error(p)
			}
		})
	}
}

// The lint catches a header that drifted from its body, as enqueue's once
// did (its header gave the epoch key as KEYS[6]; the body wrote KEYS[5]),
// and each other way the two can part.
func TestScriptBindingsCatchDrift(t *testing.T) {
	const good = `-- fixture: store a job.
-- mode: write
-- KEYS[1]  job     the job record
-- KEYS[2]  epoch   the data generation
-- ARGV[1..3] common  prefix, offset, flags
-- ARGV[4]  stub    the stub
-- ARGV[5..] sites  the site ids
-- Reply: 1

local job = KEYS[1]
local epoch = KEYS[2]
local stub = ARGV[4]
local sites = tail(ARGV, 5)

local function size(s) return #s end
redis.call('SET', epoch, 'x', 'NX')
redis.call('HSET', job, 'stub', stub, 'n', size(stub), 'sites', #sites)
return 1
`
	if bad := checkBindings(good, true); len(bad) != 0 {
		t.Fatalf("the good fixture: %q", bad)
	}
	for _, tc := range []struct {
		name, old, new, want string
	}{
		{"header names the wrong key", "-- KEYS[2]  epoch   the data generation", "-- KEYS[3]  epoch   the data generation", "documents KEYS[3] epoch"},
		{"header and body name an entry apart", "local epoch = KEYS[2]", "local generation = KEYS[2]", "binds KEYS[2] generation, which the header does not document"},
		{"raw KEYS in the body", "redis.call('SET', epoch, 'x', 'NX')", "redis.call('SET', KEYS[2], 'x', 'NX')", "names KEYS or ARGV outside the bindings"},
		{"raw ARGV inside a function", "local function size(s) return #s end", "local function size(s) return #ARGV[4] end", "names KEYS or ARGV outside the bindings"},
		{"undocumented binding", "local stub = ARGV[4]\n", "local stub = ARGV[4]\nlocal extra = ARGV[6]\n", "binds ARGV[6] extra, which the header does not document"},
		{"documented but unused", "'sites', #sites)", "'sites', 0)", "binds ARGV[5..] sites and never uses it"},
		{"binding after the body began", "local sites = tail(ARGV, 5)\n", "", "documents ARGV[5..] sites, which the body does not bind"},
		{"two entries on a line", "-- KEYS[1]  job     the job record\n-- KEYS[2]  epoch   the data generation", "-- KEYS[1]  job     the job record   KEYS[2]  epoch", "one a line"},
		{"no common line", "-- ARGV[1..3] common  prefix, offset, flags\n", "", "lacks"},
		{"a closed range", "-- ARGV[5..] sites  the site ids", "-- ARGV[5..7] sites  the site ids", "closed range"},
		{"a body local hides a binding", "local function size(s) return #s end", "local function size(stub) return #stub end", "declares stub again"},
		{"a tail bound as one entry", "local sites = tail(ARGV, 5)", "local sites = ARGV[5]", "does not bind as documented"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(good, tc.old) {
				t.Fatalf("fixture lacks %q", tc.old)
			}
			src := strings.Replace(good, tc.old, tc.new, 1)
			bad := checkBindings(src, true)
			if !slices.ContainsFunc(bad, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Fatalf("want a problem containing %q, got %q", tc.want, bad)
			}
		})
	}
	late := strings.Replace(good, "local sites = tail(ARGV, 5)\n", "", 1) + "local sites = tail(ARGV, 5)\n"
	if bad := checkBindings(late, true); !slices.ContainsFunc(bad, func(p string) bool { return strings.Contains(p, "after the body began") }) {
		t.Fatalf("a late binding: %q", bad)
	}
}
