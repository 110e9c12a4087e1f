package plots

import (
	"image/color"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The styles below depend on the series index only (never on the number
// of series), so a system keeps its look across the figures of one report
// as long as experiments list the systems in the same order. Everything is
// black, white or grey: the figures are meant to survive a black-and-white
// printer.

// hatch is a pattern drawn over a bar's fill.
type hatch int

const (
	hatchNone  hatch = iota
	hatchDiag        // "/" lines
	hatchBack        // "\" lines
	hatchCross       // "x": both diagonals
	hatchHoriz       // "-" lines
	hatchVert        // "|" lines
)

// barStyle is how the bars of one series look.
type barStyle struct {
	fill  uint8 // grey level of the fill, 0 black .. 255 white
	hatch hatch
}

// barStyleOf returns the look of bar series i (i wraps around past 8). The
// first five go from white to near-black in even steps (the common
// five-system figure), with hatching on every other one; the last three
// reuse in-between greys with the remaining hatch patterns.
func barStyleOf(i int) barStyle {
	switch i % maxSeries {
	case 0:
		return barStyle{255, hatchNone}
	case 1:
		return barStyle{205, hatchDiag}
	case 2:
		return barStyle{150, hatchNone}
	case 3:
		return barStyle{95, hatchBack}
	case 4:
		return barStyle{30, hatchNone}
	case 5:
		return barStyle{230, hatchCross}
	case 6:
		return barStyle{175, hatchHoriz}
	default:
		return barStyle{120, hatchVert}
	}
}

func (s barStyle) fillColor() color.Color { return color.Gray{Y: s.fill} }

// ink is the colour of the hatch lines: black on light fills, white on dark.
func (s barStyle) ink() color.Color {
	if s.fill < 128 {
		return color.Gray{Y: 255}
	}
	return color.Gray{Y: 0}
}

// lineStyle is how the line and markers of one series look.
type lineStyle struct {
	dashes []vg.Length // nil: solid
	glyph  draw.GlyphDrawer
	grey   uint8 // 0 black; at most 80 (dark grey)
}

// lineStyleOf returns the look of line series i (i wraps around past 8):
// each index has its own dash pattern and its own marker shape.
func lineStyleOf(i int) lineStyle {
	switch i % maxSeries {
	case 0:
		return lineStyle{nil, draw.CircleGlyph{}, 0}
	case 1:
		return lineStyle{[]vg.Length{vg.Points(6), vg.Points(3)}, draw.SquareGlyph{}, 70}
	case 2:
		return lineStyle{[]vg.Length{vg.Points(1.5), vg.Points(2)}, draw.TriangleGlyph{}, 0}
	case 3:
		return lineStyle{[]vg.Length{vg.Points(7), vg.Points(2.5), vg.Points(1.5), vg.Points(2.5)}, draw.CrossGlyph{}, 70}
	case 4:
		return lineStyle{[]vg.Length{vg.Points(12), vg.Points(4)}, draw.PlusGlyph{}, 0}
	case 5:
		return lineStyle{nil, draw.RingGlyph{}, 80}
	case 6:
		return lineStyle{[]vg.Length{vg.Points(3), vg.Points(3)}, draw.BoxGlyph{}, 0}
	default:
		return lineStyle{[]vg.Length{vg.Points(7), vg.Points(2), vg.Points(1.5), vg.Points(2), vg.Points(1.5), vg.Points(2)}, draw.PyramidGlyph{}, 80}
	}
}

func (s lineStyle) color() color.Color { return color.Gray{Y: s.grey} }

func (s lineStyle) line() draw.LineStyle {
	return draw.LineStyle{Color: s.color(), Width: vg.Points(1.3), Dashes: s.dashes}
}

func (s lineStyle) glyphStyle() draw.GlyphStyle {
	return draw.GlyphStyle{Color: s.color(), Radius: vg.Points(3), Shape: s.glyph}
}

// layout is the size of one output of a figure and its font sizes. The
// figure is laid out in layout units, a width x height canvas, and
// scaled by scale when drawn (scaledCanvas): every line, marker and gap
// keeps its proportion to the figure, and a font of size s prints at s x
// scale points.
type layout struct {
	width, height vg.Length
	scale         float64
	dpi           float64 // PNG only
	title         bool    // draw Figure.Title
	// Font sizes in layout points.
	titleSize, labelSize, tickSize, legendSize, noteSize float64
}

// screenLayout is the PNG and SVG of the reports: 6 x 4 inches (PNG 900 x
// 600 pixels at 150 dpi), with the title.
func screenLayout() layout {
	return layout{width: 6 * vg.Inch, height: 4 * vg.Inch, scale: 1, dpi: 150, title: true,
		titleSize: 12, labelSize: 11, tickSize: 9.5, legendSize: 9.5, noteSize: 8}
}

// Paper sizes: one column of a two-column paper (IEEE, ACM: 3.3 to 3.5
// inches), with fonts no smaller than paperMinFontPt once printed.
const (
	paperWidth     = 3.3 * vg.Inch
	paperHeight    = 2.4 * vg.Inch
	paperMinFontPt = 7
)

// paperLayout is the PDF for papers: paperWidth x paperHeight as printed,
// laid out on the screen layout's 6 inch width (so lines and markers
// shrink with it), axis labels at 8 pt and everything else at 7 pt as
// printed, no title (a paper's caption says what the figure shows).
func paperLayout() layout {
	s := float64(paperWidth / (6 * vg.Inch))
	pt := func(printed float64) float64 { return printed / s }
	return layout{width: 6 * vg.Inch, height: paperHeight / vg.Length(s), scale: s,
		labelSize: pt(8), tickSize: pt(paperMinFontPt), legendSize: pt(paperMinFontPt), noteSize: pt(paperMinFontPt)}
}
