package nezha

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"syscall"
	"time"

	"github.com/nezha-harness/nezha/systems"
)

// Raft-aware GC (the paper's "Raft-Aware Garbage Collection" and
// "Three-Phase Request Processing"; DESIGN.md section 3).
//
// Storage modules. Active Storage is the Raft log segment being appended.
// A GC round first freezes it (Roll): the segments sealed at or below the
// compaction bound are the frozen log; the segments written while the round
// runs are New Storage; the key-sorted runs under sorted/ are the Final
// Compacted Storage.
//
// A round:
//
//  1. freeze: roll the active segment; bound = LogControl.CompactBound()
//     (the applied index, and on the leader the lowest match index of the
//     live followers: entries a live follower still needs are not touched);
//  2. plan: the strategy picks input files (frozen segments, runs) from
//     their live bytes;
//  3. copy: iterate the index in key order; every key whose location is in
//     an input file has its value read (CRC-checked) and appended to a new
//     run, which is then fsynced and registered in the manifest;
//  4. switch: under the apply lock, chunk by chunk, a key is pointed at its
//     new location only if the index still holds the value the round
//     copied (same Raft index, still in an input file): a write or delete
//     that arrived during the round always wins (Badger's re-validation);
//  5. make the index durable (LevelDB sync, or a memory-index checkpoint),
//     then compact the Raft log to the highest frozen index: a follower
//     that needs older entries gets a snapshot;
//  6. delete the input files, waiting for in-flight reads (the gate).
//
// Requests during a round (three-phase processing): a read follows the
// index, which always names the newest location (New Storage for writes
// made during the round, the frozen log before the switch, the run after
// it); files are deleted only under the gate, so a read never meets a
// missing file; writes wait at most for one switch chunk, never for the
// round.
//
// Crash safety: every step before the switch leaves the index untouched
// (an unregistered run is deleted at open); during the switch every key
// points at a file that exists and is durable; the log is compacted only
// after the index is durable; input files are deleted only after that, and
// a file left over by a crash has no live bytes, so the next round deletes
// it. Named crash points (Config.GCCrashPoint) let tests kill the node at
// each step.

// Strategy names (-gc).
const (
	// StrategySortOnce is the paper's first round: freeze the log and write
	// its live values in key order into a new run. Runs accumulate.
	StrategySortOnce = "sort-once"
	// StrategyMerge is the paper's later rounds: merge the frozen log with
	// the previous runs into one run, newest value wins (it is sort-once
	// when there is no run yet). A round is due once the log holds as much
	// as the runs (and at least -gcThresholdBytes).
	StrategyMerge = "merge"
	// StrategyGreedy is garbage-ratio-driven selection (WiscKey, Badger's
	// value log GC): rewrite only the frozen segments and runs whose
	// garbage ratio is at least -gcGarbageRatio.
	StrategyGreedy = "greedy"
)

// Strategies returns the accepted -gc values.
func Strategies() []string { return []string{StrategyMerge, StrategySortOnce, StrategyGreedy} }

// Crash points, the values of -gcCrashPoint (testing): the node kills
// itself (SIGKILL) when a GC round reaches the point.
const (
	CrashDuringCopy   = "gc-during-copy"
	CrashBeforeSwitch = "gc-before-switch"
	CrashDuringSwitch = "gc-during-switch"
	CrashAfterSwitch  = "gc-after-switch"
	CrashBeforeDelete = "gc-before-delete"
)

// CrashPoints returns every named GC crash point, in round order.
func CrashPoints() []string {
	return []string{CrashDuringCopy, CrashBeforeSwitch, CrashDuringSwitch, CrashAfterSwitch, CrashBeforeDelete}
}

// fileStat is what a strategy knows about one file.
type fileStat struct {
	// id is a segment id, or runFlag|run id.
	id   uint64
	size int64
	live int64
}

func (f fileStat) garbageRatio() float64 {
	if f.size <= 0 {
		return 0
	}
	return 1 - float64(f.live)/float64(f.size)
}

