package nezha

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/raftkv/raftlog"
	"github.com/nezha-harness/nezha/systems"
)

// logControl drives a raftlog.Log the way the node does, for GC tests
// without a cluster. Its compaction bound is the store's applied index.
type logControl struct {
	l *raftlog.Log
	s *Store
	// mu serializes log writers (appendCommands vs Roll/Compact), as the
	// node's Ready loop does.
	mu *sync.Mutex
}

func (c *logControl) Segments() []systems.SegmentInfo { return c.l.Segments() }
func (c *logControl) Roll(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.l.Roll()
}
func (c *logControl) Compact(_ context.Context, index uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.l.Compact(index, raftpb.ConfState{Voters: []uint64{1}})
}
func (c *logControl) CompactedIndex() uint64        { return c.l.CompactedIndex() }
func (c *logControl) CompactBound() uint64          { return c.s.AppliedIndex() }
func (c *logControl) RemoveSegment(id uint64) error { return c.l.RemoveSegment(id) }

// gcFixture is a store with GC (not started: tests run rounds by hand).
type gcFixture struct {
	t   *testing.T
	dir string
	l   *raftlog.Log
	s   *Store
	ctl *logControl
	mu  sync.Mutex // log writers
	m   model
	rng *rand.Rand
	// clock of the GC triggers: it stands still unless a test moves it.
	clock *manualClock
}

// manualClock is a clock that tests move by hand.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newGCFixture(t *testing.T, kind, strategy string, seed int64) *gcFixture {
	t.Helper()
	t.Logf("index %s, strategy %s, seed %d", kind, strategy, seed)
	f := &gcFixture{t: t, dir: t.TempDir(), m: model{}, rng: rand.New(rand.NewSource(seed)),
		clock: &manualClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	f.l = openLogSegments(t, f.dir, 4096)
	f.open(kind, strategy)
	return f
}

func (f *gcFixture) open(kind, strategy string) {
	f.t.Helper()
	c := newConfig(Name)
	c.Index, c.GC = kind, strategy
	c.GCGarbageRatio = 0.3
	f.ctl = &logControl{l: f.l, mu: &f.mu}
	s, err := c.OpenStore(systems.Env{Dir: f.dir, Log: f.l, Control: f.ctl, Logger: quietLogger()})
	if err != nil {
		f.t.Fatalf("OpenStore: %v", err)
	}
	s.gc.stop() // rounds run by hand
	s.gc.now = f.clock.now
	f.ctl.s = s
	f.s = s
	f.t.Cleanup(func() { s.Close() })
}

// write appends and applies n random puts/deletes over keys k000..k(keys-1).
func (f *gcFixture) write(n, keys int) {
	f.t.Helper()
	var cmds []systems.Command
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("k%03d", f.rng.Intn(keys))
		if f.rng.Intn(6) == 0 {
			cmds = append(cmds, del(k))
		} else {
			cmds = append(cmds, put(k, randValue(f.rng, 50+f.rng.Intn(400))))
		}
	}
	f.mu.Lock()
	ents := appendCommands(f.t, f.l, cmds...)
	f.mu.Unlock()
	mustApply(f.t, f.s, ents)
	f.m.apply(cmds...)
}

// putKeys appends and applies puts of k000..k(n-1) with random values of
// valueBytes.
func (f *gcFixture) putKeys(n, valueBytes int) {
	f.t.Helper()
	var cmds []systems.Command
	for i := 0; i < n; i++ {
		cmds = append(cmds, put(fmt.Sprintf("k%03d", i), randValue(f.rng, valueBytes)))
	}
	f.mu.Lock()
	ents := appendCommands(f.t, f.l, cmds...)
	f.mu.Unlock()
	mustApply(f.t, f.s, ents)
	f.m.apply(cmds...)
}

// round runs a round that freezes and sorts the log (-gcContinuous's).
func (f *gcFixture) round() systems.GCRound {
	f.t.Helper()
	return f.roundOn(TriggerContinuous)
}

func (f *gcFixture) roundOn(trigger string) systems.GCRound {
	f.t.Helper()
	r, err := f.s.gc.round(context.Background(), trigger)
	if err != nil {
		f.t.Fatalf("GC round (%s): %v", trigger, err)
	}
	return r.GCRound
}

