package agent

import (
	"context"
	"math/rand"
	"os"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"golang.org/x/sys/unix"
)

// FsyncProbe is one pass of FsyncBandwidth.
type FsyncProbe struct {
	// MBPerSec is the pass's bandwidth (10^6 bytes per second).
	MBPerSec float64
	// Latency holds the time of each write + fdatasync, in nanoseconds.
	Latency *hdrhistogram.Histogram
}

// Bounds of FsyncProbe.Latency: 1 µs to 100 s, 3 significant digits.
const (
	minLatencyNs = 1e3
	maxLatencyNs = 100e9
)

// newLatencyHistogram is an empty FsyncProbe.Latency.
func newLatencyHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(minLatencyNs, maxLatencyNs, 3)
}

// FsyncBandwidth writes totalBytes to a new file at path in sequential
// writes of writeBytes, each followed by fdatasync (as a Raft log's
// appends are), and measures the bandwidth and each write's latency. The
// file is left for the caller to remove.
func FsyncBandwidth(ctx context.Context, path string, totalBytes int64, writeBytes int) (FsyncProbe, error) {
	p := FsyncProbe{Latency: newLatencyHistogram()}
	f, err := os.Create(path)
	if err != nil {
		return p, err
	}
	defer f.Close()
	buf := make([]byte, writeBytes)
	rand.New(rand.NewSource(1)).Read(buf)
	start := time.Now()
	var written int64
	for written < totalBytes {
		if err := ctx.Err(); err != nil {
			return p, err
		}
		t := time.Now()
		if _, err := f.Write(buf); err != nil {
			return p, err
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return p, err
		}
		_ = p.Latency.RecordValue(min(max(time.Since(t).Nanoseconds(), minLatencyNs), maxLatencyNs))
		written += int64(writeBytes)
	}
	p.MBPerSec = float64(written) / time.Since(start).Seconds() / 1e6
	return p, nil
}
