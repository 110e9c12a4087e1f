package linearizability

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/nezha-harness/nezha/faults"
)

// Anomaly kinds found by Explain.
const (
	// AnomalyStaleRead: a read returned a value (or "not found") that a
	// write which completed before the read began had already replaced.
	AnomalyStaleRead = "stale read"
	// AnomalyPhantom: a read returned a value no recorded put wrote (or
	// whose put was reported as definitely failed).
	AnomalyPhantom = "value never written"
)

// OpRef names one recorded operation.
type OpRef struct {
	Client int    `json:"client"`
	Worker int    `json:"worker"`
	Node   uint64 `json:"node,omitempty"`
	What   string `json:"what"`
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
}

func ref(op Op) OpRef {
	return OpRef{Client: op.Client, Worker: op.Worker, Node: op.Node, What: DescribeOperation(op.Input, op.Output), Call: op.Call, Return: op.Return}
}

func (r OpRef) String() string {
	ret := "?"
	if r.Return != math.MaxInt64 {
		ret = time.Duration(r.Return).Round(time.Millisecond).String()
	}
	node := ""
	if r.Node != 0 {
		node = fmt.Sprintf(" via node %d", r.Node)
	}
	return fmt.Sprintf("%s%s [%v, %s]", r.What, node, time.Duration(r.Call).Round(time.Millisecond), ret)
}

// Anomaly is a simple witness of non-linearizability: found by direct
// inspection, independent of Porcupine, to explain its verdict. Explain
// finds only these two shapes; Porcupine may find violations that have
// neither.
type Anomaly struct {
	Kind string `json:"kind"`
	Key  string `json:"key"`
	Read OpRef  `json:"read"`
	// Writer wrote the value the read returned (stale reads of a value).
	Writer *OpRef `json:"writer,omitempty"`
	// Overwriter replaced it, and returned before the read was called.
	Overwriter  *OpRef `json:"overwriter,omitempty"`
	Description string `json:"description"`
	// During names the fault the read overlapped, if any (set by SelectAnomalies).
	During string `json:"during,omitempty"`
}

// SelectAnomalies keeps a few anomalies, most telling first: up to n
// whose read overlapped a fault and went through a node the fault targeted
// (e.g. a stale read from an isolated leader), then up to n/2 others that
// overlapped a fault, then up to n/2 outside faults. Each is marked with
// the fault it overlapped.
func SelectAnomalies(as []Anomaly, windows []faults.Window, n int) []Anomaly {
	var target, during, other []Anomaly
	for _, a := range as {
		hit := false
		for _, w := range windows {
			if a.Read.Call <= int64(w.End) && a.Read.Return >= int64(w.Start) {
				a.During = fmt.Sprintf("%s (step %d, %v..%v): %s", w.Nemesis, w.Step, w.Start.Round(time.Millisecond), w.End.Round(time.Millisecond), w.Detail)
				hit = slices.Contains(w.Nodes, a.Read.Node)
				break
			}
		}
		switch {
		case hit:
			if len(target) < n {
				target = append(target, a)
			}
		case a.During != "":
			if len(during) < n/2 {
				during = append(during, a)
			}
		case len(other) < n/2:
			other = append(other, a)
		}
	}
	return append(append(target, during...), other...)
}

