package workloads

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/csv"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/systems"
)

// stallStore is a Store whose Puts take service (a sleep: the store's
// work), except that those of a key index at or above stallFrom that
// arrive before the stall ends are held until it does, and answered then:
// the stall begins with the first of them and lasts stall (a real one: a
// garbage collection that holds every write). In a synctest bubble both
// pass on the bubble's clock, exactly.
type stallStore struct {
	service   time.Duration
	stallFrom int64
	stall     time.Duration

	mu      sync.Mutex
	release chan struct{} // closed when the stall ends
	stalled atomic.Int64  // puts that waited for the stall to end
}

func (s *stallStore) Put(_ context.Context, k, _ []byte) (uint64, error) {
	i, err := strconv.ParseInt(string(k[len(k)-KeyDigits:]), 10, 64)
	if err != nil {
		return 0, err
	}
	if i >= s.stallFrom {
		s.mu.Lock()
		if s.release == nil {
			s.release = make(chan struct{})
			time.AfterFunc(s.stall, func() { close(s.release) })
		}
		rel := s.release
		s.mu.Unlock()
		select {
		case <-rel:
		default:
			s.stalled.Add(1)
			<-rel
			return uint64(i + 1), nil
		}
	}
	time.Sleep(s.service)
	return uint64(i + 1), nil
}

func (s *stallStore) Get(context.Context, []byte) ([]byte, bool, error) {
	return nil, false, errors.New("no reads")
}

func (s *stallStore) Scan(context.Context, []byte, []byte, int) ([]systems.KeyValue, error) {
	return nil, errors.New("no reads")
}

// opTiming is when one operation of a test run is due, sent and answered,
// as offsets from the run's start, and whether it is late.
type opTiming struct {
	due, sent, done time.Duration
	late            bool
}

