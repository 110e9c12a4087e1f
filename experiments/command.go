package experiments

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/systems"
	"github.com/nezha-harness/nezha/workloads"
)

// The systems whose measurements the experiments single out and the
// report's prose names (the paper's Nezha, Nezha-NoGC and its Raft+RocksDB
// baseline; Dwisckey and LSM-Raft, which the paper also compares), by
// their -system names (registry_test.go checks them against the systems'
// packages). System lists, flags and facts come from the registry.
const (
	sysNezha     = "nezha"
	sysNezhaNoGC = "nezha-nogc"
	sysOriginal  = "original"
	sysBlobDB    = "blobdb"
	sysDwisckey  = "dwisckey"
	sysLSMRaft   = "lsm-raft"
)

// DefaultSystems are compared when -systems is not given: the studied
// systems and the baselines of reg, in registration order.
func DefaultSystems(reg *systems.Registry) []string {
	return reg.ByRole(systems.RoleStudied, systems.RoleBaseline)
}

// RunRequest is one `nezha experiment run`: which experiments, on which
// systems, at which scale, and where the results go.
type RunRequest struct {
	// Names are experiment names, or "all" (see Lookup, All).
	Names []string
	// Profile is the profile's name: quick, standard or paper.
	Profile string
	// Systems are the registered systems to compare (DefaultSystems when
	// empty is not implied: empty is an error).
	Systems []string
	// OptionalSystems also run in the experiments that are WithOptional
	// (get-zipf, scan, ycsb); the CLI sets them to the registry's Optional
	// systems (dwisckey) when -systems is not given. Ignored with Servers.
	OptionalSystems []string
	// Servers are the client addresses (host:port) of one running cluster
	// of the one system in Systems; empty: local clusters.
	Servers []string
	// OutDir is the results directory (default results/<time>-<profile>).
	OutDir string
	// Force reuses a non-empty OutDir that holds an earlier run (its
	// content is deleted).
	Force bool
	// Nodes, if not 0, replaces the profile's number of nodes (replicas)
	// of every local cluster (1..cluster.MaxNodes); recorded with the
	// profile in config.json.
	Nodes int
	// Backend is where the nodes of every cluster run (default local);
	// every measurement goes through the nodes' agents, and the results
	// say which fell back there (Measurement).
	Backend cluster.BackendOptions
	// FsyncDelay, if set, adds this much to every fsync of every node
	// (nodes with -diskFaults, the slow-disk fault): a slow-fsync disk on
	// any machine (0 or up to vfs.MaxLatency).
	FsyncDelay time.Duration
	// Args are the arguments after `nezha experiment run`, recorded in
	// config.json after that prefix.
	Args []string
	// Out receives progress, the headline and the report's path.
	Out io.Writer
}

