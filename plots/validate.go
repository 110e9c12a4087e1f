package plots

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// maxSeries is how many series a figure may hold: beyond it the grey
// palettes (see style.go) start to repeat and readers can no longer tell
// series apart in black and white.
const maxSeries = 8

// safeStem reports whether name is a safe file stem: 1 to 100 ASCII
// letters, digits, '.', '_' and '-', starting with a letter or digit (so no
// "..", no hidden files, no path separators).
func safeStem(name string) bool {
	if len(name) == 0 || len(name) > 100 {
		return false
	}
	for i, r := range name {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !alnum && (i == 0 || r != '.' && r != '_' && r != '-') {
			return false
		}
	}
	return true
}

// Validate reports every problem of f at once (errors.Join of one error per
// problem, each naming the figure and, where it applies, the series):
//
//   - Name empty or not a safe file stem (letters, digits, '.', '_', '-',
//     at most 100 bytes, starting with a letter or digit); Kind unknown.
//   - Axis labels missing: YLabel always, XLabel for Lines and CDF (labels
//     carry the units, e.g. "latency (µs)").
//   - No series, more than 8 series, a series without a name, two series
//     with the same name.
//   - Bars: no Categories, len(Values) != len(Categories), a Missing index
//     out of range, len(Errors) not 0 and not len(Values), a negative error,
//     LogX, Marks (a nominal x axis has no positions), X or Y set.
//   - Lines and CDF: len(X) != len(Y) or no points, Values or Missing set;
//     Lines: len(Errors) or len(ErrorsUp) not 0 and not len(Y), a
//     negative error; CDF: Errors or ErrorsUp set, X not non-decreasing,
//     Y outside [0, 1] or not non-decreasing.
//   - Any NaN or infinite number (JSON cannot hold them anyway).
//   - LogX / LogY with a non-positive x / y (points, marks, hlines; for
//     Bars every present value and value minus its error must be > 0).
//   - A Mark or HLine without a label.
//   - Windows on a figure that is not Lines, or on a log x axis (time runs
//     linearly); a window of an unknown kind, with a non-finite start or
//     end, or ending before it starts.
//   - Runs (N): len(N) not 0 and not the number of values or points, an
//     n below 1, a value from n > 1 runs without a spread (Errors), a
//     spread without an n, N on a CDF.
//   - A linear axis whose values span more than two decades: the 90th
//     percentile of its positive values (bar values; line and CDF points,
//     marks and hlines not counted) over the 10th above 100, so that the
//     small values would be flat at the bottom (use LogX or LogY;
//     SpansDecades says which). The percentiles let a time series dip
//     towards zero (a stall) on a linear axis, and a Lines y axis with a
//     value at or below zero is not checked.
func (f Figure) Validate() error {
	v := validator{fig: f.Name}
	switch {
	case f.Name == "":
		v.add("", "empty name")
	case !safeStem(f.Name):
		v.add("", "name is not a safe file stem (letters, digits, '.', '_', '-'; at most 100 bytes; starting with a letter or digit)")
	}
	switch f.Kind {
	case Bars, Lines, CDF:
	case "":
		v.add("", "empty kind (want bars, lines or cdf)")
	default:
		v.add("", fmt.Sprintf("unknown kind %q (want bars, lines or cdf)", f.Kind))
	}
	if f.YLabel == "" {
		v.add("", "empty y label (name the axis with its unit)")
	}
	if f.XLabel == "" && (f.Kind == Lines || f.Kind == CDF) {
		v.add("", "empty x label (name the axis with its unit)")
	}
	if len(f.Series) == 0 {
		v.add("", "no series")
	}
	if len(f.Series) > maxSeries {
		v.add("", fmt.Sprintf("%d series; at most %d stay distinguishable in black and white", len(f.Series), maxSeries))
	}
	names := map[string]bool{}
	for i, s := range f.Series {
		if s.Name == "" {
			v.add("", fmt.Sprintf("series %d has no name", i))
		} else if names[s.Name] {
			v.add("", fmt.Sprintf("two series named %q", s.Name))
		}
		names[s.Name] = true
		switch f.Kind {
		case Bars:
			v.bars(f, s)
		case Lines, CDF:
			v.points(f, s)
		}
	}
	if f.Kind == Bars {
		if len(f.Categories) == 0 {
			v.add("", "bars without categories")
		}
		if f.LogX {
			v.add("", "log x on bars (the x axis is nominal)")
		}
		if len(f.Marks) > 0 {
			v.add("", "marks on bars (the x axis is nominal; use hlines)")
		}
	}
	for _, m := range f.Marks {
		v.mark("mark", m, f.LogX, "x")
	}
	for _, m := range f.HLines {
		v.mark("hline", m, f.LogY, "y")
	}
	v.windows(f)
	v.decades(f)
	return errors.Join(v.errs...)
}