// Strategy chooses the input of a GC round.
type Strategy interface {
	Name() string
	// Select returns the ids of the files to rewrite, given the frozen
	// segments and the runs.
	Select(frozen, runs []fileStat, garbageRatio float64) []uint64
	// LogThreshold is how many bytes the log may hold before a round is due,
	// given -gcThresholdBytes and the bytes in sorted runs.
	LogThreshold(threshold, runBytes int64) int64
}

// NewStrategy returns the named strategy.
func NewStrategy(name string) (Strategy, error) {
	switch name {
	case StrategySortOnce:
		return sortOnce{}, nil
	case StrategyMerge:
		return merge{}, nil
	case StrategyGreedy:
		return greedy{}, nil
	}
	return nil, systems.Usagef("-gc %q: want one of %v", name, Strategies())
}

type sortOnce struct{}

func (sortOnce) Name() string                                 { return StrategySortOnce }
func (sortOnce) LogThreshold(threshold, runBytes int64) int64 { return threshold }
func (sortOnce) Select(frozen, runs []fileStat, _ float64) []uint64 {
	ids := idsOf(frozen)
	for _, r := range runs {
		if r.live == 0 {
			ids = append(ids, r.id)
		}
	}
	return ids
}

type merge struct{}

func (merge) Name() string { return StrategyMerge }

// LogThreshold of merge grows with the runs: a round rewrites every run, so
// waiting until the log holds as much as the runs keeps GC's writes within
// about twice the user's (the size-ratio rule of LSM compaction); a fixed
// threshold would make them grow with the data, quadratically under inserts.
func (merge) LogThreshold(threshold, runBytes int64) int64 { return max(threshold, runBytes) }
func (merge) Select(frozen, runs []fileStat, _ float64) []uint64 {
	if len(frozen) == 0 {
		return nil
	}
	return append(idsOf(frozen), idsOf(runs)...)
}

type greedy struct{}

func (greedy) Name() string                                 { return StrategyGreedy }
func (greedy) LogThreshold(threshold, runBytes int64) int64 { return threshold }
func (greedy) Select(frozen, runs []fileStat, ratio float64) []uint64 {
	var ids []uint64
	for _, f := range append(append([]fileStat(nil), frozen...), runs...) {
		if f.live == 0 || (f.garbageRatio() >= ratio && f.size-f.live >= greedyMinGarbageBytes) {
			ids = append(ids, f.id)
		}
	}
	return ids
}

// greedyMinGarbageBytes: greedy does not rewrite a file to reclaim less.
const greedyMinGarbageBytes = 4 << 10

func idsOf(fs []fileStat) []uint64 {
	ids := make([]uint64, len(fs))
	for i, f := range fs {
		ids[i] = f.id
	}
	return ids
}

// collector runs GC rounds for a Store, one at a time, in the background.
type collector struct {
	s        *Store
	strategy Strategy
	cfg      *Config
	create   fileCreator
	// afterCopy, if set, runs between the copy and the switch (tests).
	afterCopy func()

	// live bytes per file (segment id or runFlag|run id); guarded by
	// s.applyMu.
	live map[uint64]int64

	hist systems.GCHistory

	kick   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}

	// idleLogBytes is the log size when the last round found nothing to
	// do; no round is due again until the log grows past it. Loop-owned.
	idleLogBytes int64
}

func newCollector(s *Store, cfg *Config) (*collector, error) {
	st, err := NewStrategy(cfg.GC)
	if err != nil {
		return nil, err
	}
	return &collector{s: s, strategy: st, cfg: cfg, create: osCreate, live: map[uint64]int64{},
		kick: make(chan struct{}, 1)}, nil
}

