package plots

import (
	"math"
	"math/rand/v2"
	"os"
	"testing"
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

// sampleLines is a per-second throughput time series with a GC round.
func sampleLines() Figure {
	f := Figure{
		Name:   "sample-lines",
		Title:  "PUT throughput over time, 16 KiB values",
		Kind:   Lines,
		XLabel: "time (s)",
		YLabel: "throughput (ops/s)",
		Marks:  []Mark{{At: 40, Label: "GC 1 start"}, {At: 52, Label: "GC 1 end"}},
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
}
