// Package activity records a node's background activities (compactions,
// write stalls, leader changes) as they begin and end, for the
// systems.ActivityReporter a state machine or node implements.
package activity

import (
	"sync"
	"time"

	"github.com/nezha-harness/nezha/systems"
)

// HistoryLen is how many ended activities an History
// keeps: enough for several minutes of compactions of a busy store
// between two reads by an experiment.
const HistoryLen = 1024

// History records activities as they begin and end, keeping the
// HistoryLen most recent ended ones and at most one going on per
// kind. Its zero value is ready; it is safe for concurrent use.
type History struct {
	mu    sync.Mutex
	ended []systems.Activity
	open  map[string]systems.Activity
}

// Begin starts an activity of kind at at, unless one of kind is going
// on already (then nothing changes).
func (h *History) Begin(kind string, at time.Time, detail string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.open[kind]; ok {
		return
	}
	if h.open == nil {
		h.open = map[string]systems.Activity{}
	}
	h.open[kind] = systems.Activity{Kind: kind, Start: at, Detail: detail}
}

// End ends the activity of kind going on at at, adding bytes and
// appending detail to its own (after ", "). With none going on it
// records a zero-length activity at at (a leader change without a gap).
func (h *History) End(kind string, at time.Time, bytes int64, detail string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.endLocked(kind, at, bytes, detail)
}

func (h *History) endLocked(kind string, at time.Time, bytes int64, detail string) {
	a, ok := h.open[kind]
	if !ok {
		a = systems.Activity{Kind: kind, Start: at}
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
	if len(h.ended) > HistoryLen {
		h.ended = append(h.ended[:0], h.ended[len(h.ended)-HistoryLen:]...)
	}
}

// EndIfGoing is End for an activity of kind going on; with none going on
// it does nothing and returns false (for several goroutines that may each
// see the same activity end).
func (h *History) EndIfGoing(kind string, at time.Time, bytes int64, detail string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.open[kind]; !ok {
		return false
	}
	h.endLocked(kind, at, bytes, detail)
	return true
}

// Going reports whether an activity of kind is going on.
func (h *History) Going(kind string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.open[kind]
	return ok
}

// Since returns copies of the kept activities going on at or after since
// (those going on now included, End zero), oldest start first.
func (h *History) Since(since time.Time) []systems.Activity {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []systems.Activity
	for _, a := range h.ended {
		if !a.End.Before(since) {
			out = append(out, a)
		}
	}
	for _, a := range h.open {
		out = append(out, a)
	}
	systems.SortActivities(out)
	return out
}
