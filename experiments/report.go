package experiments

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nezha-harness/nezha/plots"
)

// The paper's average gains of Nezha over Raft+RocksDB (seed nezha-readme,
// DESIGN.md section 8).
const (
	paperPutGain  = 4.602 // +460.2 %
	paperGetGain  = 0.125 // +12.5 %
	paperScanGain = 0.726 // +72.6 %
)

// Headline is one row of the headline table: a system's throughput over
// original's, ours beside the paper's.
type Headline struct {
	Workload string
	System   string
	Ratio    float64 // ours: system / original
	Have     bool
	Paper    float64 // the paper's Nezha / Raft+RocksDB
	Basis    string
}

// Headlines computes the headline rows from results.
func Headlines(results []*Result) []Headline {
	m := map[string]float64{}
	maxSize := 0
	for _, r := range results {
		for k, v := range r.Metrics {
			m[k] = v
			var sys string
			var size int
			if n, _ := fmt.Sscanf(strings.ReplaceAll(k, "/", " "), "put_mb_per_sec %s %d", &sys, &size); n == 2 && size > maxSize {
				maxSize = size
			}
		}
	}
	var out []Headline
	add := func(workload, metric, basis string, paper float64) {
		base, ok := m[metric+"/original"]
		for _, sys := range []string{"nezha", "nezha-nogc"} {
			h := Headline{Workload: workload, System: sys, Paper: 1 + paper, Basis: basis}
			if v, ok2 := m[metric+"/"+sys]; ok && ok2 && base > 0 {
				h.Ratio, h.Have = v/base, true
			}
			out = append(out, h)
		}
	}
	if maxSize > 0 {
		add("PUT", "put_headline", fmt.Sprintf("put-vsize, %d KiB values, median MB/s of the headline runs", maxSize), paperPutGain)
	}
	add("GET", "get_ops_per_sec", "get-zipf, median ops/s", paperGetGain)
	add("SCAN", "scan_ops_per_sec", "scan, median ops/s", paperScanGain)
	return out
}

// AnyMeasured reports whether the run measured any headline ratio (a run
// of, say, linearizability alone has none, and prints no headline table).
func AnyMeasured(hs []Headline) bool {
	for _, h := range hs {
		if h.Have {
			return true
		}
	}
	return false
}

// WriteHeadlines prints the headline table as Markdown.
func WriteHeadlines(w io.Writer, hs []Headline) {
	fmt.Fprintln(w, "| workload | system | ours: system / original | paper: Nezha / Raft+RocksDB | basis |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, h := range hs {
		ours := "not measured"
		if h.Have {
			ours = fmt.Sprintf("%.2fx (%+.1f %%)", h.Ratio, 100*(h.Ratio-1))
		}
		paper := "-"
		if h.System == "nezha" {
			paper = fmt.Sprintf("%.3fx (%+.1f %%)", h.Paper, 100*(h.Paper-1))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", h.Workload, h.System, ours, paper, h.Basis)
	}
}

// WriteReport writes dir/report.md from the results in dir.
func WriteReport(dir string, info map[string]any) (string, error) {
	results, err := LoadResults(dir)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Nezha harness results\n\n")
	if info != nil {
		if p, ok := info["profile_text"].(string); ok {
			fmt.Fprintf(&b, "%s\n\n", p)
		}
		keys := make([]string, 0, len(info))
		for k := range info {
			if k != "profile_text" && k != "profile" && k != "run" {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "- **%s**: %v\n", k, info[k])
		}
		fmt.Fprintln(&b)
	}
	fmt.Fprintf(&b, "Full configuration, seeds and machine: `config.json`. Figures are redrawn from the saved `figures.json` files with `nezha plot %s`; this report with `nezha experiment report %s`.\n\n", dir, dir)
	if hs := Headlines(results); AnyMeasured(hs) {
		fmt.Fprintf(&b, "## Headline\n\nThroughput over Raft+RocksDB (`original`), measured side by side in this run, beside the paper's averages (3 machines with SSDs and 10 GbE, 100 GB). Here all three nodes share one disk and two cores, so absolute numbers are far lower; ratios are what compare.\n\n")
		WriteHeadlines(&b, hs)
	}
	for _, r := range results {
		fmt.Fprintf(&b, "\n## %s (`%s`)\n\n%s.\n\n", r.Title, r.Name, capitalize(r.Shows))
		if r.Error != "" {
			fmt.Fprintf(&b, "**The experiment stopped with an error:** `%s`\n\n", oneLineText(r.Error))
		}
		if len(r.Params) > 0 {
			keys := make([]string, 0, len(r.Params))
			for k := range r.Params {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			var parts []string
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%s = %s", k, paramText(r.Params[k])))
			}
			fmt.Fprintf(&b, "Parameters: %s. Took %s.\n\n", strings.Join(parts, ", "), time.Duration(r.Duration*float64(time.Second)).Round(time.Second).String())
		}
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "%s\n\n", n)
		}
		for _, t := range r.Tables {
			writeTable(&b, t)
		}
		figs, _ := plots.Load(filepath.Join(dir, r.Name))
		byName := map[string]plots.Figure{}
		for _, f := range figs {
			byName[f.Name] = f
		}
		for _, name := range r.Figures {
			f := byName[name]
			fmt.Fprintf(&b, "![%s](%s/%s.png)\n\n", f.Title, r.Name, name)
			if f.Caption != "" {
				fmt.Fprintf(&b, "*%s*\n\n", f.Caption)
			}
		}
		for _, f := range r.Failures {
			fmt.Fprintf(&b, "**%s failed** at %s: `%s`\n\n", f.System, f.Step, oneLineText(f.Error))
			nodes := make([]string, 0, len(f.LogTails))
			for n := range f.LogTails {
				nodes = append(nodes, n)
			}
			sort.Strings(nodes)
			for _, n := range nodes {
				fmt.Fprintf(&b, "<details><summary>%s log tail</summary>\n\n```\n%s\n```\n</details>\n\n", n, f.LogTails[n])
			}
		}
	}
	path := filepath.Join(dir, "report.md")
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

func writeTable(b *strings.Builder, t Table) {
	if t.Title != "" {
		fmt.Fprintf(b, "**%s**\n\n", t.Title)
	}
	fmt.Fprintf(b, "| %s |\n|%s\n", strings.Join(t.Columns, " | "), strings.Repeat("---|", len(t.Columns)))
	for _, r := range t.Rows {
		fmt.Fprintf(b, "| %s |\n", strings.Join(r, " | "))
	}
	fmt.Fprintln(b)
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func oneLineText(s string) string { return strings.ReplaceAll(s, "\n", " ") }

// paramText renders a parameter read back from JSON: whole numbers
// without exponent, lists as [a b c].
func paramText(v any) string {
	switch t := v.(type) {
	case float64:
		if t == float64(int64(t)) {
			return fmt.Sprint(int64(t))
		}
		return fmt.Sprint(t)
	case []any:
		parts := make([]string, len(t))
		for i, e := range t {
			parts[i] = paramText(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return fmt.Sprint(v)
}
