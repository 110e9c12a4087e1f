package experiments

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nezha-harness/nezha/faults"
	"github.com/nezha-harness/nezha/systems"
)

// Profile is the size of every experiment. Two are built in: Quick (all
// experiments in at most 15 minutes on a 2-core machine) and Paper (the
// paper's parameters, for a real cluster: 3 nodes, 100 GB, 100 clients,
// 10-byte keys, 1M YCSB operations).
type Profile struct {
	Name string `json:"name"`
	// Nodes per cluster.
	Nodes int `json:"nodes"`
	// Clients of the PUT and GET benchmarks (the paper's -cnums 100).
	Clients int `json:"clients"`
	// SegmentSizeBytes of every node's Raft log.
	SegmentSizeBytes int64 `json:"segment_size_bytes"`
	// GCThresholdBytes of nezha's GC (-gcThresholdBytes).
	GCThresholdBytes int64 `json:"gc_threshold_bytes"`

	// DiskLimitBytes are written in DiskLimitWriteBytes writes, each
	// fsynced, to measure the disk's sequential bandwidth.
	DiskLimitBytes      int64 `json:"disk_limit_bytes"`
	DiskLimitWriteBytes int   `json:"disk_limit_write_bytes"`

	// PutTotalBytes are written at each value size of put-vsize.
	PutTotalBytes int64 `json:"put_total_bytes"`
	// HeadlineRuns runs of HeadlineBytes at the largest value size give
	// the headline PUT figure (median).
	HeadlineRuns  int   `json:"headline_runs"`
	HeadlineBytes int64 `json:"headline_bytes"`
	// ValueSizesKiB of put-vsize (the paper: 1 KB to 256 KB).
	ValueSizesKiB []int `json:"value_sizes_kib"`

	// ReadKeys of ReadValueBytes each are loaded before get-zipf and scan,
	// then ReadRuns runs of each.
	ReadKeys       int64 `json:"read_keys"`
	ReadRuns       int   `json:"read_runs"`
	ReadValueBytes int   `json:"read_value_bytes"`
	// GetOps Zipf GETs (exponent Zipf) with Clients clients.
	GetOps int64   `json:"get_ops"`
	Zipf   float64 `json:"zipf"`
	// ScanOps scans of ScanSize keys by ScanClients clients (the paper:
	// one client).
	ScanOps     int64 `json:"scan_ops"`
	ScanSize    int   `json:"scan_size"`
	ScanClients int   `json:"scan_clients"`

	// YCSB: YCSBRecords records of one YCSBValueBytes field, then
	// YCSBOps operations of each workload, YCSBThreads threads.
	YCSBRecords    int64    `json:"ycsb_records"`
	YCSBOps        int64    `json:"ycsb_ops"`
	YCSBValueBytes int      `json:"ycsb_value_bytes"`
	YCSBThreads    int      `json:"ycsb_threads"`
	YCSBWorkloads  []string `json:"ycsb_workloads"`

	// Amplification: AmpKeys keys of AmpValueBytes, then half of them
	// overwritten.
	AmpKeys       int64 `json:"amp_keys"`
	AmpValueBytes int   `json:"amp_value_bytes"`

	// GC experiment: GCKeys keys of GCValueBytes loaded, then overwritten
	// by GCWriters writers while GCReaders read, for GCDuration.
	GCKeys       int64         `json:"gc_keys"`
	GCValueBytes int           `json:"gc_value_bytes"`
	GCWriters    int           `json:"gc_writers"`
	GCReaders    int           `json:"gc_readers"`
	GCDuration   time.Duration `json:"gc_duration_ns"`

	// Linearizability: every system under every nemesis in LinNemeses
	// for LinDuration each, LinClients clients, once per seed in LinSeeds.
	LinNemeses  []string      `json:"lin_nemeses"`
	LinDuration time.Duration `json:"lin_duration_ns"`
	LinClients  int           `json:"lin_clients"`
	LinSeeds    []int64       `json:"lin_seeds"`

	// MinFreeDiskBytes must be free under the output directory before a
	// run starts.
	MinFreeDiskBytes int64 `json:"min_free_disk_bytes"`
}

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
)

