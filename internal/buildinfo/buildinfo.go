// Package buildinfo says which build of the relay is running: a version
// string and the VCS revision it was built from, for `relay version`, the
// start line, the operations view and the relay_build_info metric.
//
// The version is stamped at link time,
//
//	go build -ldflags "-X github.com/byollm/relay-go/internal/buildinfo.version=v0.2.0" ./cmd/relay
//
// and the revision is read from the binary's own build information
// (runtime/debug: vcs.revision, vcs.modified), which `go build` records in a
// git checkout. A build without .git (a container build context that leaves
// it out) passes the revision the same way as the version:
// -X github.com/byollm/relay-go/internal/buildinfo.revision=<sha>.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Set by -ldflags -X; see the package comment.
var (
	version  string
	revision string
)

// Info is one build's identity.
type Info struct {
	// Version is the stamped version, else the main module's version as
	// Go recorded it, else "devel".
	Version string
	// Revision is the full VCS commit, with "-dirty" when the tree had
	// uncommitted changes; "unknown" when nothing recorded it.
	Revision string
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// Get reads the build's identity.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	return get(version, revision, bi, ok)
}

func get(stampedVersion, stampedRevision string, bi *debug.BuildInfo, ok bool) Info {
	out := Info{Version: stampedVersion, Revision: stampedRevision, GoVersion: runtime.Version()}
	var vcsRev string
	var dirty bool
	if ok && bi != nil {
		if bi.GoVersion != "" {
			out.GoVersion = bi.GoVersion
		}
		if out.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			out.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				vcsRev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if out.Version == "" {
		out.Version = "devel"
	}
	if out.Revision == "" {
		out.Revision = vcsRev
		if vcsRev != "" && dirty {
			out.Revision += "-dirty"
		}
	}
	if out.Revision == "" {
		out.Revision = "unknown"
	}
	return out
}

// ShortRevision is the revision's first 12 characters (and "-dirty").
func (i Info) ShortRevision() string {
	r := i.Revision
	const n = 12
	dirty := ""
	if len(r) > len("-dirty") && r[len(r)-len("-dirty"):] == "-dirty" {
		r, dirty = r[:len(r)-len("-dirty")], "-dirty"
	}
	if len(r) > n {
		r = r[:n]
	}
	return r + dirty
}

// String is the one-line form `relay version` prints:
// "relay v0.2.0 (revision 209a2c6…, go1.26.0)".
func (i Info) String() string {
	return "relay " + i.Version + " (revision " + i.Revision + ", " + i.GoVersion + ")"
}

// Short names the build on the operations view's fleet page.
func (i Info) Short() string { return i.Version + " " + i.ShortRevision() }
