package nezha

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/systems"
)

// Names of the systems of this package (the -system flag values).
const (
	// NameNoGC is the paper's Nezha-NoGC: KVS-Raft without GC.
	NameNoGC = "nezha-nogc"
	// Name is Nezha with Raft-aware GC.
	Name = "nezha"
)

// Directory names under the node's -data directory (docs/architecture.md section 4).
const (
	// ValueLogDir holds the Raft log, which is the value log.
	ValueLogDir = "valuelog"
	// IndexDir holds the LevelDB index (IndexLevelDB only).
	IndexDir = "index"
	// SortedDir holds GC's key-sorted runs and their MANIFEST.
	SortedDir = "sorted"
)

// NezhaNoGC returns the "nezha-nogc" system: values persisted once in the
// Raft log, key -> Location in the index, no GC (the paper's Nezha-NoGC;
// docs/architecture.md section 1).
func NezhaNoGC() systems.System {
	return systems.System{
		Name:      NameNoGC,
		Summary:   "KVS-Raft: value persisted once, in the Raft log; index keeps key -> location; no GC",
		Role:      systems.RoleStudied,
		LogDir:    ValueLogDir,
		NewConfig: func() systems.SystemConfig { return newConfig(NameNoGC) },
		Geometry:  func(scale systems.GeometryScale) systems.Geometry { return geometry(NameNoGC, scale) },
		Conformance: []systems.Conformance{
			{Name: NameNoGC},
			{Name: NameNoGC + "-memory-index", Args: []string{"-index", IndexMemory}},
		},
	}
}

// Nezha returns the "nezha" system: KVS-Raft with Raft-aware GC into
// key-sorted runs (docs/architecture.md sections 1 and 4.4; see gc.go).
func Nezha() systems.System {
	return systems.System{
		Name:           Name,
		Summary:        "KVS-Raft with Raft-aware GC: old log compacted into key-sorted runs",
		Role:           systems.RoleStudied,
		LogDir:         ValueLogDir,
		NewConfig:      func() systems.SystemConfig { return newConfig(Name) },
		Geometry:       func(scale systems.GeometryScale) systems.Geometry { return geometry(Name, scale) },
		ConditionFlags: conditionFlags,
		GCStrategies:   Strategies(),
		GCStressFlags:  gcStressFlags(),
		GCFlags:        gcFlags,
		IdleGCAfter: func(nodes int) time.Duration {
			c := newConfig(Name)
			return c.GCIdleAfter + time.Duration(nodes)*c.GCStagger
		},
		// GC forced to run continuously during the whole suite, per
		// strategy, over small segments so that every test spans many
		// rounds.
		Conformance: []systems.Conformance{
			{Name: Name},
			{Name: "nezha-gc-tiered", Args: append(conformanceGCArgs(StrategyTiered), "-gcFanout", "2"), ExpectGC: true},
			{Name: "nezha-gc-merge", Args: conformanceGCArgs(StrategyMerge), ExpectGC: true},
			{Name: "nezha-gc-sort-once", Args: conformanceGCArgs(StrategySortOnce), ExpectGC: true},
			{Name: "nezha-gc-greedy", Args: conformanceGCArgs(StrategyGreedy), ExpectGC: true},
			{Name: "nezha-gc-tiered-memory-index", Args: append(conformanceGCArgs(StrategyTiered), "-index", IndexMemory), ExpectGC: true},
		},
	}
}

// geometry scales the GC threshold of system (Name only) to the paper's
// ratio to the data per node (systems.PaperGCThresholdRatio; at least a
// segment) and the index location cache (-indexCacheEntries) as package
// baseline scales RocksDB's block cache, with the same floor (64 KiB, at
// about 100 bytes per cached key), so that a scaled run gives neither
// system's index a cache the other lacks. Native geometry: no flags.
func geometry(system string, scale systems.GeometryScale) systems.Geometry {
	if scale.DataPerNodeBytes <= 0 {
		return systems.Geometry{}
	}
	const floorEntries = 64 << 10 / 100
	flags := []string{"-indexCacheEntries", fmt.Sprint(max(int(float64(DefaultIndexCacheEntries)*scale.Factor()), floorEntries))}
	if system == Name {
		threshold := max(int64(systems.PaperGCThresholdRatio*float64(scale.DataPerNodeBytes)), scale.SegmentSizeBytes)
		flags = append(gcFlags("", threshold), flags...)
	}
	return systems.Geometry{Flags: flags}
}

