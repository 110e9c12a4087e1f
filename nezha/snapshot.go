package nezha

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/nezha-harness/nezha/systems"
)

// Raft snapshots of a nezha node. A follower that needs entries the leader
// compacted receives the leader's live data as a key-ordered stream
// (WriteSnapshot); it writes the stream straight into a new sorted run
// (PrepareRestore) and, once the node has recorded the snapshot in its log,
// rebuilds its index to point into that run (CommitRestore). The snapshot
// is the node's storage (log and sorted runs) plus the index, carried as
// the pairs they describe, so that it does not depend on the leader's file
// layout (docs/architecture.md section 4.5).

// WriteSnapshot implements systems.Snapshotter: every live key and value in
// key order. It reads the index in chunks, each under the gate, so neither
// Apply nor GC waits for the whole stream. The result is fuzzy: each key's
// value is its value at some moment after the snapshot's index, which is
// all a follower that then replays the log from that index needs
// (replaying puts and deletes in order is idempotent).
//
// Keys expired by the store's clock are left out; a key with a TTL carries
// its expiry time in the stream (SnapshotWriter.AddExpiring).
func (s *Store) WriteSnapshot(w *systems.SnapshotWriter) error {
	return s.iterateChunks(256, func(keys [][]byte, locs []systems.Location) error {
		keys, locs = liveOnly(keys, locs, s.nowUnixNano())
		vals, err := s.readValues(keys, locs)
		if err != nil {
			return err
		}
		for i := range keys {
			if err := w.AddExpiring(keys[i], vals[i], locs[i].ExpiresUnixNano); err != nil {
				return err
			}
		}
		return nil
	})
}

// liveOnly returns the pairs of keys and locs not expired at now (in
// place).
func liveOnly(keys [][]byte, locs []systems.Location, now int64) ([][]byte, []systems.Location) {
	n := 0
	for i := range keys {
		if !locs[i].Expired(now) {
			keys[n], locs[n] = keys[i], locs[i]
			n++
		}
	}
	return keys[:n], locs[:n]
}

// PrepareRestore implements systems.Snapshotter: it writes the pairs of r
// into a new run (every record carries Raft index `index`), fsyncs it and
// records it in the manifest as a pending restore. Nothing visible changes.
func (s *Store) PrepareRestore(index uint64, r *systems.SnapshotReader) error {
	s.manMu.Lock()
	id := s.man.NextRun
	s.man.NextRun++
	s.manMu.Unlock()
	create := fsCreate(s.fs)
	if s.gc != nil {
		create = s.gc.create
	}
	w, err := newRunWriter(create, s.sortedDir, id)
	if err != nil {
		return err
	}
	for r.Next() {
		if _, err := w.Add(r.Key(), r.Value(), index, r.ExpiresUnixNano()); err != nil {
			w.Abort(s.fs.Base())
			return err
		}
	}
	if err := r.Err(); err != nil {
		w.Abort(s.fs.Base())
		return err
	}
	if _, err := w.Finish(); err != nil {
		w.Abort(s.fs.Base())
		return err
	}
	s.manMu.Lock()
	defer s.manMu.Unlock()
	m := s.man
	m.Restore = &pendingRestore{Index: index, Run: id}
	if err := m.write(s.fs, s.sortedDir); err != nil {
		s.fs.Base().Remove(w.path)
		return err
	}
	s.man = m
	s.logger.Info("nezha: snapshot staged", "index", index, "run", runName(id), "records", w.records)
	return nil
}

// CommitRestore implements systems.Snapshotter: the staged run becomes the
// whole Final Compacted Storage and the index is rebuilt to point into it,
// with applied index `index`. GC is paused and reads wait meanwhile.
func (s *Store) CommitRestore(index uint64) error {
	s.manMu.Lock()
	p := s.man.Restore
	s.manMu.Unlock()
	if p == nil || p.Index != index {
		return fmt.Errorf("nezha: commit restore at %d: no snapshot staged for it", index)
	}
	if s.gc != nil {
		s.gc.stop()
		defer s.gc.start()
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.gate.Lock()
	defer s.gate.Unlock()
	return s.finishRestore(*p)
}

// finishRestore replaces the index and the runs with the staged run. It is
// idempotent: Open calls it again after a crash in the middle. Caller holds
// applyMu and gate (or is Open).
func (s *Store) finishRestore(p pendingRestore) error {
	if s.index != nil { // nil: Open, which does not open the index first
		if err := s.index.Close(); err != nil {
			return fmt.Errorf("nezha: close index for restore: %w", err)
		}
	}
	if err := errors.Join(s.fs.Base().RemoveAll(filepath.Join(s.dir, IndexDir)), s.fs.Base().RemoveAll(filepath.Join(s.dir, checkpointName))); err != nil {
		return fmt.Errorf("nezha: wipe index for restore: %w", err)
	}
	x, err := openIndex(s.cfg.Index, filepath.Join(s.dir, IndexDir), s.cfg.IndexCacheEntries)
	if err != nil {
		return err
	}
	s.index = x
	rn := s.runs.get(p.Run)
	if rn == nil {
		if rn, err = openRun(s.fs, s.sortedDir, p.Run); err != nil {
			return err
		}
		s.runs.add(rn)
	}
	rn.tier = tierFor(rn.dataBytes, s.cfg.GCFanout)
	var b IndexBatch
	live := map[uint64]int64{}
	var keys int64
	err = rn.iterate(nil, func(key, _ []byte, loc systems.Location) (bool, error) {
		b.Put(key, loc)
		keys++
		live[loc.Segment] += int64(loc.Length)
		if b.Len() >= 4096 {
			b.SetApplied(p.Index)
			if err := s.index.Write(&b); err != nil {
				return false, err
			}
			b.Reset()
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	b.SetApplied(p.Index)
	if err := s.index.Write(&b); err != nil {
		return err
	}
	if err := s.syncIndex(); err != nil {
		return err
	}
	s.manMu.Lock()
	old := s.man.Runs
	m := s.man
	m.Runs, m.Tiers, m.Restore = []uint64{p.Run}, map[uint64]int{p.Run: rn.tier}, nil
	err = m.write(s.fs, s.sortedDir)
	if err == nil {
		s.man = m
	}
	s.manMu.Unlock()
	if err != nil {
		return err
	}
	for _, id := range old {
		if id != p.Run {
			if err := s.runs.remove(id); err != nil {
				return err
			}
		}
	}
	if s.gc != nil {
		// The collector is stopped; its loop fills the new key filter
		// when CommitRestore starts it again.
		s.gc.keys, s.gc.filling = nil, newKeyFilter(int(keys))
		s.gc.live, s.gc.dead, s.gc.liveKeys = live, map[uint64]int64{}, keys
		if s.ctl != nil {
			for _, sg := range s.ctl.Segments() {
				s.gc.dead[sg.ID] = sg.SizeBytes // the log before the snapshot holds no live value
			}
		}
		s.gc.noteGarbage()
	}
	s.logger.Info("nezha: snapshot restored", "index", p.Index, "run", runName(p.Run), "records", rn.records)
	return nil
}
