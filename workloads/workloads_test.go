package workloads

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/systems"
)

// memStore is an in-memory Store. failPut, if set, decides the error of
// the put of a key (before it is applied).
type memStore struct {
	mu      sync.Mutex
	m       map[string][]byte
	puts    int
	failPut func(key []byte) error
}

func newMemStore() *memStore { return &memStore{m: map[string][]byte{}} }

func (s *memStore) Put(_ context.Context, k, v []byte) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failPut != nil {
		if err := s.failPut(k); err != nil {
			return 0, err
		}
	}
	s.puts++
	s.m[string(k)] = append([]byte(nil), v...)
	return uint64(s.puts), nil
}

func (s *memStore) Get(_ context.Context, k []byte) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[string(k)]
	return v, ok, nil
}

func (s *memStore) Scan(_ context.Context, start, end []byte, limit int) ([]systems.KeyValue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for k := range s.m {
		if k >= string(start) && (len(end) == 0 || k < string(end)) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if limit > 0 && len(keys) > limit {
		keys = keys[:limit]
	}
	out := make([]systems.KeyValue, len(keys))
	for i, k := range keys {
		out[i] = systems.KeyValue{Key: []byte(k), Value: s.m[k]}
	}
	return out, nil
}

func TestSummarizeMath(t *testing.T) {
	start := time.Unix(1000, 0)
	a, b := NewRecorder(start, true, nil), NewRecorder(start, true, nil)
	// 100 completed operations of 1..100 ms, split over two recorders,
	// each moving 1000 bytes; the k-th ends in second k/40.
	for k := 1; k <= 100; k++ {
		r := a
		if k%2 == 0 {
			r = b
		}
		lat := time.Duration(k) * time.Millisecond
		begin := start.Add(time.Duration(k)*25*time.Millisecond - lat)
		out := OK
		if k%10 == 0 {
			out = Miss
		}
		r.Record("put", begin, lat, out, 1000, 1, nil)
	}
	a.Record("put", start, 500*time.Millisecond, Failed, 1000, 1, errors.New("boom"))
	b.Record("put", start, time.Second, Ambiguous, 1000, 1, &client.AmbiguousError{Err: errors.New("lost")})
	s := Summarize("put", []*Recorder{a, b}, 2*time.Second)

	if s.Ops != 100 || s.Misses != 10 || s.Errors != 1 || s.Ambiguous != 1 || s.Bytes != 100000 || s.Items != 100 {
		t.Fatalf("counts: %+v", s)
	}
	if s.OpsPerSec != 50 || s.MBPerSec != 0.05 || s.DurationSec != 2 {
		t.Fatalf("rates: ops/s %v MB/s %v duration %v", s.OpsPerSec, s.MBPerSec, s.DurationSec)
	}
	// HDR with 3 significant digits: within 0.1%.
	near := func(name string, got int64, wantMs float64) {
		t.Helper()
		want := wantMs * 1000
		if d := float64(got) - want; d < -want*0.001 || d > want*0.001 {
			t.Errorf("%s = %d us, want %.0f", name, got, want)
		}
	}
	near("p50", s.P50Us, 50)
	near("p95", s.P95Us, 95)
	near("p99", s.P99Us, 99)
	near("p99.9", s.P999Us, 100)
	near("max", s.MaxUs, 100)
	near("min", s.MinUs, 1)
	if s.AvgUs < 50400 || s.AvgUs > 50600 {
		t.Errorf("avg = %v us, want 50500 (failed and ambiguous operations are not timed)", s.AvgUs)
	}
	if len(s.ErrorSamples) != 2 {
		t.Errorf("error samples %q", s.ErrorSamples)
	}
	// Series: operation k ends at k*25 ms: 39 in second 0, 40 in 1, 21 in 2 (k=80..100).
	var got []int64
	for _, p := range s.Series {
		got = append(got, p.Ops)
	}
	if fmt.Sprint(got) != "[39 40 21]" {
		t.Fatalf("series ops %.60v, want [39 40 21]", fmt.Sprint(got))
	}
	if s.Series[0].Errors != 1 || s.Series[0].Ambiguous != 0 || s.Series[1].Ambiguous != 1 {
		t.Errorf("series failures %+v", s.Series)
	}
	// Zero duration: taken from the operations (first start .. last end at 2.5 s).
	if s2 := Summarize("put", []*Recorder{a, b}, 0); s2.DurationSec != 2.5 {
		t.Errorf("derived duration %v", s2.DurationSec)
	}

	var buf bytes.Buffer
	if err := WriteRawCSV(&buf, []*Recorder{a, b}); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 103 || strings.Join(rows[0], ",") != "op,start_unix_us,latency_us,ok,outcome,intended_start_unix_us,intended_latency_us,late" {
		t.Fatalf("raw csv: %d rows, header %v", len(rows), rows[0])
	}
	for i := 2; i < len(rows); i++ {
		if rows[i][1] < rows[i-1][1] && len(rows[i][1]) == len(rows[i-1][1]) {
			t.Fatalf("raw csv not in start order at row %d", i)
		}
	}
	if Summarize("x", nil, 0).P99Us != 0 {
		t.Error("empty summary has latencies")
	}
}

func TestClassify(t *testing.T) {
	amb := fmt.Errorf("put: %w", &client.AmbiguousError{Err: errors.New("timeout")})
	for _, c := range []struct {
		err  error
		want Outcome
	}{{nil, OK}, {amb, Ambiguous}, {errors.New("x"), Failed}} {
		if got := Classify(c.err); got != c.want {
			t.Errorf("Classify(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestKeys(t *testing.T) {
	if k := string(Key("k", 42)); k != "k000000042" {
		t.Fatalf("Key = %q", k)
	}
	if k := string(Key("k", MaxKeys-1)); k != "k999999999" || k >= string(KeyEnd("k")) {
		t.Fatalf("last key %q not below end %q", k, KeyEnd("k"))
	}
	for _, n := range []int64{1, 2, 3, 7, 100, 1000, 4096, 99991} {
		p := NewPermutation(n, rand.New(rand.NewSource(n)))
		seen := make([]bool, n)
		for i := int64(0); i < n; i++ {
			j := p.At(i)
			if j < 0 || j >= n || seen[j] {
				t.Fatalf("n=%d: At(%d)=%d is out of range or repeated", n, i, j)
			}
			seen[j] = true
		}
	}
}

// The GET workload draws only written indices, skewed towards the
// permuted rank 0, and the same sequence for the same seed.
func TestZipfOverWrittenKeys(t *testing.T) {
	const n = 1000
	perm := NewPermutation(n, rand.New(rand.NewSource(1)))
	z, err := NewZipfKeys(rand.New(rand.NewSource(7)), 1.01, n, perm)
	if err != nil {
		t.Fatal(err)
	}
	z2, _ := NewZipfKeys(rand.New(rand.NewSource(7)), 1.01, n, perm)
	counts := make([]int, n)
	for i := 0; i < 200000; i++ {
		k := z.Next()
		if k < 0 || k >= n {
			t.Fatalf("index %d outside the %d written keys", k, n)
		}
		if k2 := z2.Next(); k2 != k {
			t.Fatalf("draw %d: %d != %d with the same seed", i, k, k2)
		}
		counts[k]++
	}
	hot, second, tenth := counts[perm.At(0)], counts[perm.At(1)], counts[perm.At(10)]
	if !(hot > second && second > tenth) {
		t.Fatalf("not Zipf-skewed: rank0 %d rank1 %d rank10 %d", hot, second, tenth)
	}
	// P(rank 0) = 1/H(n, 1.01) ~ 0.14 for n = 1000.
	if f := float64(hot) / 200000; f < 0.12 || f > 0.16 {
		t.Fatalf("rank 0 frequency %.3f, want about 0.14", f)
	}
	if _, err := NewZipfKeys(rand.New(rand.NewSource(1)), 1.0, n, perm); err == nil {
		t.Fatal("s = 1 accepted")
	}
}

func TestValidate(t *testing.T) {
	for name, o := range map[string]interface{ Validate() error }{
		"put": ptr(DefaultPutOptions()), "get": withKeys(DefaultGetOptions()), "scan": withScanKeys(DefaultScanOptions()),
	} {
		if err := o.Validate(); err != nil {
			t.Errorf("default %s options: %v", name, err)
		}
	}
	p := DefaultPutOptions()
	p.Clients, p.Ops, p.ValueBytes, p.Order, p.OpTimeout = 0, -1, 0, "backwards", 0
	err := p.Validate()
	want := []string{"-cnums 0", "-dnums -1", "-vsize 0", "-order", "-timeout"}
	checkUsage(t, err, want)
	p = DefaultPutOptions()
	p.ValueBytes, p.MaxValueBytes = 1025, 1024
	checkUsage(t, p.Validate(), []string{"over the servers' maximum"})
	p = DefaultPutOptions()
	p.OverwriteKeys = -1
	checkUsage(t, p.Validate(), []string{"-overwrite -1"})
	// Overwrites of few keys may be more than the key scheme's keys.
	p.OverwriteKeys, p.Ops = 10, MaxKeys+1
	if err := p.Validate(); err != nil {
		t.Errorf("overwrites of 10 keys, %d of them: %v", p.Ops, err)
	}

	g := DefaultGetOptions()
	g.Zipf = 0.99
	checkUsage(t, g.Validate(), []string{"-keys 0", "-zipf 0.99"})
	g = *withKeys(DefaultGetOptions())
	g.Zipf = math.Inf(1) // rand.NewZipf never returns with it: bench get hung
	checkUsage(t, g.Validate(), []string{"-zipf +Inf"})
	s := DefaultScanOptions()
	s.Keys, s.ScanSize = 10, 11
	checkUsage(t, s.Validate(), []string{"-scansize 11 is more than the 10"})
}

func ptr[T any](v T) *T { return &v }

func withKeys(o GetOptions) *GetOptions       { o.Keys = 10; return &o }
func withScanKeys(o ScanOptions) *ScanOptions { o.Keys = 1000; return &o }

// checkUsage checks that err reports each of want, and only usage errors.
func checkUsage(t *testing.T, err error, want []string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %q", want)
	}
	var ue *cmdline.UsageError
	if one := cmdline.OneLine("x", err); !errors.As(one, &ue) {
		t.Fatalf("not all usage errors: %v", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
}

func TestPutGetScanOnMemStore(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	po := DefaultPutOptions()
	po.Clients, po.Ops, po.ValueBytes = 8, 500, 300
	s, err := RunPut(ctx, st, po)
	if err != nil {
		t.Fatal(err)
	}
	if s.Ops != 500 || s.Errors != 0 || s.Bytes != 500*300 || len(st.m) != 500 || st.puts != 500 {
		t.Fatalf("put: %+v, %d keys, %d puts", s, len(st.m), st.puts)
	}
	for i := int64(0); i < 500; i++ {
		if v := st.m[string(Key("k", i))]; len(v) != 300 {
			t.Fatalf("key %d: value of %d bytes", i, len(v))
		}
	}
	if n, err := CountKeys(ctx, st, "k"); err != nil || n != 500 {
		t.Fatalf("CountKeys = %d, %v", n, err)
	}
	if n, _ := CountKeys(ctx, st, "other"); n != 0 {
		t.Fatalf("CountKeys of a missing prefix = %d", n)
	}

	var raw bytes.Buffer
	g := DefaultGetOptions()
	g.Clients, g.Ops, g.Keys, g.Raw = 4, 2000, 500, &raw
	s, err = RunGet(ctx, st, g)
	if err != nil || s.Ops != 2000 || s.Misses != 0 || s.Bytes != 2000*300 {
		t.Fatalf("get: %+v %v", s, err)
	}
	if lines := strings.Count(raw.String(), "\n"); lines != 2001 {
		t.Fatalf("raw: %d lines", lines)
	}
	// Claiming more keys than were written shows up as misses.
	g.Keys, g.Raw = 1000, nil
	if s, _ = RunGet(ctx, st, g); s.Misses == 0 {
		t.Fatal("reads of unwritten keys were not counted as misses")
	}

	sc := DefaultScanOptions()
	sc.Clients, sc.Ops, sc.Keys, sc.ScanSize = 2, 50, 500, 100
	s, err = RunScan(ctx, st, sc)
	if err != nil || s.Ops != 50 || s.Items != 5000 || s.Misses != 0 {
		t.Fatalf("scan: %+v %v", s, err)
	}

	// MaxDuration ends a run of far more operations than it can do in
	// time, with what was done counted.
	g.Keys, g.Ops, g.MaxDuration = 500, 1<<40, 50*time.Millisecond
	s, err = RunGet(ctx, st, g)
	if err != nil || s.Ops == 0 || s.Ops >= g.Ops || s.Misses != 0 || s.DurationSec < 0.05 || s.OpsPerSec <= 0 {
		t.Fatalf("get with MaxDuration 50ms: %+v %v", s, err)
	}
}

// TestOverwrite: with OverwriteKeys, the puts write only those keys, each
// a value other than its last, the same keys for the same seed, and the
// raw CSV reads back as it was recorded.
func TestOverwrite(t *testing.T) {
	ctx := context.Background()
	written := func(seed int64) (*memStore, Summary, []RawOp) {
		st := newMemStore()
		po := DefaultPutOptions()
		po.Clients, po.Ops, po.ValueBytes, po.Seed = 1, 400, 100, seed
		if _, err := RunPut(ctx, st, po); err != nil {
			t.Fatal(err)
		}
		first := map[string][]byte{}
		for k, v := range st.m {
			first[k] = v
		}
		var raw bytes.Buffer
		po.OverwriteKeys, po.Ops, po.Raw = 40, 2000, &raw
		s, err := RunPut(ctx, st, po)
		if err != nil {
			t.Fatal(err)
		}
		ops, err := ReadRawCSV(&raw)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range st.m {
			if i, _ := strconv.ParseInt(strings.TrimPrefix(k, "k"), 10, 64); i >= 40 && !bytes.Equal(v, first[k]) {
				t.Fatalf("key %s beyond the 40 overwritten was written", k)
			}
		}
		return st, s, ops
	}
	st, s, ops := written(1)
	if s.Ops != 2000 || st.puts != 2400 || len(st.m) != 400 {
		t.Fatalf("overwrite: %+v, %d puts, %d keys", s, st.puts, len(st.m))
	}
	if len(ops) != 2000 || ops[0].Op != "put" || ops[0].Outcome != OK || ops[0].Late || !ops[0].Intended.Equal(ops[0].Start) || ops[0].Start.IsZero() {
		t.Fatalf("raw CSV read back: %d ops, first %+v", len(ops), ops[0])
	}
	again, _, _ := written(1)
	other, _, _ := written(2)
	if !maps.EqualFunc(st.m, again.m, bytes.Equal) || maps.EqualFunc(st.m, other.m, bytes.Equal) {
		t.Fatal("the same seed overwrote other keys, or another seed the same")
	}
	if _, err := ReadRawCSV(strings.NewReader("op,start_unix_us\nput,1\n")); err == nil || !strings.Contains(err.Error(), "no column latency_us") {
		t.Fatalf("a raw CSV without its columns: %v", err)
	}
}

func TestPutErrorsAreCounted(t *testing.T) {
	st := newMemStore()
	st.failPut = func(k []byte) error {
		switch k[len(k)-1] {
		case '3':
			return &client.AmbiguousError{Err: errors.New("deadline")}
		case '7':
			return errors.New("refused")
		}
		return nil
	}
	po := DefaultPutOptions()
	po.Clients, po.Ops, po.ValueBytes = 4, 100, 10
	s, err := RunPut(context.Background(), st, po)
	if err != nil {
		t.Fatal(err)
	}
	if s.Ops != 80 || s.Ambiguous != 10 || s.Errors != 10 {
		t.Fatalf("%+v", s)
	}
	if f := s.Failures(); f == nil || !strings.Contains(f.Error(), "10 operations failed and 10 are ambiguous") {
		t.Fatalf("Failures() = %v", f)
	}
}

func TestValueBuffer(t *testing.T) {
	vb := NewValueBuffer(1000, 1, ValueRandom)
	a, b := vb.Value(1), vb.Value(2)
	if len(a) != 1000 || cap(a) != 1000 || bytes.Equal(a, b) {
		t.Fatal("values of different keys must differ and be capped")
	}
	if !bytes.Equal(NewValueBuffer(1000, 1, ValueRandom).Value(5), vb.Value(5)) {
		t.Fatal("same seed, different value")
	}
	lc := NewValueBuffer(1000, 1, ValueLowercase).Value(3)
	letters := map[byte]bool{}
	for _, c := range lc {
		if c < 'a' || c > 'z' {
			t.Fatalf("lowercase value holds byte %q", c)
		}
		letters[c] = true
	}
	if len(letters) != 26 {
		t.Fatalf("1000 lowercase bytes use %d letters, want all 26", len(letters))
	}
	o := DefaultPutOptions()
	o.ValueKind = "zeros"
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "-valueKind") {
		t.Fatalf("bad -valueKind: %v", err)
	}
}

// A cluster that stops answering ends the run after StallTimeout (not after
// the one-minute operation timeout), with what was measured so far and a
// *StallError; progress lines count errors and ambiguous writes as they
// happen.
func TestRunStopsWhenTheClusterStopsAnswering(t *testing.T) {
	st := newMemStore()
	var mu sync.Mutex
	answered := 0
	st.failPut = func(k []byte) error {
		mu.Lock()
		answered++
		n := answered
		mu.Unlock()
		switch {
		case n > 60:
			return errDead
		case k[len(k)-1] == '7':
			return errors.New("refused")
		}
		return nil
	}
	var progress bytes.Buffer
	po := DefaultPutOptions()
	po.Clients, po.Ops, po.ValueBytes = 2, 1_000_000, 10
	po.StallTimeout = 300 * time.Millisecond
	po.Progress, po.ProgressInterval = &syncWriter{w: &progress}, 50*time.Millisecond
	start := time.Now()
	s, err := RunPut(context.Background(), &blockingStore{memStore: st}, po)
	var stall *StallError
	if !errors.As(err, &stall) || stall.Timeout != po.StallTimeout {
		t.Fatalf("err = %v, want a *StallError after %v", err, po.StallTimeout)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the run stopped after %v", d)
	}
	if s.Ops+s.Errors != 60 || s.Errors == 0 || s.Ambiguous != 2 {
		t.Fatalf("summary %+v: want 60 answered operations, some errors, and the 2 in flight ambiguous", s)
	}
	if want := fmt.Sprintf(", %d errors, 0 ambiguous", s.Errors); !strings.Contains(progress.String(), want) {
		t.Fatalf("no progress line with %q:\n%s", want, progress.String())
	}
}

var errDead = errors.New("dead")

// blockingStore is a memStore whose puts that fail with errDead hang until
// their context ends, then are ambiguous (a write sent to a dead cluster).
type blockingStore struct{ *memStore }

func (b *blockingStore) Put(ctx context.Context, k, v []byte) (uint64, error) {
	i, err := b.memStore.Put(ctx, k, v)
	if errors.Is(err, errDead) {
		<-ctx.Done()
		return 0, &client.AmbiguousError{Err: ctx.Err()}
	}
	return i, err
}

// syncWriter serializes writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// run starts no more clients than there are operations (before:
// bench put -cnums 10000000 -dnums 10 did its 10 PUTs, then held
// 7.8 GB for over a minute starting clients that would never run one).
func TestRunStartsNoMoreClientsThanOps(t *testing.T) {
	c := DefaultCommon()
	c.Clients, c.Ops, c.StallTimeout = 1000, 10, 0
	var started, done atomic.Int64
	s, err := run(context.Background(), c, "put", func(id int) opFunc {
		started.Add(1)
		return func(context.Context, int, int64) (Outcome, int64, int64, error) {
			done.Add(1)
			return OK, 0, 1, nil
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if started.Load() != 10 || done.Load() != 10 {
		t.Fatalf("started %d clients and ran %d operations, want 10 and 10 (summary %+v)", started.Load(), done.Load(), s)
	}
}

// A run whose context is cancelled mid-run (SIGINT to bench) stops after
// the operations in flight, returns ctx's error, and leaves complete
// outputs: the summary of what was done marked interrupted, every
// operation in raw.csv, the per-second series.
func TestInterruptedRunKeepsItsMeasurements(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := newMemStore()
	var puts atomic.Int64
	st.failPut = func([]byte) error {
		if puts.Add(1) == 1500 {
			cancel() // the interrupt, mid-run
		}
		return nil
	}
	dir := t.TempDir()
	outs := Outputs{Dir: dir, JSON: filepath.Join(dir, "summary-copy.json"), RawInDir: true}
	info := NewRunInfo("bench put", []string{"nezha", "bench", "put"}, nil, nil)
	raw, closeRaw, err := outs.Open(info)
	if err != nil {
		t.Fatal(err)
	}
	po := DefaultPutOptions()
	po.Clients, po.Ops, po.ValueBytes, po.Raw = 4, 1_000_000, 10, raw
	s, err := RunPut(ctx, st, po)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if s.Stopped != StoppedInterrupted || s.Ops < 1500 || s.Ops > 1500+int64(po.Clients) || s.Errors != 0 {
		t.Fatalf("summary %+v: want the 1500 to 1504 puts done, stopped %q", s, StoppedInterrupted)
	}
	if err := closeRaw(); err != nil {
		t.Fatal(err)
	}
	if err := outs.Save(Result{Summary: s, Run: info}, s, "bench put"); err != nil {
		t.Fatal(err)
	}

	for _, name := range []string{"summary.json", "summary-copy.json"} {
		var saved Summary
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &saved); err != nil || saved.Stopped != StoppedInterrupted || saved.Ops != s.Ops {
			t.Fatalf("%s: stopped %q, %d ops (%v); want %q, %d", name, saved.Stopped, saved.Ops, err, StoppedInterrupted, s.Ops)
		}
	}
	f, err := os.Open(filepath.Join(dir, "raw.csv"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil || int64(len(rows)) != 1+s.Ops {
		t.Fatalf("raw.csv: %d rows (%v), want a header and %d operations", len(rows), err, s.Ops)
	}
	b, err := os.ReadFile(filepath.Join(dir, "timeseries.csv"))
	if err != nil || !strings.HasPrefix(string(b), "second,ops,mb,errors,ambiguous,late_ops,intended_p50_us,intended_p99_us,intended_p999_us,intended_max_us,p50_us,p99_us,p999_us,max_us\n0,") {
		t.Fatalf("timeseries.csv: %q, %v", b, err)
	}
}