func (f *gcFixture) check() {
	f.t.Helper()
	checkModel(f.t, f.s, f.m)
	want, _ := f.m.scan("", "", 0, 0)
	got, more, err := f.s.Scan(nil, nil, 0, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	checkKVs(f.t, "full scan", got, more, want, false)
	if n, ok := f.s.IndexEntries(); !ok || n != int64(len(want)) {
		f.t.Fatalf("IndexEntries = %d, %v; the index holds %d keys", n, ok, len(want))
	}
}

func TestGCRoundsKeepStateAndReclaim(t *testing.T) {
	for _, kind := range IndexKinds() {
		for _, strategy := range Strategies() {
			t.Run(kind+"/"+strategy, func(t *testing.T) {
				f := newGCFixture(t, kind, strategy, 11)
				var reclaimed int64
				for round := 0; round < 6; round++ {
					f.write(80, 40)
					sumBefore, _, err := f.s.StateHash()
					if err != nil {
						t.Fatal(err)
					}
					r := f.round()
					reclaimed += r.ReclaimedBytes
					sumAfter, _, err := f.s.StateHash()
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(sumBefore, sumAfter) {
						t.Fatalf("round %d changed the state hash", round)
					}
					f.check()
					if r.CompactedIndex == 0 || r.CompactedIndex != f.l.CompactedIndex() {
						t.Fatalf("round %d: compacted index %d, log says %d", round, r.CompactedIndex, f.l.CompactedIndex())
					}
				}
				if reclaimed == 0 {
					t.Fatal("six GC rounds reclaimed nothing")
				}
				// The log kept only what GC could not take; the rest is in runs.
				if n := len(f.s.runs.ids()); n == 0 {
					t.Fatal("no sorted run after GC")
				}
				if strategy == StrategyMerge && len(f.s.runs.ids()) != 1 {
					t.Fatalf("merge left %d runs, want 1", len(f.s.runs.ids()))
				}
				// Restart: state and runs survive; the index covers the compaction point.
				f.s.Close()
				f.open(kind, strategy)
				f.check()
				f.write(40, 40)
				f.round()
				f.check()
			})
		}
	}
}

// A write or delete that lands while a round copies wins over the copy.
func TestGCNewerWriteWins(t *testing.T) {
	for _, kind := range IndexKinds() {
		t.Run(kind, func(t *testing.T) {
			f := newGCFixture(t, kind, StrategyMerge, 12)
			f.write(200, 30)
			// Freeze and copy, then write over and delete copied keys before
			// the switch: run the round with writes injected after the copy.
			ctx := context.Background()
			var inject sync.Once
			f.s.gc.afterCopy = func() {
				inject.Do(func() {
					var cmds []systems.Command
					for i := 0; i < 30; i += 2 {
						cmds = append(cmds, put(fmt.Sprintf("k%03d", i), []byte(fmt.Sprintf("newer-%d", i))))
					}
					for i := 1; i < 30; i += 4 {
						cmds = append(cmds, del(fmt.Sprintf("k%03d", i)))
					}
					f.mu.Lock()
					ents := appendCommands(t, f.l, cmds...)
					f.mu.Unlock()
					mustApply(t, f.s, ents)
					f.m.apply(cmds...)
				})
			}
			if _, err := f.s.gc.round(ctx, TriggerContinuous); err != nil {
				t.Fatal(err)
			}
			f.check()
			for i := 1; i < 30; i += 4 {
				if _, found, _ := f.s.Get([]byte(fmt.Sprintf("k%03d", i))); found {
					t.Fatalf("k%03d deleted during GC was resurrected", i)
				}
			}
			f.s.gc.afterCopy = nil
			f.round()
			f.check()
		})
	}
}

// Reads and writes run while rounds run; every read sees the model's value
// of the moment (keys are written by one writer; readers check values
// are ones the key has had).
func TestGCConcurrentReadsAndWrites(t *testing.T) {
	f := newGCFixture(t, IndexLevelDB, StrategyMerge, 13)
	f.write(100, 20)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errc := make(chan error, 4)
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(r)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				k := []byte(fmt.Sprintf("k%03d", rng.Intn(20)))
				if _, _, err := f.s.Get(k); err != nil {
					errc <- fmt.Errorf("get %s: %w", k, err)
					return
				}
				if _, _, err := f.s.Scan(nil, nil, 0, 0); err != nil {
					errc <- fmt.Errorf("scan: %w", err)
					return
				}
			}
		}(r)
	}
	for i := 0; i < 20; i++ {
		f.write(30, 20)
		f.round()
	}
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	f.check()
}

