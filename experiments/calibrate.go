package experiments

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
	"github.com/nezha-harness/nezha/experiments/probe"
)

// The disk and CPU probes of a run: the disk's fsynced sequential write
// bandwidth and fsync latency, and a CPU calibration, measured where the
// nodes run. The probes go through an agent on each node host (ProbeDisk,
// Calibrate): a throwaway cluster of the run's backend (one node, or one
// per host when -hosts names several) is started for them, its agents
// probe in their node directories, and it is torn down. On the local
// backend that directory is under the results directory, on the disk the
// harness used before agents existed; in a container it is the node's data
// volume, on the host's disk; on an ssh host, the node directory there.
// The hosts are probed one after the other, so that no probe shares a disk
// with another.

// diskProbe returns the run's probe of the node hosts, taking it first if
// no experiment of the run took it yet.
func (x *Run) diskProbe(ctx context.Context) (*probe.Calibration, error) {
	pool := x.hosts
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if pool.probe != nil {
		return pool.probe, nil
	}
	if len(x.Servers) > 0 {
		return nil, fmt.Errorf("the disk probe runs through the node hosts' agents; -servers names a cluster without them")
	}
	nodes := 1
	if len(x.Backend.Hosts) > 0 {
		nodes = x.Profile.Nodes // one per host
	}
	tb, err := x.up(ctx, filepath.Join(pool.dir, "probe-cluster"), x.Systems[0], nodes)
	if err != nil {
		return nil, fmt.Errorf("the probe's cluster: %w", err)
	}
	defer tb.stop(false)
	p := x.Profile
	out := &probe.Calibration{Backend: tb.spec.BackendName(), Where: agentWhere(tb.spec.BackendName(), tb.hosts)}
	for _, h := range byHost(tb.hosts) {
		a, err := tb.agentOf(h.id)
		if err != nil {
			return nil, err
		}
		hp := probe.HostCalibration{Host: h.host, WriteBytes: p.DiskLimitWriteBytes, Fsync: map[int]probe.FsyncLatency{}}
		pass := func(total int64, size, samples int) (*agentpb.ProbeDiskResponse, error) {
			// A pass of 128 MiB took 10-40 s on a slow disk; the bound is
			// for a disk that hangs.
			cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
			defer cancel()
			r, err := a.ProbeDisk(cctx, &agentpb.ProbeDiskRequest{TotalBytes: total, WriteBytes: int32(size), Samples: int32(samples)})
			if err != nil {
				return nil, fmt.Errorf("%s: disk probe in %d KiB writes: %w", h.host, size/kib, err)
			}
			hp.Fsync[size] = probe.FsyncLatency{P50Ns: r.FsyncP50Ns, P99Ns: r.FsyncP99Ns}
			return r, nil
		}
		r, err := pass(p.DiskLimitBytes, p.DiskLimitWriteBytes, diskLimitSamples)
		if err != nil {
			return nil, err
		}
		hp.MBPerSec = r.MbPerSec
		if p.DiskLimitWriteBytes != probe.LargeWriteBytes {
			if _, err := pass(probe.LargeTotalBytes, probe.LargeWriteBytes, 1); err != nil {
				return nil, err
			}
		}
		if r, err = pass(probe.SmallTotalBytes, probe.SmallWriteBytes, 1); err != nil {
			return nil, err
		}
		hp.SmallMBPerSec = r.MbPerSec[0]
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		c, err := a.Calibrate(cctx, &agentpb.CalibrateRequest{Rounds: 5, SampleMs: 100})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s: calibration: %w", h.host, err)
		}
		hp.LoopbackRoundTripNs, hp.MemmoveGBPerSec = c.LoopbackRoundTripNs, c.MemmoveGbPerSec
		x.logf("%s: %.1f MB/s in %d KiB fsynced writes (best of %s); fsync p50/p99 %s (%d KiB), %s (4 KiB); loopback round trip %.1f µs, copy %.1f GB/s",
			h.host, slices.Max(hp.MBPerSec), hp.WriteBytes/kib, floatsText(hp.MBPerSec), latencyText(hp.Fsync[hp.WriteBytes]), hp.WriteBytes/kib,
			latencyText(hp.Fsync[probe.SmallWriteBytes]), hp.LoopbackRoundTripNs/1e3, hp.MemmoveGBPerSec)
		out.Hosts = append(out.Hosts, hp)
	}
	b := tb.spec.BackendName()
	x.measured(Measurement{What: measureDiskLimit, Backend: b, Where: out.Where,
		How: "fsynced sequential writes (ProbeDisk) in a node directory of a throwaway cluster on each node host, after a sync of everything dirty"})
	x.measured(Measurement{What: measureCalibration, Backend: b, Where: out.Where,
		How: "loopback TCP round trip and a 256 KiB copy (Calibrate), best of 5 samples of 0.1 s, by the agent on each node host"})
	pool.probe = out
	return out, nil
}

// latencyText renders a fsync latency as "p50 0.21 ms / p99 0.72 ms".
func latencyText(l probe.FsyncLatency) string {
	return fmt.Sprintf("%.2f / %.2f ms", float64(l.P50Ns)/1e6, float64(l.P99Ns)/1e6)
}
