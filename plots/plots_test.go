package plots

import (
	"bytes"
	"encoding/json"
	"errors"
	"image/png"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/recorder"
	"gonum.org/v1/plot/vg/vgimg"
)

func goodBars() Figure {
	return Figure{
		Name: "bars", Title: "Bars title", Kind: Bars, XLabel: "value size (KiB)", YLabel: "throughput (MB/s)",
		Categories: []string{"1", "4"},
		Series: []Series{
			{Name: "a", Values: []float64{1, 2}, Errors: []float64{0.1, 0.2}, N: []int{3, 3}},
			{Name: "b", Values: []float64{3, 0}, Missing: []int{1}},
		},
		HLines: []Mark{{At: 2.5, Label: "limit"}},
	}
}

func goodLines() Figure {
	return Figure{
		Name: "lines", Title: "Lines title", Kind: Lines, XLabel: "time (s)", YLabel: "throughput (ops/s)",
		Series: []Series{{Name: "a", X: []float64{0, 1, 2}, Y: []float64{5, 6, 4}}},
		Marks:  []Mark{{At: 1, Label: "GC 1 start"}},
	}
}

func goodCDF() Figure {
	return Figure{
		Name: "cdf", Title: "CDF title", Kind: CDF, XLabel: "latency (µs)", YLabel: "fraction of requests", LogX: true,
		Series: []Series{{Name: "a", X: []float64{10, 100, 1000}, Y: []float64{0.2, 0.9, 1}}},
	}
}

func TestValidateAcceptsGoodFigures(t *testing.T) {
	for _, f := range []Figure{goodBars(), goodLines(), goodCDF(), sampleBars(), sampleCDF(), sampleLines()} {
		if err := f.Validate(); err != nil {
			t.Errorf("%s: %v", f.Name, err)
		}
	}
	f := goodBars()
	f.XLabel = "" // bars need a y label only
	if err := f.Validate(); err != nil {
		t.Errorf("bars without x label: %v", err)
	}
}

