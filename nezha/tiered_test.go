package nezha

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/systems"
)

// putRange puts keys k<from>..k<to-1> with size-byte values.
func (f *gcFixture) putRange(from, to, size int) {
	f.t.Helper()
	var cmds []systems.Command
	for i := from; i < to; i++ {
		cmds = append(cmds, put(fmt.Sprintf("k%05d", i), randValue(f.rng, size)))
	}
	f.apply(cmds)
}

func (f *gcFixture) apply(cmds []systems.Command) {
	f.t.Helper()
	f.mu.Lock()
	ents := appendCommands(f.t, f.l, cmds...)
	f.mu.Unlock()
	mustApply(f.t, f.s, ents)
	f.m.apply(cmds...)
}

// runDue runs the rounds that are due until none is, and returns them.
func (f *gcFixture) runDue() []systems.GCRound {
	f.t.Helper()
	var out []systems.GCRound
	for i := 0; ; i++ {
		tr := f.s.gc.due()
		if tr == "" {
			return out
		}
		if i == 20 {
			f.t.Fatalf("rounds still due after 20: %v", out)
		}
		out = append(out, f.roundOn(tr))
	}
}

func tieredFixture(t *testing.T, kind string, seed int64) *gcFixture {
	f := newGCFixture(t, kind, StrategyTiered, seed)
	f.s.gc.cfg.GCGarbageRatio = 0.5
	return f
}

// Pure inserts: while writes flow, no round copies a byte; once the log
// holds the threshold above its compaction point, a checkpoint round makes
// the index durable and compacts the log (a memory-index node then
// restarts from its checkpoint, not from the whole log). merge, the old
// default, rewrites the inserts.
func TestGCPureInsertsCopyNothingWhileWriting(t *testing.T) {
	for _, strategy := range []string{StrategyTiered, StrategyMerge} {
		t.Run(strategy, func(t *testing.T) {
			f := newGCFixture(t, IndexMemory, strategy, 21)
			f.s.gc.cfg.GCThresholdBytes = 64 << 10
			var moved int64
			checkpoints := 0
			for b := 0; b < 20; b++ {
				f.putRange(b*20, b*20+20, 1000)
				for _, r := range f.runDue() {
					moved += r.KeysMoved
					if r.Trigger == TriggerCheckpoint {
						checkpoints++
					}
				}
			}
			if strategy == StrategyMerge {
				if moved == 0 {
					t.Fatal("merge copied nothing under inserts: the test cannot tell the strategies apart")
				}
				return
			}
			if moved != 0 {
				t.Fatalf("tiered copied %d keys under pure inserts", moved)
			}
			if checkpoints == 0 || f.l.CompactedIndex() == 0 {
				t.Fatalf("no checkpoint round compacted the log (%d rounds, compacted %d)", checkpoints, f.l.CompactedIndex())
			}
			if _, err := os.Stat(filepath.Join(f.dir, checkpointName)); err != nil {
				t.Fatalf("no memory-index checkpoint: %v", err)
			}
			f.s.Close()
			f.open(IndexMemory, strategy)
			f.check()
		})
	}
}

// A greedy round that selects no file still makes the index durable and
// compacts the log (it used to return first).
func TestGCGreedyRoundWithoutInputCompacts(t *testing.T) {
	f := newGCFixture(t, IndexMemory, StrategyGreedy, 22)
	f.putRange(0, 100, 500)
	r := f.roundOn(TriggerSize)
	if r.KeysMoved != 0 || r.Trigger != TriggerCheckpoint {
		t.Fatalf("greedy round on inserts: moved %d keys, trigger %q", r.KeysMoved, r.Trigger)
	}
	if r.CompactedIndex == 0 || f.l.CompactedIndex() == 0 {
		t.Fatalf("greedy round without input did not compact the log (round %d, log %d)", r.CompactedIndex, f.l.CompactedIndex())
	}
	if _, err := os.Stat(filepath.Join(f.dir, checkpointName)); err != nil {
		t.Fatalf("no memory-index checkpoint: %v", err)
	}
	f.s.Close()
	f.open(IndexMemory, StrategyGreedy)
	f.check()
}

// A store that holds no user data has nothing due, even with -gcMinBytes
// 0, a small threshold and a long quiet period, before and after a
// restart.
func TestGCNoRoundOnEmptyStore(t *testing.T) {
	for _, strategy := range Strategies() {
		t.Run(strategy, func(t *testing.T) {
			f := newGCFixture(t, IndexLevelDB, strategy, 23)
			for restart := 0; restart < 2; restart++ {
				c := f.s.gc.cfg
				c.GCMinBytes, c.GCThresholdBytes = 0, 1<<20
				f.mu.Lock()
				ents := appendCommands(t, f.l, systems.Command{Op: systems.OpNone}, systems.Command{Op: systems.OpNone})
				f.mu.Unlock()
				mustApply(t, f.s, ents)
				f.clock.advance(time.Hour)
				if tr := f.s.gc.due(); tr != "" {
					t.Fatalf("restart %d: round %q due on an empty store", restart, tr)
				}
				f.s.Close()
				f.open(IndexLevelDB, strategy)
			}
		})
	}
}

