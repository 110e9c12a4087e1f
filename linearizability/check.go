package linearizability

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/nezha-harness/nezha/faults"
)

// Verdicts of a check.
const (
	Linearizable    = "linearizable"
	NotLinearizable = "not linearizable"
	// Unknown: the checker ran out of time. It counts as a failure: a check
	// that cannot decide has proved nothing.
	Unknown = "unknown"
)

// PartitionInfo describes one part of the history (the keys it covers).
type PartitionInfo struct {
	Keys   []string `json:"keys"`
	Ops    int      `json:"ops"`
	Result string   `json:"result"`
}

// CheckOutcome is the result of checking one history.
type CheckOutcome struct {
	Verdict string `json:"verdict"`
	// Operations is the number of operations checked (after Patch).
	Operations int        `json:"operations"`
	Partitions int        `json:"partitions"`
	Patch      PatchStats `json:"patch"`
	// Bad lists the partitions that are illegal or undecided.
	Bad []PartitionInfo `json:"bad,omitempty"`
	// Anomalies are simple witnesses (stale reads, phantom values) found
	// in a history that is not linearizable, to explain the verdict.
	Anomalies []Anomaly `json:"anomalies,omitempty"`
	// AnomalyCount is the number of anomalies found (Run keeps a few).
	AnomalyCount int           `json:"anomaly_count,omitempty"`
	Elapsed      time.Duration `json:"elapsed_ns"`
	Timeout      time.Duration `json:"timeout_ns"`

	model   porcupine.Model
	badOps  []porcupine.Operation
	checked []porcupine.Operation
}

func verdictOf(r porcupine.CheckResult) string {
	switch r {
	case porcupine.Ok:
		return Linearizable
	case porcupine.Illegal:
		return NotLinearizable
	}
	return Unknown
}

func partitionKeys(ops []porcupine.Operation, universe []string) []string {
	set := map[string]bool{}
	for _, op := range ops {
		for _, k := range keysOf(op.Input.(Input), universe) {
			set[k] = true
		}
		for _, kv := range op.Output.(Output).KVs {
			set[kv.Key] = true
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Check checks recorded operations against the model over the key space
// universe: failed operations are dropped, ambiguous writes left open
// (Operations), the history patched (Patch), then checked with Porcupine
// within timeout (0: none). If the history is not linearizable (or the
// checker timed out), the partitions at fault are found by checking each
// on its own.
func Check(ops []Op, universe []string, timeout time.Duration) CheckOutcome {
	model := NewModel(universe)
	hist, st := Patch(Operations(ops))
	begin := time.Now()
	res := porcupine.CheckOperationsTimeout(model, hist, timeout)
	parts := model.Partition(hist)
	out := CheckOutcome{
		Verdict:    verdictOf(res),
		Operations: len(hist),
		Partitions: len(parts),
		Patch:      st,
		Timeout:    timeout,
		model:      model,
		checked:    hist,
	}
	if res != porcupine.Ok {
		single := model
		single.Partition = nil
		for _, p := range parts {
			r := porcupine.CheckOperationsTimeout(single, p, timeout)
			if r == porcupine.Ok {
				continue
			}
			out.Bad = append(out.Bad, PartitionInfo{Keys: partitionKeys(p, universe), Ops: len(p), Result: verdictOf(r)})
			out.badOps = append(out.badOps, p...)
		}
		if len(out.Bad) == 0 {
			// Porcupine timed out on the whole but not on the parts.
			out.Verdict = Linearizable
		} else {
			out.Anomalies = Explain(ops, 0)
			out.AnomalyCount = len(out.Anomalies)
		}
	}
	out.Elapsed = time.Since(begin)
	return out
}

// Visualize writes Porcupine's HTML visualization of the partitions at
// fault (all partitions if none is), with the nemesis windows as
// annotations, to path.
func (o CheckOutcome) Visualize(path string, windows []faults.Window, extra []porcupine.Annotation) error {
	ops := o.badOps
	if len(ops) == 0 {
		ops = o.checked
	}
	_, info := porcupine.CheckOperationsVerbose(o.model, ops, o.Timeout)
	info.AddAnnotations(Annotations(windows))
	info.AddAnnotations(anomalyAnnotations(o.Anomalies))
	info.AddAnnotations(extra)
	return porcupine.VisualizePath(o.model, info, path)
}

// Annotations turns nemesis windows into Porcupine annotations on a
// "nemesis" row.
func Annotations(windows []faults.Window) []porcupine.Annotation {
	var out []porcupine.Annotation
	for _, w := range windows {
		nodes := ""
		if len(w.Nodes) > 0 {
			ns := make([]string, len(w.Nodes))
			for i, n := range w.Nodes {
				ns[i] = fmt.Sprint(n)
			}
			nodes = " n" + strings.Join(ns, ",")
		}
		out = append(out, porcupine.Annotation{
			Tag:             "nemesis",
			Start:           int64(w.Start),
			End:             int64(w.End),
			Description:     w.Nemesis + nodes,
			Details:         fmt.Sprintf("%s (step %d) from %v to %v: %s", w.Nemesis, w.Step, w.Start.Round(time.Millisecond), w.End.Round(time.Millisecond), w.Detail),
			BackgroundColor: "#ffd7d7",
		})
	}
	return out
}
