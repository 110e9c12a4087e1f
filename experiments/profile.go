package experiments

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nezha-harness/nezha/faults"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

// Profile is the size of every experiment. Two are built in: Quick (all
// experiments in at most 15 minutes on a 2-core machine) and Paper (the
// paper's parameters, for a real cluster: 3 nodes, 100 GB, 100 clients,
// 10-byte keys, 1M YCSB operations).
//
// It is composed of one part per concern, embedded: their fields are
// Profile's (p.GCKeys), and its JSON is flat, one key per field, in the
// order of the parts (testdata/profiles.txt holds the built-in ones).
type Profile struct {
	Name string `json:"name"`
	ClusterShape
	RaftLogParams
	DiskLimitParams
	// Geometry of every store: GeometryScaled (the paper's LSM shape at
	// this run's data per node) or GeometryNative (the systems' defaults).
	Geometry string `json:"geometry"`
	PutVSizeParams
	PutScaleParams
	ReadCacheParams
	ReadParams
	ScanParams
	YCSBParams
	AmplificationParams
	GCParams
	LatencyGCParams
	LinearizabilityParams
	CrashParams
	EmbeddedParams
	// MinFreeDiskBytes must be free under the output directory before a
	// run starts.
	MinFreeDiskBytes int64 `json:"min_free_disk_bytes"`
}

// ClusterShape is the size of every cluster and of its benchmarks' load.
type ClusterShape struct {
	// Nodes per cluster.
	Nodes int `json:"nodes"`
	// Clients of the PUT and GET benchmarks (the paper's -cnums 100).
	Clients int `json:"clients"`
}

// RaftLogParams configure every node's Raft log.
type RaftLogParams struct {
	// SegmentSizeBytes of every node's Raft log.
	SegmentSizeBytes int64 `json:"segment_size_bytes"`
	// GCThresholdBytes of nezha's GC (-gcThresholdBytes).
	GCThresholdBytes int64 `json:"gc_threshold_bytes"`
}

// DiskLimitParams size disk-limit: DiskLimitBytes are written in
// DiskLimitWriteBytes writes, each fsynced, to measure the disk's
// sequential bandwidth.
type DiskLimitParams struct {
	DiskLimitBytes      int64 `json:"disk_limit_bytes"`
	DiskLimitWriteBytes int   `json:"disk_limit_write_bytes"`
}

// PutVSizeParams size put-vsize.
type PutVSizeParams struct {
	// PutTotalBytes are written at each value size of put-vsize.
	PutTotalBytes int64 `json:"put_total_bytes"`
	// ValueSizesKiB of put-vsize (the paper: 1 KB to 256 KB).
	ValueSizesKiB []int `json:"value_sizes_kib"`
}

// PutScaleParams size put-scale: its points, its headline point and its
// runs under the paper's conditions.
type PutScaleParams struct {
	// ScaleDataBytes are put-scale's points: bytes of ScaleValueBytes
	// values loaded per node, ascending. The geometry is scaled to the
	// last point, the headline point, which runs HeadlineRuns times per
	// system, interleaved (the headline PUT figure is their median).
	ScaleDataBytes  []int64 `json:"scale_data_bytes"`
	ScaleValueBytes int     `json:"scale_value_bytes"`
	HeadlineRuns    int     `json:"headline_runs"`
	// HeadlineMinSeconds: a headline system also runs until its runs at
	// the headline point add up to this much measured time (at most
	// 3 x HeadlineRuns runs).
	HeadlineMinSeconds time.Duration `json:"headline_min_seconds_ns"`
	// HeadlineSystems run HeadlineRuns times at the headline point (the
	// other systems once): the headline's ratios (nezha over original, and
	// over each other baseline among them) are medians of those runs.
	HeadlineSystems []string `json:"headline_systems"`
	// ConditionSystems run under each of Conditions, the paper's
	// conditions (ConditionNames), which put-scale runs at
	// ConditionDataBytes per node, each alone, beside our own.
	ConditionSystems   []string `json:"condition_systems"`
	Conditions         []string `json:"conditions"`
	ConditionDataBytes int64    `json:"condition_data_bytes"`
	// HeadlineOthers: the systems outside HeadlineSystems also run once at
	// the headline point (false: only at the smaller points; quick, where
	// their two runs there took about 45 s).
	HeadlineOthers bool `json:"headline_others"`
	// ConditionMinSeconds: under each condition (and ours beside them) a
	// headline system runs, interleaved with the others, until its runs
	// add up to this much measured time (at most 8 runs); its row is the
	// median run. 0: one run each.
	ConditionMinSeconds time.Duration `json:"condition_min_seconds_ns"`
}

