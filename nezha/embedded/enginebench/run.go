package enginebench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/nezha-harness/nezha/nezha"
)

// Operations measured, the values of Result.Op.
const (
	OpPut  = "put"
	OpGet  = "get"
	OpScan = "scan"
)

// Options configures Run. DefaultOptions gives the documented defaults.
type Options struct {
	// Dir holds one directory per engine and value size, removed after
	// each (required).
	Dir string
	// Engines to measure, in order (default all of Engines()).
	Engines []string
	// ValueSizesBytes (default 100, 4096, 262144).
	ValueSizesBytes []int
	// Engine is how every engine is opened (default: Sync on, nezha with
	// the memory index and a 1s idle GC, Badger's value threshold 1 KiB).
	Engine EngineConfig
	// Writers are the concurrent PUT goroutines (group commit shares one
	// fsync among them). Default 16.
	Writers int
	// Readers are the concurrent GET and SCAN goroutines. Default 4.
	Readers int
	// ReadSetBytes of values (at most ReadSetMaxKeys keys) are loaded into
	// every engine before its reads, in batches of about 1 MiB (one commit
	// each), so that every engine reads the same keys. Defaults 64 MiB and
	// 100,000.
	ReadSetBytes   int64
	ReadSetMaxKeys int64
	// PutDuration bounds the PUT phase (after the reads, on new keys), as
	// does PutMaxBytes (values written per engine and size). Defaults 3s
	// and 256 MiB.
	PutDuration time.Duration
	PutMaxBytes int64
	// GetDuration and ScanDuration are the lengths of the read phases.
	// Default 2s each.
	GetDuration, ScanDuration time.Duration
	// ScanLength is the number of pairs one SCAN reads. Default 100.
	ScanLength int
	// SettleTimeout bounds the wait, between the load and the reads, for
	// nezha's idle GC round to sort the load into a run (the replicated
	// read beds wait for it too). Default 15s.
	SettleTimeout time.Duration
	// Seed of the random keys read. Default 1.
	Seed int64
	// Logf receives progress lines (nil: none).
	Logf func(format string, args ...any)
}

// DefaultOptions returns Options with the documented defaults for dir.
func DefaultOptions(dir string) Options {
	return Options{
		Dir:             dir,
		Engines:         Engines(),
		ValueSizesBytes: []int{100, 4 << 10, 256 << 10},
		Engine: EngineConfig{Sync: true, NezhaIndex: nezha.IndexMemory, NezhaGCIdleAfter: time.Second,
			BadgerValueThresholdBytes: 1 << 10},
		Writers:        16,
		Readers:        4,
		ReadSetBytes:   64 << 20,
		ReadSetMaxKeys: 100_000,
		PutDuration:    3 * time.Second,
		PutMaxBytes:    256 << 20,
		GetDuration:    2 * time.Second,
		ScanDuration:   2 * time.Second,
		ScanLength:     100,
		SettleTimeout:  15 * time.Second,
		Seed:           1,
	}
}

