package nezha

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// manifestName is the file under sorted/ that says which runs are live.
// It is replaced atomically (write, fsync, rename, fsync the directory).
const manifestName = "MANIFEST"

// manifest is the durable state of the Final Compacted Storage.
type manifest struct {
	// Runs are the live runs, oldest first.
	Runs []uint64 `json:"runs"`
	// NextRun is the id of the next run to write.
	NextRun uint64 `json:"next_run"`
	// Restore is a Raft snapshot that was staged as run Restore.Run for
	// index Restore.Index and is not yet current (see Store.PrepareRestore).
	Restore *pendingRestore `json:"restore,omitempty"`
}

type pendingRestore struct {
	Index uint64 `json:"index"`
	Run   uint64 `json:"run"`
}

func readManifest(dir string) (manifest, error) {
	m := manifest{NextRun: 1}
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("nezha: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("nezha: %s: %w", filepath.Join(dir, manifestName), err)
	}
	return m, nil
}

func (m manifest) write(dir string) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, manifestName+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("nezha: write manifest: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("nezha: write manifest: %w", err)
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return fmt.Errorf("nezha: write manifest: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, manifestName)); err != nil {
		return fmt.Errorf("nezha: write manifest: %w", err)
	}
	return syncDir(dir)
}

func (m manifest) hasRun(id uint64) bool {
	for _, r := range m.Runs {
		if r == id {
			return true
		}
	}
	return false
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("nezha: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("nezha: fsync %s: %w", dir, err)
	}
	return nil
}