// Quick is the profile of `scripts/quickstart.sh`: every experiment on all
// five systems in at most 15 minutes on a 2-core machine. Its numbers show
// the trends, not the paper's absolute figures.
func Quick() Profile {
	return Profile{
		Name: "quick", Nodes: 3, Clients: 32,
		SegmentSizeBytes: 8 * mib, GCThresholdBytes: 48 * mib,
		DiskLimitBytes: 128 * mib, DiskLimitWriteBytes: mib,
		PutTotalBytes: 32 * mib, ValueSizesKiB: []int{1, 4, 16, 64, 256},
		HeadlineRuns: 3, HeadlineBytes: 256 * mib,
		ReadKeys: 3072, ReadRuns: 3, ReadValueBytes: 16 * kib, GetOps: 12000, Zipf: 1.01,
		ScanOps: 300, ScanSize: 100, ScanClients: 1,
		YCSBRecords: 2000, YCSBOps: 3000, YCSBValueBytes: 16 * kib, YCSBThreads: 16,
		YCSBWorkloads: []string{"a", "b", "c", "d", "e", "f"},
		AmpKeys:       2048, AmpValueBytes: 128 * kib,
		GCKeys: 512, GCValueBytes: 32 * kib, GCWriters: 8, GCReaders: 4, GCDuration: 15 * time.Second,
		LinNemeses: []string{"partition-leader"}, LinDuration: 8 * time.Second, LinClients: 4, LinSeeds: []int64{1},
		MinFreeDiskBytes: 4 * gib,
	}
}

// Paper is the paper's setup (seed nezha-readme, DESIGN.md section 8):
// 3 nodes, 100 clients, 10-byte keys, values of 1 KB to 256 KB, 100 GB of
// data, YCSB Load and A-F with 16 KB values and 1M operations. It needs a
// real cluster (-servers) or a large machine: hours and ~1 TB of disk.
func Paper() Profile {
	return Profile{
		Name: "paper", Nodes: 3, Clients: 100,
		SegmentSizeBytes: 64 * mib, GCThresholdBytes: 4 * gib,
		DiskLimitBytes: gib, DiskLimitWriteBytes: mib,
		PutTotalBytes: 100 * gib / 5, ValueSizesKiB: []int{1, 4, 16, 64, 256},
		HeadlineRuns: 3, HeadlineBytes: 100 * gib / 5,
		ReadKeys: 100 * gib / (256 * kib), ReadRuns: 3, ReadValueBytes: 256 * kib, GetOps: 1_000_000, Zipf: 1.01,
		ScanOps: 1000, ScanSize: 100, ScanClients: 1,
		YCSBRecords: 1_000_000, YCSBOps: 1_000_000, YCSBValueBytes: 16 * kib, YCSBThreads: 100,
		YCSBWorkloads: []string{"a", "b", "c", "d", "e", "f"},
		AmpKeys:       100 * gib / (256 * kib), AmpValueBytes: 256 * kib,
		GCKeys: 40_000, GCValueBytes: 256 * kib, GCWriters: 64, GCReaders: 32, GCDuration: 10 * time.Minute,
		LinNemeses: faults.Names(), LinDuration: 30 * time.Second, LinClients: 5, LinSeeds: []int64{1, 2, 3, 4, 5},
		MinFreeDiskBytes: 1000 * gib,
	}
}

// ProfileByName returns Quick or Paper.
func ProfileByName(name string) (Profile, error) {
	switch name {
	case "quick":
		return Quick(), nil
	case "paper":
		return Paper(), nil
	}
	return Profile{}, systems.Usagef("-profile %q: want quick or paper", name)
}

