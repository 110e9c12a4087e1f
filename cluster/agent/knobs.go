package agent

import (
	"cmp"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
	"github.com/nezha-harness/nezha/internal/machine"
)

// The host's knobs through the agent: the node's memory cgroup, the page
// cache, the data device's readahead, and the disk and CPU probes.

// groupPrefix names agents' memory cgroups: groupPrefix + the agent's
// pid + "-" + the agent's own random suffix (agents may share a process:
// tests, an in-process cluster).
const groupPrefix = "nezha-agent-"

// hostRefusal turns an error of a knob the host may not allow (no root, a
// read-only /proc/sys or /sys in a container, no controller) into
// FailedPrecondition, anything else into Internal.
func hostRefusal(what string, err error) error {
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNoController) {
		return status.Errorf(codes.FailedPrecondition, "%s: %v", what, err)
	}
	return status.Errorf(codes.Internal, "%s: %v", what, err)
}

// memoryGroupLocked returns the node's memory cgroup with its limit set
// to limitBytes, creating it if need be.
func (s *server) memoryGroupLocked(limitBytes int64) (string, error) {
	if s.group != "" {
		return s.group, SetMemoryGroupLimit(s.group, limitBytes)
	}
	dir, err := NewMemoryGroup(s.groupName, limitBytes)
	if dir != "" {
		s.group = dir
	}
	return dir, err
}

// removeGroupLocked moves the node back to the parent group and removes
// its memory cgroup, if it has one.
func (s *server) removeGroupLocked() error {
	if s.group == "" {
		return nil
	}
	if err := RemoveMemoryGroup(s.group); err != nil {
		return err
	}
	s.group = ""
	return nil
}

// SetMemoryLimit limits the memory of the running node (0: no longer).
func (s *server) SetMemoryLimit(_ context.Context, req *agentpb.SetMemoryLimitRequest) (*agentpb.SetMemoryLimitResponse, error) {
	limit := req.GetLimitBytes()
	if limit < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "memory limit %d bytes is negative", limit)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if limit == 0 {
		if err := s.removeGroupLocked(); err != nil {
			return nil, hostRefusal("remove the memory cgroup", err)
		}
		return &agentpb.SetMemoryLimitResponse{Version: CgroupVersion()}, nil
	}
	if s.proc == nil {
		return nil, status.Error(codes.FailedPrecondition, "the node is not running (Start takes a memory limit)")
	}
	dir, err := s.memoryGroupLocked(limit)
	if err == nil {
		err = joinGroup(dir, s.proc.pid)
	}
	if err != nil {
		return nil, hostRefusal("memory cgroup", err)
	}
	return &agentpb.SetMemoryLimitResponse{Cgroup: dir, Version: CgroupVersion()}, nil
}

// MemoryStats reads the node's memory cgroup.
func (s *server) MemoryStats(context.Context, *agentpb.MemoryStatsRequest) (*agentpb.MemoryStatsResponse, error) {
	s.mu.Lock()
	dir := s.group
	s.mu.Unlock()
	l, ok := FindMemoryController()
	if dir == "" || !ok {
		return &agentpb.MemoryStatsResponse{}, nil
	}
	resp := &agentpb.MemoryStatsResponse{
		InGroup:    true,
		UsageBytes: memoryFile(dir, l.UsageFile),
		LimitBytes: memoryFile(dir, l.LimitFile),
	}
	resp.PageCacheBytes, _ = MemoryStat(dir, l.CacheKey)
	resp.OomKills, _ = OOMKills(dir)
	return resp, nil
}

// DropCaches drops the host's page cache.
func (s *server) DropCaches(context.Context, *agentpb.DropCachesRequest) (*agentpb.DropCachesResponse, error) {
	if err := DropCaches(); err != nil {
		return nil, hostRefusal("drop caches", err)
	}
	return &agentpb.DropCachesResponse{}, nil
}

// readAheadState is what SetReadAhead changed: the file, and what it said
// before the first change.
type readAheadState struct {
	path  string
	wasKB int64
}

