package nezha

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/time/rate"

	"github.com/nezha-harness/nezha/systems"
)

// Raft-aware GC (the paper's "Raft-Aware Garbage Collection" and
// "Three-Phase Request Processing"; docs/architecture.md section 4.4).
//
// Storage modules. Active Storage is the Raft log segment being appended.
// A GC round first freezes it (Roll): the segments sealed at or below the
// compaction bound are the frozen log; the segments written while the round
// runs are New Storage; the key-sorted runs under sorted/ are the Final
// Compacted Storage.
//
// A round:
//
//  0. trigger: due (see the Trigger* constants) says why a round runs;
//     non-urgent rounds wait for the node's stagger slot;
//  1. freeze: roll the active segment if the strategy does for the
//     trigger; bound = LogControl.CompactBound() (the applied index, and
//     on the leader the lowest match index of the live followers: entries
//     a live follower still needs are not touched);
//  2. plan: the strategy picks input files (frozen segments, runs) from
//     their live and dead bytes (strategy.go); a plan may copy nothing;
//  3. copy: iterate the index in key order; every key whose location is in
//     an input file has its value read (CRC-checked) and appended, paced
//     by the rate limiter, to a new run, which is then fsynced and
//     registered in the manifest with its tier;
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

// Crash points, the values of -gcCrashPoint (testing): the node kills
// itself (SIGKILL) when a GC round reaches the point.
const (
	CrashDuringCopy   = "gc-during-copy"
	CrashBeforeSwitch = "gc-before-switch"
	CrashDuringSwitch = "gc-during-switch"
	CrashAfterSwitch  = "gc-after-switch"
	CrashBeforeDelete = "gc-before-delete"
	// CrashAfterManifest: the manifest no longer lists the input runs,
	// whose files still exist (open deletes them).
	CrashAfterManifest = "gc-after-manifest"
	// CrashTierMergeDuringSwitch: a round merging two or more runs, after
	// the first switch chunk (the index points into old and new runs).
	CrashTierMergeDuringSwitch = "gc-tier-merge-during-switch"
	// CrashIdleAfterFreeze: an idle round, right after it froze the log.
	CrashIdleAfterFreeze = "gc-idle-after-freeze"
	// CrashCheckpointAfterCompact: a round that copied nothing, after it
	// compacted the log and before it removed any file.
	CrashCheckpointAfterCompact = "gc-checkpoint-after-compact"
)

// CrashPoints returns every named GC crash point, in round order.
func CrashPoints() []string {
	return []string{CrashDuringCopy, CrashBeforeSwitch, CrashDuringSwitch, CrashAfterSwitch, CrashBeforeDelete,
		CrashAfterManifest, CrashTierMergeDuringSwitch, CrashIdleAfterFreeze, CrashCheckpointAfterCompact}
}

// Triggers, the values of systems.GCRound.Trigger: why a round ran.
//
// Rounds on the size and checkpoint triggers and -gcContinuous rounds start
// at once; the others are not urgent and start only in the node's time
// slot (-gcStagger), so that the nodes of a cluster do not all rewrite at
// the same moment. Every round's copy is paced by -gcRateBytesPerSec.
const (
	// TriggerSize: the log holds -gcThresholdBytes (tiered: above its
	// compaction point; merge: and as much as the runs). Tiered rewrites
	// only the files worth it by -gcGarbageRatio; a size round that copies
	// nothing is recorded as TriggerCheckpoint.
	TriggerSize = "size"
	// TriggerCheckpoint: a size round that copied nothing: it made the
	// index durable (memory index: a checkpoint), compacted the Raft log
	// and removed the files that held no live byte.
	TriggerCheckpoint = "checkpoint"
	// TriggerGarbage: the garbage a round would reclaim is at least
	// -gcGarbageRatio of log and runs, and at least -gcMinBytes.
	TriggerGarbage = "garbage"
	// TriggerTier (tiered): a tier holds -gcFanout runs, and the node is
	// idle or the merge reclaims at least -gcMinBytes.
	TriggerTier = "tier"
	// TriggerIdle: no write was applied for -gcIdleAfter and the log holds
	// live values or reclaimable garbage (at least -gcMinBytes): the round
	// sorts the whole log into a run (tiered: also merges every run into
	// one when that costs at most fanout x what changed; see
	// tiered.fullMergeWorth). Once per quiet period.
	TriggerIdle = "idle"
	// TriggerScan: scans read -gcScanLogBytes from log segments since the
	// last round, more than from runs: the round sorts the whole log.
	TriggerScan = "scan"
	// TriggerContinuous: -gcContinuous (tests, stress).
	TriggerContinuous = "continuous"
	// TriggerSnapshot: a snapshot was asked for (Store.TakeSnapshot):
	// the round copies nothing; it makes the index durable, compacts the
	// Raft log to the compaction bound (also inside the active segment)
	// and removes the sealed segments and runs below it that hold no live
	// byte. It runs at once, between the other rounds.
	TriggerSnapshot = "snapshot"
)

