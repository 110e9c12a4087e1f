package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/plots"
)

// plotCommand is `nezha plot RESULTS_DIR`: it redraws every figure saved in
// a figures.json anywhere under RESULTS_DIR (the data come from those files
// only; nothing is rerun), prints the PNG path of each figure drawn (its
// SVG is next to it) and a summary line. A missing or non-directory
// RESULTS_DIR, or one without any figures.json, is a *cmdline.UsageError;
// figures that fail are reported together after the others were drawn.
func (c *cli) plotCommand() *ffcli.Command {
	return c.command("plot", "nezha plot RESULTS_DIR: redraw every figure (PNG, SVG and a paper-column PDF) from the figures.json files under RESULTS_DIR", c.flagSet("plot"),
		func(_ context.Context, args []string) error {
			if len(args) != 1 {
				return cmdline.Usagef("plot: want one argument, the results directory (nezha plot RESULTS_DIR)")
			}
			dir := args[0]
			st, err := os.Stat(dir)
			switch {
			case err != nil:
				return cmdline.Usagef("plot: results directory %s: %v", dir, errors.Unwrap(err))
			case !st.IsDir():
				return cmdline.Usagef("plot: %s is not a directory", dir)
			}
			files, drawn, err := plots.RenderTree(dir, func(png string) { fmt.Fprintln(c.stdout, png) })
			if files == 0 && err == nil {
				return cmdline.Usagef("plot: no %s under %s (experiments save their figures there)", plots.FileName, dir)
			}
			fmt.Fprintf(c.stdout, "drew %d figures (PNG, SVG and PDF) from %d %s files under %s\n", drawn, files, plots.FileName, dir)
			if err != nil {
				return fmt.Errorf("plot: some figures were not drawn:\n%w", err)
			}
			return nil
		})
}
