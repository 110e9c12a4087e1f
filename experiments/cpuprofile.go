package experiments

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/nezha-harness/nezha/systems/cluster"
)

// CPU profiles of the nodes during a measured run: where the shared path
// and each system spend their CPU, measured rather than guessed. The nodes
// serve Go's profiler (-pprofAddress 127.0.0.1:0, the address is in each
// node's log); the harness fetches /debug/pprof/profile from all of them
// at once while the workload runs, keeps the files beside the results
// (open them with `go tool pprof bin/nezha FILE`) and summarizes them.
//
// Go's profiler samples the threads it did not start (RocksDB's
// background compactions and flushes, threads "rocksdb:low" and
// "rocksdb:high") through the process-wide profiling timer, without their
// stacks: they appear as runtime._ExternalCode. procfs gives the same
// split exactly (windowStats.NodeCPUByThread); the report shows both.

// pprofArgs make a node serve Go's profiler on a free loopback port.
func pprofArgs() []string { return []string{"-pprofAddress", "127.0.0.1:0"} }

// pprofAddressPattern finds the address a node logs when it serves the
// profiler (serve's "pprof_address" attribute, in -logFormat text or json).
var pprofAddressPattern = regexp.MustCompile(`pprof_address(?:=|":")([^\s"]+)`)

// pprofAddress reads node n's profiler address from its log, waiting up to
// 5 s for the line.
func pprofAddress(ctx context.Context, n cluster.Node) (string, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(n.Log)
		if err == nil {
			if m := pprofAddressPattern.FindSubmatch(b); m != nil {
				return string(m[1]), nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("node %d: no pprof_address in %s (started without -pprofAddress?)", n.ID, n.Log)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// profileNodes takes a CPU profile of every node of spec for d (whole
// seconds, at least 1), all at once, and writes them to
// dir/<prefix>-node<ID>.pprof. It returns the files written.
func profileNodes(ctx context.Context, spec *cluster.Spec, d time.Duration, dir, prefix string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	secs := max(int(d/time.Second), 1)
	type result struct {
		file string
		err  error
	}
	ch := make(chan result, len(spec.Nodes))
	for _, n := range spec.Nodes {
		go func() {
			addr, err := pprofAddress(ctx, n)
			if err != nil {
				ch <- result{err: err}
				return
			}
			file := filepath.Join(dir, fmt.Sprintf("%s-node%d.pprof", prefix, n.ID))
			ch <- result{file: file, err: fetchProfile(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), file)}
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
		return files, fmt.Errorf("cpu profile: %s", strings.Join(errs, "; "))
	}
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
// in every category it matches, so the shares overlap.
var cpuCategories = []struct {
	key, name string
	prefixes  []string
}{
	{"rocksdb_background", "RocksDB background threads (no stacks)", []string{"runtime._ExternalCode"}},
	{"rocksdb_foreground", "RocksDB foreground (cgo)", []string{"github.com/linxGnu/grocksdb."}},
	{"grpc", "gRPC and sockets", []string{"google.golang.org/grpc", "net.(*conn)", "net/http."}},
	{"protobuf", "protobuf", []string{"google.golang.org/protobuf", "github.com/nezha-harness/nezha/systems/kvpb."}},
	{"etcd_raft", "etcd raft", []string{"go.etcd.io/raft"}},
	{"raft_log", "Raft log", []string{"github.com/nezha-harness/nezha/systems/raftlog."}},
	{"nezha_store", "nezha store", []string{"github.com/nezha-harness/nezha/nezha."}},
	{"syscalls", "system calls (socket and file I/O)", []string{"syscall.", "internal/runtime/syscall.", "golang.org/x/sys/unix."}},
	{"fsync", "fsync", []string{"syscall.Fsync", "golang.org/x/sys/unix.Fsync", "golang.org/x/sys/unix.Fdatasync", "syscall.Fdatasync"}},
	{"crc", "CRC", []string{"hash/crc32."}},
	{"memmove", "memmove/memclr", []string{"runtime.memmove", "runtime.memclrNoHeapPointers"}},
	{"go_gc", "Go GC", []string{"runtime.gcBgMarkWorker", "runtime.gcAssistAlloc", "runtime.bgsweep", "runtime.bgscavenge"}},
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
		for ci, c := range cpuCategories {
			if slices.ContainsFunc(funcs, func(fn string) bool {
				return slices.ContainsFunc(c.prefixes, func(pre string) bool { return strings.HasPrefix(fn, pre) })
			}) {
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

// shortFunc drops a function name's module path: "raftlog.(*Log).Append".
func shortFunc(name string) string {
	if i := strings.LastIndex(name, "/"); i >= 0 {
		return name[i+1:]
	}
	return name
}
