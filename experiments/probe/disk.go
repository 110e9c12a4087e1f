package probe

import "slices"

// The disk and CPU calibration of a run's node hosts, as their agents
// measured it (ProbeDisk, Calibrate): the disk's fsynced sequential write
// bandwidth, fsync latency by write size, a loopback round trip and a
// memory copy.

const (
	kib = 1 << 10
	mib = 1 << 20
)

// SmallWriteBytes and SmallTotalBytes: the fsync latency probe,
// 4 KiB writes each fsynced (a Raft log's small appends), 4 MiB in all.
const (
	SmallWriteBytes = 4 * kib
	SmallTotalBytes = 4 * mib
	// LargeWriteBytes: the fsync latency of a 1 MiB write is always
	// reported; with the profile's writes of another size it is probed
	// apart, over LargeTotalBytes.
	LargeWriteBytes = mib
	LargeTotalBytes = 32 * mib
)

// HostCalibration is one node host's probe.
type HostCalibration struct {
	Host string `json:"host"`
	// WriteBytes is the profile's write size (DiskLimitWriteBytes);
	// MBPerSec each pass's bandwidth in writes of it, each fsynced.
	WriteBytes int       `json:"write_bytes"`
	MBPerSec   []float64 `json:"mb_per_sec"`
	// Fsync latency (one write + fdatasync) by write size in bytes:
	// the profile's, 1 MiB and 4 KiB.
	Fsync map[int]FsyncLatency `json:"fsync"`
	// SmallMBPerSec is the bandwidth of the 4 KiB pass.
	SmallMBPerSec       float64 `json:"small_mb_per_sec"`
	LoopbackRoundTripNs float64 `json:"loopback_round_trip_ns"`
	MemmoveGBPerSec     float64 `json:"memmove_gb_per_sec"`
}

// FsyncLatency is the median and 99th percentile of one fsynced write.
type FsyncLatency struct {
	P50Ns int64 `json:"p50_ns"`
	P99Ns int64 `json:"p99_ns"`
}

// Calibration is the run's probe of every node host.
type Calibration struct {
	Backend string            `json:"backend"`
	Where   string            `json:"where"`
	Hosts   []HostCalibration `json:"hosts"`
}

// DiskLimitMBps is the disk limit: the best pass of the slowest host.
func (p *Calibration) DiskLimitMBps() float64 {
	lim := 0.0
	for i, h := range p.Hosts {
		if v := slices.Max(h.MBPerSec); i == 0 || v < lim {
			lim = v
		}
	}
	return lim
}

// Fsync4K is the slowest host's 4 KiB fsync latency.
func (p *Calibration) Fsync4K() FsyncLatency {
	var out FsyncLatency
	for _, h := range p.Hosts {
		l := h.Fsync[SmallWriteBytes]
		out.P50Ns, out.P99Ns = max(out.P50Ns, l.P50Ns), max(out.P99Ns, l.P99Ns)
	}
	return out
}