// rebuildLive recomputes the live bytes of every file from the index.
func (c *collector) rebuildLive() error {
	live := map[uint64]int64{}
	err := c.s.iterateChunks(4096, func(_ [][]byte, locs []systems.Location) error {
		for _, l := range locs {
			live[l.Segment] += int64(l.Length)
		}
		return nil
	})
	if err != nil {
		return err
	}
	c.s.applyMu.Lock()
	c.live = live
	c.s.applyMu.Unlock()
	return nil
}

// liveAccount collects the live-byte changes of one Apply batch.
type liveAccount struct {
	c     *collector
	seen  map[string]*systems.Location // key -> location set earlier in the batch (nil: deleted)
	delta map[uint64]int64
}

func (c *collector) newAccount() *liveAccount {
	return &liveAccount{c: c, seen: map[string]*systems.Location{}, delta: map[uint64]int64{}}
}

// set records that key now has loc (nil: deleted). Caller holds applyMu.
func (a *liveAccount) set(key []byte, loc *systems.Location) error {
	old, inBatch := a.seen[string(key)]
	if !inBatch {
		l, found, err := a.c.s.index.Get(key)
		if err != nil {
			return err
		}
		if found {
			old = &l
		}
	}
	if old != nil {
		a.delta[old.Segment] -= int64(old.Length)
	}
	if loc != nil {
		a.delta[loc.Segment] += int64(loc.Length)
		l := *loc
		a.seen[string(key)] = &l
	} else {
		a.seen[string(key)] = nil
	}
	return nil
}

// commit adds the batch's changes to the totals. Caller holds applyMu.
func (a *liveAccount) commit() {
	for f, d := range a.delta {
		a.c.live[f] += d
	}
}

func (c *collector) kickNonBlocking() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// start starts the background loop; stop stops it and waits. They are
// called by Open, Close and CommitRestore, never concurrently.
func (c *collector) start() {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel, c.done = cancel, make(chan struct{})
	go c.loop(ctx, c.done)
}

func (c *collector) stop() {
	if c.cancel != nil {
		c.cancel()
		<-c.done
		c.cancel = nil
	}
}

// loop runs rounds when due, single-flight, until ctx ends.
func (c *collector) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(c.cfg.GCInterval)
	defer t.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.kick:
		}
		for ctx.Err() == nil && c.due() {
			r, err := c.round(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				r.Error = err.Error()
				c.hist.Record(r)
				failures++
				c.s.logger.Error("nezha: GC round failed; the node keeps serving", "err", err, "failures", failures)
				// Back off before the next attempt (bounded).
				select {
				case <-ctx.Done():
					return
				case <-time.After(min(time.Duration(failures)*c.cfg.GCInterval, 30*time.Second)):
				}
				break
			}
			failures = 0
			if r.SegmentsRemoved == 0 && r.RunsRemoved == 0 && r.KeysMoved == 0 {
				c.idleLogBytes = c.logBytes()
				break // nothing to do until the log grows
			}
			c.idleLogBytes = 0
			c.hist.Record(r)
			c.s.logger.Info("nezha: GC round", "strategy", r.Strategy, "duration", r.End.Sub(r.Start).Round(time.Millisecond),
				"bytes_read", r.BytesRead, "bytes_written", r.BytesWritten, "live_bytes", r.LiveBytes,
				"reclaimed_bytes", r.ReclaimedBytes, "segments_removed", r.SegmentsRemoved, "runs_removed", r.RunsRemoved,
				"keys_moved", r.KeysMoved, "compacted_index", r.CompactedIndex)
			if !c.cfg.GCContinuous {
				break
			}
		}
	}
}

func (c *collector) logBytes() int64 {
	var n int64
	for _, sg := range c.s.ctl.Segments() {
		n += sg.SizeBytes
	}
	return n
}