// A full disk while writing the run aborts the round; nothing changes and
// the store keeps serving, and a later round succeeds.
func TestGCDiskFullAbortsCleanly(t *testing.T) {
	f := newGCFixture(t, IndexLevelDB, StrategyMerge, 14)
	f.write(200, 50)
	f.s.gc.create = func(path string) (writableFile, error) {
		fl, err := osCreate(path)
		if err != nil {
			return nil, err
		}
		return &fullDisk{f: fl, left: 2000}, nil
	}
	segsBefore := len(f.l.Segments())
	_, err := f.s.gc.round(context.Background(), TriggerContinuous)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("round on a full disk: %v, want ENOSPC", err)
	}
	files, _ := listRunFiles(vfs.OS(), f.s.sortedDir)
	if len(files) != 0 || len(f.s.runs.ids()) != 0 {
		t.Fatalf("aborted round left runs %v (open %v)", files, f.s.runs.ids())
	}
	if n := len(f.l.Segments()); n < segsBefore {
		t.Fatalf("aborted round removed segments: %d -> %d", segsBefore, n)
	}
	f.check()
	f.write(20, 50)
	f.s.gc.create = osCreate
	f.round()
	f.check()
}

type fullDisk struct {
	f    writableFile
	left int
}

func (d *fullDisk) Write(p []byte) (int, error) {
	if len(p) > d.left {
		n, _ := d.f.Write(p[:d.left])
		d.left = 0
		return n, &os.PathError{Op: "write", Path: "run", Err: syscall.ENOSPC}
	}
	d.left -= len(p)
	return d.f.Write(p)
}
func (d *fullDisk) Sync() error  { return d.f.Sync() }
func (d *fullDisk) Close() error { return d.f.Close() }

func TestGCStrategiesSelect(t *testing.T) {
	frozen := []fileStat{{id: 1, size: 100 << 10, live: 90 << 10, dead: 10 << 10}, {id: 2, size: 100 << 10, live: 10 << 10, dead: 90 << 10},
		{id: 3, size: 100, live: 0},
		{id: 4, size: 100, live: 10, dead: 90}} // mostly garbage, but too little to be worth a rewrite
	runs := []fileStat{{id: runFlag | 1, size: 1000 << 10, live: 900 << 10, dead: 100 << 10}, {id: runFlag | 2, size: 100, live: 0}}
	for _, tc := range []struct {
		strategy string
		want     []uint64
	}{
		{StrategySortOnce, []uint64{1, 2, 3, 4, runFlag | 2}},
		{StrategyMerge, []uint64{1, 2, 3, 4, runFlag | 1, runFlag | 2}},
		{StrategyGreedy, []uint64{2, 3, runFlag | 2}},
		// Tiered: by discard statistics (dead), not size - live: segment 1
		// is 10% dead, 2 is 90% dead, 4's garbage is too little.
		{StrategyTiered, []uint64{2, 3, runFlag | 2}},
	} {
		st, err := NewStrategy(tc.strategy, 4)
		if err != nil {
			t.Fatal(err)
		}
		got := st.Select(frozen, runs, 0.5)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Fatalf("%s selected %v, want %v", tc.strategy, got, tc.want)
		}
	}
	if got := (merge{}).Select(nil, runs, 0.5); len(got) != 0 {
		t.Fatalf("merge without frozen segments selected %v", got)
	}
	if _, err := NewStrategy("lru", 4); err == nil || !strings.Contains(err.Error(), "sort-once") {
		t.Fatalf("unknown strategy: %v", err)
	}
}