// conditionFlags puts Name under the paper's GC (systems.CondPaperGC):
// merge rounds at the paper's threshold, unpaced, all nodes at once, no
// idle rounds. The other conditions concern the node or the workload.
func conditionFlags(cond string, dataPerNodeBytes int64) []string {
	if cond != systems.CondPaperGC {
		return nil
	}
	return append(gcFlags(StrategyMerge, int64(systems.PaperGCThresholdRatio*float64(dataPerNodeBytes))),
		"-gcRateBytesPerSec", "0", "-gcStagger", "0", "-gcIdleAfter", "0")
}

// gcStressFlags make GC run back to back, unpaced, over 1 MiB segments
// during a fault campaign (systems.System.GCStressFlags). Paced at the
// default 64 MiB/s, GC fell behind the paper profile's crash load (about
// 80 MB/s per node) and the disk filled: nezha has no write stall on GC
// debt (RocksDB stalls on pending compaction bytes), so a load above GC's
// pace grows the log without bound.
func gcStressFlags() []string {
	return []string{"-gcContinuous", "-segmentSizeBytes", "1048576", "-gcRateBytesPerSec", "0"}
}

// conformanceGCArgs are the serve flags of a conformance configuration
// that runs GC strategy back to back over 64 KiB segments.
func conformanceGCArgs(strategy string) []string {
	return []string{"-gc", strategy, "-gcContinuous", "-gcInterval", "20ms", "-segmentSizeBytes", "65536", "-gcGarbageRatio", "0.3"}
}

