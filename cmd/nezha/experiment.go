package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/experiments"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

const experimentUsage = `usage: nezha experiment SUBCOMMAND
  list                                      the experiments, what each shows, and how long each took in quick
  run NAME...|all [-profile quick|standard|paper] [-systems S,...] [-out DIR] [-force] [-servers A,B,C]
                [-backend local|docker|ssh [-image I] [-privileged] [-hosts FILE]] [-fsyncDelay D]
                                            run experiments, write results, figures and report.md
  report DIR                                rewrite DIR/report.md from saved results
  record DIR [-docs docs/results] [-name N] [-readme README.md]
                                            keep DIR as docs/results/<date>-<name>.md (command, commit, machine,
                                            report); -readme also rewrites that README's headline block
  compare DIR_A DIR_B [-metric REGEX] [-threshold PCT]
                                            per experiment and system each metric's change (Markdown);
                                            exit 1 if a selected metric regressed beyond PCT (default 10)`

const compareUsage = `usage: nezha experiment compare DIR_A DIR_B [-metric REGEX] [-threshold PCT]
  compares each experiment's result.json in two results directories: a Markdown table per experiment
  of every metric per system, A, B, the change and the spread; exit 1 if a selected metric got worse
  in B by more than the threshold, 2 on bad arguments`

// experimentCommand is `nezha experiment list | run NAME...|all | report
// DIR | record DIR | compare DIR_A DIR_B`, on the binary's registry of
// systems.
func (c *cli) experimentCommand() *ffcli.Command {
	return c.group("experiment", experimentUsage, "experiment: want list, run NAME...|all, report DIR, record DIR, or compare DIR_A DIR_B",
		func(sub string) error {
			return cmdline.Usagef("experiment: unknown subcommand %q (want list, run, report, record, compare)", sub)
		},
		c.command("list", experimentUsage, c.flagSet("experiment list"), func(_ context.Context, args []string) error {
			if err := noArgs("experiment list", args); err != nil {
				return err
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tQUICK\tSHOWS")
			for _, e := range experiments.All() {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", e.Name, quickText(e.QuickDuration), e.Shows)
			}
			return tw.Flush()
		}),
		c.command("report", experimentUsage, c.flagSet("experiment report"), func(_ context.Context, args []string) error {
			if len(args) != 1 {
				return cmdline.Usagef("experiment report: want one results directory")
			}
			path, err := experiments.Report(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintln(c.stdout, path)
			return nil
		}),
		c.experimentRun(), c.experimentRecord(), c.experimentCompare())
}

// experimentRun is `nezha experiment run NAME...|all [flags]`; flags may
// follow the experiment names.
func (c *cli) experimentRun() *ffcli.Command {
	fs := c.flagSet("experiment run")
	profile := fs.String("profile", "quick", "quick (all in about half an hour on 2 cores, scaled geometry), standard (the paper's shape at one machine's scale: native geometry, up to 6 GiB per node, at most 60 min and 40 GB) or paper (the paper's sizes, for real clusters)")
	syss := fs.String("systems", strings.Join(experiments.DefaultSystems(c.reg), ","), "systems to compare (comma-separated); when not given, the optional systems ("+strings.Join(c.reg.Optional(), ", ")+") also run in the experiments that compare them (get-zipf, scan, ycsb)")
	out := fs.String("out", "", "results directory (default results/<time>-<profile>)")
	force := fs.Bool("force", false, "reuse a non-empty -out directory (its content is deleted)")
	nodes := fs.Int("nodes", 0, "replicas (nodes) of every local cluster, 1..99 (0: the profile's, 3)")
	servers := fs.String("servers", "", "use this running cluster (one system, named by -systems; comma-separated host:port) instead of local clusters")
	var backend cluster.BackendOptions
	hosts := registerBackend(fs, &backend)
	fsyncDelay := fs.Duration("fsyncDelay", 0, "add this much to every fsync of every node (serve -diskFaults, the slow-disk fault): a slow-fsync disk, e.g. 5ms; 0: none")
	return c.command("run", experimentUsage, fs, func(ctx context.Context, args []string) error {
		names, err := c.parseInterleaved(fs, args)
		if err != nil {
			return err
		}
		if err := hosts.load(&backend); err != nil {
			return err
		}
		ctx, stdout, stop := stopContext(ctx, c.stdout)
		defer stop()
		raw := c.args[min(2, len(c.args)):] // after "experiment run"
		var optional []string
		if !flagGiven(fs, "systems") {
			optional = c.reg.Optional()
		}
		return experiments.RunAndReport(ctx, c.reg, experiments.RunRequest{
			Names: names, Profile: *profile, Systems: cmdline.SplitList(*syss), OptionalSystems: optional, Servers: cmdline.SplitList(*servers),
			OutDir: *out, Force: *force, Nodes: *nodes, Out: stdout, Backend: backend, FsyncDelay: *fsyncDelay,
			Args: raw,
		})
	})
}

// experimentCompare is `nezha experiment compare DIR_A DIR_B [-metric
// REGEX] [-threshold PCT]`; flags may come before or after the
// directories.
func (c *cli) experimentCompare() *ffcli.Command {
	fs := c.flagSet("experiment compare")
	metric := fs.String("metric", "", "regular expression over experiment/metric (e.g. 'put-scale/put_headline/'); the metrics that gate the exit status (default: every ranked metric)")
	threshold := fs.Float64("threshold", experiments.DefaultCompareThresholdPct, "percent change of a selected metric, in its worse direction, that counts as a regression")
	return c.command("compare", compareUsage, fs, func(_ context.Context, args []string) error {
		dirs, err := c.parseInterleaved(fs, args)
		if err != nil {
			return err
		}
		return experiments.CompareDirs(c.stdout, experiments.CompareRequest{
			Dirs: dirs, Metric: *metric, ThresholdPct: *threshold, Systems: c.reg.Names()})
	})
}

// quickText is an experiment's duration in the quick profile as `experiment
// list` shows it: seconds under two minutes, else minutes; "-" if not
// measured.
func quickText(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < 2*time.Minute:
		return fmt.Sprintf("%.0f s", d.Seconds())
	}
	return fmt.Sprintf("%.0f min", d.Minutes())
}
