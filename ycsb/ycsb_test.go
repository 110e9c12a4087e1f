package ycsb

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/magiconair/properties"

	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/systems"
	"github.com/nezha-harness/nezha/workloads"
)

// memStore is an in-memory Store. Put keeps the slice it is given (no
// copy), so a caller that hands it a reused buffer is caught.
type memStore struct {
	mu   sync.Mutex
	m    map[string][]byte
	gets int
}

func newMemStore() *memStore { return &memStore{m: map[string][]byte{}} }

func (s *memStore) Put(_ context.Context, k, v []byte) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[string(k)] = v
	return 1, nil
}

func (s *memStore) Get(_ context.Context, k []byte) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets++
	v, ok := s.m[string(k)]
	return append([]byte(nil), v...), ok, nil
}

func (s *memStore) Delete(_ context.Context, k []byte) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, string(k))
	return 1, nil
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
		out[i] = systems.KeyValue{Key: []byte(k), Value: append([]byte(nil), s.m[k]...)}
	}
	return out, nil
}

func TestRecordEncoding(t *testing.T) {
	// The same fields inserted in different orders encode identically.
	a := map[string][]byte{}
	b := map[string][]byte{}
	names := []string{"field0", "field1", "field2", "field10", "f"}
	for i, n := range names {
		a[n] = []byte(strings.Repeat(n, i+1))
	}
	for i := len(names) - 1; i >= 0; i-- {
		b[names[i]] = []byte(strings.Repeat(names[i], i+1))
	}
	ea, eb := EncodeRecord(a), EncodeRecord(b)
	if !bytes.Equal(ea, eb) {
		t.Fatal("encoding depends on map order")
	}
	for i := 0; i < 20; i++ {
		if !bytes.Equal(EncodeRecord(a), ea) {
			t.Fatal("encoding is not deterministic")
		}
	}
	got, err := DecodeRecord(ea, nil)
	if err != nil || len(got) != len(a) {
		t.Fatalf("decode: %v, %d fields", err, len(got))
	}
	for k, v := range a {
		if !bytes.Equal(got[k], v) {
			t.Fatalf("field %s: %q != %q", k, got[k], v)
		}
	}
	sub, _ := DecodeRecord(ea, []string{"field2", "nope"})
	if len(sub) != 1 || string(sub["field2"]) != "field2field2field2" {
		t.Fatalf("subset: %q", sub)
	}
	for _, bad := range [][]byte{nil, {2}, ea[:len(ea)-1], append([]byte{1, 200}, 'x')} {
		if _, err := DecodeRecord(bad, nil); err == nil {
			t.Errorf("corrupt record %v decoded", bad)
		}
	}
	if n := MaxRecordBytes(1, 16384); n != int64(len(EncodeRecord(map[string][]byte{"field0": make([]byte, 16384)}))) {
		t.Errorf("MaxRecordBytes(1, 16384) = %d, encoded %d", n, len(EncodeRecord(map[string][]byte{"field0": make([]byte, 16384)})))
	}
}

