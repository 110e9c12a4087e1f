package plots

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// Save merges figs into dir/figures.json: a saved figure with the same Name
// is replaced (among figs, the last of a name wins), the others are kept,
// and the file is rewritten sorted by Name as indented JSON. Every figure
// is validated first; if any is invalid nothing is written and the error
// lists every problem. dir is created if needed. The file is replaced
// atomically (write to a temporary file, then rename), but two concurrent
// Saves to the same dir may lose one's figures.
func Save(dir string, figs ...Figure) error {
	var errs []error
	for _, f := range figs {
		if err := f.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("plots: save %s: %w", filepath.Join(dir, FileName), err)
	}
	old, err := Load(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	byName := make(map[string]Figure, len(old)+len(figs))
	for _, f := range old {
		byName[f.Name] = f
	}
	for _, f := range figs {
		byName[f.Name] = f
	}
	all := make([]Figure, 0, len(byName))
	for _, f := range byName {
		all = append(all, f)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	data, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return fmt.Errorf("plots: save %s: %w", filepath.Join(dir, FileName), err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("plots: save: %w", err)
	}
	return writeFileAtomic(filepath.Join(dir, FileName), append(data, '\n'))
}

// Load reads dir/figures.json as saved by Save. It does not validate the
// figures (Render does). A missing file is an error wrapping
// fs.ErrNotExist.
func Load(dir string) ([]Figure, error) {
	path := filepath.Join(dir, FileName)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("plots: %w", err)
	}
	var figs []Figure
	if err := json.Unmarshal(bytes.TrimSpace(data), &figs); err != nil {
		return nil, fmt.Errorf("plots: %s: %w", path, err)
	}
	return figs, nil
}

// writeFileAtomic writes data to a temporary file next to path and renames
// it over path, so readers never see a half-written file.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("plots: %w", err)
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("plots: write %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("plots: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("plots: %w", err)
	}
	return nil
}
