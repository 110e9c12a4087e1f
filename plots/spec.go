// Package plots draws the harness's figures with gonum/plot from saved
// figure specifications only: an experiment computes its numbers, saves
// them as Figures in DIR/figures.json, and Render (or `nezha plot DIR`)
// draws DIR/<name>.png, DIR/<name>.svg and, one column of a paper wide,
// DIR/<name>.pdf from that file, so a figure can
// be redrawn, restyled or re-rendered without rerunning anything.
//
// Figures are meant to be printed: they stay readable in black and white
// (grey fills with hatching-like distinct shades, dashed lines and marker
// shapes), axes carry units, and every series is named in the legend.
package plots

// Kind is how a Figure is drawn.
type Kind string

const (
	// Bars draws grouped bars: one group per category along x, one bar per
	// series in each group (e.g. throughput per system per value size).
	Bars Kind = "bars"
	// Lines draws each series as a line through its (X, Y) points, with a
	// marker per point (e.g. per-second throughput over time).
	Lines Kind = "lines"
	// CDF draws each series as a step line of cumulative fraction (Y in
	// [0, 1]) against X (e.g. latency in microseconds, usually LogX).
	CDF Kind = "cdf"
)

// FileName is the file in a results directory that holds its Figures.
const FileName = "figures.json"

// Figure is one saved figure.
type Figure struct {
	// Name is the file stem: <Name>.png and <Name>.svg.
	Name  string `json:"name"`
	Title string `json:"title"`
	Kind  Kind   `json:"kind"`
	// XLabel and YLabel name the axes with their units, e.g.
	// "value size (KiB)", "throughput (MB/s)".
	XLabel string `json:"x_label"`
	YLabel string `json:"y_label"`
	LogX   bool   `json:"log_x,omitempty"`
	LogY   bool   `json:"log_y,omitempty"`
	// Categories are the groups along x of a Bars figure.
	Categories []string `json:"categories,omitempty"`
	Series     []Series `json:"series"`
	// Marks are labelled vertical lines at x = At (Lines and CDF), e.g. the
	// start and end of a GC round.
	Marks []Mark `json:"marks,omitempty"`
	// HLines are labelled horizontal reference lines at y = At, e.g. the
	// disk's bandwidth or 1.0 on a normalized axis.
	HLines []Mark `json:"hlines,omitempty"`
	// Windows are spans of the x axis (Lines over time only) in which
	// something happened that explains the data: GC rounds, compactions,
	// write stalls, faults, leader changes. They are shaded behind the
	// data, one translucent style and one legend entry per WindowKind.
	Windows []Window `json:"windows,omitempty"`
	// Caption is printed under the figure in the report (not in the image).
	Caption string `json:"caption,omitempty"`
}

// Series is one named data series.
type Series struct {
	Name string `json:"name"`
	// Values has one value per Figure.Categories entry (Bars).
	Values []float64 `json:"values,omitempty"`
	// Missing lists the indexes of Values that have no measurement (e.g. a
	// system that failed); no bar is drawn there. (JSON has no NaN.)
	Missing []int `json:"missing,omitempty"`
	// Errors, if set, are error-bar half widths per value (Bars, Lines),
	// or with ErrorsUp the part below the value.
	Errors []float64 `json:"errors,omitempty"`
	// ErrorsUp, if set, make the error bars asymmetric (Bars, Lines):
	// Errors is then how far each reaches below its value and ErrorsUp
	// how far above (e.g. median to min and to max of repeated runs).
	ErrorsUp []float64 `json:"errors_up,omitempty"`
	// X and Y are the points of a Lines or CDF series.
	X []float64 `json:"x,omitempty"`
	Y []float64 `json:"y,omitempty"`
	// N, if set, is the number of runs behind each value (Bars) or point
	// (Lines): a value from more than one run must show its spread
	// (Errors), and a value with a spread must say its n. The legend
	// shows "(n = 5)" when every value of the series has the same n,
	// else each error bar is labelled with its own.
	N []int `json:"n,omitempty"`
}

// Mark is a labelled reference line.
type Mark struct {
	At    float64 `json:"at"`
	Label string  `json:"label"`
}

// WindowKind is what a Window shows. Each kind has its own shade and
// pattern (black-and-white safe) and one legend entry, named by
// WindowKind.Legend.
type WindowKind string

const (
	// WindowGC is a GC round of a key-value separated store (nezha's GC
	// into sorted runs), from its start to its end on one node.
	WindowGC WindowKind = "gc"
	// WindowCompaction is a time in which RocksDB ran at least one
	// compaction on one node.
	WindowCompaction WindowKind = "compaction"
	// WindowWriteStall is a time in which a node's store stalled or slowed
	// client writes (RocksDB's write stall or delay; nezha's GC debt).
	WindowWriteStall WindowKind = "write-stall"
	// WindowFault is an injected fault from its injection to its heal
	// (faults.Window; a kill from the kill to the restart).
	WindowFault WindowKind = "fault"
	// WindowLeaderChange is a time without a known leader, until a new
	// one was known (a change with no gap: a zero-length window).
	WindowLeaderChange WindowKind = "leader-change"
)

// WindowKinds are the kinds in the order their legend entries appear.
func WindowKinds() []WindowKind {
	return []WindowKind{WindowGC, WindowCompaction, WindowWriteStall, WindowFault, WindowLeaderChange}
}

// Legend is the legend text of the kind ("" for an unknown kind).
func (k WindowKind) Legend() string {
	switch k {
	case WindowGC:
		return "GC round"
	case WindowCompaction:
		return "compaction"
	case WindowWriteStall:
		return "write stall"
	case WindowFault:
		return "fault"
	case WindowLeaderChange:
		return "leader change"
	}
	return ""
}

// Window is a span [Start, End] of a figure's x axis, in its unit (e.g.
// seconds from the start of the run). A zero-length window (a leader
// change without a gap) is drawn as a thin band.
type Window struct {
	Kind WindowKind `json:"kind"`
	// Label says what this window was, for readers of figures.json and
	// result.json (e.g. "GC 3: size, 96 MB written", "kill node 2"); the
	// drawing shows only the kind.
	Label string  `json:"label,omitempty"`
	Start float64 `json:"start"`
	End   float64 `json:"end"`
	// Node is the Raft id of the node it happened on; 0: the cluster (a
	// fault on several nodes, a leader change seen by all).
	Node uint64 `json:"node,omitempty"`
}
