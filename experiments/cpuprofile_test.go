package experiments

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/nezha-harness/nezha/cluster"
)

// writeCPUProfile writes a CPU profile whose samples are the given stacks
// (innermost function first) with the given CPU nanoseconds.
func writeCPUProfile(t *testing.T, file string, stacks [][]string, nanos []int64) {
	t.Helper()
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}, Period: 10_000_000,
	}
	fns := map[string]*profile.Location{}
	for i, st := range stacks {
		var locs []*profile.Location
		for _, name := range st {
			l, ok := fns[name]
			if !ok {
				f := &profile.Function{ID: uint64(len(p.Function) + 1), Name: name}
				p.Function = append(p.Function, f)
				l = &profile.Location{ID: uint64(len(p.Location) + 1), Line: []profile.Line{{Function: f}}}
				p.Location = append(p.Location, l)
				fns[name] = l
			}
			locs = append(locs, l)
		}
		p.Sample = append(p.Sample, &profile.Sample{Location: locs, Value: []int64{nanos[i] / 1e7, nanos[i]}})
	}
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func TestSummarizeProfiles(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.pprof"), filepath.Join(dir, "b.pprof")
	writeCPUProfile(t, a, [][]string{
		{"hash/crc32.ieeeCLMUL", "github.com/nezha-harness/nezha/raftkv/raftlog.(*Log).Append", "go.etcd.io/raft.(*node).run"},
		{"runtime.memmove", "google.golang.org/grpc.(*Server).handleStream"},
	}, []int64{6e8, 2e8})
	writeCPUProfile(t, b, [][]string{
		{"syscall.Fsync", "github.com/linxGnu/grocksdb._Cfunc_rocksdb_write"},
		// gRPC called the handler: the sample is the handler's, not gRPC's.
		{"runtime.memmove", "github.com/nezha-harness/nezha/raftkv/raftlog.(*Log).Append", "google.golang.org/grpc.(*Server).handleStream"},
	}, []int64{1e8, 1e8})
	s, err := summarizeProfiles([]string{a, b}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if s.SampledSeconds != 1.0 {
		t.Errorf("sampled %.3f s, want 1.0 (the two profiles merged)", s.SampledSeconds)
	}
	if len(s.Top) != 2 || s.Top[0].Name != "hash/crc32.ieeeCLMUL" || s.Top[0].Share != 0.6 ||
		s.Top[1].Name != "runtime.memmove" || s.Top[1].Share != 0.3 {
		t.Errorf("top = %+v, want crc32 0.6 then memmove 0.3", s.Top)
	}
	want := map[string]float64{"raft_log": 0.7, "crc": 0.6, "etcd_raft": 0.6, "grpc": 0.2,
		"rocksdb_foreground": 0.1, "memmove": 0.3, "nezha_store": 0, "fsync": 0.1, "syscalls": 0.1}
	for _, c := range s.Categories {
		if w, ok := want[c.Key]; ok {
			if c.Share < w-1e-9 || c.Share > w+1e-9 {
				t.Errorf("category %q = %.3f, want %.3f", c.Key, c.Share, w)
			}
			delete(want, c.Key)
		}
	}
	if len(want) > 0 {
		t.Errorf("categories %v missing", want)
	}
	if len(s.Categories) != len(cpuCategories) {
		t.Errorf("%d categories, want %d", len(s.Categories), len(cpuCategories))
	}
	if _, err := summarizeProfiles([]string{filepath.Join(dir, "missing")}, 2); err == nil {
		t.Error("a missing file summarized without error")
	}
}

// TestProfileNodes: profiles come from the address cluster.json records;
// a node without one is an error and the measurement says it fell back.
func TestProfileNodes(t *testing.T) {
	dir := t.TempDir()
	body := filepath.Join(dir, "served.pprof")
	writeCPUProfile(t, body, [][]string{{"main.f"}}, []int64{1e7})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/pprof/profile" || r.URL.Query().Get("seconds") != "1" {
			http.Error(w, "unexpected "+r.URL.String(), http.StatusNotFound)
			return
		}
		http.ServeFile(w, r, body)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	x := &Run{res: &Result{}}
	spec := &cluster.Spec{Nodes: []cluster.Node{{ID: 1, PprofAddress: addr}}}
	files, err := x.profileNodes(context.Background(), spec, time.Second, filepath.Join(dir, "out"), "p")
	if err != nil || len(files) != 1 || filepath.Base(files[0]) != "p-node1.pprof" {
		t.Fatalf("profileNodes = %v, %v", files, err)
	}
	if ms := x.res.Measurements; len(ms) != 1 || ms[0].What != measureProfiles || ms[0].FellBackFrom != "" || ms[0].Backend != cluster.BackendLocal {
		t.Fatalf("measurements %+v, want one of %s without fallback", ms, measureProfiles)
	}
	spec.Nodes = append(spec.Nodes, cluster.Node{ID: 2})
	files, err = x.profileNodes(context.Background(), spec, time.Second, filepath.Join(dir, "out"), "q")
	if err == nil || !strings.Contains(err.Error(), "node 2 serves no profiler") || len(files) != 1 {
		t.Fatalf("with a node without an address: %v, %v", files, err)
	}
	if ms := x.res.Measurements; len(ms) != 2 || ms[1].FellBackFrom == "" || !strings.Contains(ms[1].Why, "node 2") {
		t.Fatalf("measurements %+v, want a fallback naming node 2", ms)
	}
}