// Deleted space comes back with the default knobs on a store far smaller
// than the old 64 MiB -gcMinBytes gate.
func TestGCMassDeleteReclaimedWithDefaults(t *testing.T) {
	f := newGCFixture(t, IndexLevelDB, StrategyTiered, 24)
	*f.s.gc.cfg = *newConfig(Name) // the defaults
	f.putRange(0, 300, 8<<10)      // 2.4 MB
	f.clock.advance(time.Minute)
	f.runDue() // the idle round sorts the inserts
	if n := len(f.s.runs.ids()); n != 1 {
		t.Fatalf("%d runs after the idle round, want 1", n)
	}
	var cmds []systems.Command
	for i := 0; i < 280; i++ {
		cmds = append(cmds, del(fmt.Sprintf("k%05d", i)))
	}
	f.apply(cmds)
	var reclaimed int64
	for _, r := range f.runDue() { // garbage: 93% of the store
		reclaimed += r.ReclaimedBytes
	}
	if reclaimed < 2<<20 {
		t.Fatalf("reclaimed %d bytes after deleting 2.2 MB", reclaimed)
	}
	f.check()
}

// The idle round: once no write was applied for -gcIdleAfter, one round
// sorts the rest of the log (and merges the runs into one when worth it);
// then nothing is due until writes resume and stop again.
func TestGCIdleRoundSortsTheLog(t *testing.T) {
	f := tieredFixture(t, IndexLevelDB, 25)
	f.s.gc.cfg.GCIdleAfter = 2 * time.Second
	f.putRange(0, 200, 600)
	if tr := f.s.gc.due(); tr != "" {
		t.Fatalf("round %q due while writing inserts", tr)
	}
	f.clock.advance(time.Second)
	if tr := f.s.gc.due(); tr != "" {
		t.Fatalf("round %q due before -gcIdleAfter", tr)
	}
	f.clock.advance(time.Second)
	if tr := f.s.gc.due(); tr != TriggerIdle {
		t.Fatalf("due %q after -gcIdleAfter, want idle", tr)
	}
	r := f.roundOn(TriggerIdle)
	if r.KeysMoved != 200 || len(f.s.runs.ids()) != 1 {
		t.Fatalf("idle round moved %d keys into %d runs, want 200 into 1", r.KeysMoved, len(f.s.runs.ids()))
	}
	f.clock.advance(time.Minute)
	if tr := f.s.gc.due(); tr != "" {
		t.Fatalf("round %q due again in the same quiet period", tr)
	}
	// Writes resume (overwrites of a quarter): the next idle round merges
	// the log and the run into one run.
	f.putRange(0, 50, 600)
	f.clock.advance(3 * time.Second)
	if tr := f.s.gc.due(); tr != TriggerIdle {
		t.Fatalf("due %q after a second quiet period, want idle", tr)
	}
	f.roundOn(TriggerIdle)
	if n := len(f.s.runs.ids()); n != 1 {
		t.Fatalf("%d runs after the second idle round, want 1", n)
	}
	f.check()
	var fromLog int64
	for _, l := range scanLocs(t, f.s) {
		if !isRun(l) {
			fromLog += int64(l.Length)
		}
	}
	if fromLog != 0 {
		t.Fatalf("%d bytes still in the log after the idle round", fromLog)
	}
}