// Config is the configuration of a nezha system. It implements
// systems.SystemConfig.
type Config struct {
	// Index is the key -> location index: IndexLevelDB (default, as the
	// paper's code) or IndexMemory. Flag -index.
	Index string
	// IndexCacheEntries bounds the cache of key -> location in front of
	// the LevelDB index (RocksDB's row cache for the index; see
	// locationCache), in keys; about 100 bytes each with a 10-byte key.
	// 0: no cache. Flag -indexCacheEntries. Default
	// DefaultIndexCacheEntries (262,144, about 26 MiB).
	IndexCacheEntries int

	// GC settings, for Name only (nezha-nogc has no GC).
	//
	// GC is the strategy (-gc): StrategyTiered (default), StrategyMerge,
	// StrategySortOnce or StrategyGreedy. See strategy.go.
	GC string
	// GCThresholdBytes: a round is due once the Raft log holds this many
	// bytes (-gcThresholdBytes; tiered: above its compaction point, and the
	// round copies only files worth it by GCGarbageRatio, else it only
	// compacts the log: a checkpoint; merge waits until the log also holds
	// as much as the sorted runs). Default 1 GiB.
	GCThresholdBytes int64
	// GCGarbageRatio: a round is also due once the garbage a round of the
	// strategy would reclaim / (log + runs) is at least this
	// (-gcGarbageRatio); greedy and tiered rewrite the files at least this
	// garbage. Default 0.5.
	GCGarbageRatio float64
	// GCMinBytes: no garbage, tier or idle round runs to reclaim fewer
	// bytes than this (-gcMinBytes; at least 4 KiB apply). Default 1 MiB:
	// a mass delete on a small store comes back.
	GCMinBytes int64
	// GCFanout: tiered merges the runs of a tier once it holds this many
	// (-gcFanout, at least 2); tier t holds runs of about
	// 1 MiB x fanout^(t+1). Default 4 (RocksDB's universal compaction and
	// Cassandra's size-tiered compaction also merge 4).
	GCFanout int
	// GCIdleAfter: once no write has been applied for this long, one round
	// sorts what remains of the log (and tiered merges the runs when that
	// is worth it): SCAN then reads runs (-gcIdleAfter; 0: never).
	// Default 2s: shorter than the harness's GC-settle window (3s), so a
	// loaded read bed is sorted before it is read.
	GCIdleAfter time.Duration
	// GCScanLogBytes: a round sorts the log once scans have read this many
	// record bytes from log segments since the last round, more than from
	// runs (-gcScanLogBytes; 0: never). Default 64 MiB.
	GCScanLogBytes int64
	// GCRateBytesPerSec caps the bytes GC writes per second on the node, a
	// token bucket (golang.org/x/time/rate) 1 MiB deep (-gcRateBytesPerSec;
	// 0: unlimited). Default 64 MiB/s.
	GCRateBytesPerSec int64
	// GCMaxRoundBytes bounds what one tiered round copies (live bytes of
	// its input files, the oldest log segments first) on every trigger but
	// idle (-gcMaxRoundBytes; 0: no bound), so that rounds finish and the
	// log's compaction point advances even when a node restarts more often
	// than one round over its whole frozen log takes: in the paper
	// profile's crash campaign a round over GBs of log at 64 MiB/s never
	// finished between kills and the log grew until the disk was full
	// (Titan's max_gc_batch_size plays the same part). Default 256 MiB.
	GCMaxRoundBytes int64
	// GCStallGarbageBytes is the GC debt at which the node stops taking
	// writes: while the garbage GC has not reclaimed yet (superseded and
	// deleted values, by the discard statistics) is at least this many
	// bytes, puts and deletes wait for GC (RocksDB's
	// hard_pending_compaction_bytes_limit, for the value log;
	// -gcStallGarbageBytes; 0: never stall). Default 16 GiB.
	GCStallGarbageBytes int64
	// GCStagger is the length of a node's GC time slot: rounds other than
	// size, checkpoint and continuous ones start only in slot (id-1) of
	// every nodes x GCStagger of the wall clock, so the nodes take turns
	// (-gcStagger; 0: no slots). Default 1s.
	GCStagger time.Duration
	// GCInterval is how often the trigger is checked besides after applies
	// (-gcInterval). Default 1s.
	GCInterval time.Duration
	// GCContinuous runs rounds back to back whenever there is something to
	// freeze (-gcContinuous; for tests and stress).
	GCContinuous bool
	// GCCrashPoint makes the node kill itself at the named point of a GC
	// round (-gcCrashPoint; tests only). See CrashPoints.
	GCCrashPoint string

	// Clock is the time against which TTL expiry times
	// (systems.Command.ExpiresUnixNano) are compared on every read path and
	// by GC. nil: time.Now. Not a flag (embedded users and tests set it).
	Clock func() time.Time

	// MmapReads: value reads of sorted runs copy out of a read-only
	// memory mapping of each run (vfs.Mapping) instead of a pread into a
	// zeroed buffer, as raftlog.Options.MmapReads does for sealed log
	// segments. Not a flag: the replicated nodes keep positioned reads (a
	// mapped page survives drop_caches, which their cold-read measurements
	// rely on); the embedded engine turns it on. Default false.
	MmapReads bool

	system string // Name or NameNoGC
}

var _ systems.SystemConfig = (*Config)(nil)

func newConfig(system string) *Config {
	return &Config{
		Index:               IndexLevelDB,
		IndexCacheEntries:   DefaultIndexCacheEntries,
		GC:                  StrategyTiered,
		GCThresholdBytes:    1 << 30,
		GCGarbageRatio:      0.5,
		GCMinBytes:          1 << 20,
		GCFanout:            4,
		GCIdleAfter:         2 * time.Second,
		GCScanLogBytes:      64 << 20,
		GCRateBytesPerSec:   64 << 20,
		GCMaxRoundBytes:     256 << 20,
		GCStallGarbageBytes: 16 << 30,
		GCStagger:           time.Second,
		GCInterval:          time.Second,
		system:              system,
	}
}

func (c *Config) gcEnabled() bool { return c.system == Name }

