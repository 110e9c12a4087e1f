package workloads

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/nezha-harness/nezha/api/kvpb"
)

func TestWriteBenchfmt(t *testing.T) {
	var b strings.Builder
	s := Summary{Op: "put", Ops: 4000, Bytes: 4 << 30, OpsPerSec: 500, MBPerSec: 131.07, Latency: Latency{P50Us: 90000, P99Us: 250000}}
	WriteBenchfmt(&b, BenchName("put", "nezha-nogc", "vsize=262144", "cnums=50"), s, 10)
	want := regexp.MustCompile(`^BenchmarkPut/system=nezha-nogc/vsize=262144/cnums=50 1 2000000 ns/op 500\.0 ops/s 131\.07 MB/s ` +
		`90000 p50-us 250000 p99-us 2500\.0 node-cpu-us/op 2\.500 node-cpu-s/GiB\n$`)
	if !want.MatchString(b.String()) {
		t.Fatalf("benchfmt line %q", b.String())
	}
	b.Reset()
	WriteBenchfmt(&b, "Get", Summary{Op: "get", Ops: 10, OpsPerSec: 100}, -1)
	if strings.Contains(b.String(), "node-cpu") || strings.Contains(b.String(), "MB/s") {
		t.Fatalf("a run without node CPU or bytes printed them: %q", b.String())
	}
}

func TestNodeCPUOnlyForLocalServers(t *testing.T) {
	self := &kvpb.StatusResponse{Address: "127.0.0.1:1", Pid: int64(os.Getpid()), Members: []*kvpb.Member{{Id: 1}}}
	if s, ok := NewNodeCPU([]*kvpb.StatusResponse{self}).Seconds(); !ok || s < 0 {
		t.Fatalf("local server: %v %v", s, ok)
	}
	remote := &kvpb.StatusResponse{Address: "10.0.0.1:1", Pid: int64(os.Getpid()), Members: []*kvpb.Member{{Id: 1}}}
	if _, ok := NewNodeCPU([]*kvpb.StatusResponse{remote}).Seconds(); ok {
		t.Fatal("a remote server's CPU was read from this machine")
	}
	partial := &kvpb.StatusResponse{Address: "127.0.0.1:1", Pid: int64(os.Getpid()), Members: []*kvpb.Member{{Id: 1}, {Id: 2}}}
	if _, ok := NewNodeCPU([]*kvpb.StatusResponse{partial}).Seconds(); ok {
		t.Fatal("CPU of some members reported as the nodes' CPU")
	}
}