// SetReadAhead sets the readahead of the device under the node's
// directory; 0 puts back what it was before the first call.
func (s *server) SetReadAhead(_ context.Context, req *agentpb.SetReadAheadRequest) (*agentpb.SetReadAheadResponse, error) {
	kb := req.GetKb()
	if kb < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "readahead of %d KiB is negative", kb)
	}
	device, path := machine.DataDevice(s.cfg.Dir)
	if path == "" {
		return nil, status.Errorf(codes.FailedPrecondition, "no read_ahead_kb in /sys for the device of %s (%q)", s.cfg.Dir, device)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &agentpb.SetReadAheadResponse{Device: device}
	if kb == 0 {
		was, err := s.restoreReadAheadLocked()
		if err != nil {
			return nil, hostRefusal("restore readahead", err)
		}
		resp.WasKb = was
		if was == 0 {
			resp.WasKb = machine.ReadAheadKB(path)
		}
		return resp, nil
	}
	was, changed, err := SetReadAhead(path, kb)
	if err != nil {
		return nil, hostRefusal("set readahead", err)
	}
	if changed && s.readAhead.path == "" {
		s.readAhead = readAheadState{path: path, wasKB: was}
	}
	resp.WasKb = was
	return resp, nil
}

// restoreReadAheadLocked puts back the readahead SetReadAhead first
// changed, and returns what it was before (0 if nothing was changed).
func (s *server) restoreReadAheadLocked() (int64, error) {
	if s.readAhead.path == "" {
		return 0, nil
	}
	was, _, err := SetReadAhead(s.readAhead.path, s.readAhead.wasKB)
	if err != nil {
		return 0, err
	}
	s.readAhead = readAheadState{}
	return was, nil
}

// Defaults of ProbeDisk (the quick profile's disk-limit).
const (
	defaultProbeTotalBytes = 128 << 20
	defaultProbeWriteBytes = 1 << 20
	defaultProbeSamples    = 3
)

// ProbeDisk measures fsynced sequential writes in the node's directory:
// after a sync of everything dirty (what earlier work left to write back
// would be measured too), samples passes of total_bytes/samples each.
func (s *server) ProbeDisk(ctx context.Context, req *agentpb.ProbeDiskRequest) (*agentpb.ProbeDiskResponse, error) {
	total, size, samples := req.GetTotalBytes(), int(req.GetWriteBytes()), int(req.GetSamples())
	if total < 0 || size < 0 || samples < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "probe of %d bytes in writes of %d, %d samples: negative", total, size, samples)
	}
	total, size, samples = cmp.Or(total, defaultProbeTotalBytes), cmp.Or(size, defaultProbeWriteBytes), cmp.Or(samples, defaultProbeSamples)
	if err := os.MkdirAll(s.cfg.Dir, 0o755); err != nil {
		return nil, status.Errorf(codes.Internal, "node directory: %v", err)
	}
	path := filepath.Join(s.cfg.Dir, diskProbeFileName)
	defer os.Remove(path)
	unix.Sync()
	resp := &agentpb.ProbeDiskResponse{}
	lat := newLatencyHistogram()
	for range samples {
		p, err := FsyncBandwidth(ctx, path, max(total/int64(samples), int64(size)), size)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "disk probe: %v", err)
		}
		resp.MbPerSec = append(resp.MbPerSec, p.MBPerSec)
		lat.Merge(p.Latency)
	}
	resp.FsyncP50Ns, resp.FsyncP99Ns = lat.ValueAtQuantile(50), lat.ValueAtQuantile(99)
	return resp, nil
}

// Calibrate measures the host's CPU (Calibrate).
func (s *server) Calibrate(ctx context.Context, req *agentpb.CalibrateRequest) (*agentpb.CalibrateResponse, error) {
	rounds, ms := int(req.GetRounds()), req.GetSampleMs()
	if rounds < 0 || ms < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "%d rounds of %d ms: negative", rounds, ms)
	}
	m, err := Calibrate(ctx, cmp.Or(rounds, 5), time.Duration(cmp.Or(ms, 100))*time.Millisecond)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "calibrate: %v", err)
	}
	return &agentpb.CalibrateResponse{LoopbackRoundTripNs: m.LoopbackRoundTripNs, MemmoveGbPerSec: m.MemmoveGBPerSec}, nil
}