// DefaultConfig returns the configuration of the named system (Name or
// NameNoGC) with its documented defaults.
func DefaultConfig(system string) (*Config, error) {
	if system != Name && system != NameNoGC {
		return nil, fmt.Errorf("nezha: unknown system %q", system)
	}
	return newConfig(system), nil
}

// RegisterFlags adds -index, and for Name the -gc* flags, to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Index, "index", c.Index,
		"key -> location index: "+strings.Join(IndexKinds(), " or ")+
			" (leveldb persists under <data>/index/; memory is rebuilt from the Raft log on start)")
	fs.IntVar(&c.IndexCacheEntries, "indexCacheEntries", c.IndexCacheEntries,
		"leveldb index: cache the locations of at most this many keys in memory, about 100 bytes each (0: no cache)")
	if !c.gcEnabled() {
		return
	}
	fs.StringVar(&c.GC, "gc", c.GC, "GC strategy: "+strings.Join(Strategies(), ", "))
	fs.Int64Var(&c.GCThresholdBytes, "gcThresholdBytes", c.GCThresholdBytes, "run GC once the Raft log holds this many bytes (tiered: above its compaction point)")
	fs.Float64Var(&c.GCGarbageRatio, "gcGarbageRatio", c.GCGarbageRatio, "run GC once garbage/(log+runs) reaches this; greedy and tiered rewrite files at least this garbage")
	fs.Int64Var(&c.GCMinBytes, "gcMinBytes", c.GCMinBytes, "no garbage, tier or idle GC round to reclaim fewer bytes")
	fs.IntVar(&c.GCFanout, "gcFanout", c.GCFanout, "tiered: merge a tier's runs once it holds this many")
	fs.DurationVar(&c.GCIdleAfter, "gcIdleAfter", c.GCIdleAfter, "sort the rest of the log once no write was applied for this long (0: never)")
	fs.Int64Var(&c.GCScanLogBytes, "gcScanLogBytes", c.GCScanLogBytes, "sort the log once scans read this many bytes from it since the last round, more than from runs (0: never)")
	fs.Int64Var(&c.GCRateBytesPerSec, "gcRateBytesPerSec", c.GCRateBytesPerSec, "cap GC writes at this many bytes per second (0: unlimited)")
	fs.Int64Var(&c.GCMaxRoundBytes, "gcMaxRoundBytes", c.GCMaxRoundBytes, "a tiered round copies at most this many live bytes, oldest log segments first (idle rounds: no bound; 0: no bound)")
	fs.Int64Var(&c.GCStallGarbageBytes, "gcStallGarbageBytes", c.GCStallGarbageBytes, "writes wait while GC's unreclaimed garbage is at least this many bytes (0: never)")
	fs.DurationVar(&c.GCStagger, "gcStagger", c.GCStagger, "GC time slot per node: non-urgent rounds start only in the node's slot (0: no slots)")
	fs.DurationVar(&c.GCInterval, "gcInterval", c.GCInterval, "how often the GC trigger is checked")
	fs.BoolVar(&c.GCContinuous, "gcContinuous", c.GCContinuous, "run GC rounds back to back (tests, stress)")
	fs.StringVar(&c.GCCrashPoint, "gcCrashPoint", c.GCCrashPoint, "TESTING: kill the node at this GC point: "+strings.Join(CrashPoints(), ", "))
}

