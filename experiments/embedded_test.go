package experiments

import (
	"bytes"
	"context"
	"encoding/csv"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEmbeddedThroughExecute runs the embedded experiment with a tiny
// profile: every engine at every size leaves a metric, the CSV, the
// figures and the targets' notes.
func TestEmbeddedThroughExecute(t *testing.T) {
	// No memory limit: engines.csv and the parameters say "none", not
	// the runtime's math.MaxInt64 (9.2e18 in the report).
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	p := Quick()
	p.EmbeddedPutDuration, p.EmbeddedPutMaxBytes, p.EmbeddedReadDuration = 200*time.Millisecond, 2*mib, 100*time.Millisecond
	p.EmbeddedWriters, p.EmbeddedReaders, p.EmbeddedReadSetBytes = 4, 2, mib
	out := t.TempDir()
	var log bytes.Buffer
	res, err := Execute(context.Background(), RunOptions{Experiments: []Experiment{embeddedExperiment()}, Profile: p, OutDir: out, Out: &log})
	if err != nil || len(res) != 1 {
		t.Fatalf("Execute: %d results, %v\n%s", len(res), err, log.String())
	}
	r := res[0]
	if r.Error != "" {
		t.Fatalf("embedded: %s\n%s", r.Error, log.String())
	}
	for _, k := range []string{"ops_per_sec/put/nezha/262144", "ops_per_sec/scan/pebble/100", "ops_per_sec/get/badger/4096", "nezha_vs_pebble/put/262144", "nezha_vs_badger/get/100"} {
		if r.Metrics[k] <= 0 {
			t.Errorf("metric %s = %v", k, r.Metrics[k])
		}
	}
	for _, f := range []string{"engines.csv", "embedded-put.png", "embedded-get.svg", "embedded-scan.png", "result.json"} {
		if _, err := os.Stat(filepath.Join(out, "embedded", f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if v := r.Params["gomemlimit_bytes"]; v != "none" {
		t.Errorf("parameter gomemlimit_bytes = %v without a limit, want none", v)
	}
	f, err := os.Open(filepath.Join(out, "embedded", "engines.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil || len(rows) < 2 {
		t.Fatalf("engines.csv: %d rows, %v", len(rows), err)
	}
	col := slices.Index(rows[0], "gomemlimit_bytes")
	for _, row := range rows[1:] {
		if col < 0 || row[col] != "none" {
			t.Fatalf("engines.csv gomemlimit_bytes column %d of %v, want none without a limit", col, row)
		}
	}
	if notes := strings.Join(r.Notes, "\n"); !strings.Contains(notes, "1.5x Pebble") || !strings.Contains(notes, "within 20 %") {
		t.Errorf("notes miss the targets:\n%s", notes)
	}
	if _, err := os.Stat(filepath.Join(out, "embedded", "engines")); err == nil {
		if ents, _ := os.ReadDir(filepath.Join(out, "embedded", "engines")); len(ents) > 0 {
			t.Errorf("engine directories left behind: %v", ents)
		}
	}
}
