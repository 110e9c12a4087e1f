package systems

import (
	"slices"
	"strings"
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
