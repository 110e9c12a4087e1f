package plots

import (
	"image/color"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// refLines draws the figure's Marks (vertical) and HLines (horizontal) as
// dashed dark-grey lines with 8 pt labels on a white box: a mark's label
// upright beside its line, an hline's label along it. Each label goes to
// the first place that covers no data, no other reference line and no
// label placed before it (else to the one covering least):
//
//   - mark: right of the line at the top, left at the top, right at the
//     bottom, left at the bottom;
//   - hline: above the line at the left end, above at the right end,
//     below at the left end, below at the right end; then above and below
//     the line at every hlineStep from left to right (between bars that
//     do not reach the line); then, as a key (a short dashed sample before
//     the label), in the band at the top of the data area, which a bar
//     chart's headroom keeps free, from left to right.
//
// The data are given in data units: solid rectangles (bars, from their
// base to the top of the bar or error bar) and polylines (series as drawn,
// steps included).
type refLines struct {
	marks    []Mark
	hlines   []Mark
	rects    []dataRect
	polys    [][]dataPt
	noteSize float64 // of the labels, layout points
}

type dataPt struct{ x, y float64 }

// dataRect is a solid area in data units; x0 <= x1, y0 <= y1.
type dataRect struct{ x0, x1, y0, y1 float64 }

// notePad is the white margin around a note's text; noteGap the distance
// between a line and its label's box.
const (
	notePad = vg.Length(1.5)
	noteGap = vg.Length(1.5)
)

// noteBox is where fillNoteBox's white box goes for txt at pt: the text's
// bounding box (rotation included) grown by notePad.
func noteBox(sty text.Style, pt vg.Point, txt string) vg.Rectangle {
	r := sty.Rectangle(txt)
	return vg.Rectangle{
		Min: vg.Point{X: pt.X + r.Min.X - notePad, Y: pt.Y + r.Min.Y - notePad},
		Max: vg.Point{X: pt.X + r.Max.X + notePad, Y: pt.Y + r.Max.Y + notePad},
	}
}

// fillNoteBox writes txt on a white box so it stays readable over grid
// lines. pt, alignment and rotation as in text.Style.
func fillNoteBox(c draw.Canvas, sty text.Style, pt vg.Point, txt string) {
	c.FillPolygon(color.White, rectPoly(noteBox(sty, pt, txt)))
	c.FillText(sty, pt, txt)
}

func refStyle() draw.LineStyle {
	return draw.LineStyle{Color: color.Gray{Y: 60}, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(4), vg.Points(3)}}
}

// Plot implements plot.Plotter.
func (r refLines) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	ls := refStyle()
	sty := textStyle(r.noteSize, 30)

	// Obstacles in canvas units: segments (data and reference lines) and
	// boxes (bars and labels already placed).
	var segs [][2]vg.Point
	var boxes []vg.Rectangle
	for _, d := range r.rects {
		boxes = append(boxes, vg.Rectangle{
			Min: vg.Point{X: trX(d.x0), Y: trY(d.y0)},
			Max: vg.Point{X: trX(d.x1), Y: trY(d.y1)},
		})
	}
	for _, pl := range r.polys {
		for k := 1; k < len(pl); k++ {
			segs = append(segs, [2]vg.Point{
				{X: trX(pl[k-1].x), Y: trY(pl[k-1].y)},
				{X: trX(pl[k].x), Y: trY(pl[k].y)},
			})
		}
	}
	type line struct {
		seg   [2]vg.Point
		label string
		mark  bool
	}
	var lines []line
	for _, m := range r.marks {
		if x := trX(m.At); c.ContainsX(x) {
			lines = append(lines, line{[2]vg.Point{{X: x, Y: c.Min.Y}, {X: x, Y: c.Max.Y}}, m.Label, true})
		}
	}
	for _, h := range r.hlines {
		if y := trY(h.At); c.ContainsY(y) {
			lines = append(lines, line{[2]vg.Point{{X: c.Min.X, Y: y}, {X: c.Max.X, Y: y}}, h.Label, false})
		}
	}
	for _, l := range lines {
		c.StrokeLines(ls, l.seg[:])
	}
	for i, l := range lines {
		var cands []note
		if l.mark {
			cands = markNotes(sty, l.seg[0].X, c, l.label)
		} else {
			cands = hlineNotes(sty, l.seg[0].Y, c, l.label)
		}
		others := slices.Clip(segs) // the first append copies
		for j, o := range lines {
			if j != i {
				others = append(others, o.seg)
			}
		}
		best, _ := pickNote(cands, c.Rectangle, others, boxes)
		if best.key {
			b := best.box()
			y := (b.Min.Y + b.Max.Y) / 2
			c.FillPolygon(color.White, rectPoly(b))
			c.StrokeLines(ls, []vg.Point{{X: b.Min.X + notePad, Y: y}, {X: b.Min.X + notePad + keyLength, Y: y}})
		}
		fillNoteBox(c, best.sty, best.pt, best.txt)
		boxes = append(boxes, best.box())
	}
}

