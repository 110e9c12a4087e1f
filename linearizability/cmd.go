package linearizability

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nezha-harness/nezha/faults"
	"github.com/nezha-harness/nezha/systems"
	"github.com/nezha-harness/nezha/systems/cluster"
)

// ErrNotLinearizable is matched (errors.Is) by the error Command returns
// for a run that failed its check (exit code 1).
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

const checkUsage = `usage: nezha check -system S [-nemesis LIST] [-duration D] [-clients N] [-seed N]
                   [-read-mode linearizable|lease|stale] [-out DIR] [flags] [-- NODE FLAGS]

Starts a fresh local cluster whose peer links go through per-link proxies,
runs a recorded workload of put/get/delete/scan on a small key space while
a seeded schedule injects and heals faults one at a time, heals
everything, requires one final write to succeed and every node to reach
the same state hash at the same applied index, and checks the history for
linearizability with Porcupine. Flags after -- go to every node (e.g.
-- -gcContinuous -segmentSizeBytes 1048576 to keep nezha's GC busy).

Exit status: 0 linearizable (and healed, converged), 1 not (the
visualization's path is printed), 2 usage error. Ctrl-C heals every fault
and tears the cluster down.

nemeses (-nemesis: a comma-separated list, all, or none):
`

// Command is `nezha check`.
func Command(args []string, stdout, stderr io.Writer) error {
	o := DefaultOptions()
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.StringVar(&o.System, "system", "", "system under test (required; etcd: the external reference system)")
	nemesis := fs.String("nemesis", "all", "nemeses to inject, one at a time: comma-separated names, all, or none")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "how long the workload runs (faults are healed before its end; without this flag, longer if the nemeses need it)")
	fs.IntVar(&o.Clients, "clients", o.Clients, "logical clients, pinned to the nodes in turn")
	fs.IntVar(&o.Nodes, "nodes", o.Nodes, "cluster size")
	fs.Int64Var(&o.Seed, "seed", o.Seed, "seed of the fault schedule and the workload")
	fs.StringVar(&o.ReadMode, "read-mode", o.ReadMode, "reads: linearizable (ReadIndex), lease (nodes run -leaseRead), stale (local reads; not linearizable)")
	fs.StringVar(&o.Out, "out", "", "output directory (default results/check/SYSTEM-READMODE-seedN-TIME)")
	fs.StringVar(&o.Binary, "binary", "", "nezha executable for the nodes (default: this one)")
	fs.DurationVar(&o.Tick, "tick", o.Tick, "Raft tick of the nodes (election timeout 10 ticks)")
	fs.IntVar(&o.Keys, "keys", o.Keys, "size of the key space")
	fs.IntVar(&o.ScanGroup, "scan-group", o.ScanGroup, "keys a scan may span (scans stay within consecutive groups of this size)")
	fs.IntVar(&o.ValueBytes, "value-size", o.ValueBytes, "pad written values to this many bytes (0: short unique ids)")
	fs.DurationVar(&o.ThinkTime, "think", o.ThinkTime, "mean pause of a client between operations")
	fs.DurationVar(&o.CheckTimeout, "check-timeout", o.CheckTimeout, "time limit of Porcupine (running out counts as failure)")
	fs.BoolVar(&o.KeepData, "keep-data", false, "keep the nodes' data directories of a passing run")
	fs.Usage = func() {}
	// Flags after "--" go to every node, as with `cluster up`.
	for i, a := range args {
		if a == "--" {
			args, o.ExtraArgs = args[:i], append([]string(nil), args[i+1:]...)
			break
		}
	}
	if err := systems.ParseFlags(fs, args, stdout); err != nil {
		if errors.Is(err, systems.ErrHelp) {
			fmt.Fprint(stdout, checkUsage+faults.Describe())
		}
		return err
	}
	if fs.NArg() > 0 {
		return systems.Usagef("check: unexpected argument %q", fs.Arg(0))
	}
	// Options treat zero as "the default"; on the command line an explicit
	// zero is a mistake, not a request for the default.
	var zeros []error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "duration", "clients", "nodes", "seed", "tick", "keys", "scan-group", "check-timeout":
			if v := f.Value.String(); v == "0" || v == "0s" {
				zeros = append(zeros, systems.Usagef("-%s 0 is not allowed", f.Name))
			}
		}
	})
	if err := errors.Join(zeros...); err != nil {
		return systems.OneLine("check", err)
	}
	names, err := faults.ParseNemeses(*nemesis)
	if err != nil {
		return systems.OneLine("check", err)
	}
	o.Nemeses = names
	durationSet := false
	fs.Visit(func(f *flag.Flag) { durationSet = durationSet || f.Name == "duration" })
	if !durationSet {
		// The default 30 s fits about four nemeses; without an explicit
		// -duration, run as long as every named nemesis needs.
		o.fill()
		o.Duration = max(o.Duration, o.Schedule.FitAllDuration().Round(time.Second))
	}
	if o.Out == "" && o.System != "" {
		o.Out = filepath.Join("results", "check", fmt.Sprintf("%s-%s-seed%d-%s", o.System, o.ReadMode, o.Seed, time.Now().Format("20060102-150405")))
	}
	start := time.Now()
	o.Logf = func(format string, args ...any) {
		fmt.Fprintf(stderr, "[%7.2fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	if err := o.Validate(); err != nil {
		return systems.OneLine("check", err)
	}

	// Ctrl-C (or SIGTERM) cancels the run, which heals every fault and
	// tears the cluster down before returning. A second Ctrl-C kills this
	// process at once (the nodes are then left running: `nezha cluster
	// down -cluster OUT/cluster`).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
	}()

	res, err := Run(ctx, o)
	if res != nil {
		printResult(stdout, res)
	}
	if err != nil {
		var ue *systems.UsageError
		if errors.As(err, &ue) {
			return systems.OneLine("check", err)
		}
		if errors.Is(err, context.Canceled) {
			return fmt.Errorf("check interrupted: faults healed and cluster torn down; partial history in %s", o.Out)
		}
		return fmt.Errorf("check: %w", err)
	}
	if !res.OK {
		return &FailedError{Result: res}
	}
	return nil
}

func printResult(w io.Writer, r *Result) {
	fmt.Fprintf(w, "system %s, read mode %s, nemeses %s, seed %d, %d clients, %d nodes, %v\n",
		cluster.Label(r.Options.System), r.Options.ReadMode, nemesisList(r.Options.Nemeses), r.Options.Seed, r.Options.Clients, r.Options.Nodes, r.Options.Duration)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, win := range r.Windows {
		fmt.Fprintf(tw, "  fault\t%s\t%v..%v\t%s\n", win.Nemesis, win.Start.Round(time.Millisecond), win.End.Round(time.Millisecond), win.Detail)
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