// Snapshot out of one store, restore into another: same state hash (at the
// restored index), and the restored store keeps working, with GC.
func TestSnapshotRestore(t *testing.T) {
	for _, kind := range IndexKinds() {
		t.Run(kind, func(t *testing.T) {
			src := newGCFixture(t, kind, StrategyMerge, 15)
			src.write(300, 60)
			src.round()
			src.write(50, 60) // some values in runs, some in the log
			var buf bytes.Buffer
			w := systems.NewSnapshotWriter(&buf)
			if err := src.s.WriteSnapshot(w); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			dst := newGCFixture(t, kind, StrategyMerge, 16)
			dst.write(100, 200) // old state, to be replaced
			index := src.s.AppliedIndex()
			if err := dst.s.PrepareRestore(index, systems.NewSnapshotReader(bytes.NewReader(buf.Bytes()))); err != nil {
				t.Fatal(err)
			}
			if err := dst.l.ApplySnapshot(raftpb.SnapshotMetadata{Index: index, Term: 1, ConfState: raftpb.ConfState{Voters: []uint64{1}}}); err != nil {
				t.Fatal(err)
			}
			if err := dst.s.CommitRestore(index); err != nil {
				t.Fatal(err)
			}
			dst.m = model{}
			for k, v := range src.m {
				dst.m[k] = v
			}
			dst.check()
			a, ai, _ := src.s.StateHash()
			b, bi, _ := dst.s.StateHash()
			if !bytes.Equal(a, b) || ai != bi {
				t.Fatalf("state hash after restore: %x@%d, source %x@%d", b, bi, a, ai)
			}
			// The old log segments are garbage now; GC removes them.
			dst.write(20, 60)
			dst.round()
			dst.check()
			dst.s.Close()
			dst.open(kind, StrategyMerge)
			dst.check()
		})
	}
}

// A restore interrupted after the log recorded the snapshot finishes at
// open; one interrupted before is discarded. A crash inside finishRestore,
// after it wiped the index and while LevelDB was creating the new one
// (files there, no CURRENT yet), must not keep the node from opening: the
// restore rebuilds the index anyway.
func TestRestoreRecoveryAtOpen(t *testing.T) {
	for _, c := range []struct{ recorded, midIndex bool }{{true, false}, {false, false}, {true, true}} {
		recorded := c.recorded
		t.Run(fmt.Sprintf("recorded=%v/midIndex=%v", recorded, c.midIndex), func(t *testing.T) {
			src := newGCFixture(t, IndexLevelDB, StrategyMerge, 17)
			src.write(100, 30)
			var buf bytes.Buffer
			w := systems.NewSnapshotWriter(&buf)
			if err := src.s.WriteSnapshot(w); err != nil {
				t.Fatal(err)
			}
			w.Close()
			dst := newGCFixture(t, IndexLevelDB, StrategyMerge, 18)
			dst.write(50, 30)
			old := dst.m
			index := src.s.AppliedIndex() + 1000
			if err := dst.s.PrepareRestore(index, systems.NewSnapshotReader(bytes.NewReader(buf.Bytes()))); err != nil {
				t.Fatal(err)
			}
			if recorded {
				if err := dst.l.ApplySnapshot(raftpb.SnapshotMetadata{Index: index, Term: 1, ConfState: raftpb.ConfState{Voters: []uint64{1}}}); err != nil {
					t.Fatal(err)
				}
			}
			// Crash: close without CommitRestore, reopen.
			dst.s.Close()
			if c.midIndex {
				// finishRestore's wipe, then a fresh LevelDB cut short
				// before it wrote CURRENT.
				idx := filepath.Join(dst.s.dir, IndexDir)
				if err := os.RemoveAll(idx); err != nil {
					t.Fatal(err)
				}
				x, err := OpenLevelDBIndex(idx, 0)
				if err != nil {
					t.Fatal(err)
				}
				x.Close()
				if err := os.Remove(filepath.Join(idx, "CURRENT")); err != nil {
					t.Fatal(err)
				}
			}
			dst.open(IndexLevelDB, StrategyMerge)
			if recorded {
				dst.m = src.m
				if dst.s.AppliedIndex() != index {
					t.Fatalf("applied index %d after finishing the restore, want %d", dst.s.AppliedIndex(), index)
				}
			} else {
				dst.m = old
				if files, _ := listRunFiles(vfs.OS(), dst.s.sortedDir); len(files) != 0 {
					t.Fatalf("discarded restore left runs %v", files)
				}
			}
			dst.check()
		})
	}
}