func scanLocs(t *testing.T, s *Store) []systems.Location {
	t.Helper()
	view, err := s.index.View()
	if err != nil {
		t.Fatal(err)
	}
	defer view.Release()
	var locs []systems.Location
	if err := view.Iterate(nil, nil, func(_ []byte, l systems.Location) (bool, error) {
		locs = append(locs, l)
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	return locs
}

// Tiers: a tier that holds -gcFanout runs is merged into one run (when
// the node is idle or the merge reclaims enough), the tier is recorded in
// the manifest, and GC's writes per value stay near 1 + tiers climbed.
func TestGCTierMerge(t *testing.T) {
	f := tieredFixture(t, IndexLevelDB, 26)
	c := f.s.gc.cfg
	c.GCFanout, c.GCIdleAfter, c.GCScanLogBytes = 2, time.Hour, 1
	f.s.gc.strategy = tiered{fanout: 2}
	var written, user int64
	for b := 0; b < 2; b++ {
		f.putRange(b*100, b*100+100, 800)
		user += 100 * 800
		// Scans over the log make a scan round sort it into a run.
		if _, _, err := f.s.Scan([]byte(fmt.Sprintf("k%05d", b*100)), nil, 0, 0); err != nil {
			t.Fatal(err)
		}
		if tr := f.s.gc.due(); tr != TriggerScan {
			t.Fatalf("batch %d: due %q after scans of the log, want scan", b, tr)
		}
		written += f.roundOn(TriggerScan).BytesWritten
	}
	if n := len(f.s.runs.ids()); n != 2 {
		t.Fatalf("%d runs, want 2", n)
	}
	if tr := f.s.gc.due(); tr != "" {
		t.Fatalf("round %q due: a tier merge that reclaims nothing while writes flow", tr)
	}
	f.clock.advance(2 * time.Hour)
	if tr := f.s.gc.due(); tr != TriggerTier {
		t.Fatalf("due %q with a full tier on an idle node, want tier", tr)
	}
	r := f.roundOn(TriggerTier)
	written += r.BytesWritten
	if r.RunsRemoved != 2 || len(f.s.runs.ids()) != 1 {
		t.Fatalf("tier merge removed %d runs, %d left", r.RunsRemoved, len(f.s.runs.ids()))
	}
	if wa := float64(written) / float64(user); wa > 2.3 {
		t.Fatalf("GC wrote %.2f x the user bytes for one sort and one merge", wa)
	}
	m, err := readManifest(vfs.OS(), f.s.sortedDir)
	if err != nil {
		t.Fatal(err)
	}
	id := f.s.runs.ids()[0]
	if tier, ok := m.Tiers[id]; m.Version != manifestVersion || !ok || tier != f.s.runs.get(id).tier {
		t.Fatalf("manifest %+v does not record run %d's tier %d", m, id, f.s.runs.get(id).tier)
	}
	sh := f.s.StorageShape()
	if len(sh.Levels) == 0 || sh.SortedRunBytes == 0 || sh.LiveBytes == 0 || sh.Levels[len(sh.Levels)-1].Files != 1 {
		t.Fatalf("storage shape %+v", sh)
	}
	f.check()
}

func TestTierFor(t *testing.T) {
	for _, tc := range []struct {
		size int64
		want int
	}{{0, 0}, {4<<20 - 1, 0}, {4 << 20, 1}, {16<<20 - 1, 1}, {16 << 20, 2}, {6 << 30, 6}} {
		if got := tierFor(tc.size, 4); got != tc.want {
			t.Errorf("tierFor(%d, 4) = %d, want %d", tc.size, got, tc.want)
		}
	}
}

// A version-1 manifest (no version, no tiers) opens, its runs' tiers
// taken from their sizes; a newer version is refused with a clear error.
func TestManifestVersions(t *testing.T) {
	f := tieredFixture(t, IndexLevelDB, 27)
	f.putRange(0, 50, 300)
	f.round()
	id := f.s.runs.ids()[0]
	f.s.Close()
	mpath := filepath.Join(f.s.sortedDir, manifestName)
	old, _ := json.Marshal(map[string]any{"runs": []uint64{id}, "next_run": id + 1})
	if err := os.WriteFile(mpath, old, 0o644); err != nil {
		t.Fatal(err)
	}
	f.open(IndexLevelDB, StrategyTiered)
	f.check()
	if r := f.s.runs.get(id); r == nil || r.tier != 0 {
		t.Fatalf("run %d of a version-1 manifest: %+v", id, r)
	}
	f.s.Close()
	newer, _ := json.Marshal(map[string]any{"version": manifestVersion + 1, "runs": []uint64{id}, "next_run": id + 1})
	if err := os.WriteFile(mpath, newer, 0o644); err != nil {
		t.Fatal(err)
	}
	c := newConfig(Name)
	_, err := c.OpenStore(systems.Env{Dir: f.dir, Log: f.l, Control: f.ctl, Logger: quietLogger()})
	if err == nil || !strings.Contains(err.Error(), "newer nezha") {
		t.Fatalf("open with a newer manifest: %v", err)
	}
	if err := os.WriteFile(mpath, old, 0o644); err != nil {
		t.Fatal(err)
	}
	f.open(IndexLevelDB, StrategyTiered)
	f.check()
}

// Stagger slots: node i may start a non-urgent round only in slot i-1 of
// every nodes x -gcStagger.
func TestGCStaggerSlots(t *testing.T) {
	f := tieredFixture(t, IndexLevelDB, 28)
	c := f.s.gc
	c.cfg.GCStagger = time.Second
	c.nodes = 3
	base := time.Unix(3000, 0) // 3000 s is a multiple of the 3 s period
	for _, tc := range []struct {
		node uint64
		at   time.Duration
		want time.Duration
	}{
		{1, 0, 0}, {1, 999 * time.Millisecond, 0}, {1, time.Second, 2 * time.Second},
		{2, 0, time.Second}, {2, 1500 * time.Millisecond, 0}, {3, 2500 * time.Millisecond, 0}, {3, 3 * time.Second, 2 * time.Second},
	} {
		c.nodeID = tc.node
		c.now = func() time.Time { return base.Add(tc.at) }
		if got := c.untilSlot(); got != tc.want {
			t.Errorf("node %d at +%v: %v until its slot, want %v", tc.node, tc.at, got, tc.want)
		}
	}
	for _, tr := range []string{TriggerSize, TriggerCheckpoint, TriggerContinuous} {
		if staggered(tr) {
			t.Errorf("%s rounds wait for a slot", tr)
		}
	}
	for _, tr := range []string{TriggerGarbage, TriggerIdle, TriggerScan, TriggerTier} {
		if !staggered(tr) {
			t.Errorf("%s rounds do not wait for a slot", tr)
		}
	}
}

// The rate limiter paces a round's copy and the round reports the wait.
func TestGCRateLimitThrottles(t *testing.T) {
	f := tieredFixture(t, IndexLevelDB, 29)
	f.putRange(0, 300, 10<<10) // 3 MB: 2 MB past the 1 MiB burst
	cfg := *f.s.gc.cfg
	cfg.GCRateBytesPerSec = 64 << 20
	gc, err := newCollector(f.s, &cfg, systems.Env{})
	if err != nil {
		t.Fatal(err)
	}
	gc.live, gc.dead, gc.liveKeys = f.s.gc.live, f.s.gc.dead, f.s.gc.liveKeys
	f.s.gc = gc
	start := time.Now()
	r, err := gc.round(context.Background(), TriggerIdle)
	if err != nil {
		t.Fatal(err)
	}
	// 2 MB past the burst at 64 MiB/s: at least 29 ms of waiting.
	if r.Throttled < 20*time.Millisecond || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("round of 3 MB at 64 MiB/s: throttled %v, took %v", r.Throttled, time.Since(start))
	}
	f.check()
}

// While writes flow, tiered rewrites nothing until the garbage reaches the
// ratio, then the emptiest files first, down to 0.8 x the ratio.
func TestTieredReclaimSelect(t *testing.T) {
	tr := tiered{fanout: 4}
	seg := func(id uint64, deadPct int64) fileStat {
		return fileStat{id: id, size: 100 << 10, live: (100 - deadPct) << 10, dead: deadPct << 10}
	}
	// 40% garbage in all: below the ratio, only the dead file goes.
	low := []fileStat{seg(1, 60), seg(2, 55), seg(3, 5), {id: 4, size: 1 << 10}}
	if got := tr.reclaimSelect(low, nil, 0.5); fmt.Sprint(got) != "[4]" {
		t.Fatalf("below the ratio: selected %v, want only the dead file [4]", got)
	}
	// 62% garbage: the 95%, 90%, 80% and a 60% dead file bring it to 37%
	// (< 0.8 x 50%); after the first three it is still 44%.
	high := []fileStat{seg(1, 80), seg(2, 95), seg(3, 10), seg(4, 90), seg(5, 60), seg(6, 55), seg(7, 60), seg(8, 50)}
	if got := tr.reclaimSelect(high, nil, 0.5); fmt.Sprint(got) != "[2 4 1 5]" {
		t.Fatalf("above the ratio: selected %v, want the emptiest files [2 4 1 5]", got)
	}
}

// boundRound keeps files without live bytes, runs with the most garbage
// for up to half the bound, then the oldest log segments, then more runs;
// at least one input.
func TestBoundRound(t *testing.T) {
	byID := map[uint64]fileStat{
		3: {id: 3, size: 100, live: 100}, 1: {id: 1, size: 100, live: 100}, 2: {id: 2, size: 100, live: 0}, 5: {id: 5, size: 300, live: 300},
		runFlag | 1: {id: runFlag | 1, size: 100, live: 50, dead: 50}, runFlag | 2: {id: runFlag | 2, size: 1000, live: 900, dead: 100},
	}
	ids := []uint64{5, runFlag | 2, 3, 1, 2, runFlag | 1}
	for _, tc := range []struct {
		max  int64
		want []uint64
	}{
		{250, []uint64{2, runFlag | 1, 1, 3}},
		{200, []uint64{2, runFlag | 1, 1}},
		{10, []uint64{2, runFlag | 1}},
		{1 << 40, []uint64{2, runFlag | 1, runFlag | 2, 1, 3, 5}},
	} {
		if got := boundRound(ids, byID, tc.max); !slices.Equal(got, tc.want) {
			t.Errorf("bound %d: %v, want %v", tc.max, got, tc.want)
		}
	}
	if got := boundRound([]uint64{runFlag | 2}, byID, 10); !slices.Equal(got, []uint64{runFlag | 2}) {
		t.Errorf("a single input over the bound: %v, want it kept", got)
	}
}
