package plots

import (
	"image"

	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"
)

// scaledCanvas draws on Canvas with every length and position multiplied
// by s: a figure laid out on a large canvas comes out small, fonts and
// line widths included. It scales the lengths itself rather than calling
// the backend's Scale, whose origin differs between backends (vgpdf
// scales about the top left corner of the page, vgimg and vgsvg about
// the bottom left).
type scaledCanvas struct {
	vg.Canvas
	s float64
}

func (c scaledCanvas) l(x vg.Length) vg.Length { return x * vg.Length(c.s) }

func (c scaledCanvas) pt(p vg.Point) vg.Point { return vg.Point{X: c.l(p.X), Y: c.l(p.Y)} }

// SetLineWidth implements vg.Canvas.
func (c scaledCanvas) SetLineWidth(w vg.Length) { c.Canvas.SetLineWidth(c.l(w)) }

// SetLineDash implements vg.Canvas.
func (c scaledCanvas) SetLineDash(pattern []vg.Length, offset vg.Length) {
	ds := make([]vg.Length, len(pattern))
	for i, d := range pattern {
		ds[i] = c.l(d)
	}
	c.Canvas.SetLineDash(ds, c.l(offset))
}

// Translate implements vg.Canvas.
func (c scaledCanvas) Translate(p vg.Point) { c.Canvas.Translate(c.pt(p)) }

// Stroke implements vg.Canvas.
func (c scaledCanvas) Stroke(p vg.Path) { c.Canvas.Stroke(c.path(p)) }

// Fill implements vg.Canvas.
func (c scaledCanvas) Fill(p vg.Path) { c.Canvas.Fill(c.path(p)) }

// FillString implements vg.Canvas.
func (c scaledCanvas) FillString(f font.Face, p vg.Point, text string) {
	f.Font.Size = c.l(f.Font.Size)
	c.Canvas.FillString(f, c.pt(p), text)
}

// DrawImage implements vg.Canvas.
func (c scaledCanvas) DrawImage(r vg.Rectangle, img image.Image) {
	c.Canvas.DrawImage(vg.Rectangle{Min: c.pt(r.Min), Max: c.pt(r.Max)}, img)
}

func (c scaledCanvas) path(p vg.Path) vg.Path {
	out := make(vg.Path, len(p))
	for i, pc := range p {
		pc.Pos = c.pt(pc.Pos)
		pc.Radius = c.l(pc.Radius)
		if len(pc.Control) > 0 {
			ctl := make([]vg.Point, len(pc.Control))
			for k, q := range pc.Control {
				ctl[k] = c.pt(q)
			}
			pc.Control = ctl
		}
		out[i] = pc
	}
	return out
}