// staggered reports whether rounds on trigger wait for the node's slot.
func staggered(trigger string) bool {
	return trigger != TriggerSize && trigger != TriggerCheckpoint && trigger != TriggerContinuous
}

// collector runs GC rounds for a Store, one at a time, in the background.
type collector struct {
	s        *Store
	strategy Strategy
	cfg      *Config
	create   fileCreator
	// afterCopy, if set, runs between the copy and the switch (tests).
	afterCopy func()
	// now is the clock of the triggers (tests set their own).
	now func() time.Time
	// limiter paces GC's writes (nil: unlimited).
	limiter *rate.Limiter
	// nodeID and nodes place this node's stagger slot (0: no slot).
	nodeID uint64
	nodes  int

	// live bytes per file (segment id or runFlag|run id), and dead bytes
	// (discard statistics: superseded and deleted values, delete records);
	// guarded by s.applyMu.
	live map[uint64]int64
	dead map[uint64]int64
	// keys holds every key of the index (keyfilter.go); nil: unknown.
	// filling is a filter being filled by the loop (fillKeys) that becomes
	// keys once it holds every key present when it was made; applied puts
	// add their keys to both. Guarded by s.applyMu.
	keys, filling *keyFilter
	// liveKeys is the number of live keys in the index (guarded by
	// s.applyMu), counted with the live bytes.
	liveKeys int64
	// garbage is the sum of dead, for the write stall (Store.WriteStall)
	// to read without a lock; set by noteGarbage, and moved by each
	// applied batch's dead bytes (liveAccount.commit).
	garbage atomic.Int64

	// lastWrite is the clock (UnixNano) of the last applied put or delete
	// (or of the start); idleDoneFor is the lastWrite an idle round was
	// run or found nothing for: one idle round per quiet period.
	lastWrite   atomic.Int64
	idleDoneFor int64 // loop-owned
	// scanLogAt and scanRunAt are the store's scan counters at the last
	// round. Loop-owned.
	scanLogAt, scanRunAt int64

	hist systems.GCHistory

	// snapc carries TakeSnapshot's requests to the loop, so that a
	// snapshot round never overlaps another round or a snapshot restore
	// (which stops the loop).
	snapc  chan chan snapshotResult
	kick   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}

	// idleLogBytes is the log size when the last round found nothing to
	// do; no size or garbage round is due again until the log grows past
	// it. Loop-owned.
	idleLogBytes int64
}

func newCollector(s *Store, cfg *Config, env systems.Env) (*collector, error) {
	st, err := NewStrategy(cfg.GC, cfg.GCFanout)
	if err != nil {
		return nil, err
	}
	c := &collector{s: s, strategy: st, cfg: cfg, create: fsCreate(s.fs), now: time.Now,
		nodeID: env.NodeID, nodes: env.Nodes,
		live: map[uint64]int64{}, dead: map[uint64]int64{}, kick: make(chan struct{}, 1), snapc: make(chan chan snapshotResult)}
	if cfg.GCRateBytesPerSec > 0 {
		c.limiter = rate.NewLimiter(rate.Limit(cfg.GCRateBytesPerSec), gcRateBurstBytes)
	}
	c.lastWrite.Store(c.now().UnixNano())
	return c, nil
}

// gcRateBurstBytes is the token bucket's depth: one run write buffer.
const gcRateBurstBytes = runWriteBufSize

// throttle waits until n more bytes of GC I/O fit the rate limit and
// returns how long it waited.
func (c *collector) throttle(ctx context.Context, n int) (time.Duration, error) {
	if c.limiter == nil {
		return 0, nil
	}
	start := time.Now()
	for n > 0 {
		k := min(n, c.limiter.Burst())
		if err := c.limiter.WaitN(ctx, k); err != nil {
			return time.Since(start), err
		}
		n -= k
	}
	return time.Since(start), nil
}

