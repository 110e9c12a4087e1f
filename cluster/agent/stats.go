package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	"github.com/prometheus/procfs/blockdevice"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
	"github.com/nezha-harness/nezha/internal/vfs"
)

// The counters a window of an experiment is made of (experiments'
// windowStats): the node process's CPU and I/O, its threads' CPU by
// group, the host's CPU and the data device's bytes, the data's size.

// ThreadGroupGo is the thread group of every node thread that is not one
// of RocksDB's background pools: the Go runtime's threads, which also run
// RocksDB's foreground writes (cgo calls).
const ThreadGroupGo = "go"

// ThreadGroup names the group a node thread's CPU time counts in: RocksDB
// names its background threads after their pool ("rocksdb:low" runs
// compactions, "rocksdb:high" flushes); every other thread is
// ThreadGroupGo.
func ThreadGroup(comm string) string {
	if strings.HasPrefix(comm, "rocksdb:") {
		return comm
	}
	return ThreadGroupGo
}

// ThreadCPU sums the CPU time (seconds) of pid's live threads by
// ThreadGroup.
func ThreadCPU(pid int) map[string]float64 {
	out := map[string]float64{}
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tids, err := os.ReadDir(dir)
	if err != nil {
		return out
	}
	// /proc/PID/task/TID/stat is the thread's own (/proc/PID/stat, which
	// /proc/TID would give for the first thread, is the whole process's).
	fs, err := procfs.NewFS(dir)
	if err != nil {
		return out
	}
	for _, e := range tids {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		t, err := fs.Proc(tid)
		if err != nil {
			continue
		}
		st, err := t.Stat()
		if err != nil {
			continue // exited since the listing
		}
		out[ThreadGroup(st.Comm)] += st.CPUTime()
	}
	return out
}

// HostCPU returns the host's cumulative CPU time (/proc/stat), summed over
// its CPUs, in seconds: not idle (busy) and in all (total).
func HostCPU() (busySeconds, totalSeconds float64, err error) {
	pfs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, 0, err
	}
	st, err := pfs.Stat()
	if err != nil {
		return 0, 0, err
	}
	c := st.CPUTotal
	idle := c.Idle + c.Iowait
	total := c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal + idle
	return total - idle, total, nil
}

// DiskBytes returns the cumulative bytes written to and read from the
// block device that holds dir (/proc/diskstats); ok is false if the device
// is not found there (an overlay or tmpfs directory).
func DiskBytes(dir string) (written, read int64, ok bool) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, 0, false
	}
	bfs, err := blockdevice.NewDefaultFS()
	if err != nil {
		return 0, 0, false
	}
	stats, err := bfs.ProcDiskstats()
	if err != nil {
		return 0, 0, false
	}
	major, minor := unix.Major(st.Dev), unix.Minor(st.Dev)
	for _, d := range stats {
		if d.MajorNumber == major && d.MinorNumber == minor {
			// /proc/diskstats counts 512-byte sectors whatever the device's.
			return int64(d.WriteSectors) * 512, int64(d.ReadSectors) * 512, true
		}
	}
	return 0, 0, false
}

// DiskUsage returns the bytes allocated on disk (st_blocks x 512) by the
// files under dir, the numerator of space amplification; disk ballasts
// are left out.
func DiskUsage(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == vfs.BallastName {
			return nil
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed while walking (a compaction, a GC)
		}
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		} else {
			total += info.Size()
		}
		return nil
	})
	return total, err
}

// Stats are the node process's counters and the host's.
func (s *server) Stats(_ context.Context, req *agentpb.StatsRequest) (*agentpb.StatsResponse, error) {
	resp := &agentpb.StatsResponse{UnixNano: time.Now().UnixNano()}
	if c := s.running(); c != nil {
		nodeStats(resp, c.pid, req.GetThreads())
	}
	var err error
	if resp.HostCpuBusySeconds, resp.HostCpuTotalSeconds, err = HostCPU(); err != nil {
		return nil, status.Errorf(codes.Internal, "host CPU: %v", err)
	}
	resp.DiskWriteBytes, resp.DiskReadBytes, resp.HaveDisk = DiskBytes(s.cfg.Dir)
	if req.GetDiskUsage() {
		du, err := DiskUsage(s.dataDir())
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, status.Errorf(codes.Internal, "disk usage: %v", err)
		}
		resp.DataAllocatedBytes = du
	}
	return resp, nil
}

// nodeStats fills resp with the counters of process pid; a process gone
// meanwhile leaves them (and the pid) zero.
func nodeStats(resp *agentpb.StatsResponse, pid int, threads bool) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return
	}
	st, err := p.Stat()
	if err != nil {
		return
	}
	io, err := p.IO()
	if err != nil {
		return
	}
	resp.Pid = int64(pid)
	resp.CpuSeconds = st.CPUTime()
	resp.RssBytes = int64(st.ResidentMemory())
	resp.ReadBytes, resp.WriteBytes, resp.CancelledWriteBytes = int64(io.ReadBytes), int64(io.WriteBytes), int64(io.CancelledWriteBytes)
	resp.Rchar, resp.Wchar = int64(io.RChar), int64(io.WChar)
	if threads {
		resp.ThreadCpuSeconds = ThreadCPU(pid)
	}
}
