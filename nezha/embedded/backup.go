package embedded

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/nezha-harness/nezha/nezha"
	"github.com/nezha-harness/nezha/raftkv/raftlog"
	"github.com/nezha-harness/nezha/systems"
)

// Backup writes a consistent copy of the DB into dir (created; it must not
// exist or be empty): a DB directory that Open opens, holding every live
// pair as of one applied index. It is the replicated store's snapshot
// path (nezha.Store.WriteSnapshot streamed into PrepareRestore and
// CommitRestore of a new store, whose log records the snapshot like a
// follower's): the copy holds one sorted run and an empty value log.
// Writes wait while it runs (the committer is held, so the copy is one
// point in time); reads and GC go on. The copy is written into a new
// directory beside dir (named dir's base + ".backup-*") and renamed to dir
// once complete, so dir never holds a partial copy: a Backup that fails
// removes it, one cut short by a crash leaves it under its temporary name.
func (db *DB) Backup(dir string) error {
	if dir == "" {
		return errors.New("embedded: backup: a directory is required")
	}
	if err := db.beginRead(); err != nil {
		return err
	}
	defer db.reading.RUnlock()
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return fmt.Errorf("embedded: backup: %s is not empty", dir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("embedded: backup: %w", err)
	}
	dir = filepath.Clean(dir)
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("embedded: backup: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, filepath.Base(dir)+".backup-*")
	if err != nil {
		return fmt.Errorf("embedded: backup: %w", err)
	}
	if err := db.backupInto(tmp); err != nil {
		return errors.Join(err, os.RemoveAll(tmp))
	}
	// rename(2) replaces dir if it is an empty directory.
	if err := os.Rename(tmp, dir); err != nil {
		return errors.Join(fmt.Errorf("embedded: backup: %w", err), os.RemoveAll(tmp))
	}
	if err := syncDir(parent); err != nil {
		return fmt.Errorf("embedded: backup: %w", err)
	}
	return nil
}

// syncDir fsyncs the directory dir (its entries: a rename in it).
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

// backupInto writes the copy into the empty directory dir.
func (db *DB) backupInto(dir string) error {
	db.commitMu.Lock()
	defer db.commitMu.Unlock()
	index := db.applied.Load()

	lo := raftlog.DefaultOptions(filepath.Join(dir, nezha.ValueLogDir))
	lo.SegmentSizeBytes = db.opts.SegmentSizeBytes
	lo.Bootstrap = confState
	lo.EntryCacheBytes = 0
	lo.Logger = db.opts.Logger
	l, err := raftlog.Open(lo)
	if err != nil {
		return fmt.Errorf("embedded: backup: %w", err)
	}
	// The copy's store has no GC: it only restores. Open gives it the
	// DB's own configuration.
	cfg, err := nezha.DefaultConfig(nezha.NameNoGC)
	if err != nil {
		l.Close()
		return err
	}
	cfg.Index = db.opts.Store.Index
	s, err := cfg.OpenStore(systems.Env{Dir: dir, Log: l, Logger: db.opts.Logger})
	if err != nil {
		l.Close()
		return fmt.Errorf("embedded: backup: %w", err)
	}
	err = db.restoreInto(s, l, index)
	return errors.Join(err, s.Close(), l.Close())
}

// restoreInto streams the DB's pairs into s at index and records the
// snapshot in l. Caller holds commitMu.
func (db *DB) restoreInto(s *nezha.Store, l *raftlog.Log, index uint64) error {
	if index == 0 {
		return nil // nothing was ever written
	}
	pr, pw := io.Pipe()
	written := make(chan error, 1)
	go func() {
		w := systems.NewSnapshotWriter(pw)
		err := db.store.WriteSnapshot(w)
		if err == nil {
			err = w.Close()
		}
		pw.CloseWithError(err)
		written <- err
	}()
	err := s.PrepareRestore(index, systems.NewSnapshotReader(pr))
	pr.CloseWithError(errors.New("embedded: backup: restore ended"))
	werr := <-written
	if werr != nil {
		// The reader's error is then only the stream's end.
		return fmt.Errorf("embedded: backup: write snapshot: %w", werr)
	}
	if err != nil {
		return fmt.Errorf("embedded: backup: %w", err)
	}
	if err := l.ApplySnapshot(raftpb.SnapshotMetadata{Index: index, Term: term, ConfState: confState}); err != nil {
		return fmt.Errorf("embedded: backup: %w", err)
	}
	// The commit index Open replays up to (without it, the copy's log
	// recovers with an empty HardState and repairs it with a warning).
	if err := l.Append(raftpb.HardState{Term: term, Vote: 1, Commit: index}, nil, true); err != nil {
		return fmt.Errorf("embedded: backup: %w", err)
	}
	if err := s.CommitRestore(index); err != nil {
		return fmt.Errorf("embedded: backup: %w", err)
	}
	return nil
}
