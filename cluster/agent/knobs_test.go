package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
	"github.com/nezha-harness/nezha/internal/machine"
)

// TestMemoryCgroup: a node started inside a memory cgroup, its limit
// changed, the node moved out (the group removed) and in again; the group
// goes with the agent.
func TestMemoryCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("memory cgroup: needs root")
	}
	if _, err := probeMemoryCgroup(fmt.Sprintf("%s%d-test", groupPrefix, os.Getpid())); err != nil {
		t.Skipf("memory cgroup: %v", err)
	}
	a := startAgent(t, nil)
	ctx := ctxT(t)
	const limit = 512 << 20
	var name string
	inGroup := func(pid int) bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(string(b), "/"+name+"\n")
	}
	stats := func() *agentpb.MemoryStatsResponse {
		t.Helper()
		r, err := a.MemoryStats(ctx, &agentpb.MemoryStatsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	pid := a.start(t, limit, "-alloc", "4194304")
	// The start line names the group.
	text := a.waitLog(t, "in memory cgroup ")
	_, after, _ := strings.Cut(text, "in memory cgroup ")
	dir, _, _ := strings.Cut(after, ",")
	name = filepath.Base(dir)
	if !strings.HasPrefix(name, fmt.Sprintf("%s%d-", groupPrefix, os.Getpid())) {
		t.Fatalf("group %q (from the log: %q)", name, text)
	}
	if st := stats(); !st.InGroup || st.LimitBytes != limit || st.UsageBytes < 4<<20 || st.OomKills != 0 || !inGroup(pid) {
		t.Fatalf("started in a group of %d bytes: %v (in the group: %v)", limit, st, inGroup(pid))
	}
	r, err := a.SetMemoryLimit(ctx, &agentpb.SetMemoryLimitRequest{LimitBytes: limit / 2})
	if err != nil || r.Version != CgroupVersion() || filepath.Base(r.Cgroup) != name {
		t.Fatalf("SetMemoryLimit: %v, %v", r, err)
	}
	if st := stats(); st.LimitBytes != limit/2 {
		t.Fatalf("limit now %d, want %d", st.LimitBytes, limit/2)
	}
	if _, err := a.SetMemoryLimit(ctx, &agentpb.SetMemoryLimitRequest{}); err != nil {
		t.Fatal(err)
	}
	if st := stats(); st.InGroup || inGroup(pid) {
		t.Fatalf("after limit 0: %v (in the group: %v)", st, inGroup(pid))
	}
	if _, err := os.Stat(r.Cgroup); !os.IsNotExist(err) {
		t.Fatalf("group %s after limit 0: %v", r.Cgroup, err)
	}
	if _, err := a.SetMemoryLimit(ctx, &agentpb.SetMemoryLimitRequest{LimitBytes: limit}); err != nil {
		t.Fatal(err)
	}
	if st := stats(); !st.InGroup || st.LimitBytes != limit || !inGroup(pid) {
		t.Fatalf("moved into a group: %v", st)
	}
	a.signal(t, agentpb.Sig_KILL, 0)
	_, err = a.SetMemoryLimit(ctx, &agentpb.SetMemoryLimitRequest{LimitBytes: limit})
	wantCode(t, "SetMemoryLimit with no node", err, codes.FailedPrecondition)
	a.start(t, limit)
	if err := a.shutdown(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.Cgroup); !os.IsNotExist(err) {
		t.Fatalf("group %s outlived the agent: %v", r.Cgroup, err)
	}
}

func TestDropCaches(t *testing.T) {
	if err := writable(dropCachesPath); err != nil {
		t.Skipf("drop caches: not allowed here: %v", err)
	}
	a := startAgent(t, nil)
	if _, err := a.DropCaches(ctxT(t), &agentpb.DropCachesRequest{}); err != nil {
		t.Fatal(err)
	}
}

// TestReadAhead: set twice, then 0 puts back the value before the first;
// what is set when the agent stops is put back too. It changes the
// readahead of the disk under the temporary directory for a moment.
func TestReadAhead(t *testing.T) {
	device, path := machine.DataDevice(os.TempDir())
	if path == "" {
		t.Skipf("readahead: no read_ahead_kb for the device of %s (%q)", os.TempDir(), device)
	}
	if err := writable(path); err != nil {
		t.Skipf("readahead: not allowed here: %v", err)
	}
	orig := machine.ReadAheadKB(path)
	t.Cleanup(func() { SetReadAhead(path, orig) })
	a := startAgent(t, nil)
	ctx := ctxT(t)
	set := func(kb int64) *agentpb.SetReadAheadResponse {
		t.Helper()
		r, err := a.SetReadAhead(ctx, &agentpb.SetReadAheadRequest{Kb: kb})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	one, two := orig+64, orig+128
	if r := set(one); r.WasKb != orig || r.Device != device || machine.ReadAheadKB(path) != one {
		t.Fatalf("set %d: %v, file says %d", one, r, machine.ReadAheadKB(path))
	}
	if r := set(two); r.WasKb != one || machine.ReadAheadKB(path) != two {
		t.Fatalf("set %d: %v", two, r)
	}
	if r := set(0); r.WasKb != two || machine.ReadAheadKB(path) != orig {
		t.Fatalf("restore: %v, file says %d, want %d", r, machine.ReadAheadKB(path), orig)
	}
	set(one)
	if err := a.shutdown(); err != nil {
		t.Fatal(err)
	}
	if got := machine.ReadAheadKB(path); got != orig {
		t.Fatalf("after the agent: readahead %d, want %d back", got, orig)
	}
}

func TestSetReadAheadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "read_ahead_kb")
	os.WriteFile(path, []byte("8192\n"), 0o644)
	if was, changed, err := SetReadAhead(path, 128); err != nil || !changed || was != 8192 || machine.ReadAheadKB(path) != 128 {
		t.Fatalf("set: was %d, changed %v, %v; file %d", was, changed, err, machine.ReadAheadKB(path))
	}
	if was, changed, err := SetReadAhead(path, 128); err != nil || changed || was != 128 {
		t.Fatalf("same value: was %d, changed %v, %v", was, changed, err)
	}
	os.WriteFile(path, []byte("lots\n"), 0o644)
	if _, _, err := SetReadAhead(path, 128); err == nil {
		t.Fatal("a file that holds no number: no error")
	}
}

