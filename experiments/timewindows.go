package experiments

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/faults"
	"github.com/nezha-harness/nezha/plots"
	"github.com/nezha-harness/nezha/systems"
)

// Windows of a run: the spans of time in which something happened that
// may explain what its time series show, drawn as shaded spans on them
// (plots.Window) and kept in result.json (Result.Windows). They come from
// what the nodes report of themselves, after the run: nezha's GC rounds
// (StatusResponse.gc_rounds, per node, with their trigger and bytes), the
// RocksDB systems' compactions and write stalls and every node's leader
// changes (StatusResponse.activities); and from fault schedules
// (faults.Window). Node times are the nodes' wall clocks, compared with
// this process's: on the local and docker backends one clock, over ssh
// as far apart as the hosts' clocks are.

// TimeWindow is one window of a run as result.json keeps it: the
// plots.Window (seconds from the run's second 0) and what the figure does
// not show.
type TimeWindow struct {
	plots.Window
	// Bytes the work of the window wrote, where the node reports it: a
	// GC round's bytes written (the values it moved into sorted runs).
	Bytes int64 `json:"bytes,omitempty"`
}

// RunWindows are the windows of one measured run of one system.
type RunWindows struct {
	// Run names the run within the experiment, e.g. "nezha/greedy" (gc)
	// or "get, first run".
	Run    string `json:"run"`
	System string `json:"system"`
	// Start is the wall-clock time of second 0 of the run's time series;
	// Seconds its length. Windows are clipped to [0, Seconds].
	Start   time.Time    `json:"start"`
	Seconds float64      `json:"seconds"`
	Windows []TimeWindow `json:"windows"`
}

// windowKindOf maps a systems.Activity kind to its window kind.
func windowKindOf(activity string) (plots.WindowKind, bool) {
	switch activity {
	case systems.ActivityCompaction:
		return plots.WindowCompaction, true
	case systems.ActivityWriteStall:
		return plots.WindowWriteStall, true
	case systems.ActivityLeaderChange:
		return plots.WindowLeaderChange, true
	}
	return "", false
}

// nodeWindows asks every node of tb for its GC rounds and activities and
// returns them as windows of a run whose second 0 is start and which
// lasted seconds. A node that does not answer is left out (the error
// names it); the others' windows are returned.
func (x *Run) nodeWindows(ctx context.Context, tb *testbed, start time.Time, seconds float64) ([]TimeWindow, error) {
	addrs := x.Servers
	if tb.spec != nil {
		addrs = tb.spec.Addresses()
	}
	var statuses []*kvpb.StatusResponse
	var errs []error
	for _, a := range addrs {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := tb.c.StatusWithActivities(sctx, a, start)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("windows: status of %s: %w", a, err))
			continue
		}
		statuses = append(statuses, st)
	}
	return windowsFromStatus(statuses, start, seconds), errors.Join(errs...)
}

// windowsFromStatus turns the nodes' statuses into the windows of a run
// from start lasting seconds: nezha's GC rounds per node (the RocksDB
// systems' Raft log truncation rounds are left out: they are not a
// key-value separation's GC), compactions and write stalls per node, and
// leader changes merged over the nodes into windows of the cluster (each
// node reports its own view of the same change). Windows outside the run
// are dropped, the others clipped to it; a window still going on ends at
// the run's end. Sorted by start, then kind and node.
func windowsFromStatus(statuses []*kvpb.StatusResponse, start time.Time, seconds float64) []TimeWindow {
	sec := func(unixNanos int64) float64 { return time.Unix(0, unixNanos).Sub(start).Seconds() }
	var out, leaders []TimeWindow
	add := func(w TimeWindow) {
		if w.End < 0 || w.Start > seconds {
			return
		}
		w.Start, w.End = max(w.Start, 0), min(w.End, seconds)
		out = append(out, w)
	}
	for _, st := range statuses {
		node := st.GetHeader().GetNodeId()
		for _, r := range st.GcRounds {
			if r.Strategy == systems.LogTruncationStrategy {
				continue
			}
			label := fmt.Sprintf("GC (%s, %s): %.1f MB written, %.1f MB reclaimed", r.Strategy, cmp.Or(r.Trigger, "?"),
				float64(r.BytesWritten)/1e6, float64(r.ReclaimedBytes)/1e6)
			if r.Error != "" {
				label += "; failed: " + r.Error
			}
			add(TimeWindow{Window: plots.Window{Kind: plots.WindowGC, Label: label, Start: sec(r.StartUnixNanos),
				End: sec(r.EndUnixNanos), Node: node}, Bytes: r.BytesWritten})
		}
		for _, a := range st.Activities {
			k, ok := windowKindOf(a.Kind)
			if !ok {
				continue
			}
			end := seconds
			if a.EndUnixNanos != 0 {
				end = sec(a.EndUnixNanos)
			}
			w := TimeWindow{Window: plots.Window{Kind: k, Label: a.Detail, Start: sec(a.StartUnixNanos), End: end, Node: node}, Bytes: a.Bytes}
			if k == plots.WindowLeaderChange {
				leaders = append(leaders, w)
				continue
			}
			add(w)
		}
	}
	for _, w := range mergeWindows(leaders) {
		add(w)
	}
	slices.SortStableFunc(out, func(a, b TimeWindow) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Node, b.Node))
	})
	return out
}

