package experiments

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nezha-harness/nezha/plots"
)

// The paper's average gains of Nezha over Raft+RocksDB
// (docs/architecture.md section 8).
const (
	paperPutGain  = 4.602 // +460.2 %
	paperGetGain  = 0.125 // +12.5 %
	paperScanGain = 0.726 // +72.6 %
	// paperScanGainDwisckey is the paper's SCAN gain of Nezha over
	// Dwisckey (WiscKey under the same Raft layer).
	paperScanGainDwisckey = 2.089 // +208.9 %
)

// The LSM-Raft paper's (Zhang et al., Proc. ACM Manag. Data 3(6), 2025)
// figures for LSM-Raft over the unmodified store: 3-10 % more throughput,
// about 30 % less CPU.
const (
	lsmRaftPaperGainLow, lsmRaftPaperGainHigh = 0.03, 0.10
	lsmRaftPaperCPUChange                     = -0.30
)

// Headline is one row of the headline table: a system's throughput over
// original's, ours beside the paper's, with the regime it was measured in.
type Headline struct {
	Workload string
	System   string
	Ratio    float64 // ours: system / original
	Have     bool
	Paper    float64 // the paper's Nezha / Raft+RocksDB
	// Basis says what was measured (experiment, sizes, repetitions).
	Basis string
	// Regime says the conditions the ratio holds in: write amplification
	// in the window, LSM depth, GC rounds, CPU, where reads were served.
	Regime string
	// Condition is empty for our own conditions, else one of the paper's
	// (ConditionNames): those rows are printed after ours, never mixed.
	Condition string
	// Against is the denominator of Ratio and Paper when it is not
	// original (the paper's Nezha-vs-Dwisckey SCAN row: "dwisckey").
	Against string
	// Bound says what bounded the system and its denominator in their
	// measured windows (put-scale's Bounds), e.g. "nezha: CPU;
	// original: compaction debt"; empty where none was classified.
	Bound string
	// NodeCPUSecPerGiB and AgainstNodeCPUSecPerGiB (PUT rows): the nodes'
	// CPU seconds per GiB of user data per node of System and of its
	// denominator (original, or Against); 0 where not measured.
	NodeCPUSecPerGiB, AgainstNodeCPUSecPerGiB float64
}

// gbPerGiB converts a figure per GB (10^9 bytes) to one per GiB.
const gbPerGiB = float64(gib) / 1e9

// against is the denominator of h: Against, or original.
func (h Headline) against() string { return cmp.Or(h.Against, sysOriginal) }

// cpuText says the node CPU per GiB of h's system and its denominator,
// "" where not measured.
func (h Headline) cpuText() string {
	if h.NodeCPUSecPerGiB <= 0 || h.AgainstNodeCPUSecPerGiB <= 0 {
		return ""
	}
	return fmt.Sprintf("node CPU per GiB: %s %.1f s, %s %.1f s", h.System, h.NodeCPUSecPerGiB, h.against(), h.AgainstNodeCPUSecPerGiB)
}

// headlineSystems are the systems the headline compares with original.
func headlineSystems() []string { return []string{sysNezha, sysNezhaNoGC} }

// mergeResults gathers every result's metrics in one map, and the
// parameters by experiment name.
func mergeResults(results []*Result) (metrics map[string]float64, params map[string]map[string]any) {
	metrics, params = map[string]float64{}, map[string]map[string]any{}
	for _, r := range results {
		for k, v := range r.Metrics {
			metrics[k] = v
		}
		params[r.Name] = r.Params
	}
	return metrics, params
}