// rebuildLive recomputes the live bytes of every file from the index, and
// estimates the dead bytes: a run's size - live (exact), a segment's size -
// live (Raft's own records counted as garbage until a round rewrites it:
// discard statistics are not persisted).
func (c *collector) rebuildLive() error {
	live := map[uint64]int64{}
	var keys int64
	err := c.s.iterateChunks(4096, func(_ [][]byte, locs []systems.Location) error {
		keys += int64(len(locs))
		for _, l := range locs {
			live[l.Segment] += int64(l.Length)
		}
		return nil
	})
	if err != nil {
		return err
	}
	dead := map[uint64]int64{}
	if c.s.ctl != nil {
		for _, sg := range c.s.ctl.Segments() {
			dead[sg.ID] = max(0, sg.SizeBytes-live[sg.ID])
		}
	}
	for _, id := range c.s.runs.ids() {
		if rn := c.s.runs.get(id); rn != nil {
			dead[runFlag|id] = max(0, rn.dataBytes-live[runFlag|id])
		}
	}
	c.s.applyMu.Lock()
	c.live, c.dead, c.liveKeys = live, dead, keys
	c.keys, c.filling = nil, newKeyFilter(int(keys))
	c.noteGarbage()
	c.s.applyMu.Unlock()
	return nil
}

// noteGarbage publishes the sum of the dead bytes of every file (GC's
// debt) for the write stall. Caller holds applyMu.
func (c *collector) noteGarbage() {
	var sum int64
	for _, d := range c.dead {
		sum += d
	}
	c.garbage.Store(sum)
}

// fillKeys adds every key of the index to c.filling, a chunk at a time
// under applyMu, and then makes it c.keys: from then on the live-byte
// accounting skips the index lookup of keys the filter has never seen.
// Puts applied meanwhile add their keys themselves. It gives up when ctx
// ends or the filter was replaced (a snapshot restore). Loop goroutine.
func (c *collector) fillKeys(ctx context.Context) error {
	c.s.applyMu.Lock()
	f := c.filling
	c.s.applyMu.Unlock()
	if f == nil {
		return nil
	}
	var next []byte
	for more := true; more; {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var keys [][]byte
		var err error
		more, err = c.s.chunk(4096, &next, func(ks [][]byte, _ []systems.Location) error {
			keys = ks
			return nil
		})
		if err != nil {
			return err
		}
		// applyMu outside the read gate (chunk holds it): CommitRestore
		// takes applyMu, then the gate.
		c.s.applyMu.Lock()
		replaced := c.filling != f
		for _, k := range keys {
			f.add(k)
		}
		c.s.applyMu.Unlock()
		if replaced {
			return nil
		}
	}
	c.s.applyMu.Lock()
	if c.filling == f {
		c.keys, c.filling = f, nil
	}
	c.s.applyMu.Unlock()
	return nil
}

// liveAccount collects the live-byte changes of one Apply batch.
type liveAccount struct {
	c     *collector
	seen  map[string]*systems.Location // key -> location set earlier in the batch (nil: deleted)
	delta map[uint64]int64
	dead  map[uint64]int64
	keys  int64 // change of the number of live keys
	wrote bool
}

func (c *collector) newAccount() *liveAccount {
	return &liveAccount{c: c, seen: map[string]*systems.Location{}, delta: map[uint64]int64{}, dead: map[uint64]int64{}}
}

// set records that key now has loc (nil: deleted by the record at del).
// Caller holds applyMu.
func (a *liveAccount) set(key []byte, loc *systems.Location, del systems.Location) error {
	a.wrote = true
	old, inBatch := a.seen[string(key)]
	if !inBatch && a.c.keys.mayHold(key) {
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
		a.dead[old.Segment] += int64(old.Length)
	}
	switch {
	case old == nil && loc != nil:
		a.keys++
	case old != nil && loc == nil:
		a.keys--
	}
	if loc != nil {
		a.delta[loc.Segment] += int64(loc.Length)
		l := *loc
		a.seen[string(key)] = &l
		a.c.keys.add(key)
		a.c.filling.add(key)
	} else {
		a.seen[string(key)] = nil
		if del.Length > 0 && !isRun(del) {
			a.dead[del.Segment] += int64(del.Length)
		}
	}
	return nil
}