// The same store, stalling for 500 ms, under a closed loop and an open
// loop of the same rate (the closed loop's throughput): the closed loop's
// one client waits out the stall in one operation and sends nothing
// meanwhile, so its p99.9 does not show the stall; the open loop keeps
// sending, so every operation due during the stall waits, and its
// latencies from the intended start show it (from the send, only those of
// the few operations the stall holds do). The late operations are exactly
// the ones due while the stall holds every sender.
//
// The runs are in a synctest bubble, whose clock moves only when every
// goroutine of the test waits (for the schedule's timer, the store's
// service time, the stall): each operation is sent exactly when the
// schedule or a freed sender lets it, however busy the machine, and every
// latency is known to the microsecond.
func TestOpenLoopShowsTheStallClosedLoopHides(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			ops       = 999
			service   = 500 * time.Microsecond
			stall     = 500 * time.Millisecond
			stallFrom = 500 // the key index, and operation, the stall begins with
			senders   = 4
		)
		po := DefaultPutOptions()
		po.Clients, po.Ops, po.ValueBytes, po.Order = 1, ops, 16, "sequential"

		// The closed loop: 998 operations of 0.5 ms and the stalled one of
		// 500 ms, one after another: 999 in 999 ms, 1000 a second.
		var want []opTiming
		for i, at := 0, time.Duration(0); i < ops; i++ {
			took := service
			if i == stallFrom {
				took = stall
			}
			want = append(want, opTiming{due: at, sent: at, done: at + took})
			at += took
		}
		closedStore := &stallStore{service: service, stallFrom: stallFrom, stall: stall}
		closed := runPutTimed(t, closedStore, po, want)
		if closed.Load.Loop != LoopClosed || closed.OpsPerSec != 1000 || closedStore.stalled.Load() != 1 {
			t.Fatalf("closed loop: load %+v, %v ops/s, %d puts held by the stall; want 1000 ops/s, 1", closed.Load, closed.OpsPerSec, closedStore.stalled.Load())
		}
		if closed.P999Us != service.Microseconds() || closed.MaxUs != histogramUs(stall) || closed.Intended != closed.Latency {
			t.Fatalf("closed loop: p99.9 %d us, max %d, from the intended start %+v; want %d (the stall hidden: coordinated omission), %d, the same as from the send",
				closed.P999Us, closed.MaxUs, closed.Intended, service.Microseconds(), histogramUs(stall))
		}

		// The open loop at that rate, an operation due every 1 ms. The
		// stall begins with operation 500, due at 500 ms, and ends at 1 s:
		// operations 500..503 take the four senders and are held; 504..998,
		// all due before it ends, find no sender free, and are late: sent
		// four at a time from 1 s on, as the senders free, every 0.5 ms.
		rate := closed.OpsPerSec
		period := time.Duration(float64(time.Second) / rate)
		stallEnd := stallFrom*period + stall
		want = want[:0]
		for i := range ops {
			due := time.Duration(i) * period
			switch {
			case i < stallFrom:
				want = append(want, opTiming{due: due, sent: due, done: due + service})
			case i < stallFrom+senders:
				want = append(want, opTiming{due: due, sent: due, done: stallEnd})
			default:
				sent := stallEnd + time.Duration((i-stallFrom-senders)/senders)*service
				want = append(want, opTiming{due: due, sent: sent, done: sent + service, late: true})
			}
		}
		po.Clients, po.Rate, po.Arrivals = senders, rate, ArrivalsConstant
		openStore := &stallStore{service: service, stallFrom: stallFrom, stall: stall}
		open := runPutTimed(t, openStore, po, want)
		if open.Load.Loop != LoopOpen || open.Load.RateOpsPerSec != rate || open.Load.MaxInFlight != senders || openStore.stalled.Load() != senders {
			t.Fatalf("open loop: load %+v, %d puts held by the stall; want %v ops/s, %d senders, all held", open.Load, openStore.stalled.Load(), rate, senders)
		}
		if open.LateOps != ops-stallFrom-senders {
			t.Fatalf("open loop: %d late, want the %d due while the stall held every sender", open.LateOps, ops-stallFrom-senders)
		}
		// p99 is the 989th of 999 latencies, the 11th longest: from the
		// send, the service time (only the 4 held waited); from the
		// intended start, that of operation 510, due at 510 ms and sent
		// in the second four after the stall: answered at 1 s + 1 ms.
		if p99 := histogramUs(stallEnd + 2*service - 510*period); open.P99Us != service.Microseconds() || open.Intended.P99Us != p99 {
			t.Fatalf("open loop: p99 %d us from the send, %d from the intended start; want %d, %d",
				open.P99Us, open.Intended.P99Us, service.Microseconds(), p99)
		}
	})
}

// histogramUs is the value the run's latency histograms report for d:
// the highest of its bucket, in microseconds.
func histogramUs(d time.Duration) int64 {
	h := newLatencyHistogram()
	_ = h.RecordValue(d.Microseconds())
	return h.Max()
}