func TestProbeDiskAndCalibrate(t *testing.T) {
	a := startAgent(t, nil)
	ctx := ctxT(t)
	r, err := a.ProbeDisk(ctx, &agentpb.ProbeDiskRequest{TotalBytes: 256 << 10, WriteBytes: 64 << 10, Samples: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.MbPerSec) != 2 || r.MbPerSec[0] <= 0 || r.FsyncP50Ns <= 0 || r.FsyncP99Ns < r.FsyncP50Ns {
		t.Fatalf("ProbeDisk: %v", r)
	}
	if _, err := os.Stat(filepath.Join(a.cfg.Dir, diskProbeFileName)); !os.IsNotExist(err) {
		t.Fatalf("probe file left behind: %v", err)
	}
	_, err = a.ProbeDisk(ctx, &agentpb.ProbeDiskRequest{Samples: -1})
	wantCode(t, "ProbeDisk of -1 samples", err, codes.InvalidArgument)
	c, err := a.Calibrate(ctx, &agentpb.CalibrateRequest{Rounds: 1, SampleMs: 10})
	if err != nil || c.LoopbackRoundTripNs <= 0 || c.MemmoveGbPerSec <= 0 {
		t.Fatalf("Calibrate: %v, %v", c, err)
	}
}

// TestInfo: the host's description, and every capability either ok or
// with its reason.
func TestInfo(t *testing.T) {
	a := startAgent(t, nil)
	r, err := a.Info(ctxT(t), &agentpb.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Info: %v", r)
	if r.Hostname == "" || r.Cpus <= 0 || r.Kernel == "" || r.GoVersion == "" || r.Build == "" || r.DataDir != DataDir(a.cfg.Dir) || r.MemoryBytes <= 0 || r.Root != (os.Geteuid() == 0) {
		t.Fatalf("Info: %v", r)
	}
	for name, c := range map[string]*agentpb.Capability{"memory cgroup": r.MemoryCgroup, "drop caches": r.DropCaches, "readahead": r.ReadAhead, "packet filter": r.PacketFilter} {
		if c == nil || (!c.Ok && c.Why == "") {
			t.Errorf("%s: %v; want ok or a reason", name, c)
		}
	}
	if r.PacketFilter.Ok || !strings.Contains(r.PacketFilter.Why, "off") {
		t.Errorf("packet filter of an agent without one: %v", r.PacketFilter)
	}
	if r.MemoryCgroup.Ok && r.MemoryCgroup.Why != CgroupVersion() {
		t.Errorf("memory cgroup: %v, want the version %q", r.MemoryCgroup, CgroupVersion())
	}
}