// commit adds the batch's changes to the totals. Caller holds applyMu.
func (a *liveAccount) commit() {
	for f, d := range a.delta {
		a.c.live[f] += d
	}
	var garbage int64
	for f, d := range a.dead {
		a.c.dead[f] += d
		garbage += d
	}
	a.c.garbage.Add(garbage) // the batch's part of noteGarbage's sum
	a.c.liveKeys += a.keys
	if a.wrote {
		a.c.lastWrite.Store(a.c.now().UnixNano())
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
	if err := c.fillKeys(ctx); err != nil && ctx.Err() == nil {
		// Not fatal: the accounting keeps looking every put up.
		c.s.logger.Warn("nezha: cannot fill the key filter; GC accounting looks every put up", "err", err)
	}
	t := time.NewTicker(c.cfg.GCInterval)
	defer t.Stop()
	slot := time.NewTimer(time.Hour)
	defer slot.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.kick:
		case <-slot.C:
		case done := <-c.snapc:
			r, err := c.snapshotRound(ctx)
			c.record(r, err)
			done <- snapshotResult{index: r.CompactedIndex, err: err}
			continue
		}
		for ctx.Err() == nil {
			trigger := c.due()
			if trigger == "" {
				break
			}
			if wait := c.untilSlot(); staggered(trigger) && wait > 0 {
				slot.Reset(wait)
				break
			}
			r, err := c.round(ctx, trigger)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				r.Error = err.Error()
				c.hist.Record(r.GCRound)
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
			if r.SegmentsRemoved == 0 && r.RunsRemoved == 0 && r.KeysMoved == 0 && !r.compacted {
				c.idleLogBytes = c.logBytes()
				break // nothing to do until the log grows
			}
			c.idleLogBytes = 0
			c.record(r, nil)
			if !c.cfg.GCContinuous {
				break
			}
		}
	}
}

// record keeps a round that did something or failed in the history, and
// logs it.
func (c *collector) record(r roundResult, err error) {
	if err != nil {
		r.Error = err.Error()
		c.hist.Record(r.GCRound)
		c.s.logger.Error("nezha: GC round failed; the node keeps serving", "trigger", r.Trigger, "err", err)
		return
	}
	c.hist.Record(r.GCRound)
	c.s.logger.Info("nezha: GC round", "strategy", r.Strategy, "trigger", r.Trigger,
		"duration", r.End.Sub(r.Start).Round(time.Millisecond), "throttled", r.Throttled.Round(time.Millisecond),
		"bytes_read", r.BytesRead, "bytes_written", r.BytesWritten, "live_bytes", r.LiveBytes,
		"reclaimed_bytes", r.ReclaimedBytes, "segments_removed", r.SegmentsRemoved, "runs_removed", r.RunsRemoved,
		"keys_moved", r.KeysMoved, "compacted_index", r.CompactedIndex)
}

// snapshotResult is the answer of the loop to a TakeSnapshot request.
type snapshotResult struct {
	index uint64
	err   error
}

// takeSnapshot asks the loop for a snapshot round and waits for it.
func (c *collector) takeSnapshot(ctx context.Context) (uint64, error) {
	done := make(chan snapshotResult, 1)
	select {
	case c.snapc <- done:
	case <-ctx.Done():
		return 0, fmt.Errorf("nezha: take snapshot: waiting for the GC loop: %w", ctx.Err())
	}
	select {
	case r := <-done:
		return r.index, r.err
	case <-ctx.Done():
		return 0, fmt.Errorf("nezha: take snapshot: %w (the round goes on)", ctx.Err())
	}
}

// snapshotRound is the round of TriggerSnapshot (loop goroutine, or tests
// with the loop stopped).
func (c *collector) snapshotRound(ctx context.Context) (r roundResult, err error) {
	s := c.s
	r.GCRound = systems.GCRound{Strategy: c.strategy.Name(), Trigger: TriggerSnapshot, Start: time.Now()}
	defer func() { r.End = time.Now() }()
	// The bound is read before the index is made durable: the index's
	// applied index is then at or above it.
	bound := s.ctl.CompactBound()
	if err := s.syncIndex(); err != nil {
		return r, err
	}
	if bound > s.ctl.CompactedIndex() {
		if err := s.ctl.Compact(ctx, bound); err != nil {
			return r, fmt.Errorf("compact the log to %d: %w", bound, err)
		}
		r.compacted = true
	}
	r.CompactedIndex = s.ctl.CompactedIndex()
	segs := s.ctl.Segments()
	var dead []uint64
	s.applyMu.Lock()
	for _, sg := range segs {
		if !sg.Active && sg.LastIndex <= r.CompactedIndex && c.live[sg.ID] == 0 {
			dead = append(dead, sg.ID)
		}
	}
	for _, id := range s.runs.ids() {
		if c.live[runFlag|id] == 0 {
			dead = append(dead, runFlag|id)
		}
	}
	s.applyMu.Unlock()
	return r, c.removeInputs(dead, segs, &r.GCRound)
}