// runPutTimed runs RunPut(po) on st, in the test's synctest bubble, and
// checks that its operations were due, sent and answered when want says,
// to the microsecond (want's order is the operations'): its raw CSV has
// their rows, and its summary their counts, latencies and series. It
// returns the summary.
func runPutTimed(t *testing.T, st Store, po PutOptions, want []opTiming) Summary {
	t.Helper()
	var raw bytes.Buffer
	po.Raw = &raw
	// The run starts now: the bubble's clock stands still until every
	// goroutine of the test waits, and nothing waits before the run's
	// first operation.
	start := time.Now()
	s, err := RunPut(context.Background(), st, po)
	if err != nil {
		t.Fatal(err)
	}
	exp := NewRecorder(start, true, nil).WithIntervals(NewIntervals(start))
	var end time.Duration
	for _, w := range want {
		exp.RecordTiming("put", Timing{Intended: start.Add(w.due), Sent: start.Add(w.sent), Done: start.Add(w.done), Late: w.late},
			OK, int64(po.ValueBytes), 1, nil)
		end = max(end, w.done)
	}
	var wantRaw bytes.Buffer
	if err := WriteRawCSV(&wantRaw, []*Recorder{exp}); err != nil {
		t.Fatal(err)
	}
	// Operations sent at once are in no particular order: compare them
	// in the order they were due.
	byDue := func(a, b []string) int { return strings.Compare(a[5], b[5]) } // same-length numbers
	gotRows, wantRows := readCSV(t, raw.Bytes()), readCSV(t, wantRaw.Bytes())
	slices.SortFunc(gotRows[1:], byDue)
	slices.SortFunc(wantRows[1:], byDue)
	if len(gotRows) != len(wantRows) {
		t.Fatalf("raw CSV: %d rows, want %d", len(gotRows), len(wantRows))
	}
	for i := range gotRows {
		if !slices.Equal(gotRows[i], wantRows[i]) {
			t.Fatalf("raw CSV row %d (%s): %q, want %q", i, strings.Join(gotRows[0], ","), gotRows[i], wantRows[i])
		}
	}
	ws := Summarize("put", []*Recorder{exp}, end)
	if s.MeasuredFromUnixUs != start.UnixMicro() || s.Ops != ws.Ops || s.LateOps != ws.LateOps || s.Bytes != ws.Bytes ||
		s.DurationSec != ws.DurationSec || s.OpsPerSec != ws.OpsPerSec {
		t.Fatalf("summary: from %d us, %d ops, %d late, %d bytes in %v s, %v ops/s; want from %d, %d, %d, %d in %v s, %v ops/s",
			s.MeasuredFromUnixUs, s.Ops, s.LateOps, s.Bytes, s.DurationSec, s.OpsPerSec,
			start.UnixMicro(), ws.Ops, ws.LateOps, ws.Bytes, ws.DurationSec, ws.OpsPerSec)
	}
	if s.Latency != ws.Latency || s.Intended != ws.Intended {
		t.Fatalf("summary: latency %+v from the send, %+v from the intended start; want %+v, %+v", s.Latency, s.Intended, ws.Latency, ws.Intended)
	}
	if !slices.Equal(s.Series, ws.Series) {
		t.Fatalf("series:\n%+v\nwant\n%+v", s.Series, ws.Series)
	}
	return s
}

// -rate takes operations a second, or a fraction of a closed-loop run's
// throughput from its summary (file or -out directory).
func TestParseRate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	closed := write("summary.json", `{"ops_per_sec": 2000, "load": {"loop": "closed"}}`)
	old := write("old.json", `{"ops_per_sec": 1000}`)
	open := write("open.json", `{"ops_per_sec": 1000, "load": {"loop": "open"}}`)
	stopped := write("stopped.json", `{"ops_per_sec": 1000, "stopped": "stalled"}`)
	for _, c := range []struct {
		spec string
		want float64
		err  string
	}{
		{"", 0, ""}, {"5000", 5000, ""}, {"2.5e3", 2500, ""},
		{"0.7x:" + closed, 1400, ""}, {"0.5x:" + dir, 1000, ""}, {"1x:" + old, 1000, ""},
		{"0", 0, "want operations a second"}, {"-3", 0, "want operations a second"}, {"fast", 0, "want operations a second"},
		{"0.7x", 0, "a fraction needs"}, {"0x:" + closed, 0, "not a number > 0"},
		{"0.7x:" + open, 0, "open-loop run"}, {"0.7x:" + stopped, 0, "was stalled"},
		{"0.7x:" + filepath.Join(dir, "nope.json"), 0, "no such file"},
	} {
		got, source, err := ParseRate(c.spec)
		var ue *cmdline.UsageError
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("ParseRate(%q) = %v, %v; want %v", c.spec, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !errors.As(err, &ue)):
			t.Errorf("ParseRate(%q): error %v, want a usage error with %q", c.spec, err, c.err)
		case strings.Contains(c.spec, "x:") && c.err == "" && !strings.Contains(source, "ops/s of "):
			t.Errorf("ParseRate(%q): source %q", c.spec, source)
		}
	}
}

