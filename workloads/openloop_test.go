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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/nezha-harness/nezha/systems"
)

// stallStore is a Store whose Puts take service (a sleep: the store's
// work), except that those of a key index at or above stallFrom that
// arrive before the stall ends are held until it does, and answered then:
// the stall begins with the first of them and lasts stall (a real one: a
// garbage collection that holds every write).
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

// The same store, stalling for 500 ms, under a closed loop and an open
// loop of the same rate (the closed loop's throughput): the closed loop's
// one client waits out the stall in one operation and sends nothing
// meanwhile, so its p99.9 does not show the stall; the open loop keeps
// sending, so every operation due during the stall waits, and its p99.9
// from the intended start shows it. The late operations are exactly the
// ones the schedule makes due while the senders are all held by the
// stall.
func TestOpenLoopShowsTheStallClosedLoopHides(t *testing.T) {
	const (
		ops     = 1500
		service = time.Millisecond
		stall   = 500 * time.Millisecond
		ms      = int64(time.Millisecond / time.Microsecond)
	)
	po := DefaultPutOptions()
	po.Clients, po.Ops, po.ValueBytes, po.Order, po.StallTimeout = 1, ops, 16, "sequential", 0
	closedStore := &stallStore{service: service, stallFrom: 1000, stall: stall}
	closed, err := RunPut(context.Background(), closedStore, po)
	if err != nil {
		t.Fatal(err)
	}
	if closed.Ops != ops || closedStore.stalled.Load() != 1 || closed.MaxUs < stall.Microseconds() {
		t.Fatalf("closed loop: %d ops, %d stalled, max %d us; want %d, 1 (its one client), >= %d", closed.Ops, closedStore.stalled.Load(), closed.MaxUs, ops, stall.Microseconds())
	}
	if closed.Load.Loop != LoopClosed || closed.LateOps != 0 || closed.Intended.P999Us != closed.P999Us {
		t.Fatalf("closed loop: load %+v, %d late, intended p99.9 %d != %d", closed.Load, closed.LateOps, closed.Intended.P999Us, closed.P999Us)
	}
	if closed.P999Us >= stall.Microseconds()/2 {
		t.Fatalf("closed loop: p99.9 %d us shows the stall; want it hidden (coordinated omission)", closed.P999Us)
	}

	// The open loop at the closed loop's rate. The stall starts with the
	// operation due window operations before the end, all due less than
	// 0.5 s after it: before the stall ends (timers never fire early).
	// The first maxInFlight of them are sent and held by the stall; the
	// rest wait for a sender: late, all of them, and no other, as long as
	// the generator keeps its schedule. A machine that freezes the test
	// for a tenth of a second can make operations late too (rightly);
	// such a run is tried again, up to three times.
	rate := closed.OpsPerSec
	window := int64(rate/2) - 1
	maxInFlight := int64(rate / 4)
	if maxInFlight < 1 {
		t.Fatalf("closed loop at %.1f ops/s: too slow a machine for this test", rate)
	}
	var (
		open      Summary
		openStore *stallStore
		raw       bytes.Buffer
		disturbed string
	)
	for try := 1; try <= 3; try++ {
		openStore = &stallStore{service: service, stallFrom: ops - window, stall: stall}
		raw.Reset()
		po.Clients, po.Rate, po.Arrivals, po.Raw = int(maxInFlight), rate, ArrivalsConstant, &raw
		if open, err = RunPut(context.Background(), openStore, po); err != nil {
			t.Fatal(err)
		}
		if disturbed = scheduleKept(t, raw.Bytes(), rate, ops-window); disturbed == "" {
			break
		}
		t.Logf("open loop, try %d: %s", try, disturbed)
	}
	if disturbed != "" {
		t.Fatalf("the machine kept the test from its schedule in three tries")
	}
	t.Logf("closed loop: %.1f ops/s, p99.9 %d us; open loop at it: p99.9 %d us from the intended start, %d from the send, %d late",
		rate, closed.P999Us, open.Intended.P999Us, open.P999Us, open.LateOps)
	if open.Ops != ops || open.Load.Loop != LoopOpen || open.Load.RateOpsPerSec != rate || open.Load.MaxInFlight != int(maxInFlight) {
		t.Fatalf("open loop: %d ops, load %+v", open.Ops, open.Load)
	}
	if got := openStore.stalled.Load(); got != maxInFlight {
		t.Fatalf("open loop: %d puts held by the stall, want the %d senders", got, maxInFlight)
	}
	if want := window - maxInFlight; open.LateOps != want {
		t.Fatalf("open loop: %d late operations, want %d (%d due during the stall, %d senders)", open.LateOps, want, window, maxInFlight)
	}
	var late int64
	for _, p := range open.Series {
		late += p.LateOps
	}
	if late != open.LateOps {
		t.Fatalf("series: %d late, summary %d", late, open.LateOps)
	}
	if open.Intended.P999Us < 450*ms || open.Intended.MaxUs < stall.Microseconds() {
		t.Fatalf("open loop: p99.9 %d us, max %d from the intended start: the %v stall does not show", open.Intended.P999Us, open.Intended.MaxUs, stall)
	}
	// Each late operation k waited at least from when it was due to
	// when the stall ended (>= 0.5 s after operation ops-window was
	// due): in its latency from the intended start, not from the send.
	var waitedUs float64
	for k := window - maxInFlight; k < window; k++ {
		waitedUs += (stall.Seconds() - float64(k)/rate) * 1e6
	}
	if gap := (open.Intended.AvgUs - open.AvgUs) * ops; gap < 0.9*waitedUs {
		t.Fatalf("open loop: the latencies from the intended start add up to %.0f us more than from the send; the late operations waited %.0f", gap, waitedUs)
	}
}

// scheduleKept checks, in the raw CSV of an open loop at rate whose stall
// starts with operation stallFrom, that the generator kept its schedule:
// every operation not late was sent within 100 ms of when it was due, and,
// before the stall, answered within 100 ms (then fewer than rate/4, the
// test's senders, are ever outstanding before the stall, and the first
// rate/4 due in it are sent before it ends). Otherwise it describes what
// was not (the test machine froze).
func scheduleKept(t *testing.T, raw []byte, rate float64, stallFrom int64) string {
	const limitUs = 100_000
	rows := readCSV(t, raw)[1:]
	var first int64
	for _, r := range rows {
		if due, _ := strconv.ParseInt(r[5], 10, 64); first == 0 || due < first {
			first = due
		}
	}
	var slow []string
	for _, r := range rows {
		due, _ := strconv.ParseInt(r[5], 10, 64)
		sent, _ := strconv.ParseInt(r[1], 10, 64)
		lat, _ := strconv.ParseInt(r[2], 10, 64)
		seq := int64(math.Round(float64(due-first) * rate / 1e6))
		if r[7] != "true" && (sent-due > limitUs || seq < stallFrom && lat > limitUs) {
			slow = append(slow, strconv.FormatInt(seq, 10)+" (sent "+strconv.FormatInt((sent-due)/1000, 10)+
				" ms after due, answered in "+strconv.FormatInt(lat/1000, 10)+" ms)")
		}
	}
	if len(slow) == 0 {
		return ""
	}
	return "the generator fell behind its schedule: operations " + strings.Join(slow[:min(len(slow), 5)], ", ") + "..."
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
		var ue *systems.UsageError
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