// maxLinearDecadeSpan is how many decades the 10th to 90th percentile of
// an axis's positive values may span on a linear axis.
const maxLinearDecadeSpan = 2

func (v *validator) windows(f Figure) {
	if len(f.Windows) == 0 {
		return
	}
	if f.Kind != Lines {
		v.add("", fmt.Sprintf("windows on a %s figure (only lines over time have them)", f.Kind))
	}
	if f.LogX {
		v.add("", "windows on a log x axis (time runs linearly)")
	}
	for i, w := range f.Windows {
		switch {
		case w.Kind.Legend() == "":
			v.add("", fmt.Sprintf("window %d has unknown kind %q (want one of %v)", i, w.Kind, WindowKinds()))
		case !finite(w.Start) || !finite(w.End):
			v.add("", fmt.Sprintf("window %d (%s) from %v to %v", i, w.Kind, w.Start, w.End))
		case w.End < w.Start:
			v.add("", fmt.Sprintf("window %d (%s) ends at %v before it starts at %v", i, w.Kind, w.End, w.Start))
		}
	}
}

// runs checks the series' N against its count values and errors.
func (v *validator) runs(f Figure, name string, s Series, count int) {
	if len(s.N) == 0 {
		if f.Kind != CDF && (len(s.Errors) > 0 || len(s.ErrorsUp) > 0) {
			v.add(name, "error bars without n (say how many runs each value comes from)")
		}
		return
	}
	if f.Kind == CDF {
		v.add(name, "n on a cdf")
		return
	}
	if len(s.N) != count {
		v.add(name, fmt.Sprintf("%d n for %d values", len(s.N), count))
		return
	}
	for i, n := range s.N {
		switch {
		case n < 1:
			v.add(name, fmt.Sprintf("n[%d] = %d (must be >= 1)", i, n))
		case n > 1 && len(s.Errors) == 0 && len(s.ErrorsUp) == 0:
			v.add(name, fmt.Sprintf("value %d comes from %d runs but shows no spread (set errors, e.g. min..max)", i, n))
		}
	}
}

// decades reports a linear axis whose values span decades
// (SpansDecades).
func (v *validator) decades(f Figure) {
	xs, ys := f.axisValues()
	for _, a := range []struct {
		axis string
		vs   []float64
		log  bool
		flag string
	}{{"x", xs, f.LogX, "log_x"}, {"y", ys, f.LogY, "log_y"}} {
		if a.log {
			continue
		}
		if lo, hi, ok := percentileSpan(a.vs); ok && hi > lo*math.Pow10(maxLinearDecadeSpan) {
			v.add("", fmt.Sprintf("%s values span %.1f decades (10th..90th percentile %g..%g) on a linear axis; set %s",
				a.axis, math.Log10(hi/lo), lo, hi, a.flag))
		}
	}
}