// go-ycsb reuses value buffers after each call: what the adapter stored
// must not change when the caller's buffer does.
func TestAdapterCopiesValues(t *testing.T) {
	st := newMemStore()
	db := NewDB(st, 2, time.Second, time.Now(), nil)
	ctx := db.InitThread(context.Background(), 0, 1)
	buf := []byte("original")
	if err := db.Insert(ctx, "usertable", "user1", map[string][]byte{"field0": buf, "field1": []byte("one")}); err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXXXXX")
	got, err := db.Read(ctx, "usertable", "user1", nil)
	if err != nil || string(got["field0"]) != "original" || string(got["field1"]) != "one" {
		t.Fatalf("read after the caller reused its buffer: %q %v", got, err)
	}

	// A partial update merges; a full update (all fieldcount fields) reads
	// too, to find the record.
	upd := []byte("new0")
	gets := st.gets
	if err := db.Update(ctx, "usertable", "user1", map[string][]byte{"field0": upd}); err != nil {
		t.Fatal(err)
	}
	if st.gets != gets+1 {
		t.Fatalf("partial update did %d reads, want 1", st.gets-gets)
	}
	copy(upd, "ZZZZ")
	got, _ = db.Read(ctx, "usertable", "user1", nil)
	if string(got["field0"]) != "new0" || string(got["field1"]) != "one" {
		t.Fatalf("after partial update: %q", got)
	}
	gets = st.gets
	if err := db.Update(ctx, "usertable", "user1", map[string][]byte{"field0": []byte("a"), "field1": []byte("b")}); err != nil {
		t.Fatal(err)
	}
	if st.gets != gets+1 {
		t.Fatalf("full update did %d reads, want 1", st.gets-gets)
	}
	// An update of a missing record, partial or full, fails, inserts
	// nothing and counts as a miss.
	for _, fields := range []map[string][]byte{{"field0": []byte("a")}, {"field0": []byte("a"), "field1": []byte("b")}} {
		if err := db.Update(ctx, "usertable", "user404", fields); !errors.Is(err, ErrNoRecord) {
			t.Fatalf("update of a missing record (%d fields): %v, want ErrNoRecord", len(fields), err)
		}
	}
	if _, found, _ := st.Get(ctx, RowKey("usertable", "user404")); found {
		t.Fatal("an update of a missing record inserted it")
	}

	// A missing key: no fields, no error, counted as a miss.
	got, err = db.Read(ctx, "usertable", "user404", nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("missing key: %q %v", got, err)
	}
	// Scans stay within their table.
	st.Put(ctx, []byte("usertablf/zzz"), EncodeRecord(map[string][]byte{"field0": {1}}))
	db.Insert(ctx, "usertable", "user2", map[string][]byte{"field0": []byte("two")})
	rows, err := db.Scan(ctx, "usertable", "user", 10, nil)
	if err != nil || len(rows) != 2 {
		t.Fatalf("scan: %d rows, %v", len(rows), err)
	}
	if err := db.Delete(ctx, "usertable", "user2"); err != nil {
		t.Fatal(err)
	}
	s := db.Summaries(time.Second)
	if s[OpRead].Ops != 3 || s[OpRead].Misses != 1 || s[OpInsert].Ops != 2 || s[OpUpdate].Ops != 4 || s[OpUpdate].Misses != 2 || s[OpUpdate].Errors != 0 ||
		s[OpScan].Ops != 1 || s[OpDelete].Ops != 1 {
		t.Fatalf("per-operation counts: read %+v insert %d update %+v scan %d delete %d",
			s[OpRead], s[OpInsert].Ops, s[OpUpdate], s[OpScan].Ops, s[OpDelete].Ops)
	}
}

