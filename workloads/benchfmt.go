package workloads

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/nezha-harness/nezha/api/kvpb"
)

// userHz is Linux's USER_HZ: /proc/PID/stat counts CPU time in 1/100 s on
// every architecture Go supports (proc(5)).
const userHz = 100

// NodeCPU reads the CPU time (utime + stime, /proc/PID/stat) of the servers
// that run on this machine, as reported by their Status (pid, loopback
// address). ok is false unless every server is local and readable.
type NodeCPU struct {
	pids []int64
}

// NewNodeCPU returns the local servers among sts, which must be the
// statuses of every member.
func NewNodeCPU(sts []*kvpb.StatusResponse) NodeCPU {
	var c NodeCPU
	if len(sts) == 0 || len(sts) < len(sts[0].Members) {
		return c
	}
	for _, st := range sts {
		host, _, err := net.SplitHostPort(st.Address)
		if ip := net.ParseIP(host); err != nil || st.Pid == 0 || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
			return NodeCPU{}
		}
		c.pids = append(c.pids, st.Pid)
	}
	return c
}

// Seconds returns the summed CPU seconds of the servers.
func (c NodeCPU) Seconds() (float64, bool) {
	if len(c.pids) == 0 {
		return 0, false
	}
	var ticks int64
	for _, pid := range c.pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, false
		}
		// Fields after the command (which may hold spaces) start after ')'.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			return 0, false
		}
		for _, x := range f[11:13] { // utime, stime: fields 14 and 15 of proc(5)
			v, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				return 0, false
			}
			ticks += v
		}
	}
	return float64(ticks) / userHz, true
}

// WriteBenchfmt writes s as one line of the Go benchmark format
// (golang.org/x/perf/benchfmt), so that benchstat compares runs: name is
// the benchmark's name without the "Benchmark" prefix; nodeCPUSec, if not
// negative, is the servers' CPU time during the run.
func WriteBenchfmt(w io.Writer, name string, s Summary, nodeCPUSec float64) {
	var b strings.Builder
	fmt.Fprintf(&b, "Benchmark%s 1", name)
	if s.OpsPerSec > 0 {
		fmt.Fprintf(&b, " %.0f ns/op %.1f ops/s", 1e9/s.OpsPerSec, s.OpsPerSec)
	}
	if s.Bytes > 0 {
		fmt.Fprintf(&b, " %.2f MB/s", s.MBPerSec)
	}
	fmt.Fprintf(&b, " %d p50-us %d p99-us", s.P50Us, s.P99Us)
	if nodeCPUSec >= 0 && s.Ops > 0 {
		fmt.Fprintf(&b, " %.1f node-cpu-us/op", nodeCPUSec*1e6/float64(s.Ops))
		if s.Bytes > 0 {
			fmt.Fprintf(&b, " %.3f node-cpu-s/GiB", nodeCPUSec/(float64(s.Bytes)/(1<<30)))
		}
	}
	fmt.Fprintln(w, b.String())
}

// BenchName is the benchmark name of a bench run: the operation, then
// key=value parts (benchstat's sub-benchmark syntax), e.g.
// Put/system=nezha/vsize=262144/cnums=50.
func BenchName(op, system string, parts ...string) string {
	name := strings.ToUpper(op[:1]) + op[1:]
	if system != "" {
		name += "/system=" + system
	}
	for _, p := range parts {
		name += "/" + p
	}
	return name
}
