package agent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/procfs"

	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
	"github.com/nezha-harness/nezha/internal/vfs"
)

func TestThreadGroup(t *testing.T) {
	for comm, want := range map[string]string{"rocksdb:low": "rocksdb:low", "rocksdb:high": "rocksdb:high", "nezha": ThreadGroupGo, "": ThreadGroupGo} {
		if got := ThreadGroup(comm); got != want {
			t.Errorf("ThreadGroup(%q) = %q, want %q", comm, got, want)
		}
	}
	// This process's own threads are all Go's, and their CPU time is at
	// most the process's (threads that exited took theirs with them).
	for i := 0; i < 2e7; i++ { // some CPU time to count
		_ = i * i
	}
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		t.Skipf("no procfs: %v", err)
	}
	cpu := ThreadCPU(os.Getpid())
	p, err := fs.Proc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if len(cpu) != 1 || cpu[ThreadGroupGo] <= 0 || cpu[ThreadGroupGo] > st.CPUTime()+0.02 {
		t.Errorf("ThreadCPU(self) = %v, process CPU %.2f s: want only %q, more than 0 and at most the process's", cpu, st.CPUTime(), ThreadGroupGo)
	}
}

// TestStats: the counters of a running node (CPU it burnt, bytes it
// wrote), the host's, the data's size; without a node only the host's.
func TestStats(t *testing.T) {
	a := startAgent(t, nil)
	if err := os.MkdirAll(DataDir(a.cfg.Dir), 0o755); err != nil {
		t.Fatal(err)
	}
	// 64 KiB of data, and a ballast, which does not count.
	for name, size := range map[string]int{"data.bin": 64 << 10, vfs.BallastName: 1 << 20} {
		if err := os.WriteFile(filepath.Join(DataDir(a.cfg.Dir), name), make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	idle, err := a.Stats(ctxT(t), &agentpb.StatsRequest{DiskUsage: true})
	if err != nil {
		t.Fatal(err)
	}
	if idle.Pid != 0 || idle.CpuSeconds != 0 || idle.HostCpuTotalSeconds <= idle.HostCpuBusySeconds || idle.HostCpuBusySeconds <= 0 || idle.UnixNano == 0 {
		t.Fatalf("without a node: %v", idle)
	}
	// The file system may allocate more than it holds (blocks), never
	// less, and never the ballast's megabyte.
	if idle.DataAllocatedBytes < 64<<10 || idle.DataAllocatedBytes >= 1<<20 {
		t.Fatalf("data allocated %d bytes, want 64 KiB up to 1 MiB (the ballast left out)", idle.DataAllocatedBytes)
	}

	const written = 1 << 20
	pid := a.start(t, 0, "-burn", "300ms", "-write", "1048576")
	st, err := a.Stats(ctxT(t), &agentpb.StatsRequest{Threads: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.Pid != int64(pid) || st.CpuSeconds < 0.1 || st.Wchar < written || st.RssBytes <= 0 || st.UnixNano < idle.UnixNano {
		t.Fatalf("a node that burnt 300 ms of CPU and wrote 1 MiB: %v", st)
	}
	if g := st.ThreadCpuSeconds[ThreadGroupGo]; g <= 0 || g > st.CpuSeconds+0.02 {
		t.Fatalf("thread CPU %v against the process's %.2f s", st.ThreadCpuSeconds, st.CpuSeconds)
	}
	if st.HostCpuTotalSeconds < idle.HostCpuTotalSeconds || st.HostCpuBusySeconds < idle.HostCpuBusySeconds+0.1 {
		t.Fatalf("host CPU busy %.2f -> %.2f s: the node's 300 ms are missing", idle.HostCpuBusySeconds, st.HostCpuBusySeconds)
	}
	if st.HaveDisk && st.DiskWriteBytes < idle.DiskWriteBytes {
		t.Fatalf("disk bytes written went back: %d -> %d", idle.DiskWriteBytes, st.DiskWriteBytes)
	}
	if st.DataAllocatedBytes != 0 {
		t.Fatalf("disk usage without asking: %d", st.DataAllocatedBytes)
	}
}