// mergeWindows merges overlapping or touching windows into windows of
// the cluster (Node 0), each labelled with its parts' distinct labels.
func mergeWindows(ws []TimeWindow) []TimeWindow {
	slices.SortFunc(ws, func(a, b TimeWindow) int { return cmp.Compare(a.Start, b.Start) })
	var out []TimeWindow
	for _, w := range ws {
		w.Node = 0
		if n := len(out); n > 0 && w.Start <= out[n-1].End {
			last := &out[n-1]
			last.End = max(last.End, w.End)
			last.Bytes += w.Bytes
			if w.Label != "" && !slices.Contains(splitLabels(last.Label), w.Label) {
				last.Label = joinLabel(last.Label, w.Label)
			}
			continue
		}
		out = append(out, w)
	}
	return out
}

// labelSep separates the labels of merged windows.
const labelSep = "; "

func splitLabels(l string) []string {
	if l == "" {
		return nil
	}
	return strings.Split(l, labelSep)
}

func joinLabel(a, b string) string {
	if a == "" {
		return b
	}
	return a + labelSep + b
}

// faultWindows turns a fault schedule's windows (faults.Windows, times
// since the schedule's start) into windows of a run whose second 0 is
// offset after the schedule's start: one per fault, on its node when it
// hit one node, else on the cluster.
func faultWindows(fs []faults.Window, offset time.Duration) []TimeWindow {
	var out []TimeWindow
	for _, f := range fs {
		w := plots.Window{Kind: plots.WindowFault, Start: (f.Start - offset).Seconds(), End: (f.End - offset).Seconds(),
			Label: joinDetail(f.Nemesis, f.Detail)}
		if len(f.Nodes) == 1 {
			w.Node = f.Nodes[0]
		}
		out = append(out, TimeWindow{Window: w})
	}
	return out
}

func joinDetail(what, detail string) string {
	if detail == "" {
		return what
	}
	return what + ": " + detail
}

// recordWindows keeps a run's windows for result.json.
func (x *Run) recordWindows(rw RunWindows) {
	if rw.Windows == nil {
		rw.Windows = []TimeWindow{} // "windows": [] in result.json: none happened
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.res.Windows = append(x.res.Windows, rw)
}

// windowsOf returns the recorded windows of run of system (nil if none).
func (x *Run) windowsOf(run, system string) []TimeWindow {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, rw := range x.res.Windows {
		if rw.Run == run && rw.System == system {
			return rw.Windows
		}
	}
	return nil
}

// figureWindows returns the plots.Windows of ws shifted by shift seconds
// (to another time axis of the same run), leaving out the kinds in skip,
// and with the system's name before their labels when system is not
// empty (a figure of several systems' runs, each on its own time axis).
func figureWindows(ws []TimeWindow, shift float64, system string, skip ...plots.WindowKind) []plots.Window {
	var out []plots.Window
	for _, w := range ws {
		if slices.Contains(skip, w.Kind) {
			continue
		}
		pw := w.Window
		pw.Start, pw.End = pw.Start+shift, pw.End+shift
		if system != "" {
			pw.Label = joinDetail(system, pw.Label)
		}
		out = append(out, pw)
	}
	return out
}

// windowsCaption says which windows a figure shows.
func windowsCaption(several bool, skipped ...plots.WindowKind) string {
	s := "Shaded: nezha's GC rounds (per node), the RocksDB systems' compactions (each job, as RocksDB's info log times it), write stalls (per node), leader changes (no leader known, merged over the nodes) and injected faults, as the nodes and the fault schedule report them (result.json: windows)."
	if several {
		s += " Each system's windows are on its own run's time axis."
	}
	if slices.Contains(skipped, plots.WindowCompaction) {
		s += " Compactions are left out here (they run through most of a write-heavy run); they are in result.json and in the per-system figures."
	}
	return s
}
