package plots

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"regexp"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgpdf"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Render validates f and draws it to dir/<Name>.png (6 x 4 inches at 150
// dpi: 900 x 600 pixels, white background) and dir/<Name>.svg (6 x 4
// inches, 432 x 288 pt; fonts are referenced by name, Liberation Serif, not
// embedded), both for reports and screens, and dir/<Name>.pdf for papers:
// 3.3 x 2.4 inches (one column of a two-column paper), no title (the
// caption says it), axis labels at 8 pt and every other text at 7 pt as
// printed, lines and markers scaled with the figure, fonts embedded. dir
// is created if needed; existing files are replaced atomically. The same
// figure always gives the same bytes.
//
// Layout, top to bottom: the title (shrunk to fit the width; PNG and SVG
// only), the legend as a row (or balanced rows) of entries centred above
// the data area, so it never hides data (series first, "(n = 5)" after a
// name when every value of the series comes from 5 runs, then one entry
// per kind of window), then the plot with its axis labels. Windows are
// translucent grey spans over the data area's full height, behind the
// data, each kind with its own shade and hatching (windows.go). Marks and
// HLines are dashed dark-grey lines labelled in place (8 pt on a white
// box, at the first candidate spot along the line that covers no data, no
// other reference line and no other label, else as a key in the band at
// the top of the data area; see refLines), not in the legend.
//
//   - Bars: one group per category, one plotter.BarChart bar per series
//     in series order, the group 80% of a category's width. A Missing bar
//     is not drawn; "n/a" is written upright in its slot. Errors are error
//     bars (black with a white halo, visible on dark fills); when the
//     values of a series come from different numbers of runs, each error
//     bar is labelled "n=3". Long category
//     names are turned 30 degrees. The y axis starts at 0 (linear; lower
//     for negative values) or just below the smallest value (log) and
//     leaves about 10% headroom above the highest bar, error bar or hline.
//   - Lines: a line per series with markers: on every point when a series
//     has at most 20 points, else on 10 points spread evenly and staggered
//     between series so markers do not sit on top of each other. Errors,
//     if given, are vertical error bars (labelled "n=3" as for Bars). A
//     linear y axis starts at 0 unless
//     the data are negative; with Marks the top is raised so their labels
//     sit above the data.
//   - CDF: a post-step line per series (the fraction jumps at each x) with
//     markers as for Lines; y runs over [0, 1] labelled every 0.2.
//
// Log axes use plot.LogScale (non-positive values, e.g. a bar's base, map
// to the axis minimum) and plot.LogTicks labels (1, 10, 100, 1k, ...; 2x
// and 5x are labelled too when the range holds fewer than three decades;
// every axis gets at least two labels, see logTicks). Linear tick labels
// are shortened: 12k, 1.5M.
//
// Styles depend on the series index only (style.go), so a system looks
// the same in every figure that lists the systems in the same order: bars
// use grey fills from white to near-black with hatching on every other
// series; lines are black or dark grey, each with its own dash pattern and
// marker shape (circle, square, triangle, cross, plus, ring, box, pyramid).
func Render(dir string, f Figure) error {
	if err := f.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("plots: %w", err)
	}
	screen, paper := screenLayout(), paperLayout()

	img := vgimg.NewWith(vgimg.UseWH(screen.width, screen.height), vgimg.UseDPI(int(screen.dpi)))
	if err := drawFigure(onCanvas(img, screen), f, screen); err != nil {
		return err
	}
	var png bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&png); err != nil {
		return fmt.Errorf("plots: figure %q: png: %w", f.Name, err)
	}

	svg := vgsvg.New(screen.width, screen.height)
	if err := drawFigure(onCanvas(svg, screen), f, screen); err != nil {
		return err
	}
	var svgBuf bytes.Buffer
	if _, err := svg.WriteTo(&svgBuf); err != nil {
		return fmt.Errorf("plots: figure %q: svg: %w", f.Name, err)
	}

	pdf, err := renderPDF(f, paper)
	if err != nil {
		return err
	}

	for _, out := range []struct {
		ext  string
		data []byte
	}{{".png", png.Bytes()}, {".svg", svgBuf.Bytes()}, {".pdf", pdf}} {
		if err := writeFileAtomic(filepath.Join(dir, f.Name+out.ext), out.data); err != nil {
			return err
		}
	}
	return nil
}