// A Poisson schedule is the same for the same seed and another for
// another; its gaps average 1/rate. A constant one is evenly spaced from 0.
func TestScheduleIsSeeded(t *testing.T) {
	const n, rate = 20000, 2500.0
	draw := func(kind string, seed int64) []time.Duration {
		s := NewSchedule(rate, kind, seed)
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = s.Next()
		}
		return out
	}
	a, b, c := draw(ArrivalsPoisson, 7), draw(ArrivalsPoisson, 7), draw(ArrivalsPoisson, 8)
	same, differ := true, false
	for i := range a {
		same = same && a[i] == b[i]
		differ = differ || a[i] != c[i]
		if i > 0 && a[i] < a[i-1] {
			t.Fatalf("arrival %d at %v before arrival %d at %v", i, a[i], i-1, a[i-1])
		}
	}
	if !same || !differ {
		t.Fatalf("seed 7 twice the same: %v; seeds 7 and 8 differ: %v", same, differ)
	}
	if mean := a[n-1].Seconds() / n; math.Abs(mean*rate-1) > 0.03 {
		t.Fatalf("mean gap %v s, want 1/%v", mean, rate)
	}
	for i, d := range draw(ArrivalsConstant, 7)[:5] {
		if want := time.Duration(i) * 400 * time.Microsecond; d != want {
			t.Fatalf("constant arrival %d at %v, want %v", i, d, want)
		}
	}
}

// The operations due in the warm-up are done but left out of every
// result: the summary, the series, the raw CSV.
func TestWarmupIsLeftOut(t *testing.T) {
	st := newMemStore()
	var raw bytes.Buffer
	po := DefaultPutOptions()
	// 600 operations due every 0.5 ms: the 200 due in the first 100 ms
	// are the warm-up.
	po.Clients, po.Ops, po.ValueBytes, po.Raw = 8, 600, 10, &raw
	po.Rate, po.Warmup = 2000, 100*time.Millisecond
	s, err := RunPut(context.Background(), st, po)
	if err != nil {
		t.Fatal(err)
	}
	if st.puts != 600 || s.Ops != 400 || s.Load.WarmupSec != 0.1 {
		t.Fatalf("%d puts, %d measured, warm-up %v s; want 600, 400, 0.1", st.puts, s.Ops, s.Load.WarmupSec)
	}
	rows := readCSV(t, raw.Bytes())
	if len(rows) != 401 {
		t.Fatalf("raw CSV: %d rows, want a header and 400", len(rows))
	}
	for _, r := range rows[1:] {
		if due, _ := strconv.ParseInt(r[5], 10, 64); due < s.MeasuredFromUnixUs {
			t.Fatalf("raw CSV holds an operation due at %d us, before the measurement's start at %d", due, s.MeasuredFromUnixUs)
		}
	}
	var ops int64
	for _, p := range s.Series {
		ops += p.Ops
	}
	if ops != 400 {
		t.Fatalf("series: %d operations, want 400", ops)
	}

	// A closed loop leaves out the operations that start in its warm-up.
	st = newMemStore()
	raw.Reset()
	po.Rate, po.Ops, po.MaxDuration, po.Warmup = 0, 1_000_000, 300*time.Millisecond, 100*time.Millisecond
	s, err = RunPut(context.Background(), st, po)
	if err != nil {
		t.Fatal(err)
	}
	rows = readCSV(t, raw.Bytes())
	if s.Ops == 0 || int64(st.puts) <= s.Ops || int64(len(rows)) != 1+s.Ops {
		t.Fatalf("closed loop: %d puts, %d measured, %d raw rows; want some left out", st.puts, s.Ops, len(rows))
	}
	for _, r := range rows[1:] {
		if start, _ := strconv.ParseInt(r[1], 10, 64); start < s.MeasuredFromUnixUs {
			t.Fatalf("raw CSV holds an operation started at %d us, before the measurement's start at %d", start, s.MeasuredFromUnixUs)
		}
	}
}