// Validate reports every problem of r at once (each a *cmdline.UsageError,
// flattened into one line): no or unknown experiment names, an unknown
// profile, unknown, external or no systems, -servers that are not
// host:port or not of exactly one system, and an OutDir that is not empty
// (without Force) or, with Force, not an earlier results directory. reg
// knows the systems. It deletes and starts nothing.
func (r RunRequest) Validate(reg *systems.Registry) error {
	var errs []error
	if len(r.Names) == 0 {
		errs = append(errs, cmdline.Usagef("name experiments or all (see `nezha experiment list`)"))
	} else if _, err := LookupFor(r.Names, r.Profile); err != nil {
		errs = append(errs, err)
	}
	if profile, err := ProfileByName(r.Profile); err != nil {
		errs = append(errs, err)
	} else if err := profile.Validate(); err != nil {
		errs = append(errs, err)
	}
	known := reg.Names()
	for _, s := range append(slices.Clone(r.Systems), r.OptionalSystems...) {
		switch {
		case cluster.External(s):
			errs = append(errs, cmdline.Usagef("-systems %s: the external reference system is not in the experiments (they read the nodes' Status, GC and storage shape); measure it with bench, ycsb and check -system %s", s, s))
		case !slices.Contains(known, s):
			errs = append(errs, cmdline.Usagef("unknown system %q (known: %s)", s, strings.Join(known, ", ")))
		}
	}
	if len(r.Systems) == 0 {
		errs = append(errs, cmdline.Usagef("-systems is empty"))
	}
	if r.Nodes < 0 || r.Nodes > cluster.MaxNodes {
		errs = append(errs, cmdline.Usagef("-nodes %d is outside 1..%d", r.Nodes, cluster.MaxNodes))
	}
	if r.Nodes != 0 && len(r.Servers) > 0 {
		errs = append(errs, cmdline.Usagef("-nodes is for local clusters; -servers names a running one"))
	}
	if len(r.Servers) > 0 && r.Backend.Name != "" && r.Backend.Name != cluster.BackendLocal {
		errs = append(errs, cmdline.Usagef("-backend is for the clusters the experiments start; -servers names a running one"))
	}
	nodes := r.Nodes
	if nodes == 0 {
		if p, err := ProfileByName(r.Profile); err == nil {
			nodes = p.Nodes
		}
	}
	if err := r.Backend.Validate(nodes); err != nil {
		errs = append(errs, err)
	}
	if r.FsyncDelay < 0 || r.FsyncDelay > vfs.MaxLatency {
		errs = append(errs, cmdline.Usagef("-fsyncDelay %v is outside 0..%v", r.FsyncDelay, vfs.MaxLatency))
	}
	if r.FsyncDelay > 0 && len(r.Servers) > 0 {
		errs = append(errs, cmdline.Usagef("-fsyncDelay is for the clusters the experiments start; -servers names a running one"))
	}
	if len(r.Servers) > 0 && len(r.Systems) != 1 {
		errs = append(errs, cmdline.Usagef("-servers is one cluster: name its one system with -systems"))
	}
	for _, a := range r.Servers {
		if host, port, err := net.SplitHostPort(a); err != nil || host == "" || port == "" {
			errs = append(errs, cmdline.Usagef("-servers: %q is not host:port", a))
		}
	}
	if r.OutDir != "" {
		if err := checkOutDir(r.OutDir, r.Force); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return cmdline.OneLine("experiment run", err)
	}
	return nil
}

