package baseline

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/nezha-harness/nezha/systems"
)

// Raft snapshots of a baseline node (needed once the Raft log is truncated:
// a follower that was down gets the leader's state instead of the entries).
//
// Sending (WriteSnapshot): every user key and value in key order, read from
// one RocksDB snapshot, so the stream is exactly the state at one applied
// index at or above the leader's compaction point.
//
// Receiving, crash-safe in two steps around the node recording the snapshot
// in its Raft log (systems.Snapshotter):
//
//   - PrepareRestore builds the new state as a complete database in
//     <data>/rocksdb.restore/ (same options and column families, writes
//     without WAL, a flush of the user data, then the applied index = the
//     snapshot index written into the meta column family and flushed, the
//     order flushApplied keeps), then writes the
//     marker <data>/rocksdb.restore.pending holding the index (temp file,
//     fsync, rename, directory fsync). The live database is untouched.
//   - CommitRestore, with the store locked exclusively, closes the live
//     database, renames rocksdb/ -> rocksdb.old/ and rocksdb.restore/ ->
//     rocksdb/, fsyncs <data>, removes the marker, fsyncs <data> again,
//     deletes rocksdb.old/ and reopens.
//
// Open finishes or discards an interrupted restore: with the marker present
// and the log's compaction point at or above the marker's index the log
// recorded the snapshot, so the swap is completed (every step is
// idempotent, told apart by which directories exist); otherwise the staged
// database and the marker are deleted and the old state stays. Without a
// marker, a leftover rocksdb.restore/ (crash inside PrepareRestore) or
// rocksdb.old/ (crash after the marker was removed) is deleted.

const (
	// stagedDirName is the database a restore is staged in.
	stagedDirName = dbDirName + ".restore"
	// oldDirName holds the replaced database during the swap.
	oldDirName = dbDirName + ".old"
	// restoreMarkerName marks a complete staged restore; it holds the
	// snapshot's Raft index in decimal and a newline.
	restoreMarkerName = dbDirName + ".restore.pending"
)

// restoreBatchBytes bounds one WriteBatch of PrepareRestore.
const restoreBatchBytes = 4 << 20

// WriteSnapshot implements systems.Snapshotter: every user key and value,
// in key order, from one RocksDB snapshot (the state at one applied index;
// on an lsm-raft follower with the entries it holds over it).
// It does not fill the block cache. Apply, Get and Scan go on meanwhile;
// Close and CommitRestore wait for it.
func (s *Store) WriteSnapshot(w *systems.SnapshotWriter) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	var release func()
	it, held := s.view(func() *grocksdb.Iterator {
		var ro *grocksdb.ReadOptions
		ro, release = s.snapshotReads()
		return s.db.NewIteratorCF(ro, s.data)
	})
	defer release()
	defer it.Close()
	m := newMergedIter(it, held, nil)
	for m.seek(nil); m.valid; m.next() {
		if err := w.Add(m.key, m.value); err != nil {
			return fmt.Errorf("%s: write snapshot: %w", s.mode, err)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("%s: write snapshot: rocksdb iterate: %w", s.mode, err)
	}
	return nil
}

// PrepareRestore implements systems.Snapshotter: it writes the pairs of r
// and the applied index `index` into a new database in
// <data>/rocksdb.restore/ (deleted first if it exists), makes it durable
// and writes the restore marker. Nothing visible changes. A previous staged
// restore that was never committed is discarded.
func (s *Store) PrepareRestore(index uint64, r *systems.SnapshotReader) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	if index == 0 {
		return fmt.Errorf("%s: prepare restore: snapshot index 0", s.mode)
	}
	start := time.Now()
	if err := s.discardStaged(); err != nil {
		return fmt.Errorf("%s: prepare restore: %w", s.mode, err)
	}
	staged := filepath.Join(s.root, stagedDirName)
	n, bytes, err := s.buildStaged(staged, index, r)
	if err != nil {
		os.RemoveAll(staged)
		return fmt.Errorf("%s: prepare restore at index %d: %w", s.mode, index, err)
	}
	if err := writeMarker(s.root, index); err != nil {
		os.RemoveAll(staged)
		return fmt.Errorf("%s: prepare restore at index %d: %w", s.mode, index, err)
	}
	s.logger.Info("baseline: snapshot staged", "system", string(s.mode), "index", index,
		"pairs", n, "bytes", bytes, "dir", staged, "duration", time.Since(start).Round(time.Millisecond))
	return nil
}

