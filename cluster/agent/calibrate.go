package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"time"
)

// MachineSpeed is a calibration of this machine's CPU at one moment of a
// run: what the shared path of every system spends its CPU on (docs/architecture.md
// section 3): kernel work for loopback TCP, and copies.
// On a shared VM both drift by tens of percent between runs; a CPU-bound
// system's goodput drifts with them while a disk- or compaction-bound one's
// moves less, so two runs' ratios are comparable only beside these.
type MachineSpeed struct {
	// LoopbackRoundTripNs is the mean time of a 64-byte ping-pong over one
	// loopback TCP connection (one goroutine each end), in nanoseconds.
	LoopbackRoundTripNs float64 `json:"loopback_round_trip_ns"`
	// MemmoveGBPerSec is one goroutine's copy bandwidth between two 256 KiB
	// buffers (10^9 bytes per second).
	MemmoveGBPerSec float64 `json:"memmove_gb_per_sec"`
}

// Calibrate measures MachineSpeed as the best of rounds samples of each
// part, each sample about d long: the best is what the machine can do, less
// moved by another process's burst than a mean.
func Calibrate(ctx context.Context, rounds int, d time.Duration) (MachineSpeed, error) {
	var m MachineSpeed
	for range rounds {
		rtt, err := loopbackRoundTrip(ctx, d)
		if err != nil {
			return m, err
		}
		if ns := float64(rtt.Nanoseconds()); m.LoopbackRoundTripNs == 0 || ns < m.LoopbackRoundTripNs {
			m.LoopbackRoundTripNs = ns
		}
		m.MemmoveGBPerSec = max(m.MemmoveGBPerSec, memmoveBandwidth(d))
	}
	return m, nil
}

// loopbackRoundTrip returns the mean round trip of 64-byte messages echoed
// over a loopback TCP connection during about d.
func loopbackRoundTrip(ctx context.Context, d time.Duration) (time.Duration, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	echoed := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			echoed <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(c, c)
		echoed <- err
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		return 0, err
	}
	buf := make([]byte, 64)
	start := time.Now()
	n := 0
	for ; time.Since(start) < d && ctx.Err() == nil; n++ {
		if _, err := c.Write(buf); err != nil {
			c.Close()
			return 0, err
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			c.Close()
			return 0, err
		}
	}
	elapsed := time.Since(start)
	c.Close()
	if err := <-echoed; err != nil && !errors.Is(err, net.ErrClosed) {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return elapsed / time.Duration(max(n, 1)), nil
}

// memmoveBandwidth copies between two 256 KiB buffers for about d and
// returns GB/s.
func memmoveBandwidth(d time.Duration) float64 {
	a, b := make([]byte, 256<<10), make([]byte, 256<<10)
	for i := range a {
		a[i] = byte(i)
	}
	start := time.Now()
	var copied int64
	for time.Since(start) < d {
		for range 64 {
			copied += int64(copy(b, a))
			a, b = b, a
		}
	}
	return float64(copied) / time.Since(start).Seconds() / 1e9
}