// ReadCacheParams say how GET and SCAN are made to read from the disk.
type ReadCacheParams struct {
	// ReadCache is how GET and SCAN are made to read from the disk, as the
	// paper's 100 GB per node did: ReadCacheCgroup (the memory each node
	// touches after the load, its page cache first, limited by a cgroup
	// to ReadCacheBytes plus a heap allowance), ReadCacheDrop (the page cache
	// dropped before every read run) or ReadCacheWarm (nothing: reads hit
	// the page cache). Both need root; without it the run falls back to
	// warm and says so.
	ReadCache      string `json:"read_cache"`
	ReadCacheBytes int64  `json:"read_cache_bytes"`
	// ReadAheadKB is the data device's readahead (read_ahead_kb, KiB) while
	// the read beds read from the disk (ReadCacheCgroup or ReadCacheDrop,
	// root only); the device's own setting is restored afterwards. 0
	// leaves it as it is. A miss of a reader through mmap (Badger, so
	// dwisckey) faults in a whole readahead window: on a VM whose device
	// says 8192 KiB, one 16 KiB GET read megabytes and the page cache of
	// the read bed held one window. 128 is Linux's default.
	ReadAheadKB int `json:"read_ahead_kb"`
}

// ReadParams size the read bed of get-zipf and scan, and get-zipf.
type ReadParams struct {
	// ReadKeys of ReadValueBytes each are loaded before get-zipf and scan,
	// then ReadRuns runs of each.
	ReadKeys       int64 `json:"read_keys"`
	ReadRuns       int   `json:"read_runs"`
	ReadValueBytes int   `json:"read_value_bytes"`
	// GetOps Zipf GETs (exponent Zipf) with Clients clients.
	GetOps int64 `json:"get_ops"`
	// ReadRunMaxDuration ends a GET or SCAN run of a system after this
	// long even if it did fewer than GetOps or ScanOps (0: no limit): a
	// system many times slower than the others (dwisckey's SCANs, whose
	// every value read through mmap faults in a readahead window) is
	// measured over fewer operations instead of stretching the run.
	ReadRunMaxDuration time.Duration `json:"read_run_max_duration_ns"`
	Zipf               float64       `json:"zipf"`
}

// ScanParams size scan: ScanOps scans of ScanSize keys by ScanClients
// clients (the paper: one client).
type ScanParams struct {
	ScanOps     int64 `json:"scan_ops"`
	ScanSize    int   `json:"scan_size"`
	ScanClients int   `json:"scan_clients"`
}

// YCSBParams size ycsb: YCSBRecords records of one YCSBValueBytes field,
// then YCSBOps operations of each workload, YCSBThreads threads.
type YCSBParams struct {
	YCSBRecords    int64    `json:"ycsb_records"`
	YCSBOps        int64    `json:"ycsb_ops"`
	YCSBValueBytes int      `json:"ycsb_value_bytes"`
	YCSBThreads    int      `json:"ycsb_threads"`
	YCSBWorkloads  []string `json:"ycsb_workloads"`
}

// AmplificationParams size amplification: AmpKeys keys of AmpValueBytes,
// then half of them overwritten.
type AmplificationParams struct {
	AmpKeys       int64 `json:"amp_keys"`
	AmpValueBytes int   `json:"amp_value_bytes"`
}

// GCParams size the gc experiment: GCKeys keys of GCValueBytes loaded,
// then overwritten by GCWriters writers while GCReaders read, for
// GCDuration.
type GCParams struct {
	GCKeys       int64         `json:"gc_keys"`
	GCValueBytes int           `json:"gc_value_bytes"`
	GCWriters    int           `json:"gc_writers"`
	GCReaders    int           `json:"gc_readers"`
	GCDuration   time.Duration `json:"gc_duration_ns"`
	// GCScanOps scans of ScanSize keys, ReadRuns times, measure SCAN after
	// the overwrite phase (0: ScanOps).
	GCScanOps int64 `json:"gc_scan_ops"`
	// GCStrategies are the nezha GC strategies the gc experiment compares
	// (gcStrategies; the first should be the default).
	GCStrategies []string `json:"gc_strategies"`
}

// LatencyGCParams size latency-gc: LatencyGCKeys keys of
// LatencyGCValueBytes loaded, then overwritten: for LatencyGCPeak by
// Clients closed-loop clients (the system's peak), then open loop at each
// of LatencyGCRates times that peak, for LatencyGCWarmup (left out) and
// LatencyGCDuration (measured), at most LatencyGCSenders operations in
// flight.
type LatencyGCParams struct {
	LatencyGCKeys       int64         `json:"latency_gc_keys"`
	LatencyGCValueBytes int           `json:"latency_gc_value_bytes"`
	LatencyGCPeak       time.Duration `json:"latency_gc_peak_ns"`
	LatencyGCWarmup     time.Duration `json:"latency_gc_warmup_ns"`
	LatencyGCDuration   time.Duration `json:"latency_gc_duration_ns"`
	LatencyGCRates      []float64     `json:"latency_gc_rates"`
	LatencyGCSenders    int           `json:"latency_gc_senders"`
}

