package plots

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// groupFraction is the part of a category's width its group of bars takes.
const groupFraction = 0.8

// buildBars makes a grouped bar chart: one plotter.BarChart per run of
// present values of a series (a Missing value splits the run, so nothing is
// drawn there), all of a series sharing its Offset; then one barOverlay per
// series for hatching, "n/a" and error bars. Widths and offsets are in
// canvas units, so they are set in finish once the data area is known.
func buildBars(f Figure, l layout) built {
	p := newPlot(f, l)
	n := len(f.Series)
	var charts [][]*plotter.BarChart
	var overlays []*barOverlay
	yr := emptyRange()
	if !f.LogY {
		yr.add(0)
	}
	ref := refLines{hlines: f.HLines, noteSize: l.noteSize}
	for i, s := range f.Series {
		st := barStyleOf(i)
		missing := make([]bool, len(s.Values))
		for _, m := range s.Missing {
			missing[m] = true
		}
		var cs []*plotter.BarChart
		for start := 0; start < len(s.Values); {
			if missing[start] {
				start++
				continue
			}
			end := start
			for end < len(s.Values) && !missing[end] {
				end++
			}
			bc, err := plotter.NewBarChart(plotter.Values(s.Values[start:end]), 1)
			if err != nil {
				panic(err) // values are finite (Validate)
			}
			bc.XMin = float64(start)
			bc.Color = st.fillColor()
			bc.LineStyle = draw.LineStyle{Color: color.Black, Width: vg.Points(0.7)}
			cs = append(cs, bc)
			start = end
		}
		for k, v := range s.Values {
			if missing[k] {
				continue
			}
			lo, up := s.errorExtents(k)
			yr.add(v-lo, v+up)
			// The bar in data units, for placing hline labels off it.
			mid := float64(k) + (float64(i)-float64(n-1)/2)*groupFraction/float64(n)
			half := groupFraction / float64(n) / 2
			ref.rects = append(ref.rects, dataRect{mid - half, mid + half, min(0, v-lo), max(0, v+up)})
		}
		charts = append(charts, cs)
		overlays = append(overlays, &barOverlay{style: st, values: s.Values, missing: missing, series: s, noteSize: l.noteSize})
	}
	for _, h := range f.HLines {
		yr.add(h.At)
	}
	for _, cs := range charts {
		for _, bc := range cs {
			p.Add(bc)
		}
	}
	for _, o := range overlays {
		p.Add(o)
	}
	p.Add(ref)

	p.NominalX(f.Categories...)
	p.X.LineStyle.Width = vg.Points(0.5) // NominalX hides the axis line; keep it as the baseline
	p.X.Padding = 0
	p.Y.Padding = 0
	p.X.Min, p.X.Max = -0.5, float64(len(f.Categories))-0.5
	switch {
	case f.LogY:
		yr.set(&p.Y, true, 0.08, 0.1)
	case yr.lo < 0:
		yr.set(&p.Y, false, 0.05, 0.1)
	default:
		yr.set(&p.Y, false, 0, 0.1)
	}
	// Long category names are turned 30 degrees rather than overlapping.
	approxCat := (l.width - vg.Points(70)) / vg.Length(len(f.Categories))
	for _, name := range f.Categories {
		if p.X.Tick.Label.Width(name) > 0.9*approxCat {
			p.X.Tick.Label.Rotation = math.Pi / 6
			p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YTop
			break
		}
	}

	var legend []legendEntry
	for i, s := range f.Series {
		st := barStyleOf(i)
		legend = append(legend, legendEntry{name: legendName(s), width: vg.Points(16), thumb: func(c draw.Canvas, r vg.Rectangle) {
			drawBar(c, st, r)
		}})
	}
	return built{p: p, legend: legend, finish: func(data draw.Canvas) {
		catW := data.Size().X / vg.Length(len(f.Categories))
		w := catW * groupFraction / vg.Length(n)
		for i := range n {
			off := w * (vg.Length(i) - vg.Length(n-1)/2)
			for _, bc := range charts[i] {
				bc.Width, bc.Offset = w, off
			}
			overlays[i].width, overlays[i].offset = w, off
		}
	}}
}

// drawBar draws a bar sample (legend): fill, hatching, outline.
func drawBar(c draw.Canvas, st barStyle, r vg.Rectangle) {
	c.FillPolygon(st.fillColor(), rectPoly(r))
	drawHatch(c, st, r)
	c.StrokeLines(draw.LineStyle{Color: color.Black, Width: vg.Points(0.7)}, append(rectPoly(r), r.Min))
}

func rectPoly(r vg.Rectangle) []vg.Point {
	return []vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}}
}

// hatchSpacing is the distance between hatch lines.
const hatchSpacing = vg.Length(4)

// drawHatch draws st's hatch pattern inside r.
func drawHatch(c draw.Canvas, st barStyle, r vg.Rectangle) {
	if lines := hatchLines(st.hatch, r); len(lines) > 0 {
		c.StrokeLines(draw.LineStyle{Color: st.ink(), Width: vg.Points(0.6)}, lines...)
	}
}

