package plots

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/vgimg"
)

// systemNames are the five systems of the harness, in registry order.
func systemNames() []string { return []string{"nezha", "nezha-nogc", "original", "pasv", "blobdb"} }

// sampleBars is a PUT-throughput-per-value-size figure with error bars, a
// missing bar and an hline.
func sampleBars() Figure {
	f := Figure{
		Name:       "sample-bars",
		Title:      "PUT throughput by value size (3 nodes)",
		Kind:       Bars,
		XLabel:     "value size (KiB)",
		YLabel:     "throughput (MB/s)",
		Categories: []string{"1", "4", "16", "64", "256"},
		HLines:     []Mark{{At: 350.0 / 3, Label: "disk limit / 3"}},
		Caption:    "Sample data.",
	}
	base := []float64{1.0, 0.95, 0.35, 0.4, 0.55}
	for i, name := range systemNames() {
		s := Series{Name: name}
		for k := range f.Categories {
			v := 110 * base[i] * (0.25 + 0.75*float64(k)/4)
			s.Values = append(s.Values, math.Round(v*10)/10)
			s.Errors = append(s.Errors, v*0.06)
			s.N = append(s.N, 5)
		}
		if name == "pasv" {
			s.Missing = []int{4}
		}
		f.Series = append(f.Series, s)
	}
	return f
}

// sampleCDF is a GET latency CDF on a log x axis.
func sampleCDF() Figure {
	f := Figure{
		Name:   "sample-cdf",
		Title:  "GET latency, Zipf keys",
		Kind:   CDF,
		XLabel: "latency (µs)",
		YLabel: "cumulative fraction of requests",
		LogX:   true,
		Marks:  []Mark{{At: 10000, Label: "10 ms"}},
	}
	r := rand.New(rand.NewPCG(1, 2))
	medians := []float64{180, 200, 420, 650, 900}
	for i, name := range systemNames() {
		const n = 400
		xs := make([]float64, n)
		for k := range xs {
			xs[k] = medians[i] * math.Exp(0.6*r.NormFloat64())
		}
		sortFloats(xs)
		s := Series{Name: name, X: xs}
		for k := range xs {
			s.Y = append(s.Y, float64(k+1)/n)
		}
		f.Series = append(f.Series, s)
	}
	return f
}

// sampleLines is a per-second throughput time series with a window of
// every kind: GC rounds on two nodes, compactions, a write stall, a fault
// and the leader change it caused.
func sampleLines() Figure {
	f := Figure{
		Name:   "sample-lines",
		Title:  "PUT throughput over time, 16 KiB values",
		Kind:   Lines,
		XLabel: "time (s)",
		YLabel: "throughput (ops/s)",
		Marks:  []Mark{{At: 75, Label: "phase 2"}},
		Windows: []Window{
			{Kind: WindowGC, Label: "GC 1: size", Start: 40, End: 52, Node: 1},
			{Kind: WindowGC, Label: "GC 1: size", Start: 44, End: 55, Node: 2},
			{Kind: WindowCompaction, Start: 8, End: 12.5, Node: 3},
			{Kind: WindowCompaction, Start: 60, End: 63, Node: 1},
			{Kind: WindowWriteStall, Start: 62, End: 63.5, Node: 1},
			{Kind: WindowFault, Label: "kill node 2", Start: 20, End: 27, Node: 2},
			{Kind: WindowLeaderChange, Label: "leader 1 -> 3", Start: 21, End: 21.4},
			{Kind: WindowLeaderChange, Label: "leader 3 -> 1 (transfer)", Start: 85, End: 85},
		},
	}
	r := rand.New(rand.NewPCG(3, 4))
	levels := []float64{14000, 15500, 5200, 6100, 8300}
	for i, name := range systemNames() {
		s := Series{Name: name}
		for t := 0; t < 90; t++ {
			v := levels[i] * (1 + 0.05*r.NormFloat64())
			if name == "nezha" && t >= 40 && t < 52 {
				v *= 0.7
			}
			s.X = append(s.X, float64(t))
			s.Y = append(s.Y, math.Round(v))
		}
		f.Series = append(f.Series, s)
	}
	return f
}

func sortFloats(xs []float64) {
	for i := 1; i < len(xs); i++ {
		for j := i; j > 0 && xs[j] < xs[j-1]; j-- {
			xs[j], xs[j-1] = xs[j-1], xs[j]
		}
	}
}

// TestWriteSamples draws the sample figures into $NEZHA_PLOT_SAMPLES (for
// looking at them); skipped when the variable is unset.
func TestWriteSamples(t *testing.T) {
	dir := os.Getenv("NEZHA_PLOT_SAMPLES")
	if dir == "" {
		t.Skip("NEZHA_PLOT_SAMPLES not set")
	}
	if err := Save(dir, sampleBars(), sampleCDF(), sampleLines()); err != nil {
		t.Fatal(err)
	}
	n, err := RenderAll(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("drew %d figures into %s", n, dir)
	// The paper layout as PNG, to look at without a PDF viewer.
	for _, f := range []Figure{sampleBars(), sampleCDF(), sampleLines()} {
		l := paperLayout()
		img := vgimg.NewWith(vgimg.UseWH(l.width*vg.Length(l.scale), l.height*vg.Length(l.scale)), vgimg.UseDPI(300))
		if err := drawFigure(onCanvas(img, l), f, l); err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dir, f.Name+".paper.png"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(out); err != nil {
			t.Fatal(err)
		}
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
