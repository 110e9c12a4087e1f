package experiments

import "context"

// interleaved runs systems in interleaved rounds, as put-scale's headline
// point and its paper's-conditions rows do: in each round, every system
// that wants another run (want) runs once, in an order rotated by
// offset+round so that no system always goes first; rounds stop when no
// system wants one, after maxRounds, or when ctx is done. A system whose
// run failed (run's result says so) is not run again. It returns every
// run's result, in the order run.
//
// want(round, sys, t) sees t, the tally of sys's earlier runs.
func interleaved[R any](ctx context.Context, systems []string, maxRounds, offset int,
	want func(round int, sys string, t tally) bool,
	run func(round int, sys string) (result R, seconds float64, failed bool)) []R {
	tallies := map[string]tally{}
	var out []R
	for round := 0; round < maxRounds && ctx.Err() == nil; round++ {
		var syss []string
		for _, sys := range systems {
			if t := tallies[sys]; !t.Failed && want(round, sys, t) {
				syss = append(syss, sys)
			}
		}
		if len(syss) == 0 {
			break
		}
		for _, sys := range rotate(syss, offset+round) {
			r, seconds, failed := run(round, sys)
			out = append(out, r)
			t := tallies[sys]
			t.Runs++
			t.Failed = t.Failed || failed
			if !failed {
				t.Seconds += seconds
			}
			tallies[sys] = t
		}
	}
	return out
}

// tally counts one system's runs in interleaved.
type tally struct {
	// Runs is how many runs it had; Seconds, the measured seconds of
	// those that succeeded.
	Runs    int
	Seconds float64
	// Failed: a run failed.
	Failed bool
}

// rotate returns ss rotated left by k: the order systems run in changes
// from one size to the next.
func rotate(ss []string, k int) []string {
	if len(ss) == 0 {
		return nil
	}
	k %= len(ss)
	return append(append([]string(nil), ss[k:]...), ss[:k]...)
}
