package baseline

import (
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/nezha-harness/nezha/systems"
)

// The lsm-raft crash tests run the test binary again as a child
// (TestLSMRaftCrashChild) that kills itself (SIGKILL) at a crash point of
// span handling; the parent reopens the follower's directory. The child:
// the follower stored 1..20 (span 1..20 ingested), holds 21..50, and is
// sent span 21..40 by a leader in the same process.

const (
	lsmCrashPointEnv = "LSMRAFT_CRASH_POINT"
	lsmCrashDirEnv   = "LSMRAFT_CRASH_DIR"
	lsmCrashEntries  = 50
)

func lsmCrashEntryList() []systems.AppliedEntry {
	return randomEntries(rand.New(rand.NewPCG(7, 81)), 0, lsmCrashEntries, 12, 2<<10)
}

// TestLSMRaftCrashChild is the child process; it does nothing in a normal
// run.
func TestLSMRaftCrashChild(t *testing.T) {
	point, dir := os.Getenv(lsmCrashPointEnv), os.Getenv(lsmCrashDirEnv)
	if point == "" || dir == "" {
		t.Skip("only runs as the child of TestLSMRaftCrashPoints")
	}
	ents := lsmCrashEntryList()
	leader := openLSM(t, lsmConfig(), filepath.Join(dir, "leader"), true)
	follower := openLSM(t, lsmConfig(), filepath.Join(dir, "follower"), false)
	mustApply(t, leader.Store, ents[:20]...)
	mustApply(t, follower.Store, ents[:20]...)
	cutSpan(t, leader)
	if _, v, _ := ship(t, leader, follower, 1); v != systems.SpanIngested {
		t.Fatalf("span 1..20: %v", v)
	}
	mustApply(t, leader.Store, ents[20:40]...)
	cutSpan(t, leader)
	mustApply(t, follower.Store, ents[20:]...)
	// As -lsmraft.crashPoint sets it (the sender's side for span-send).
	leader.lr.crashAt, follower.lr.crashAt = point, point
	ship(t, leader, follower, 21)
	t.Fatalf("span 21..40 was shipped without reaching crash point %s", point)
}

// Kill a follower at each point of taking a span, reopen it, and check
// that its AppliedIndex is exactly what RocksDB reflects (the span's data
// and index moved together, or neither did), that nothing of a transfer
// is left, and that replaying the entries above it (as the node does)
// gives the full state.
//
// span-ingest (a kill during the ingestion, before RocksDB recorded it)
// guards the rule that the index travels inside the span file: an index
// written apart from the data would be ahead of it here. span-after-ingest
// (between the ingestion and the index update) guards the rule that a
// restart reads the index from the ingested data, so that it resumes after
// the span. span-transfer and span-send (a transfer cut by a crash on
// either side) guard the rule that a span counts only once ingested, and
// that an interrupted transfer leaves nothing behind.
func TestLSMRaftCrashPoints(t *testing.T) {
	ents := lsmCrashEntryList()
	for _, point := range LSMRaftCrashPoints() {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestLSMRaftCrashChild$", "-test.v")
			cmd.Env = append(os.Environ(), lsmCrashPointEnv+"="+point, lsmCrashDirEnv+"="+dir)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("crash child: %v, want killed at %s; output:\n%s", err, point, out)
			}
			s := openLSM(t, lsmConfig(), filepath.Join(dir, "follower"), false)
			defer s.Close()
			stored := uint64(20)
			if point == CrashSpanAfterIngest {
				stored = 40
			}
			if got := s.AppliedIndex(); got != stored {
				t.Fatalf("restart resumes at %d, want %d", got, stored)
			}
			ref := model{}
			ref.apply(ents[:stored])
			if got := rocksOnly(t, s.Store); !sameModel(got, ref) {
				t.Fatalf("RocksDB does not hold exactly the entries up to its index %d", stored)
			}
			if files, _ := filepath.Glob(filepath.Join(dir, "follower", lsmRaftDir, inDir, "*")); len(files) != 0 {
				t.Fatalf("an interrupted transfer left %v", files)
			}
			mustApply(t, s.Store, ents[stored:]...)
			ref.apply(ents[stored:])
			checkState(t, s.Store, ref)
		})
	}
}
