package nezha

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/nezha-harness/nezha/internal/vfs"
)

// manifestName is the file under sorted/ that says which runs are live.
// It is replaced atomically (write, fsync, rename, fsync the directory).
const manifestName = "MANIFEST"

// manifestVersion is the version this build writes: 2 added Tiers. A
// version-1 manifest (no version field) is read with every run's tier
// taken from its size (tierFor); a newer version is refused.
const manifestVersion = 2

// manifest is the durable state of the Final Compacted Storage.
type manifest struct {
	Version int `json:"version,omitempty"`
	// Runs are the live runs, oldest first.
	Runs []uint64 `json:"runs"`
	// Tiers is the tier of each run in Runs (tiered GC; see tierFor).
	Tiers map[uint64]int `json:"tiers,omitempty"`
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

func readManifest(fsys vfs.FileSystem, dir string) (manifest, error) {
	m := manifest{NextRun: 1}
	b, err := vfs.ReadFile(fsys, filepath.Join(dir, manifestName))
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("nezha: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("nezha: %s: %w", filepath.Join(dir, manifestName), err)
	}
	if m.Version > manifestVersion {
		return m, fmt.Errorf("nezha: %s is version %d, written by a newer nezha; this build reads versions up to %d",
			filepath.Join(dir, manifestName), m.Version, manifestVersion)
	}
	return m, nil
}

// withRun returns a copy of m that also lists run id at tier.
func (m manifest) withRun(id uint64, tier int) manifest {
	m.Runs = append(append([]uint64(nil), m.Runs...), id)
	tiers := make(map[uint64]int, len(m.Tiers)+1)
	for r, t := range m.Tiers {
		tiers[r] = t
	}
	tiers[id] = tier
	m.Tiers = tiers
	return m
}

// withoutRuns returns a copy of m that no longer lists the runs ids.
func (m manifest) withoutRuns(ids []uint64) manifest {
	runs, tiers := m.Runs, m.Tiers
	m.Runs, m.Tiers = nil, map[uint64]int{}
	for _, id := range runs {
		if slices.Contains(ids, id) {
			continue
		}
		m.Runs = append(m.Runs, id)
		if t, ok := tiers[id]; ok {
			m.Tiers[id] = t
		}
	}
	return m
}

func (m manifest) write(fs *vfs.FS, dir string) error {
	m.Version = manifestVersion
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, manifestName+".tmp")
	f, err := fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
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
	if err := fs.Base().Rename(tmp, filepath.Join(dir, manifestName)); err != nil {
		return fmt.Errorf("nezha: write manifest: %w", err)
	}
	if err := fs.SyncDir(dir); err != nil {
		return fmt.Errorf("nezha: %w", err)
	}
	return nil
}

func (m manifest) hasRun(id uint64) bool { return slices.Contains(m.Runs, id) }