func load(t *testing.T, files []string, sets ...string) *properties.Properties {
	t.Helper()
	p, _, err := LoadProperties(files, sets)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestShippedFilesAreUpstream(t *testing.T) {
	want := map[string]map[string]string{
		"workloada": {"readproportion": "0.5", "updateproportion": "0.5", "requestdistribution": "zipfian"},
		"workloadb": {"readproportion": "0.95", "updateproportion": "0.05", "requestdistribution": "zipfian"},
		"workloadc": {"readproportion": "1", "requestdistribution": "zipfian"},
		"workloadd": {"readproportion": "0.95", "insertproportion": "0.05", "requestdistribution": "latest"},
		"workloade": {"scanproportion": "0.95", "insertproportion": "0.05", "requestdistribution": "zipfian", "maxscanlength": "100", "scanlengthdistribution": "uniform"},
		"workloadf": {"readproportion": "0.5", "readmodifywriteproportion": "0.5", "requestdistribution": "zipfian"},
	}
	if got := strings.Join(ShippedNames(), ","); got != "workloada,workloadb,workloadc,workloadd,workloade,workloadf" {
		t.Fatalf("shipped %s", got)
	}
	for name, kv := range want {
		// From the package directory, "ycsb/workloads/X" is not a path:
		// the shipped copy answers.
		p := load(t, []string{"ycsb/workloads/" + name})
		for k, v := range kv {
			if got, _ := p.Get(k); got != v {
				t.Errorf("%s: %s=%q, want %q", name, k, got, v)
			}
		}
		if got, _ := p.Get("workload"); got != "site.ycsb.workloads.CoreWorkload" {
			t.Errorf("%s: workload=%q", name, got)
		}
		for _, phase := range []string{"load", "run"} {
			if w, err := ValidateProperties(p, phase, systems.DefaultMaxValueBytes); err != nil || len(w) > 0 {
				t.Errorf("%s %s: %v %v", name, phase, err, w)
			}
		}
	}
	_, src, err := ReadPropertyFile("workloads/workloada")
	if err != nil || src != "workloads/workloada" {
		t.Errorf("an existing path is read from disk: %q %v", src, err)
	}
	_, src, err = ReadPropertyFile("elsewhere/workloads/workloadc")
	if err != nil || !strings.HasPrefix(src, "shipped") {
		t.Errorf("shipped fallback: %q %v", src, err)
	}
	if _, _, err := ReadPropertyFile("other/workloada"); err == nil {
		t.Error("a missing file outside a workloads directory resolved")
	}
}

func TestValidateProperties(t *testing.T) {
	p := load(t, []string{"workloada"}, "requestdistribution=zipf", "recordcount=0", "operationcount=-5",
		"threadcount=many", "readproportion=1.5", "readallfields=maybe", "fieldlength=0", "batch.size=10", "frobnicate=1")
	w, err := ValidateProperties(p, "run", 1<<20)
	for _, want := range []string{"requestdistribution=\"zipf\"", "recordcount=0", "operationcount=-5", "threadcount=\"many\"",
		"readproportion=1.5", "readallfields=\"maybe\"", "fieldlength=0", "batch.size=10"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not report %s", err, want)
		}
	}
	var ue *cmdline.UsageError
	if !errors.As(cmdline.OneLine("ycsb", err), &ue) {
		t.Error("not a usage error")
	}
	if len(w) != 1 || !strings.Contains(w[0], "frobnicate") {
		t.Errorf("warnings %q", w)
	}
	p = load(t, []string{"workloada"}, "fieldcount=1", "fieldlength=16384")
	if _, err := ValidateProperties(p, "run", 16384); err == nil || !strings.Contains(err.Error(), "over the servers' maximum") {
		t.Errorf("oversized record: %v", err)
	}
	if _, err := ValidateProperties(p, "run", 16400); err != nil {
		t.Errorf("record that fits: %v", err)
	}
	p = load(t, []string{"workloada"}, "threadcount=2000")
	if _, err := ValidateProperties(p, "load", 1<<20); err == nil || !strings.Contains(err.Error(), "threadcount 2000") {
		t.Errorf("more threads than operations: %v", err)
	}
	p = load(t, nil, "operationcount=10")
	if _, err := ValidateProperties(p, "run", 1<<20); err == nil || !strings.Contains(err.Error(), "recordcount is not set") {
		t.Errorf("missing recordcount: %v", err)
	}
	if _, _, err := LoadProperties([]string{"workloada"}, []string{"novalue"}); err == nil {
		t.Error("-p without = accepted")
	}
}

