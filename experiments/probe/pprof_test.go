package probe

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/pprof/profile"
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
	s, err := SummarizeCPUProfiles([]string{a, b}, 2)
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
	if _, err := SummarizeCPUProfiles([]string{filepath.Join(dir, "missing")}, 2); err == nil {
		t.Error("a missing file summarized without error")
	}
}