// Headlines computes the headline rows from results.
func Headlines(results []*Result) []Headline {
	m, params := mergeResults(results)
	var out []Headline
	ratio := func(metric, sys string) (float64, bool) {
		base, ok := m[metric+"/original"]
		v, ok2 := m[metric+"/"+sys]
		if !ok || !ok2 || base <= 0 {
			return 0, false
		}
		return v / base, true
	}
	if _, ok := m["put_headline/original"]; ok {
		basis := fmt.Sprintf("put-scale: %s values, %s per node, median MB/s of interleaved runs; %s geometry",
			sizeText(m["put_headline_value_bytes"]), bytesText(int64(m["put_headline_data_bytes"])), paramText(params["put-scale"]["geometry"]))
		var bounds []Bound
		for _, r := range results {
			if r.Name == "put-scale" {
				bounds = r.Bounds
				if r.Backend != "" {
					basis += "; backend " + r.Backend
				}
			}
		}
		cpu := func(sys string) float64 { return m["put_headline_node_cpu_s_per_gb/"+sys] * gbPerGiB }
		for _, sys := range headlineSystems() {
			h := Headline{Workload: "PUT", System: sys, Paper: 1 + paperPutGain, Basis: basis, Bound: boundsText(bounds, sys, sysOriginal),
				NodeCPUSecPerGiB: cpu(sys), AgainstNodeCPUSecPerGiB: cpu(sysOriginal)}
			h.Ratio, h.Have = ratio("put_headline", sys)
			h.Regime = fmt.Sprintf("fsync on; write amp in window %.2f (original %.2f); original's LSM down to L%.0f; copying GC rounds/node in window %.1f; machine busy %.0f %% (original %.0f %%)",
				m["put_headline_write_amp/"+sys], m["put_headline_write_amp/original"], m["put_headline_deepest_level/original"],
				m["put_headline_gc_rounds/"+sys], 100*m["put_headline_machine_busy/"+sys], 100*m["put_headline_machine_busy/original"])
			if c := h.cpuText(); c != "" {
				h.Regime += "; " + c
			}
			out = append(out, h)
			if sys != sysNezha {
				continue
			}
			// nezha over each other baseline that ran as a headline
			// system (lsm-raft): its median against theirs.
			for _, other := range paramStrings(params["put-scale"]["headline_systems"]) {
				v, ok := m["put_headline/"+sys]
				base, ok2 := m["put_headline/"+other]
				if slices.Contains(headlineSystems(), other) || other == sysOriginal || !ok || !ok2 || base <= 0 {
					continue
				}
				h := Headline{Workload: "PUT", System: sys, Against: other, Ratio: v / base, Have: true, Basis: basis, Bound: boundsText(bounds, sys, other),
					NodeCPUSecPerGiB: cpu(sys), AgainstNodeCPUSecPerGiB: cpu(other)}
				h.Regime = fmt.Sprintf("fsync on; write amp in window %.2f (%s %.2f%s); machine busy %.0f %% (%s %.0f %%)",
					m["put_headline_write_amp/"+sys], other, m["put_headline_write_amp/"+other], followersText(m, other),
					100*m["put_headline_machine_busy/"+sys], other, 100*m["put_headline_machine_busy/"+other])
				if c := h.cpuText(); c != "" {
					h.Regime += "; " + c
				}
				out = append(out, h)
			}
		}
	}
	for _, rd := range []struct{ workload, metric, exp string }{
		{"GET", "get_ops_per_sec", "get-zipf"}, {"SCAN", "scan_ops_per_sec", "scan"},
	} {
		paper := paperGetGain
		if rd.workload == "SCAN" {
			paper = paperScanGain
		}
		for _, sys := range headlineSystems() {
			h := Headline{Workload: rd.workload, System: sys, Paper: 1 + paper, Basis: rd.exp + ", median ops/s of interleaved runs"}
			h.Ratio, h.Have = ratio(rd.metric, sys)
			if v, ok := m[rd.metric+"_disk_read_kb_per_op/"+sys]; ok {
				h.Regime = fmt.Sprintf("reads from %s; device reads per op: %.0f KB (original %.0f KB)",
					paramText(params[rd.exp]["read_cache"]), v, m[rd.metric+"_disk_read_kb_per_op/original"])
			}
			out = append(out, h)
		}
		// The paper's Nezha-vs-Dwisckey SCAN comparison, when dwisckey ran.
		if rd.workload == "SCAN" {
			v, ok := m[rd.metric+"/"+sysNezha]
			base, ok2 := m[rd.metric+"/"+sysDwisckey]
			if ok && ok2 && base > 0 {
				h := Headline{Workload: rd.workload, System: sysNezha, Against: sysDwisckey, Ratio: v / base, Have: true, Paper: 1 + paperScanGainDwisckey,
					Basis: rd.exp + ", median ops/s of interleaved runs"}
				if kb, ok := m[rd.metric+"_disk_read_kb_per_op/"+sysNezha]; ok {
					h.Regime = fmt.Sprintf("reads from %s; device reads per op: %.0f KB (dwisckey %.0f KB)",
						paramText(params[rd.exp]["read_cache"]), kb, m[rd.metric+"_disk_read_kb_per_op/"+sysDwisckey])
				}
				out = append(out, h)
			}
		}
	}
	// The paper's conditions, after ours.
	for _, c := range ConditionNames() {
		for _, sys := range headlineSystems() {
			v, ok := m[fmt.Sprintf("put_condition_ratio/%s/%s", c, sys)]
			if !ok {
				continue
			}
			ours := m[fmt.Sprintf("put_condition_ratio/ours/%s", sys)]
			out = append(out, Headline{Workload: "PUT", System: sys, Ratio: v, Have: true, Paper: 1 + paperPutGain, Condition: c,
				Basis:  fmt.Sprintf("put-scale, %s per node, %s", bytesText(int64(paramFloat(params["put-scale"]["condition_data_bytes_per_node"]))), conditionBasis(paramFloat(params["put-scale"]["condition_min_seconds"]))),
				Regime: fmt.Sprintf("%s (ours at the same point: %.2fx)", conditionText(c), ours)})
		}
	}
	return out
}