// The core workload through go-ycsb against the in-memory store: load, A
// (read/update), F (read-modify-write). One thread: go-ycsb v1.0.3's shared
// generators write their last value without synchronization, which the race
// detector reports with several threads (the end-to-end test runs several,
// without -race).
func TestRunOnMemStore(t *testing.T) {
	st := newMemStore()
	ctx := context.Background()
	common := []string{"recordcount=200", "operationcount=400", "threadcount=1", "fieldcount=1", "fieldlength=64"}
	run := func(phase, file string) Summary {
		t.Helper()
		o := DefaultOptions(phase)
		o.Files, o.Settings, o.Output = []string{file}, common, io.Discard
		s, err := Run(ctx, st, o)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := run("load", "workloada")
	if s.Ops != 200 || s.Errors != 0 || s.Operations[OpInsert].Ops != 200 || len(st.m) != 200 {
		t.Fatalf("load: total %d errors %d inserts %d keys %d", s.Ops, s.Errors, s.Operations[OpInsert].Ops, len(st.m))
	}
	s = run("run", "workloada")
	r, u := s.Operations[OpRead], s.Operations[OpUpdate]
	if s.Ops != 400 || r.Ops+u.Ops != 400 || r.Ops < 100 || u.Ops < 100 || s.Errors != 0 {
		t.Fatalf("A: total %d read %d update %d", s.Ops, r.Ops, u.Ops)
	}
	s = run("run", "workloadf")
	rmw, u := s.Operations[OpReadModifyWrite], s.Operations[OpUpdate]
	if s.Ops != 400 || rmw.Ops < 100 || rmw.Ops != u.Ops || s.Operations[OpRead].Ops != 400 {
		t.Fatalf("F: total %d rmw %d update %d read %d", s.Ops, rmw.Ops, u.Ops, s.Operations[OpRead].Ops)
	}
	if s.OpsPerSec <= 0 || s.P99Us <= 0 || s.Bytes <= 0 || s.Properties["readmodifywriteproportion"] != "0.5" {
		t.Fatalf("F summary: %+v", s.Summary)
	}
}

// A run warns when its record shape (fieldcount, fieldlength) differs
// from the loaded records', and not when it agrees; its updates of
// records the load did not write fail rather than insert them.
func TestRunChecksRecordShape(t *testing.T) {
	st := newMemStore()
	ctx := context.Background()
	run := func(phase string, sets ...string) (Summary, string) {
		t.Helper()
		var warn bytes.Buffer
		o := DefaultOptions(phase)
		o.Files, o.Output, o.Warn = []string{"workloada"}, io.Discard, &warn
		o.Settings = append([]string{"threadcount=1", "operationcount=200"}, sets...)
		s, err := Run(ctx, st, o)
		if err != nil {
			t.Fatal(err)
		}
		return s, warn.String()
	}
	if _, w := run("run", "recordcount=100"); !strings.Contains(w, "holds no record") {
		t.Errorf("a run before the load: warnings %q", w)
	}
	run("load", "recordcount=100", "fieldcount=1", "fieldlength=64")
	if _, w := run("run", "recordcount=100", "fieldcount=1", "fieldlength=64"); strings.Contains(w, "field") {
		t.Errorf("a run with the load's record shape warned: %q", w)
	}
	// (Reads only: an update of another shape would change the records.)
	for _, sets := range [][]string{{}, {"fieldcount=1"}, {"fieldlength=64"}, {"fieldcount=1", "fieldlength=16"}} {
		sets = append([]string{"recordcount=100", "readproportion=1", "updateproportion=0"}, sets...)
		if _, w := run("run", sets...); !strings.Contains(w, "has 1 field(s) of up to 64 B") {
			t.Errorf("a run with %v after a load of 1 x 64 B: warnings %q", sets, w)
		}
	}
	// Updates over twice the loaded records: those of missing ones fail,
	// insert nothing and count as misses (in TOTAL too), not errors.
	s, _ := run("run", "recordcount=200", "fieldcount=1", "fieldlength=64", "requestdistribution=uniform", "readproportion=0", "updateproportion=1")
	u := s.Operations[OpUpdate]
	if u.Ops != 200 || u.Misses == 0 || u.Misses == u.Ops || u.Errors != 0 || s.Misses != u.Misses || s.Errors != 0 || len(st.m) != 100 {
		t.Fatalf("updates over 200 records after a load of 100: update %+v, total %+v, %d records stored", u, s.Summary, len(st.m))
	}
}

// Workers record into their own recorders; Summaries merges them.
func TestAdapterConcurrentThreads(t *testing.T) {
	st := newMemStore()
	db := NewDB(st, 1, time.Second, time.Now(), nil)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			ctx := db.InitThread(context.Background(), w, 8)
			for i := 0; i < 50; i++ {
				key := "user" + strconv.Itoa(w*1000+i)
				if err := db.Insert(ctx, "t", key, map[string][]byte{"field0": []byte(key)}); err != nil {
					t.Error(err)
				}
				if v, err := db.Read(ctx, "t", key, nil); err != nil || string(v["field0"]) != key {
					t.Errorf("read %s: %q %v", key, v, err)
				}
			}
		}(w)
	}
	wg.Wait()
	s := db.Summaries(time.Second)
	if s[OpInsert].Ops != 400 || s[OpRead].Ops != 400 || s[OpRead].Misses != 0 {
		t.Fatalf("insert %d read %d misses %d", s[OpInsert].Ops, s[OpRead].Ops, s[OpRead].Misses)
	}
}