func readCSV(t *testing.T, b []byte) [][]string {
	t.Helper()
	rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// The per-second CSV has units in its column names; the interval log
// reads back (hdrhistogram-go's HistogramLogReader) into the same counts
// and percentiles, its lines have the shape HdrHistogram's Java reader
// parses, and, where Java's HdrHistogram is installed, its
// HistogramLogProcessor reads it.
func TestIntervalsCSVAndHistogramLog(t *testing.T) {
	po := DefaultPutOptions()
	po.Clients, po.Ops, po.ValueBytes, po.Order = 16, 2400, 16, "sequential"
	po.Rate, po.Arrivals = 1000, ArrivalsPoisson
	st := &stallStore{service: 200 * time.Microsecond, stallFrom: 1500, stall: 100 * time.Millisecond}
	s, err := RunPut(context.Background(), st, po)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	outs := Outputs{Dir: dir}
	if err := outs.Save(s, s, "bench put"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "timeseries.csv"))
	if err != nil {
		t.Fatal(err)
	}
	rows := readCSV(t, b)
	unit := regexp.MustCompile(`^(second|ops|mb|errors|ambiguous|late_ops|\w+_us)$`)
	for _, c := range rows[0] {
		if !unit.MatchString(c) {
			t.Errorf("timeseries.csv column %q names no unit", c)
		}
	}
	col := map[string]int{}
	for i, c := range rows[0] {
		col[c] = i
	}
	if len(rows) != 1+len(s.Series) || len(rows) < 3 {
		t.Fatalf("timeseries.csv: %d rows for %d seconds", len(rows), len(s.Series))
	}

	log, err := os.ReadFile(filepath.Join(dir, "latency.hlog"))
	if err != nil {
		t.Fatal(err)
	}
	r := hdrhistogram.NewHistogramLogReader(bytes.NewReader(log))
	all := newLatencyHistogram()
	var n int
	for {
		h, err := r.NextIntervalHistogram()
		if err != nil {
			t.Fatal(err)
		}
		if h == nil {
			break
		}
		sec, row := n/2, rows[1+n/2]
		wantStart := s.MeasuredFromUnixUs/1000 + int64(sec)*1000
		if d, l := h.StartTimeMs()-wantStart, h.EndTimeMs()-h.StartTimeMs(); d < -1 || d > 1 || l < 999 || l > 1001 {
			t.Fatalf("interval %d: %d..%d ms, want second %d from %d", n, h.StartTimeMs(), h.EndTimeMs(), sec, wantStart)
		}
		tag, p999 := "", row[col["intended_p999_us"]]
		if n%2 == 1 {
			tag, p999 = "send", row[col["p999_us"]]
		} else {
			all.Merge(h)
		}
		if h.Tag() != tag || strconv.FormatInt(h.TotalCount(), 10) != row[col["ops"]] ||
			(h.TotalCount() > 0 && strconv.FormatInt(h.ValueAtQuantile(99.9), 10) != p999) {
			t.Fatalf("interval %d (tag %q): %d operations, p99.9 %d; timeseries.csv second %d: %v", n, h.Tag(), h.TotalCount(), h.ValueAtQuantile(99.9), sec, row)
		}
		n++
	}
	if n != 2*len(s.Series) || all.TotalCount() != s.Ops || all.ValueAtQuantile(99.9) != s.Intended.P999Us || all.Max() != s.Intended.MaxUs {
		t.Fatalf("%d intervals, %d operations, p99.9 %d, max %d; want %d, %d, %d, %d", n, all.TotalCount(), all.ValueAtQuantile(99.9), all.Max(),
			2*len(s.Series), s.Ops, s.Intended.P999Us, s.Intended.MaxUs)
	}
	checkJavaLogShape(t, string(log))
	javaHistogramLogProcessor(t, filepath.Join(dir, "latency.hlog"), s)
}