// LinearizabilityParams size linearizability: every system under every
// nemesis in LinNemeses for LinDuration each, LinClients clients, once per
// seed in LinSeeds.
type LinearizabilityParams struct {
	LinNemeses  []string      `json:"lin_nemeses"`
	LinDuration time.Duration `json:"lin_duration_ns"`
	LinClients  int           `json:"lin_clients"`
	LinSeeds    []int64       `json:"lin_seeds"`
}

// CrashParams size the crash campaign: CrashKills SIGKILLs of random
// nodes (seeded by CrashSeed), each followed by a restart, under
// CrashWriters writers on CrashKeys keys with values of 1..CrashValueBytes
// bytes, at most CrashMaxWrites writes and CrashDuration per system;
// between kills not aimed at GC, a random pause of up to
// CrashLoadBetweenKills.
type CrashParams struct {
	CrashKills            int           `json:"crash_kills"`
	CrashKeys             int           `json:"crash_keys"`
	CrashValueBytes       int           `json:"crash_value_bytes"`
	CrashWriters          int           `json:"crash_writers"`
	CrashMaxWrites        int64         `json:"crash_max_writes"`
	CrashDuration         time.Duration `json:"crash_duration_ns"`
	CrashLoadBetweenKills time.Duration `json:"crash_load_between_kills_ns"`
	CrashSeed             int64         `json:"crash_seed"`
}

// EmbeddedParams size the embedded experiment (nezha/embedded against
// Badger and Pebble, in process): per engine and value size,
// EmbeddedReadSetBytes of values (at most 100,000 keys) loaded in batches,
// GET and SCAN with EmbeddedReaders readers for EmbeddedReadDuration each,
// then PUT of new keys by EmbeddedWriters writers for EmbeddedPutDuration
// or EmbeddedPutMaxBytes of values.
type EmbeddedParams struct {
	EmbeddedReadSetBytes int64         `json:"embedded_read_set_bytes"`
	EmbeddedPutDuration  time.Duration `json:"embedded_put_duration_ns"`
	EmbeddedPutMaxBytes  int64         `json:"embedded_put_max_bytes"`
	EmbeddedReadDuration time.Duration `json:"embedded_read_duration_ns"`
	EmbeddedWriters      int           `json:"embedded_writers"`
	EmbeddedReaders      int           `json:"embedded_readers"`
}

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
)

// The parts quick and paper share (standard is quick with changes).

// paperValueSizesKiB are the paper's PUT value sizes, 1 KB to 256 KB.
func paperValueSizesKiB() []int { return []int{1, 4, 16, 64, 256} }

// defaultHeadlineSystems are PutScaleParams.HeadlineSystems of the
// built-in profiles. lsm-raft's headline runs give nezha over lsm-raft,
// and lsm-raft's goodput and followers' write amplification against
// original's; it runs under no condition (defaultConditionSystems: they
// concern nezha against original).
func defaultHeadlineSystems() []string {
	return []string{sysNezha, sysNezhaNoGC, sysOriginal, sysLSMRaft}
}

// defaultConditionSystems are PutScaleParams.ConditionSystems of the
// built-in profiles.
func defaultConditionSystems() []string { return []string{sysNezha, sysNezhaNoGC, sysOriginal} }

// ycsbWorkloadsAF are YCSB's core workloads A to F, the paper's.
func ycsbWorkloadsAF() []string { return []string{"a", "b", "c", "d", "e", "f"} }

// latencyGCRates are latency-gc's open-loop rates, fractions of the peak.
func latencyGCRates() []float64 { return []float64{0.5, 0.7, 0.9} }

