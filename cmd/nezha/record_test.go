package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/experiments"
)

// fakeRun writes a results directory as `experiment run put-scale` leaves
// it: config.json, report.md, put-scale's result.json with the headline
// metrics, and the headline figure.
func fakeRun(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := map[string]any{
		"tool": "experiment", "command": []string{"nezha", "experiment", "run", "put-scale", "-profile", "quick"},
		"start": "2026-12-05T03:39:58Z", "git_commit": "a93842eca68bc8edcb20fb4e3ba041ffed3a2b47", "git_dirty": false,
		"git_commit_source": "build info", "go_version": "go1.26.8", "hostname": "vm", "cpus": 2, "cpu_model": "AMD EPYC",
		"kernel": "6.18", "config": map[string]any{"profile": map[string]any{"name": "quick"}, "experiments": []string{"put-scale"}},
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	write("config.json", string(b))
	write("report.md", "# Nezha harness results\n\n## PUT vs data per node (`put-scale`)\n\n![PUT goodput over original's vs data per node](put-scale/put-scale-ratio.png)\n")
	write("put-scale/result.json", `{"name": "put-scale", "title": "PUT", "params": {"geometry": "scaled"}, "metrics": {
		"put_headline/original": 10, "put_headline/nezha": 25, "put_headline/nezha-nogc": 30,
		"put_headline_value_bytes": 262144, "put_headline_data_bytes": 536870912}}`)
	write(headlineFigure, "<svg/>")
	return dir
}

// TestExperimentRecord: a record names the run's command, commit and
// machine and holds its report with figures named, not shown; -readme
// rewrites the headline block alone and copies the figure beside the
// record; a record is never replaced, and bad input changes nothing.
func TestExperimentRecord(t *testing.T) {
	run := fakeRun(t)
	docs := filepath.Join(t.TempDir(), "results")
	readme := filepath.Join(filepath.Dir(docs), "README.md")
	before, after := "# Title\n\nintro\n\n", "\n## Next\n"
	if err := os.WriteFile(readme, []byte(before+headlineBegin+" -->\nold table\n"+headlineEnd+after), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runNezha(t, "experiment", "record", run, "-docs", docs, "-readme", readme)
	if code != 0 {
		t.Fatalf("experiment record: exit %d, stderr %q", code, stderr)
	}
	path := filepath.Join(docs, "2026-12-05-quick-put-scale.md")
	if strings.TrimSpace(stdout) != path {
		t.Errorf("stdout %q, want the record's path %s", stdout, path)
	}
	rec, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"`nezha experiment run put-scale -profile quick`", "a93842eca68bc8edcb20fb4e3ba041ffed3a2b47", "vm, 2 CPUs (AMD EPYC)",
		"## PUT vs data per node", "*Figure: PUT goodput over original's vs data per node* (`put-scale/put-scale-ratio.png` in the results directory)",
	} {
		if !strings.Contains(string(rec), want) {
			t.Errorf("the record lacks %q:\n%s", want, rec)
		}
	}
	if strings.Contains(string(rec), "# Nezha harness results") || strings.Contains(string(rec), "![") {
		t.Errorf("the record keeps the report's title or an image:\n%s", rec)
	}
	got, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	s := string(got)
	if !strings.HasPrefix(s, before+headlineBegin) || !strings.HasSuffix(s, headlineEnd+after) || strings.Contains(s, "old table") {
		t.Errorf("the README outside its headline block changed, or the old block stayed:\n%s", s)
	}
	for _, want := range []string{
		"](results/2026-12-05-quick-put-scale/put-scale-ratio.svg)", "[results/2026-12-05-quick-put-scale.md](results/2026-12-05-quick-put-scale.md)",
		"| PUT | nezha | 2.50x", "| PUT | nezha-nogc | 3.00x",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the headline block lacks %q:\n%s", want, s)
		}
	}
	if _, err := os.Stat(filepath.Join(docs, "2026-12-05-quick-put-scale", "put-scale-ratio.svg")); err != nil {
		t.Errorf("headline figure not copied: %v", err)
	}

	wantUsage(t, "exists; records are not replaced", "experiment", "record", run, "-docs", docs)
	wantUsage(t, "is not a results directory", "experiment", "record", t.TempDir(), "-docs", docs)
	wantUsage(t, "want one results directory", "experiment", "record", "-docs", docs)
	wantUsage(t, "-name", "experiment", "record", run, "-docs", docs, "-name", "../x")

	// A README without the block: nothing is written.
	plain := filepath.Join(t.TempDir(), "README.md")
	if err := os.WriteFile(plain, []byte("# no block\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantUsage(t, "no headline block", "experiment", "record", run, "-docs", docs, "-name", "other", "-readme", plain)
	if _, err := os.Stat(filepath.Join(docs, "other.md")); !os.IsNotExist(err) {
		t.Errorf("a refused record was written: %v", err)
	}
}

// TestExperimentListQuick: `experiment list` gives every experiment's
// duration in the quick profile, which the README shows (a new experiment
// needs its QuickDuration).
func TestExperimentListQuick(t *testing.T) {
	code, stdout, stderr := runNezha(t, "experiment", "list")
	if code != 0 {
		t.Fatalf("experiment list: exit %d, stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) < 2 || strings.Join(strings.Fields(lines[0]), " ") != "NAME QUICK SHOWS" {
		t.Fatalf("experiment list's header: %q", lines[0])
	}
	for _, e := range experiments.All() {
		if e.QuickDuration <= 0 {
			t.Errorf("experiment %s has no QuickDuration", e.Name)
			continue
		}
		if !strings.Contains(stdout, e.Name) || !strings.Contains(stdout, quickText(e.QuickDuration)) {
			t.Errorf("experiment list does not show %s with %s:\n%s", e.Name, quickText(e.QuickDuration), stdout)
		}
	}
	for d, want := range map[time.Duration]string{0: "-", 3 * time.Second: "3 s", 90 * time.Second: "90 s", 11 * time.Minute: "11 min"} {
		if got := quickText(d); got != want {
			t.Errorf("quickText(%v) = %q, want %q", d, got, want)
		}
	}
}