// checkJavaLogShape checks log against what HdrHistogram's Java
// HistogramLogReader (2.1) accepts: comments, a #[StartTime: and a
// #[BaseTime: of seconds, the legend, and interval lines of an optional
// Tag=, three numbers and a base64 compressed histogram (cookie
// 0x1c849314: V2, compressed), fields split at [ ,\r\n].
func checkJavaLogShape(t *testing.T, log string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(log, "\n"), "\n")
	num := regexp.MustCompile(`^\d+\.\d{3}$`)
	var start, base bool
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "#[StartTime: "):
			start = num.MatchString(strings.Fields(l)[1])
		case strings.HasPrefix(l, "#[BaseTime: "):
			base = num.MatchString(strings.Fields(l)[1])
		case strings.HasPrefix(l, "#"), strings.HasPrefix(l, `"StartTimestamp"`):
		default:
			f := regexp.MustCompile(`[ ,\r]`).Split(strings.TrimPrefix(l, "Tag=send,"), -1)
			if len(f) != 4 || !num.MatchString(f[0]) || !num.MatchString(f[1]) || !num.MatchString(f[2]) {
				t.Fatalf("line %d: %q is no interval line", i+1, l)
			}
			p, err := base64.StdEncoding.DecodeString(f[3])
			if err != nil || len(p) < 8 || binary.BigEndian.Uint32(p) != 0x1c849314 {
				t.Fatalf("line %d: payload is not a compressed V2 histogram: %v", i+1, err)
			}
		}
	}
	if !start || !base {
		t.Fatalf("no #[StartTime: or #[BaseTime: in seconds:\n%s", strings.Join(lines[:5], "\n"))
	}
}

// javaHistogramLogProcessor runs HdrHistogram's HistogramLogProcessor
// (Java; Debian's libhdrhistogram-java) on the log, for the untagged and
// the send histograms, and checks the total counts and maxima it reports.
func javaHistogramLogProcessor(t *testing.T, log string, s Summary) {
	t.Helper()
	const jar = "/usr/share/java/hdrhistogram.jar"
	java, err := exec.LookPath("java")
	if _, serr := os.Stat(jar); err != nil || serr != nil {
		t.Log("java or " + jar + " missing (apt-get install libhdrhistogram-java): the log is not read with HistogramLogProcessor")
		return
	}
	for _, c := range []struct {
		tag string
		max int64
	}{{"", s.Intended.MaxUs}, {"send", s.MaxUs}} {
		out := filepath.Join(t.TempDir(), "out")
		args := []string{"-cp", jar, "org.HdrHistogram.HistogramLogProcessor", "-i", log, "-o", out, "-outputValueUnitRatio", "1"}
		if c.tag != "" {
			args = append(args, "-tag", c.tag)
		}
		if b, err := exec.Command(java, args...).CombinedOutput(); err != nil {
			t.Fatalf("HistogramLogProcessor %v: %v\n%s", args, err, b)
		}
		b, err := os.ReadFile(out + ".hgrm")
		if err != nil {
			t.Fatal(err)
		}
		total := regexp.MustCompile(`Total count\s*=\s*(\d+)\]`).FindStringSubmatch(string(b))
		mx := regexp.MustCompile(`#\[Max\s*=\s*([\d.]+),`).FindStringSubmatch(string(b))
		if total == nil || mx == nil || total[1] != strconv.FormatInt(s.Ops, 10) {
			t.Fatalf("HistogramLogProcessor (tag %q): %q, want a total count of %d\n%s", c.tag, total, s.Ops, b)
		}
		if got, _ := strconv.ParseFloat(mx[1], 64); int64(got) != c.max {
			t.Fatalf("HistogramLogProcessor (tag %q): max %s us, want %d", c.tag, mx[1], c.max)
		}
		t.Logf("HistogramLogProcessor (tag %q) read %s operations, max %s us", c.tag, total[1], mx[1])
	}
}
