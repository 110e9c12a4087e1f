package embedded

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nezha-harness/nezha/nezha"
	"github.com/nezha-harness/nezha/raftkv/raftlog"
	"github.com/nezha-harness/nezha/systems"
)

// Options configures a DB. DefaultOptions gives the documented defaults;
// Validate reports every problem at once.
type Options struct {
	// Sync: every group commit ends with one fdatasync of the value log
	// before the writers it holds return (raftlog.Options.Sync). Default
	// true; false leaves durability to the page cache (a crash of the
	// machine, not of the process, may lose the newest writes; recovery
	// still cuts a torn tail).
	Sync bool
	// SegmentSizeBytes: the value log rolls to a new segment file once the
	// active one holds this many bytes (raftlog.Options.SegmentSizeBytes,
	// at least 4096). Default 64 MiB.
	SegmentSizeBytes int64
	// MaxCommitBytes bounds the payload bytes of one group commit (one
	// vectored write and one fdatasync): concurrent writers that arrive
	// while a commit is running are gathered into the next one up to this
	// size (a single larger batch is still committed, alone). Default 16 MiB.
	MaxCommitBytes int64
	// MaxValueBytes is the largest value Put accepts. Default 64 MiB
	// (systems.DefaultMaxValueBytes).
	MaxValueBytes int
	// MaxBatchBytes is the largest Batch (keys and values) Write accepts.
	// Default 256 MiB. One batch is one commit: recovery reads a crash in
	// the middle of a much larger one as corruption in the middle of the
	// log, not as a torn tail.
	MaxBatchBytes int64
	// Store configures the index and GC: nezha.DefaultConfig(nezha.Name)
	// (GC on, tiered strategy, LevelDB index; see nezha.Config for each
	// field's default) unless set. Use nezha.DefaultConfig(nezha.NameNoGC)
	// for a store without GC, and Store.Index = nezha.IndexMemory for the
	// in-memory index.
	Store *nezha.Config
	// StallPollInterval: while GC's debt holds writes back
	// (nezha.Config.GCStallGarbageBytes), the committer checks again this
	// often. Default 10ms.
	StallPollInterval time.Duration
	// Logger receives the store's and the log's messages. Default
	// slog.Default().
	Logger *slog.Logger
	// Clock gives the time a TTL counts from (PutWithTTL) and that expiry
	// is judged against on every read path and by GC; it replaces
	// Store.Clock. nil: time.Now.
	Clock func() time.Time
	// MmapReads: GET and SCAN copy values out of read-only memory mappings
	// of the sealed log segments and the sorted runs instead of reading
	// them with pread into zeroed buffers (raftlog.Options.MmapReads,
	// nezha.Config.MmapReads): no system call and no clear per read, as
	// Badger reads its value log. Records are still checked against their
	// checksums. Default true.
	MmapReads bool
}

// DefaultOptions returns Options with the documented defaults.
func DefaultOptions() Options {
	c, _ := nezha.DefaultConfig(nezha.Name)
	// One process, one store: GC needs no time slots across nodes.
	c.GCStagger = 0
	return Options{
		Sync:              true,
		SegmentSizeBytes:  raftlog.DefaultSegmentSizeBytes,
		MaxCommitBytes:    16 << 20,
		MaxValueBytes:     systems.DefaultMaxValueBytes,
		MaxBatchBytes:     256 << 20,
		Store:             c,
		StallPollInterval: 10 * time.Millisecond,
		MmapReads:         true,
	}
}

// Validate reports every problem with o at once (an errors.Join), or nil.
func (o *Options) Validate() error {
	var errs []error
	if o.SegmentSizeBytes < 4096 {
		errs = append(errs, fmt.Errorf("embedded: SegmentSizeBytes %d is below the minimum of 4096", o.SegmentSizeBytes))
	}
	if o.MaxCommitBytes <= 0 {
		errs = append(errs, fmt.Errorf("embedded: MaxCommitBytes %d must be positive", o.MaxCommitBytes))
	}
	if o.MaxValueBytes <= 0 {
		errs = append(errs, fmt.Errorf("embedded: MaxValueBytes %d must be positive", o.MaxValueBytes))
	}
	if o.MaxBatchBytes < int64(o.MaxValueBytes) {
		errs = append(errs, fmt.Errorf("embedded: MaxBatchBytes %d is below MaxValueBytes %d", o.MaxBatchBytes, o.MaxValueBytes))
	}
	if o.StallPollInterval <= 0 {
		errs = append(errs, fmt.Errorf("embedded: StallPollInterval %v must be positive", o.StallPollInterval))
	}
	if o.Store == nil {
		errs = append(errs, errors.New("embedded: Store is required (nezha.DefaultConfig)"))
	} else if err := o.Store.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
