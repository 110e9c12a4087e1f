package linearizability

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nezha-harness/nezha/cluster"
)

// ErrNotLinearizable is matched (errors.Is) by FailedError, the error
// `nezha check` returns for a run that failed its check (exit code 1).
var ErrNotLinearizable = errors.New("check failed")

// FailedError describes a failed check.
type FailedError struct{ Result *Result }

func (e *FailedError) Error() string {
	r := e.Result
	msg := fmt.Sprintf("check failed: %s", strings.Join(r.Failures, "; "))
	if r.HTMLPath != "" {
		msg += "; visualization: " + r.HTMLPath
	}
	return msg + "; result: " + r.ResultPath
}

func (e *FailedError) Is(target error) bool { return target == ErrNotLinearizable }

// FitDuration lengthens o.Duration (the default 30 s fits about four
// nemeses) to what every nemesis of o.Nemeses needs, rounded to a second;
// `nezha check` calls it when -duration was not given.
func (o *Options) FitDuration() {
	o.fill()
	o.Duration = max(o.Duration, o.Schedule.FitAllDuration().Round(time.Second))
}

// WriteResult prints r as `nezha check` reports it: the run, its fault
// windows, operation counts, final write and convergence, Porcupine's
// verdict with up to five anomalies, and the paths of the files written.
func WriteResult(w io.Writer, r *Result) {
	fmt.Fprintf(w, "system %s, read mode %s, nemeses %s, seed %d, %d clients, %d nodes, %v\n",
		cluster.Label(r.Options.System), r.Options.ReadMode, nemesisList(r.Options.Nemeses), r.Options.Seed, r.Options.Clients, r.Options.Nodes, r.Options.Duration)
	if r.Backend != "" {
		fmt.Fprintf(w, "backend %s; partitions: %s\n", r.Backend, r.Partitions)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, win := range r.Windows {
		fmt.Fprintf(tw, "  fault\t%s\t%v..%v\t%s\n", win.Nemesis, win.Start.Round(time.Millisecond), win.End.Round(time.Millisecond), win.Detail)
		if i < len(r.Recovery) {
			fmt.Fprintf(tw, "  \trecovery\t%s\n", r.Recovery[i].Text())
		}
	}
	for _, e := range r.Events {
		if e.Action == "skip" {
			fmt.Fprintf(tw, "  skipped\t%s\tstep %d\t%s\n", e.Nemesis, e.Step, e.Detail)
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "operations: %d (%d ok, %d ambiguous, %d failed), availability %.3f\n",
		r.Ops.Total, r.Ops.OK, r.Ops.Ambiguous, r.Ops.Failed, r.Availability)
	fmt.Fprintf(w, "final write: ok=%v attempts=%d; convergence: ok=%v %s\n", r.FinalWrite.OK, r.FinalWrite.Attempts, r.Convergence.OK, r.Convergence.Error)
	if r.Verdict != Interrupted {
		fmt.Fprintf(w, "porcupine: %d operations in %d partitions checked in %v\n", r.Check.Operations, r.Check.Partitions, r.Check.Elapsed.Round(time.Millisecond))
	}
	for _, b := range r.Check.Bad {
		fmt.Fprintf(w, "  %s: keys %s (%d operations)\n", b.Result, strings.Join(b.Keys, ","), b.Ops)
	}
	for i, a := range r.Check.Anomalies {
		if i == 5 {
			fmt.Fprintf(w, "  ... %d anomalies in all (a selection in %s)\n", r.Check.AnomalyCount, r.ResultPath)
			break
		}
		fmt.Fprintf(w, "  %s: %s%s\n", a.Kind, a.Description, duringNote(a.During))
	}
	fmt.Fprintf(w, "verdict: %s\n", r.Verdict)
	if r.HTMLPath != "" {
		fmt.Fprintf(w, "visualization: %s\n", r.HTMLPath)
	}
	fmt.Fprintf(w, "history: %s\nresult: %s\n", r.HistoryPath, r.ResultPath)
}
