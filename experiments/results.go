package experiments

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/nezha-harness/nezha/internal/buildinfo"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

// What an experiment leaves in its results directory (result.json) and
// reading it back.

// Result is what one experiment leaves in <out>/<name>/result.json; the
// report and the headline table are built from it.
type Result struct {
	Name     string         `json:"name"`
	Title    string         `json:"title"`
	Shows    string         `json:"shows"`
	Params   map[string]any `json:"params"`
	Tables   []Table        `json:"tables"`
	Figures  []string       `json:"figures"`
	Failures []Failure      `json:"failures,omitempty"`
	Notes    []string       `json:"notes,omitempty"`
	// Metrics are named numbers other parts of the report use, e.g.
	// "disk_limit_mb_per_sec" or "put_mb_per_sec/nezha/256".
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// Samples are the per-run values behind a metric that is the median
	// of repeated runs (same key as in Metrics), for `experiment
	// compare`'s spread and significance; absent for single measurements.
	Samples  map[string][]float64 `json:"samples,omitempty"`
	Start    time.Time            `json:"start"`
	Duration float64              `json:"duration_sec"`
	Error    string               `json:"error,omitempty"`
	// Interrupted: the run was stopped (SIGINT, SIGTERM, a closed output)
	// while this experiment ran; its tables hold what it measured before.
	Interrupted bool `json:"interrupted,omitempty"`
	// Build is what the binary that ran the experiment was built from
	// (module version, VCS revision, Go version; package buildinfo).
	Build *buildinfo.Info `json:"build,omitempty"`
	// Backend is where the experiment's nodes ran (cluster.Backends).
	Backend string `json:"backend,omitempty"`
	// Hosts are the machines its nodes ran on, as their agents described
	// them (each once).
	Hosts []HostInfo `json:"hosts,omitempty"`
	// Measurements say where each kind of measurement was taken and what
	// fell back, and why.
	Measurements []Measurement `json:"measurements,omitempty"`
	// Bounds name what limited each headline system in its measured
	// windows (put-scale), with the numbers that decided it.
	Bounds []Bound `json:"bounds,omitempty"`
	// Windows are what happened during the runs behind the time-series
	// figures (GC rounds, compactions, write stalls, leader changes,
	// faults), per run, as the figures shade them (timewindows.go).
	Windows []RunWindows `json:"windows,omitempty"`
}

// Table is a table of the report.
type Table struct {
	Title   string     `json:"title"`
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

// Failure is a system that failed during an experiment; the others ran.
type Failure struct {
	System string `json:"system"`
	Step   string `json:"step"`
	Error  string `json:"error"`
	// Interrupted: the step did not fail; the run was stopped during it
	// (Error is what the step returned then).
	Interrupted bool `json:"interrupted,omitempty"`
	// LogTails are the last lines of each node's log.
	LogTails map[string]string `json:"log_tails,omitempty"`
}

// LoadResults reads every <dir>/*/result.json, in experiment order.
func LoadResults(dir string) ([]*Result, error) {
	order := map[string]int{}
	for i, e := range All() {
		order[e.Name] = i
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*", "result.json"))
	if err != nil {
		return nil, err
	}
	var out []*Result
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var r Result
		if err := json.Unmarshal(b, &r); err != nil || r.Name == "" || r.Metrics == nil && r.Params == nil {
			continue // some other tool's result.json (e.g. a check run)
		}
		out = append(out, &r)
	}
	if len(out) == 0 {
		return nil, cmdline.Usagef("%s holds no experiment results (<dir>/<experiment>/result.json)", dir)
	}
	sort.SliceStable(out, func(i, j int) bool { return order[out[i].Name] < order[out[j].Name] })
	return out, nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