// Quick is the profile of `scripts/quickstart.sh`: every experiment of
// `run all` on the default systems in half an hour or so on a 2-core
// machine (each experiment's time is its QuickDuration). Its numbers show
// the trends, not the paper's absolute figures. How its sizes were cut to
// fit: docs/design/2026-12-05-quick-profile.md.
func Quick() Profile {
	return Profile{
		Name:            "quick",
		ClusterShape:    ClusterShape{Nodes: 3, Clients: 32},
		RaftLogParams:   RaftLogParams{SegmentSizeBytes: 8 * mib, GCThresholdBytes: 48 * mib},
		DiskLimitParams: DiskLimitParams{DiskLimitBytes: 128 * mib, DiskLimitWriteBytes: mib},
		Geometry:        GeometryScaled,
		PutVSizeParams:  PutVSizeParams{PutTotalBytes: 8 * mib, ValueSizesKiB: paperValueSizesKiB()},
		PutScaleParams: PutScaleParams{
			ScaleDataBytes: []int64{128 * mib, 512 * mib}, ScaleValueBytes: 256 * kib, HeadlineRuns: 3,
			// 20 s: nezha's headline runs last 3-6 s each; 30 s gave 5-6
			// of them, 20 s gives 4.
			HeadlineMinSeconds: 20 * time.Second,
			HeadlineSystems:    defaultHeadlineSystems(),
			ConditionSystems:   defaultConditionSystems(), Conditions: ConditionNames(), ConditionDataBytes: 128 * mib,
			// 2 s: at 128 MiB per node nezha's runs last 0.5-1.1 s (2-4 of
			// them), original's 3-8 s (one); single runs moved the
			// conditions' ratios by up to -23 %..+16 % between quick runs.
			ConditionMinSeconds: 2 * time.Second,
		},
		ReadCacheParams: ReadCacheParams{ReadCache: ReadCacheCgroup, ReadCacheBytes: 12 * mib, ReadAheadKB: defaultReadAheadKB},
		ReadParams: ReadParams{
			// 4096 keys: 64 MiB per node, 5 x the page cache.
			ReadKeys: 4096, ReadRuns: 3, ReadValueBytes: 16 * kib,
			// 16,000 GETs: runs of 3-4 s (12,000 gave runs of 2-3 s, and
			// the GET ratios moved by -15..+9 % between quick runs).
			GetOps: 16000,
			// nezha and the RocksDB systems do their runs in 3-6 s (a
			// busy machine); dwisckey's SCANs would take about 15 s a run.
			ReadRunMaxDuration: 8 * time.Second,
			Zipf:               1.01,
		},
		ScanParams:          ScanParams{ScanOps: 200, ScanSize: 100, ScanClients: 1},
		YCSBParams:          YCSBParams{YCSBRecords: 1000, YCSBOps: 1000, YCSBValueBytes: 16 * kib, YCSBThreads: 16, YCSBWorkloads: ycsbWorkloadsAF()},
		AmplificationParams: AmplificationParams{AmpKeys: 512, AmpValueBytes: 128 * kib},
		GCParams: GCParams{
			GCKeys: 2048, GCValueBytes: 32 * kib, GCWriters: 8, GCReaders: 4, GCDuration: 8 * time.Second, GCScanOps: 100,
			// The default strategy only (standard compares them all): each
			// strategy adds about 40 s.
			GCStrategies: gcStrategies()[:1],
		},
		// 32 MiB live, nezha's GC at 64 MiB of log: a round every few
		// seconds per node at these rates; about a minute per system.
		LatencyGCParams: LatencyGCParams{
			LatencyGCKeys: 2048, LatencyGCValueBytes: 16 * kib, LatencyGCPeak: 8 * time.Second,
			LatencyGCWarmup: 3 * time.Second, LatencyGCDuration: 12 * time.Second, LatencyGCRates: latencyGCRates(), LatencyGCSenders: 256,
		},
		LinearizabilityParams: LinearizabilityParams{LinNemeses: []string{"partition-leader"}, LinDuration: 8 * time.Second, LinClients: 4, LinSeeds: []int64{1}},
		// The crash campaign takes minutes per system: `run all` skips it
		// in this profile and in standard (Experiment.Campaign); name it
		// to run it.
		CrashParams: CrashParams{
			CrashKills: 20, CrashKeys: 2000, CrashValueBytes: 16 * kib, CrashWriters: 4, CrashMaxWrites: 200_000,
			CrashDuration: 5 * time.Minute, CrashLoadBetweenKills: time.Second, CrashSeed: 1,
		},
		// 9 loads, 18 read phases and 9 PUT phases: about 60-70 s in all
		// (nezha waits 2-3 s per size for its idle GC round).
		EmbeddedParams: EmbeddedParams{
			EmbeddedReadSetBytes: 32 * mib,
			EmbeddedPutDuration:  1500 * time.Millisecond, EmbeddedPutMaxBytes: 64 * mib, EmbeddedReadDuration: time.Second,
			EmbeddedWriters: 16, EmbeddedReaders: 4,
		},
		MinFreeDiskBytes: 4 * gib,
	}
}