// due reports whether a round should run now.
func (c *collector) due() bool {
	segs := c.s.ctl.Segments()
	var logBytes int64
	for _, sg := range segs {
		logBytes += sg.SizeBytes
	}
	if c.idleLogBytes > 0 && logBytes <= c.idleLogBytes {
		return false
	}
	if c.cfg.GCContinuous {
		bound := c.s.ctl.CompactBound()
		for _, sg := range segs {
			if sg.LastIndex > 0 && sg.FirstIndex <= bound {
				return true
			}
		}
		return false
	}
	var runBytes int64
	for _, id := range c.s.runs.ids() {
		if r := c.s.runs.get(id); r != nil {
			runBytes += r.size
		}
	}
	if logBytes >= c.strategy.LogThreshold(c.cfg.GCThresholdBytes, runBytes) {
		return true
	}
	total := logBytes + runBytes
	if total < c.cfg.GCMinBytes {
		return false
	}
	return float64(c.reclaimableBytes(segs))/float64(total) >= c.cfg.GCGarbageRatio
}

// reclaimableBytes is the garbage a round would reclaim now: the dead bytes
// of the files the strategy would select among the segments a round would
// freeze and the runs. Garbage a strategy never reclaims (sort-once leaves
// superseded values in its runs) must not make rounds due: they would run
// back to back, each freezing a sliver of the log.
func (c *collector) reclaimableBytes(segs []systems.SegmentInfo) int64 {
	bound := c.s.ctl.CompactBound()
	c.s.applyMu.Lock()
	defer c.s.applyMu.Unlock()
	stats := map[uint64]fileStat{}
	var frozen, runs []fileStat
	for _, sg := range segs {
		if sg.LastIndex == 0 || sg.FirstIndex > bound {
			continue
		}
		f := fileStat{id: sg.ID, size: sg.SizeBytes, live: c.live[sg.ID]}
		frozen = append(frozen, f)
		stats[f.id] = f
	}
	for _, id := range c.s.runs.ids() {
		if rn := c.s.runs.get(id); rn != nil {
			f := fileStat{id: runFlag | id, size: rn.dataBytes, live: c.live[runFlag|id]}
			runs = append(runs, f)
			stats[f.id] = f
		}
	}
	var garbage int64
	for _, id := range c.strategy.Select(frozen, runs, c.cfg.GCGarbageRatio) {
		if f := stats[id]; f.size > f.live {
			garbage += f.size - f.live
		}
	}
	return garbage
}

// crashPoint kills the process if the configured crash point is name.
func (c *collector) crashPoint(name string) {
	if c.cfg.GCCrashPoint != name {
		return
	}
	c.s.logger.Error("nezha: GC crash point reached; killing the node", "crash_point", name)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // wait for the signal
}