// Validate reports every problem with o at once.
func (o *Options) Validate() error {
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("enginebench: Dir is required"))
	}
	if len(o.Engines) == 0 {
		errs = append(errs, errors.New("enginebench: no engine"))
	}
	for _, e := range o.Engines {
		if !slices.Contains(Engines(), e) {
			errs = append(errs, fmt.Errorf("enginebench: unknown engine %q (known: %v)", e, Engines()))
		}
	}
	if len(o.ValueSizesBytes) == 0 {
		errs = append(errs, errors.New("enginebench: no value size"))
	}
	for _, s := range o.ValueSizesBytes {
		if s < 16 || s > 64<<20 {
			errs = append(errs, fmt.Errorf("enginebench: value size %d outside [16 B, 64 MiB]", s))
		}
	}
	if !slices.Contains(nezha.IndexKinds(), o.Engine.NezhaIndex) {
		errs = append(errs, fmt.Errorf("enginebench: nezha index %q: want one of %v", o.Engine.NezhaIndex, nezha.IndexKinds()))
	}
	if o.Engine.NezhaGCIdleAfter <= 0 {
		errs = append(errs, fmt.Errorf("enginebench: NezhaGCIdleAfter %v must be positive", o.Engine.NezhaGCIdleAfter))
	}
	if o.Engine.BadgerValueThresholdBytes <= 0 {
		errs = append(errs, fmt.Errorf("enginebench: BadgerValueThresholdBytes %d must be positive", o.Engine.BadgerValueThresholdBytes))
	}
	if o.Writers <= 0 || o.Readers <= 0 {
		errs = append(errs, fmt.Errorf("enginebench: Writers %d and Readers %d must be positive", o.Writers, o.Readers))
	}
	if o.PutDuration <= 0 || o.GetDuration <= 0 || o.ScanDuration <= 0 || o.SettleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("enginebench: PutDuration %v, GetDuration %v, ScanDuration %v and SettleTimeout %v must be positive",
			o.PutDuration, o.GetDuration, o.ScanDuration, o.SettleTimeout))
	}
	if o.PutMaxBytes <= 0 || o.ReadSetBytes <= 0 || o.ReadSetMaxKeys <= 0 {
		errs = append(errs, fmt.Errorf("enginebench: PutMaxBytes %d, ReadSetBytes %d and ReadSetMaxKeys %d must be positive",
			o.PutMaxBytes, o.ReadSetBytes, o.ReadSetMaxKeys))
	}
	if o.ScanLength <= 0 {
		errs = append(errs, fmt.Errorf("enginebench: ScanLength %d must be positive", o.ScanLength))
	}
	return errors.Join(errs...)
}

// Result is one engine's measurement of one operation at one value size.
type Result struct {
	Engine     string `json:"engine"`
	ValueBytes int    `json:"value_bytes"`
	Op         string `json:"op"`
	// Ops done in Seconds; a SCAN is one op of ScanLength pairs.
	Ops     int64   `json:"ops"`
	Seconds float64 `json:"seconds"`
	// OpsPerSec and MBPerSec (keys and values, 10^6 bytes) over Seconds.
	OpsPerSec float64 `json:"ops_per_sec"`
	MBPerSec  float64 `json:"mb_per_sec"`
	// P50Us and P99Us are latencies of one op in microseconds.
	P50Us float64 `json:"p50_us"`
	P99Us float64 `json:"p99_us"`
	// Keys: for GET and SCAN the keys loaded (the same for every engine),
	// for PUT the keys the phase wrote.
	Keys int64 `json:"keys"`
	// SettleSeconds (nezha, reads only): how long the idle GC round took
	// to sort the load before the reads.
	SettleSeconds float64 `json:"settle_seconds,omitempty"`
	// GOGCPercent and GOMemLimitBytes are the Go collector's settings in
	// the process during the run (GCSettings), which move the numbers of
	// large values: GOGC (-1 when off) and GOMEMLIMIT (NoMemLimit when
	// unset; print it with MemLimitText).
	GOGCPercent     int64 `json:"gogc_percent"`
	GOMemLimitBytes int64 `json:"gomemlimit_bytes"`
}

// NoMemLimit is the memory limit the Go runtime reports when none is set
// (math.MaxInt64: about 9.2e18 bytes, which means "none", not a size).
const NoMemLimit = math.MaxInt64

// MemLimitText renders a memory limit for a CSV field or a report: the
// limit in bytes (decimal), or "none" for NoMemLimit.
func MemLimitText(limitBytes int64) string {
	if limitBytes == NoMemLimit {
		return "none"
	}
	return strconv.FormatInt(limitBytes, 10)
}

// GCSettings returns the Go collector's current settings: the GOGC
// percentage (-1: off) and the memory limit in bytes (NoMemLimit: none),
// as the GOGC and GOMEMLIMIT environment variables or runtime/debug set
// them, read through runtime/metrics (nothing changed).
func GCSettings() (gogcPercent, memLimitBytes int64) {
	samples := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(samples)
	if samples[0].Value.Kind() == metrics.KindUint64 {
		// "off" reads as the largest uint64, which is -1 as an int64.
		gogcPercent = int64(samples[0].Value.Uint64())
	}
	if samples[1].Value.Kind() == metrics.KindUint64 {
		memLimitBytes = int64(samples[1].Value.Uint64())
	}
	return gogcPercent, memLimitBytes
}