func TestValidateCatchesEachProblem(t *testing.T) {
	cases := []struct {
		name string
		base func() Figure
		edit func(*Figure)
		want string
	}{
		{"empty name", goodBars, func(f *Figure) { f.Name = "" }, "empty name"},
		{"path name", goodBars, func(f *Figure) { f.Name = "../x" }, "safe file stem"},
		{"slash name", goodBars, func(f *Figure) { f.Name = "a/b" }, "safe file stem"},
		{"hidden name", goodBars, func(f *Figure) { f.Name = ".x" }, "safe file stem"},
		{"space name", goodBars, func(f *Figure) { f.Name = "a b" }, "safe file stem"},
		{"unknown kind", goodBars, func(f *Figure) { f.Kind = "pie" }, `unknown kind "pie"`},
		{"empty kind", goodBars, func(f *Figure) { f.Kind = "" }, "empty kind"},
		{"no y label", goodBars, func(f *Figure) { f.YLabel = "" }, "empty y label"},
		{"no x label lines", goodLines, func(f *Figure) { f.XLabel = "" }, "empty x label"},
		{"no x label cdf", goodCDF, func(f *Figure) { f.XLabel = "" }, "empty x label"},
		{"no series", goodBars, func(f *Figure) { f.Series = nil }, "no series"},
		{"unnamed series", goodBars, func(f *Figure) { f.Series[0].Name = "" }, "has no name"},
		{"duplicate series", goodBars, func(f *Figure) { f.Series[1].Name = "a" }, `two series named "a"`},
		{"too many series", goodLines, func(f *Figure) {
			for i := range 8 {
				s := f.Series[0]
				s.Name = string(rune('b' + i))
				f.Series = append(f.Series, s)
			}
		}, "9 series"},
		{"bars no categories", goodBars, func(f *Figure) { f.Categories = nil }, "bars without categories"},
		{"bars value count", goodBars, func(f *Figure) { f.Series[0].Values = []float64{1} }, "1 values for 2 categories"},
		{"missing out of range", goodBars, func(f *Figure) { f.Series[1].Missing = []int{2} }, "missing index 2 out of range"},
		{"missing negative", goodBars, func(f *Figure) { f.Series[1].Missing = []int{-1} }, "missing index -1 out of range"},
		{"bars error count", goodBars, func(f *Figure) { f.Series[0].Errors = []float64{1} }, "1 errors for 2 values"},
		{"bars negative error", goodBars, func(f *Figure) { f.Series[0].Errors = []float64{-1, 1} }, "negative"},
		{"bars upper error count", goodBars, func(f *Figure) { f.Series[0].ErrorsUp = []float64{1} }, "1 upper errors for 2 values"},
		{"bars negative upper error", goodBars, func(f *Figure) { f.Series[0].ErrorsUp = []float64{1, -1} }, "upper error 1 is -1"},
		{"lines upper error count", goodLines, func(f *Figure) { f.Series[0].ErrorsUp = []float64{1, 1} }, "2 upper errors for 3 points"},
		{"lines negative upper error", goodLines, func(f *Figure) { f.Series[0].ErrorsUp = []float64{1, -1, 1} }, "upper error 1 is -1"},
		{"cdf upper errors", goodCDF, func(f *Figure) { f.Series[0].ErrorsUp = []float64{0, 0, 0} }, "errors on a cdf"},
		{"bars NaN", goodBars, func(f *Figure) { f.Series[0].Values[0] = math.NaN() }, "value 0 is NaN"},
		{"bars log x", goodBars, func(f *Figure) { f.LogX = true }, "log x on bars"},
		{"bars marks", goodBars, func(f *Figure) { f.Marks = []Mark{{At: 1, Label: "m"}} }, "marks on bars"},
		{"bars log y zero", goodBars, func(f *Figure) { f.LogY = true; f.Series[0].Values[0] = 0 }, "on a log y axis"},
		{"bars log y error below zero", goodBars, func(f *Figure) { f.LogY = true; f.Series[0].Errors[0] = 1 }, "error bar 0 reaches"},
		{"lines len mismatch", goodLines, func(f *Figure) { f.Series[0].Y = f.Series[0].Y[:2] }, "3 x values for 2 y values"},
		{"lines empty", goodLines, func(f *Figure) { f.Series[0].X, f.Series[0].Y = nil, nil }, "no points"},
		{"lines error count", goodLines, func(f *Figure) { f.Series[0].Errors = []float64{1} }, "1 errors for 3 points"},
		{"lines missing", goodLines, func(f *Figure) { f.Series[0].Missing = []int{0} }, "values/missing"},
		{"lines inf", goodLines, func(f *Figure) { f.Series[0].Y[1] = math.Inf(1) }, "y[1] is +Inf"},
		{"lines log x zero", goodLines, func(f *Figure) { f.LogX = true }, "x[0] = 0 on a log x axis"},
		{"lines log y negative", goodLines, func(f *Figure) { f.LogY = true; f.Series[0].Y[2] = -1 }, "y[2] = -1 on a log y axis"},
		{"cdf len mismatch", goodCDF, func(f *Figure) { f.Series[0].X = f.Series[0].X[:1] }, "1 x values for 3 y values"},
		{"cdf empty", goodCDF, func(f *Figure) { f.Series[0].X, f.Series[0].Y = nil, nil }, "no points"},
		{"cdf y above 1", goodCDF, func(f *Figure) { f.Series[0].Y[2] = 1.5 }, "outside [0, 1]"},
		{"cdf y below 0", goodCDF, func(f *Figure) { f.Series[0].Y[0] = -0.1 }, "outside [0, 1]"},
		{"cdf y decreasing", goodCDF, func(f *Figure) { f.Series[0].Y[1] = 0.1 }, "cdf y decreases"},
		{"cdf x decreasing", goodCDF, func(f *Figure) { f.Series[0].X[1] = 5 }, "cdf x decreases"},
		{"cdf errors", goodCDF, func(f *Figure) { f.Series[0].Errors = []float64{0, 0, 0} }, "errors on a cdf"},
		{"cdf log x zero", goodCDF, func(f *Figure) { f.Series[0].X[0] = 0 }, "on a log x axis"},
		{"mark log x", goodCDF, func(f *Figure) { f.Marks = []Mark{{At: 0, Label: "zero"}} }, `mark "zero" at 0 on a log x axis`},
		{"mark no label", goodLines, func(f *Figure) { f.Marks[0].Label = "" }, "mark at 1 has no label"},
		{"hline no label", goodBars, func(f *Figure) { f.HLines[0].Label = "" }, "hline at 2.5 has no label"},
		{"hline log y", goodLines, func(f *Figure) { f.LogY = true; f.HLines = []Mark{{At: -1, Label: "h"}} }, `hline "h" at -1 on a log y axis`},
		{"hline NaN", goodBars, func(f *Figure) { f.HLines[0].At = math.NaN() }, `hline "limit" at NaN`},
		{"windows on bars", goodBars, func(f *Figure) { f.Windows = []Window{{Kind: WindowGC, Start: 0, End: 1}} }, "windows on a bars figure"},
		{"windows on cdf", goodCDF, func(f *Figure) { f.Windows = []Window{{Kind: WindowGC, Start: 1, End: 2}} }, "windows on a cdf figure"},
		{"windows log x", goodLines, func(f *Figure) {
			f.LogX, f.Marks = true, nil
			f.Series[0].X = []float64{1, 2, 3}
			f.Windows = []Window{{Kind: WindowGC, Start: 1, End: 2}}
		}, "windows on a log x axis"},
		{"window unknown kind", goodLines, func(f *Figure) { f.Windows = []Window{{Kind: "flush", Start: 0, End: 1}} }, `window 0 has unknown kind "flush"`},
		{"window empty kind", goodLines, func(f *Figure) { f.Windows = []Window{{Start: 0, End: 1}} }, `window 0 has unknown kind ""`},
		{"window backwards", goodLines, func(f *Figure) { f.Windows = []Window{{Kind: WindowFault, Start: 2, End: 1}} }, "window 0 (fault) ends at 1 before it starts at 2"},
		{"window NaN", goodLines, func(f *Figure) { f.Windows = []Window{{Kind: WindowCompaction, Start: math.NaN(), End: 1}} }, "window 0 (compaction) from NaN"},
		{"error bars without n", goodBars, func(f *Figure) { f.Series[0].N = nil }, "error bars without n"},
		{"upper error bars without n", goodBars, func(f *Figure) { f.Series[1].ErrorsUp = []float64{1, 1} }, `series "b": error bars without n`},
		{"lines error bars without n", goodLines, func(f *Figure) { f.Series[0].Errors = []float64{1, 1, 1} }, "error bars without n"},
		{"multi-run value without spread", goodBars, func(f *Figure) { f.Series[1].N = []int{1, 4} }, "value 1 comes from 4 runs but shows no spread"},
		{"multi-run point without spread", goodLines, func(f *Figure) { f.Series[0].N = []int{3, 3, 3} }, "value 0 comes from 3 runs"},
		{"n count", goodBars, func(f *Figure) { f.Series[0].N = []int{3} }, "1 n for 2 values"},
		{"n zero", goodBars, func(f *Figure) { f.Series[0].N = []int{0, 3} }, "n[0] = 0"},
		{"n on cdf", goodCDF, func(f *Figure) { f.Series[0].N = []int{1, 1, 1} }, "n on a cdf"},
		{"bars span decades", goodBars, func(f *Figure) { f.Series[1].Values[0] = 3000 }, "y values span 3.5 decades"},
		{"lines x span decades", goodLines, func(f *Figure) { f.Marks = nil; f.Series[0].X = []float64{1, 100, 10000} }, "x values span 4.0 decades (10th..90th percentile 1..10000) on a linear axis; set log_x"},
		{"lines y span decades", goodLines, func(f *Figure) { f.Series[0].Y = []float64{0.5, 60, 900} }, "set log_y"},
		{"cdf x span decades", goodCDF, func(f *Figure) { f.LogX = false; f.Series[0].X[0] = 1 }, "set log_x"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := c.base()
			c.edit(&f)
			err := f.Validate()
			if err == nil {
				t.Fatalf("Validate accepted the figure; want an error containing %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not contain %q", err, c.want)
			}
		})
	}
}