// round runs one GC round (see the package comment above).
func (c *collector) round(ctx context.Context) (r systems.GCRound, err error) {
	s := c.s
	r = systems.GCRound{Strategy: c.strategy.Name(), Start: time.Now()}
	defer func() { r.End = time.Now() }()

	// 1. Freeze.
	bound := s.ctl.CompactBound()
	segs := s.ctl.Segments()
	if act := segs[len(segs)-1]; act.LastIndex > 0 && act.FirstIndex <= bound {
		if err := s.ctl.Roll(ctx); err != nil {
			return r, fmt.Errorf("freeze the active segment: %w", err)
		}
		segs = s.ctl.Segments()
	}
	var frozenSegs []systems.SegmentInfo
	compactTo := uint64(0)
	for _, sg := range segs {
		if !sg.Active && sg.LastIndex <= bound {
			frozenSegs = append(frozenSegs, sg)
			compactTo = max(compactTo, sg.LastIndex)
		}
	}

	// 2. Plan.
	s.applyMu.Lock()
	var frozen, runs []fileStat
	for _, sg := range frozenSegs {
		frozen = append(frozen, fileStat{id: sg.ID, size: sg.SizeBytes, live: c.live[sg.ID]})
	}
	for _, id := range s.runs.ids() {
		if rn := s.runs.get(id); rn != nil {
			// A run's records only: its block index and footer are not garbage.
			runs = append(runs, fileStat{id: runFlag | id, size: rn.dataBytes, live: c.live[runFlag|id]})
		}
	}
	s.applyMu.Unlock()
	inputs := map[uint64]bool{}
	for _, id := range c.strategy.Select(frozen, runs, c.cfg.GCGarbageRatio) {
		inputs[id] = true
	}
	if len(inputs) == 0 {
		return r, nil
	}
	var inputSegs, inputRuns []uint64
	for id := range inputs {
		if id&runFlag != 0 {
			inputRuns = append(inputRuns, id&^runFlag)
		} else {
			inputSegs = append(inputSegs, id)
		}
	}
	sort.Slice(inputSegs, func(i, j int) bool { return inputSegs[i] < inputSegs[j] })
	sort.Slice(inputRuns, func(i, j int) bool { return inputRuns[i] < inputRuns[j] })

	// 3. Copy the live values of the inputs, in key order, into a new run.
	newRun, err := c.copyLive(ctx, inputs, &r)
	if err != nil {
		return r, err
	}
	c.crashPoint(CrashBeforeSwitch)
	if c.afterCopy != nil {
		c.afterCopy()
	}

	// 4. Switch, re-validating every key.
	if newRun != nil {
		if err := c.switchTo(newRun, inputs, &r); err != nil {
			return r, err
		}
	}
	// 5. Durable index, then log compaction.
	if err := s.syncIndex(); err != nil {
		return r, err
	}
	c.crashPoint(CrashAfterSwitch)
	if compactTo > s.ctl.CompactedIndex() {
		if err := s.ctl.Compact(ctx, compactTo); err != nil {
			return r, fmt.Errorf("compact the log to %d: %w", compactTo, err)
		}
	}
	r.CompactedIndex = s.ctl.CompactedIndex()
	c.crashPoint(CrashBeforeDelete)

	// 6. Delete the inputs that hold no live byte any more.
	s.applyMu.Lock()
	var delSegs, delRuns []uint64
	for _, id := range inputSegs {
		if c.live[id] == 0 {
			delSegs = append(delSegs, id)
		} else {
			s.logger.Warn("nezha: GC keeps an input segment that still holds live bytes", "segment", id, "live", c.live[id])
		}
	}
	for _, id := range inputRuns {
		if c.live[runFlag|id] == 0 {
			delRuns = append(delRuns, id)
		} else {
			s.logger.Warn("nezha: GC keeps an input run that still holds live bytes", "run", id, "live", c.live[runFlag|id])
		}
	}
	s.applyMu.Unlock()
	sizes := map[uint64]int64{}
	for _, sg := range segs {
		sizes[sg.ID] = sg.SizeBytes
	}
	if len(delRuns) > 0 {
		s.manMu.Lock()
		m := s.man
		m.Runs = nil
		for _, id := range s.man.Runs {
			if !containsID(delRuns, id) {
				m.Runs = append(m.Runs, id)
			}
		}
		err := m.write(s.sortedDir)
		if err == nil {
			s.man = m
		}
		s.manMu.Unlock()
		if err != nil {
			return r, err
		}
	}
	s.gate.Lock()
	var errs []error
	for _, id := range delSegs {
		if err := s.ctl.RemoveSegment(id); err != nil {
			errs = append(errs, err)
			continue
		}
		r.SegmentsRemoved++
		r.ReclaimedBytes += sizes[id]
	}
	for _, id := range delRuns {
		if rn := s.runs.get(id); rn != nil {
			r.ReclaimedBytes += rn.size
		}
		if err := s.runs.remove(id); err != nil {
			errs = append(errs, err)
			continue
		}
		r.RunsRemoved++
	}
	s.gate.Unlock()
	s.applyMu.Lock()
	for _, id := range delSegs {
		delete(c.live, id)
	}
	for _, id := range delRuns {
		delete(c.live, runFlag|id)
	}
	s.applyMu.Unlock()
	return r, errors.Join(errs...)
}

