package lua

import (
	"io/fs"
	"path"
	"regexp"
	"strings"
	"testing"

	"github.com/byollm/relay-go/test/storehooks"
)

// operationFS is where each operation lives: lua/ for the ones the store
// ships, lua/projection for the projection's (which take no common ARGV),
// test/storehooks for the contract's test-only hooks. All follow the same
// rules.
func operationFS(t *testing.T) map[string]fs.FS {
	out := map[string]fs.FS{}
	for _, fsys := range []fs.FS{FS, storehooks.FS} {
		ops, err := fs.Glob(fsys, "*.lua")
		if err != nil || len(ops) == 0 {
			t.Fatalf("glob: %v %v", ops, err)
		}
		for _, op := range ops {
			out[op] = fsys
		}
	}
	proj, err := fs.Glob(ProjectionFS, "projection/*.lua")
	if err != nil || len(proj) == 0 {
		t.Fatalf("glob: %v %v", proj, err)
	}
	for _, op := range proj {
		out[op] = ProjectionFS
	}
	return out
}

// Every operation opens with its contract: a purpose line, KEYS, ARGV and
// the reply shape, and names only libraries that exist.
func TestScriptHeaders(t *testing.T) {
	for op, fsys := range operationFS(t) {
		t.Run(op, func(t *testing.T) {
			body, err := fs.ReadFile(fsys, op)
			if err != nil {
				t.Fatal(err)
			}
			var header []string
			for _, line := range strings.Split(string(body), "\n") {
				if !strings.HasPrefix(line, "--") {
					break
				}
				header = append(header, line)
			}
			h := strings.Join(header, "\n")
			name := strings.TrimSuffix(path.Base(op), ".lua")
			if !strings.HasPrefix(h, "-- "+name+":") {
				t.Errorf("header does not open with %q", "-- "+name+":")
			}
			for _, want := range []string{"KEYS[1]", "ARGV", "Reply:"} {
				if !strings.Contains(h, want) {
					t.Errorf("header lacks %q", want)
				}
			}
			for _, line := range header {
				if lib, ok := strings.CutPrefix(line, "-- lib:"); ok {
					if _, err := fs.Stat(FS, "lib/"+strings.TrimSpace(lib)+".lua"); err != nil {
						t.Errorf("names missing library %q", lib)
					}
				}
			}
			if n := strings.Count(string(body), "clock()"); n > 1 {
				t.Errorf("reads the clock %d times; one TIME per script", n)
			}
			if strings.Contains(string(body), "math.random") {
				t.Error("uses math.random; randomness comes from Go")
			}
		})
	}
}

// The libraries never read the clock themselves: each script reads TIME once
// and passes now down.
func TestLibrariesTakeNowAsAnArgument(t *testing.T) {
	libs, _ := fs.Glob(FS, "lib/*.lua")
	for _, lib := range libs {
		body, _ := fs.ReadFile(FS, lib)
		calls := strings.Count(string(body), "clock()")
		if lib == "lib/common.lua" {
			calls-- // the definition
		}
		if calls != 0 {
			t.Errorf("%s calls clock() %d times", lib, calls)
		}
	}
}

// writeCommand matches a redis.call of a command that writes.
var writeCommand = regexp.MustCompile(`redis\.call\(\s*'(?i:SET|SETNX|GETDEL|DEL|UNLINK|HSET|HSETNX|HDEL|HINCRBY|INCR|INCRBY|DECR|DECRBY|ZADD|ZREM|ZREMRANGEBYSCORE|ZREMRANGEBYRANK|ZINCRBY|SADD|SREM|SPOP|EXPIRE|PEXPIRE|PEXPIREAT|PUBLISH|SPUBLISH|RENAME|LPUSH|RPUSH|LPOP|RPOP)'`)

// header is a script's opening comment block.
func header(body string) string {
	var h []string
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "--") {
			break
		}
		h = append(h, line)
	}
	return strings.Join(h, "\n")
}

// Mode reads the mode a header declares: "read-only" or "write".
func Mode(h string) string {
	for _, line := range strings.Split(h, "\n") {
		if m, ok := strings.CutPrefix(line, "-- mode: "); ok {
			return strings.Fields(m)[0]
		}
	}
	return ""
}

// Every script, projection ones included, declares its mode and its slot in
// its header; a read-only one names no write command and reads no clock; no
// operation that takes the common ARGV names ARGV[1] (only lib/common.lua
// reads the prefix there, checked against KEYS[1]'s).
func TestScriptModesAndSlots(t *testing.T) {
	for op, fsys := range operationFS(t) {
		t.Run(op, func(t *testing.T) {
			body, err := fs.ReadFile(fsys, op)
			if err != nil {
				t.Fatal(err)
			}
			src := string(body)
			h := header(src)
			mode := Mode(h)
			if mode != "read-only" && mode != "write" {
				t.Fatalf("header declares no mode (want a line \"-- mode: read-only\" or \"-- mode: write\")")
			}
			if !strings.Contains(h, "-- slot: ") {
				t.Error("header does not say which slot its keys are in (\"-- slot: ...\")")
			}
			if mode == "read-only" {
				if w := writeCommand.FindString(src); w != "" {
					t.Errorf("read-only script writes: %s", w)
				}
				if strings.Contains(src, "clock()") || strings.Contains(src, "'TIME'") {
					t.Error("read-only script reads the clock")
				}
			}
			if !strings.HasPrefix(op, "projection/") && strings.Contains(src, "ARGV[1]") {
				t.Error("names ARGV[1] (the prefix): build keys from P, which lib/common.lua derives from KEYS[1]")
			}
		})
	}
}
