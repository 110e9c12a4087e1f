package faults

import (
	"testing"
	"time"
)

// TestMeasureRecovery: a load of 100 writes a second, each acknowledged
// 2 ms after it is sent, through four faults: one at 2.5 s that does not
// dent it (the level from the 2 s of load before it); one at 10 s after
// which every write fails for 1.5 s and then 40 a second get through for
// 2 s; one at 20 s that does not dent it; and one at 26 s after which no
// write gets through to the end of the load at 30 s.
func TestMeasureRecovery(t *testing.T) {
	const ack = 2 * time.Millisecond
	var acks []Ack
	add := func(from, to, every time.Duration) {
		for s := from; s < to; s += every {
			acks = append(acks, Ack{Sent: s, Acked: s + ack})
		}
	}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	add(0, ms(10000), ms(10))
	// 10 s .. 11.5 s: every write fails (none acknowledged); a write sent
	// just before the fault is acknowledged late, and does not count as
	// one sent after it.
	acks = append(acks, Ack{Sent: ms(9995), Acked: ms(11000)})
	add(ms(11500), ms(13500), ms(25))
	add(ms(13500), ms(26000), ms(10))
	rs := MeasureRecovery(acks, 0, ms(30000), []time.Duration{ms(20000), ms(2500), ms(10000), ms(26000)}, DefaultRecoveryOptions())
	want := []Recovery{
		{At: ms(2500), LevelOpsPerSec: 100, LevelSeconds: 2, BackOpsPerSec: 90, Looked: ms(7500), WritesBack: ack, WritesBackSeen: true, ThroughputBack: ack, ThroughputBackSeen: true},
		// Writes are back at 11.502 s. The windows tried from then on:
		// [13.302 s, 14.302 s) holds the writes sent in [13.300, 13.500)
		// at 40 a second (8) and in [13.500, 14.300) at 100 (80): 88,
		// under 90; the next, [13.402, 14.402), holds 4 + 90 = 94.
		{At: ms(10000), LevelOpsPerSec: 100, LevelSeconds: 5, BackOpsPerSec: 90, Looked: ms(10000), WritesBack: ms(1502), WritesBackSeen: true,
			ThroughputBack: ms(3402), ThroughputBackSeen: true},
		{At: ms(20000), LevelOpsPerSec: 100, LevelSeconds: 5, BackOpsPerSec: 90, Looked: ms(6000), WritesBack: ack, WritesBackSeen: true, ThroughputBack: ack, ThroughputBackSeen: true},
		{At: ms(26000), LevelOpsPerSec: 100, LevelSeconds: 5, BackOpsPerSec: 90, Looked: ms(4000), WritesBack: ms(4000), ThroughputBack: ms(4000)},
	}
	if len(rs) != len(want) {
		t.Fatalf("%d recoveries, want %d: %+v", len(rs), len(want), rs)
	}
	for i := range want {
		if rs[i] != want[i] {
			t.Errorf("fault %d:\n got %+v\nwant %+v", i, rs[i], want[i])
		}
	}
	if got, want := rs[1].Text(), "writes back after 1.502s, throughput back to 90.0 writes/s (level before 100.0) after 3.402s"; got != want {
		t.Errorf("text %q, want %q", got, want)
	}
	if got, want := rs[3].Text(), "writes back after > 4s"; got != want {
		t.Errorf("text %q, want %q", got, want)
	}
	if err := (RecoveryOptions{Before: time.Millisecond, Within: 1}).Validate(); err == nil {
		t.Error("options with a sub-second level window, a fraction of 1 and no window or step were accepted")
	}
}
