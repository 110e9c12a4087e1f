package workloads

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/nezha-harness/nezha/client"
)

// Outcome is how one operation ended.
type Outcome uint8

const (
	// OK: the operation succeeded.
	OK Outcome = iota
	// Miss: the operation succeeded but found less than asked: a GET of a
	// key that does not exist, a SCAN that returned fewer keys than its
	// limit, a YCSB UPDATE of a record that does not exist (it writes
	// nothing). Counted in ops and latency, and in misses.
	Miss
	// Failed: the operation returned an error (counted in errors).
	Failed
	// Ambiguous: a write whose outcome is unknown (client.ErrAmbiguous);
	// counted in ambiguous, not in errors.
	Ambiguous
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Miss:
		return "miss"
	case Failed:
		return "error"
	case Ambiguous:
		return "ambiguous"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Classify maps a client error to an Outcome (nil is OK).
func Classify(err error) Outcome {
	switch {
	case err == nil:
		return OK
	case errors.Is(err, client.ErrAmbiguous):
		return Ambiguous
	}
	return Failed
}

// latency histogram range: 1 us .. 1 hour, 3 significant digits.
const (
	histMinUs = 1
	histMaxUs = int64(time.Hour / time.Microsecond)
	histSig   = 3
	// maxErrorSamples is how many distinct error messages a summary keeps.
	maxErrorSamples = 5
)

// Second is one point of the per-second series: what completed in
// [Second, Second+1) seconds after the measurement started (the run's
// start, or the end of its warm-up). The latencies are of the completed
// operations (OK and Miss), in microseconds, from the intended start
// (Intended...; a closed loop's operations are due when sent) and from the
// actual send; they are set for the series of a whole run (not for the
// per-operation rows of ycsb).
type Second struct {
	Second    int   `json:"second"`
	Ops       int64 `json:"ops"`
	Bytes     int64 `json:"bytes"`
	Errors    int64 `json:"errors"`
	Ambiguous int64 `json:"ambiguous"`
	// LateOps counts the late operations (Summary.LateOps) that ended in
	// this second.
	LateOps        int64 `json:"late_ops"`
	IntendedP50Us  int64 `json:"intended_p50_us"`
	IntendedP99Us  int64 `json:"intended_p99_us"`
	IntendedP999Us int64 `json:"intended_p999_us"`
	IntendedMaxUs  int64 `json:"intended_max_us"`
	P50Us          int64 `json:"p50_us"`
	P99Us          int64 `json:"p99_us"`
	P999Us         int64 `json:"p999_us"`
	MaxUs          int64 `json:"max_us"`
}

// RawOp is one operation of the raw per-operation record.
type RawOp struct {
	Op      string
	Start   time.Time
	Latency time.Duration
	Outcome Outcome
	// Intended is when the operation was due (open loop; a closed loop's
	// is Start); Late as in Timing.
	Intended time.Time
	Late     bool
}

// Timing is when one operation was due, sent and done.
type Timing struct {
	// Intended is when the open loop's schedule meant it to be sent; a
	// closed-loop operation is due when it is sent.
	Intended time.Time
	Sent     time.Time
	Done     time.Time
	// Late: it waited for a free sender (see OpenLoop).
	Late bool
}

// Recorder accumulates the operations of one goroutine (not safe for
// concurrent use); Summarize merges several.
type Recorder struct {
	// start is when the measurement starts: operations due before it are
	// the warm-up, not recorded.
	start time.Time
	// hist holds the latencies from the send; intended those from the
	// intended start, once one differed.
	hist      *hdrhistogram.Histogram
	intended  *hdrhistogram.Histogram
	ops       int64
	misses    int64
	errors    int64
	ambiguous int64
	late      int64
	bytes     int64
	items     int64
	series    []Second
	keepRaw   bool
	raw       []RawOp
	samples   []string
	live      *Live
	intervals *Intervals
	first     time.Time
	last      time.Time
}

// NewRecorder returns a Recorder of the operations due from start on
// (earlier ones are a warm-up: only live counts them); its per-second
// series counts from start. keepRaw keeps every operation for the raw
// CSV. live, if not nil, counts every operation as it finishes (progress
// lines, the stall watchdog).
func NewRecorder(start time.Time, keepRaw bool, live *Live) *Recorder {
	return &Recorder{start: start, hist: newLatencyHistogram(), keepRaw: keepRaw, live: live}
}

// WithIntervals makes r also record into iv (shared by the recorders of a
// run, whose start it must have) and returns r.
func (r *Recorder) WithIntervals(iv *Intervals) *Recorder {
	r.intervals = iv
	return r
}

// Record adds one operation that began at begin and took lat (a closed
// loop's: due when sent); see RecordTiming.
func (r *Recorder) Record(op string, begin time.Time, lat time.Duration, out Outcome, bytes, items int64, err error) {
	r.RecordTiming(op, Timing{Intended: begin, Sent: begin, Done: begin.Add(lat)}, out, bytes, items, err)
}

func latencyUs(d time.Duration) int64 {
	return min(max(int64(d/time.Microsecond), histMinUs), histMaxUs)
}

// RecordTiming adds one operation of timing t. bytes is the payload it
// moved (value bytes written or read, keys and values of a scan) and items
// the keys it touched; both count only if the operation completed (OK or
// Miss). err, if any, is kept as a sample. An operation due before the
// recorder's start is only counted live.
func (r *Recorder) RecordTiming(op string, t Timing, out Outcome, bytes, items int64, err error) {
	r.live.Record(out, err)
	if t.Intended.Before(r.start) {
		return
	}
	if r.first.IsZero() || t.Intended.Before(r.first) {
		r.first = t.Intended
	}
	if t.Done.After(r.last) {
		r.last = t.Done
	}
	sec := max(int(t.Done.Sub(r.start)/time.Second), 0)
	for len(r.series) <= sec {
		r.series = append(r.series, Second{Second: len(r.series)})
	}
	s := &r.series[sec]
	if t.Late {
		r.late++
		s.LateOps++
	}
	switch out {
	case OK, Miss:
		sendUs, intendedUs := latencyUs(t.Done.Sub(t.Sent)), latencyUs(t.Done.Sub(t.Intended))
		if r.intended == nil && intendedUs != sendUs {
			r.intended = hdrhistogram.Import(r.hist.Export())
		}
		_ = r.hist.RecordValue(sendUs) // in range by construction
		if r.intended != nil {
			_ = r.intended.RecordValue(intendedUs)
		}
		if r.intervals != nil {
			r.intervals.record(t.Done, intendedUs, sendUs)
		}
		r.ops++
		r.bytes += bytes
		r.items += items
		s.Ops++
		s.Bytes += bytes
		if out == Miss {
			r.misses++
		}
	case Ambiguous:
		r.ambiguous++
		s.Ambiguous++
	default:
		r.errors++
		s.Errors++
	}
	if err != nil && len(r.samples) < maxErrorSamples && !slices.Contains(r.samples, err.Error()) {
		r.samples = append(r.samples, err.Error())
	}
	if r.keepRaw {
		r.raw = append(r.raw, RawOp{Op: op, Start: t.Sent, Latency: t.Done.Sub(t.Sent), Outcome: out, Intended: t.Intended, Late: t.Late})
	}
}

// Summary is the result of one workload run (or of one operation type of a
// YCSB run). Latencies are of completed operations (OK and Miss) in
// microseconds; failed and ambiguous operations are counted, not timed.
// MB is 10^6 bytes. Operations of the warm-up (Load.WarmupSec) are left
// out of everything.
type Summary struct {
	Op string `json:"op"`
	// Ops completed (OK or Miss).
	Ops       int64 `json:"ops"`
	Misses    int64 `json:"misses"`
	Errors    int64 `json:"errors"`
	Ambiguous int64 `json:"ambiguous"`
	// LateOps (open loop) are the operations that were not sent at their
	// intended start because every sender (-cnums, threadcount) was busy:
	// the ones that found them all busy, and every one whose intended
	// start passed while the generator waited for a sender. They were
	// sent as soon as one was free, never dropped, and counted in the
	// other fields by their outcome. 0 in a closed loop.
	LateOps int64 `json:"late_ops"`
	// Bytes of payload moved by completed operations; Items are the keys
	// they touched (one per PUT and GET, the keys returned by a SCAN).
	Bytes int64 `json:"bytes"`
	Items int64 `json:"items"`
	// DurationSec is the wall time of the measurement: from the run's
	// start (after the warm-up) to the end of its last operation.
	DurationSec float64 `json:"duration_sec"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	MBPerSec    float64 `json:"mb_per_sec"`
	// Latency is from the actual send of each operation to its answer
	// (the service time).
	Latency
	// Intended is the latency from each operation's intended start to its
	// answer (the response time a user of an open system sees, stalls
	// included); the same as Latency in a closed loop, whose operations
	// are due when sent.
	Intended Latency `json:"intended"`
	// ErrorSamples are up to five distinct error messages.
	ErrorSamples []string `json:"error_samples,omitempty"`
	// Stopped says why the run ended before all its operations were done:
	// StoppedInterrupted or StoppedStalled; empty when it ran to its end
	// (or to its -duration). The counts and latencies are of what was done.
	Stopped string `json:"stopped,omitempty"`
	// Load is how the operations were offered.
	Load Load `json:"load"`
	// MeasuredFromUnixUs is when the measurement started (the run's start
	// plus its warm-up): second 0 of Series and of the interval log.
	MeasuredFromUnixUs int64 `json:"measured_from_unix_us"`
	// Series is the per-second throughput and latency.
	Series []Second `json:"series"`

	// intervals are the per-second histograms behind Series.
	intervals *Intervals
}

// Latency are latency statistics of completed operations, in
// microseconds.
type Latency struct {
	AvgUs  float64 `json:"avg_us"`
	MinUs  int64   `json:"min_us"`
	P50Us  int64   `json:"p50_us"`
	P95Us  int64   `json:"p95_us"`
	P99Us  int64   `json:"p99_us"`
	P999Us int64   `json:"p999_us"`
	MaxUs  int64   `json:"max_us"`
}

func latencyOf(h *hdrhistogram.Histogram) Latency {
	if h.TotalCount() == 0 {
		return Latency{}
	}
	return Latency{AvgUs: h.Mean(), MinUs: h.Min(), P50Us: h.ValueAtQuantile(50), P95Us: h.ValueAtQuantile(95),
		P99Us: h.ValueAtQuantile(99), P999Us: h.ValueAtQuantile(99.9), MaxUs: h.Max()}
}

// Load is how a run offered its operations (Summary.Load).
type Load struct {
	// Loop is LoopClosed or LoopOpen.
	Loop string `json:"loop"`
	// RateOpsPerSec is the rate an open loop offered; RateSource says
	// where it came from when it was a fraction of a measured peak.
	RateOpsPerSec float64 `json:"rate_ops_per_sec,omitempty"`
	RateSource    string  `json:"rate_source,omitempty"`
	// Arrivals is the open loop's arrival process (ArrivalsConstant or
	// ArrivalsPoisson).
	Arrivals string `json:"arrivals,omitempty"`
	// Seed draws the open loop's Poisson arrivals (bench: and every other
	// random choice); absent where nothing is seeded.
	Seed *int64 `json:"seed,omitempty"`
	// MaxInFlight is the most operations outstanding at once: a closed
	// loop's clients, an open loop's senders.
	MaxInFlight int `json:"max_in_flight"`
	// WarmupSec is how long the run went on before the measurement
	// started.
	WarmupSec float64 `json:"warmup_sec"`
}

// Why a run stopped early (Summary.Stopped).
const (
	// StoppedInterrupted: the run's context was cancelled (SIGINT,
	// SIGTERM, a closed output); the clients finished the operations in
	// flight.
	StoppedInterrupted = "interrupted"
	// StoppedStalled: no operation got an answer for the stall timeout
	// (*StallError); the operations in flight were cancelled.
	StoppedStalled = "stalled"
)

// Summarize merges recorders into a Summary named op. duration is the
// measurement's wall time; if zero, it is taken from the recorders (first
// start to last end). If the recorders share Intervals, the series gets
// its latencies and the summary can write the interval log.
func Summarize(op string, recs []*Recorder, duration time.Duration) Summary {
	s := Summary{Op: op}
	h, hi := newLatencyHistogram(), newLatencyHistogram()
	var first, last time.Time
	for _, r := range recs {
		if r == nil {
			continue
		}
		if s.intervals == nil {
			s.intervals = r.intervals
			s.MeasuredFromUnixUs = r.start.UnixMicro()
		}
		h.Merge(r.hist)
		if r.intended != nil {
			hi.Merge(r.intended)
		} else {
			hi.Merge(r.hist)
		}
		s.Ops += r.ops
		s.Misses += r.misses
		s.Errors += r.errors
		s.Ambiguous += r.ambiguous
		s.LateOps += r.late
		s.Bytes += r.bytes
		s.Items += r.items
		for _, m := range r.samples {
			if len(s.ErrorSamples) < maxErrorSamples && !slices.Contains(s.ErrorSamples, m) {
				s.ErrorSamples = append(s.ErrorSamples, m)
			}
		}
		for _, p := range r.series {
			for len(s.Series) <= p.Second {
				s.Series = append(s.Series, Second{Second: len(s.Series)})
			}
			q := &s.Series[p.Second]
			q.Ops += p.Ops
			q.Bytes += p.Bytes
			q.Errors += p.Errors
			q.Ambiguous += p.Ambiguous
			q.LateOps += p.LateOps
		}
		if !r.first.IsZero() && (first.IsZero() || r.first.Before(first)) {
			first = r.first
		}
		if r.last.After(last) {
			last = r.last
		}
	}
	if duration == 0 && !first.IsZero() {
		duration = last.Sub(first)
	}
	s.DurationSec = duration.Seconds()
	if s.DurationSec > 0 {
		s.OpsPerSec = float64(s.Ops) / s.DurationSec
		s.MBPerSec = float64(s.Bytes) / 1e6 / s.DurationSec
	}
	s.Latency, s.Intended = latencyOf(h), latencyOf(hi)
	if s.intervals != nil {
		for i, iv := range s.intervals.finish() {
			if i >= len(s.Series) {
				break
			}
			q := &s.Series[i]
			q.IntendedP50Us, q.IntendedP99Us, q.IntendedP999Us, q.IntendedMaxUs = iv.stats.intended[0], iv.stats.intended[1], iv.stats.intended[2], iv.stats.intended[3]
			q.P50Us, q.P99Us, q.P999Us, q.MaxUs = iv.stats.send[0], iv.stats.send[1], iv.stats.send[2], iv.stats.send[3]
		}
	}
	if s.Series == nil {
		s.Series = []Second{}
	}
	return s
}

// WriteHistogramLog writes the per-second latency histograms of s (one
// interval per row of Series) as an HdrHistogram interval log: untagged
// from the intended start, Tag=send from the actual send, in
// microseconds. It fails if s was not summarized from recorders with
// Intervals.
func (s Summary) WriteHistogramLog(w io.Writer, what string) error {
	if s.intervals == nil {
		return errors.New("no per-second histograms were recorded")
	}
	return s.intervals.writeHistogramLog(w, what, len(s.Series))
}

// WriteRawCSV writes the kept operations of recs, in start order, as CSV
// with the header
// op,start_unix_us,latency_us,ok,outcome,intended_start_unix_us,intended_latency_us,late:
// start and latency from the actual send, the intended ones from when the
// operation was due (a closed loop's: the same), late as in
// Summary.LateOps.
func WriteRawCSV(w io.Writer, recs []*Recorder) error {
	var all []RawOp
	for _, r := range recs {
		if r != nil {
			all = append(all, r.raw...)
		}
	}
	slices.SortStableFunc(all, func(a, b RawOp) int { return a.Start.Compare(b.Start) })
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"op", "start_unix_us", "latency_us", "ok", "outcome", "intended_start_unix_us", "intended_latency_us", "late"})
	for _, o := range all {
		ok := o.Outcome == OK || o.Outcome == Miss
		_ = cw.Write([]string{o.Op, strconv.FormatInt(o.Start.UnixMicro(), 10),
			strconv.FormatInt(int64(o.Latency/time.Microsecond), 10), strconv.FormatBool(ok), o.Outcome.String(),
			strconv.FormatInt(o.Intended.UnixMicro(), 10), strconv.FormatInt(int64(o.Start.Add(o.Latency).Sub(o.Intended)/time.Microsecond), 10),
			strconv.FormatBool(o.Late)})
	}
	cw.Flush()
	return cw.Error()
}

// ReadRawCSV reads what WriteRawCSV wrote (the columns found by their
// names in the header, so a file with more columns reads too), back to
// microseconds.
func ReadRawCSV(r io.Reader) ([]RawOp, error) {
	cr := csv.NewReader(r)
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("raw CSV: %w", err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[h] = i
	}
	need := []string{"op", "start_unix_us", "latency_us", "outcome", "intended_start_unix_us", "late"}
	for _, n := range need {
		if _, ok := col[n]; !ok {
			return nil, fmt.Errorf("raw CSV: no column %s in %v", n, head)
		}
	}
	outcomes := map[string]Outcome{}
	for _, o := range []Outcome{OK, Miss, Failed, Ambiguous} {
		outcomes[o.String()] = o
	}
	var out []RawOp
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("raw CSV: %w", err)
		}
		var v [3]int64
		for i, n := range []string{"start_unix_us", "latency_us", "intended_start_unix_us"} {
			if v[i], err = strconv.ParseInt(rec[col[n]], 10, 64); err != nil {
				return nil, fmt.Errorf("raw CSV line %d: %s: %w", line, n, err)
			}
		}
		o, ok := outcomes[rec[col["outcome"]]]
		late, lerr := strconv.ParseBool(rec[col["late"]])
		if !ok || lerr != nil {
			return nil, fmt.Errorf("raw CSV line %d: outcome %q, late %q", line, rec[col["outcome"]], rec[col["late"]])
		}
		out = append(out, RawOp{Op: rec[col["op"]], Start: time.UnixMicro(v[0]), Latency: time.Duration(v[1]) * time.Microsecond,
			Outcome: o, Intended: time.UnixMicro(v[2]), Late: late})
	}
}

// seriesColumns is the header of the per-second CSV (WriteSeriesCSV).
var seriesColumns = []string{"second", "ops", "mb", "errors", "ambiguous", "late_ops",
	"intended_p50_us", "intended_p99_us", "intended_p999_us", "intended_max_us", "p50_us", "p99_us", "p999_us", "max_us"}

// WriteSeriesCSV writes the per-second series as CSV with the header
// second,ops,mb,errors,ambiguous,late_ops,intended_p50_us,intended_p99_us,
// intended_p999_us,intended_max_us,p50_us,p99_us,p999_us,max_us (mb: 10^6
// bytes completed in that second; latencies of the operations completed in
// it, from the intended start and from the send, in microseconds).
func (s Summary) WriteSeriesCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(seriesColumns)
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	for _, p := range s.Series {
		_ = cw.Write([]string{strconv.Itoa(p.Second), i64(p.Ops), strconv.FormatFloat(float64(p.Bytes)/1e6, 'f', 3, 64),
			i64(p.Errors), i64(p.Ambiguous), i64(p.LateOps),
			i64(p.IntendedP50Us), i64(p.IntendedP99Us), i64(p.IntendedP999Us), i64(p.IntendedMaxUs),
			i64(p.P50Us), i64(p.P99Us), i64(p.P999Us), i64(p.MaxUs)})
	}
	cw.Flush()
	return cw.Error()
}

// Failures returns an error naming the failed and ambiguous operations of
// s, or nil if there were none. Commands return it after printing and
// saving the results, so a run with errors exits non-zero.
func (s Summary) Failures() error {
	if s.Errors == 0 && s.Ambiguous == 0 {
		return nil
	}
	msg := fmt.Sprintf("%s: %d operations failed and %d are ambiguous", s.Op, s.Errors, s.Ambiguous)
	if len(s.ErrorSamples) > 0 {
		msg += " (first error: " + s.ErrorSamples[0] + ")"
	}
	return errors.New(msg)
}

// OpContext is the context of one operation of a run: not cancelled with
// the run (cancelling the run stops the clients after their current
// operation, so that an interrupted run does not turn in-flight operations
// into errors), but bounded by timeout.
func OpContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), timeout)
}