func containsID(ids []uint64, id uint64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// copyLive writes the live values of the input files into a new run and
// registers it; nil if there was nothing live.
func (c *collector) copyLive(ctx context.Context, inputs map[uint64]bool, r *systems.GCRound) (*run, error) {
	s := c.s
	s.manMu.Lock()
	id := s.man.NextRun
	s.man.NextRun++
	s.manMu.Unlock()
	var w *runWriter
	crashed := false
	err := s.iterateChunks(1024, func(keys [][]byte, locs []systems.Location) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		var ks [][]byte
		var ls []systems.Location
		for i, l := range locs {
			if inputs[l.Segment] {
				ks, ls = append(ks, keys[i]), append(ls, l)
			}
		}
		if len(ks) == 0 {
			return nil
		}
		vals, err := s.readValues(ks, ls)
		if err != nil {
			return err
		}
		if w == nil {
			if w, err = newRunWriter(c.create, s.sortedDir, id); err != nil {
				return err
			}
		}
		for i := range ks {
			if _, err := w.Add(ks[i], vals[i], ls[i].Index); err != nil {
				return err
			}
			r.BytesRead += int64(ls[i].Length)
			r.KeysMoved++
		}
		if !crashed && r.KeysMoved > 0 {
			crashed = true
			c.crashPoint(CrashDuringCopy)
		}
		return nil
	})
	if err != nil {
		if w != nil {
			w.Abort()
		}
		return nil, fmt.Errorf("copy live values: %w", err)
	}
	if w == nil {
		return nil, nil
	}
	size, err := w.Finish()
	if err != nil {
		w.Abort()
		return nil, err
	}
	r.BytesWritten += size
	r.LiveBytes += size
	rn, err := openRun(s.sortedDir, id)
	if err != nil {
		os.Remove(w.path)
		return nil, err
	}
	s.manMu.Lock()
	m := s.man
	m.Runs = append(append([]uint64(nil), s.man.Runs...), id)
	err = m.write(s.sortedDir)
	if err == nil {
		s.man = m
	}
	s.manMu.Unlock()
	if err != nil {
		rn.close()
		os.Remove(rn.path)
		return nil, err
	}
	s.runs.add(rn)
	return rn, nil
}

// switchTo points every key of the new run at it, if the index still holds
// the copied value (same Raft index, in an input file).
func (c *collector) switchTo(rn *run, inputs map[uint64]bool, r *systems.GCRound) error {
	s := c.s
	type move struct {
		key []byte
		loc systems.Location
	}
	var chunk []move
	chunks := 0
	flush := func() error {
		s.applyMu.Lock()
		defer s.applyMu.Unlock()
		var b IndexBatch
		for _, m := range chunk {
			cur, found, err := s.index.Get(m.key)
			if err != nil {
				return err
			}
			if !found || cur.Index != m.loc.Index || !inputs[cur.Segment] {
				continue // a newer write or a delete won
			}
			b.Put(m.key, m.loc)
			c.live[cur.Segment] -= int64(cur.Length)
			c.live[m.loc.Segment] += int64(m.loc.Length)
		}
		chunk = chunk[:0]
		if b.Len() == 0 {
			return nil
		}
		b.SetApplied(s.index.AppliedIndex())
		return s.index.Write(&b)
	}
	err := rn.iterate(nil, func(key, _ []byte, loc systems.Location) (bool, error) {
		chunk = append(chunk, move{key: bytes.Clone(key), loc: loc})
		if len(chunk) < 1024 {
			return true, nil
		}
		if err := flush(); err != nil {
			return false, err
		}
		chunks++
		if chunks == 1 {
			c.crashPoint(CrashDuringSwitch)
		}
		return true, nil
	})
	if err == nil {
		err = flush()
		if chunks == 0 {
			c.crashPoint(CrashDuringSwitch)
		}
	}
	if err != nil {
		return fmt.Errorf("switch to run %d: %w", rn.id, err)
	}
	return nil
}