// cancelAfter is a memStore whose n-th put cancels the run's context (an
// interrupt, mid-run).
type cancelAfter struct {
	*memStore
	n      int64
	puts   atomic.Int64
	cancel context.CancelFunc
}

func (c *cancelAfter) Put(ctx context.Context, k, v []byte) (uint64, error) {
	if c.puts.Add(1) == c.n {
		c.cancel()
	}
	return c.memStore.Put(ctx, k, v)
}

// A phase whose context is cancelled mid-run returns what was done,
// marked interrupted, with ctx's error, and leaves no temporary file.
func TestInterruptedRun(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where Run puts go-ycsb's table
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &cancelAfter{memStore: newMemStore(), n: 300, cancel: cancel}
	o := DefaultOptions("load")
	o.Files, o.Output = []string{"workloada"}, io.Discard
	o.Settings = []string{"recordcount=100000000", "threadcount=2", "fieldcount=1", "fieldlength=16"}
	s, err := Run(ctx, st, o)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if s.Stopped != workloads.StoppedInterrupted || s.Ops < 300 || s.Ops > 302 || s.Operations[OpInsert].Ops != s.Ops {
		t.Fatalf("summary: stopped %q, %d ops (%d inserts); want %q and the 300 to 302 inserts done",
			s.Stopped, s.Ops, s.Operations[OpInsert].Ops, workloads.StoppedInterrupted)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("left in TMPDIR: %v", left)
	}
}

// stallAfter is a memStore whose n-th Get sleeps for stall first: a store
// that stops answering for a while (in a synctest bubble, for exactly
// stall on the bubble's clock).
type stallAfter struct {
	*memStore
	n     int64
	stall time.Duration
	gets  atomic.Int64
}

func (s *stallAfter) Get(ctx context.Context, k []byte) ([]byte, bool, error) {
	if s.gets.Add(1) == s.n {
		time.Sleep(s.stall)
	}
	return s.memStore.Get(ctx, k)
}

