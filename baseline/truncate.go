package baseline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/systems"
)

// Raft log truncation. A baseline node keeps every value twice: in the Raft
// log and in RocksDB. Real Raft + RocksDB systems do not keep the log
// forever: once the state machine has made an entry durable, the entry is
// only needed by followers that have not received it, and a follower that
// is too far behind gets a snapshot instead (etcd compacts its raft log
// behind each snapshot; TiKV's raft log GC compacts to the applied index
// after syncing the KV engine's WAL). Without this the log grows without
// bound and dominates the baselines' space amplification.
//
// Policy (every -rocksdb.logTruncateInterval, while -rocksdb.logRetainBytes
// is positive):
//
//  1. Trigger: the log's segments hold more than LogRetainBytes in total.
//  2. If the active segment alone holds more than LogRetainBytes and has
//     entries, roll it (LogControl.Roll). Rolled segments are therefore at
//     least LogRetainBytes (or -segmentSizeBytes) large, never small ones.
//  3. Target: the highest LastIndex among the sealed segments that is at or
//     below LogControl.CompactBound() (the node's applied index and, on the
//     leader, the lowest match index of the live followers). No such
//     segment: nothing to compact (and no RocksDB work is done).
//  4. Make the applied state durable and read an applied index A that is:
//     original, blobdb: a synced write of the RocksDB WAL (FlushWAL(true),
//     what TiKV's raft log GC does), no memtable flush, so that truncation
//     does not change the LSM tree's shape or write amplification. A is
//     read before the sync: every batch Apply reported (user data and the
//     applied index, one WriteBatch) is in the WAL by then.
//     pasv: no WAL, so the memtables are flushed (Store.flushApplied): A
//     is read, the user data column family is flushed (which persists
//     every entry at or below A), then A is written into the meta column
//     family and that is flushed. Apply is never held off, and no atomic
//     flush is needed for the applied index on disk to stay at or below
//     the user data on disk (see flushApplied and OpenStore).
//  5. Compact the log to C = the highest sealed LastIndex at or below
//     min(A, CompactBound()), and remove every sealed segment whose
//     LastIndex is at or below the log's compaction point (this also
//     removes segments left by an earlier round that failed after its
//     compaction, and segments a received snapshot made obsolete).
//
// After a round the log holds the active segment plus the sealed segments a
// live follower (or the applied index) still needs: between 0 and about
// LogRetainBytes plus one segment. A restart of any mode finds the
// RocksDB applied index at or above the compaction point.
//
// Concurrency: the round holds the store's locks only while it works on
// RocksDB (step 4), never while it calls LogControl: Roll and Compact run on
// the node's Ready loop, which also runs CommitRestore, so a lock held
// across them could deadlock. (roundMu, held throughout, serializes the
// rounds with TakeSnapshot only; the Ready loop never takes it.) A snapshot restore that lands between steps 4
// and 5 compacts the log beyond C; Compact then fails, the round sees the
// newer compaction point and goes on with it.
//
// Errors are recorded (GCRounds) and logged; the next interval retries; the
// node keeps serving.

// TruncationStrategy is the systems.GCRound Strategy of a truncation round.
const TruncationStrategy = systems.LogTruncationStrategy

// truncator runs the Raft log truncation of one Store in the background.
type truncator struct {
	s        *Store
	ctl      systems.LogControl
	retain   int64
	interval time.Duration
	onRound  func(systems.GCRound)

	hist systems.GCHistory

	// failures counts consecutive failed rounds; owned by the goroutine
	// that runs rounds (the loop, or a test with the loop stopped).
	failures int

	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan struct{}
}

func newTruncator(s *Store, ctl systems.LogControl, c *Config) *truncator {
	return &truncator{s: s, ctl: ctl, retain: c.LogRetainBytes, interval: c.LogTruncateInterval,
		onRound: c.onTruncateRound}
}

// truncationDescription says how the mode truncates, for Describe.
func truncationDescription(m Mode, retain int64) string {
	if retain == 0 {
		return "off: the Raft log is never truncated"
	}
	how := "a synced RocksDB WAL write (no memtable flush)"
	if m == ModePASV {
		how = "a flush of the user data column family, then of the applied index written into the meta column family (no WAL)"
	}
	return "whole sealed segments up to min(durable applied index, Raft-aware compact bound), after " + how
}

// start starts the background loop; stop stops it and waits for it. stop
// may be called more than once.
func (t *truncator) start() {
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel, t.done = cancel, make(chan struct{})
	go t.loop(ctx)
}

func (t *truncator) stop() {
	t.stopOnce.Do(func() {
		t.cancel()
		<-t.done
	})
}

