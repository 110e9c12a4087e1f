package plots

import (
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// allMarkersUpTo is the largest series that gets a marker on every point;
// longer series get markersPerSeries markers.
const (
	allMarkersUpTo   = 20
	markersPerSeries = 10
)

// buildLines makes a Lines or CDF figure: per series a plotter.Line (a
// post-step line for CDF) and a plotter.Scatter of its markers, optional
// y error bars (Lines), then the marks and hlines.
func buildLines(f Figure, l layout) built {
	p := newPlot(f, l)
	if len(f.Windows) > 0 {
		p.Add(windowShades{f.Windows}) // behind the data
	}
	xr, yr := emptyRange(), emptyRange()
	if f.Kind == CDF {
		if f.LogY {
			yr.add(1)
		} else {
			yr.add(0, 1)
		}
	}
	ref := refLines{marks: f.Marks, hlines: f.HLines, noteSize: l.noteSize}
	var legend []legendEntry
	for i, s := range f.Series {
		st := lineStyleOf(i)
		xys := make(plotter.XYs, len(s.X))
		for k := range s.X {
			xys[k] = plotter.XY{X: s.X[k], Y: s.Y[k]}
			xr.add(s.X[k])
			down, up := s.errorExtents(k)
			if f.LogY { // Validate checked y > 0, not y - down
				yr.add(s.Y[k], s.Y[k]+up)
				if s.Y[k]-down > 0 {
					yr.add(s.Y[k] - down)
				}
			} else {
				yr.add(s.Y[k]-down, s.Y[k]+up)
			}
		}
		ref.polys = append(ref.polys, drawnPath(xys, f.Kind == CDF))
		line, err := plotter.NewLine(xys)
		if err != nil {
			panic(err) // finite values (Validate)
		}
		line.LineStyle = st.line()
		if f.Kind == CDF {
			line.StepStyle = plotter.PostStep
		}
		p.Add(line)
		if len(s.Errors) > 0 || len(s.ErrorsUp) > 0 {
			eb, err := plotter.NewYErrorBars(xyErrs{xys, s})
			if err != nil {
				panic(err)
			}
			eb.LineStyle = draw.LineStyle{Color: st.color(), Width: vg.Points(0.8)}
			eb.CapWidth = vg.Points(5)
			p.Add(eb)
			if nVaries(s) {
				tops := make([]float64, len(s.Y))
				for k := range s.Y {
					_, up := s.errorExtents(k)
					tops[k] = s.Y[k] + up
				}
				p.Add(runLabels{x: s.X, y: tops, n: s.N, noteSize: l.noteSize})
			}
		}
		marks := make(plotter.XYs, 0, markersPerSeries)
		for _, k := range markerIndexes(len(xys), i, len(f.Series)) {
			marks = append(marks, xys[k])
		}
		sc, err := plotter.NewScatter(marks)
		if err != nil {
			panic(err)
		}
		sc.GlyphStyle = st.glyphStyle()
		p.Add(sc)
		legend = append(legend, legendEntry{name: legendName(s), width: vg.Points(32), thumb: func(c draw.Canvas, r vg.Rectangle) {
			y := (r.Min.Y + r.Max.Y) / 2
			c.StrokeLine2(st.line(), r.Min.X, y, r.Max.X, y)
			c.DrawGlyph(st.glyphStyle(), vg.Point{X: (r.Min.X + r.Max.X) / 2, Y: y})
		}})
	}
	for _, m := range f.Marks {
		xr.add(m.At)
	}
	for _, h := range f.HLines {
		yr.add(h.At)
	}
	switch {
	case f.Kind == CDF && !f.LogY:
		p.Y.Min, p.Y.Max = 0, 1.02
		p.Y.Tick.Marker = fractionTicks{}
		if yr.lo < 0 || yr.hi > 1 { // hlines outside [0, 1]
			yr.set(&p.Y, false, 0.02, 0.05)
			p.Y.Tick.Marker = linearTicks{}
		}
	case f.Kind == CDF:
		yr.set(&p.Y, true, 0.02, 0.02)
	case f.LogY:
		yr.set(&p.Y, true, 0.05, 0.08)
	default:
		if yr.lo > 0 { // throughput, latency, sizes: start at 0
			yr.lo = 0
		}
		yr.set(&p.Y, false, 0, 0.08)
		if yr.lo < 0 {
			yr.set(&p.Y, false, 0.05, 0.08)
		}
	}
	if f.LogX {
		xr.set(&p.X, true, 0.02, 0.02)
	} else {
		xr.set(&p.X, false, 0, 0)
	}
	// Marks and hlines go on top of the data.
	p.Add(ref)
	b := built{p: p, legend: append(legend, windowLegend(f.Windows)...)}
	if len(f.Marks) > 0 && f.Kind == Lines {
		b.finish = func(data draw.Canvas) { markHeadroom(p, f, data, l.noteSize) }
	}
	return b
}

// drawnPath is the polyline a series is drawn as, in data units: its
// points, with the corners of the steps for a CDF (post-step: across, then
// up).
func drawnPath(xys plotter.XYs, steps bool) []dataPt {
	path := make([]dataPt, 0, 2*len(xys))
	for k, q := range xys {
		if steps && k > 0 {
			path = append(path, dataPt{q.X, xys[k-1].Y})
		}
		path = append(path, dataPt{q.X, q.Y})
	}
	return path
}

// markHeadroom raises the top of the y axis so that the upright mark
// labels, drawn at the top of the data area, sit above the data instead
// of over it.
func markHeadroom(p *plot.Plot, f Figure, data draw.Canvas, noteSize float64) {
	sty := textStyle(noteSize, 0)
	var l vg.Length
	for _, m := range f.Marks {
		l = max(l, sty.Width(m.Label))
	}
	h := data.Size().Y
	frac := float64((l + 4*notePad) / h) // part of the height the labels take
	if frac <= 0 || frac > 0.5 {
		return
	}
	if f.LogY {
		lo, hi := math.Log(p.Y.Min), math.Log(p.Y.Max)
		p.Y.Max = math.Exp(lo + (hi-lo)/(1-frac))
		return
	}
	p.Y.Max = p.Y.Min + (p.Y.Max-p.Y.Min)/(1-frac)
}

// markerIndexes picks the points of series i (of n) that get a marker:
// all of them for short series, else markersPerSeries spread evenly and
// shifted by i/n of the spacing so series do not hide each other's markers.
func markerIndexes(points, i, n int) []int {
	if points <= allMarkersUpTo {
		idx := make([]int, points)
		for k := range idx {
			idx[k] = k
		}
		return idx
	}
	step := float64(points) / markersPerSeries
	idx := make([]int, 0, markersPerSeries)
	for k := range markersPerSeries {
		j := int(step * (float64(k) + (float64(i)+0.5)/float64(n)))
		idx = append(idx, min(j, points-1))
	}
	return idx
}

// xyErrs gives plotter.NewYErrorBars a series' errors per point.
type xyErrs struct {
	plotter.XYs
	s Series
}

// YError implements plotter.YErrorer.
func (e xyErrs) YError(i int) (float64, float64) { return e.s.errorExtents(i) }

// fractionTicks labels a [0, 1] axis every 0.2 with minor ticks every 0.1.
type fractionTicks struct{}

// Ticks implements plot.Ticker.
func (fractionTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for k := 0; k <= 10; k++ {
		t := plot.Tick{Value: float64(k) / 10}
		if k%2 == 0 {
			t.Label = strconv.FormatFloat(t.Value, 'g', -1, 64)
		}
		ts = append(ts, t)
	}
	return ts
}
