// Package experiments holds the named experiments of the harness, one per
// figure or check of the Nezha paper, and runs them: each starts fresh
// local clusters of every system (or uses -servers), runs its workloads,
// tears the clusters down, and writes one results directory with its
// configuration, raw results, figure specifications (drawn by package
// plots) and a Markdown report (docs/architecture.md section 6.6).
package experiments

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/faults"
	"github.com/nezha-harness/nezha/internal/buildinfo"
	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/plots"
	"github.com/nezha-harness/nezha/systems"
	"github.com/nezha-harness/nezha/workloads"
)

// Experiment is one named experiment.
type Experiment struct {
	// Name is what `experiment run NAME` takes.
	Name string
	// Title heads its report section.
	Title string
	// Shows says in one sentence what it shows.
	Shows string
	// NeedsOwnClusters: the experiment reads the nodes' counters through
	// their agents or kills nodes, so it cannot run against -servers.
	NeedsOwnClusters bool
	// SmallDisk: the experiment writes little (at most a few GiB), so the
	// profile's MinFreeDiskBytes is not required when only such
	// experiments run.
	SmallDisk bool
	// UsesReadBeds: the experiment reads the shared read beds (one loaded
	// cluster per system, kept from one such experiment to the next).
	UsesReadBeds bool
	// WithOptional: the experiment also runs the optional systems of the
	// run (RunOptions.OptionalSystems, the registry's Optional systems when
	// -systems was not given): the paper compares Dwisckey in its GET,
	// SCAN and YCSB figures, so get-zipf, scan and ycsb run it.
	WithOptional bool
	// OutsideQuickAll: `run all` with the quick profile skips it (it would
	// push quick past its 15 minutes); naming it runs it.
	OutsideQuickAll bool
	// Campaign: a fault campaign of minutes per system (the crash
	// campaign). `run all` runs it only with the paper profile, so that
	// quick keeps its 15 minutes and standard its 60; naming it runs it
	// with any profile.
	Campaign bool
	// QuickDuration is about how long it took with -profile quick on the
	// default systems, on a 2-core machine (0: not measured); `experiment
	// list` shows it. The figures come from the runs recorded in
	// docs/results/2026-12-05-quick-*.md, on a machine other work shared.
	QuickDuration time.Duration
	run           func(ctx context.Context, x *Run) error
}

// All returns every experiment in the order `run all` runs them.
func All() []Experiment {
	all := []Experiment{
		diskLimit(), putVsize(), putScale(), getZipf(), scan(), ycsbExperiment(), amplification(), gcExperiment(), latencyGCExperiment(), linearizabilityExperiment(), crashExperiment(),
		embeddedExperiment(),
	}
	// Rounded from the recorded quick runs (see QuickDuration).
	quick := map[string]time.Duration{
		"disk-limit": 3 * time.Second, "put-vsize": 2 * time.Minute, "put-scale": 11 * time.Minute, "get-zipf": 5 * time.Minute,
		"scan": 3 * time.Minute, "ycsb": 3 * time.Minute, "amplification": 3 * time.Minute, "gc": 3 * time.Minute, "latency-gc": 7 * time.Minute,
		"linearizability": 90 * time.Second, "crash": 8 * time.Minute, "embedded": 90 * time.Second,
	}
	for i := range all {
		all[i].QuickDuration = quick[all[i].Name]
	}
	return all
}

// Lookup returns the named experiments ("all" expands to All), or a usage
// error naming the unknown ones.
func Lookup(names []string) ([]Experiment, error) { return LookupFor(names, "") }