// A round is due on the garbage ratio only for garbage the strategy would
// reclaim: sort-once never rewrites a run that still holds a live value, so
// superseded values in its runs must not make rounds due (they ran back to
// back, each freezing a sliver of the log).
func TestGCDueCountsReclaimableGarbageOnly(t *testing.T) {
	f := newGCFixture(t, IndexLevelDB, StrategySortOnce, 1)
	f.s.gc.cfg.GCThresholdBytes = 1 << 40 // the garbage rule only
	f.s.gc.cfg.GCMinBytes = 0
	putKeys := func(n int) { f.putKeys(n, 400) }
	putKeys(100)
	f.round() // run 1: k000..k099
	putKeys(80)
	f.round() // run 2: k000..k079; run 1 is 80% garbage but holds k080..k099
	f.check()
	due := func(strategy string) bool {
		st, err := NewStrategy(strategy, 4)
		if err != nil {
			t.Fatal(err)
		}
		f.s.gc.strategy = st
		return f.s.gc.due() != ""
	}
	if due(StrategySortOnce) {
		t.Fatalf("sort-once: a round is due for garbage it cannot reclaim")
	}
	if !due(StrategyGreedy) {
		t.Fatalf("greedy: no round due although run 1 is 80%% garbage")
	}
	if due(StrategyMerge) {
		t.Fatalf("merge: a round is due without a segment to freeze")
	}
	putKeys(1)
	if !due(StrategyMerge) {
		t.Fatalf("merge: no round due although it would rewrite run 1 (80%% garbage)")
	}
	if due(StrategySortOnce) {
		t.Fatalf("sort-once: a round is due for one live value")
	}
}

// TestTakeSnapshot: a snapshot asked for runs as a round of the GC loop:
// it compacts the Raft log to the applied index (inside the active
// segment too), removes the sealed segments whose values were all
// overwritten, and the state survives a restart (the index was made
// durable before the compaction: a memory index reopens from its
// checkpoint). nezha-nogc refuses.
func TestTakeSnapshot(t *testing.T) {
	for _, kind := range IndexKinds() {
		t.Run(kind, func(t *testing.T) {
			f := newGCFixture(t, kind, StrategyTiered, 21)
			f.write(60, 20)
			f.putKeys(20, 100) // every key overwritten
			if f.l.CompactedIndex() != 0 {
				t.Fatalf("compacted to %d before the snapshot", f.l.CompactedIndex())
			}
			f.s.gc.start() // the loop serves the request
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			applied := f.s.AppliedIndex()
			idx, err := f.s.TakeSnapshot(ctx)
			if err != nil || idx != applied || f.l.CompactedIndex() != applied {
				t.Fatalf("TakeSnapshot = %d, %v; want the applied index %d (log compacted to %d)", idx, err, applied, f.l.CompactedIndex())
			}
			if first, _ := f.l.FirstIndex(); first != applied+1 {
				t.Fatalf("first index %d after the snapshot, want %d", first, applied+1)
			}
			rounds := f.s.GCRounds()
			if len(rounds) == 0 || rounds[len(rounds)-1].Trigger != TriggerSnapshot || rounds[len(rounds)-1].SegmentsRemoved == 0 ||
				rounds[len(rounds)-1].KeysMoved != 0 {
				t.Fatalf("rounds %+v: want a last snapshot round that removed the overwritten segments and moved nothing", rounds)
			}
			f.check()
			if idx, err := f.s.TakeSnapshot(ctx); err != nil || idx != applied {
				t.Fatalf("second TakeSnapshot = %d, %v; want %d again", idx, err, applied)
			}
			f.s.Close()
			f.open(kind, StrategyTiered)
			f.check()
		})
	}
	t.Run("nezha-nogc", func(t *testing.T) {
		dir := t.TempDir()
		s := openStore(t, IndexLevelDB, dir, openLogSegments(t, dir, 4096))
		if _, err := s.TakeSnapshot(context.Background()); !errors.Is(err, systems.ErrSnapshotUnsupported) {
			t.Fatalf("nezha-nogc TakeSnapshot: %v, want ErrSnapshotUnsupported", err)
		}
	})
}
