package experiments

import (
	"fmt"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/baseline"
	"github.com/nezha-harness/nezha/faults"
	"github.com/nezha-harness/nezha/plots"
	"github.com/nezha-harness/nezha/systems"
)

func TestWindowsFromStatus(t *testing.T) {
	start := time.Unix(1000, 0)
	ns := func(s float64) int64 { return start.Add(time.Duration(s * float64(time.Second))).UnixNano() }
	node := func(id uint64) *kvpb.ResponseHeader { return &kvpb.ResponseHeader{NodeId: id} }
	statuses := []*kvpb.StatusResponse{
		{Header: node(1),
			GcRounds: []*kvpb.GCRound{
				{Strategy: "greedy", Trigger: "size", StartUnixNanos: ns(-5), EndUnixNanos: ns(-1)},                    // during the load: dropped
				{Strategy: "greedy", Trigger: "size", StartUnixNanos: ns(-1), EndUnixNanos: ns(2), BytesWritten: 3e6},  // clipped at 0
				{Strategy: "greedy", Trigger: "idle", StartUnixNanos: ns(9), EndUnixNanos: ns(12), Error: "disk full"}, // clipped at 10
				{Strategy: baseline.TruncationStrategy, StartUnixNanos: ns(4), EndUnixNanos: ns(4.1)},                  // not a GC of values
			},
			Activities: []*kvpb.Activity{
				{Kind: systems.ActivityLeaderChange, StartUnixNanos: ns(5), EndUnixNanos: ns(5.5), Detail: "leader 3 lost, leader 1"},
				{Kind: systems.ActivityCompaction, StartUnixNanos: ns(6)}, // still going on: ends with the run
			}},
		{Header: node(2),
			Activities: []*kvpb.Activity{
				{Kind: systems.ActivityLeaderChange, StartUnixNanos: ns(5.2), EndUnixNanos: ns(5.6), Detail: "leader 3 lost, leader 1"},
				{Kind: systems.ActivityWriteStall, StartUnixNanos: ns(7), EndUnixNanos: ns(7.5), Detail: "writes stopped"},
				{Kind: systems.ActivityLeaderChange, StartUnixNanos: ns(8), EndUnixNanos: ns(8), Detail: "leader 1 -> 2"},
				{Kind: "flush", StartUnixNanos: ns(1), EndUnixNanos: ns(2)}, // unknown kind: left out
			}},
	}
	got := windowsFromStatus(statuses, start, 10)
	want := []TimeWindow{
		{Window: plots.Window{Kind: plots.WindowGC, Label: "GC (greedy, size): 3.0 MB written, 0.0 MB reclaimed", Start: 0, End: 2, Node: 1}, Bytes: 3e6},
		{Window: plots.Window{Kind: plots.WindowLeaderChange, Label: "leader 3 lost, leader 1", Start: 5, End: 5.6}},
		{Window: plots.Window{Kind: plots.WindowCompaction, Start: 6, End: 10, Node: 1}},
		{Window: plots.Window{Kind: plots.WindowWriteStall, Label: "writes stopped", Start: 7, End: 7.5, Node: 2}},
		{Window: plots.Window{Kind: plots.WindowLeaderChange, Label: "leader 1 -> 2", Start: 8, End: 8}},
		{Window: plots.Window{Kind: plots.WindowGC, Label: "GC (greedy, idle): 0.0 MB written, 0.0 MB reclaimed; failed: disk full", Start: 9, End: 10, Node: 1}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d windows, want %d:\n%+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Kind != w.Kind || g.Label != w.Label || g.Node != w.Node || g.Bytes != w.Bytes ||
			fmt.Sprintf("%.3f %.3f", g.Start, g.End) != fmt.Sprintf("%.3f %.3f", w.Start, w.End) {
			t.Errorf("window %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
	f := plots.Figure{Name: "ts", Kind: plots.Lines, XLabel: "time (s)", YLabel: "throughput (ops/s)",
		Series: []plots.Series{{Name: "nezha", X: []float64{0, 10}, Y: []float64{5, 5}}}, Windows: figureWindows(got, 0, "")}
	if err := f.Validate(); err != nil {
		t.Fatalf("a figure of these windows: %v", err)
	}
}

func TestMergeWindowsLabels(t *testing.T) {
	ws := []TimeWindow{
		{Window: plots.Window{Kind: plots.WindowLeaderChange, Label: "b", Start: 2, End: 3, Node: 2}},
		{Window: plots.Window{Kind: plots.WindowLeaderChange, Label: "a", Start: 1, End: 2, Node: 1}}, // touches the next
		{Window: plots.Window{Kind: plots.WindowLeaderChange, Label: "a", Start: 2.5, End: 2.6, Node: 3}},
		{Window: plots.Window{Kind: plots.WindowLeaderChange, Label: "c", Start: 4, End: 4, Node: 1}},
	}
	got := mergeWindows(ws)
	if len(got) != 2 || got[0].Label != "a; b" || got[0].Start != 1 || got[0].End != 3 || got[0].Node != 0 || got[1].Label != "c" {
		t.Fatalf("merged: %+v", got)
	}
}

func TestFaultAndFigureWindows(t *testing.T) {
	fs := []faults.Window{
		{Nemesis: "kill", Start: 3 * time.Second, End: 5 * time.Second, Nodes: []uint64{2}, Detail: "SIGKILL"},
		{Nemesis: "partition-halves", Start: 7 * time.Second, End: 9 * time.Second, Nodes: []uint64{1, 2, 3}},
	}
	ws := faultWindows(fs, time.Second)
	if len(ws) != 2 || ws[0].Node != 2 || ws[0].Start != 2 || ws[0].End != 4 || ws[0].Label != "kill: SIGKILL" ||
		ws[1].Node != 0 || ws[1].Label != "partition-halves" || ws[1].Kind != plots.WindowFault {
		t.Fatalf("fault windows: %+v", ws)
	}
	ws = append(ws, TimeWindow{Window: plots.Window{Kind: plots.WindowCompaction, Start: 1, End: 2}})
	pw := figureWindows(ws, 0.5, "etcd", plots.WindowCompaction)
	if len(pw) != 2 || pw[0].Start != 2.5 || pw[0].Label != "etcd: kill: SIGKILL" {
		t.Fatalf("figure windows: %+v", pw)
	}
}

// TestLogWhereDecades: x.figure turns an axis log where its values span
// decades, and leaves it linear where a log axis cannot show a value.
func TestLogWhereDecades(t *testing.T) {
	bars := plots.Figure{Name: "b", Kind: plots.Bars, YLabel: "ops/s", Categories: []string{"1", "256"},
		Series: []plots.Series{{Name: "a", Values: []float64{20000, 150}}, {Name: "b", Values: []float64{9000, 40}}}}
	if err := bars.Validate(); err == nil {
		t.Fatal("the linear figure is valid; the test needs one that is not")
	}
	got := logWhereDecades(bars)
	if !got.LogY || got.LogX || got.Validate() != nil {
		t.Fatalf("log y %v, log x %v, %v", got.LogY, got.LogX, got.Validate())
	}
	bars.HLines = []plots.Mark{{At: 0, Label: "zero"}} // cannot be on a log axis
	if got := logWhereDecades(bars); got.LogY {
		t.Fatal("made an axis log that holds a zero hline")
	}
	lines := plots.Figure{Name: "l", Kind: plots.Lines, XLabel: "time (s)", YLabel: "ops/s",
		Series: []plots.Series{{Name: "a", X: []float64{0, 1, 2, 3}, Y: []float64{1, 5000, 0, 5000}}}}
	if got := logWhereDecades(lines); got.LogY || got.LogX {
		t.Fatal("made a time series that reaches 0 log")
	}
}