// LookupFor is Lookup for a profile: with "quick", "all" leaves out the
// experiments marked OutsideQuickAll, and with "quick" or "standard" the
// ones marked Campaign (they still run when named).
func LookupFor(names []string, profile string) ([]Experiment, error) {
	all := All()
	byName := map[string]Experiment{}
	var known []string
	for _, e := range all {
		byName[e.Name] = e
		known = append(known, e.Name)
	}
	var out []Experiment
	seen := map[string]bool{}
	var unknown []string
	for _, n := range names {
		if n == "all" {
			for _, e := range all {
				if e.OutsideQuickAll && profile == "quick" || e.Campaign && (profile == "quick" || profile == "standard") {
					continue
				}
				if !seen[e.Name] {
					seen[e.Name] = true
					out = append(out, e)
				}
			}
			continue
		}
		e, ok := byName[n]
		if !ok {
			unknown = append(unknown, n)
			continue
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, e)
		}
	}
	if len(unknown) > 0 {
		return nil, cmdline.Usagef("unknown experiment %s (known: %s, all)", strings.Join(unknown, ", "), strings.Join(known, ", "))
	}
	if len(out) == 0 {
		return nil, cmdline.Usagef("no experiment named (known: %s, all)", strings.Join(known, ", "))
	}
	return out, nil
}

// Result is what one experiment leaves in <out>/<name>/result.json; the
// report and the headline table are built from it.
type Result struct {
	Name     string         `json:"name"`
	Title    string         `json:"title"`
	Shows    string         `json:"shows"`
	Params   map[string]any `json:"params"`
	Tables   []Table        `json:"tables"`
	Figures  []string       `json:"figures"`
	Failures []Failure      `json:"failures,omitempty"`
	Notes    []string       `json:"notes,omitempty"`
	// Metrics are named numbers other parts of the report use, e.g.
	// "disk_limit_mb_per_sec" or "put_mb_per_sec/nezha/256".
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// Samples are the per-run values behind a metric that is the median
	// of repeated runs (same key as in Metrics), for `experiment
	// compare`'s spread and significance; absent for single measurements.
	Samples  map[string][]float64 `json:"samples,omitempty"`
	Start    time.Time            `json:"start"`
	Duration float64              `json:"duration_sec"`
	Error    string               `json:"error,omitempty"`
	// Interrupted: the run was stopped (SIGINT, SIGTERM, a closed output)
	// while this experiment ran; its tables hold what it measured before.
	Interrupted bool `json:"interrupted,omitempty"`
	// Build is what the binary that ran the experiment was built from
	// (module version, VCS revision, Go version; package buildinfo).
	Build *buildinfo.Info `json:"build,omitempty"`
	// Backend is where the experiment's nodes ran (cluster.Backends).
	Backend string `json:"backend,omitempty"`
	// Hosts are the machines its nodes ran on, as their agents described
	// them (each once).
	Hosts []HostInfo `json:"hosts,omitempty"`
	// Measurements say where each kind of measurement was taken and what
	// fell back, and why.
	Measurements []Measurement `json:"measurements,omitempty"`
	// Bounds name what limited each headline system in its measured
	// windows (put-scale), with the numbers that decided it.
	Bounds []Bound `json:"bounds,omitempty"`
	// Windows are what happened during the runs behind the time-series
	// figures (GC rounds, compactions, write stalls, leader changes,
	// faults), per run, as the figures shade them (timewindows.go).
	Windows []RunWindows `json:"windows,omitempty"`
}