// RunAndReport checks r (RunRequest.Validate, before anything is deleted
// or started), runs the experiments with Execute, and writes config.json,
// report-info.json and report.md into the results directory (OutDir;
// default results/<time>-<profile>). It fails if an experiment reported
// failures, or with ctx's cause (wrapped) if ctx ended: the results of
// the experiments that ran stay, the one cut short marked interrupted.
func RunAndReport(ctx context.Context, reg *systems.Registry, r RunRequest) error {
	if r.OutDir == "" {
		r.OutDir = filepath.Join("results", time.Now().Format("20060102-150405")+"-"+r.Profile)
	}
	if err := r.Validate(reg); err != nil {
		return err
	}
	exps, err := LookupFor(r.Names, r.Profile)
	if err != nil {
		return err
	}
	profile, err := ProfileByName(r.Profile)
	if err != nil {
		return err
	}
	if r.Nodes != 0 {
		profile.Nodes = r.Nodes
	}
	stdout, names, args, syss, srv, dir := r.Out, r.Names, r.Args, r.Systems, r.Servers, r.OutDir
	optional := r.OptionalSystems
	if len(srv) > 0 {
		optional = nil
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
	seed := int64(1)
	backend := cmp.Or(r.Backend.Name, cluster.BackendLocal)
	cfg := map[string]any{"profile": profile, "systems": syss, "optional_systems": optional, "experiments": names, "servers": srv, "binary": binary,
		"backend": backendConfig(r.Backend), "fsync_delay_ns": r.FsyncDelay}
	info := workloads.NewRunInfo("experiment", append([]string{"nezha", "experiment", "run"}, args...), &seed, cfg)
	info.SetDataDir(dir)
	if err := writeJSON(filepath.Join(dir, "config.json"), info); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\nsystems: %s%s\nexperiments: %s\nbackend: %s%s\nresults: %s\n", profile.String(), strings.Join(syss, ", "), optionalText(optional), expNames(exps),
		backend, fsyncDelayText(r.FsyncDelay), dir)
	start := time.Now()
	var mapped []string
	for _, s := range withOptional(syss, optional) {
		if sys, err := reg.Lookup(s); err == nil && sys.MapsDataFiles {
			mapped = append(mapped, s)
		}
	}
	results, err := Execute(ctx, RunOptions{Experiments: exps, Profile: profile, Systems: syss, OptionalSystems: optional, OutDir: dir,
		Binary: binary, Servers: srv, Backend: r.Backend, FsyncDelay: r.FsyncDelay, Out: stdout, Info: info, Registry: reg, MapsDataFiles: mapped})
	if err != nil {
		return err
	}
	rinfo := map[string]any{
		"profile_text": profile.String(),
		"systems":      strings.Join(syss, ", ") + optionalText(optional),
		"started":      start.Format(time.RFC3339),
		"took":         time.Since(start).Round(time.Second).String(),
		"git commit":   info.GitCommit + map[bool]string{true: "+dirty"}[info.GitDirty] + " (" + info.GitCommitSource + ")",
		"build":        info.Build.String(),
		"machine":      fmt.Sprintf("%s, %d CPUs (%s), kernel %s, %s; results on %s, readahead %d KiB (the controller; the node hosts are under Measurements)", info.Hostname, info.CPUs, info.CPUModel, info.Kernel, info.GoVersion, info.DataDevice, info.ReadAheadKB),
		"backend":      backend + fsyncDelayText(r.FsyncDelay),
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
	} else if ctx.Err() != nil {
		fmt.Fprintf(stdout, "\n== Interrupted after %s\n", time.Since(start).Round(time.Second))
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
		return fmt.Errorf("experiment run: %w; partial results in %s", context.Cause(ctx), dir)
	}
	if failed > 0 {
		return fmt.Errorf("%d experiment(s) reported failures; see %s", failed, path)
	}
	return nil
}

// backendConfig is the backend's record in config.json.
func backendConfig(o cluster.BackendOptions) map[string]any {
	m := map[string]any{"name": cmp.Or(o.Name, cluster.BackendLocal)}
	if o.Name == cluster.BackendDocker {
		m["image"], m["privileged"] = o.Docker.Image, o.Docker.Privileged
	}
	if len(o.Hosts) > 0 {
		m["hosts"] = o.Hosts
	}
	return m
}

// fsyncDelayText says the added fsync latency, "" for none.
func fsyncDelayText(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return fmt.Sprintf("; every node's fsyncs slowed by %v (-fsyncDelay)", d)
}

// Report rewrites DIR/report.md from the results saved in dir and
// returns its path; dir must be a directory (else a *cmdline.UsageError).
func Report(dir string) (string, error) {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return "", cmdline.Usagef("experiment report: %s is not a directory", dir)
	}
	return WriteReport(dir, readInfo(dir))
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
		return cmdline.Usagef("-out %s: %v", dir, err)
	case len(des) == 0:
		return nil
	case !force:
		return cmdline.Usagef("-out %s exists and is not empty (use -force to replace its content)", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		return cmdline.Usagef("-out %s is not empty and holds no config.json: not an earlier results directory, so -force will not delete its content", dir)
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
		return cmdline.Usagef("-out %s: %v", dir, err)
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
		return cmdline.Usagef("%s has %.1f GiB free; this profile needs %.1f GiB", dir, float64(free)/gib, float64(need)/gib)
	}
	return nil
}

// optionalText is ", and X, Y where the experiments compare them" for the
// run's optional systems, "" for none.
func optionalText(optional []string) string {
	if len(optional) == 0 {
		return ""
	}
	return fmt.Sprintf("; and %s in %s", strings.Join(optional, ", "), strings.Join(optionalExperiments(), ", "))
}

// optionalExperiments names the experiments that are WithOptional.
func optionalExperiments() []string {
	var out []string
	for _, e := range All() {
		if e.WithOptional {
			out = append(out, e.Name)
		}
	}
	return out
}