// TestValidateLinearSpanUsesPercentiles: a time series that dips to
// nearly nothing for a few seconds (a stall) stays valid on a linear
// axis; one whose bulk spans decades does not.
func TestValidateLinearSpanUsesPercentiles(t *testing.T) {
	f := goodLines()
	s := &f.Series[0]
	s.X, s.Y = nil, nil
	for i := range 100 {
		y := 5000.0
		if i >= 40 && i < 45 { // 5 % of the seconds
			y = 3
		}
		s.X, s.Y = append(s.X, float64(i)), append(s.Y, y)
	}
	if err := f.Validate(); err != nil {
		t.Fatalf("a stall of 5 %% of the seconds: %v", err)
	}
	for i := 40; i < 60; i++ { // 20 %
		s.Y[i] = 3
	}
	if err := f.Validate(); err == nil || !strings.Contains(err.Error(), "set log_y") {
		t.Fatalf("20 %% of the points 3 decades down: got %v, want a log_y error", err)
	}
	if x, y := f.SpansDecades(); x || !y {
		t.Fatalf("SpansDecades = %v, %v; want false, true", x, y)
	}
	f.LogY = true
	if err := f.Validate(); err != nil {
		t.Fatalf("on a log axis: %v", err)
	}
	f.LogY = false
	s.Y[50] = 0 // a second with nothing done: a log axis could not show it
	if err := f.Validate(); err != nil {
		t.Fatalf("a series that reaches 0: %v", err)
	}
}