// Standard is the paper's shape at one machine's scale: native geometry
// (every system with its defaults), put-scale up to 6 GiB per node, reads
// from the disk; at most 60 minutes and 40 GB of disk on 2 cores. It is
// quick with larger sizes.
func Standard() Profile {
	p := Quick()
	p.Name, p.Geometry = "standard", GeometryNative
	p.Clients = 50
	p.RaftLogParams = RaftLogParams{SegmentSizeBytes: 64 * mib, GCThresholdBytes: gib}
	p.DiskLimitBytes = 512 * mib
	p.PutTotalBytes = 64 * mib
	p.GCScanOps = 0 // ScanOps
	// put-scale alone took 56 minutes with points at 1, 2, 4 and 6 GiB and
	// the conditions at 1 GiB (on a machine shared with test builds): the
	// points below the largest load every system once, the largest loads
	// the headline systems three times.
	p.ScaleDataBytes = []int64{gib, 2 * gib, 6 * gib}
	p.HeadlineRuns, p.HeadlineMinSeconds = 3, time.Minute
	p.ConditionDataBytes, p.ConditionMinSeconds = 512*mib, 8*time.Second
	p.HeadlineOthers = true
	p.ReadKeys, p.ReadCacheBytes, p.GetOps, p.ScanOps = 32768, 64*mib, 30000, 500
	p.ReadRunMaxDuration = 20 * time.Second
	p.YCSBRecords, p.YCSBOps = 8000, 8000
	p.AmplificationParams = AmplificationParams{AmpKeys: 4096, AmpValueBytes: 256 * kib}
	p.GCKeys, p.GCDuration, p.GCStrategies = 8192, 20*time.Second, gcStrategies()
	// 64 MiB live, GC at 128 MiB of log: several rounds per node in each
	// 30 s run; about 3 minutes per system.
	p.LatencyGCKeys, p.LatencyGCPeak, p.LatencyGCWarmup, p.LatencyGCDuration = 4096, 15*time.Second, 5*time.Second, 30*time.Second
	p.LinNemeses, p.LinDuration = []string{"partition-leader", "kill-leader"}, 10*time.Second
	p.CrashKills, p.CrashKeys, p.CrashDuration = 50, 8000, 15*time.Minute
	p.EmbeddedPutDuration, p.EmbeddedPutMaxBytes, p.EmbeddedReadDuration = 5*time.Second, 512*mib, 3*time.Second
	p.EmbeddedReadSetBytes = 256 * mib
	p.MinFreeDiskBytes = 40 * gib
	return p
}

// Paper is the paper's setup (docs/architecture.md section 8):
// 3 nodes, 100 clients, 10-byte keys, values of 1 KB to 256 KB, 100 GB of
// data, YCSB Load and A-F with 16 KB values and 1M operations. It needs a
// real cluster (-servers) or a large machine: hours and ~1 TB of disk.
func Paper() Profile {
	return Profile{
		Name:            "paper",
		ClusterShape:    ClusterShape{Nodes: 3, Clients: 100},
		RaftLogParams:   RaftLogParams{SegmentSizeBytes: 64 * mib, GCThresholdBytes: 4 * gib},
		DiskLimitParams: DiskLimitParams{DiskLimitBytes: gib, DiskLimitWriteBytes: mib},
		Geometry:        GeometryNative,
		PutVSizeParams:  PutVSizeParams{PutTotalBytes: 100 * gib / 5, ValueSizesKiB: paperValueSizesKiB()},
		PutScaleParams: PutScaleParams{
			ScaleDataBytes: []int64{25 * gib, 50 * gib, 100 * gib}, ScaleValueBytes: 256 * kib, HeadlineRuns: 3, HeadlineMinSeconds: time.Minute,
			HeadlineSystems: defaultHeadlineSystems(), ConditionSystems: defaultConditionSystems(), Conditions: ConditionNames(), ConditionDataBytes: 25 * gib,
			HeadlineOthers: true,
		},
		ReadCacheParams: ReadCacheParams{ReadCache: ReadCacheWarm},
		ReadParams: ReadParams{
			ReadKeys: 100 * gib / (256 * kib), ReadRuns: 3, ReadValueBytes: 256 * kib, GetOps: 1_000_000, Zipf: 1.01,
		},
		ScanParams:          ScanParams{ScanOps: 1000, ScanSize: 100, ScanClients: 1},
		YCSBParams:          YCSBParams{YCSBRecords: 1_000_000, YCSBOps: 1_000_000, YCSBValueBytes: 16 * kib, YCSBThreads: 100, YCSBWorkloads: ycsbWorkloadsAF()},
		AmplificationParams: AmplificationParams{AmpKeys: 100 * gib / (256 * kib), AmpValueBytes: 256 * kib},
		GCParams: GCParams{
			GCKeys: 40_000, GCValueBytes: 256 * kib, GCWriters: 64, GCReaders: 32, GCDuration: 10 * time.Minute,
			GCStrategies: gcStrategies(),
		},
		LatencyGCParams: LatencyGCParams{
			LatencyGCKeys: 40_000, LatencyGCValueBytes: 256 * kib, LatencyGCPeak: time.Minute,
			LatencyGCWarmup: 30 * time.Second, LatencyGCDuration: 5 * time.Minute, LatencyGCRates: latencyGCRates(), LatencyGCSenders: 1024,
		},
		LinearizabilityParams: LinearizabilityParams{LinNemeses: faults.Names(), LinDuration: 30 * time.Second, LinClients: 5, LinSeeds: []int64{1, 2, 3, 4, 5}},
		CrashParams: CrashParams{
			CrashKills: 200, CrashKeys: 20_000, CrashValueBytes: 256 * kib, CrashWriters: 16, CrashMaxWrites: 10_000_000,
			CrashDuration: 2 * time.Hour, CrashLoadBetweenKills: 5 * time.Second, CrashSeed: 1,
		},
		EmbeddedParams: EmbeddedParams{
			EmbeddedReadSetBytes: 4 * gib,
			EmbeddedPutDuration:  time.Minute, EmbeddedPutMaxBytes: 16 * gib, EmbeddedReadDuration: 20 * time.Second,
			EmbeddedWriters: 100, EmbeddedReaders: 32,
		},
		MinFreeDiskBytes: 1000 * gib,
	}
}

