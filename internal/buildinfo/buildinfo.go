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
	"strings"
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

// ImageRepository is the repository of the harness's container image
// (scripts/image.sh builds it; docs/containers.md).
const ImageRepository = "nezha"

// imageTagRevisionHex is how many hex digits of the revision an image tag
// keeps (git's short hashes are 7-12; 12 stays unique in large histories).
const imageTagRevisionHex = 12

// isGitRevision: rev is a git commit hash (SHA-1 or SHA-256, lower-case
// hex).
func isGitRevision(rev string) bool {
	return (len(rev) == 40 || len(rev) == 64) && strings.Trim(rev, "0123456789abcdef") == ""
}

// ImageTag is the container image built from the same checkout as this
// binary: "nezha:" and the first 12 hex digits of Revision, with "-dirty"
// when the work tree had uncommitted changes (e.g. "nezha:0c1e775a1b2c" or
// "nezha:0c1e775a1b2c-dirty"). Without a git revision (go test, go run,
// -buildvcs=false) it is "nezha:latest". scripts/image.sh tags its image
// with what its own binary prints for `nezha version -imageTag`, so a
// controller finds the image that matches itself without asking git.
func (in Info) ImageTag() string {
	if !isGitRevision(in.Revision) {
		return ImageRepository + ":latest"
	}
	tag := in.Revision[:imageTagRevisionHex]
	if in.Dirty {
		tag += "-dirty"
	}
	return ImageRepository + ":" + tag
}