// SpansDecades reports, per axis, whether its values span more than two
// decades between their 10th and 90th percentiles, so that Validate
// requires it to be logarithmic. The values are the bar values (present
// ones) of Bars and the points of Lines and CDF (CDF: x only); Lines with
// a y at or below zero are left out for y (a log axis cannot show it, and
// a series that falls to zero, a stall, reads right on a linear one).
func (f Figure) SpansDecades() (x, y bool) {
	xs, ys := f.axisValues()
	spans := func(vs []float64) bool {
		lo, hi, ok := percentileSpan(vs)
		return ok && hi > lo*math.Pow10(maxLinearDecadeSpan)
	}
	return spans(xs), spans(ys)
}

// axisValues returns the values SpansDecades looks at.
func (f Figure) axisValues() (xs, ys []float64) {
	nonPositive := false
	for _, s := range f.Series {
		switch f.Kind {
		case Bars:
			missing := map[int]bool{}
			for _, m := range s.Missing {
				missing[m] = true
			}
			for i, y := range s.Values {
				if !missing[i] {
					ys = append(ys, y)
				}
			}
		case Lines, CDF:
			xs = append(xs, s.X...)
			if f.Kind == Lines {
				ys = append(ys, s.Y...)
				nonPositive = nonPositive || slices.ContainsFunc(s.Y, func(y float64) bool { return y <= 0 })
			}
		}
	}
	if nonPositive {
		ys = nil
	}
	return xs, ys
}

// percentileSpan returns the 10th and 90th percentiles (nearest rank) of
// the positive finite values of vs; ok is false with fewer than two.
func percentileSpan(vs []float64) (lo, hi float64, ok bool) {
	pos := make([]float64, 0, len(vs))
	for _, x := range vs {
		if x > 0 && finite(x) {
			pos = append(pos, x)
		}
	}
	if len(pos) < 2 {
		return 0, 0, false
	}
	slices.Sort(pos)
	rank := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(pos)))) - 1
		return pos[max(0, min(len(pos)-1, i))]
	}
	return rank(0.1), rank(0.9), true
}

// validator collects the problems of one figure.
type validator struct {
	fig  string
	errs []error
}

func (v *validator) add(series, msg string) {
	switch {
	case series != "":
		v.errs = append(v.errs, fmt.Errorf("figure %q: series %q: %s", v.fig, series, msg))
	default:
		v.errs = append(v.errs, fmt.Errorf("figure %q: %s", v.fig, msg))
	}
}

func (v *validator) bars(f Figure, s Series) {
	n := s.Name
	if n == "" {
		n = "?"
	}
	if len(s.Values) != len(f.Categories) {
		v.add(n, fmt.Sprintf("%d values for %d categories", len(s.Values), len(f.Categories)))
	}
	missing := map[int]bool{}
	for _, m := range s.Missing {
		if m < 0 || m >= len(s.Values) {
			v.add(n, fmt.Sprintf("missing index %d out of range [0, %d)", m, len(s.Values)))
		}
		missing[m] = true
	}
	if len(s.Errors) != 0 && len(s.Errors) != len(s.Values) {
		v.add(n, fmt.Sprintf("%d errors for %d values", len(s.Errors), len(s.Values)))
	}
	if len(s.ErrorsUp) != 0 && len(s.ErrorsUp) != len(s.Values) {
		v.add(n, fmt.Sprintf("%d upper errors for %d values", len(s.ErrorsUp), len(s.Values)))
	}
	for i, e := range s.ErrorsUp {
		if !finite(e) || e < 0 {
			v.add(n, fmt.Sprintf("upper error %d is %v (must be finite and >= 0)", i, e))
		}
	}
	if len(s.X) > 0 || len(s.Y) > 0 {
		v.add(n, "x/y points on bars (use values)")
	}
	v.runs(f, n, s, len(s.Values))
	for i, x := range s.Values {
		if missing[i] {
			continue
		}
		if !finite(x) {
			v.add(n, fmt.Sprintf("value %d is %v", i, x))
		} else if f.LogY && x <= 0 {
			v.add(n, fmt.Sprintf("value %d is %v on a log y axis (must be > 0)", i, x))
		}
	}
	for i, e := range s.Errors {
		switch {
		case !finite(e):
			v.add(n, fmt.Sprintf("error %d is %v", i, e))
		case e < 0:
			v.add(n, fmt.Sprintf("error %d is negative (%v)", i, e))
		case f.LogY && i < len(s.Values) && !missing[i] && s.Values[i]-e <= 0:
			v.add(n, fmt.Sprintf("error bar %d reaches %v on a log y axis (must stay > 0)", i, s.Values[i]-e))
		}
	}
}

