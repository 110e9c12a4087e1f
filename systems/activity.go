package systems

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// Activity kinds: what an Activity was.
const (
	// ActivityCompaction: RocksDB ran at least one compaction.
	ActivityCompaction = "compaction"
	// ActivityWriteStall: the store stopped or slowed client writes
	// (RocksDB's write stall or write delay; nezha's GC debt, from the
	// first write the node held until a held write saw the stall end).
	ActivityWriteStall = "write-stall"
	// ActivityLeaderChange: the node knew no leader, until it knew the
	// next one (a change with no gap in between is a zero-length
	// activity).
	ActivityLeaderChange = "leader-change"
)

// Activity is a span of time in which a node did something in the
// background, or saw something happen, that may explain what clients
// measured meanwhile (a latency spike, a throughput dip). Experiments
// draw activities as windows on their time series. nezha's GC rounds are
// reported apart (GCRound), with their own figures.
type Activity struct {
	Kind  string    `json:"kind"`
	Start time.Time `json:"start"`
	// End is zero while the activity goes on.
	End time.Time `json:"end"`
	// Bytes the activity wrote, if known (0: not known).
	Bytes  int64  `json:"bytes,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// ActivityReporter is implemented by state machines that record their
// background activities (the RocksDB baselines: compactions and write
// stalls). Safe for concurrent use.
type ActivityReporter interface {
	// Activities returns the recorded activities still going on at or
	// after since (End zero or not before since), oldest start first.
	Activities(since time.Time) []Activity
}

// ActivityHistoryLen is how many ended activities an ActivityHistory
// keeps: enough for several minutes of compactions of a busy store
// between two reads by an experiment.
const ActivityHistoryLen = 1024

// ActivityHistory records activities as they begin and end, keeping the
// ActivityHistoryLen most recent ended ones and at most one going on per
// kind. Its zero value is ready; it is safe for concurrent use.
type ActivityHistory struct {
	mu    sync.Mutex
	ended []Activity
	open  map[string]Activity
}

// Begin starts an activity of kind at at, unless one of kind is going
// on already (then nothing changes).
func (h *ActivityHistory) Begin(kind string, at time.Time, detail string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.open[kind]; ok {
		return
	}
	if h.open == nil {
		h.open = map[string]Activity{}
	}
	h.open[kind] = Activity{Kind: kind, Start: at, Detail: detail}
}

// End ends the activity of kind going on at at, adding bytes and
// appending detail to its own (after ", "). With none going on it
// records a zero-length activity at at (a leader change without a gap).
func (h *ActivityHistory) End(kind string, at time.Time, bytes int64, detail string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.endLocked(kind, at, bytes, detail)
}

func (h *ActivityHistory) endLocked(kind string, at time.Time, bytes int64, detail string) {
	a, ok := h.open[kind]
	if !ok {
		a = Activity{Kind: kind, Start: at}
	}
	delete(h.open, kind)
	a.End, a.Bytes = at, a.Bytes+bytes
	switch {
	case a.Detail == "":
		a.Detail = detail
	case detail != "":
		a.Detail += ", " + detail
	}
	h.ended = append(h.ended, a)
	if len(h.ended) > ActivityHistoryLen {
		h.ended = append(h.ended[:0], h.ended[len(h.ended)-ActivityHistoryLen:]...)
	}
}

// EndIfGoing is End for an activity of kind going on; with none going on
// it does nothing and returns false (for several goroutines that may each
// see the same activity end).
func (h *ActivityHistory) EndIfGoing(kind string, at time.Time, bytes int64, detail string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.open[kind]; !ok {
		return false
	}
	h.endLocked(kind, at, bytes, detail)
	return true
}

// Going reports whether an activity of kind is going on.
func (h *ActivityHistory) Going(kind string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.open[kind]
	return ok
}

// Since returns copies of the kept activities going on at or after since
// (those going on now included, End zero), oldest start first.
func (h *ActivityHistory) Since(since time.Time) []Activity {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Activity
	for _, a := range h.ended {
		if !a.End.Before(since) {
			out = append(out, a)
		}
	}
	for _, a := range h.open {
		out = append(out, a)
	}
	SortActivities(out)
	return out
}

// SortActivities sorts as by start, then kind (a stable order for equal
// starts).
func SortActivities(as []Activity) {
	slices.SortStableFunc(as, func(a, b Activity) int {
		if c := a.Start.Compare(b.Start); c != 0 {
			return c
		}
		return strings.Compare(a.Kind, b.Kind)
	})
}