// buildStaged writes the new database into dir and closes it, durable.
func (s *Store) buildStaged(dir string, index uint64, r *systems.SnapshotReader) (n, bytes int64, err error) {
	db, cfs, err := grocksdb.OpenDbColumnFamilies(s.dbOpts, dir,
		[]string{"default", metaCFName}, []*grocksdb.Options{s.dbOpts, s.metaOpts})
	if err != nil {
		return 0, 0, fmt.Errorf("create rocksdb %s: %w", dir, err)
	}
	data, meta := cfs[0], cfs[1]
	defer func() {
		data.Destroy()
		meta.Destroy()
		db.Close()
	}()
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	wo.DisableWAL(true) // the flush below makes it durable
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	pending := 0
	for r.Next() {
		k, v := r.Key(), r.Value()
		wb.PutCF(data, k, v)
		n++
		bytes += int64(len(k) + len(v))
		if pending += len(k) + len(v); pending >= restoreBatchBytes {
			if err := db.Write(wo, wb); err != nil {
				return n, bytes, fmt.Errorf("rocksdb write: %w", err)
			}
			wb.Clear()
			pending = 0
		}
	}
	if err := r.Err(); err != nil {
		return n, bytes, err
	}
	if err := db.Write(wo, wb); err != nil {
		return n, bytes, fmt.Errorf("rocksdb write: %w", err)
	}
	// The user data first, then the applied index (as flushApplied does;
	// the marker, written after both, is what makes the restore count).
	fo := grocksdb.NewDefaultFlushOptions()
	defer fo.Destroy()
	fo.SetWait(true)
	if err := db.FlushCF(data, fo); err != nil {
		return n, bytes, fmt.Errorf("rocksdb flush of column family default: %w", err)
	}
	if err := db.PutCF(wo, meta, []byte(appliedKey), appliedValue(index)); err != nil {
		return n, bytes, fmt.Errorf("rocksdb write of the applied index: %w", err)
	}
	if err := db.FlushCF(meta, fo); err != nil {
		return n, bytes, fmt.Errorf("rocksdb flush of column family %s: %w", metaCFName, err)
	}
	return n, bytes, nil
}

// CommitRestore implements systems.Snapshotter: it swaps the staged
// database in and reopens it; AppliedIndex becomes index. Get, Scan, Apply,
// StateHash, WriteSnapshot and the truncation's RocksDB work wait for it.
// If it fails after closing the live database the store is closed (the
// node stops; Open finishes the swap on restart).
func (s *Store) CommitRestore(index uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	staged, pending, err := readMarker(s.root)
	if err != nil {
		return fmt.Errorf("%s: commit restore: %w", s.mode, err)
	}
	if !pending || staged != index {
		return fmt.Errorf("%s: commit restore at index %d: no snapshot staged for it (marker: present %v, index %d)",
			s.mode, index, pending, staged)
	}
	s.closeDB()
	fail := func(err error) error {
		s.closed = true
		s.release()
		return fmt.Errorf("%s: commit restore at index %d: %w", s.mode, index, err)
	}
	if err := finishSwap(s.root); err != nil {
		return fail(err)
	}
	if err := s.openDB(); err != nil {
		return fail(err)
	}
	if got := s.applied.Load(); got != index {
		return fail(fmt.Errorf("%w: restored database has applied index %d", systems.ErrCorrupt, got))
	}
	if s.lr != nil {
		s.lr.restored(index)
	}
	s.logger.Info("baseline: snapshot restored", "system", string(s.mode), "index", index)
	return nil
}

