package workloads

import (
	"strings"
	"testing"

	"github.com/nezha-harness/nezha/systems/buildinfo"
)

// TestRevision: the build info's revision wins; without one the fallback
// is labelled as such.
func TestRevision(t *testing.T) {
	c, d, src := Revision(buildinfo.Info{Revision: "abc", Dirty: true, RevisionSource: buildinfo.SourceBuildInfo})
	if c != "abc" || !d || src != buildinfo.SourceBuildInfo {
		t.Fatalf("stamped: got %q %v %q", c, d, src)
	}
	c, _, src = Revision(buildinfo.Info{Revision: "unknown", RevisionSource: "not in build info"})
	if c == "" || src == buildinfo.SourceBuildInfo || !strings.Contains(src, "not in build info") {
		t.Fatalf("unstamped: got %q %q", c, src)
	}
	if c != "unknown" && !strings.HasPrefix(src, "git rev-parse HEAD in ") {
		t.Fatalf("unstamped: commit %q from %q", c, src)
	}
}