// onCanvas returns the drawing area of l on c, which is l's printed size:
// l's width x height, scaled by l.scale.
func onCanvas(c vg.Canvas, l layout) draw.Canvas {
	var vc vg.Canvas = c
	if l.scale != 1 {
		vc = scaledCanvas{Canvas: c, s: l.scale}
	}
	return draw.Canvas{Canvas: vc, Rectangle: vg.Rectangle{Max: vg.Point{X: l.width, Y: l.height}}}
}

// pdfDates are the creation and modification dates fpdf writes into the
// document information (the time of the render); renderPDF replaces
// them, keeping their length and so every offset in the file.
var pdfDates = regexp.MustCompile(`/(CreationDate|ModDate) \(D:[0-9]{14}\)`)

// renderPDF draws f in layout l as a one-page PDF with its fonts embedded
// (a paper's PDF must carry them). The document dates are fixed, so that
// the same figure gives the same bytes.
func renderPDF(f Figure, l layout) ([]byte, error) {
	pdf := vgpdf.New(l.width*vg.Length(l.scale), l.height*vg.Length(l.scale))
	if err := drawFigure(onCanvas(pdf, l), f, l); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := pdf.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("plots: figure %q: pdf: %w", f.Name, err)
	}
	return pdfDates.ReplaceAll(buf.Bytes(), []byte("/$1 (D:20000101000000)")), nil
}

// drawFigure draws a validated figure onto c in layout l. gonum/plot
// reports some problems by panicking; they come back as errors.
func drawFigure(c draw.Canvas, f Figure, l layout) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("plots: figure %q: drawing failed: %v", f.Name, r)
		}
	}()
	c.SetColor(color.White)
	c.Fill(c.Rectangle.Path())
	c = draw.Crop(c, vg.Points(6), -vg.Points(10), vg.Points(4), -vg.Points(6))

	var b built
	switch f.Kind {
	case Bars:
		b = buildBars(f, l)
	case Lines, CDF:
		b = buildLines(f, l)
	default:
		return fmt.Errorf("plots: figure %q: unknown kind %q", f.Name, f.Kind)
	}
	if f.Title != "" && l.title {
		c = drawTitle(c, f.Title, l.titleSize)
	}
	c = drawLegend(c, b.legend, l.legendSize)
	// The axis labels are drawn here, centred on the data area, rather
	// than by gonum/plot, which centres them (and reserves room for them)
	// at the arithmetic mean of a log axis's range.
	xl, yl := textStyle(l.labelSize, 0), textStyle(l.labelSize, 0)
	xl.XAlign, xl.YAlign = draw.XCenter, draw.YBottom
	yl.XAlign, yl.YAlign, yl.Rotation = draw.XCenter, draw.YTop, math.Pi/2
	plotC := c
	if f.XLabel != "" {
		plotC.Min.Y += xl.Rectangle(f.XLabel).Size().Y + vg.Points(3)
	}
	if f.YLabel != "" {
		plotC.Min.X += yl.Rectangle(f.YLabel).Size().X + vg.Points(3)
	}
	if b.finish != nil {
		b.finish(b.p.DataCanvas(plotC))
	}
	data := b.p.DataCanvas(plotC)
	b.p.Draw(plotC)
	if f.XLabel != "" {
		c.FillText(xl, vg.Point{X: data.Center().X, Y: c.Min.Y - xl.Rectangle(f.XLabel).Min.Y}, f.XLabel)
	}
	if f.YLabel != "" {
		c.FillText(yl, vg.Point{X: c.Min.X - yl.Rectangle(f.YLabel).Min.X, Y: data.Center().Y}, f.YLabel)
	}
	return nil
}

// built is a plot ready to draw, its legend entries, and a last step that
// needs the size of the data area (bar widths are in canvas units).
type built struct {
	p      *plot.Plot
	legend []legendEntry
	finish func(data draw.Canvas)
}

// newPlot returns a plot with the tick fonts, tickers and
// horizontal grid shared by every kind.
func newPlot(f Figure, l layout) *plot.Plot {
	p := plot.New() // axis labels: drawFigure
	for _, ax := range []*plot.Axis{&p.X, &p.Y} {
		ax.Tick.Label.Font.Size = vg.Points(l.tickSize)
	}
	p.X.Tick.Marker = linearTicks{}
	p.Y.Tick.Marker = linearTicks{}
	if f.LogX {
		p.X.Scale = logScale{}
		p.X.Tick.Marker = logTicks{}
	}
	if f.LogY {
		p.Y.Scale = logScale{}
		p.Y.Tick.Marker = logTicks{}
	}
	grid := plotter.NewGrid()
	grid.Vertical.Color = nil
	grid.Horizontal = draw.LineStyle{Color: color.Gray{Y: 225}, Width: vg.Points(0.5)}
	p.Add(grid)
	return p
}

