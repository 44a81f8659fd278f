package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestStampedWinsOverBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.0.0-2026-abc"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}
	got := get("v1.2.3", "", bi, true)
	if got.Version != "v1.2.3" || got.Revision != "0123456789abcdef0123-dirty" || got.GoVersion != "go1.26.0" {
		t.Fatalf("got %+v", got)
	}
	if s := got.ShortRevision(); s != "0123456789ab-dirty" {
		t.Errorf("ShortRevision = %q", s)
	}
	got = get("v1.2.3", "feedface", bi, true)
	if got.Revision != "feedface" {
		t.Errorf("a stamped revision must win over vcs.revision: %q", got.Revision)
	}
}

func TestUnstampedFallsBack(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}
	got := get("", "", bi, true)
	if got.Version != "devel" || got.Revision != "unknown" || got.GoVersion == "" {
		t.Fatalf("got %+v", got)
	}
	got = get("", "", nil, false)
	if got.Version != "devel" || got.Revision != "unknown" {
		t.Fatalf("no build info: got %+v", got)
	}
	bi = &debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}}
	if got := get("", "", bi, true); got.Version != "v0.3.0" || got.Revision != "abc" {
		t.Fatalf("module version: got %+v", got)
	}
}