// Validate reports every problem with c at once (an errors.Join of
// *cmdline.UsageError values), or nil.
func (c *Config) Validate() error {
	var errs []error
	if !slices.Contains(IndexKinds(), c.Index) {
		errs = append(errs, cmdline.Usagef("-index %q: want one of %s", c.Index, strings.Join(IndexKinds(), ", ")))
	}
	if c.IndexCacheEntries < 0 {
		errs = append(errs, cmdline.Usagef("-indexCacheEntries %d must not be negative", c.IndexCacheEntries))
	}
	if c.system != Name && c.system != NameNoGC {
		errs = append(errs, cmdline.Usagef("nezha: unknown system %q (use NezhaNoGC or Nezha)", c.system))
	}
	if c.gcEnabled() {
		if _, err := NewStrategy(c.GC, c.GCFanout); err != nil {
			errs = append(errs, err)
		}
		if c.GCThresholdBytes <= 0 {
			errs = append(errs, cmdline.Usagef("-gcThresholdBytes %d must be positive", c.GCThresholdBytes))
		}
		if c.GCGarbageRatio <= 0 || c.GCGarbageRatio > 1 {
			errs = append(errs, cmdline.Usagef("-gcGarbageRatio %v must be in (0, 1]", c.GCGarbageRatio))
		}
		if c.GCMinBytes < 0 {
			errs = append(errs, cmdline.Usagef("-gcMinBytes %d must not be negative", c.GCMinBytes))
		}
		if c.GCInterval <= 0 {
			errs = append(errs, cmdline.Usagef("-gcInterval %v must be positive", c.GCInterval))
		}
		if c.GCFanout < 2 {
			errs = append(errs, cmdline.Usagef("-gcFanout %d must be at least 2", c.GCFanout))
		}
		if c.GCIdleAfter < 0 {
			errs = append(errs, cmdline.Usagef("-gcIdleAfter %v must not be negative", c.GCIdleAfter))
		}
		if c.GCScanLogBytes < 0 {
			errs = append(errs, cmdline.Usagef("-gcScanLogBytes %d must not be negative", c.GCScanLogBytes))
		}
		if c.GCRateBytesPerSec < 0 {
			errs = append(errs, cmdline.Usagef("-gcRateBytesPerSec %d must not be negative", c.GCRateBytesPerSec))
		}
		if c.GCStallGarbageBytes < 0 {
			errs = append(errs, cmdline.Usagef("-gcStallGarbageBytes %d must not be negative", c.GCStallGarbageBytes))
		}
		if c.GCMaxRoundBytes < 0 {
			errs = append(errs, cmdline.Usagef("-gcMaxRoundBytes %d must not be negative", c.GCMaxRoundBytes))
		}
		if c.GCStagger < 0 {
			errs = append(errs, cmdline.Usagef("-gcStagger %v must not be negative", c.GCStagger))
		}
		if c.GCCrashPoint != "" && !slices.Contains(CrashPoints(), c.GCCrashPoint) {
			errs = append(errs, cmdline.Usagef("-gcCrashPoint %q: want one of %s", c.GCCrashPoint, strings.Join(CrashPoints(), ", ")))
		}
	}
	return errors.Join(errs...)
}

// Describe returns the configuration for results recording (config.json).
func (c *Config) Describe() map[string]any {
	d := map[string]any{
		"system":        c.system,
		"index":         c.Index,
		"gc":            c.gcEnabled(),
		"value_log_dir": ValueLogDir,
		"sorted_dir":    SortedDir,
	}
	if c.Index == IndexLevelDB {
		d["index_dir"] = IndexDir
		d["index_sync"] = false
		d["index_cache_entries"] = c.IndexCacheEntries
	}
	if c.gcEnabled() {
		d["gc_strategy"] = c.GC
		d["gc_threshold_bytes"] = c.GCThresholdBytes
		d["gc_garbage_ratio"] = c.GCGarbageRatio
		d["gc_min_bytes"] = c.GCMinBytes
		d["gc_fanout"] = c.GCFanout
		d["gc_idle_after"] = c.GCIdleAfter.String()
		d["gc_scan_log_bytes"] = c.GCScanLogBytes
		d["gc_rate_bytes_per_sec"] = c.GCRateBytesPerSec
		d["gc_max_round_bytes"] = c.GCMaxRoundBytes
		d["gc_stall_garbage_bytes"] = c.GCStallGarbageBytes
		d["gc_stagger"] = c.GCStagger.String()
		d["gc_interval"] = c.GCInterval.String()
		d["gc_continuous"] = c.GCContinuous
	}
	return d
}

