package experiments

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/nezha-harness/nezha/linearizability"
)

// linearizabilityExperiment: every system under every nemesis of the
// profile, checked with Porcupine; plus the checker's self-test (stale
// reads under partition-leader must be caught).
func linearizabilityExperiment() Experiment {
	return Experiment{
		Name: "linearizability", Title: "Linearizability under faults",
		Shows:      "that every system stays linearizable under partitions and crashes, and that the checker catches stale reads",
		NeedsLocal: true,
		run: func(ctx context.Context, x *Run) error {
			p := x.Profile
			x.param("nemeses", p.LinNemeses)
			x.param("duration", p.LinDuration.String())
			x.param("clients", p.LinClients)
			x.param("seed", 1)
			tbl := Table{Title: "Porcupine verdicts", Columns: []string{"system", "nemesis", "read mode", "verdict", "operations", "ambiguous", "availability", "final write", "converged", "history"}}
			type run struct {
				system, nemesis, mode string
			}
			var runs []run
			for _, sys := range x.Systems {
				for _, n := range p.LinNemeses {
					runs = append(runs, run{sys, n, "linearizable"})
				}
			}
			selfTest := len(x.Systems) > 0
			if selfTest {
				runs = append(runs, run{x.Systems[0], "partition-leader", "stale"})
			}
			x.note("Availability is the fraction of operations that succeeded. The clients are closed-loop: during a fault a client waits (up to its timeout) instead of failing many operations, so availability stays near 1 even when the cluster stalls; the number of operations in the same time says more.")
			var bad int
			for _, r := range runs {
				dir := filepath.Join(x.Dir, fmt.Sprintf("%s-%s-%s", r.system, r.nemesis, r.mode))
				o := linearizability.Options{System: r.system, Nemeses: []string{r.nemesis}, Duration: p.LinDuration,
					Clients: p.LinClients, Seed: 1, ReadMode: r.mode, Out: dir, Binary: x.Binary}
				if r.mode == "stale" {
					o.Duration = max(p.LinDuration, 20e9)
				}
				x.logf("%s under %s (%s reads) for %v", r.system, r.nemesis, r.mode, o.Duration)
				res, err := linearizability.Run(ctx, o)
				if err != nil {
					x.fail(r.system, "check "+r.nemesis, err, nil)
					continue
				}
				hist := res.HTMLPath
				if hist == "" {
					hist = res.HistoryPath
				}
				if rel, err := filepath.Rel(filepath.Dir(x.Dir), hist); err == nil {
					hist = rel
				}
				tbl.Rows = append(tbl.Rows, []string{r.system, r.nemesis, r.mode, res.Verdict, fmt.Sprint(res.Ops.Total),
					fmt.Sprint(res.Ops.Ambiguous), f2(res.Availability), fmt.Sprint(res.FinalWrite.OK), fmt.Sprint(res.Convergence.OK), "`" + hist + "`"})
				x.logf("%s under %s (%s): %s, %d ops, availability %.2f", r.system, r.nemesis, r.mode, res.Verdict, res.Ops.Total, res.Availability)
				if r.mode == "stale" {
					if res.OK {
						bad++
						x.note("SELF-TEST FAILED: stale reads under partition-leader were not caught (%s).", hist)
					} else {
						x.note("Self-test: stale reads (-read-mode stale) under partition-leader were caught as %s; the visualization is %s.", res.Verdict, hist)
					}
					continue
				}
				if !res.OK {
					bad++
					x.note("%s under %s: NOT OK (%s): %v. History: %s", r.system, r.nemesis, res.Verdict, res.Failures, hist)
				}
			}
			x.table(tbl)
			if bad > 0 {
				return errors.New(fmt.Sprint(bad, " check(s) did not come out as expected"))
			}
			return nil
		},
	}
}