func TestValidateAcceptsWindows(t *testing.T) {
	f := goodLines()
	for _, k := range WindowKinds() {
		f.Windows = append(f.Windows, Window{Kind: k, Label: string(k), Start: 0.5, End: 1.5, Node: 2})
	}
	f.Windows = append(f.Windows, Window{Kind: WindowLeaderChange, Start: 1, End: 1}) // zero length
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	f := goodBars()
	f.Name = ""
	f.YLabel = ""
	f.Series[0].Values = []float64{1}
	f.Series[1].Missing = []int{7}
	err := f.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"empty name", "empty y label", "1 values for 2 categories", "missing index 7"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if n := len(strings.Split(err.Error(), "\n")); n < 4 {
		t.Errorf("want one line per problem, got %d lines:\n%v", n, err)
	}
}

func TestSaveLoadRoundTripAndMerge(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := Load(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load of missing file: %v, want fs.ErrNotExist", err)
	}
	lines, bars := goodLines(), goodBars()
	if err := Save(dir, lines, bars); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Figure{bars, lines}; !reflect.DeepEqual(got, want) { // sorted by name
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}

	// Replace one by name, add another: the third is kept.
	bars2 := goodBars()
	bars2.Title = "replaced"
	cdf := goodCDF()
	if err := Save(dir, bars2, cdf); err != nil {
		t.Fatal(err)
	}
	got, err = Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Figure{bars2, cdf, lines}; !reflect.DeepEqual(got, want) {
		t.Fatalf("merge:\n got %+v\nwant %+v", got, want)
	}

	// The file is indented JSON.
	data, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte("\n  {\n    \"name\": \"bars\"")) {
		t.Errorf("not indented JSON:\n%.200s", data)
	}

	// An invalid figure: nothing is written.
	bad := goodLines()
	bad.Name = "bad name"
	if err := Save(dir, bad, goodCDF()); err == nil || !strings.Contains(err.Error(), "safe file stem") {
		t.Fatalf("Save of an invalid figure: %v", err)
	}
	after, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil || !bytes.Equal(after, data) {
		t.Fatalf("file changed by a failed Save (err %v)", err)
	}
	tmps, _ := filepath.Glob(filepath.Join(dir, ".*.tmp"))
	if len(tmps) > 0 {
		t.Errorf("temporary files left: %v", tmps)
	}
}

func TestLoadCorrupt(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), FileName) {
		t.Fatalf("Load of corrupt file: %v", err)
	}
	if err := Save(dir, goodBars()); err == nil {
		t.Fatal("Save over a corrupt file succeeded; it would drop the figures it could not read")
	}
}

