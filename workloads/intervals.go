package workloads

import (
	"fmt"
	"io"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Intervals holds a run's per-second latency histograms, from the intended
// start and from the actual send, of the operations that completed (OK or
// Miss) in each second after start. Safe for concurrent use: the
// recorders of a run share one. A second's histograms stay in memory
// while it and the next are current (two HDR histograms are ~370 KB);
// then they are kept compressed, as the interval log holds them.
type Intervals struct {
	start time.Time
	mu    sync.Mutex
	secs  []*intervalSec
	// open: the seconds below it are compressed.
	open int
}

// intervalSec is one second: its histograms while open, their encoding
// (HdrHistogram's compressed V2, base64) and statistics once closed.
type intervalSec struct {
	intended, send       *hdrhistogram.Histogram
	encIntended, encSend []byte
	stats                intervalStats
}

// intervalStats are the latencies of one second, in microseconds.
type intervalStats struct {
	intended, send [4]int64 // p50, p99, p99.9, max
}

// NewIntervals returns intervals whose second 0 begins at start.
func NewIntervals(start time.Time) *Intervals { return &Intervals{start: start} }

func newLatencyHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(histMinUs, histMaxUs, histSig)
}

// record adds one completed operation, done at done, of the given
// latencies (microseconds, within the histograms' range).
func (iv *Intervals) record(done time.Time, intendedUs, sendUs int64) {
	sec := max(int(done.Sub(iv.start)/time.Second), 0)
	iv.mu.Lock()
	defer iv.mu.Unlock()
	for len(iv.secs) <= sec {
		iv.secs = append(iv.secs, &intervalSec{})
	}
	for ; iv.open < sec-1; iv.open++ {
		iv.secs[iv.open].close()
	}
	s := iv.secs[sec]
	s.reopen()
	_ = s.intended.RecordValue(intendedUs) // in range by construction
	_ = s.send.RecordValue(sendUs)
	if sec < iv.open {
		// A completion recorded over a second after it happened: its
		// second stays compressed.
		s.close()
	}
}

// reopen makes s's histograms current: new ones, or decoded.
func (s *intervalSec) reopen() {
	if s.send != nil {
		return
	}
	if s.encSend == nil {
		s.intended, s.send = newLatencyHistogram(), newLatencyHistogram()
		return
	}
	// Decoding what Encode wrote cannot fail.
	s.intended, _ = hdrhistogram.Decode(s.encIntended)
	s.send, _ = hdrhistogram.Decode(s.encSend)
}

// close compresses s's histograms and keeps their statistics.
func (s *intervalSec) close() {
	s.reopen()
	for _, h := range []struct {
		h   *hdrhistogram.Histogram
		enc *[]byte
		q   *[4]int64
	}{{s.intended, &s.encIntended, &s.stats.intended}, {s.send, &s.encSend, &s.stats.send}} {
		*h.enc, _ = h.h.Encode(hdrhistogram.V2CompressedEncodingCookieBase) // the only version; cannot fail
		if h.h.TotalCount() > 0 {
			*h.q = [4]int64{h.h.ValueAtQuantile(50), h.h.ValueAtQuantile(99), h.h.ValueAtQuantile(99.9), h.h.Max()}
		}
	}
	s.intended, s.send = nil, nil
}

// finish closes every second (idempotent) and returns them.
func (iv *Intervals) finish() []*intervalSec {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	for ; iv.open < len(iv.secs); iv.open++ {
		iv.secs[iv.open].close()
	}
	return iv.secs
}

// writeHistogramLog writes seconds 0..n-1 as an HdrHistogram interval
// log: per second, the histogram of latencies from the intended start
// (untagged) and from the actual send (Tag=send), in microseconds. The
// format is the one HdrHistogram's HistogramLogWriter (Java, format 1.3)
// writes and its HistogramLogReader and HistogramLogProcessor read:
// interval lines "start_sec,length_sec,max,payload", start relative to
// the #[BaseTime:], and Interval_Max in milliseconds.
//
// hdrhistogram-go v1.1.2 writes the comment, version and legend lines
// here, but not the others: its OutputIntervalHistogram puts the end time,
// in milliseconds, where the length in seconds goes, its OutputBaseTime
// writes "#[Basetime:", which neither its own reader nor Java's
// recognises, and its OutputStartTime adds the milliseconds as seconds to
// the date it shows.
func (iv *Intervals) writeHistogramLog(w io.Writer, what string, n int) error {
	secs := iv.finish()
	lw := hdrhistogram.NewHistogramLogWriter(w)
	if err := lw.OutputComment("[" + what + ": per-second latency histograms, in microseconds; untagged: from the intended start, Tag=send: from the actual send]"); err != nil {
		return err
	}
	if err := lw.OutputLogFormatVersion(); err != nil {
		return err
	}
	base := float64(iv.start.UnixMilli()) / 1000
	if _, err := fmt.Fprintf(w, "#[StartTime: %.3f (seconds since epoch), %s]\n#[BaseTime: %.3f (seconds since epoch)]\n",
		base, iv.start.UTC().Format(time.RFC3339Nano), base); err != nil {
		return err
	}
	if err := lw.OutputLegend(); err != nil {
		return err
	}
	var empty *intervalSec
	for i := range n {
		s := empty
		if i < len(secs) {
			s = secs[i]
		} else if empty == nil {
			empty = &intervalSec{}
			empty.close()
			s = empty
		}
		if _, err := fmt.Fprintf(w, "%d.000,1.000,%.3f,%s\nTag=send,%d.000,1.000,%.3f,%s\n",
			i, float64(s.stats.intended[3])/1000, s.encIntended, i, float64(s.stats.send[3])/1000, s.encSend); err != nil {
			return err
		}
	}
	return nil
}
