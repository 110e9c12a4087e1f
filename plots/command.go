package plots

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// RenderAll walks dir recursively and, for every figures.json it finds,
// renders each of its figures next to it (<Name>.png and <Name>.svg). It
// returns how many figures were drawn. A file that cannot be read or a
// figure that fails to validate or draw does not stop the others: the
// returned error joins one error per failure, each naming the
// figures.json path and the figure. Finding no figures.json is not an
// error (0, nil).
func RenderAll(dir string) (int, error) {
	_, drawn, err := RenderTree(dir, nil)
	return drawn, err
}

// RenderTree is RenderAll that also counts the figures.json files found
// and calls done (if not nil) with the PNG path of each figure drawn
// (`nezha plot` prints them).
func RenderTree(dir string, done func(png string)) (files, drawn int, err error) {
	var errs []error
	walkErr := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return err
			}
			errs = append(errs, fmt.Errorf("plots: %w", err))
			return nil
		}
		if d.IsDir() || d.Name() != FileName {
			return nil
		}
		files++
		sub := filepath.Dir(path)
		figs, err := Load(sub)
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		for _, f := range figs {
			if err := Render(sub, f); err != nil {
				errs = append(errs, fmt.Errorf("%s: figure %q: %w", path, f.Name, err))
				continue
			}
			drawn++
			if done != nil {
				done(filepath.Join(sub, f.Name+".png"))
			}
		}
		return nil
	})
	if walkErr != nil {
		errs = append(errs, fmt.Errorf("plots: %w", walkErr))
	}
	return files, drawn, errors.Join(errs...)
}
