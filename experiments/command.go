package experiments

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nezha-harness/nezha/baseline"
	"github.com/nezha-harness/nezha/nezha"
	"github.com/nezha-harness/nezha/systems"
	"github.com/nezha-harness/nezha/systems/cluster"
	"github.com/nezha-harness/nezha/workloads"
)

// The systems whose measurements the experiments single out and the
// report's prose names (the paper's Nezha, Nezha-NoGC and its Raft+RocksDB
// baseline), from their packages. System lists come from the registry.
const (
	sysNezha     = nezha.Name
	sysNezhaNoGC = nezha.NameNoGC
	sysOriginal  = string(baseline.ModeOriginal)
)

// DefaultSystems are compared when -systems is not given: the studied
// systems and the baselines of reg, in registration order.
func DefaultSystems(reg *systems.Registry) []string {
	return reg.ByRole(systems.RoleStudied, systems.RoleBaseline)
}

const experimentUsage = `usage: nezha experiment SUBCOMMAND
  list                                      the experiments and what each shows
  run NAME...|all [-profile quick|standard|paper] [-systems S,...] [-out DIR] [-force] [-servers A,B,C]
                                            run experiments, write results, figures and report.md
  report DIR                                rewrite DIR/report.md from saved results
  compare DIR_A DIR_B [-metric REGEX] [-threshold PCT]
                                            per experiment and system each metric's change (Markdown);
                                            exit 1 if a selected metric regressed beyond PCT (default 10)`

// Command is `nezha experiment list | run NAME...|all | report DIR`.
// reg is the binary's registry of systems.
func Command(args []string, reg *systems.Registry, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return systems.Usagef("experiment: want list, run NAME...|all, report DIR, or compare DIR_A DIR_B")
	}
	if err := systems.SubcommandHelp(args[0], stdout, experimentUsage); err != nil {
		return err
	}
	switch args[0] {
	case "list":
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tSHOWS")
		for _, e := range All() {
			fmt.Fprintf(tw, "%s\t%s\n", e.Name, e.Shows)
		}
		return tw.Flush()
	case "report":
		if len(args) != 2 {
			return systems.Usagef("experiment report: want one results directory")
		}
		if st, err := os.Stat(args[1]); err != nil || !st.IsDir() {
			return systems.Usagef("experiment report: %s is not a directory", args[1])
		}
		path, err := WriteReport(args[1], readInfo(args[1]))
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, path)
		return nil
	case "run":
		return runCommand(args[1:], reg, stdout, stderr)
	case "compare":
		return compareCommand(args[1:], reg.Names(), stdout)
	}
	return systems.Usagef("experiment: unknown subcommand %q (want list, run, report, compare)", args[0])
}