func (t *truncator) loop(ctx context.Context) {
	defer close(t.done)
	tick := time.NewTicker(t.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r, did, err := t.runOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if (did || err != nil) && t.onRound != nil {
			t.onRound(r)
		}
	}
}

// runOnce runs a round and records and logs it if it did something or
// failed. Called by the loop, or by tests with the loop stopped.
func (t *truncator) runOnce(ctx context.Context) (systems.GCRound, bool, error) {
	r, did, err := t.round(ctx)
	switch {
	case err != nil:
		if ctx.Err() != nil {
			return r, did, err // stopping: not a failure worth reporting
		}
		t.failures++
		r.Error = err.Error()
		t.hist.Record(r)
		if t.failures&(t.failures-1) == 0 { // 1, 2, 4, 8, ...: do not flood the log
			t.s.logger.Error("baseline: Raft log truncation failed; retrying next interval, the node keeps serving",
				"system", string(t.s.mode), "err", err, "failures", t.failures)
		}
	case did:
		t.failures = 0
		t.hist.Record(r)
		t.s.logger.Info("baseline: Raft log truncated", "system", string(t.s.mode),
			"compacted_index", r.CompactedIndex, "segments_removed", r.SegmentsRemoved,
			"reclaimed_bytes", r.ReclaimedBytes, "duration", r.End.Sub(r.Start).Round(time.Millisecond))
	}
	return r, did, err
}

// GCRounds implements systems.GCReporter: the most recent Raft log
// truncation rounds (Strategy TruncationStrategy) that did something or
// failed, oldest first; nil when truncation is off.
func (s *Store) GCRounds() []systems.GCRound {
	if s.trunc == nil {
		return nil
	}
	return s.trunc.hist.Rounds()
}

// GCTotals implements systems.GCTotalsReporter: sums over the Raft log
// truncation rounds (zero when truncation is off).
func (s *Store) GCTotals() systems.GCTotals {
	if s.trunc == nil {
		return systems.GCTotals{}
	}
	return s.trunc.hist.Totals()
}

func logBytes(segs []systems.SegmentInfo) int64 {
	var n int64
	for _, sg := range segs {
		n += sg.SizeBytes
	}
	return n
}

// highestSealed returns the highest LastIndex of a sealed segment in
// (above, atMost], or 0 if there is none.
func highestSealed(segs []systems.SegmentInfo, above, atMost uint64) uint64 {
	var c uint64
	for _, sg := range segs {
		if !sg.Active && sg.LastIndex > above && sg.LastIndex <= atMost {
			c = max(c, sg.LastIndex)
		}
	}
	return c
}

// round runs one truncation round (see the policy above). did reports
// whether it rolled, compacted or removed anything. The round's record is
// filled in also when err is not nil.
func (t *truncator) round(ctx context.Context) (r systems.GCRound, did bool, err error) {
	t.s.roundMu.Lock()
	defer t.s.roundMu.Unlock()
	r = systems.GCRound{Strategy: TruncationStrategy, Start: time.Now()}
	defer func() { r.End = time.Now() }()
	segs := t.ctl.Segments()
	r.CompactedIndex = t.ctl.CompactedIndex()
	if len(segs) == 0 || logBytes(segs) <= t.retain {
		return r, false, nil
	}
	// 2. Roll an active segment that alone exceeds the budget.
	if act := segs[len(segs)-1]; act.Active && act.LastIndex > 0 && act.SizeBytes > t.retain {
		if err := t.ctl.Roll(ctx); err != nil {
			return r, did, fmt.Errorf("roll the active segment: %w", err)
		}
		did = true
		segs = t.ctl.Segments()
	}
	// 3-5. Compact to the highest sealed index that is durable and not
	// needed by a live follower.
	compacted := t.ctl.CompactedIndex()
	if highestSealed(segs, compacted, t.ctl.CompactBound()) > 0 {
		applied, err := t.s.durableApplied()
		if err != nil {
			return r, did, err
		}
		if c := highestSealed(segs, compacted, min(applied, t.ctl.CompactBound())); c > 0 {
			if err := t.ctl.Compact(ctx, c); err != nil && t.ctl.CompactedIndex() < c {
				return r, did, fmt.Errorf("compact the Raft log to %d (durable applied index %d): %w", c, applied, err)
			}
			did = true
		}
	}
	r.CompactedIndex = t.ctl.CompactedIndex()
	err = removeCompacted(t.ctl, segs, &r)
	return r, did || r.SegmentsRemoved > 0, err
}

