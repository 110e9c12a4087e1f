package plots

import (
	"cmp"
	"fmt"
	"image/color"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// windowStyle is how the windows of one kind are shaded: a translucent
// grey fill and/or a translucent hatch, so that kinds stay apart in black
// and white and the data, drawn on top, stay readable. Windows of one kind
// are drawn as their union (the same GC on three nodes is one span, not
// three layers that add up to black); windows of different kinds overlap
// visibly.
type windowStyle struct {
	fill  color.NRGBA // A 0: none
	hatch hatch
	ink   color.NRGBA // of the hatch lines
}

// windowStyleOf returns the look of kind k (Validate admits only the
// kinds of WindowKinds).
func windowStyleOf(k WindowKind) windowStyle {
	grey := func(y, a uint8) color.NRGBA { return color.NRGBA{R: y, G: y, B: y, A: a} }
	switch k {
	case WindowGC:
		return windowStyle{fill: grey(100, 70)}
	case WindowCompaction:
		return windowStyle{hatch: hatchDiag, ink: grey(90, 110)}
	case WindowWriteStall:
		return windowStyle{hatch: hatchHoriz, ink: grey(60, 110)}
	case WindowFault:
		return windowStyle{fill: grey(170, 40), hatch: hatchCross, ink: grey(0, 90)}
	default: // WindowLeaderChange: usually short; dark so it shows
		return windowStyle{fill: grey(0, 130)}
	}
}

// minWindowWidth is the narrowest a window is drawn (a zero-length leader
// change), in layout points.
const minWindowWidth = vg.Length(1.5)

// windowShades draws a figure's windows as shaded spans over the full
// height of the data area, clipped to it, one kind after the other
// (WindowKinds order), each kind as the union of its windows; they do not
// widen the x axis.
type windowShades struct{ windows []Window }

// Plot implements plot.Plotter.
func (w windowShades) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	for _, k := range WindowKinds() {
		var spans [][2]vg.Length
		for _, win := range w.windows {
			if win.Kind != k {
				continue
			}
			x0, x1 := trX(win.Start), trX(win.End)
			if x1-x0 < minWindowWidth {
				mid := (x0 + x1) / 2
				x0, x1 = mid-minWindowWidth/2, mid+minWindowWidth/2
			}
			x0, x1 = max(x0, c.Min.X), min(x1, c.Max.X)
			if x1 > x0 { // else outside the axis
				spans = append(spans, [2]vg.Length{x0, x1})
			}
		}
		st := windowStyleOf(k)
		for _, sp := range unionSpans(spans) {
			shade(c, st, vg.Rectangle{Min: vg.Point{X: sp[0], Y: c.Min.Y}, Max: vg.Point{X: sp[1], Y: c.Max.Y}})
		}
	}
}

// unionSpans merges overlapping or touching spans, in order of start.
func unionSpans(spans [][2]vg.Length) [][2]vg.Length {
	slices.SortFunc(spans, func(a, b [2]vg.Length) int { return cmp.Compare(a[0], b[0]) })
	var out [][2]vg.Length
	for _, sp := range spans {
		if n := len(out); n > 0 && sp[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], sp[1])
			continue
		}
		out = append(out, sp)
	}
	return out
}

// shade fills r in style st.
func shade(c draw.Canvas, st windowStyle, r vg.Rectangle) {
	if st.fill.A > 0 {
		c.FillPolygon(st.fill, rectPoly(r))
	}
	if lines := hatchLines(st.hatch, r); len(lines) > 0 {
		c.StrokeLines(draw.LineStyle{Color: st.ink, Width: vg.Points(0.5)}, lines...)
	}
}

// windowLegend returns one legend entry per kind among ws, in the order
// of WindowKinds.
func windowLegend(ws []Window) []legendEntry {
	var es []legendEntry
	for _, k := range WindowKinds() {
		if !slices.ContainsFunc(ws, func(w Window) bool { return w.Kind == k }) {
			continue
		}
		st := windowStyleOf(k)
		es = append(es, legendEntry{name: k.Legend(), width: vg.Points(16), thumb: func(c draw.Canvas, r vg.Rectangle) {
			shade(c, st, r)
			c.StrokeLines(draw.LineStyle{Color: color.Gray{Y: 120}, Width: vg.Points(0.4)}, append(rectPoly(r), r.Min))
		}})
	}
	return es
}

// legendName is a series' legend text: its name, with " (n = 5)" when
// every value comes from the same number of runs (if the n differ, each
// error bar is labelled with its own: runLabels).
func legendName(s Series) string {
	if len(s.N) == 0 || nVaries(s) {
		return s.Name
	}
	return fmt.Sprintf("%s (n = %d)", s.Name, s.N[0])
}

// nVaries reports whether the values of s come from different numbers
// of runs.
func nVaries(s Series) bool {
	for _, n := range s.N {
		if n != s.N[0] {
			return true
		}
	}
	return false
}

// runLabels writes "n=3" above the top of each error bar of a series
// whose values come from different numbers of runs: at (x, y) in data
// units for Lines, or at a canvas x offset from a bar's category.
type runLabels struct {
	x, y     []float64
	offset   vg.Length
	n        []int
	noteSize float64
}

// Plot implements plot.Plotter.
func (r runLabels) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	sty := textStyle(r.noteSize, 30)
	sty.XAlign, sty.YAlign = draw.XCenter, draw.YBottom
	for i := range r.x {
		pt := vg.Point{X: trX(r.x[i]) + r.offset, Y: trY(r.y[i]) + vg.Points(2)}
		if c.Contains(pt) {
			c.FillText(sty, pt, fmt.Sprintf("n=%d", r.n[i]))
		}
	}
}