// followersText is ": leader 4.1, followers 1.9 (original's 4.0)" from
// put-scale's headline metrics of sys, "" without them.
func followersText(m map[string]float64, sys string) string {
	l, ok := m["put_headline_leader_write_amp/"+sys]
	f, ok2 := m["put_headline_follower_write_amp/"+sys]
	if !ok || !ok2 {
		return ""
	}
	t := fmt.Sprintf(": leader %.2f, followers %.2f", l, f)
	if of, ok := m["put_headline_follower_write_amp/"+sysOriginal]; ok {
		t += fmt.Sprintf(" (original's followers %.2f)", of)
	}
	return t
}

// paramStrings reads a list parameter, as put in a Result ([]string) or
// read back from JSON ([]any).
func paramStrings(v any) []string {
	switch t := v.(type) {
	case []string:
		return t
	case []any:
		var out []string
		for _, e := range t {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func paramFloat(v any) float64 {
	switch t := v.(type) {
	case float64:
		return t
	case int64:
		return float64(t)
	case int:
		return float64(t)
	}
	return 0
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

// WriteHeadlines prints the headline table as Markdown: our conditions
// first, then the paper's conditions as labelled rows.
func WriteHeadlines(w io.Writer, hs []Headline) {
	fmt.Fprintln(w, "| workload | system | ours: system / original | paper: Nezha / Raft+RocksDB | basis | regime | bound |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	printed := false
	for _, pass := range []bool{false, true} {
		for _, h := range hs {
			if (h.Condition != "") != pass {
				continue
			}
			if pass && !printed {
				fmt.Fprintln(w, "| **the paper's conditions** | | | | | | |")
				printed = true
			}
			ours := "not measured"
			if h.Have {
				ours = fmt.Sprintf("%.2fx (%+.1f %%)", h.Ratio, 100*(h.Ratio-1))
			}
			paper := "-"
			if h.System == sysNezha && h.Paper > 0 {
				paper = fmt.Sprintf("%.3fx (%+.1f %%)", h.Paper, 100*(h.Paper-1))
				if h.Against != "" {
					paper += " over " + capitalize(h.Against)
				}
			}
			system := h.System
			if h.Against != "" {
				system = fmt.Sprintf("%s **over %s**", h.System, h.Against)
			}
			workload := h.Workload
			if h.Condition != "" {
				workload += ", " + h.Condition
			}
			regime := h.Regime
			if regime == "" {
				regime = "-"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", workload, system, ours, paper, h.Basis, regime, cmp.Or(h.Bound, "-"))
		}
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
		writeDifferences(&b, results, hs)
	}
	writeMeasurements(&b, results)
	for _, r := range results {
		fmt.Fprintf(&b, "\n## %s (`%s`)\n\n%s.\n\n", r.Title, r.Name, capitalize(r.Shows))
		if r.Interrupted {
			fmt.Fprintf(&b, "**The run was interrupted during this experiment:** what follows is what it measured before.\n\n")
		}
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
			if f.Interrupted {
				fmt.Fprintf(&b, "**%s interrupted** at %s.\n\n", f.System, f.Step)
				continue
			}
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

// writeMeasurements writes the report's Measurements section: where each
// kind of measurement was taken, on which backend, and what fell back and
// why; and the node hosts as their agents described them.
func writeMeasurements(b *strings.Builder, results []*Result) {
	ms, hosts := MeasurementsText(results), hostsText(results)
	if ms == "" && hosts == "" {
		return
	}
	fmt.Fprintf(b, "\n## Measurements\n\nWhere each kind of measurement was taken and how; a measurement the node hosts did not allow (their agents' Info says why) fell back, and the table says from what.\n\n")
	if ms != "" {
		fmt.Fprintf(b, "%s\n", ms)
	}
	if hosts != "" {
		fmt.Fprintf(b, "**Node hosts** (each node's agent's Info; the controller is `machine` above)\n\n%s\n", hosts)
	}
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

// writeDifferences writes "Where we differ from the paper" from the
// measurements: which of the paper's conditions were reproduced, what each
// gives, and what bounds each ratio in this run.
func writeDifferences(b *strings.Builder, results []*Result, hs []Headline) {
	m, params := mergeResults(results)
	find := func(workload, sys, cond string) (Headline, bool) {
		for _, h := range hs {
			if h.Workload == workload && h.System == sys && h.Condition == cond && h.Have {
				return h, true
			}
		}
		return Headline{}, false
	}
	var lines []string
	add := func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) }
	var bounds []Bound
	for _, r := range results {
		if r.Name == "put-scale" {
			bounds = r.Bounds
		}
	}
	if nogc, ok := find("PUT", sysNezhaNoGC, ""); ok {
		nz, _ := find("PUT", sysNezha, "")
		add("**PUT.** Ours: nezha-nogc %.2fx and nezha %.2fx over original (paper: Nezha %.2fx), with fsync on, incompressible values and %s geometry at %s per node.",
			nogc.Ratio, nz.Ratio, 1+paperPutGain, paramText(params["put-scale"]["geometry"]), bytesText(int64(m["put_headline_data_bytes"])))
		deep := m["put_headline_deepest_level/original"]
		paperDeep := float64(len(expectedLevels(100e9, 256<<20)) - 1)
		add("- Write amplification in the window: original %.2f bytes per user byte per node, nezha-nogc %.2f, nezha %.2f (%.1f GC rounds per node in the window). Original's LSM reached L%.0f; the paper's 100 GB per node under RocksDB's defaults reach L%.0f.",
			m["put_headline_write_amp/original"], m["put_headline_write_amp/nezha-nogc"], m["put_headline_write_amp/nezha"], m["put_headline_gc_rounds/nezha"], deep, paperDeep)
		if sw, ok := m["put_headline_settled_write_amp/original"]; ok && sw > 0 {
			add("- Original's compaction was behind at the end of the window: once it settled, original had written %.2f bytes per user byte and its LSM reached L%.0f (the debt it carried is part of the cost of its PUTs the window does not count).",
				sw, m["put_headline_settled_deepest_level/original"])
		}
		if sw, ok := m["put_headline_settled_write_amp/nezha"]; ok && sw > 0 {
			add("- nezha's GC left its work to the idle time after the window (the default strategy copies nothing while writes flow unless there is garbage): once its idle round had sorted the log, nezha had written %.2f bytes per user byte.", sw)
		}
		if len(bounds) == 0 {
			busy, disk := m["put_headline_machine_busy/nezha-nogc"], m["put_headline_disk_fraction/nezha-nogc"]
			add("- During nezha-nogc's runs the machine was %.0f %% busy and the disk wrote %.0f %% of its limit.", 100*busy, 100*disk)
		}
		add("- Original spent %.1f node-CPU seconds per GB written against nezha-nogc's %.1f.", m["put_headline_node_cpu_s_per_gb/original"], m["put_headline_node_cpu_s_per_gb/nezha-nogc"])
		if _, ok := m["put_headline_cpu_share/original/rocksdb_low_threads"]; ok {
			add("- Where the CPU went (profiled headline runs): original %.0f %% in RocksDB's compaction threads, %.0f %% in its flush threads and %.0f %% in RocksDB calls on the write path; nezha-nogc %.0f %% in system calls (socket and file I/O), %.0f %% copying memory, %.0f %% in gRPC's transport (outside the handlers) and %.0f %% in fsync.",
				100*m["put_headline_cpu_share/original/rocksdb_low_threads"], 100*m["put_headline_cpu_share/original/rocksdb_high_threads"], 100*m["put_headline_cpu_share/original/rocksdb_foreground"],
				100*m["put_headline_cpu_share/nezha-nogc/syscalls"], 100*m["put_headline_cpu_share/nezha-nogc/memmove"], 100*m["put_headline_cpu_share/nezha-nogc/grpc"], 100*m["put_headline_cpu_share/nezha-nogc/fsync"])
		}
		var conds []string
		for _, c := range ConditionNames() {
			if h, ok := find("PUT", sysNezhaNoGC, c); ok {
				hz, _ := find("PUT", sysNezha, c)
				conds = append(conds, fmt.Sprintf("%s: nezha-nogc %.2fx, nezha %.2fx", conditionText(c), h.Ratio, hz.Ratio))
			}
		}
		if len(conds) > 0 {
			add("- The paper's conditions, each measured alone at %s per node (ours there: nezha-nogc %.2fx, nezha %.2fx): %s.",
				bytesText(int64(paramFloat(params["put-scale"]["condition_data_bytes_per_node"]))), m["put_condition_ratio/ours/nezha-nogc"], m["put_condition_ratio/ours/nezha"], strings.Join(conds, "; "))
		}
	}
	// What bounded each headline system, after the PUT paragraph.
	for _, bd := range bounds {
		add("- %s (backend %s) was bounded by **%s** in its headline runs: %s.", bd.System, bd.Backend, bd.Bound, bd.Evidence)
	}
	// nezha over each other headline baseline, and that baseline over
	// original where the LSM-Raft paper has a figure.
	for _, h := range hs {
		if h.Workload != "PUT" || h.Against == "" || h.Condition != "" || !h.Have {
			continue
		}
		o, base := h.Against, m["put_headline/"+sysOriginal]
		line := fmt.Sprintf("**PUT, nezha over %s.** Ours: nezha %.2fx %s's goodput", o, h.Ratio, o)
		if base > 0 {
			line += fmt.Sprintf(", and %s %.2fx original's", o, m["put_headline/"+o]/base)
		}
		add("%s.", line)
		roles := func(sys string) string {
			l, ok := m["put_headline_leader_write_amp/"+sys]
			f, ok2 := m["put_headline_follower_write_amp/"+sys]
			if !ok || !ok2 {
				return sys + " -"
			}
			return fmt.Sprintf("%s %.2f and %.2f", sys, l, f)
		}
		add("- Write amplification in the window, leader and followers: %s, %s, %s (the bytes by cause are in put-scale's table).", roles(o), roles(sysOriginal), roles(sysNezha))
		cpu := func(sys string) float64 { return m["put_headline_node_cpu_s_per_gb/"+sys] * gbPerGiB }
		add("- Node CPU per GiB written: nezha %.1f s, %s %.1f s, original %.1f s.", cpu(sysNezha), o, cpu(o), cpu(sysOriginal))
		if o == sysLSMRaft && base > 0 && cpu(sysOriginal) > 0 {
			add("- The LSM-Raft paper reports %.0f-%.0f %% more throughput and about %.0f %% less CPU than the unmodified store; here lsm-raft has %+.0f %% goodput and %+.0f %% node CPU per GiB against original.",
				100*lsmRaftPaperGainLow, 100*lsmRaftPaperGainHigh, -100*lsmRaftPaperCPUChange, 100*(m["put_headline/"+o]/base-1), 100*(cpu(o)/cpu(sysOriginal)-1))
		}
	}
	for _, rd := range []struct{ workload, exp string }{{"GET", "get-zipf"}, {"SCAN", "scan"}} {
		h, ok := find(rd.workload, sysNezha, "")
		if !ok {
			continue
		}
		paper := 1 + paperGetGain
		if rd.workload == "SCAN" {
			paper = 1 + paperScanGain
		}
		rc := paramText(params[rd.exp]["read_cache"])
		add("**%s.** Ours: nezha %.2fx over original (paper %.3fx); reads from %s, %s.", rd.workload, h.Ratio, paper, rc, readRegime(params[rd.exp]))
		if strings.HasPrefix(rc, "page cache") {
			add("- The paper's reads went to SSDs (100 GB per node); here they were served from memory, so the ratio measures CPU per operation, not I/O.")
		}
		op := strings.ToLower(rd.workload)
		kb := func(sys string) float64 { return m[op+"_ops_per_sec_disk_read_kb_per_op/"+sys] }
		if kb(sysNezha) > 0 || kb(sysOriginal) > 0 {
			add("- Device reads per %s: nezha %.1f KB, original %.1f KB (the nodes' read_bytes over the operations).", rd.workload, kb(sysNezha), kb(sysOriginal))
		}
		busy := func(sys string) float64 { return m[op+"_cpu_share/"+sys+"/machine_busy"] }
		if _, ok := m[op+"_cpu_share/"+sysNezha+"/machine_busy"]; ok {
			share := func(sys, key string) float64 { return 100 * m[op+"_cpu_share/"+sys+"/"+key] }
			add("- Profiled %s runs (the second of each system): the machine was %.0f %% busy during nezha's and %.0f %% during original's (nodes and clients on two cores); node CPU per %s: nezha %.0f us, original %.0f us. nezha's nodes had %.0f %% of their CPU samples in system calls, %.0f %% in gRPC's transport (outside the handlers) and %.0f %% in its store; original's %.0f %% in RocksDB calls and %.0f %% in gRPC's transport (each share counts the samples with that part anywhere on the stack, so the parts overlap and do not add up to 100 %%).",
				rd.workload, 100*busy(sysNezha), 100*busy(sysOriginal), rd.workload, m[op+"_node_cpu_us_per_op/"+sysNezha], m[op+"_node_cpu_us_per_op/"+sysOriginal],
				share(sysNezha, "syscalls"), share(sysNezha, "grpc"), share(sysNezha, "nezha_store"), share(sysOriginal, "rocksdb_foreground"), share(sysOriginal, "grpc"))
			if busy(sysNezha) >= 0.9 && busy(sysOriginal) >= 0.9 {
				add("- Both systems' %s runs kept the two CPUs busy: the ratio is one of CPU per operation on a shared machine (nodes and clients), which the device reads above do not bound.", rd.workload)
			}
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(b, "\n### Where we differ from the paper\n\nGenerated from this run's measurements.\n\n%s\n", strings.Join(lines, "\n"))
}

// conditionBasis says what a condition row's ratio is a ratio of, from
// put-scale's condition_min_seconds parameter (0 or absent: single runs).
func conditionBasis(minSeconds float64) string {
	if minSeconds <= 0 {
		return "one run each"
	}
	return fmt.Sprintf("medians of runs adding up to %.0f s each", minSeconds)
}

// readRegime says what a read experiment's runs read, from its parameters:
// keys, value size and so the data per node, clients, the Zipf exponent
// (get-zipf) or keys per scan (scan).
func readRegime(p map[string]any) string {
	keys, vb := paramFloat(p["keys"]), paramFloat(p["value_bytes"])
	value := bytesText(int64(vb))
	if vb < mib {
		value = fmt.Sprintf("%g KiB", vb/kib)
	}
	clients := paramText(p["clients"]) + " clients"
	if clients == "1 clients" {
		clients = "1 client"
	}
	out := fmt.Sprintf("%s keys x %s (%s per node), %s", paramText(p["keys"]), value, bytesText(int64(keys*vb)), clients)
	if z, ok := p["zipf"]; ok {
		out += ", Zipf " + paramText(z)
	}
	if n, ok := p["scan_size"]; ok {
		out += ", " + paramText(n) + " keys per scan"
	}
	return out
}