// gcScanOps is GCScanOps, or ScanOps when it is 0.
func (p *Profile) gcScanOps() int64 {
	if p.GCScanOps > 0 {
		return p.GCScanOps
	}
	return p.ScanOps
}

// defaultReadAheadKB is Linux's default readahead of a block device
// (VM_READAHEAD_PAGES: 128 KiB), Profile.ReadAheadKB of quick and standard.
const defaultReadAheadKB = 128

// Read cache arrangements (Profile.ReadCache).
const (
	ReadCacheCgroup = "cgroup"
	ReadCacheDrop   = "drop"
	ReadCacheWarm   = "warm"
)

// ProfileByName returns Quick, Standard or Paper.
func ProfileByName(name string) (Profile, error) {
	switch name {
	case "quick":
		return Quick(), nil
	case "standard":
		return Standard(), nil
	case "paper":
		return Paper(), nil
	}
	return Profile{}, cmdline.Usagef("-profile %q: want quick, standard or paper", name)
}

// Validate reports every problem at once: each part's, then those between
// parts.
func (p *Profile) Validate() error {
	ps := &problems{profile: p.Name}
	p.ClusterShape.validate(ps)
	p.RaftLogParams.validate(ps)
	p.DiskLimitParams.validate(ps)
	if p.Geometry != GeometryScaled && p.Geometry != GeometryNative {
		ps.add("geometry %q: want %s or %s", p.Geometry, GeometryScaled, GeometryNative)
	}
	p.PutVSizeParams.validate(ps)
	p.PutScaleParams.validate(ps)
	p.ReadCacheParams.validate(ps)
	p.ReadParams.validate(ps)
	p.ScanParams.validate(ps)
	p.YCSBParams.validate(ps)
	p.AmplificationParams.validate(ps)
	p.GCParams.validate(ps)
	p.LatencyGCParams.validate(ps)
	p.LinearizabilityParams.validate(ps, p.Nodes)
	p.CrashParams.validate(ps)
	p.EmbeddedParams.validate(ps)
	if p.ReadKeys < int64(p.ScanSize) {
		ps.add("read_keys %d < scan_size %d", p.ReadKeys, p.ScanSize)
	}
	return errors.Join(ps.errs...)
}

// problems collects a profile's problems, each a usage error that names
// the profile.
type problems struct {
	profile string
	errs    []error
}

func (ps *problems) add(format string, a ...any) {
	ps.errs = append(ps.errs, cmdline.Usagef("profile %s: %s", ps.profile, fmt.Sprintf(format, a...)))
}

// positive adds a problem for each of the counts (by JSON key) below 1.
func (ps *problems) positive(counts ...keyed[int64]) {
	for _, c := range counts {
		if c.v < 1 {
			ps.add("%s = %d must be positive", c.key, c.v)
		}
	}
}

// positiveDurations adds a problem for each of the durations not above 0.
func (ps *problems) positiveDurations(ds ...keyed[time.Duration]) {
	for _, d := range ds {
		if d.v <= 0 {
			ps.add("%s %v must be positive", d.key, d.v)
		}
	}
}

// keyed is a value of a profile by its JSON key.
type keyed[T any] struct {
	key string
	v   T
}

func count[N int | int64](key string, v N) keyed[int64] { return keyed[int64]{key, int64(v)} }

func duration(key string, v time.Duration) keyed[time.Duration] {
	return keyed[time.Duration]{key, v}
}

func (c *ClusterShape) validate(ps *problems) {
	if c.Nodes < 1 {
		ps.add("nodes %d < 1", c.Nodes)
	}
	ps.positive(count("clients", c.Clients))
}

func (r *RaftLogParams) validate(ps *problems) {
	ps.positive(count("segment_size_bytes", r.SegmentSizeBytes), count("gc_threshold_bytes", r.GCThresholdBytes))
}

func (d *DiskLimitParams) validate(ps *problems) {
	ps.positive(count("disk_limit_bytes", d.DiskLimitBytes), count("disk_limit_write_bytes", d.DiskLimitWriteBytes))
}