// untilSlot returns how long until this node's stagger slot starts (0 when
// in it, or when there are no slots). Slot i (node id i+1) is every
// [k x nodes + i] x -gcStagger of the wall clock: nodes on one clock (or
// NTP) take turns without talking.
func (c *collector) untilSlot() time.Duration {
	st := c.cfg.GCStagger
	if st <= 0 || c.nodes <= 1 || c.nodeID == 0 {
		return 0
	}
	now := c.now().UnixNano()
	period := int64(st) * int64(c.nodes)
	pos := now % period
	start := int64(st) * int64((c.nodeID-1)%uint64(c.nodes))
	if pos >= start && pos < start+int64(st) {
		return 0
	}
	return time.Duration((start - pos + period) % period)
}

func (c *collector) logBytes() int64 {
	var n int64
	for _, sg := range c.s.ctl.Segments() {
		n += sg.SizeBytes
	}
	return n
}

// stats returns what the strategy knows of the segments a round with
// trigger would take (sealed ones at or below bound, and the active one
// if the round rolls it) and of the runs. Caller holds applyMu.
func (c *collector) stats(segs []systems.SegmentInfo, bound uint64, trigger string) (frozen, runs []fileStat) {
	rolls := c.strategy.Rolls(trigger)
	for _, sg := range segs {
		if sg.LastIndex == 0 || sg.FirstIndex > bound || (sg.Active && !rolls) || (!sg.Active && sg.LastIndex > bound) {
			continue
		}
		frozen = append(frozen, fileStat{id: sg.ID, size: sg.SizeBytes, live: c.live[sg.ID], dead: c.dead[sg.ID]})
	}
	for _, id := range c.s.runs.ids() {
		if rn := c.s.runs.get(id); rn != nil {
			// A run's records only: its block index and footer are not garbage.
			f := fileStat{id: runFlag | id, size: rn.dataBytes, live: c.live[runFlag|id], tier: rn.tier}
			f.dead = max(0, f.size-f.live)
			runs = append(runs, f)
		}
	}
	return frozen, runs
}

// planned is what a plan would do: the bytes it reclaims and copies.
type planned struct {
	ids                []uint64
	reclaim, copyBytes int64
}

func (c *collector) planFor(segs []systems.SegmentInfo, bound uint64, trigger string) planned {
	c.s.applyMu.Lock()
	frozen, runs := c.stats(segs, bound, trigger)
	c.s.applyMu.Unlock()
	byID := map[uint64]fileStat{}
	for _, f := range append(append([]fileStat(nil), frozen...), runs...) {
		byID[f.id] = f
	}
	p := planned{ids: c.strategy.Plan(planInput{frozen: frozen, runs: runs, trigger: trigger,
		ratio: c.cfg.GCGarbageRatio, fanout: c.cfg.GCFanout})}
	if c.strategy.Name() == StrategyTiered && trigger != TriggerIdle && c.cfg.GCMaxRoundBytes > 0 {
		p.ids = boundRound(p.ids, byID, c.cfg.GCMaxRoundBytes)
	}
	for _, id := range p.ids {
		f := byID[id]
		p.reclaim += f.reclaimable()
		p.copyBytes += f.live
	}
	return p
}

// boundRound keeps, of a round's input ids, what fits in maxBytes of live
// bytes (at least one input): files with no live byte (free), then runs
// with the most garbage per byte for up to half the bound (space), then
// log segments oldest first (sorting the log, which frees its segments),
// then further runs. Without the half for runs a busy node's log filled
// every bounded round and the runs' garbage was never reclaimed; the rest
// waits for later rounds.
func boundRound(ids []uint64, byID map[uint64]fileStat, maxBytes int64) []uint64 {
	var dead, segs, runs []uint64
	for _, id := range ids {
		switch {
		case byID[id].live == 0:
			dead = append(dead, id)
		case id&runFlag != 0:
			runs = append(runs, id)
		default:
			segs = append(segs, id)
		}
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i] < segs[j] })
	garbage := func(id uint64) float64 {
		f := byID[id]
		return float64(f.reclaimable()) / float64(max(f.size, 1))
	}
	sort.SliceStable(runs, func(i, j int) bool { return garbage(runs[i]) > garbage(runs[j]) })
	kept := append([]uint64(nil), dead...)
	taken := map[uint64]bool{}
	var total int64
	take := func(ids []uint64, limit int64) {
		for _, id := range ids {
			live := byID[id].live
			if taken[id] || (len(kept) > len(dead) && total+live > limit) {
				continue
			}
			taken[id] = true
			total += live
			kept = append(kept, id)
		}
	}
	take(runs, maxBytes/2)
	take(segs, maxBytes)
	take(runs, maxBytes)
	return kept
}