// Validate reports every problem at once.
func (p *Profile) Validate() error {
	var errs []error
	bad := func(f string, a ...any) { errs = append(errs, systems.Usagef(f, a...)) }
	if p.Nodes < 1 {
		bad("profile %s: nodes %d < 1", p.Name, p.Nodes)
	}
	for _, c := range []struct {
		name string
		v    int64
	}{
		{"clients", int64(p.Clients)}, {"put_total_bytes", p.PutTotalBytes}, {"read_keys", p.ReadKeys},
		{"read_value_bytes", int64(p.ReadValueBytes)}, {"get_ops", p.GetOps}, {"scan_ops", p.ScanOps},
		{"scan_size", int64(p.ScanSize)}, {"scan_clients", int64(p.ScanClients)}, {"ycsb_records", p.YCSBRecords},
		{"ycsb_ops", p.YCSBOps}, {"ycsb_value_bytes", int64(p.YCSBValueBytes)}, {"ycsb_threads", int64(p.YCSBThreads)},
		{"amp_keys", p.AmpKeys}, {"amp_value_bytes", int64(p.AmpValueBytes)}, {"gc_keys", p.GCKeys},
		{"gc_value_bytes", int64(p.GCValueBytes)}, {"gc_writers", int64(p.GCWriters)}, {"gc_readers", int64(p.GCReaders)},
		{"disk_limit_bytes", p.DiskLimitBytes}, {"disk_limit_write_bytes", int64(p.DiskLimitWriteBytes)},
		{"segment_size_bytes", p.SegmentSizeBytes}, {"gc_threshold_bytes", p.GCThresholdBytes},
		{"lin_clients", int64(p.LinClients)}, {"headline_runs", int64(p.HeadlineRuns)}, {"headline_bytes", p.HeadlineBytes},
		{"read_runs", int64(p.ReadRuns)},
	} {
		if c.v < 1 {
			bad("profile %s: %s = %d must be positive", p.Name, c.name, c.v)
		}
	}
	if p.ReadKeys < int64(p.ScanSize) {
		bad("profile %s: read_keys %d < scan_size %d", p.Name, p.ReadKeys, p.ScanSize)
	}
	if p.Zipf <= 1 {
		bad("profile %s: zipf %v must be > 1", p.Name, p.Zipf)
	}
	for _, s := range p.ValueSizesKiB {
		if s < 1 || int64(s)*kib > p.PutTotalBytes {
			bad("profile %s: value size %d KiB outside [1 KiB, put_total_bytes]", p.Name, s)
		}
	}
	if len(p.LinSeeds) == 0 {
		bad("profile %s: lin_seeds is empty", p.Name)
	}
	if _, err := faults.ParseNemeses(strings.Join(p.LinNemeses, ",")); err != nil {
		bad("profile %s: lin_nemeses: %v", p.Name, err)
	}
	if p.GCDuration <= 0 || p.LinDuration <= 0 {
		bad("profile %s: durations must be positive", p.Name)
	}
	return errors.Join(errs...)
}

// String renders the parameters for the start of a run.
func (p *Profile) String() string {
	return fmt.Sprintf("profile %s: %d nodes, %d clients; put-vsize %d MiB per size at %v KiB; "+
		"reads over %d keys x %d KiB, %d Zipf(%.2f) GETs, %d scans of %d; YCSB %d records x %d KiB, %d ops of %v; "+
		"amplification %d keys x %d KiB; GC %d keys x %d KiB for %v; linearizability %v x %v, seeds %v; "+
		"segments %d MiB, nezha GC threshold %d MiB",
		p.Name, p.Nodes, p.Clients, p.PutTotalBytes/mib, p.ValueSizesKiB,
		p.ReadKeys, p.ReadValueBytes/kib, p.GetOps, p.Zipf, p.ScanOps, p.ScanSize,
		p.YCSBRecords, p.YCSBValueBytes/kib, p.YCSBOps, p.YCSBWorkloads,
		p.AmpKeys, p.AmpValueBytes/kib, p.GCKeys, p.GCValueBytes/kib, p.GCDuration,
		p.LinNemeses, p.LinDuration, p.LinSeeds, p.SegmentSizeBytes/mib, p.GCThresholdBytes/mib)
}