// -rate runs a phase open loop: every YCSB operation is timed from when
// it was due, so a stall of the store shows in TOTAL's and the
// operations' latencies from the intended start, and the operations due
// while the one sender (threadcount=1: go-ycsb's generators race with
// more) waited are late. The phases run in a synctest bubble, whose clock
// moves only when every goroutine of the test waits: the store answers at
// once on it, so each operation but the stalled one is sent and answered
// when due, or, if due during the stall, when the stall ends, however
// busy the machine.
func TestOpenLoopRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			ops     = 600
			rate    = 1000.0
			seed    = 3
			stalled = 199 // every operation of the run does one Get: the 200th is operation 199's
			stall   = 200 * time.Millisecond
		)
		st := &stallAfter{memStore: newMemStore(), n: stalled + 1, stall: stall}
		common := []string{"recordcount=200", "operationcount=" + strconv.Itoa(ops), "threadcount=1", "fieldcount=1", "fieldlength=64"}
		run := func(phase string, rate float64) Summary {
			t.Helper()
			o := DefaultOptions(phase)
			o.Files, o.Settings, o.Output, o.Rate, o.Arrivals, o.Seed = []string{"workloada"}, common, io.Discard, rate, workloads.ArrivalsPoisson, seed
			s, err := Run(context.Background(), st, o)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		s := run("load", 2000)
		if s.Ops != 200 || s.Operations[OpInsert].Ops != 200 || len(st.m) != 200 || s.Load.Loop != workloads.LoopOpen {
			t.Fatalf("load: %d ops, %d inserts, %d records, load %+v", s.Ops, s.Operations[OpInsert].Ops, len(st.m), s.Load)
		}
		// The run starts now: the bubble's clock stands still until every
		// goroutine waits, and nothing waits before the first operation.
		start := time.Now()
		s = run("run", rate)
		r, u := s.Operations[OpRead], s.Operations[OpUpdate]
		t.Logf("TOTAL: %d ops, %d late; p99.9 %d us from the intended start, %d from the send", s.Ops, s.LateOps, s.Intended.P999Us, s.P999Us)
		if s.Ops != ops || r.Ops+u.Ops != ops || s.Load.RateOpsPerSec != rate || *s.Load.Seed != seed || s.Load.MaxInFlight != 1 || r.Load != s.Load {
			t.Fatalf("run: %d ops (%d reads, %d updates), load %+v, read's %+v", s.Ops, r.Ops, u.Ops, s.Load, r.Load)
		}

		// What TOTAL must hold, from the schedule.
		sched := workloads.NewSchedule(rate, workloads.ArrivalsPoisson, seed)
		exp := workloads.NewRecorder(start, false, nil).WithIntervals(workloads.NewIntervals(start))
		var stallEnd, end time.Duration
		for i := range ops {
			due := sched.Next()
			tm := workloads.Timing{Intended: start.Add(due), Sent: start.Add(due), Done: start.Add(due)}
			switch {
			case i == stalled:
				stallEnd = due + stall
				tm.Done = start.Add(stallEnd)
			case i > stalled && due < stallEnd:
				tm.Sent, tm.Done, tm.Late = start.Add(stallEnd), start.Add(stallEnd), true
			}
			exp.RecordTiming(OpTotal, tm, workloads.OK, 0, 0, nil)
			end = max(end, tm.Done.Sub(start))
		}
		want := workloads.Summarize(OpTotal, []*workloads.Recorder{exp}, end)
		if want.LateOps == 0 {
			t.Fatal("no operation is due during the stall: the test tests nothing")
		}
		if s.MeasuredFromUnixUs != start.UnixMicro() || s.LateOps != want.LateOps || s.DurationSec != want.DurationSec || s.OpsPerSec != want.OpsPerSec {
			t.Fatalf("TOTAL: from %d us, %d late, %v s, %v ops/s; want from %d, the %d due during the stall, %v s, %v ops/s",
				s.MeasuredFromUnixUs, s.LateOps, s.DurationSec, s.OpsPerSec, start.UnixMicro(), want.LateOps, want.DurationSec, want.OpsPerSec)
		}
		if s.Latency != want.Latency || s.Intended != want.Intended {
			t.Fatalf("TOTAL: latency %+v from the send, %+v from the intended start; want %+v, %+v", s.Latency, s.Intended, want.Latency, want.Intended)
		}
		if !slices.Equal(s.Series, want.Series) {
			t.Fatalf("TOTAL's series:\n%+v\nwant\n%+v", s.Series, want.Series)
		}
		// A READ or UPDATE is timed from its YCSB operation's intended
		// start: the stall shows in theirs as in TOTAL's.
		if r.LateOps+u.LateOps != s.LateOps || max(r.Intended.MaxUs, u.Intended.MaxUs) != s.Intended.MaxUs {
			t.Fatalf("READ: %d late, max %d us from the intended start; UPDATE: %d, %d; want %d late, max %d in all",
				r.LateOps, r.Intended.MaxUs, u.LateOps, u.Intended.MaxUs, s.LateOps, s.Intended.MaxUs)
		}
	})
}

// -rate refuses go-ycsb's closed-loop pacing (target) and warm-up
// (warmuptime); target alone warns that it times from the send.
func TestOpenLoopOptions(t *testing.T) {
	o := DefaultOptions("run")
	o.Files, o.Rate = []string{"workloada"}, 100
	o.Settings = []string{"recordcount=10", "operationcount=10", "target=50", "warmuptime=2"}
	_, _, _, err := o.Properties()
	for _, want := range []string{"-rate and target=50", "-rate and warmuptime=2"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not report %q", err, want)
		}
	}
	o.Rate, o.Arrivals, o.Warmup = -1, "bursty", -time.Second
	_, _, _, err = o.Properties()
	for _, want := range []string{"-rate -1", `-arrivals "bursty"`, "-warmup -1s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not report %q", err, want)
		}
	}
	o = DefaultOptions("run")
	o.Files, o.Settings = []string{"workloada"}, []string{"recordcount=10", "operationcount=10", "target=50"}
	if _, _, w, err := o.Properties(); err != nil || len(w) != 1 || !strings.Contains(w[0], "coordinated omission") {
		t.Fatalf("target alone: warnings %q, %v", w, err)
	}
}