// Table is a table of the report.
type Table struct {
	Title   string     `json:"title"`
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

// Failure is a system that failed during an experiment; the others ran.
type Failure struct {
	System string `json:"system"`
	Step   string `json:"step"`
	Error  string `json:"error"`
	// Interrupted: the step did not fail; the run was stopped during it
	// (Error is what the step returned then).
	Interrupted bool `json:"interrupted,omitempty"`
	// LogTails are the last lines of each node's log.
	LogTails map[string]string `json:"log_tails,omitempty"`
}

// Run is the context of one experiment's execution.
type Run struct {
	Profile Profile
	// Systems are the -system names to compare.
	Systems []string
	// Dir is this experiment's results directory.
	Dir string
	// Binary is the nezha executable that runs the nodes.
	Binary string
	// Servers, if set, is a running cluster of Systems[0] to use instead
	// of local clusters.
	Servers []string
	// Backend is where every cluster the experiment starts runs.
	Backend cluster.BackendOptions
	// FsyncDelay, if set, is added to every fsync of every node
	// (RunOptions.FsyncDelay).
	FsyncDelay time.Duration
	// Out receives progress lines.
	Out io.Writer
	// Prior holds the results of the experiments that ran before this one
	// in the same run (e.g. disk-limit for the others).
	Prior map[string]*Result

	res     *Result
	figures []plots.Figure
	mu      sync.Mutex
	// headSeries are put-scale's per-second series of its first headline
	// runs.
	headSeries []plots.Series
	// beds are the read beds shared by get-zipf and scan.
	beds *bedPool
	// reg is RunOptions.Registry.
	reg *systems.Registry
	// mapsDataFiles are RunOptions.MapsDataFiles.
	mapsDataFiles []string
	// hosts is what the run knows of its node hosts (the probes).
	hosts *hostPool
	// stopped is closed when the run is stopped (Execute's ctx ends).
	stopped <-chan struct{}
}

// interrupted reports whether the run was stopped (Execute's ctx ended):
// a step that fails from then on was cut short, it did not fail.
func (x *Run) interrupted() bool {
	select {
	case <-x.stopped:
		return true
	default:
		return false
	}
}

// logf prints a progress line prefixed with the experiment name.
func (x *Run) logf(format string, args ...any) {
	fmt.Fprintf(x.Out, "[%s %s] %s\n", time.Now().Format("15:04:05"), x.res.Name, fmt.Sprintf(format, args...))
}

func (x *Run) param(k string, v any) { x.res.Params[k] = v }

func (x *Run) metric(k string, v float64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.res.Metrics[k] = v
}

// samples records the per-run values behind metric k (see Result.Samples).
func (x *Run) samples(k string, vs []float64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.res.Samples == nil {
		x.res.Samples = map[string][]float64{}
	}
	x.res.Samples[k] = slices.Clone(vs)
}

func (x *Run) note(format string, args ...any) {
	x.res.Notes = append(x.res.Notes, fmt.Sprintf(format, args...))
}

func (x *Run) table(t Table) { x.res.Tables = append(x.res.Tables, t) }

func (x *Run) figure(f plots.Figure) {
	f = logWhereDecades(f)
	x.figures = append(x.figures, f)
	x.res.Figures = append(x.res.Figures, f.Name)
}

// logWhereDecades turns an axis whose values span decades
// (plots.Figure.SpansDecades) logarithmic, as a figure for a paper must,
// where the figure stays valid that way (no value at or below zero on
// it); the values of most figures depend on the run, so their author
// cannot choose the scale in advance.
func logWhereDecades(f plots.Figure) plots.Figure {
	sx, sy := f.SpansDecades()
	if !sx && !sy {
		return f
	}
	g := f
	g.LogX, g.LogY = f.LogX || sx, f.LogY || sy
	if g.Validate() != nil {
		return f
	}
	return g
}

// fail records that system failed at step; spec (optional) supplies the
// node logs. After the run was stopped it records that the step was
// interrupted instead (no log tails: the nodes did nothing wrong).
func (x *Run) fail(system, step string, err error, spec *cluster.Spec) {
	if x.interrupted() {
		x.mu.Lock()
		x.res.Failures = append(x.res.Failures, Failure{System: system, Step: step, Error: err.Error(), Interrupted: true})
		x.mu.Unlock()
		x.logf("%s interrupted at %s", system, step)
		return
	}
	var stall *workloads.StallError
	if errors.As(err, &stall) && stall.Nodes == "" && spec != nil {
		// What the nodes say now, as bench prints after a stall: which
		// did not answer, which had no leader.
		if c, cerr := client.New(client.DefaultConfig(spec.Addresses()...)); cerr == nil {
			stall.Nodes = workloads.ProbeNodes(context.Background(), c, 2*time.Second)
			c.Close()
		}
	}
	f := Failure{System: system, Step: step, Error: err.Error()}
	if spec != nil {
		f.LogTails = map[string]string{}
		for i := range spec.Nodes {
			n := &spec.Nodes[i]
			f.LogTails[fmt.Sprintf("node%d", n.ID)] = spec.NodeTail(n, 15)
		}
		x.measured(Measurement{What: measureNodeLogs, Backend: spec.BackendName(), Where: "from each node's agent",
			How: "the end of the node's log (Logs)"})
	}
	x.mu.Lock()
	x.res.Failures = append(x.res.Failures, f)
	x.mu.Unlock()
	x.logf("%s FAILED at %s: %v", system, step, err)
}

// failed reports whether system has failed in this experiment.
func (x *Run) failed(system string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, f := range x.res.Failures {
		if f.System == system {
			return true
		}
	}
	return false
}

// systemArgs are the serve flags of a system under the profile.
//
// Requests may wait up to a minute inside a node (-requestTimeout): a
// store that stalls its writes (RocksDB's compaction debt, a full GC) is
// slow, and the experiments measure that; they do not turn it into
// ambiguous writes at the nodes' default 5 s.
func (x *Run) systemArgs(system string, extra ...string) []string {
	args := []string{"-segmentSizeBytes", fmt.Sprint(x.Profile.SegmentSizeBytes), "-requestTimeout", "1m"}
	if system != sysNezha {
		// Only nezha has GC flags; drop GC overrides meant for it.
		var kept []string
		for i := 0; i < len(extra); i++ {
			if strings.HasPrefix(extra[i], "-gc") {
				i++ // and its value
				continue
			}
			kept = append(kept, extra[i])
		}
		return append(args, kept...)
	}
	args = append(args, "-gcThresholdBytes", fmt.Sprint(x.Profile.GCThresholdBytes))
	return append(args, extra...)
}

// waitGC waits until GC is quiet: no node's GC round count changed and no
// node's Raft log shrank for three seconds (three checks of the default
// -gcInterval), up to two minutes. Strategies differ in what they leave in
// the log, so "quiet" is the only criterion that fits them all.
func (x *Run) waitGC(ctx context.Context, tb *testbed) error {
	if tb.spec == nil {
		return nil
	}
	const window = 3 * time.Second
	deadline := time.Now().Add(2 * time.Minute)
	var last string
	stableSince := time.Now()
	for {
		sts, err := tb.spec.Status(ctx)
		if err != nil {
			return err
		}
		var state []string
		for _, st := range sts {
			r, err := st.Response()
			if err != nil {
				return fmt.Errorf("node %d: %w", st.Node.ID, err)
			}
			state = append(state, fmt.Sprintf("%d/%d", len(r.GcRounds), r.LogBytes))
		}
		cur := strings.Join(state, " ")
		if cur != last {
			last, stableSince = cur, time.Now()
		} else if time.Since(stableSince) >= window {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("GC still busy after 2 minutes (rounds/log bytes per node: %s)", cur)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// testbed is one cluster under test and a client for it.
type testbed struct {
	system string
	spec   *cluster.Spec // nil with -servers
	c      *client.Client
	// hosts are where its nodes run (nil with -servers).
	hosts []nodeHost
}

// start brings up a fresh cluster of system (or connects to -servers) in
// the experiment's clusters/ directory. The caller must call stop.
func (x *Run) start(ctx context.Context, system, label string, extra ...string) (*testbed, error) {
	return x.startIn(ctx, filepath.Join(x.Dir, "clusters", system+"-"+label), system, extra...)
}

// startIn is start with the cluster in dir.
func (x *Run) startIn(ctx context.Context, dir, system string, extra ...string) (*testbed, error) {
	if len(x.Servers) > 0 {
		c, err := client.New(client.DefaultConfig(x.Servers...))
		if err != nil {
			return nil, err
		}
		c.Discover(ctx)
		return &testbed{system: system, c: c}, nil
	}
	return x.up(ctx, dir, system, x.Profile.Nodes, extra...)
}

// up starts a cluster of nodes nodes of system on the run's backend in
// dir, learns its node hosts and, with FsyncDelay, slows every node's
// fsyncs.
func (x *Run) up(ctx context.Context, dir, system string, nodes int, extra ...string) (*testbed, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	args := x.systemArgs(system, extra...)
	if x.FsyncDelay > 0 {
		args = append(args, faults.DiskNodeArgs()...)
	}
	spec, _, err := cluster.Up(ctx, cluster.UpOptions{Dir: dir, System: system, Nodes: nodes,
		Binary: x.Binary, ExtraArgs: args, Backend: x.Backend})
	if err != nil {
		return nil, err
	}
	c, err := client.New(client.DefaultConfig(spec.Addresses()...))
	if err != nil {
		spec.Down(true)
		return nil, err
	}
	tb := &testbed{system: system, spec: spec, c: c}
	if tb.hosts, err = learnHosts(ctx, spec); err != nil {
		tb.stop(false)
		return nil, err
	}
	x.noteHosts(tb)
	if err := x.slowFsyncs(ctx, tb); err != nil {
		tb.stop(false)
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c.Discover(dctx)
	cancel()
	return tb, nil
}

// slowFsyncs adds FsyncDelay to every fsync of every node of tb (the
// nodes' file layer: the DiskFaults RPC's slow-disk fault). A restarted
// node starts without it: call again after a restart.
func (x *Run) slowFsyncs(ctx context.Context, tb *testbed) error {
	if x.FsyncDelay <= 0 {
		return nil
	}
	f := vfs.Fault{Kind: vfs.FaultSlowDisk, Latency: x.FsyncDelay}
	// The cluster goes with its testbed: no heal.
	if _, err := faults.SlowDisks(ctx, tb.spec.Addresses(), x.FsyncDelay); err != nil {
		return fmt.Errorf("%s: %w", f, err)
	}
	x.measured(Measurement{What: measureFsyncDelay, Backend: tb.spec.BackendName(), Where: "in every node process (its file layer)",
		How: fmt.Sprintf("%s on every node (-fsyncDelay: the DiskFaults RPC of nodes started with -diskFaults), on top of the disk's own", f)})
	return nil
}

// stop tears the cluster down and deletes its data (node logs are kept
// when keepLogs, e.g. after a failure).
func (t *testbed) stop(keepLogs bool) {
	t.c.Close()
	if t.spec == nil {
		return
	}
	if keepLogs && t.spec.BackendName() == cluster.BackendLocal {
		// Elsewhere the logs' tails are in the failure already: the
		// containers, volumes and remote directories go.
		t.spec.Down(false)
		for _, n := range t.spec.Nodes {
			os.RemoveAll(n.Data)
		}
		return
	}
	t.spec.Down(true)
}

// RunOptions configures a run of experiments.
type RunOptions struct {
	Experiments []Experiment
	Profile     Profile
	Systems     []string
	// OptionalSystems are added to Systems in the experiments that are
	// WithOptional (those not in Systems already).
	OptionalSystems []string
	OutDir          string
	Binary          string
	Servers         []string
	// Backend is where every cluster of every experiment runs.
	Backend cluster.BackendOptions
	// FsyncDelay, if set, is added to every fsync of every node of every
	// cluster the experiments start (serve -diskFaults and the slow-disk
	// fault): a slow-fsync disk on any machine, for the bounds' check.
	FsyncDelay time.Duration
	Out        io.Writer
	// Info is the run record written to config.json.
	Info any
	// Registry knows the systems: their geometry, condition flags and
	// background work (systems.System). Required for experiments that
	// start clusters; without it every system runs with its defaults.
	Registry *systems.Registry
	// MapsDataFiles are the systems whose engines read through mmap
	// (systems.System.MapsDataFiles): their read beds restart their nodes
	// after the load.
	MapsDataFiles []string
}

// Execute runs the experiments one after the other, writes each result,
// the figures, and the report. A failing experiment is recorded and the
// next one still runs. When ctx ends (an interrupt), the experiment
// running is saved marked Interrupted, with the steps it cut short, and
// the rest do not run. It returns the results.
func Execute(ctx context.Context, o RunOptions) ([]*Result, error) {
	var results []*Result
	prior := map[string]*Result{}
	build := buildinfo.Read()
	beds := &bedPool{dir: filepath.Join(o.OutDir, "read-beds"), beds: map[string]*testbed{}}
	for _, e := range o.Experiments {
		if e.UsesReadBeds {
			beds.users++
		}
	}
	defer beds.close()
	hosts := &hostPool{dir: o.OutDir}
	for i, e := range o.Experiments {
		if ctx.Err() != nil {
			break
		}
		dir := filepath.Join(o.OutDir, e.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return results, err
		}
		res := &Result{Name: e.Name, Title: e.Title, Shows: e.Shows, Params: map[string]any{},
			Metrics: map[string]float64{}, Start: time.Now(), Build: &build}
		syss := o.Systems
		if e.WithOptional {
			syss = withOptional(syss, o.OptionalSystems)
		}
		if len(o.Servers) == 0 {
			res.Backend = cmp.Or(o.Backend.Name, cluster.BackendLocal)
		}
		x := &Run{Profile: o.Profile, Systems: syss, Dir: dir, Binary: o.Binary, Servers: o.Servers, Backend: o.Backend, FsyncDelay: o.FsyncDelay,
			Out: o.Out, Prior: prior, res: res, beds: beds, reg: o.Registry, mapsDataFiles: o.MapsDataFiles, hosts: hosts, stopped: ctx.Done()}
		fmt.Fprintf(o.Out, "\n=== [%d/%d] %s: %s\n", i+1, len(o.Experiments), e.Name, e.Shows)
		var err error
		if e.NeedsOwnClusters && len(o.Servers) > 0 {
			err = fmt.Errorf("needs clusters of its own (it reads the nodes' counters through their agents); skipped with -servers")
		} else {
			err = e.run(ctx, x)
		}
		switch {
		case x.interrupted():
			res.Interrupted = true
		case err != nil:
			res.Error = err.Error()
			fmt.Fprintf(o.Out, "[%s] error: %v\n", e.Name, err)
		}
		res.Duration = time.Since(res.Start).Seconds()
		if len(x.figures) > 0 {
			if err := plots.Save(dir, x.figures...); err != nil {
				res.Error = errors.Join(errors.New(res.Error), err).Error()
			}
			for _, f := range x.figures {
				if err := plots.Render(dir, f); err != nil {
					res.Notes = append(res.Notes, fmt.Sprintf("figure %s not drawn: %v", f.Name, err))
				}
			}
		}
		os.RemoveAll(filepath.Join(dir, "clusters"))
		if err := writeJSON(filepath.Join(dir, "result.json"), res); err != nil {
			return results, err
		}
		if res.Interrupted {
			fmt.Fprintf(o.Out, "=== %s interrupted after %.0f s (result.json holds what it measured)\n", e.Name, res.Duration)
		} else {
			fmt.Fprintf(o.Out, "=== %s done in %.0f s\n", e.Name, res.Duration)
		}
		results = append(results, res)
		prior[e.Name] = res
	}
	if ctx.Err() != nil && len(results) < len(o.Experiments) {
		var left []string
		for _, e := range o.Experiments[len(results):] {
			left = append(left, e.Name)
		}
		fmt.Fprintf(o.Out, "not run (interrupted): %s\n", strings.Join(left, ", "))
	}
	return results, nil
}

// LoadResults reads every <dir>/*/result.json, in experiment order.
func LoadResults(dir string) ([]*Result, error) {
	order := map[string]int{}
	for i, e := range All() {
		order[e.Name] = i
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*", "result.json"))
	if err != nil {
		return nil, err
	}
	var out []*Result
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var r Result
		if err := json.Unmarshal(b, &r); err != nil || r.Name == "" || r.Metrics == nil && r.Params == nil {
			continue // some other tool's result.json (e.g. a check run)
		}
		out = append(out, &r)
	}
	if len(out) == 0 {
		return nil, cmdline.Usagef("%s holds no experiment results (<dir>/<experiment>/result.json)", dir)
	}
	sort.SliceStable(out, func(i, j int) bool { return order[out[i].Name] < order[out[j].Name] })
	return out, nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// withOptional returns syss followed by the systems of optional that it
// does not hold.
func withOptional(syss, optional []string) []string {
	out := slices.Clone(syss)
	for _, s := range optional {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