// textStyle is plain text in the plot's default font.
func textStyle(size float64, grey uint8) text.Style {
	return text.Style{
		Color:   color.Gray{Y: grey},
		Font:    font.From(plot.DefaultFont, vg.Points(size)),
		Handler: plot.DefaultTextHandler,
	}
}

// drawTitle writes title centred at the top of c, shrinking the font (down
// to 8 pt) if it is wider than c, and returns the canvas below it.
func drawTitle(c draw.Canvas, title string, size float64) draw.Canvas {
	sty := textStyle(size, 0)
	for sty.Font.Size > vg.Points(8) && sty.Width(title) > c.Size().X {
		sty.Font.Size -= vg.Points(0.5)
	}
	sty.XAlign, sty.YAlign = draw.XCenter, draw.YTop
	c.FillText(sty, vg.Point{X: c.Center().X, Y: c.Max.Y}, title)
	c.Max.Y -= sty.Height(title) + vg.Points(5)
	return c
}

// legendEntry is one series in the legend: its name and a function drawing
// its sample into a rectangle.
type legendEntry struct {
	name  string
	width vg.Length // width of the sample
	thumb func(c draw.Canvas, r vg.Rectangle)
}

// drawLegend lays the entries out row-major in as few rows as fit the
// width of c (each column as wide as its widest entry, the block centred),
// draws them at the top of c and returns the canvas below.
func drawLegend(c draw.Canvas, es []legendEntry, size float64) draw.Canvas {
	if len(es) == 0 {
		return c
	}
	sty := textStyle(size, 0)
	sty.YAlign = draw.YCenter
	gap, colGap := vg.Points(4), vg.Points(18)
	var thumbW vg.Length
	for _, e := range es {
		thumbW = max(thumbW, e.width)
	}
	entryW := func(e legendEntry) vg.Length { return thumbW + gap + sty.Width(e.name) }
	// Widest layout that fits: ncols columns, rows balanced (5 -> 3 + 2).
	var cols []vg.Length
	var ncols int
	for try := len(es); try >= 1; try-- {
		rows := (len(es) + try - 1) / try
		ncols = (len(es) + rows - 1) / rows
		cols = make([]vg.Length, ncols)
		for k, e := range es {
			cols[k%ncols] = max(cols[k%ncols], entryW(e))
		}
		if blockWidth(cols, colGap) <= c.Size().X || ncols == 1 {
			break
		}
	}
	rows := (len(es) + ncols - 1) / ncols
	rowH := vg.Points(size * 1.5)
	x0 := c.Center().X - blockWidth(cols, colGap)/2
	for k, e := range es {
		row, col := k/ncols, k%ncols
		x := x0
		for _, w := range cols[:col] {
			x += w + colGap
		}
		y := c.Max.Y - rowH*(vg.Length(row)+0.5)
		h := vg.Points(size * 0.9)
		e.thumb(c, vg.Rectangle{
			Min: vg.Point{X: x + (thumbW-e.width)/2, Y: y - h/2},
			Max: vg.Point{X: x + (thumbW+e.width)/2, Y: y + h/2},
		})
		c.FillText(sty, vg.Point{X: x + thumbW + gap, Y: y}, e.name)
	}
	c.Max.Y -= rowH*vg.Length(rows) + vg.Points(4)
	return c
}

func blockWidth(cols []vg.Length, gap vg.Length) vg.Length {
	w := gap * vg.Length(len(cols)-1)
	for _, c := range cols {
		w += c
	}
	return w
}

// dataRange is an axis range being accumulated.
type dataRange struct{ lo, hi float64 }

func emptyRange() dataRange { return dataRange{math.Inf(1), math.Inf(-1)} }

func (r *dataRange) add(vs ...float64) {
	for _, v := range vs {
		r.lo = math.Min(r.lo, v)
		r.hi = math.Max(r.hi, v)
	}
}