// selectable returns the garbage of the files the strategy's Select picks
// among the sealed segments at or below bound and the runs.
func (c *collector) selectable(segs []systems.SegmentInfo, bound uint64) int64 {
	c.s.applyMu.Lock()
	frozen, runs := c.stats(segs, bound, TriggerGarbage)
	c.s.applyMu.Unlock()
	byID := map[uint64]fileStat{}
	for _, f := range append(append([]fileStat(nil), frozen...), runs...) {
		byID[f.id] = f
	}
	var g int64
	for _, id := range c.strategy.Select(frozen, runs, c.cfg.GCGarbageRatio) {
		g += byID[id].reclaimable()
	}
	return g
}

// due returns the trigger of the round that should run now, or "".
func (c *collector) due() string {
	segs := c.s.ctl.Segments()
	bound := c.s.ctl.CompactBound()
	if c.cfg.GCContinuous {
		for _, sg := range segs {
			if sg.LastIndex > 0 && sg.FirstIndex <= bound {
				return TriggerContinuous
			}
		}
		return ""
	}
	var logBytes, uncompacted, runBytes int64
	compacted := c.s.ctl.CompactedIndex()
	for _, sg := range segs {
		logBytes += sg.SizeBytes
		if sg.LastIndex > compacted {
			uncompacted += sg.SizeBytes
		}
	}
	for _, id := range c.s.runs.ids() {
		if r := c.s.runs.get(id); r != nil {
			runBytes += r.size
		}
	}
	minReclaim := max(c.cfg.GCMinBytes, minGarbageBytes)
	grown := c.idleLogBytes == 0 || logBytes > c.idleLogBytes
	if grown {
		sized := logBytes
		if c.strategy.Name() == StrategyTiered {
			sized = uncompacted
		}
		if sized >= c.strategy.LogThreshold(c.cfg.GCThresholdBytes, runBytes) {
			return TriggerSize
		}
		// The garbage the strategy's selection would reclaim (tiered's
		// rounds then take the most profitable part of it).
		if g := c.selectable(segs, bound); g >= minReclaim && float64(g) >= c.cfg.GCGarbageRatio*float64(logBytes+runBytes) {
			return TriggerGarbage
		}
	}
	logScan, runScan := c.s.scanLogBytes.Load()-c.scanLogAt, c.s.scanRunBytes.Load()-c.scanRunAt
	if c.cfg.GCScanLogBytes > 0 && logScan >= c.cfg.GCScanLogBytes && logScan > runScan {
		if p := c.planFor(segs, bound, TriggerScan); p.copyBytes > 0 {
			return TriggerScan
		}
		c.scanLogAt, c.scanRunAt = c.s.scanLogBytes.Load(), c.s.scanRunBytes.Load()
	}
	last := c.lastWrite.Load()
	quiet := c.cfg.GCIdleAfter > 0 && c.now().UnixNano()-last >= int64(c.cfg.GCIdleAfter)
	if t, ok := c.strategy.(tiered); ok {
		// A full tier is merged when idle; while writes flow only once it
		// holds twice the fan-out (bounding the runs a scan meets).
		need := 2 * t.fanout
		if quiet {
			need = t.fanout
		}
		c.s.applyMu.Lock()
		_, runs := c.stats(segs, bound, TriggerTier)
		c.s.applyMu.Unlock()
		if len(t.fullTier(runs, need)) > 0 {
			return TriggerTier
		}
	}
	if quiet && last != c.idleDoneFor {
		if p := c.planFor(segs, bound, TriggerIdle); p.copyBytes > 0 || p.reclaim >= minReclaim {
			return TriggerIdle
		}
		c.idleDoneFor = last
	}
	return ""
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

// roundResult is a round's record and whether it advanced the log's
// compaction point.
type roundResult struct {
	systems.GCRound
	compacted bool
}

// round runs one GC round (see the package comment above) for trigger.
func (c *collector) round(ctx context.Context, trigger string) (r roundResult, err error) {
	s := c.s
	r.GCRound = systems.GCRound{Strategy: c.strategy.Name(), Trigger: trigger, Start: time.Now()}
	defer func() { r.End = time.Now() }()
	switch trigger {
	case TriggerIdle:
		// Done for this quiet period once it succeeded (a failed one is
		// tried again after the back-off).
		quietSince := c.lastWrite.Load()
		defer func() {
			if err == nil {
				c.idleDoneFor = quietSince
			}
		}()
	case TriggerScan:
		c.scanLogAt, c.scanRunAt = s.scanLogBytes.Load(), s.scanRunBytes.Load()
	}

	// 1. Freeze.
	bound := s.ctl.CompactBound()
	segs := s.ctl.Segments()
	if act := segs[len(segs)-1]; c.strategy.Rolls(trigger) && act.LastIndex > 0 && act.FirstIndex <= bound {
		if err := s.ctl.Roll(ctx); err != nil {
			return r, fmt.Errorf("freeze the active segment: %w", err)
		}
		segs = s.ctl.Segments()
	}
	compactTo := uint64(0)
	for _, sg := range segs {
		if !sg.Active && sg.LastIndex <= bound {
			compactTo = max(compactTo, sg.LastIndex)
		}
	}
	if trigger == TriggerIdle {
		c.crashPoint(CrashIdleAfterFreeze)
	}

	// 2. Plan.
	p := c.planFor(segs, bound, trigger)
	inputs := map[uint64]bool{}
	inputRuns := 0
	for _, id := range p.ids {
		inputs[id] = true
		if id&runFlag != 0 {
			inputRuns++
		}
	}

	// 3. Copy the live values of the inputs, in key order, into a new run
	// (nothing to copy when no input holds a live byte).
	if p.copyBytes > 0 {
		newRun, expired, err := c.copyLive(ctx, inputs, &r.GCRound)
		if err != nil {
			return r, err
		}
		c.crashPoint(CrashBeforeSwitch)
		if c.afterCopy != nil {
			c.afterCopy()
		}
		// 4. Switch, re-validating every key.
		if newRun != nil {
			if err := c.switchTo(newRun, inputs, inputRuns >= 2, &r.GCRound); err != nil {
				return r, err
			}
		}
		if err := c.dropExpired(expired, inputs); err != nil {
			return r, err
		}
	}
	if trigger == TriggerSize && r.KeysMoved == 0 {
		r.Trigger = TriggerCheckpoint
	}
	// 5. Durable index, then log compaction: also when the round copied
	// nothing (a memory-index node must not replay the whole log).
	if err := s.syncIndex(); err != nil {
		return r, err
	}
	c.crashPoint(CrashAfterSwitch)
	if compactTo > s.ctl.CompactedIndex() {
		if err := s.ctl.Compact(ctx, compactTo); err != nil {
			return r, fmt.Errorf("compact the log to %d: %w", compactTo, err)
		}
		r.compacted = true
		if r.Trigger == TriggerCheckpoint {
			c.crashPoint(CrashCheckpointAfterCompact)
		}
	}
	r.CompactedIndex = s.ctl.CompactedIndex()
	c.crashPoint(CrashBeforeDelete)

	// 6. Delete the inputs that hold no live byte any more.
	s.applyMu.Lock()
	var dead []uint64
	for _, id := range p.ids {
		if c.live[id] == 0 {
			dead = append(dead, id)
		} else {
			s.logger.Warn("nezha: GC keeps an input file that still holds live bytes", "file", describeFile(id), "live", c.live[id])
		}
	}
	s.applyMu.Unlock()
	return r, c.removeInputs(dead, segs, &r.GCRound)
}

// describeFile names a segment or run id (runFlag|id) for logs.
func describeFile(id uint64) string {
	if id&runFlag != 0 {
		return fmt.Sprintf("run %d", id&^runFlag)
	}
	return fmt.Sprintf("segment %d", id)
}

// removeInputs deletes the files ids (segment ids, and runFlag|id for
// runs) that hold no live byte: runs leave the manifest first, then
// segments and runs are deleted under the read gate; segs gives the
// segments' sizes. It adds what it removed to r.
func (c *collector) removeInputs(ids []uint64, segs []systems.SegmentInfo, r *systems.GCRound) error {
	s := c.s
	var delSegs, delRuns []uint64
	for _, id := range ids {
		if id&runFlag != 0 {
			delRuns = append(delRuns, id&^runFlag)
		} else {
			delSegs = append(delSegs, id)
		}
	}
	sort.Slice(delSegs, func(i, j int) bool { return delSegs[i] < delSegs[j] })
	sort.Slice(delRuns, func(i, j int) bool { return delRuns[i] < delRuns[j] })
	sizes := map[uint64]int64{}
	for _, sg := range segs {
		sizes[sg.ID] = sg.SizeBytes
	}
	if len(delRuns) > 0 {
		s.manMu.Lock()
		m := s.man.withoutRuns(delRuns)
		err := m.write(s.fs, s.sortedDir)
		if err == nil {
			s.man = m
		}
		s.manMu.Unlock()
		if err != nil {
			return err
		}
		c.crashPoint(CrashAfterManifest)
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
		delete(c.dead, id)
	}
	for _, id := range delRuns {
		delete(c.live, runFlag|id)
		delete(c.dead, runFlag|id)
	}
	c.noteGarbage()
	s.applyMu.Unlock()
	return errors.Join(errs...)
}

// copyLive writes the live values of the input files into a new run and
// registers it; nil if there was nothing live.
//
// Keys whose TTL expired (by the store's clock) are not copied: they are
// returned in expired, for dropExpired to delete from the index.
func (c *collector) copyLive(ctx context.Context, inputs map[uint64]bool, r *systems.GCRound) (_ *run, expired []keyLoc, err error) {
	s := c.s
	s.manMu.Lock()
	id := s.man.NextRun
	s.man.NextRun++
	s.manMu.Unlock()
	var w *runWriter
	crashed := false
	now := s.nowUnixNano()
	err = s.iterateChunks(1024, func(keys [][]byte, locs []systems.Location) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		var ks [][]byte
		var ls []systems.Location
		for i, l := range locs {
			switch {
			case !inputs[l.Segment]:
			case l.Expired(now):
				expired = append(expired, keyLoc{key: keys[i], loc: l})
			default:
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
		n := 0
		for _, l := range ls {
			n += int(l.Length)
		}
		waited, err := c.throttle(ctx, n)
		r.Throttled += waited
		if err != nil {
			return err
		}
		if w == nil {
			if w, err = newRunWriter(c.create, s.sortedDir, id); err != nil {
				return err
			}
		}
		for i := range ks {
			if _, err := w.Add(ks[i], vals[i], ls[i].Index, ls[i].ExpiresUnixNano); err != nil {
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
			w.Abort(s.fs.Base())
		}
		return nil, nil, fmt.Errorf("copy live values: %w", err)
	}
	if w == nil {
		return nil, expired, nil
	}
	size, err := w.Finish()
	if err != nil {
		w.Abort(s.fs.Base())
		return nil, nil, err
	}
	r.BytesWritten += size
	r.LiveBytes += size
	rn, err := openRun(s.fs, s.sortedDir, id)
	if err != nil {
		s.fs.Base().Remove(w.path)
		return nil, nil, err
	}
	rn.tier = tierFor(rn.dataBytes, c.cfg.GCFanout)
	s.manMu.Lock()
	m := s.man.withRun(id, rn.tier)
	err = m.write(s.fs, s.sortedDir)
	if err == nil {
		s.man = m
	}
	s.manMu.Unlock()
	if err != nil {
		rn.close()
		s.fs.Base().Remove(rn.path)
		return nil, nil, err
	}
	s.runs.add(rn)
	return rn, expired, nil
}

// keyLoc is a key and the location the index held for it.
type keyLoc struct {
	key []byte
	loc systems.Location
}

// dropExpired deletes from the index the expired keys copyLive left
// behind, each only if the index still holds the location it saw (a newer
// write wins), so that no key points into an input file once the round
// deletes it: GC drops expired keys.
func (c *collector) dropExpired(expired []keyLoc, inputs map[uint64]bool) error {
	s := c.s
	for len(expired) > 0 {
		chunk := expired[:min(len(expired), 1024)]
		expired = expired[len(chunk):]
		if err := func() error {
			s.applyMu.Lock()
			defer s.applyMu.Unlock()
			var b IndexBatch
			for _, e := range chunk {
				cur, found, err := s.index.Get(e.key)
				if err != nil {
					return err
				}
				if !found || cur.Index != e.loc.Index || !inputs[cur.Segment] {
					continue
				}
				b.Delete(e.key)
				c.live[cur.Segment] -= int64(cur.Length)
				c.dead[cur.Segment] += int64(cur.Length)
				c.liveKeys--
			}
			c.noteGarbage()
			if b.Len() == 0 {
				return nil
			}
			b.SetApplied(s.index.AppliedIndex())
			return s.index.Write(&b)
		}(); err != nil {
			return fmt.Errorf("drop expired keys: %w", err)
		}
	}
	return nil
}

// switchTo points every key of the new run at it, if the index still holds
// the copied value (same Raft index, in an input file).
// A merge of runs (merging) may crash at CrashTierMergeDuringSwitch.
func (c *collector) switchTo(rn *run, inputs map[uint64]bool, merging bool, r *systems.GCRound) error {
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
			c.dead[cur.Segment] += int64(cur.Length)
			c.live[m.loc.Segment] += int64(m.loc.Length)
		}
		c.noteGarbage()
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
			if merging {
				c.crashPoint(CrashTierMergeDuringSwitch)
			}
		}
		return true, nil
	})
	if err == nil {
		err = flush()
		if chunks == 0 {
			c.crashPoint(CrashDuringSwitch)
			if merging {
				c.crashPoint(CrashTierMergeDuringSwitch)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("switch to run %d: %w", rn.id, err)
	}
	return nil
}