// key i of the load: 16 hex digits of a bijection of i (an odd
// multiplier), so the keys written in index order land in random key order.
func key(i uint64) []byte {
	var b [16]byte
	const hex = "0123456789abcdef"
	v := i * 0x9E3779B97F4A7C15
	for j := 15; j >= 0; j-- {
		b[j] = hex[v&15]
		v >>= 4
	}
	return b[:]
}

// Run measures every engine at every value size, one after the other:
// the read set loaded in batches (not measured), GET of uniformly random
// loaded keys and SCAN of ScanLength pairs from uniformly random loaded
// keys (Readers goroutines each), then PUT (Writers goroutines writing new
// keys until PutDuration or PutMaxBytes). Every GET must find its key with the full value. The
// engines run one after the other, their order rotated by one per value
// size; each engine's directory is removed after its size.
func Run(ctx context.Context, o Options) ([]Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	gogc, memLimit := GCSettings()
	var out []Result
	for si, size := range o.ValueSizesBytes {
		// Rotated per size, so that no engine always runs first (on a
		// shared machine, slow minutes fall on all alike).
		order := append(slices.Clone(o.Engines[si%len(o.Engines):]), o.Engines[:si%len(o.Engines)]...)
		for _, name := range order {
			rs, err := runOne(ctx, o, name, size, logf)
			if err != nil {
				return out, fmt.Errorf("%s at %d B: %w", name, size, err)
			}
			for i := range rs {
				rs[i].GOGCPercent, rs[i].GOMemLimitBytes = gogc, memLimit
			}
			for _, r := range rs {
				logf("%-6s %7d B %-4s %10.0f ops/s %8.1f MB/s p50 %8.1f us p99 %8.1f us (%d keys)",
					r.Engine, r.ValueBytes, r.Op, r.OpsPerSec, r.MBPerSec, r.P50Us, r.P99Us, r.Keys)
			}
			out = append(out, rs...)
		}
	}
	return out, nil
}

