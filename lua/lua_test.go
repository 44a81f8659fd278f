package lua

import (
	"io/fs"
	"strings"
	"testing"
)

// Every operation opens with its contract: a purpose line, KEYS, ARGV and
// the reply shape, and names only libraries that exist.
func TestScriptHeaders(t *testing.T) {
	ops, err := fs.Glob(FS, "*.lua")
	if err != nil || len(ops) == 0 {
		t.Fatalf("glob: %v %v", ops, err)
	}
	for _, op := range ops {
		t.Run(op, func(t *testing.T) {
			body, err := fs.ReadFile(FS, op)
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
			name := strings.TrimSuffix(op, ".lua")
			if !strings.HasPrefix(h, "-- "+name+":") {
				t.Errorf("header does not open with %q", "-- "+name+":")
			}
			for _, want := range []string{"KEYS[1]", "ARGV[", "Reply:"} {
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
