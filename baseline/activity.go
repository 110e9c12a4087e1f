package baseline

import (
	"context"
	"fmt"
	"time"

	"github.com/nezha-harness/nezha/systems"
)

// activityPoll is how often a store reads RocksDB's compaction and write
// stall state for its activities (Activities). RocksDB's C API has no
// event listener, so the state is polled: a compaction or stall shorter
// than activityPoll may be missed, and every start and end is known to
// within activityPoll. A poll is three integer property reads.
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
	for _, k := range []string{systems.ActivityCompaction, systems.ActivityWriteStall} {
		if s.acts.Going(k) {
			s.acts.End(k, now, 0, "store closed")
		}
	}
}

// rocksActivity is RocksDB's state at one poll (DB-wide properties).
type rocksActivity struct {
	compactions uint64 // rocksdb.num-running-compactions
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
	var okC, okS, okD bool
	a.compactions, okC = s.db.GetIntProperty("rocksdb.num-running-compactions")
	a.stopped, okS = s.db.GetIntProperty("rocksdb.is-write-stopped")
	a.delayedRate, okD = s.db.GetIntProperty("rocksdb.actual-delayed-write-rate")
	return a, okC && okS && okD
}

// recordActivity begins or ends the compaction and write stall
// activities by the state a read at now.
func (s *Store) recordActivity(now time.Time, a rocksActivity) {
	switch {
	case a.compactions > 0:
		s.acts.Begin(systems.ActivityCompaction, now, "")
	case s.acts.Going(systems.ActivityCompaction):
		s.acts.End(systems.ActivityCompaction, now, 0, "")
	}
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
// (while at least one runs) and write stalls (while writes are stopped
// or delayed), as polled every activityPoll.
func (s *Store) Activities(since time.Time) []systems.Activity { return s.acts.Since(since) }