func (v *PutVSizeParams) validate(ps *problems) {
	ps.positive(count("put_total_bytes", v.PutTotalBytes))
	for _, s := range v.ValueSizesKiB {
		if s < 1 || int64(s)*kib > v.PutTotalBytes {
			ps.add("value size %d KiB outside [1 KiB, put_total_bytes]", s)
		}
	}
}

func (s *PutScaleParams) validate(ps *problems) {
	ps.positive(count("headline_runs", s.HeadlineRuns), count("scale_value_bytes", s.ScaleValueBytes))
	if len(s.ScaleDataBytes) == 0 {
		ps.add("scale_data_bytes is empty")
	}
	for i, d := range s.ScaleDataBytes {
		if d < int64(s.ScaleValueBytes) || (i > 0 && d <= s.ScaleDataBytes[i-1]) {
			ps.add("scale_data_bytes must ascend and each hold at least one value (%v)", s.ScaleDataBytes)
			break
		}
	}
	for _, c := range s.Conditions {
		if !slices.Contains(ConditionNames(), c) {
			ps.add("condition %q: want one of %v", c, ConditionNames())
		}
	}
	if len(s.Conditions) > 0 && s.ConditionDataBytes < int64(s.ScaleValueBytes) {
		ps.add("condition_data_bytes %d holds no value", s.ConditionDataBytes)
	}
	if s.ConditionMinSeconds < 0 {
		ps.add("condition_min_seconds_ns %d is negative", s.ConditionMinSeconds)
	}
}

func (c *ReadCacheParams) validate(ps *problems) {
	switch c.ReadCache {
	case ReadCacheCgroup, ReadCacheDrop, ReadCacheWarm:
	default:
		ps.add("read_cache %q: want %s, %s or %s", c.ReadCache, ReadCacheCgroup, ReadCacheDrop, ReadCacheWarm)
	}
	if c.ReadAheadKB < 0 {
		ps.add("read_ahead_kb %d is negative", c.ReadAheadKB)
	}
	if c.ReadCache == ReadCacheCgroup && c.ReadCacheBytes < 1 {
		ps.add("read_cache_bytes must be positive with read_cache %s", ReadCacheCgroup)
	}
}

func (r *ReadParams) validate(ps *problems) {
	ps.positive(count("read_keys", r.ReadKeys), count("read_value_bytes", r.ReadValueBytes), count("get_ops", r.GetOps),
		count("read_runs", r.ReadRuns))
	if r.Zipf <= 1 {
		ps.add("zipf %v must be > 1", r.Zipf)
	}
	if r.ReadRunMaxDuration < 0 {
		ps.add("read_run_max_duration_ns %d is negative", r.ReadRunMaxDuration)
	}
}

func (s *ScanParams) validate(ps *problems) {
	ps.positive(count("scan_ops", s.ScanOps), count("scan_size", s.ScanSize), count("scan_clients", s.ScanClients))
}

func (y *YCSBParams) validate(ps *problems) {
	ps.positive(count("ycsb_records", y.YCSBRecords), count("ycsb_ops", y.YCSBOps), count("ycsb_value_bytes", y.YCSBValueBytes),
		count("ycsb_threads", y.YCSBThreads))
}

func (a *AmplificationParams) validate(ps *problems) {
	ps.positive(count("amp_keys", a.AmpKeys), count("amp_value_bytes", a.AmpValueBytes))
}

func (g *GCParams) validate(ps *problems) {
	ps.positive(count("gc_keys", g.GCKeys), count("gc_value_bytes", g.GCValueBytes), count("gc_writers", g.GCWriters),
		count("gc_readers", g.GCReaders))
	ps.positiveDurations(duration("gc_duration_ns", g.GCDuration))
	if g.GCScanOps < 0 {
		ps.add("gc_scan_ops %d is negative", g.GCScanOps)
	}
	for _, st := range g.GCStrategies {
		if !slices.Contains(gcStrategies(), st) {
			ps.add("gc strategy %q: want one of %v", st, gcStrategies())
		}
	}
}

func (l *LatencyGCParams) validate(ps *problems) {
	ps.positive(count("latency_gc_keys", l.LatencyGCKeys), count("latency_gc_value_bytes", l.LatencyGCValueBytes),
		count("latency_gc_senders", l.LatencyGCSenders))
	ps.positiveDurations(duration("latency_gc_peak_ns", l.LatencyGCPeak), duration("latency_gc_duration_ns", l.LatencyGCDuration))
	if l.LatencyGCWarmup < 0 {
		ps.add("latency_gc_warmup_ns %v is negative", l.LatencyGCWarmup)
	}
	if len(l.LatencyGCRates) == 0 {
		ps.add("latency_gc_rates is empty")
	}
	for i, r := range l.LatencyGCRates {
		if !(r > 0 && r <= 1) || i > 0 && r <= l.LatencyGCRates[i-1] {
			ps.add("latency_gc_rates %v: want ascending fractions of the peak in (0, 1]", l.LatencyGCRates)
			break
		}
	}
}