// discardStaged removes a staged restore (marker first, then the
// database). Caller holds mu.
func (s *Store) discardStaged() error {
	marker := filepath.Join(s.root, restoreMarkerName)
	if err := os.Remove(marker); err == nil {
		if err := syncDir(s.root); err != nil {
			return err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.RemoveAll(filepath.Join(s.root, stagedDirName))
}

// recoverRestore finishes or discards a restore interrupted by a crash
// (see the top of this file). Called by Open before the database opens.
func (s *Store) recoverRestore() error {
	live := filepath.Join(s.root, dbDirName)
	staged := filepath.Join(s.root, stagedDirName)
	old := filepath.Join(s.root, oldDirName)
	os.Remove(filepath.Join(s.root, restoreMarkerName+".tmp"))
	index, pending, err := readMarker(s.root)
	if err != nil {
		return err
	}
	if pending {
		compacted := uint64(0)
		if s.ctl != nil {
			compacted = s.ctl.CompactedIndex()
		}
		if compacted >= index {
			s.logger.Warn("baseline: finishing a snapshot restore interrupted by a restart",
				"system", string(s.mode), "index", index, "log_compacted_index", compacted)
			return finishSwap(s.root)
		}
		s.logger.Warn("baseline: discarding a staged snapshot the Raft log did not record",
			"system", string(s.mode), "index", index, "log_compacted_index", compacted)
		if err := os.Remove(filepath.Join(s.root, restoreMarkerName)); err != nil {
			return err
		}
		if err := syncDir(s.root); err != nil {
			return err
		}
	}
	// No restore pending. The swap renames the live database away only
	// after the log recorded the snapshot, so this never finds it missing;
	// be safe anyway.
	if !exists(live) && exists(old) {
		if err := os.Rename(old, live); err != nil {
			return err
		}
		if err := syncDir(s.root); err != nil {
			return err
		}
	}
	return errors.Join(os.RemoveAll(staged), os.RemoveAll(old))
}

// finishSwap makes the staged database the live one; idempotent, so that
// Open can run it again after a crash at any step.
func finishSwap(root string) error {
	live := filepath.Join(root, dbDirName)
	staged := filepath.Join(root, stagedDirName)
	old := filepath.Join(root, oldDirName)
	if exists(staged) {
		if exists(live) {
			if err := os.RemoveAll(old); err != nil {
				return err
			}
			if err := os.Rename(live, old); err != nil {
				return err
			}
		}
		if err := os.Rename(staged, live); err != nil {
			return err
		}
		if err := syncDir(root); err != nil {
			return err
		}
	}
	if !exists(live) {
		return fmt.Errorf("%w: restore marker in %s, but neither %s nor %s exists", systems.ErrCorrupt, root, dbDirName, stagedDirName)
	}
	if err := os.Remove(filepath.Join(root, restoreMarkerName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := syncDir(root); err != nil {
		return err
	}
	return os.RemoveAll(old)
}

// writeMarker writes the restore marker atomically and durably.
func writeMarker(root string, index uint64) error {
	path := filepath.Join(root, restoreMarkerName)
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.WriteString(strconv.FormatUint(index, 10) + "\n")
	if err := errors.Join(err, f.Sync(), f.Close()); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(root)
}

// readMarker reads the restore marker; pending is false if there is none.
// A marker that does not hold an index wraps systems.ErrCorrupt.
func readMarker(root string) (index uint64, pending bool, err error) {
	path := filepath.Join(root, restoreMarkerName)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	index, err = strconv.ParseUint(strings.TrimSuffix(string(b), "\n"), 10, 64)
	if err != nil || index == 0 {
		return 0, false, fmt.Errorf("%w: restore marker %s holds %q, not a Raft index", systems.ErrCorrupt, path, b)
	}
	return index, true, nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// syncDir fsyncs a directory, making renames and removals in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}
