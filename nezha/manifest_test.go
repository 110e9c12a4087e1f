package nezha

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nezha-harness/nezha/systems"
)

// TestLostManifestRefusesToStart: after a GC round moved values into a
// sorted run, sorted/MANIFEST is lost (deleted, or the disk lost it). Open
// must refuse and keep the run, not delete it as "a run no manifest lists
// (an interrupted GC)" while the index still points into it: the node
// then served DataLoss for every key in the run, as a healthy voter. A run
// the index does not point into (a round that crashed before registering
// it) is still removed.
func TestLostManifestRefusesToStart(t *testing.T) {
	for _, kind := range IndexKinds() {
		t.Run(kind, func(t *testing.T) {
			f := newGCFixture(t, kind, StrategyTiered, 3)
			f.write(300, 50)
			if r := f.round(); r.KeysMoved == 0 {
				t.Fatalf("round moved no key: %+v", r)
			}
			f.check()
			if len(f.s.man.Runs) == 0 {
				t.Fatal("no run after the round")
			}
			run := filepath.Join(f.dir, SortedDir, runName(f.s.man.Runs[0]))
			// An unregistered run the index does not point into: removed.
			stray := filepath.Join(f.dir, SortedDir, runName(f.s.man.NextRun+5))
			if err := os.WriteFile(stray, []byte("partial run"), 0o644); err != nil {
				t.Fatal(err)
			}
			f.s.Close()
			c := newConfig(Name)
			c.Index, c.GC = kind, StrategyTiered
			s, err := c.OpenStore(systems.Env{Dir: f.dir, Log: f.l, Control: f.ctl, Logger: quietLogger()})
			if err != nil {
				t.Fatalf("reopen with the manifest: %v", err)
			}
			if _, err := os.Stat(stray); !os.IsNotExist(err) {
				t.Fatalf("stray run %s not removed: %v", stray, err)
			}
			s.Close()
			if err := os.Remove(filepath.Join(f.dir, SortedDir, manifestName)); err != nil {
				t.Fatal(err)
			}
			s, err = c.OpenStore(systems.Env{Dir: f.dir, Log: f.l, Control: f.ctl, Logger: quietLogger()})
			if err == nil {
				s.Close()
				_, statErr := os.Stat(run)
				t.Fatalf("Open without sorted/MANIFEST succeeded (run file: %v); the index points into the run", statErr)
			}
			if !strings.Contains(err.Error(), "does not list") {
				t.Fatalf("Open: %v", err)
			}
			if _, err := os.Stat(run); err != nil {
				t.Fatalf("the run was not kept: %v", err)
			}
		})
	}
}