// Open implements systems.SystemConfig; see OpenStore.
func (c *Config) Open(env systems.Env) (systems.StateMachine, error) {
	s, err := c.OpenStore(env)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// OpenStore validates c and opens the store in env.Dir: it reconciles
// sorted/ with its manifest (finishing or discarding a staged snapshot),
// opens the index (LevelDB under <env.Dir>/index/, or a memory index loaded
// from the GC checkpoint), checks that the index covers the log's
// compaction point, and starts GC for Name. env.Dir and env.Log are
// required, env.Control too for Name; env.Logger defaults to
// slog.Default().
func (c *Config) OpenStore(env systems.Env) (*Store, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if env.Dir == "" || env.Log == nil {
		return nil, fmt.Errorf("nezha: open: Env.Dir and Env.Log are required")
	}
	if c.gcEnabled() && env.Control == nil {
		return nil, fmt.Errorf("nezha: open: Env.Control is required for GC")
	}
	logger := env.Logger
	if logger == nil {
		logger = slog.Default()
	}
	sortedDir := filepath.Join(env.Dir, SortedDir)
	if err := vfs.MkdirAllSynced(env.FS.Base(), sortedDir, 0o755); err != nil {
		return nil, fmt.Errorf("nezha: %w", err)
	}
	clock := c.Clock
	if clock == nil {
		clock = time.Now
	}
	s := &Store{name: c.system, cfg: *c, dir: env.Dir, sortedDir: sortedDir, vlog: env.Log, ctl: env.Control,
		logger: logger, runs: newRunSet(env.FS.Base(), sortedDir, c.MmapReads), fs: env.FS, clock: clock}
	if c.gcEnabled() {
		gc, err := newCollector(s, &s.cfg, env)
		if err != nil {
			return nil, err
		}
		s.gc = gc
	}
	if err := s.open(); err != nil {
		s.runs.closeAll()
		if s.index != nil {
			s.index.Close()
		}
		return nil, err
	}
	attrs := []any{"system", c.system, "index", c.Index, "applied", s.index.AppliedIndex(), "runs", len(s.man.Runs)}
	if c.gcEnabled() {
		attrs = append(attrs, "gc", c.GC)
		s.gc.start()
	}
	logger.Info("nezha: state machine open", attrs...)
	return s, nil
}

func (s *Store) open() error {
	if err := s.recoverRuns(); err != nil {
		return err
	}
	p := s.man.Restore
	compacted := uint64(0)
	if s.ctl != nil {
		compacted = s.ctl.CompactedIndex()
	}
	if p != nil && compacted >= p.Index {
		// The index is not opened first: finishRestore wipes and rebuilds
		// it, and a crash inside finishRestore can have left it half
		// created (LevelDB's files without its CURRENT), which would not
		// open.
		s.logger.Info("nezha: finishing a snapshot restore interrupted by a crash", "index", p.Index)
		if err := s.finishRestore(*p); err != nil {
			return err
		}
	} else {
		x, err := s.openIndex()
		if err != nil {
			return err
		}
		s.index = x
	}
	if p != nil && compacted < p.Index {
		s.logger.Warn("nezha: discarding a staged snapshot the log never recorded", "index", p.Index)
		m := s.man
		m.Restore = nil
		if err := m.write(s.fs, s.sortedDir); err != nil {
			return err
		}
		s.man = m
		if err := s.fs.Base().Remove(filepath.Join(s.sortedDir, runName(p.Run))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("nezha: %w", err)
		}
	}
	if s.ctl != nil {
		if c := s.ctl.CompactedIndex(); s.index.AppliedIndex() < c {
			return fmt.Errorf("nezha: the %s index is at applied index %d, below the log's compaction point %d: "+
				"entries %d..%d are gone (was the index deleted?)", s.index.Kind(), s.index.AppliedIndex(), c, s.index.AppliedIndex()+1, c)
		}
	}
	if err := s.removeOrphanRuns(); err != nil {
		return err
	}
	if s.gc != nil {
		return s.gc.rebuildLive()
	}
	return nil
}

// gcFlags are the serve flags of a GC strategy (empty: the default) and
// round threshold (systems.System.GCFlags).
func gcFlags(strategy string, thresholdBytes int64) []string {
	var args []string
	if strategy != "" {
		args = append(args, "-gc", strategy)
	}
	return append(args, "-gcThresholdBytes", strconv.FormatInt(thresholdBytes, 10))
}
