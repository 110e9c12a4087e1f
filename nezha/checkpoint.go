package nezha

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/systems"
)

// A memory index checkpoint (<data>/index.ckpt) lets a node with
// -index memory restart after GC compacted the Raft log, when the log alone
// can no longer rebuild the index. GC writes one before each log compaction.
// Format: a systems snapshot stream whose first pair has an empty key and
// the applied index (8 bytes, big endian) as value, then user key ->
// encoded Location pairs in key order.
const checkpointName = "index.ckpt"

// writeCheckpoint writes a consistent checkpoint of x to path atomically
// and durably.
func writeCheckpoint(fs *vfs.FS, x *MemoryIndex, path string) error {
	tmp := path + ".tmp"
	f, err := fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("nezha: checkpoint: %w", err)
	}
	defer fs.Base().Remove(tmp)
	view, err := x.View()
	if err != nil {
		f.Close()
		return err
	}
	w := systems.NewSnapshotWriter(f)
	var a [8]byte
	err = w.Add(nil, binary.BigEndian.AppendUint64(a[:0], view.AppliedIndex()))
	if err == nil {
		err = view.Iterate(nil, nil, func(key []byte, loc systems.Location) (bool, error) {
			return true, w.Add(key, appendLocation(nil, loc))
		})
	}
	view.Release()
	if err == nil {
		err = w.Close()
	}
	if err = errors.Join(err, f.Sync(), f.Close()); err != nil {
		return fmt.Errorf("nezha: checkpoint: %w", err)
	}
	if err := fs.Base().Rename(tmp, path); err != nil {
		return fmt.Errorf("nezha: checkpoint: %w", err)
	}
	// The rename is durable once the directory is synced. Without it a
	// crash after the log compaction that follows could bring back the
	// previous checkpoint, below the compaction point: the node could not
	// rebuild its index and would not start.
	if err := fs.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("nezha: checkpoint: %w", err)
	}
	return nil
}

// loadCheckpoint fills an empty memory index from path of fsys, if it
// exists.
func loadCheckpoint(fsys vfs.FileSystem, x *MemoryIndex, path string) (bool, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("nezha: checkpoint: %w", err)
	}
	defer f.Close()
	r := systems.NewSnapshotReader(f)
	if !r.Next() || len(r.Key()) != 0 || len(r.Value()) != 8 {
		return false, fmt.Errorf("nezha: checkpoint %s: %w: no applied index", path, systems.ErrCorrupt)
	}
	var b IndexBatch
	b.SetApplied(binary.BigEndian.Uint64(r.Value()))
	for r.Next() {
		loc, err := decodeLocation(r.Value())
		if err != nil {
			return false, fmt.Errorf("nezha: checkpoint %s: %w", path, err)
		}
		b.Put(r.Key(), loc)
	}
	if err := r.Err(); err != nil {
		return false, fmt.Errorf("nezha: checkpoint %s: %w", path, err)
	}
	return true, x.Write(&b)
}
