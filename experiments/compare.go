package experiments

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/nezha-harness/nezha/internal/cmdline"
	"golang.org/x/perf/benchmath"
)

// Direction says whether a metric is better when higher or when lower.
type Direction int

// The directions of a metric (see MetricDirection).
const (
	// Unranked metrics (levels, GC rounds, machine busy, data sizes) are
	// shown but never gate.
	Unranked Direction = iota
	HigherIsBetter
	LowerIsBetter
)

func (d Direction) String() string {
	switch d {
	case HigherIsBetter:
		return "higher is better"
	case LowerIsBetter:
		return "lower is better"
	}
	return "unranked"
}

// The direction rules, by a metric's name before its first "/" (e.g.
// "put_mb_per_sec" of "put_mb_per_sec/nezha/256"); lower-is-better is
// tried first, since "get_ops_per_sec_disk_read_kb_per_op" also ends in a
// throughput's words.
var (
	lowerIsBetterRE  = regexp.MustCompile(`write_amp|space_amp|gc_space_|disk_read_kb_per_op|cpu_s_per_gb|cpu_us_per_op|latency|_p50|_p99|_p999|_us$|_ms$|recover|lost_writes`)
	higherIsBetterRE = regexp.MustCompile(`per_sec$|_ratio$|_vs_|^put_headline$`)
)

// MetricDirection decides by name whether metric (a Result.Metrics key) is
// better higher (throughput: *_per_sec, ratios and *_vs_* over a baseline,
// put_headline), lower (write and space amplification, device bytes read
// per operation, CPU seconds per GB or microseconds per operation, latencies, crash recovery times, lost
// writes) or neither.
func MetricDirection(metric string) Direction {
	base, _, _ := strings.Cut(metric, "/")
	switch {
	case lowerIsBetterRE.MatchString(base):
		return LowerIsBetter
	case higherIsBetterRE.MatchString(base):
		return HigherIsBetter
	}
	return Unranked
}

// CompareOptions configure Compare.
type CompareOptions struct {
	// Metric selects the metrics that gate (a regular expression matched
	// against "experiment/metric-key", e.g. "put-vsize/put_mb_per_sec/nezha/256").
	// Default "" selects every ranked metric.
	Metric *regexp.Regexp
	// ThresholdPct is the change, in percent of A's value, beyond which a
	// selected metric that got worse in B is a regression. Default 10.
	ThresholdPct float64
	// Systems are the -system names, to split a metric key into system
	// and metric.
	Systems []string
}

// DefaultCompareThresholdPct is CompareOptions.ThresholdPct's default.
const DefaultCompareThresholdPct = 10.0

// Comparison is one metric of one experiment in two results directories.
type Comparison struct {
	Experiment, System, Metric string // Metric is the key without the system, e.g. "put_mb_per_sec/256"
	Key                        string // the Result.Metrics key
	A, B                       float64
	InA, InB                   bool
	// ChangePct is (B-A)/A in percent (NaN if A is 0 or either is missing).
	ChangePct float64
	Direction Direction
	// Spread is the per-run spread where both sides have samples, else
	// "single value".
	Spread string
	// Gated: the metric matches CompareOptions.Metric and is ranked.
	Gated bool
	// Regressed: gated, and worse in B by more than the threshold (or
	// missing in B).
	Regressed bool
}

// CompareRequest is one `nezha experiment compare`.
type CompareRequest struct {
	// Dirs are the two results directories, A (before) and B (after).
	Dirs []string
	// Metric is a regular expression over experiment/metric selecting the
	// metrics that gate the result; "": every ranked metric.
	Metric string
	// ThresholdPct is the percent change of a selected metric, in its
	// worse direction, that counts as a regression (>= 0; the command's
	// default is DefaultCompareThresholdPct).
	ThresholdPct float64
	// Systems are the known system names (metric keys end in /SYSTEM).
	Systems []string
}

// Validate reports every problem of r at once, as one line: not two
// directories, a threshold that is not a finite percentage >= 0, a Metric
// that is not a regular expression. (CompareDirs also reports directories
// without results.)
func (r CompareRequest) Validate() error {
	if err := errors.Join(r.problems()...); err != nil {
		return cmdline.OneLine("experiment compare", err)
	}
	return nil
}

