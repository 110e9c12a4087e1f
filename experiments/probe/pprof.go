package probe

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/pprof/profile"
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
// split exactly (the experiments' windowStats.NodeCPUByThread); the
// report shows both.

// FetchCPUProfile fetches a profile from url (a node's
// /debug/pprof/profile) into file.
func FetchCPUProfile(ctx context.Context, url, file string) error {
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

// CPUShare is a function or a category and its share of the sampled CPU.
type CPUShare struct {
	// Key names a category in metrics ("grpc"); empty for functions.
	Key  string `json:"key,omitempty"`
	Name string `json:"name"`
	// Share is a fraction of the CPU time sampled (0..1): flat for
	// functions (time in the function itself), cumulative for categories
	// (time with the category anywhere on the stack).
	Share float64 `json:"share"`
}

// CPUProfileSummary is what the nodes' merged CPU profiles say.
type CPUProfileSummary struct {
	Files []string `json:"files"`
	// SampledSeconds is the CPU time in the profiles, summed over nodes.
	SampledSeconds float64 `json:"sampled_cpu_seconds"`
	// Top are the functions with the most flat time, most first.
	Top []CPUShare `json:"top_flat"`
	// Categories are cumulative shares of the parts of the path named in
	// cpuCategories, in that order.
	Categories []CPUShare `json:"categories"`
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

// CPUCategoryNames are the names of the categories of
// CPUProfileSummary.Categories, in that order.
func CPUCategoryNames() []string {
	names := make([]string, len(cpuCategories))
	for i, c := range cpuCategories {
		names[i] = c.name
	}
	return names
}

// appPrefixes are the code a node's gRPC handlers run: the node, the
// stores and the engines under them.
var appPrefixes = []string{
	"github.com/nezha-harness/nezha/raftkv/node.", "github.com/nezha-harness/nezha/raftkv/raftlog.",
	"github.com/nezha-harness/nezha/nezha.", "github.com/nezha-harness/nezha/baseline.", "github.com/nezha-harness/nezha/dwisckey.",
	"github.com/linxGnu/grocksdb.", "go.etcd.io/raft", "github.com/dgraph-io/badger",
}

// SummarizeCPUProfiles merges CPU profiles and computes the top flat
// functions and the category shares.
func SummarizeCPUProfiles(files []string, topN int) (*CPUProfileSummary, error) {
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
	sum := &CPUProfileSummary{Files: files, SampledSeconds: float64(total) / 1e9}
	if total == 0 {
		return sum, nil
	}
	for name, v := range flat {
		sum.Top = append(sum.Top, CPUShare{Name: name, Share: float64(v) / float64(total)})
	}
	slices.SortFunc(sum.Top, func(a, b CPUShare) int {
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
		sum.Categories = append(sum.Categories, CPUShare{Key: c.key, Name: c.name, Share: float64(cum[ci]) / float64(total)})
	}
	return sum, nil
}

// ShortFunc drops a function name's module path: "raftlog.(*Log).Append".
func ShortFunc(name string) string {
	if i := strings.LastIndex(name, "/"); i >= 0 {
		return name[i+1:]
	}
	return name
}
