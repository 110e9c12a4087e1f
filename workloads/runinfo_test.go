package workloads

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nezha-harness/nezha/internal/buildinfo"
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

// TestSetDataDir records the device of a directory and, for a block
// device, its readahead as /sys gives it.
func TestSetDataDir(t *testing.T) {
	var r RunInfo
	r.SetDataDir(".")
	if r.DataDevice == "" {
		t.Fatal("SetDataDir(.) recorded no device")
	}
	var st unix.Stat_t
	if err := unix.Stat(".", &st); err != nil {
		t.Fatal(err)
	}
	q := fmt.Sprintf("/sys/dev/block/%d:%d/queue/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	b, err := os.ReadFile(q)
	if err != nil {
		t.Skipf("no %s here (not a whole block device)", q)
	}
	if want, _ := strconv.Atoi(strings.TrimSpace(string(b))); r.ReadAheadKB != want {
		t.Errorf("ReadAheadKB = %d, %s says %d", r.ReadAheadKB, q, want)
	}
}
