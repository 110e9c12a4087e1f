package experiments

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/experiments/probe"
)

// The nodes' CPU profiles in a measured run: taking them (probe fetches
// and summarizes them) and the tables of where the CPU went.

// profileNodes takes a CPU profile of every node of spec for d (whole
// seconds, at least 1), all at once, and writes them to
// dir/<prefix>-node<ID>.pprof. It returns the files written.
func (x *Run) profileNodes(ctx context.Context, spec *cluster.Spec, d time.Duration, dir, prefix string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	m := Measurement{What: measureProfiles, Backend: spec.BackendName(), Where: "from each node's profiler over the network",
		How: "Go's /debug/pprof/profile at the address cluster.json records (pprof_address)"}
	secs := max(int(d/time.Second), 1)
	type result struct {
		file string
		err  error
	}
	ch := make(chan result, len(spec.Nodes))
	for _, n := range spec.Nodes {
		go func() {
			if n.PprofAddress == "" {
				ch <- result{err: fmt.Errorf("node %d serves no profiler (no pprof_address in %s)", n.ID, cluster.FileName)}
				return
			}
			file := filepath.Join(dir, fmt.Sprintf("%s-node%d.pprof", prefix, n.ID))
			ch <- result{file: file, err: probe.FetchCPUProfile(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", n.PprofAddress, secs), file)}
		}()
	}
	var files []string
	var errs []string
	for range spec.Nodes {
		r := <-ch
		if r.err != nil {
			errs = append(errs, r.err.Error())
			continue
		}
		files = append(files, r.file)
	}
	slices.Sort(files)
	if len(errs) > 0 {
		m.FellBackFrom, m.How, m.Why = m.How, "no profile of some nodes", strings.Join(errs, "; ")
		x.measured(m)
		return files, fmt.Errorf("cpu profile: %s", strings.Join(errs, "; "))
	}
	x.measured(m)
	return files, nil
}

// profiledRun is one measured run whose nodes were profiled.
type profiledRun struct {
	System string
	// Rate is the run's throughput in the unit of profileTablesSpec.RateColumn.
	Rate float64
	// Per is what the nodes' CPU seconds are divided by (GB of user data,
	// operations), before profileTablesSpec.PerScale.
	Per     float64
	Window  windowStats
	Profile *probe.CPUProfileSummary
}

// profileTablesSpec names the columns and metrics of profileTables.
type profileTablesSpec struct {
	// What completes "Node CPU in the profiled ...".
	What string
	// RateColumn heads profiledRun.Rate ("MB/s", "ops/s").
	RateColumn string
	// PerColumn heads node CPU seconds / Per x PerScale ("node CPU s/GB",
	// "node CPU us/op").
	PerColumn string
	PerScale  float64
	// MetricPrefix starts the metrics of the category shares
	// (prefix/system/category).
	MetricPrefix string
	// PerMetric, if set, names the metric of the PerColumn value
	// (PerMetric/system).
	PerMetric string
}

// profileTables shows where the nodes' CPU went in profiled runs: by
// thread (procfs), by part of the path and by function (the Go profiles),
// all as shares of the nodes' CPU time, one column per run.
func (x *Run) profileTables(spec profileTablesSpec, runs []profiledRun) {
	if len(runs) == 0 {
		return
	}
	pct := func(v float64) string { return fmt.Sprintf("%.0f %%", 100*v) }
	threads := Table{Title: "Node CPU in the profiled " + spec.What + ", by thread (procfs): RocksDB's compactions run on rocksdb:low threads and its flushes on rocksdb:high; machine busy counts both CPUs (clients included)",
		Columns: []string{"system", spec.RateColumn, spec.PerColumn, "machine busy", "Go threads", "rocksdb:low (compaction)", "rocksdb:high (flush)", "exited threads", "profile (CPU s sampled)", "profile files"}}
	parts := Table{Title: "Where the nodes spend it, from the CPU profiles (share of the sampled CPU with the part anywhere on the stack; parts overlap; RocksDB's own threads are sampled without stacks)", Columns: []string{"part of the path"}}
	top := Table{Title: "The functions with the most CPU of their own (flat, share of the sampled CPU; [file] is code without symbols; `go tool pprof -top bin/nezha FILE` shows the rest)", Columns: []string{"rank"}}
	const topN = 8
	for _, name := range probe.CPUCategoryNames() {
		parts.Rows = append(parts.Rows, []string{name})
	}
	for i := range topN {
		top.Rows = append(top.Rows, []string{fmt.Sprint(i + 1)})
	}
	for _, r := range runs {
		w := r.Window
		total := w.NodeCPUSeconds
		share := func(g string) string {
			if total <= 0 {
				return "-"
			}
			return pct(w.NodeCPUByThread[g] / total)
		}
		var files []string
		for _, f := range r.Profile.Files {
			if rel, err := filepath.Rel(x.Dir, f); err == nil {
				f = rel
			}
			files = append(files, f)
		}
		per := "-"
		if r.Per > 0 {
			per = f1(total / r.Per * spec.PerScale)
		}
		threads.Rows = append(threads.Rows, []string{r.System, f1(r.Rate), per, pct(w.MachineBusy),
			share(threadGo), share("rocksdb:low"), share("rocksdb:high"), share(threadExited), f1(r.Profile.SampledSeconds), strings.Join(files, " ")})
		parts.Columns = append(parts.Columns, r.System)
		for i, c := range r.Profile.Categories {
			parts.Rows[i] = append(parts.Rows[i], pct(c.Share))
			x.metric(fmt.Sprintf("%s/%s/%s", spec.MetricPrefix, r.System, c.Key), c.Share)
		}
		top.Columns = append(top.Columns, r.System)
		for i := range topN {
			cell := "-"
			if i < len(r.Profile.Top) {
				t := r.Profile.Top[i]
				cell = fmt.Sprintf("%s %s", probe.ShortFunc(t.Name), pct(t.Share))
			}
			top.Rows[i] = append(top.Rows[i], cell)
		}
		if total > 0 {
			x.metric(spec.MetricPrefix+"/"+r.System+"/rocksdb_low_threads", w.NodeCPUByThread["rocksdb:low"]/total)
			x.metric(spec.MetricPrefix+"/"+r.System+"/rocksdb_high_threads", w.NodeCPUByThread["rocksdb:high"]/total)
			x.metric(spec.MetricPrefix+"/"+r.System+"/machine_busy", w.MachineBusy)
		}
		if spec.PerMetric != "" && r.Per > 0 {
			x.metric(spec.PerMetric+"/"+r.System, total/r.Per*spec.PerScale)
		}
	}
	x.table(threads)
	x.table(parts)
	x.table(top)
}
