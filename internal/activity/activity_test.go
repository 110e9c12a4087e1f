package activity

import (
	"github.com/nezha-harness/nezha/systems"

	"fmt"
	"sync"
	"testing"
	"time"
)

func TestHistory(t *testing.T) {
	var h History
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

	h.Begin(systems.ActivityCompaction, at(1), "")
	h.Begin(systems.ActivityCompaction, at(2), "ignored: one is going on")
	if !h.Going(systems.ActivityCompaction) || h.Going(systems.ActivityWriteStall) {
		t.Fatal("Going")
	}
	h.End(systems.ActivityCompaction, at(3), 100, "L0->L1")
	h.End(systems.ActivityLeaderChange, at(4), 0, "leader 1 -> 2") // none going on: zero length
	h.Begin(systems.ActivityWriteStall, at(5), "writes stopped")

	got := h.Since(at(0))
	want := []systems.Activity{
		{Kind: systems.ActivityCompaction, Start: at(1), End: at(3), Bytes: 100, Detail: "L0->L1"},
		{Kind: systems.ActivityLeaderChange, Start: at(4), End: at(4), Detail: "leader 1 -> 2"},
		{Kind: systems.ActivityWriteStall, Start: at(5), Detail: "writes stopped"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Since(0):\n got %v\nwant %v", got, want)
	}
	// Since keeps what ended at or after it, and what goes on.
	if got := h.Since(at(3.5)); len(got) != 2 || got[0].Kind != systems.ActivityLeaderChange {
		t.Fatalf("Since(3.5): %v", got)
	}
	h.End(systems.ActivityWriteStall, at(6), 0, "cleared")
	if got := h.Since(at(5.5)); len(got) != 1 || got[0].Detail != "writes stopped, cleared" || !got[0].End.Equal(at(6)) {
		t.Fatalf("stall after its end: %v", got)
	}
}

func TestHistoryEndIfGoing(t *testing.T) {
	var h History
	t0 := time.Unix(0, 0)
	if h.EndIfGoing(systems.ActivityWriteStall, t0, 0, "") || len(h.Since(t0)) != 0 {
		t.Fatal("EndIfGoing without one going on recorded something")
	}
	h.Begin(systems.ActivityWriteStall, t0, "debt")
	if !h.EndIfGoing(systems.ActivityWriteStall, t0.Add(time.Second), 0, "") || h.EndIfGoing(systems.ActivityWriteStall, t0.Add(2*time.Second), 0, "") {
		t.Fatal("EndIfGoing: want true once, then false")
	}
	if got := h.Since(t0); len(got) != 1 || !got[0].End.Equal(t0.Add(time.Second)) {
		t.Fatalf("after EndIfGoing: %v", got)
	}
}

func TestHistoryKeepsTheLatest(t *testing.T) {
	var h History
	t0 := time.Unix(0, 0)
	for i := range HistoryLen + 10 {
		h.End(systems.ActivityCompaction, t0.Add(time.Duration(i)*time.Second), 0, "")
	}
	got := h.Since(t0)
	if len(got) != HistoryLen || !got[0].Start.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("kept %d, first at %v; want %d from 10 s", len(got), got[0].Start.Sub(t0), HistoryLen)
	}
}

// TestHistoryConcurrent is for -race: one writer per kind, and
// readers.
func TestHistoryConcurrent(t *testing.T) {
	var h History
	var wg sync.WaitGroup
	t0 := time.Unix(0, 0)
	for _, k := range []string{systems.ActivityCompaction, systems.ActivityWriteStall, systems.ActivityLeaderChange} {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range 200 {
				h.Begin(k, t0.Add(time.Duration(2*i)*time.Millisecond), "")
				h.End(k, t0.Add(time.Duration(2*i+1)*time.Millisecond), 1, "")
			}
		}()
		go func() {
			defer wg.Done()
			for range 200 {
				h.Since(t0)
				h.Going(k)
			}
		}()
	}
	wg.Wait()
	got := h.Since(t0)
	if len(got) != 600 {
		t.Fatalf("%d activities, want 600", len(got))
	}
	for i := 1; i < len(got); i++ {
		if got[i].Start.Before(got[i-1].Start) {
			t.Fatalf("not sorted by start at %d", i)
		}
	}
}
