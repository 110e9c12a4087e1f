package experiments

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/internal/buildinfo"
	"github.com/nezha-harness/nezha/plots"
	"github.com/nezha-harness/nezha/systems"
	"github.com/nezha-harness/nezha/workloads"
)

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
	args = append(args, x.gcArgs(system, "", x.Profile.GCThresholdBytes)...)
	return append(args, extra...)
}

// gcArgs are sys's serve flags for GC strategy (empty: its default) and
// round threshold (systems.System.GCFlags); none for a system without
// GC. A later flag overrides an earlier one, so an experiment's own
// threshold, passed as an extra flag, wins over the profile's.
func (x *Run) gcArgs(sys, strategy string, thresholdBytes int64) []string {
	s, ok := x.system(sys)
	if !ok || s.GCFlags == nil {
		return nil
	}
	return s.GCFlags(strategy, thresholdBytes)
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
	// start clusters: without it they fail (their clusters would run every
	// system with its defaults).
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