func (v *validator) points(f Figure, s Series) {
	n := s.Name
	if n == "" {
		n = "?"
	}
	if len(s.X) != len(s.Y) {
		v.add(n, fmt.Sprintf("%d x values for %d y values", len(s.X), len(s.Y)))
	}
	if len(s.X) == 0 && len(s.Y) == 0 {
		v.add(n, "no points")
	}
	if len(s.Values) > 0 || len(s.Missing) > 0 {
		v.add(n, fmt.Sprintf("values/missing on a %s figure (use x and y)", f.Kind))
	}
	switch {
	case f.Kind == CDF && (len(s.Errors) > 0 || len(s.ErrorsUp) > 0):
		v.add(n, "errors on a cdf")
	case len(s.Errors) != 0 && len(s.Errors) != len(s.Y):
		v.add(n, fmt.Sprintf("%d errors for %d points", len(s.Errors), len(s.Y)))
	case len(s.ErrorsUp) != 0 && len(s.ErrorsUp) != len(s.Y):
		v.add(n, fmt.Sprintf("%d upper errors for %d points", len(s.ErrorsUp), len(s.Y)))
	}
	for i, e := range s.Errors {
		if !finite(e) || e < 0 {
			v.add(n, fmt.Sprintf("error %d is %v (must be finite and >= 0)", i, e))
		}
	}
	for i, e := range s.ErrorsUp {
		if !finite(e) || e < 0 {
			v.add(n, fmt.Sprintf("upper error %d is %v (must be finite and >= 0)", i, e))
		}
	}
	v.runs(f, n, s, len(s.Y))
	v.coords(f, n, "x", s.X, f.LogX)
	v.coords(f, n, "y", s.Y, f.LogY)
	if f.Kind != CDF {
		return
	}
	for i, y := range s.Y {
		if finite(y) && (y < 0 || y > 1) {
			v.add(n, fmt.Sprintf("cdf y[%d] = %v outside [0, 1]", i, y))
			break
		}
	}
	for _, c := range []struct {
		axis string
		vs   []float64
	}{{"x", s.X}, {"y", s.Y}} {
		for i := 1; i < len(c.vs); i++ {
			if c.vs[i] < c.vs[i-1] {
				v.add(n, fmt.Sprintf("cdf %s decreases at point %d (%v < %v)", c.axis, i, c.vs[i], c.vs[i-1]))
				break
			}
		}
	}
}

// coords reports the first non-finite value of vs and, on a log axis, the
// first non-positive one (one error each, not one per point).
func (v *validator) coords(f Figure, series, axis string, vs []float64, log bool) {
	for i, x := range vs {
		if !finite(x) {
			v.add(series, fmt.Sprintf("%s[%d] is %v", axis, i, x))
			break
		}
	}
	if !log {
		return
	}
	for i, x := range vs {
		if x <= 0 {
			v.add(series, fmt.Sprintf("%s[%d] = %v on a log %s axis (must be > 0)", axis, i, x, axis))
			break
		}
	}
}

func (v *validator) mark(what string, m Mark, log bool, axis string) {
	switch {
	case !finite(m.At):
		v.add("", fmt.Sprintf("%s %q at %v", what, m.Label, m.At))
	case log && m.At <= 0:
		v.add("", fmt.Sprintf("%s %q at %v on a log %s axis (must be > 0)", what, m.Label, m.At, axis))
	}
	if m.Label == "" {
		v.add("", fmt.Sprintf("%s at %v has no label", what, m.At))
	}
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
