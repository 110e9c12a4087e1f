package baseline

import (
	"context"
	"fmt"
	"time"

	"github.com/nezha-harness/nezha/systems"
)

// activityPoll is how often a store reads RocksDB's write stall state
// for its activities (Activities). RocksDB's C API has no event listener,
// and RocksDB's info log, where the compactions are read from (jobs.go),
// says when a stall begins but not when it ends, so the state is polled:
// a stall shorter than activityPoll may be missed, and every start and end
// is known to within activityPoll. A poll is two integer property reads.
const activityPoll = 50 * time.Millisecond

// activityWatch polls a store's RocksDB state in the background.
type activityWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startActivityWatch starts polling; stopActivityWatch stops it and ends
// the activities going on.
func (s *Store) startActivityWatch() {
	ctx, cancel := context.WithCancel(context.Background())
	s.watch = &activityWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.watch.done)
		t := time.NewTicker(activityPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				s.pollActivities(now)
			}
		}
	}()
}

func (s *Store) stopActivityWatch() {
	if s.watch == nil {
		return
	}
	s.watch.cancel()
	<-s.watch.done
	now := time.Now()
	if s.acts.Going(systems.ActivityWriteStall) {
		s.acts.End(systems.ActivityWriteStall, now, 0, "store closed")
	}
}

// rocksActivity is RocksDB's state at one poll (DB-wide properties).
type rocksActivity struct {
	stopped     uint64 // rocksdb.is-write-stopped: 1 while writes are stopped
	delayedRate uint64 // rocksdb.actual-delayed-write-rate: bytes/s, 0 if writes are not delayed
}

// pollActivities reads RocksDB's state and records it.
func (s *Store) pollActivities(now time.Time) {
	if a, ok := s.readActivity(); ok {
		s.recordActivity(now, a)
	}
}

// readActivity reads RocksDB's state; ok is false if the store is closed
// or a property could not be read.
func (s *Store) readActivity() (a rocksActivity, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed || s.db == nil {
		return a, false
	}
	var okS, okD bool
	a.stopped, okS = s.db.GetIntProperty("rocksdb.is-write-stopped")
	a.delayedRate, okD = s.db.GetIntProperty("rocksdb.actual-delayed-write-rate")
	return a, okS && okD
}

// recordActivity begins or ends the write stall activity by the state a
// read at now.
func (s *Store) recordActivity(now time.Time, a rocksActivity) {
	switch {
	case a.stopped > 0:
		s.acts.Begin(systems.ActivityWriteStall, now, "writes stopped")
	case a.delayedRate > 0:
		s.acts.Begin(systems.ActivityWriteStall, now, fmt.Sprintf("writes delayed to %.1f MB/s", float64(a.delayedRate)/1e6))
	case s.acts.Going(systems.ActivityWriteStall):
		s.acts.End(systems.ActivityWriteStall, now, 0, "")
	}
}

// Activities implements systems.ActivityReporter: RocksDB's compactions
// of the user data (the meta column family's, of the one key of the
// applied index, left out), one per compaction job, timed by RocksDB
// itself (its info log, jobs.go:
// the jobs since the node started, those a snapshot restore cut short
// excepted), and write stalls (while writes are stopped or delayed), as
// polled every activityPoll.
func (s *Store) Activities(since time.Time) []systems.Activity {
	acts := s.acts.Since(since)
	for _, j := range s.jobs.jobs() {
		if j.kind != jobCompaction || j.cf == metaCFName || !j.end.IsZero() && j.end.Before(since) {
			continue
		}
		acts = append(acts, systems.Activity{Kind: systems.ActivityCompaction, Start: j.start, End: j.end, Bytes: j.outputBytes, Detail: j.detail()})
	}
	systems.SortActivities(acts)
	return acts
}
