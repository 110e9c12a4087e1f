// Package buildinfo reports what the running binary was built from: its
// module version, VCS revision (and whether the work tree had uncommitted
// changes) and Go version, read from the build information the Go
// toolchain embeds (runtime/debug.ReadBuildInfo; `go help buildinfo`),
// never by running git.
//
// The toolchain stamps the revision only when it builds inside a
// repository with -buildvcs=auto or true (`go build`'s default; `go test`
// and `go run` binaries and -buildvcs=false carry none). Without it Read
// says so: Revision is "unknown" and RevisionSource names the reason.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"time"
)

// Info is what the binary was built from.
type Info struct {
	// Module is the main module's path, e.g. github.com/nezha-harness/nezha.
	Module string `json:"module"`
	// Version is the main module's version: "(devel)" for a build from a
	// work tree, a tag or pseudo-version for `go install module@version`.
	Version string `json:"version"`
	// Revision is the VCS revision (a git commit hash), or "unknown".
	Revision string `json:"revision"`
	// Dirty: the work tree had uncommitted changes to tracked files.
	Dirty bool `json:"dirty"`
	// RevisionTime is the commit time of Revision (zero if unknown).
	RevisionTime time.Time `json:"revision_time,omitzero"`
	// RevisionSource is where Revision came from: "build info", or why it
	// is unknown.
	RevisionSource string `json:"revision_source"`
	// GoVersion is the toolchain that built the binary, e.g. go1.26.8.
	GoVersion string `json:"go_version"`
}

// SourceBuildInfo is Info.RevisionSource when the toolchain stamped the
// revision.
const SourceBuildInfo = "build info"

// Read returns the running binary's Info.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Module: "unknown", Version: "unknown", Revision: "unknown", GoVersion: runtime.Version(),
			RevisionSource: "no build info (binary built without module support)"}
	}
	return FromBuildInfo(bi)
}

// FromBuildInfo extracts Info from bi (exported for tests).
func FromBuildInfo(bi *debug.BuildInfo) Info {
	in := Info{Module: bi.Main.Path, Version: bi.Main.Version, GoVersion: bi.GoVersion, Revision: "unknown"}
	if in.Version == "" {
		in.Version = "unknown"
	}
	if in.GoVersion == "" {
		in.GoVersion = runtime.Version()
	}
	var vcs string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs":
			vcs = s.Value
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.modified":
			in.Dirty = s.Value == "true"
		case "vcs.time":
			in.RevisionTime, _ = time.Parse(time.RFC3339, s.Value)
		}
	}
	switch {
	case in.Revision != "unknown":
		in.RevisionSource = SourceBuildInfo
	case vcs != "":
		in.RevisionSource = fmt.Sprintf("build info names %s but no revision", vcs)
	default:
		in.RevisionSource = "not in build info (built by go test or go run, with -buildvcs=false, or outside a repository)"
	}
	return in
}

// RevisionString is Revision with "+dirty" appended when Dirty, e.g.
// "0c1e775…+dirty".
func (in Info) RevisionString() string {
	if in.Dirty {
		return in.Revision + "+dirty"
	}
	return in.Revision
}

// String is the one-line form `nezha version` prints.
func (in Info) String() string {
	s := fmt.Sprintf("%s %s, revision %s", in.Module, in.Version, in.RevisionString())
	if in.RevisionSource != SourceBuildInfo {
		s += " (" + in.RevisionSource + ")"
	} else if !in.RevisionTime.IsZero() {
		s += " (" + in.RevisionTime.UTC().Format(time.RFC3339) + ")"
	}
	return s + ", " + in.GoVersion
}

// ImageTag is the container image that scripts/image.sh builds from the
// same checkout: nezha:<first 12 hex digits of the revision>[-dirty], or
// nezha:latest when the revision is unknown.
func ImageTag() string {
	in := Read()
	if in.Revision == "unknown" || len(in.Revision) < 12 {
		return "nezha:latest"
	}
	tag := "nezha:" + in.Revision[:12]
	if in.Dirty {
		tag += "-dirty"
	}
	return tag
}