// set stores r on ax with headroom: linear axes get frac of the span added
// on the padded sides, log axes the same fraction in decades. A degenerate
// range is widened so the axis can be drawn.
func (r dataRange) set(ax *plot.Axis, log bool, padLo, padHi float64) {
	lo, hi := r.lo, r.hi
	if math.IsInf(lo, 0) || math.IsInf(hi, 0) {
		lo, hi = 0, 1
		if log {
			lo, hi = 1, 10
		}
	}
	if log {
		if hi <= lo {
			lo, hi = lo/2, hi*2
		}
		span := math.Log10(hi / lo)
		lo /= math.Pow(10, span*padLo)
		hi *= math.Pow(10, span*padHi)
	} else {
		switch {
		case hi <= lo && lo == 0: // all zero
			hi = 1
		case hi <= lo:
			d := math.Max(math.Abs(lo)*0.1, 1)
			lo, hi = lo-d, hi+d
		}
		span := hi - lo
		lo -= span * padLo
		hi += span * padHi
	}
	ax.Min, ax.Max = lo, hi
}

// logScale is plot.LogScale that maps non-positive values (a bar's base
// at 0) to the axis minimum instead of panicking. Validate keeps data
// values positive on log axes.
type logScale struct{}

// Normalize implements plot.Normalizer.
func (logScale) Normalize(min, max, x float64) float64 {
	if x <= 0 {
		x = min
	}
	return plot.LogScale{}.Normalize(min, max, x)
}

// logTicks is plot.LogTicks (major ticks at powers of ten, minor ticks at
// 2..9 times them) with short labels (1k, 10k, 1M) and, when fewer than
// three powers of ten fall in the range, labels at 2x and 5x as well;
// when that still labels fewer than two ticks in the range (a range
// inside one decade, e.g. 120..180), every tick in it is labelled, and
// failing that the range gets linear ticks, so that an axis is never
// left with fewer than two labels.
type logTicks struct{}

// minTickLabels is the fewest labelled ticks an axis gets.
const minTickLabels = 2

// Ticks implements plot.Ticker.
func (logTicks) Ticks(min, max float64) []plot.Tick {
	if min <= 0 || max <= 0 || max < min {
		return nil
	}
	ts := plot.LogTicks{Prec: -1}.Ticks(math.Pow10(int(math.Floor(math.Log10(min)))), max)
	inRange := func(v float64) bool { return v >= min && v <= max }
	labelled := func() int {
		n := 0
		for _, t := range ts {
			if t.Label != "" && inRange(t.Value) {
				n++
			}
		}
		return n
	}
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = tickLabel(ts[i].Value, true)
		}
	}
	if labelled() < 3 {
		for i := range ts {
			v := ts[i].Value
			m := math.Round(v / math.Pow10(int(math.Floor(math.Log10(v)+1e-9))))
			if m == 2 || m == 5 {
				ts[i].Label = tickLabel(v, true)
			}
		}
	}
	if labelled() < minTickLabels {
		for i := range ts {
			if inRange(ts[i].Value) {
				ts[i].Label = tickLabel(ts[i].Value, true)
			}
		}
	}
	if labelled() < minTickLabels {
		return linearTicks{}.Ticks(min, max)
	}
	return ts
}

// linearTicks is plot.DefaultTicks with short labels (tickLabel).
type linearTicks struct{}

// Ticks implements plot.Ticker.
func (linearTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = tickLabel(ts[i].Value, false)
		}
	}
	return ts
}

// tickLabel formats a tick value briefly: 0.25, 750, 1500, 12k, 1.5M, 2G;
// on a log axis thousands are already shortened (100, 1k, 10k).
func tickLabel(v float64, log bool) string {
	a := math.Abs(v)
	short := func(x float64, suffix string) string {
		return fmt.Sprintf("%s%s", trimFloat(x, 4), suffix)
	}
	switch {
	case a < 1e-12:
		return "0"
	case a >= 1e9:
		return short(v/1e9, "G")
	case a >= 1e6:
		return short(v/1e6, "M")
	case a >= 1e4 || log && a >= 1e3:
		return short(v/1e3, "k")
	case a < 1e-3:
		return fmt.Sprintf("%.2g", v)
	}
	return trimFloat(v, 6)
}

// trimFloat formats x with at most digits significant digits, no
// exponent for the magnitudes tickLabel passes, no trailing zeros.
func trimFloat(x float64, digits int) string {
	return fmt.Sprintf("%.*g", digits, x)
}