// hatchLines are the lines of pattern h inside r. They are anchored to
// the canvas origin, so neighbouring bars' patterns line up.
func hatchLines(h hatch, r vg.Rectangle) [][]vg.Point {
	s := hatchSpacing
	var lines [][]vg.Point
	diag := func(sign vg.Length) { // lines y = sign*x + k
		// k ranges over the values y - sign*x takes on the corners.
		klo, khi := vg.Length(math.Inf(1)), vg.Length(math.Inf(-1))
		for _, q := range rectPoly(r) {
			k := q.Y - sign*q.X
			klo, khi = min(klo, k), max(khi, k)
		}
		for k := vg.Length(math.Ceil(float64(klo/s))) * s; k <= khi; k += s {
			// x where the line meets y = r.Min.Y and y = r.Max.Y.
			xa, xb := (r.Min.Y-k)/sign, (r.Max.Y-k)/sign
			x0, x1 := max(r.Min.X, min(xa, xb)), min(r.Max.X, max(xa, xb))
			if x1 <= x0 {
				continue
			}
			lines = append(lines, []vg.Point{{X: x0, Y: sign*x0 + k}, {X: x1, Y: sign*x1 + k}})
		}
	}
	switch h {
	case hatchDiag:
		diag(1)
	case hatchBack:
		diag(-1)
	case hatchCross:
		diag(1)
		diag(-1)
	case hatchHoriz:
		for y := vg.Length(math.Ceil(float64(r.Min.Y/s))) * s; y < r.Max.Y; y += s {
			lines = append(lines, []vg.Point{{X: r.Min.X, Y: y}, {X: r.Max.X, Y: y}})
		}
	case hatchVert:
		for x := vg.Length(math.Ceil(float64(r.Min.X/s))) * s; x < r.Max.X; x += s {
			lines = append(lines, []vg.Point{{X: x, Y: r.Min.Y}, {X: x, Y: r.Max.Y}})
		}
	}
	return lines
}

// barOverlay draws, over one series' BarCharts, the hatching of each bar,
// "n/a" where a value is missing, and the error bars. width and offset
// mirror the series' BarCharts (canvas units).
type barOverlay struct {
	style         barStyle
	values        []float64
	missing       []bool
	series        Series // for its error extents
	width, offset vg.Length
	noteSize      float64 // of "n/a", layout points
}

// Plot implements plot.Plotter.
func (o *barOverlay) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	base := trY(0) // the axis minimum on a log axis (logScale)
	base = max(c.Min.Y, min(c.Max.Y, base))
	na := textStyle(o.noteSize, 40)
	na.Rotation = math.Pi / 2
	na.XAlign, na.YAlign = draw.XLeft, draw.YCenter
	for i, v := range o.values {
		x := trX(float64(i)) + o.offset
		if o.missing[i] {
			c.FillText(na, vg.Point{X: x, Y: base + vg.Points(3)}, "n/a")
			continue
		}
		top := max(c.Min.Y, min(c.Max.Y, trY(v)))
		r := vg.Rectangle{
			Min: vg.Point{X: x - o.width/2, Y: min(base, top)},
			Max: vg.Point{X: x + o.width/2, Y: max(base, top)},
		}
		drawHatch(c, o.style, r)
	}
	if len(o.series.Errors) == 0 && len(o.series.ErrorsUp) == 0 {
		return
	}
	halo := draw.LineStyle{Color: color.White, Width: vg.Points(2.6)}
	ink := draw.LineStyle{Color: color.Black, Width: vg.Points(1)}
	capW := min(o.width*0.6, vg.Points(8)) / 2
	for i, v := range o.values {
		down, up := o.series.errorExtents(i)
		if o.missing[i] || down == 0 && up == 0 {
			continue
		}
		x := trX(float64(i)) + o.offset
		lo, hi := trY(v-down), trY(v+up)
		lines := [][]vg.Point{
			{{X: x, Y: lo}, {X: x, Y: hi}},
			{{X: x - capW, Y: lo}, {X: x + capW, Y: lo}},
			{{X: x - capW, Y: hi}, {X: x + capW, Y: hi}},
		}
		c.StrokeLines(halo, c.ClipLinesY(lines...)...)
		c.StrokeLines(ink, c.ClipLinesY(lines...)...)
		if nVaries(o.series) && i < len(o.series.N) && c.ContainsY(hi) {
			sty := textStyle(o.noteSize, 30)
			sty.XAlign, sty.YAlign = draw.XCenter, draw.YBottom
			c.FillText(sty, vg.Point{X: x, Y: hi + vg.Points(2)}, fmt.Sprintf("n=%d", o.series.N[i]))
		}
	}
}

// errorExtents returns how far the error bar of value k reaches below and
// above it: Errors both ways, or Errors below and ErrorsUp above.
func (s Series) errorExtents(k int) (down, up float64) {
	if k < len(s.Errors) {
		down = s.Errors[k]
	}
	up = down
	if len(s.ErrorsUp) > 0 {
		up = 0
		if k < len(s.ErrorsUp) {
			up = s.ErrorsUp[k]
		}
	}
	return down, up
}
