package agent

import (
	"context"
	"testing"
	"time"
)

func TestCalibrate(t *testing.T) {
	m, err := Calibrate(context.Background(), 2, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// Bounds that hold on any machine that can run the harness, and fail
	// for a zero, a sign error or a unit slip of 10^3.
	if m.LoopbackRoundTripNs < 100 || m.LoopbackRoundTripNs > 100e6 {
		t.Errorf("loopback round trip %.0f ns, want 100 ns .. 100 ms", m.LoopbackRoundTripNs)
	}
	if m.MemmoveGBPerSec < 0.1 || m.MemmoveGBPerSec > 10000 {
		t.Errorf("copy %.3f GB/s, want 0.1 .. 10000", m.MemmoveGBPerSec)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Calibrate(ctx, 1, time.Second); err == nil {
		t.Error("calibrate with a cancelled context: no error")
	}
}