func runOne(ctx context.Context, o Options, name string, size int, logf func(string, ...any)) (_ []Result, err error) {
	dir := filepath.Join(o.Dir, fmt.Sprintf("%s-%d", name, size))
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	e, err := Open(name, dir, o.Engine)
	if err != nil {
		return nil, err
	}
	defer func() {
		err = errors.Join(err, e.Close(), os.RemoveAll(dir))
	}()
	// Values: a random block shared by all keys, its first 4 KiB made
	// unique per key (no value compresses, within itself or against its
	// neighbours in a 4 KiB LSM block).
	base := make([]byte, size)
	fill(base, uint64(o.Seed))
	value := func(i uint64) []byte {
		v := append([]byte(nil), base...)
		fill(v[:min(size, 4<<10)], i+1)
		binary.LittleEndian.PutUint64(v, i)
		return v
	}
	keys := max(1, min(o.ReadSetMaxKeys, o.ReadSetBytes/int64(size)))
	perBatch := max(1, (1<<20)/int64(size))
	for lo := int64(0); lo < keys; lo += perBatch {
		var ks, vs [][]byte
		for i := lo; i < min(keys, lo+perBatch); i++ {
			ks, vs = append(ks, key(uint64(i))), append(vs, value(uint64(i)))
		}
		if err := e.Load(ks, vs); err != nil {
			return nil, fmt.Errorf("load: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	var settle time.Duration
	if ne, ok := e.(nezhaEngine); ok {
		start := time.Now()
		for !ne.idleSorted() {
			if time.Since(start) > o.SettleTimeout {
				logf("nezha %d B: no idle GC round within %v; reading the unsorted log", size, o.SettleTimeout)
				break
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
		settle = time.Since(start)
	}
	get, _, err := measure(ctx, o.Readers, o.GetDuration, func(w *worker) (int64, error) {
		i := uint64(w.rng.Int63n(keys))
		k := key(i)
		v, found, err := e.Get(w.buf, k)
		w.buf = v // reused by this reader's next GET
		if err != nil {
			return 0, err
		}
		if !found || len(v) != size || binary.LittleEndian.Uint64(v) != i {
			return 0, fmt.Errorf("get of key %s (%d): found %v, %d bytes; want %d bytes of key %d", k, i, found, len(v), size, i)
		}
		return int64(len(k) + len(v)), nil
	}, o.Seed+1)
	if err != nil {
		return nil, fmt.Errorf("get: %w", err)
	}
	scan, _, err := measure(ctx, o.Readers, o.ScanDuration, func(w *worker) (int64, error) {
		_, b, err := e.Scan(key(uint64(w.rng.Int63n(keys))), o.ScanLength)
		return b, err
	}, o.Seed+2)
	if err != nil {
		return nil, fmt.Errorf("scan: %w", err)
	}
	maxPuts := max(int64(1), o.PutMaxBytes/int64(size))
	put, n, err := measure(ctx, o.Writers, o.PutDuration, func(w *worker) (int64, error) {
		i, ok := w.next()
		if !ok || int64(i) >= maxPuts {
			return 0, errStop
		}
		j := uint64(keys) + i // keys after the read set
		k := key(j)
		return int64(len(k) + size), e.Put(k, value(j))
	}, o.Seed)
	if err != nil {
		return nil, fmt.Errorf("put: %w", err)
	}
	get.Keys, scan.Keys, put.Keys = keys, keys, min(n, maxPuts)
	for _, r := range []*Result{&get, &scan, &put} {
		r.Engine, r.ValueBytes = name, size
	}
	put.Op, get.Op, scan.Op = OpPut, OpGet, OpScan
	get.SettleSeconds, scan.SettleSeconds = settle.Seconds(), settle.Seconds()
	return []Result{put, get, scan}, nil
}

// errStop ends a worker of measure without an error.
var errStop = errors.New("stop")

// worker is one goroutine of measure: its random source, the shared
// sequence of indexes (next: false once the phase is over), and a buffer
// its op may keep between calls (a GET's value buffer).
type worker struct {
	rng  *rand.Rand
	next func() (uint64, bool)
	buf  []byte
}

// measure runs op in workers goroutines until d passes, ctx ends or op
// returns errStop, and returns the throughput, latencies and how many
// indexes next handed out. op returns the bytes it moved.
func measure(ctx context.Context, workers int, d time.Duration, op func(w *worker) (int64, error), seed int64) (Result, int64, error) {
	var (
		counter  atomic.Uint64
		ops, sum atomic.Int64
		mu       sync.Mutex
		hist     = hdrhistogram.New(1, 60_000_000, 3) // microseconds
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(d)
	next := func() (uint64, bool) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, false
		}
		return counter.Add(1) - 1, true
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			wk := &worker{rng: rand.New(rand.NewSource(seed*1000 + int64(w))), next: next}
			local := hdrhistogram.New(1, 60_000_000, 3)
			defer func() {
				mu.Lock()
				hist.Merge(local)
				mu.Unlock()
			}()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t0 := time.Now()
				n, err := op(wk)
				if errors.Is(err, errStop) {
					return
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				_ = local.RecordValue(max(1, time.Since(t0).Microseconds()))
				ops.Add(1)
				sum.Add(n)
			}
		}(w)
	}
	wg.Wait()
	if firstErr != nil {
		return Result{}, 0, firstErr
	}
	if err := ctx.Err(); err != nil {
		return Result{}, 0, err
	}
	secs := time.Since(start).Seconds()
	r := Result{Ops: ops.Load(), Seconds: secs, OpsPerSec: float64(ops.Load()) / secs,
		MBPerSec: float64(sum.Load()) / 1e6 / secs,
		P50Us:    float64(hist.ValueAtQuantile(50)), P99Us: float64(hist.ValueAtQuantile(99))}
	return r, int64(counter.Load()), nil
}

// fill writes pseudo-random bytes derived from seed into b (incompressible
// values, the same for every engine).
func fill(b []byte, seed uint64) {
	x := seed*0x9E3779B97F4A7C15 + 1
	for i := 0; i+8 <= len(b); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(b[i:], x)
	}
}