// checkDrawn checks dir/<name>.png decodes to 900 x 600 pixels with ink on
// it, dir/<name>.svg holds the title, and dir/<name>.pdf is a PDF of one
// column's width.
func checkDrawn(t *testing.T, dir string, f Figure) {
	t.Helper()
	pf, err := os.Open(filepath.Join(dir, f.Name+".png"))
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	img, err := png.Decode(pf)
	if err != nil {
		t.Fatalf("%s.png: %v", f.Name, err)
	}
	if b := img.Bounds(); b.Dx() != 900 || b.Dy() != 600 {
		t.Errorf("%s.png is %dx%d, want 900x600", f.Name, b.Dx(), b.Dy())
	}
	dark := 0 // on every other pixel of every other row
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r < 0x8000 && g < 0x8000 && bl < 0x8000 {
				dark++
			}
		}
	}
	if dark < 500 {
		t.Errorf("%s.png looks blank: %d dark pixels", f.Name, dark)
	}
	svg, err := os.ReadFile(filepath.Join(dir, f.Name+".svg"))
	if err != nil {
		t.Fatal(err)
	}
	if len(svg) == 0 || !bytes.Contains(svg, []byte("<svg")) {
		t.Errorf("%s.svg is not an SVG", f.Name)
	}
	if !bytes.Contains(svg, []byte(f.Title)) {
		t.Errorf("%s.svg lacks the title %q", f.Name, f.Title)
	}
	for _, label := range []string{f.XLabel, f.YLabel} {
		if label != "" && !bytes.Contains(svg, []byte(label)) {
			t.Errorf("%s.svg lacks the axis label %q", f.Name, label)
		}
	}
	pdf, err := os.ReadFile(filepath.Join(dir, f.Name+".pdf"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(pdf, []byte("%PDF-")) {
		t.Errorf("%s.pdf is not a PDF", f.Name)
	}
	if want := "/MediaBox [0 0 237.60 172.80]"; !bytes.Contains(pdf, []byte(want)) {
		t.Errorf("%s.pdf lacks %q (3.3 x 2.4 in)", f.Name, want)
	}
}

func TestRenderEachKind(t *testing.T) {
	logBars := goodBars()
	logBars.Name, logBars.LogY = "bars-log", true
	logBars.Series[0].Errors = []float64{0.5, 0.5}
	linesErr := goodLines()
	linesErr.Name = "lines-errors"
	linesErr.Series[0].Errors = []float64{0.5, 0.5, 0.5}
	linesErr.Series[0].ErrorsUp = []float64{0.2, 1, 0.5}
	linesErr.Series[0].N = []int{5, 5, 4}
	linesErr.HLines = []Mark{{At: 5.5, Label: "target"}}
	logLines := goodLines()
	logLines.Name, logLines.LogY = "lines-logy", true
	linCDF := goodCDF()
	linCDF.Name, linCDF.LogX = "cdf-linear", false
	linCDF.Marks = []Mark{{At: 500, Label: "p90"}}
	single := Figure{Name: "single", Title: "One point", Kind: Lines, XLabel: "x (s)", YLabel: "y (ops/s)",
		Series: []Series{{Name: "only", X: []float64{3}, Y: []float64{3}}}}
	allMissing := goodBars()
	allMissing.Name = "bars-missing"
	allMissing.Series[1].Missing = []int{0, 1}

	dir := t.TempDir()
	for _, f := range []Figure{goodBars(), goodLines(), goodCDF(), logBars, linesErr, logLines, linCDF, single, allMissing, sampleBars(), sampleCDF(), sampleLines()} {
		t.Run(f.Name, func(t *testing.T) {
			t.Parallel()
			if err := Render(dir, f); err != nil {
				t.Fatal(err)
			}
			checkDrawn(t, dir, f)
		})
	}
}

func TestRenderRejectsInvalid(t *testing.T) {
	dir := t.TempDir()
	f := goodCDF()
	f.Series[0].Y[0] = 2
	if err := Render(dir, f); err == nil {
		t.Fatal("Render drew an invalid figure")
	}
	if _, err := os.Stat(filepath.Join(dir, f.Name+".png")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("PNG of an invalid figure exists (%v)", err)
	}
}

func TestRenderIsDeterministic(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, f := range []Figure{sampleBars(), sampleLines()} {
		if err := Render(a, f); err != nil {
			t.Fatal(err)
		}
		if err := Render(b, f); err != nil {
			t.Fatal(err)
		}
		for _, ext := range []string{".png", ".svg", ".pdf"} {
			x, _ := os.ReadFile(filepath.Join(a, f.Name+ext))
			y, _ := os.ReadFile(filepath.Join(b, f.Name+ext))
			if !bytes.Equal(x, y) {
				t.Errorf("%s%s differs between two renders", f.Name, ext)
			}
		}
	}
}

// writeRaw writes figs to dir/figures.json without validating them.
func writeRaw(t *testing.T, dir string, figs ...Figure) {
	t.Helper()
	data, err := json.Marshal(figs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, FileName), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRenderAllDrawsValidAndNamesInvalid(t *testing.T) {
	root := t.TempDir()
	bad := goodLines()
	bad.Name = "broken"
	bad.Series[0].Y = bad.Series[0].Y[:1]
	if err := Save(filepath.Join(root, "put"), goodBars(), goodCDF()); err != nil {
		t.Fatal(err)
	}
	writeRaw(t, filepath.Join(root, "nested", "gc"), goodLines(), bad)

	n, err := RenderAll(root)
	if n != 3 {
		t.Errorf("drew %d figures, want 3", n)
	}
	if err == nil {
		t.Fatal("no error for the invalid figure")
	}
	for _, want := range []string{filepath.Join(root, "nested", "gc", FileName), `"broken"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	checkDrawn(t, filepath.Join(root, "put"), goodBars())
	checkDrawn(t, filepath.Join(root, "put"), goodCDF())
	checkDrawn(t, filepath.Join(root, "nested", "gc"), goodLines())
	if _, err := os.Stat(filepath.Join(root, "nested", "gc", "broken.png")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("broken.png exists (%v)", err)
	}

	if n, err := RenderAll(t.TempDir()); n != 0 || err != nil {
		t.Errorf("RenderAll of an empty tree: %d, %v", n, err)
	}
}

// TestRenderTree: RenderTree reports each PNG drawn and counts the files;
// a bad figure is an ordinary error after the good ones were drawn. (The
// command-line checks of `nezha plot` are in cmd/nezha.)
func TestRenderTree(t *testing.T) {
	root := t.TempDir()
	if err := Save(filepath.Join(root, "a"), goodBars(), goodLines()); err != nil {
		t.Fatal(err)
	}
	var pngs []string
	files, drawn, err := RenderTree(root, func(png string) { pngs = append(pngs, png) })
	if err != nil || files != 1 || drawn != 2 {
		t.Fatalf("RenderTree: %d files, %d drawn, %v; want 1, 2, nil", files, drawn, err)
	}
	for _, want := range []string{filepath.Join(root, "a", "bars.png"), filepath.Join(root, "a", "lines.png")} {
		if !slices.Contains(pngs, want) {
			t.Errorf("reported PNGs %v lack %q", pngs, want)
		}
	}
	checkDrawn(t, filepath.Join(root, "a"), goodBars())

	bad := goodCDF()
	bad.Series[0].Y[0] = 3
	writeRaw(t, filepath.Join(root, "b"), bad)
	files, drawn, err = RenderTree(root, nil)
	if err == nil || !strings.Contains(err.Error(), `"cdf"`) {
		t.Fatalf("bad figure: %v", err)
	}
	if files != 2 || drawn != 2 {
		t.Errorf("with a bad figure: %d files, %d drawn; want 2, 2", files, drawn)
	}
}

func TestTickLabel(t *testing.T) {
	for _, c := range []struct {
		v    float64
		log  bool
		want string
	}{
		{0, false, "0"}, {0.30000000000000004, false, "0.3"}, {750, false, "750"}, {1500, false, "1500"},
		{12000, false, "12k"}, {1.5e6, false, "1.5M"}, {2e9, false, "2G"}, {1000, true, "1k"}, {100, true, "100"},
		{-20000, false, "-20k"},
	} {
		if got := tickLabel(c.v, c.log); got != c.want {
			t.Errorf("tickLabel(%v, %v) = %q, want %q", c.v, c.log, got, c.want)
		}
	}
}

func TestLogTicksLabelNarrowRanges(t *testing.T) {
	labelled := func(min, max float64) []string {
		var ls []string
		for _, tk := range (logTicks{}).Ticks(min, max) {
			if tk.Label != "" && tk.Value >= min && tk.Value <= max {
				ls = append(ls, tk.Label)
			}
		}
		return ls
	}
	if got := labelled(200, 900); len(got) < 2 {
		t.Errorf("range 200..900 labelled %v; want at least two labels", got)
	}
	if got := labelled(30, 20000); !reflect.DeepEqual(got, []string{"100", "1k", "10k"}) {
		t.Errorf("range 30..20000 labelled %v", got)
	}
}

// TestTicksLabelEveryAxis: every axis range gets at least two labelled
// ticks inside it, on log axes inside one decade too.
func TestTicksLabelEveryAxis(t *testing.T) {
	ranges := [][2]float64{{120, 180}, {1.1, 1.9}, {0.5, 0.9}, {150, 900}, {3, 7000}, {1e3, 1e9}, {99, 101}, {0.002, 0.0031}}
	for _, c := range []struct {
		name string
		tk   plot.Ticker
	}{{"log", logTicks{}}, {"linear", linearTicks{}}} {
		for _, r := range append(ranges, [2]float64{0, 1}, [2]float64{-5, 5}) {
			if c.name == "log" && r[0] <= 0 {
				continue
			}
			var labels []string
			for _, tk := range c.tk.Ticks(r[0], r[1]) {
				if tk.Label != "" && tk.Value >= r[0] && tk.Value <= r[1] {
					labels = append(labels, tk.Label)
				}
			}
			if len(labels) < minTickLabels {
				t.Errorf("%s ticks of %v..%v label %v; want at least %d", c.name, r[0], r[1], labels, minTickLabels)
			}
		}
	}
}

// TestPaperLayoutFonts: every text of every test figure, drawn in the
// paper layout, prints at paperMinFontPt or more, and the page is one
// column wide.
func TestPaperLayoutFonts(t *testing.T) {
	l := paperLayout()
	if got := l.width * vg.Length(l.scale); math.Abs(float64(got-paperWidth)) > 1e-9 {
		t.Fatalf("paper width %v, want %v", got, paperWidth)
	}
	withRuns := goodLines()
	withRuns.Series[0].Errors, withRuns.Series[0].N = []float64{1, 1, 1}, []int{2, 3, 3}
	for _, f := range []Figure{goodBars(), goodLines(), goodCDF(), withRuns, sampleBars(), sampleCDF(), sampleLines()} {
		rec := &recorder.Canvas{}
		if err := drawFigure(onCanvas(rec, l), f, l); err != nil {
			t.Fatal(err)
		}
		texts := 0
		for _, a := range rec.Actions {
			fs, ok := a.(*recorder.FillString)
			if !ok {
				continue
			}
			texts++
			if fs.Size < vg.Points(paperMinFontPt)-1e-9 {
				t.Errorf("%s: %q printed at %.2f pt, below %d pt", f.Name, fs.String, fs.Size.Points(), paperMinFontPt)
			}
			if fs.String == f.Title {
				t.Errorf("%s: the paper layout drew the title", f.Name)
			}
		}
		if texts == 0 {
			t.Errorf("%s: no text drawn", f.Name)
		}
	}
}

// TestWindowsAreShaded: a GC window shades the data area where it lies
// (grey pixels, not white) and adds one legend entry per kind.
func TestWindowsAreShaded(t *testing.T) {
	plain := goodLines()
	plain.Marks = nil
	plain.Series[0].X, plain.Series[0].Y = []float64{0, 10}, []float64{1, 1} // a line at the bottom
	shaded := plain
	shaded.Windows = []Window{
		{Kind: WindowGC, Label: "GC 1", Start: 2, End: 6, Node: 1},
		{Kind: WindowGC, Label: "GC 1", Start: 3, End: 7, Node: 2},
		{Kind: WindowFault, Label: "kill node 3", Start: 8, End: 9, Node: 3},
		{Kind: WindowLeaderChange, Start: 100, End: 101}, // beyond the axis: not drawn, not widening it
	}
	grey := func(f Figure) (inside, outside int) {
		l := screenLayout()
		img := vgimg.NewWith(vgimg.UseWH(l.width, l.height), vgimg.UseDPI(int(l.dpi)))
		if err := drawFigure(onCanvas(img, l), f, l); err != nil {
			t.Fatal(err)
		}
		im := img.Image()
		b := im.Bounds()
		// Sample a row in the upper half of the data area, x at 4 s and
		// at 7.5 s (between the windows): the data area spans roughly the
		// middle 85 % of the width.
		y := b.Dy() * 45 / 100
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := im.At(x, y).RGBA()
			if r != g || g != bl || r > 0xf000 {
				continue
			}
			frac := float64(x) / float64(b.Dx())
			switch {
			case frac > 0.35 && frac < 0.45:
				inside++
			case frac > 0.05 && frac < 0.2:
				outside++
			}
		}
		return inside, outside
	}
	in0, _ := grey(plain)
	in1, out1 := grey(shaded)
	if in0 > 2 {
		t.Fatalf("without windows %d grey pixels where the window would be", in0)
	}
	if in1 < 40 {
		t.Errorf("with a GC window only %d grey pixels in it", in1)
	}
	if out1 > 2 {
		t.Errorf("%d grey pixels outside the windows", out1)
	}
	dir := t.TempDir()
	if err := Render(dir, shaded); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(filepath.Join(dir, shaded.Name+".svg"))
	if err != nil {
		t.Fatal(err)
	}
	for kind, want := range map[WindowKind]int{WindowGC: 1, WindowFault: 1, WindowCompaction: 0, WindowLeaderChange: 1} {
		if got := bytes.Count(svg, []byte(">"+kind.Legend()+"<")); got != want {
			t.Errorf("legend entries %q: %d, want %d", kind.Legend(), got, want)
		}
	}
}

// TestRunsAreShown: a series whose values share one n names it in the
// legend; one whose n differ labels each error bar.
func TestRunsAreShown(t *testing.T) {
	same := goodBars()
	varying := goodLines()
	varying.Name = "lines-runs"
	varying.Series[0].Errors, varying.Series[0].N = []float64{0.5, 0.5, 0.5}, []int{5, 5, 4}
	bars := goodBars()
	bars.Name = "bars-runs"
	bars.Series[0].N = []int{3, 7}
	dir := t.TempDir()
	for _, c := range []struct {
		f         Figure
		want, not []string
	}{
		{same, []string{">a (n = 3)<"}, []string{">n=3<"}},
		{varying, []string{">n=5<", ">n=4<", ">a<"}, []string{"(n = "}},
		{bars, []string{">n=3<", ">n=7<"}, []string{"(n = "}},
	} {
		if err := Render(dir, c.f); err != nil {
			t.Fatal(err)
		}
		svg, err := os.ReadFile(filepath.Join(dir, c.f.Name+".svg"))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range c.want {
			if !bytes.Contains(svg, []byte(w)) {
				t.Errorf("%s.svg lacks %q", c.f.Name, w)
			}
		}
		for _, n := range c.not {
			if bytes.Contains(svg, []byte(n)) {
				t.Errorf("%s.svg has %q", c.f.Name, n)
			}
		}
	}
}

func TestMarkerIndexes(t *testing.T) {
	if got := markerIndexes(5, 0, 3); !reflect.DeepEqual(got, []int{0, 1, 2, 3, 4}) {
		t.Errorf("short series: %v", got)
	}
	a, b := markerIndexes(100, 0, 2), markerIndexes(100, 1, 2)
	if len(a) != markersPerSeries || len(b) != markersPerSeries {
		t.Fatalf("long series: %v %v", a, b)
	}
	for k := range a {
		if a[k] == b[k] || a[k] < 0 || b[k] >= 100 {
			t.Errorf("markers not staggered or out of range: %v %v", a, b)
			break
		}
	}
}

func TestSegmentHits(t *testing.T) {
	r := rectOf(0, 0, 10, 10)
	for _, c := range []struct {
		x0, y0, x1, y1 float64
		want           bool
	}{
		{-5, 5, 15, 5, true}, {-5, -5, -1, 20, false}, {2, 2, 3, 3, true}, {-5, 20, 20, -5, true}, {11, 0, 20, 10, false},
	} {
		if got := segmentHits(segOf(c.x0, c.y0, c.x1, c.y1), r); got != c.want {
			t.Errorf("segment %v: %v, want %v", c, got, c.want)
		}
	}
}

func rectOf(x0, y0, x1, y1 float64) vg.Rectangle {
	return vg.Rectangle{Min: vg.Point{X: vg.Length(x0), Y: vg.Length(y0)}, Max: vg.Point{X: vg.Length(x1), Y: vg.Length(y1)}}
}

func segOf(x0, y0, x1, y1 float64) [2]vg.Point {
	return [2]vg.Point{{X: vg.Length(x0), Y: vg.Length(y0)}, {X: vg.Length(x1), Y: vg.Length(y1)}}
}

func TestErrorExtents(t *testing.T) {
	for _, tc := range []struct {
		s        Series
		down, up float64
	}{
		{Series{}, 0, 0},
		{Series{Errors: []float64{2}}, 2, 2},
		{Series{Errors: []float64{2}, ErrorsUp: []float64{5}}, 2, 5},
		{Series{ErrorsUp: []float64{5}}, 0, 5},
	} {
		if d, u := tc.s.errorExtents(0); d != tc.down || u != tc.up {
			t.Errorf("%+v: %v, %v; want %v, %v", tc.s, d, u, tc.down, tc.up)
		}
	}
}

// TestHLineLabelPlacement: an hline's label goes where it covers no bar:
// between the bars along its line when bars cross the line at both ends
// (the four end places are all taken), and as a key in the free band at
// the top when bars cross it everywhere.
func TestHLineLabelPlacement(t *testing.T) {
	area := vg.Rectangle{Max: vg.Point{X: 400, Y: 300}}
	c := draw.Canvas{Rectangle: area}
	const y = 150
	sty := textStyle(screenLayout().noteSize, 30)
	bar := func(x0, x1, top vg.Length) vg.Rectangle {
		return vg.Rectangle{Min: vg.Point{X: x0}, Max: vg.Point{X: x1, Y: top}}
	}
	line := [][2]vg.Point{{{X: 0, Y: y}, {X: 400, Y: y}}}
	for _, tc := range []struct {
		name    string
		bars    []vg.Rectangle
		wantKey bool
	}{
		{"gap along the line", []vg.Rectangle{bar(0, 100, 200), bar(100, 300, 50), bar(300, 400, 200)}, false},
		{"bars everywhere", []vg.Rectangle{bar(0, 400, 200)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, hits := pickNote(hlineNotes(sty, y, c, "paper: 5.6x"), area, nil, tc.bars)
			b := n.box()
			if hits != 0 {
				t.Fatalf("label box %v meets %d bars", b, hits)
			}
			for _, r := range tc.bars {
				if overlaps(r, b) {
					t.Fatalf("label box %v overlaps bar %v", b, r)
				}
			}
			if n.key != tc.wantKey {
				t.Fatalf("label placed as key %v, want %v (box %v)", n.key, tc.wantKey, b)
			}
			if !n.key && segmentHits(line[0], b) {
				t.Fatalf("label box %v crosses its own line", b)
			}
		})
	}
}

func TestUnionSpans(t *testing.T) {
	got := unionSpans([][2]vg.Length{{5, 6}, {1, 3}, {2, 4}, {4, 4.5}, {7, 8}})
	if want := [][2]vg.Length{{1, 4.5}, {5, 6}, {7, 8}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("union %v, want %v", got, want)
	}
}