// Explain looks for stale reads and phantom values in a history (at most
// limit of them, 0: all; earliest reads first). Values are unique per put.
func Explain(ops []Op, limit int) []Anomaly {
	writers := map[string]Op{} // value -> put (ok or ambiguous)
	done := map[string][]Op{}  // key -> completed puts and deletes
	for _, op := range ops {
		if op.Status == StatusFailed {
			continue
		}
		switch op.Input.Kind {
		case OpPut:
			writers[op.Input.Value] = op
		}
		if (op.Input.Kind == OpPut || op.Input.Kind == OpDelete) && op.Status == StatusOK {
			done[op.Input.Key] = append(done[op.Input.Key], op)
		}
	}
	deletes := map[string][]Op{} // key -> deletes that may have taken effect
	for _, op := range ops {
		if op.Input.Kind == OpDelete && op.Status != StatusFailed {
			deletes[op.Input.Key] = append(deletes[op.Input.Key], op)
		}
	}
	// mayDelete: a delete of key may take effect at some time in [from, to].
	mayDelete := func(key string, from, to int64) bool {
		for _, d := range deletes[key] {
			if d.Call <= to && (d.Status == StatusAmbiguous || d.Return >= from) {
				return true
			}
		}
		return false
	}
	var out []Anomaly
	check := func(read Op, key string, found bool, value string) {
		if !found {
			// "Not found" is stale if a put of key completed before the read
			// began and no delete could have come after that put (the
			// latest such put is the one to try).
			var last *Op
			for i, w := range done[key] {
				if w.Input.Kind == OpPut && w.Return < read.Call && (last == nil || w.Call > last.Call) {
					last = &done[key][i]
				}
			}
			if last == nil || mayDelete(key, last.Call, read.Return) {
				return
			}
			wr := ref(*last)
			out = append(out, Anomaly{Kind: AnomalyStaleRead, Key: key, Read: ref(read), Overwriter: &wr,
				Description: fmt.Sprintf("%s found no %s, but %s had completed before it began and no delete of %s could follow", ref(read), key, wr, key)})
			return
		}
		w, ok := writers[value]
		if !ok {
			out = append(out, Anomaly{Kind: AnomalyPhantom, Key: key, Read: ref(read),
				Description: fmt.Sprintf("%s returned %s, which no put wrote (or whose put was reported as failed)", ref(read), value)})
			return
		}
		if w.Status != StatusOK {
			return // an ambiguous put may take effect any time after its call
		}
		for _, w2 := range done[key] {
			if w2.Input.Value == value && w2.Input.Kind == OpPut {
				continue
			}
			if w2.Call > w.Return && w2.Return < read.Call {
				wr, w2r := ref(w), ref(w2)
				out = append(out, Anomaly{Kind: AnomalyStaleRead, Key: key, Read: ref(read), Writer: &wr, Overwriter: &w2r,
					Description: fmt.Sprintf("%s returned %s, written by %s, but %s had replaced it before the read began", ref(read), value, wr, w2r)})
				return
			}
		}
	}
	reads := make([]Op, 0, len(ops))
	for _, op := range ops {
		if op.Status == StatusOK && (op.Input.Kind == OpGet || op.Input.Kind == OpScan) {
			reads = append(reads, op)
		}
	}
	sort.SliceStable(reads, func(i, j int) bool { return reads[i].Call < reads[j].Call })
	for _, r := range reads {
		if limit > 0 && len(out) >= limit {
			break
		}
		switch r.Input.Kind {
		case OpGet:
			check(r, r.Input.Key, r.Output.Found, r.Output.Value)
		case OpScan:
			got := map[string]string{}
			for _, kv := range r.Output.KVs {
				got[kv.Key] = kv.Value
			}
			for _, kv := range r.Output.KVs {
				check(r, kv.Key, true, kv.Value)
			}
			// Keys missing from a scan without a limit were "not found".
			if r.Input.Limit == 0 {
				for key := range done {
					if _, ok := got[key]; !ok && inRange(key, r.Input.Key, r.Input.End) {
						check(r, key, false, "")
					}
				}
			}
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// anomalyAnnotations marks each anomaly's read on an "anomalies" row
// (drawn on the client's own row it would hide the operation).
func anomalyAnnotations(as []Anomaly) []porcupine.Annotation {
	var out []porcupine.Annotation
	for _, a := range as {
		out = append(out, porcupine.Annotation{
			Tag:             "anomalies",
			Start:           a.Read.Call,
			End:             a.Read.Return,
			Description:     fmt.Sprintf("%s %s (client %d)", a.Kind, a.Key, a.Read.Client),
			Details:         a.Description + duringNote(a.During),
			BackgroundColor: "#ff8080",
		})
	}
	return out
}

func duringNote(d string) string {
	if d == "" {
		return ""
	}
	return "; during " + d
}
