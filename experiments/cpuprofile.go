package experiments

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/nezha-harness/nezha/cluster"
)

// CPU profiles of the nodes during a measured run: where the shared path
// and each system spend their CPU, measured rather than guessed. Every
// node serves Go's profiler at the address cluster.json records
// (Node.PprofAddress: a free port on loopback, the container's address on
// docker); the harness fetches /debug/pprof/profile from all of them at
// once while the workload runs, keeps the files beside the results (open
// them with `go tool pprof bin/nezha FILE`) and summarizes them.
//
// Go's profiler samples the threads it did not start (RocksDB's
// background compactions and flushes, threads "rocksdb:low" and
// "rocksdb:high") through the process-wide profiling timer, without their
// stacks: they appear as runtime._ExternalCode. procfs gives the same
// split exactly (windowStats.NodeCPUByThread); the report shows both.

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
			ch <- result{file: file, err: fetchProfile(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", n.PprofAddress, secs), file)}
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

func fetchProfile(ctx context.Context, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// cpuShare is a function or a category and its share of the sampled CPU.
type cpuShare struct {
	// Key names a category in metrics ("grpc"); empty for functions.
	Key  string `json:"key,omitempty"`
	Name string `json:"name"`
	// Share is a fraction of the CPU time sampled (0..1): flat for
	// functions (time in the function itself), cumulative for categories
	// (time with the category anywhere on the stack).
	Share float64 `json:"share"`
}

// cpuProfileSummary is what the nodes' merged CPU profiles say.
type cpuProfileSummary struct {
	Files []string `json:"files"`
	// SampledSeconds is the CPU time in the profiles, summed over nodes.
	SampledSeconds float64 `json:"sampled_cpu_seconds"`
	// Top are the functions with the most flat time, most first.
	Top []cpuShare `json:"top_flat"`
	// Categories are cumulative shares of the parts of the path named in
	// cpuCategories, in that order.
	Categories []cpuShare `json:"categories"`
}

// cpuCategories name parts of the path by the functions on a sample's
// stack (a prefix of the fully qualified function name). A sample counts
// in every category it matches, so the shares overlap; a category with
// excludes does not count a sample with any of them on its stack.
var cpuCategories = []struct {
	key, name string
	prefixes  []string
	excludes  []string
}{
	{key: "rocksdb_background", name: "RocksDB background threads (no stacks)", prefixes: []string{"runtime._ExternalCode"}},
	{key: "rocksdb_foreground", name: "RocksDB foreground (cgo)", prefixes: []string{"github.com/linxGnu/grocksdb."}},
	// gRPC's server calls the handlers, so it is on the stack of almost
	// everything a node does for a client: count only what runs outside
	// the handlers' own code (HTTP/2 framing, sockets, the codec).
	{key: "grpc", name: "gRPC and sockets, outside the handlers", prefixes: []string{"google.golang.org/grpc", "net.(*conn)", "net/http."}, excludes: appPrefixes},
	{key: "protobuf", name: "protobuf", prefixes: []string{"google.golang.org/protobuf"}},
	{key: "etcd_raft", name: "etcd raft", prefixes: []string{"go.etcd.io/raft"}},
	{key: "raft_log", name: "Raft log", prefixes: []string{"github.com/nezha-harness/nezha/raftkv/raftlog."}},
	{key: "nezha_store", name: "nezha store", prefixes: []string{"github.com/nezha-harness/nezha/nezha."}},
	{key: "syscalls", name: "system calls (socket and file I/O)", prefixes: []string{"syscall.", "internal/runtime/syscall.", "golang.org/x/sys/unix."}},
	{key: "fsync", name: "fsync", prefixes: []string{"syscall.Fsync", "golang.org/x/sys/unix.Fsync", "golang.org/x/sys/unix.Fdatasync", "syscall.Fdatasync"}},
	{key: "crc", name: "CRC", prefixes: []string{"hash/crc32."}},
	{key: "memmove", name: "memmove/memclr", prefixes: []string{"runtime.memmove", "runtime.memclrNoHeapPointers"}},
	{key: "go_gc", name: "Go GC", prefixes: []string{"runtime.gcBgMarkWorker", "runtime.gcAssistAlloc", "runtime.bgsweep", "runtime.bgscavenge"}},
}

// appPrefixes are the code a node's gRPC handlers run: the node, the
// stores and the engines under them.
var appPrefixes = []string{
	"github.com/nezha-harness/nezha/raftkv/node.", "github.com/nezha-harness/nezha/raftkv/raftlog.",
	"github.com/nezha-harness/nezha/nezha.", "github.com/nezha-harness/nezha/baseline.", "github.com/nezha-harness/nezha/dwisckey.",
	"github.com/linxGnu/grocksdb.", "go.etcd.io/raft", "github.com/dgraph-io/badger",
}

// summarizeProfiles merges CPU profiles and computes the top flat
// functions and the category shares.
func summarizeProfiles(files []string, topN int) (*cpuProfileSummary, error) {
	var ps []*profile.Profile
	for _, f := range files {
		b, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		p, err := profile.Parse(b)
		b.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("no profiles")
	}
	p, err := profile.Merge(ps)
	if err != nil {
		return nil, err
	}
	vi := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			vi = i
		}
	}
	if vi < 0 {
		return nil, fmt.Errorf("not a CPU profile (sample types %v)", p.SampleType)
	}
	flat := map[string]int64{}
	cum := make([]int64, len(cpuCategories))
	var total int64
	for _, s := range p.Sample {
		v := s.Value[vi]
		total += v
		var funcs []string // innermost first
		for _, loc := range s.Location {
			named := false
			for _, ln := range loc.Line { // inlined calls first
				if ln.Function != nil && ln.Function.Name != "" {
					funcs = append(funcs, ln.Function.Name)
					named = true
				}
			}
			if !named && loc.Mapping != nil && loc.Mapping.File != "" {
				// Code without symbols, named by its file as pprof
				// does: "[libc.so.6]".
				funcs = append(funcs, "["+filepath.Base(loc.Mapping.File)+"]")
			}
		}
		if len(funcs) > 0 {
			flat[funcs[0]] += v
		} else {
			flat["(unknown)"] += v
		}
		onStack := func(prefixes []string) bool {
			return slices.ContainsFunc(funcs, func(fn string) bool {
				return slices.ContainsFunc(prefixes, func(pre string) bool { return strings.HasPrefix(fn, pre) })
			})
		}
		for ci, c := range cpuCategories {
			if onStack(c.prefixes) && (len(c.excludes) == 0 || !onStack(c.excludes)) {
				cum[ci] += v
			}
		}
	}
	sum := &cpuProfileSummary{Files: files, SampledSeconds: float64(total) / 1e9}
	if total == 0 {
		return sum, nil
	}
	for name, v := range flat {
		sum.Top = append(sum.Top, cpuShare{Name: name, Share: float64(v) / float64(total)})
	}
	slices.SortFunc(sum.Top, func(a, b cpuShare) int {
		if a.Share != b.Share {
			if a.Share > b.Share {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	sum.Top = sum.Top[:min(topN, len(sum.Top))]
	for ci, c := range cpuCategories {
		sum.Categories = append(sum.Categories, cpuShare{Key: c.key, Name: c.name, Share: float64(cum[ci]) / float64(total)})
	}
	return sum, nil
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
	Profile *cpuProfileSummary
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
	for i := range cpuCategories {
		parts.Rows = append(parts.Rows, []string{cpuCategories[i].name})
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
				cell = fmt.Sprintf("%s %s", shortFunc(t.Name), pct(t.Share))
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

// shortFunc drops a function name's module path: "raftlog.(*Log).Append".
func shortFunc(name string) string {
	if i := strings.LastIndex(name, "/"); i >= 0 {
		return name[i+1:]
	}
	return name
}