// pickNote returns the first of cands whose box lies inside area and
// meets none of the segments and boxes, else the one that meets fewest,
// with the number it meets.
func pickNote(cands []note, area vg.Rectangle, segs [][2]vg.Point, boxes []vg.Rectangle) (note, int) {
	best, bestHits := cands[0], math.MaxInt
	for _, n := range cands {
		b := n.box()
		if b.Min.X < area.Min.X || b.Max.X > area.Max.X || b.Min.Y < area.Min.Y || b.Max.Y > area.Max.Y {
			continue
		}
		hits := 0
		for _, s := range segs {
			if segmentHits(s, b) {
				hits++
			}
		}
		for _, o := range boxes {
			if overlaps(o, b) {
				hits++
			}
		}
		if hits < bestHits {
			best, bestHits = n, hits
		}
		if hits == 0 {
			break
		}
	}
	return best, bestHits
}

// note is a candidate place for a label. A key note is drawn with a short
// dashed sample of the line before its text (keyLength plus a gap), for a
// label placed away from its line.
type note struct {
	sty text.Style
	pt  vg.Point
	txt string
	key bool
}

// keyLength is the length of a key note's line sample.
const keyLength = vg.Length(14)

func (n note) box() vg.Rectangle {
	b := noteBox(n.sty, n.pt, n.txt)
	if n.key {
		b.Min.X -= keyLength + noteGap
	}
	return b
}

// markNotes are the places for the label of a mark at canvas x.
func markNotes(sty text.Style, x vg.Length, c draw.Canvas, txt string) []note {
	s := sty
	s.Rotation = math.Pi / 2 // reads bottom to top
	s.XAlign, s.YAlign = draw.XLeft, draw.YBottom
	b := noteBox(s, vg.Point{}, txt)
	right, left := x+noteGap-b.Min.X, x-noteGap-b.Max.X
	top, bottom := c.Max.Y-noteGap-b.Max.Y, c.Min.Y+noteGap-b.Min.Y
	return []note{
		{s, vg.Point{X: right, Y: top}, txt, false},
		{s, vg.Point{X: left, Y: top}, txt, false},
		{s, vg.Point{X: right, Y: bottom}, txt, false},
		{s, vg.Point{X: left, Y: bottom}, txt, false},
	}
}

// hlineNotes are the places for the label of an hline at canvas y.
func hlineNotes(sty text.Style, y vg.Length, c draw.Canvas, txt string) []note {
	s := sty
	s.XAlign, s.YAlign = draw.XLeft, draw.YBottom
	b := noteBox(s, vg.Point{}, txt)
	inset := vg.Points(4)
	left, right := c.Min.X+inset-b.Min.X, c.Max.X-inset-b.Max.X
	above, below := y+noteGap-b.Min.Y, y-noteGap-b.Max.Y
	notes := []note{
		{s, vg.Point{X: left, Y: above}, txt, false},
		{s, vg.Point{X: right, Y: above}, txt, false},
		{s, vg.Point{X: left, Y: below}, txt, false},
		{s, vg.Point{X: right, Y: below}, txt, false},
	}
	for x := left + hlineStep; x < right; x += hlineStep {
		notes = append(notes, note{s, vg.Point{X: x, Y: above}, txt, false}, note{s, vg.Point{X: x, Y: below}, txt, false})
	}
	top := c.Max.Y - noteGap - b.Max.Y
	for x := left + keyLength + noteGap; x < right; x += hlineStep {
		notes = append(notes, note{s, vg.Point{X: x, Y: top}, txt, true})
	}
	return notes
}

// hlineStep is the distance between the places tried along an hline.
const hlineStep = vg.Length(4)

func overlaps(a, b vg.Rectangle) bool {
	return a.Min.X < b.Max.X && b.Min.X < a.Max.X && a.Min.Y < b.Max.Y && b.Min.Y < a.Max.Y
}

// segmentHits reports whether segment s crosses rectangle r (Liang-Barsky
// clipping). Non-finite coordinates never hit.
func segmentHits(s [2]vg.Point, r vg.Rectangle) bool {
	x0, y0 := float64(s[0].X), float64(s[0].Y)
	dx, dy := float64(s[1].X)-x0, float64(s[1].Y)-y0
	t0, t1 := 0.0, 1.0
	for _, e := range [4][2]float64{
		{-dx, x0 - float64(r.Min.X)},
		{dx, float64(r.Max.X) - x0},
		{-dy, y0 - float64(r.Min.Y)},
		{dy, float64(r.Max.Y) - y0},
	} {
		p, q := e[0], e[1]
		if math.IsNaN(p) || math.IsNaN(q) || math.IsInf(q, 0) {
			return false
		}
		if p == 0 {
			if q < 0 {
				return false
			}
			continue
		}
		t := q / p
		if p < 0 {
			t0 = max(t0, t)
		} else {
			t1 = min(t1, t)
		}
		if t0 > t1 {
			return false
		}
	}
	return true
}
