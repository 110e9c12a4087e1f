package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/nezha-harness/nezha", Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "abc123"},
			{Key: "vcs.modified", Value: "true"}, {Key: "vcs.time", Value: "2026-11-30T12:00:00Z"}}}
	in := FromBuildInfo(bi)
	if in.Revision != "abc123" || !in.Dirty || in.RevisionSource != SourceBuildInfo || in.RevisionTime.IsZero() {
		t.Fatalf("got %+v", in)
	}
	want := "github.com/nezha-harness/nezha (devel), revision abc123+dirty (2026-11-30T12:00:00Z), go1.26.8"
	if in.String() != want {
		t.Fatalf("String() = %q, want %q", in.String(), want)
	}
	bare := FromBuildInfo(&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "m"}})
	if bare.Revision != "unknown" || bare.Dirty || !strings.Contains(bare.String(), "not in build info") {
		t.Fatalf("no VCS settings: got %+v / %s", bare, bare.String())
	}
}

// TestRead: a test binary has build info (module path, Go version) even
// though go test does not stamp a revision.
func TestRead(t *testing.T) {
	in := Read()
	if in.Module != "github.com/nezha-harness/nezha" || !strings.HasPrefix(in.GoVersion, "go") {
		t.Fatalf("Read() = %+v", in)
	}
}

func TestImageTag(t *testing.T) {
	const rev = "0c1e775a1b2c3d4e5f60718293a4b5c6d7e8f901"
	for _, c := range []struct {
		in   Info
		want string
	}{
		{Info{Revision: rev}, "nezha:0c1e775a1b2c"},
		{Info{Revision: rev, Dirty: true}, "nezha:0c1e775a1b2c-dirty"},
		{Info{Revision: "unknown"}, "nezha:latest"},
		{Info{Revision: "unknown", Dirty: true}, "nezha:latest"},
		{Info{Revision: "abc123"}, "nezha:latest"}, // not a git hash
		{FromBuildInfo(&debug.BuildInfo{Main: debug.Module{Path: "m"}}), "nezha:latest"},
	} {
		if got := c.in.ImageTag(); got != c.want {
			t.Errorf("%+v.ImageTag() = %q, want %q", c.in, got, c.want)
		}
	}
}
