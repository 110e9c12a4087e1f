package plots

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nezha-harness/nezha/systems"
)

// RenderAll walks dir recursively and, for every figures.json it finds,
// renders each of its figures next to it (<Name>.png and <Name>.svg). It
// returns how many figures were drawn. A file that cannot be read or a
// figure that fails to validate or draw does not stop the others: the
// returned error joins one error per failure, each naming the
// figures.json path and the figure. Finding no figures.json is not an
// error (0, nil).
func RenderAll(dir string) (int, error) {
	_, drawn, err := renderTree(dir, nil)
	return drawn, err
}

// renderTree is RenderAll that also counts the figures.json files found
// and calls done (if not nil) with the PNG path of each figure drawn.
func renderTree(dir string, done func(png string)) (files, drawn int, err error) {
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

// Command is `nezha plot RESULTS_DIR`: it redraws every figure saved in a
// figures.json anywhere under RESULTS_DIR (the data come from those files
// only; nothing is rerun), prints the PNG path of each figure drawn (its
// SVG is next to it) and a summary line. A missing or non-directory
// RESULTS_DIR, or one without any figures.json, is a *systems.UsageError;
// figures that fail are reported together after the others were drawn.
func Command(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("plot", flag.ContinueOnError)
	fs.Usage = func() {}
	if err := systems.ParseFlags(fs, args, stdout); err != nil {
		if errors.Is(err, systems.ErrHelp) {
			fmt.Fprintln(stdout, "nezha plot RESULTS_DIR: redraw every figure (PNG and SVG) from the figures.json files under RESULTS_DIR")
		}
		return err
	}
	if fs.NArg() != 1 {
		return systems.Usagef("plot: want one argument, the results directory (nezha plot RESULTS_DIR)")
	}
	dir := fs.Arg(0)
	st, err := os.Stat(dir)
	switch {
	case err != nil:
		return systems.Usagef("plot: results directory %s: %v", dir, errors.Unwrap(err))
	case !st.IsDir():
		return systems.Usagef("plot: %s is not a directory", dir)
	}
	files, drawn, err := renderTree(dir, func(png string) { fmt.Fprintln(stdout, png) })
	if files == 0 && err == nil {
		return systems.Usagef("plot: no %s under %s (experiments save their figures there)", FileName, dir)
	}
	fmt.Fprintf(stdout, "drew %d figures (PNG and SVG) from %d %s files under %s\n", drawn, files, FileName, dir)
	if err != nil {
		return fmt.Errorf("plot: some figures were not drawn:\n%w", err)
	}
	return nil
}
