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

	"github.com/nezha-harness/nezha/systems/client"
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
// [Second, Second+1) seconds after the run started.
type Second struct {
	Second    int   `json:"second"`
	Ops       int64 `json:"ops"`
	Bytes     int64 `json:"bytes"`
	Errors    int64 `json:"errors"`
	Ambiguous int64 `json:"ambiguous"`
}

// RawOp is one operation of the raw per-operation record.
type RawOp struct {
	Op      string
	Start   time.Time
	Latency time.Duration
	Outcome Outcome
}

// Recorder accumulates the operations of one goroutine (not safe for
// concurrent use); Summarize merges several.
type Recorder struct {
	start     time.Time
	hist      *hdrhistogram.Histogram
	ops       int64
	misses    int64
	errors    int64
	ambiguous int64
	bytes     int64
	items     int64
	series    []Second
	keepRaw   bool
	raw       []RawOp
	samples   []string
	live      *Live
	first     time.Time
	last      time.Time
}

// NewRecorder returns a Recorder whose per-second series counts from start.
// keepRaw keeps every operation for the raw CSV. live, if not nil, counts
// every operation as it finishes (progress lines, the stall watchdog).
func NewRecorder(start time.Time, keepRaw bool, live *Live) *Recorder {
	return &Recorder{start: start, hist: hdrhistogram.New(histMinUs, histMaxUs, histSig), keepRaw: keepRaw, live: live}
}

// Record adds one operation that began at begin and took lat. bytes is the
// payload it moved (value bytes written or read, keys and values of a
// scan) and items the keys it touched; both count only if the operation
// completed (OK or Miss). err, if any, is kept as a sample.
func (r *Recorder) Record(op string, begin time.Time, lat time.Duration, out Outcome, bytes, items int64, err error) {
	end := begin.Add(lat)
	if r.first.IsZero() || begin.Before(r.first) {
		r.first = begin
	}
	if end.After(r.last) {
		r.last = end
	}
	sec := int(end.Sub(r.start) / time.Second)
	if sec < 0 {
		sec = 0
	}
	for len(r.series) <= sec {
		r.series = append(r.series, Second{Second: len(r.series)})
	}
	s := &r.series[sec]
	switch out {
	case OK, Miss:
		us := int64(lat / time.Microsecond)
		if us < histMinUs {
			us = histMinUs
		}
		if us > histMaxUs {
			us = histMaxUs
		}
		_ = r.hist.RecordValue(us) // in range by construction
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
		r.raw = append(r.raw, RawOp{Op: op, Start: begin, Latency: lat, Outcome: out})
	}
	r.live.Record(out, err)
}

// Summary is the result of one workload run (or of one operation type of a
// YCSB run). Latencies are of completed operations (OK and Miss) in
// microseconds; failed and ambiguous operations are counted, not timed.
// MB is 10^6 bytes.
type Summary struct {
	Op string `json:"op"`
	// Ops completed (OK or Miss).
	Ops       int64 `json:"ops"`
	Misses    int64 `json:"misses"`
	Errors    int64 `json:"errors"`
	Ambiguous int64 `json:"ambiguous"`
	// Bytes of payload moved by completed operations; Items are the keys
	// they touched (one per PUT and GET, the keys returned by a SCAN).
	Bytes int64 `json:"bytes"`
	Items int64 `json:"items"`
	// DurationSec is the wall time of the run: from its start to the end
	// of its last operation.
	DurationSec float64 `json:"duration_sec"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	MBPerSec    float64 `json:"mb_per_sec"`
	AvgUs       float64 `json:"avg_us"`
	MinUs       int64   `json:"min_us"`
	P50Us       int64   `json:"p50_us"`
	P95Us       int64   `json:"p95_us"`
	P99Us       int64   `json:"p99_us"`
	P999Us      int64   `json:"p999_us"`
	MaxUs       int64   `json:"max_us"`
	// ErrorSamples are up to five distinct error messages.
	ErrorSamples []string `json:"error_samples,omitempty"`
	// Stopped says why the run ended before all its operations were done:
	// StoppedInterrupted or StoppedStalled; empty when it ran to its end
	// (or to its -duration). The counts and latencies are of what was done.
	Stopped string `json:"stopped,omitempty"`
	// Series is the per-second throughput.
	Series []Second `json:"series"`
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

// Summarize merges recorders into a Summary named op. duration is the run's
// wall time; if zero, it is taken from the recorders (first start to last
// end).
func Summarize(op string, recs []*Recorder, duration time.Duration) Summary {
	s := Summary{Op: op}
	h := hdrhistogram.New(histMinUs, histMaxUs, histSig)
	var first, last time.Time
	for _, r := range recs {
		if r == nil {
			continue
		}
		h.Merge(r.hist)
		s.Ops += r.ops
		s.Misses += r.misses
		s.Errors += r.errors
		s.Ambiguous += r.ambiguous
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
	if h.TotalCount() > 0 {
		s.AvgUs = h.Mean()
		s.MinUs = h.Min()
		s.P50Us = h.ValueAtQuantile(50)
		s.P95Us = h.ValueAtQuantile(95)
		s.P99Us = h.ValueAtQuantile(99)
		s.P999Us = h.ValueAtQuantile(99.9)
		s.MaxUs = h.Max()
	}
	if s.Series == nil {
		s.Series = []Second{}
	}
	return s
}

// WriteRawCSV writes the kept operations of recs, in start order, as CSV
// with the header op,start_unix_us,latency_us,ok,outcome.
func WriteRawCSV(w io.Writer, recs []*Recorder) error {
	var all []RawOp
	for _, r := range recs {
		if r != nil {
			all = append(all, r.raw...)
		}
	}
	slices.SortStableFunc(all, func(a, b RawOp) int { return a.Start.Compare(b.Start) })
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"op", "start_unix_us", "latency_us", "ok", "outcome"})
	for _, o := range all {
		ok := o.Outcome == OK || o.Outcome == Miss
		_ = cw.Write([]string{o.Op, strconv.FormatInt(o.Start.UnixMicro(), 10),
			strconv.FormatInt(int64(o.Latency/time.Microsecond), 10), strconv.FormatBool(ok), o.Outcome.String()})
	}
	cw.Flush()
	return cw.Error()
}

// WriteSeriesCSV writes the per-second series as CSV with the header
// second,ops,mb,errors,ambiguous (mb: 10^6 bytes completed in that second).
func (s Summary) WriteSeriesCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"second", "ops", "mb", "errors", "ambiguous"})
	for _, p := range s.Series {
		_ = cw.Write([]string{strconv.Itoa(p.Second), strconv.FormatInt(p.Ops, 10),
			strconv.FormatFloat(float64(p.Bytes)/1e6, 'f', 3, 64),
			strconv.FormatInt(p.Errors, 10), strconv.FormatInt(p.Ambiguous, 10)})
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