// removeCompacted removes the sealed segments of segs whose entries are
// all at or below r.CompactedIndex, adding them to r.
func removeCompacted(ctl systems.LogControl, segs []systems.SegmentInfo, r *systems.GCRound) error {
	var errs []error
	for _, sg := range segs {
		if sg.Active || sg.LastIndex > r.CompactedIndex {
			continue
		}
		if err := ctl.RemoveSegment(sg.ID); err != nil {
			errs = append(errs, fmt.Errorf("remove segment %d: %w", sg.ID, err))
			continue
		}
		r.SegmentsRemoved++
		r.ReclaimedBytes += sg.SizeBytes
	}
	return errors.Join(errs...)
}

// SnapshotTrigger is the systems.GCRound Trigger of a round TakeSnapshot
// ran.
const SnapshotTrigger = "snapshot"

var _ systems.SnapshotTaker = (*Store)(nil)

// TakeSnapshot implements systems.SnapshotTaker: a truncation round that
// runs now, whatever -rocksdb.logRetainBytes (also 0, truncation off),
// serialized with the background rounds. It rolls the active segment
// (so that its entries can go once compacted), makes the applied state
// durable (durableApplied: a synced WAL write, or pasv's flush), compacts
// the log to min(that applied index, LogControl.CompactBound) - not only
// to a sealed segment's end, as the background rounds do - and removes the
// sealed segments at or below the compaction point. It returns the
// compaction point; the round is kept with GCRounds when truncation is on.
func (s *Store) TakeSnapshot(ctx context.Context) (uint64, error) {
	if s.ctl == nil {
		return 0, fmt.Errorf("%w: the %s store has no Raft log to compact", systems.ErrSnapshotUnsupported, s.mode)
	}
	s.roundMu.Lock()
	r, err := s.snapshotRound(ctx)
	s.roundMu.Unlock()
	if err != nil {
		r.Error = err.Error()
		s.logger.Error("baseline: snapshot failed", "system", string(s.mode), "err", err)
	} else {
		s.logger.Info("baseline: snapshot taken: Raft log truncated", "system", string(s.mode),
			"compacted_index", r.CompactedIndex, "segments_removed", r.SegmentsRemoved, "reclaimed_bytes", r.ReclaimedBytes)
	}
	if s.trunc != nil {
		s.trunc.hist.Record(r)
	}
	return r.CompactedIndex, err
}

// snapshotRound is TakeSnapshot's round; the caller holds roundMu.
func (s *Store) snapshotRound(ctx context.Context) (r systems.GCRound, err error) {
	r = systems.GCRound{Strategy: TruncationStrategy, Trigger: SnapshotTrigger, Start: time.Now()}
	defer func() { r.End = time.Now() }()
	r.CompactedIndex = s.ctl.CompactedIndex()
	if s.lr != nil {
		// An lsm-raft follower's held entries are applied but not in
		// RocksDB: write them first.
		if err := s.lr.replayNow(replaySnapshot); err != nil {
			return r, err
		}
	}
	segs := s.ctl.Segments()
	if act := segs[len(segs)-1]; act.Active && act.LastIndex > 0 && act.FirstIndex <= s.ctl.CompactBound() {
		if err := s.ctl.Roll(ctx); err != nil {
			return r, fmt.Errorf("roll the active segment: %w", err)
		}
		segs = s.ctl.Segments()
	}
	applied, err := s.durableApplied()
	if err != nil {
		return r, err
	}
	if c := min(applied, s.ctl.CompactBound()); c > s.ctl.CompactedIndex() {
		if err := s.ctl.Compact(ctx, c); err != nil && s.ctl.CompactedIndex() < c {
			return r, fmt.Errorf("compact the Raft log to %d (durable applied index %d): %w", c, applied, err)
		}
	}
	r.CompactedIndex = s.ctl.CompactedIndex()
	return r, removeCompacted(s.ctl, segs, &r)
}

// durableApplied makes every entry applied so far durable in RocksDB and
// returns an applied index whose state is durable (step 4 of the policy):
// a synced WAL write in original and blobdb mode, a memtable flush
// (flushApplied) in pasv mode, which has no WAL.
func (s *Store) durableApplied() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, ErrClosed
	}
	if s.mode != ModePASV {
		// Apply stores the applied index after its WriteBatch (data and
		// meta) reached the WAL file; the sync covers every such write.
		// An lsm-raft follower's index is the last span it ingested (SST
		// files, synced by the ingestion) or batch it wrote.
		a := s.storedIndex()
		if err := s.rocksIO(vfs.OpSync, rocksWAL, 0); err != nil {
			return 0, fmt.Errorf("%s: rocksdb WAL sync: %w", s.mode, err)
		}
		if err := s.db.FlushWAL(true); err != nil {
			return 0, fmt.Errorf("%s: rocksdb WAL sync: %w", s.mode, s.observe(vfs.OpSync, err))
		}
		return a, nil
	}
	return s.flushApplied()
}