// validate checks LinDuration against what a check of LinNemeses on a
// cluster of nodes needs.
func (l *LinearizabilityParams) validate(ps *problems, nodes int) {
	ps.positive(count("lin_clients", l.LinClients))
	ps.positiveDurations(duration("lin_duration_ns", l.LinDuration))
	if len(l.LinSeeds) == 0 {
		ps.add("lin_seeds is empty")
	}
	if nem, err := faults.ParseNemeses(strings.Join(l.LinNemeses, ",")); err != nil {
		ps.add("lin_nemeses: %v", err)
	} else if min := (faults.ScheduleOptions{Nemeses: nem, Nodes: nodes}).MinDuration(); l.LinDuration < min {
		// The checks run with the default schedule: a shorter workload is
		// refused by each check, late in the run.
		ps.add("lin_duration_ns %v is below the %v a check with %v needs (warm-up, one fault, cool-down)", l.LinDuration, min, l.LinNemeses)
	}
}

func (c *CrashParams) validate(ps *problems) {
	ps.positive(count("crash_kills", c.CrashKills), count("crash_keys", c.CrashKeys), count("crash_value_bytes", c.CrashValueBytes),
		count("crash_writers", c.CrashWriters), count("crash_max_writes", c.CrashMaxWrites))
	ps.positiveDurations(duration("crash_duration_ns", c.CrashDuration))
	if c.CrashLoadBetweenKills < 0 {
		ps.add("crash_load_between_kills_ns %v is negative", c.CrashLoadBetweenKills)
	}
}

func (e *EmbeddedParams) validate(ps *problems) {
	ps.positive(count("embedded_read_set_bytes", e.EmbeddedReadSetBytes), count("embedded_put_max_bytes", e.EmbeddedPutMaxBytes),
		count("embedded_writers", e.EmbeddedWriters), count("embedded_readers", e.EmbeddedReaders))
	ps.positiveDurations(duration("embedded_put_duration_ns", e.EmbeddedPutDuration), duration("embedded_read_duration_ns", e.EmbeddedReadDuration))
}

// String renders the parameters for the start of a run.
func (p *Profile) String() string {
	return fmt.Sprintf("profile %s: %s geometry, %d nodes, %d clients; put-vsize %d MiB per size at %v KiB; put-scale %s per node (headline: last, %d runs, more until %v measured, at most %d; conditions %v at %s); reads from %s; "+
		"reads over %d keys x %d KiB, %d Zipf(%.2f) GETs, %d scans of %d; YCSB %d records x %d KiB, %d ops of %v; "+
		"amplification %d keys x %d KiB; GC %d keys x %d KiB for %v; latency-gc %d keys x %d KiB, %v at %v of the peak; linearizability %v x %v, seeds %v; crash %d kills; "+
		"segments %d MiB, nezha GC threshold %d MiB",
		p.Name, p.Geometry, p.Nodes, p.Clients, p.PutTotalBytes/mib, p.ValueSizesKiB, bytesList(p.ScaleDataBytes), p.HeadlineRuns, p.HeadlineMinSeconds, 3*p.HeadlineRuns,
		p.Conditions, bytesText(p.ConditionDataBytes), readCacheText(p),
		p.ReadKeys, p.ReadValueBytes/kib, p.GetOps, p.Zipf, p.ScanOps, p.ScanSize,
		p.YCSBRecords, p.YCSBValueBytes/kib, p.YCSBOps, p.YCSBWorkloads,
		p.AmpKeys, p.AmpValueBytes/kib, p.GCKeys, p.GCValueBytes/kib, p.GCDuration,
		p.LatencyGCKeys, p.LatencyGCValueBytes/kib, p.LatencyGCDuration, p.LatencyGCRates,
		p.LinNemeses, p.LinDuration, p.LinSeeds, p.CrashKills, p.SegmentSizeBytes/mib, p.GCThresholdBytes/mib)
}

func readCacheText(p *Profile) string {
	ra := ""
	if p.ReadAheadKB > 0 {
		ra = fmt.Sprintf(", device readahead %d KiB", p.ReadAheadKB)
	}
	switch p.ReadCache {
	case ReadCacheCgroup:
		return fmt.Sprintf("disk (page cache limited to %s per node by a memory cgroup%s)", bytesText(p.ReadCacheBytes), ra)
	case ReadCacheDrop:
		return fmt.Sprintf("disk (page cache dropped before each read run%s)", ra)
	}
	return "page cache (warm)"
}

// gcStrategies are nezha's GC strategies (-gc), the default first, by
// name: profiles are built and validated without a registry
// (registry_test.go checks them against nezha's registration,
// systems.System.GCStrategies).
func gcStrategies() []string { return []string{"tiered", "merge", "sort-once", "greedy"} }
