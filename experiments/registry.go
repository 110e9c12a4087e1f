package experiments

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/nezha-harness/nezha/internal/cmdline"
)

// The registry of named experiments: what each is and shows, which
// profiles and systems it needs, and looking them up by name.

// Experiment is one named experiment.
type Experiment struct {
	// Name is what `experiment run NAME` takes.
	Name string
	// Title heads its report section.
	Title string
	// Shows says in one sentence what it shows.
	Shows string
	// NeedsOwnClusters: the experiment reads the nodes' counters through
	// their agents or kills nodes, so it cannot run against -servers.
	NeedsOwnClusters bool
	// SmallDisk: the experiment writes little (at most a few GiB), so the
	// profile's MinFreeDiskBytes is not required when only such
	// experiments run.
	SmallDisk bool
	// UsesReadBeds: the experiment reads the shared read beds (one loaded
	// cluster per system, kept from one such experiment to the next).
	UsesReadBeds bool
	// WithOptional: the experiment also runs the optional systems of the
	// run (RunOptions.OptionalSystems, the registry's Optional systems when
	// -systems was not given): the paper compares Dwisckey in its GET,
	// SCAN and YCSB figures, so get-zipf, scan and ycsb run it.
	WithOptional bool
	// OutsideQuickAll: `run all` with the quick profile skips it (it would
	// add minutes to the quickstart); naming it runs it.
	OutsideQuickAll bool
	// Campaign: a fault campaign of minutes per system (the crash
	// campaign). `run all` runs it only with the paper profile, so that
	// quick and standard keep to their time budgets; naming it runs it
	// with any profile.
	Campaign bool
	// QuickDuration is about how long it took with -profile quick on the
	// default systems, on a 2-core machine (0: not measured); `experiment
	// list` shows it. The figures come from the runs recorded in
	// docs/results/2026-12-05-quick-*.md, on a machine other work shared.
	QuickDuration time.Duration
	run           func(ctx context.Context, x *Run) error
}

// All returns every experiment in the order `run all` runs them.
func All() []Experiment {
	all := []Experiment{
		diskLimit(), putVsize(), putScale(), getZipf(), scan(), ycsbExperiment(), amplification(), gcExperiment(), latencyGCExperiment(), linearizabilityExperiment(), crashExperiment(),
		embeddedExperiment(),
	}
	// Rounded from the recorded quick runs (see QuickDuration).
	quick := map[string]time.Duration{
		"disk-limit": 3 * time.Second, "put-vsize": 2 * time.Minute, "put-scale": 11 * time.Minute, "get-zipf": 5 * time.Minute,
		"scan": 3 * time.Minute, "ycsb": 3 * time.Minute, "amplification": 3 * time.Minute, "gc": 3 * time.Minute, "latency-gc": 7 * time.Minute,
		"linearizability": 90 * time.Second, "crash": 8 * time.Minute, "embedded": 90 * time.Second,
	}
	for i := range all {
		all[i].QuickDuration = quick[all[i].Name]
	}
	return all
}

// Lookup returns the named experiments ("all" expands to All), or a usage
// error naming the unknown ones.
func Lookup(names []string) ([]Experiment, error) { return LookupFor(names, "") }

// LookupFor is Lookup for a profile: with "quick", "all" leaves out the
// experiments marked OutsideQuickAll, and with "quick" or "standard" the
// ones marked Campaign (they still run when named).
func LookupFor(names []string, profile string) ([]Experiment, error) {
	all := All()
	byName := map[string]Experiment{}
	var known []string
	for _, e := range all {
		byName[e.Name] = e
		known = append(known, e.Name)
	}
	var out []Experiment
	seen := map[string]bool{}
	var unknown []string
	for _, n := range names {
		if n == "all" {
			for _, e := range all {
				if e.OutsideQuickAll && profile == "quick" || e.Campaign && (profile == "quick" || profile == "standard") {
					continue
				}
				if !seen[e.Name] {
					seen[e.Name] = true
					out = append(out, e)
				}
			}
			continue
		}
		e, ok := byName[n]
		if !ok {
			unknown = append(unknown, n)
			continue
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, e)
		}
	}
	if len(unknown) > 0 {
		return nil, cmdline.Usagef("unknown experiment %s (known: %s, all)", strings.Join(unknown, ", "), strings.Join(known, ", "))
	}
	if len(out) == 0 {
		return nil, cmdline.Usagef("no experiment named (known: %s, all)", strings.Join(known, ", "))
	}
	return out, nil
}

// withOptional returns syss followed by the systems of optional that it
// does not hold.
func withOptional(syss, optional []string) []string {
	out := slices.Clone(syss)
	for _, s := range optional {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