func (r CompareRequest) problems() []error {
	var errs []error
	if len(r.Dirs) != 2 {
		errs = append(errs, cmdline.Usagef("want two results directories DIR_A DIR_B, got %d", len(r.Dirs)))
	}
	if t := r.ThresholdPct; math.IsNaN(t) || math.IsInf(t, 0) || t < 0 {
		errs = append(errs, cmdline.Usagef("-threshold %v: want a percentage >= 0", t))
	}
	if _, err := regexp.Compile(r.Metric); err != nil {
		errs = append(errs, cmdline.Usagef("-metric: %v", err))
	}
	return errs
}

// CompareDirs reads both sides of r, writes the Markdown comparison
// (WriteComparison) to w, and fails if a selected metric regressed beyond
// the threshold (an ordinary error: exit 1). Bad requests (not two
// readable results directories, a bad threshold or regular expression, a
// Metric that selects nothing) are one-line *cmdline.UsageError.
func CompareDirs(w io.Writer, r CompareRequest) error {
	dirs, threshold, metric := r.Dirs, &r.ThresholdPct, &r.Metric
	errs := r.problems()
	re, _ := regexp.Compile(*metric) // problems reported a bad one
	var err error
	var sides [2]map[string]*Result
	for i, d := range dirs {
		if i >= 2 {
			break
		}
		if sides[i], err = ReadResults(d); err != nil {
			errs = append(errs, cmdline.Usagef("%v", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return cmdline.OneLine("experiment compare", err)
	}
	cs := Compare(sides[0], sides[1], CompareOptions{Metric: re, ThresholdPct: *threshold, Systems: r.Systems})
	if err := WriteComparison(w, dirs[0], dirs[1], cs, *threshold); err != nil {
		return err
	}
	if err := WriteHeadlineComparison(w, sides[0], sides[1]); err != nil {
		return err
	}
	if err := WriteBoundComparison(w, sides[0], sides[1]); err != nil {
		return err
	}
	var worse, missing []string
	gated := 0
	for _, c := range cs {
		if c.Gated {
			gated++
		}
		switch {
		case c.Regressed && !c.InB:
			missing = append(missing, c.Experiment+"/"+c.Key)
		case c.Regressed:
			worse = append(worse, c.Experiment+"/"+c.Key)
		}
	}
	if gated == 0 {
		return cmdline.Usagef("experiment compare: -metric %q selects no ranked metric present in %s", *metric, dirs[0])
	}
	var parts []string
	if len(worse) > 0 {
		parts = append(parts, fmt.Sprintf("%d regressed beyond %g%%: %s", len(worse), *threshold, firstFew(worse, "REGRESSION")))
	}
	if len(missing) > 0 {
		parts = append(parts, fmt.Sprintf("%d missing in B (a system or experiment B did not run, or one that failed there): %s", len(missing), firstFew(missing, "MISSING IN B")))
	}
	if len(parts) > 0 {
		return fmt.Errorf("experiment compare: of %d selected metrics, %s", gated, strings.Join(parts, "; "))
	}
	return nil
}

// firstFew joins the first five names, saying how many more the table
// marks with verdict.
func firstFew(names []string, verdict string) string {
	if len(names) > 5 {
		names = append(names[:5:5], fmt.Sprintf("and %d more (%s in the table)", len(names)-5, verdict))
	}
	return strings.Join(names, ", ")
}

// ReadResults reads DIR/*/result.json (and DIR/result.json, if DIR is one
// experiment's directory), keyed by experiment name. It fails if there is
// none or one is not a Result.
func ReadResults(dir string) (map[string]*Result, error) {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	paths, _ := filepath.Glob(filepath.Join(dir, "*", "result.json"))
	if _, err := os.Stat(filepath.Join(dir, "result.json")); err == nil {
		paths = append(paths, filepath.Join(dir, "result.json"))
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%s holds no result.json (want a results directory of `experiment run`)", dir)
	}
	out := map[string]*Result{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var r Result
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %v", p, err)
		}
		if r.Name == "" {
			r.Name = filepath.Base(filepath.Dir(p))
		}
		out[r.Name] = &r
	}
	return out, nil
}

// Compare pairs every metric of every experiment present in a or b.
// Sorted by experiment, system, metric.
func Compare(a, b map[string]*Result, o CompareOptions) []Comparison {
	var out []Comparison
	names := map[string]bool{}
	for n := range a {
		names[n] = true
	}
	for n := range b {
		names[n] = true
	}
	for name := range names {
		ra, rb := a[name], b[name]
		keys := map[string]bool{}
		for _, r := range []*Result{ra, rb} {
			if r != nil {
				for k := range r.Metrics {
					keys[k] = true
				}
			}
		}
		for k := range keys {
			c := Comparison{Experiment: name, Key: k, ChangePct: math.NaN(), Direction: MetricDirection(k), Spread: "single value"}
			c.System, c.Metric = splitSystem(k, o.Systems)
			var sa, sb []float64
			if ra != nil {
				c.A, c.InA = ra.Metrics[k]
				sa = ra.Samples[k]
			}
			if rb != nil {
				c.B, c.InB = rb.Metrics[k]
				sb = rb.Samples[k]
			}
			if c.InA && c.InB && c.A != 0 {
				c.ChangePct = 100 * (c.B - c.A) / math.Abs(c.A)
			}
			if len(sa) > 1 && len(sb) > 1 {
				c.Spread = spread(sa, sb)
			}
			c.Gated = c.InA && c.Direction != Unranked && (o.Metric == nil || o.Metric.MatchString(name+"/"+k))
			worse := c.ChangePct
			if c.Direction == HigherIsBetter {
				worse = -worse
			}
			c.Regressed = c.Gated && (!c.InB || worse > o.ThresholdPct)
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		x, y := out[i], out[j]
		if x.Experiment != y.Experiment {
			return x.Experiment < y.Experiment
		}
		if x.System != y.System {
			return x.System < y.System
		}
		return x.Metric < y.Metric
	})
	return out
}

// splitSystem splits a metric key at its system element: for
// "put_mb_per_sec/nezha/256", ("nezha", "put_mb_per_sec/256"); "-" for a
// key that names no system.
func splitSystem(key string, known []string) (system, metric string) {
	parts := strings.Split(key, "/")
	for i, p := range parts[1:] {
		if slices.Contains(known, p) {
			return p, strings.Join(slices.Delete(slices.Clone(parts), i+1, i+2), "/")
		}
	}
	return "-", key
}

// spread is benchstat's summary of each side (median ± the 95 %
// confidence interval, or the range when too few runs give an interval)
// and its Mann-Whitney U-test of A against B (golang.org/x/perf/benchmath,
// the statistics of cmd/benchstat).
func spread(a, b []float64) string {
	sa, sb := benchmath.NewSample(a, &benchmath.DefaultThresholds), benchmath.NewSample(b, &benchmath.DefaultThresholds)
	cmp := benchmath.AssumeNothing.Compare(sa, sb)
	verdict := "significant"
	if cmp.P > cmp.Alpha {
		verdict = "not significant"
	}
	return fmt.Sprintf("%s / %s (%s, %s)", sideSpread(sa), sideSpread(sb), cmp.String(), verdict)
}

func sideSpread(s *benchmath.Sample) string {
	sum := benchmath.AssumeNothing.Summary(s, 0.95)
	if !math.IsInf(sum.Lo, 0) && !math.IsInf(sum.Hi, 0) {
		return "±" + sum.PctRangeString()
	}
	// Too few runs for a 95 % interval: the range around the median.
	lo, hi := slices.Min(s.Values), slices.Max(s.Values)
	if sum.Center == 0 {
		return "range 0"
	}
	return fmt.Sprintf("range ±%.0f%%", 100*math.Max(hi/sum.Center-1, 1-lo/sum.Center))
}

// WriteComparison prints cs as one Markdown table per experiment.
func WriteComparison(w io.Writer, dirA, dirB string, cs []Comparison, thresholdPct float64) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Comparison\n\nA: %s\nB: %s\n\nchange = (B - A) / A; a selected metric (gate) that got worse by more than %g%% is a REGRESSION. Spread: benchstat's (golang.org/x/perf/benchmath) per-run spread of A / B and its U-test, where the result holds per-run samples.\n", dirA, dirB, thresholdPct)
	exp := ""
	for _, c := range cs {
		if c.Experiment != exp {
			exp = c.Experiment
			fmt.Fprintf(&b, "\n## %s\n\n| system | metric | A | B | change | spread | better | verdict |\n|---|---|---|---|---|---|---|---|\n", exp)
		}
		verdict := ""
		switch {
		case c.Regressed && !c.InB:
			verdict = "**MISSING IN B**"
		case c.Regressed:
			verdict = "**REGRESSION**"
		case c.Gated:
			verdict = "ok"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", c.System, c.Metric, value(c.A, c.InA), value(c.B, c.InB),
			change(c), c.Spread, map[Direction]string{HigherIsBetter: "higher", LowerIsBetter: "lower", Unranked: "-"}[c.Direction], verdict)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteBoundComparison prints, beside each side's headline PUT ratio over
// original, what bounded each headline system on each side (put-scale's
// Bounds): two ratios compare only when the same resources bounded them.
// It prints nothing when neither side has bounds.
func WriteBoundComparison(w io.Writer, a, b map[string]*Result) error {
	ra, rb := a["put-scale"], b["put-scale"]
	var systems []string
	for _, r := range []*Result{ra, rb} {
		if r == nil {
			continue
		}
		for _, bd := range r.Bounds {
			if !slices.Contains(systems, bd.System) {
				systems = append(systems, bd.System)
			}
		}
	}
	if len(systems) == 0 {
		return nil
	}
	side := func(r *Result, sys string) (ratio, bound string) {
		ratio, bound = "-", "-"
		if r == nil {
			return
		}
		if v, ok := r.Metrics["put_headline/"+sys]; ok && r.Metrics["put_headline/"+sysOriginal] > 0 && sys != sysOriginal {
			ratio = fmt.Sprintf("%.2fx", v/r.Metrics["put_headline/"+sysOriginal])
		}
		if i := slices.IndexFunc(r.Bounds, func(bd Bound) bool { return bd.System == sys }); i >= 0 {
			bound = fmt.Sprintf("%s (%s)", r.Bounds[i].Bound, r.Bounds[i].Backend)
		}
		return ratio, bound
	}
	return writeSides(w, "What bounded the headline PUT (put-scale)",
		"Two runs' ratios compare when the same resources bounded each system in both (`experiment run`'s report gives each bound's numbers).",
		[5]string{"system", "A: / original", "A: bound", "B: / original", "B: bound"}, systems,
		func(a bool, sys string) (string, string) { return side(map[bool]*Result{true: ra, false: rb}[a], sys) })
}

// writeSides writes a Markdown section: heading, text, and a table of one
// row per name, with two cells of side A then two of side B (cells).
func writeSides(w io.Writer, heading, text string, columns [5]string, names []string, cells func(a bool, name string) (string, string)) error {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n## %s\n\n%s\n\n| %s |\n|---|---|---|---|---|\n", heading, text, strings.Join(columns[:], " | "))
	for _, n := range names {
		a1, a2 := cells(true, n)
		b1, b2 := cells(false, n)
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s |\n", n, a1, a2, b1, b2)
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

// WriteHeadlineComparison prints each side's headline PUT rows under our
// conditions (Headlines): nezha and nezha-nogc over original, nezha over
// each other baseline that ran as a headline system (lsm-raft), each with
// the node CPU per GiB of both systems. It prints nothing when neither
// side has them.
func WriteHeadlineComparison(w io.Writer, a, b map[string]*Result) error {
	// The rows in Headlines' order, A's first.
	var names []string
	rows := func(side map[string]*Result) map[string]Headline {
		out := map[string]Headline{}
		for _, h := range Headlines(slices.Collect(maps.Values(side))) {
			if h.Workload == "PUT" && h.Condition == "" && h.Have {
				n := h.System + " over " + h.against()
				out[n] = h
				if !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
		}
		return out
	}
	ra, rb := rows(a), rows(b)
	if len(names) == 0 {
		return nil
	}
	return writeSides(w, "Headline PUT (put-scale)",
		"Medians of each side's interleaved headline runs, with the nodes' CPU seconds per GiB written of both systems of each row.",
		[5]string{"row", "A", "A: node CPU", "B", "B: node CPU"}, names,
		func(a bool, n string) (string, string) {
			h, ok := map[bool]map[string]Headline{true: ra, false: rb}[a][n]
			if !ok {
				return "-", "-"
			}
			return fmt.Sprintf("%.2fx", h.Ratio), cmp.Or(h.cpuText(), "-")
		})
}

func value(v float64, ok bool) string {
	if !ok {
		return "missing"
	}
	return fmt.Sprintf("%.4g", v)
}

func change(c Comparison) string {
	if math.IsNaN(c.ChangePct) {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", c.ChangePct)
}