func runCommand(args []string, reg *systems.Registry, stdout, stderr io.Writer) error {
	known := reg.Names()
	fs := flag.NewFlagSet("experiment run", flag.ContinueOnError)
	profileName := fs.String("profile", "quick", "quick (all in at most 15 min on 2 cores, scaled geometry), standard (the paper's shape at one machine's scale: native geometry, up to 6 GiB per node, at most 60 min and 40 GB) or paper (the paper's sizes, for real clusters)")
	systemsFlag := fs.String("systems", strings.Join(DefaultSystems(reg), ","), "systems to compare")
	out := fs.String("out", "", "results directory (default results/<time>-<profile>)")
	force := fs.Bool("force", false, "reuse a non-empty -out directory (its content is deleted)")
	servers := fs.String("servers", "", "use this running cluster (one system, named by -systems) instead of local clusters")
	// Flags may follow the experiment names.
	var names []string
	rest := args
	for {
		if err := systems.ParseFlags(fs, rest, stdout); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		names = append(names, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(names) == 0 {
		return systems.Usagef("experiment run: name experiments or all (see `nezha experiment list`)")
	}
	exps, err := LookupFor(names, *profileName)
	if err != nil {
		return err
	}
	profile, err := ProfileByName(*profileName)
	if err != nil {
		return err
	}
	if err := profile.Validate(); err != nil {
		return systems.OneLine("experiment run", err)
	}
	syss := systems.SplitList(*systemsFlag)
	var errs []error
	for _, s := range syss {
		switch {
		case cluster.External(s):
			errs = append(errs, systems.Usagef("-systems %s: the external reference system is not in the experiments (they read the nodes' Status, GC and storage shape); measure it with bench, ycsb and check -system %s", s, s))
		case !slices.Contains(known, s):
			errs = append(errs, systems.Usagef("unknown system %q (known: %s)", s, strings.Join(known, ", ")))
		}
	}
	if len(syss) == 0 {
		errs = append(errs, systems.Usagef("-systems is empty"))
	}
	srv := systems.SplitList(*servers)
	if len(srv) > 0 && len(syss) != 1 {
		errs = append(errs, systems.Usagef("-servers is one cluster: name its one system with -systems"))
	}
	for _, a := range srv {
		if host, port, err := net.SplitHostPort(a); err != nil || host == "" || port == "" {
			errs = append(errs, systems.Usagef("-servers: %q is not host:port", a))
		}
	}
	dir := *out
	if dir == "" {
		dir = filepath.Join("results", time.Now().Format("20060102-150405")+"-"+profile.Name)
	}
	if err := checkOutDir(dir, *force); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return systems.OneLine("experiment run", err)
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs // result paths in the report are made relative to it
	}
	if len(srv) == 0 && !allSmallDisk(exps) {
		if err := checkFreeDisk(dir, profile.MinFreeDiskBytes); err != nil {
			return err
		}
	}
	if err := clearOutDir(dir); err != nil {
		return err
	}
	binary, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	seed := int64(1)
	cfg := map[string]any{"profile": profile, "systems": syss, "experiments": names, "servers": srv, "binary": binary}
	info := workloads.NewRunInfo("experiment", append([]string{"nezha", "experiment", "run"}, args...), &seed, cfg)
	if err := writeJSON(filepath.Join(dir, "config.json"), info); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\nsystems: %s\nexperiments: %s\nresults: %s\n", profile.String(), strings.Join(syss, ", "), expNames(exps), dir)
	start := time.Now()
	results, err := Execute(ctx, RunOptions{Experiments: exps, Profile: profile, Systems: syss, OutDir: dir,
		Binary: binary, Servers: srv, Out: stdout, Info: info})
	if err != nil {
		return err
	}
	rinfo := map[string]any{
		"profile_text": profile.String(),
		"systems":      strings.Join(syss, ", "),
		"started":      start.Format(time.RFC3339),
		"took":         time.Since(start).Round(time.Second).String(),
		"git commit":   info.GitCommit + map[bool]string{true: "+dirty"}[info.GitDirty] + " (" + info.GitCommitSource + ")",
		"build":        info.Build.String(),
		"machine":      fmt.Sprintf("%s, %d CPUs (%s), kernel %s, %s", info.Hostname, info.CPUs, info.CPUModel, info.Kernel, info.GoVersion),
	}
	if err := writeJSON(filepath.Join(dir, "report-info.json"), rinfo); err != nil {
		return err
	}
	path, err := WriteReport(dir, rinfo)
	if err != nil {
		return err
	}
	if hs := Headlines(results); AnyMeasured(hs) {
		fmt.Fprintf(stdout, "\n== Headline (this run, %s)\n\n", time.Since(start).Round(time.Second))
		WriteHeadlines(stdout, hs)
	} else {
		fmt.Fprintf(stdout, "\n== Done in %s\n", time.Since(start).Round(time.Second))
	}
	failed := 0
	for _, r := range results {
		if r.Error != "" || len(r.Failures) > 0 {
			failed++
		}
	}
	fmt.Fprintf(stdout, "\nreport: %s\n", path)
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted; partial results in %s", dir)
	}
	if failed > 0 {
		return fmt.Errorf("%d experiment(s) reported failures; see %s", failed, path)
	}
	return nil
}

func expNames(es []Experiment) string {
	var n []string
	for _, e := range es {
		n = append(n, e.Name)
	}
	return strings.Join(n, ", ")
}

func readInfo(dir string) map[string]any {
	var m map[string]any
	b, err := os.ReadFile(filepath.Join(dir, "report-info.json"))
	if err != nil {
		return nil
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil
	}
	return m
}

// checkOutDir refuses a non-empty dir unless force, and even with force one
// that is not an earlier results directory (no config.json): -force must
// not wipe a directory that holds something else. It deletes nothing.
func checkOutDir(dir string, force bool) error {
	des, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return systems.Usagef("-out %s: %v", dir, err)
	case len(des) == 0:
		return nil
	case !force:
		return systems.Usagef("-out %s exists and is not empty (use -force to replace its content)", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		return systems.Usagef("-out %s is not empty and holds no config.json: not an earlier results directory, so -force will not delete its content", dir)
	}
	return nil
}

// clearOutDir empties dir (checked by checkOutDir) or creates it.
func clearOutDir(dir string) error {
	des, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, de := range des {
		if err := os.RemoveAll(filepath.Join(dir, de.Name())); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return systems.Usagef("-out %s: %v", dir, err)
	}
	return nil
}

// allSmallDisk: every experiment writes little (Experiment.SmallDisk).
func allSmallDisk(exps []Experiment) bool {
	for _, e := range exps {
		if !e.SmallDisk {
			return false
		}
	}
	return true
}

// checkFreeDisk refuses to start with less than need bytes free under dir
// (or, if dir does not exist yet, under its nearest existing parent).
func checkFreeDisk(dir string, need int64) error {
	var st unix.Statfs_t
	at := dir
	for {
		err := unix.Statfs(at, &st)
		if err == nil {
			break
		}
		parent := filepath.Dir(at)
		if !errors.Is(err, unix.ENOENT) || parent == at {
			return err
		}
		at = parent
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if free < need {
		return systems.Usagef("%s has %.1f GiB free; this profile needs %.1f GiB", dir, float64(free)/gib, float64(need)/gib)
	}
	return nil
}
