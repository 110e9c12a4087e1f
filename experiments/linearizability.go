package experiments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/linearizability"
	"github.com/nezha-harness/nezha/plots"
)

// linearizabilityExperiment: every system under every nemesis of the
// profile, once per seed, checked with Porcupine; plus the checker's
// self-test (stale reads under partition-leader must be caught).
func linearizabilityExperiment() Experiment {
	return Experiment{
		Name: "linearizability", Title: "Linearizability under faults",
		Shows:            "that every system stays linearizable under partitions and crashes, and that the checker catches stale reads",
		NeedsOwnClusters: true, SmallDisk: true,
		run: func(ctx context.Context, x *Run) error {
			if b := x.Backend.Name; b != "" && b != cluster.BackendLocal {
				// linearizability.Run starts its clusters itself; it takes
				// no backend yet.
				return fmt.Errorf("the checks run their own clusters, on the local backend only until linearizability.Options takes a backend (not %s)", b)
			}
			if err := x.needRegistry(); err != nil {
				return err
			}
			p := x.Profile
			x.param("nemeses", p.LinNemeses)
			x.param("duration", p.LinDuration.String())
			x.param("clients", p.LinClients)
			x.param("seeds", p.LinSeeds)
			for _, sys := range x.Systems {
				if f := x.gcStressFlags(sys); len(f) > 0 {
					x.param(sys+" node flags", f)
				}
			}
			tbl := Table{Title: "Porcupine verdicts", Columns: []string{"system", "nemesis", "seed", "read mode", "verdict", "operations", "ambiguous", "availability", "final write", "converged", "history"}}
			type run struct {
				system, nemesis, mode string
				seed                  int64
			}
			var runs []run
			for _, seed := range p.LinSeeds {
				for _, sys := range x.Systems {
					for _, n := range p.LinNemeses {
						runs = append(runs, run{sys, n, "linearizable", seed})
					}
				}
			}
			selfTest := len(x.Systems) > 0
			if selfTest {
				runs = append(runs, run{x.Systems[0], "partition-leader", "stale", p.LinSeeds[0]})
				x.param("self-test duration", max(p.LinDuration, 20*time.Second).String())
			}
			x.note("Availability is the fraction of operations that succeeded. The clients are closed-loop: during a fault a client waits (up to its timeout) instead of failing many operations, so availability stays near 1 even when the cluster stalls; the number of operations in the same time says more.")
			for _, sys := range x.Systems {
				if f := x.gcStressFlags(sys); len(f) > 0 {
					x.note("%s's nodes run with %v so that GC rounds run throughout each check (a check writes too little to reach the default GC threshold).", sys, f)
				}
			}
			// Per nemesis, the first seed's operations over time with its
			// faults, one series per system.
			timeFigs := map[string]*plots.Figure{}
			var bad int
			for i, r := range runs {
				dir := filepath.Join(x.Dir, fmt.Sprintf("%s-%s-%s-s%d", r.system, r.nemesis, r.mode, r.seed))
				o := linearizability.Options{System: r.system, Nemeses: []string{r.nemesis}, Duration: p.LinDuration,
					Clients: p.LinClients, Seed: r.seed, ReadMode: r.mode, Out: dir, Binary: x.Binary}
				o.ExtraArgs = x.gcStressFlags(r.system)
				if r.mode == "stale" {
					o.Duration = max(p.LinDuration, 20*time.Second)
				}
				x.logf("[%d/%d] %s under %s (%s reads, seed %d) for %v", i+1, len(runs), r.system, r.nemesis, r.mode, r.seed, o.Duration)
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
				if r.mode == "linearizable" && r.seed == p.LinSeeds[0] {
					x.linOpsOverTime(timeFigs, r.system, r.nemesis, res, o.Duration)
				}
				verdict := res.Verdict
				if r.mode == "stale" {
					verdict += " (self-test: expected not linearizable)"
				}
				tbl.Rows = append(tbl.Rows, []string{r.system, r.nemesis, fmt.Sprint(r.seed), r.mode, verdict, fmt.Sprint(res.Ops.Total),
					fmt.Sprint(res.Ops.Ambiguous), f2(res.Availability), fmt.Sprint(res.FinalWrite.OK), fmt.Sprint(res.Convergence.OK), "`" + hist + "`"})
				x.logf("%s under %s (%s, seed %d): %s, %d ops, availability %.2f", r.system, r.nemesis, r.mode, r.seed, res.Verdict, res.Ops.Total, res.Availability)
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
					x.note("%s under %s, seed %d: NOT OK (%s): %v. History: %s", r.system, r.nemesis, r.seed, res.Verdict, res.Failures, hist)
				}
			}
			x.table(tbl)
			for _, n := range p.LinNemeses {
				if f := timeFigs[n]; f != nil {
					x.figure(*f)
				}
			}
			if bad > 0 {
				return errors.New(fmt.Sprint(bad, " check(s) did not come out as expected"))
			}
			return nil
		},
	}
}

// linOpsOverTime adds system's run under nemesis to its figure in figs:
// the operations that succeeded per second of the workload (from the
// saved history) and the faults the schedule injected, which it also
// records as the run's windows.
func (x *Run) linOpsOverTime(figs map[string]*plots.Figure, system, nemesis string, res *linearizability.Result, d time.Duration) {
	data, err := os.ReadFile(res.HistoryPath)
	var ops []linearizability.Op
	if err == nil {
		err = json.Unmarshal(data, &ops)
	}
	if err != nil {
		x.logf("%s under %s: history for the figure: %v", system, nemesis, err)
		return
	}
	secs := int(d / time.Second)
	per := make([]float64, secs)
	for _, op := range ops {
		if op.Status != linearizability.StatusOK {
			continue
		}
		if s := int(time.Duration(op.Return) / time.Second); s >= 0 && s < secs {
			per[s]++
		}
	}
	s := plots.Series{Name: system}
	for i, n := range per {
		s.X, s.Y = append(s.X, float64(i)), append(s.Y, n)
	}
	ws := faultWindows(res.Windows, 0)
	start := res.Started // the check's start; the workload's is a little later
	if len(res.Events) > 0 {
		start = res.Events[0].Wall.Add(-res.Events[0].Time)
	}
	x.recordWindows(RunWindows{Run: "check under " + nemesis + ", seed " + fmt.Sprint(res.Options.Seed), System: system,
		Start: start, Seconds: float64(secs), Windows: ws})
	f := figs[nemesis]
	if f == nil {
		f = &plots.Figure{Name: "linearizability-" + sanitize(nemesis), Title: "Operations that succeeded per second under " + nemesis + " (first seed)",
			Kind: plots.Lines, XLabel: "time (s)", YLabel: "operations (ops/s)",
			Caption: "Closed-loop clients; shaded: the faults as injected in each system's run (the same seeded schedule, so nearly the same times). Leader changes are not shown: the check's nodes are gone when it ends."}
		figs[nemesis] = f
	}
	f.Series = append(f.Series, s)
	f.Windows = append(f.Windows, figureWindows(ws, 0, system)...)
}
