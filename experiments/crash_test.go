package experiments

import (
	"bytes"
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/plots"
	"github.com/nezha-harness/nezha/systems/systemstest"
)

// crashBinary is $NEZHA_BINARY or a fresh build of ./cmd/nezha.
func crashBinary(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("NEZHA_BINARY"); b != "" {
		return b
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	b, err := systemstest.BuildBinary(root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// runExperiment runs experiment name with p on systems (a fresh build of
// the binary, or $NEZHA_BINARY), within timeout, and returns its result,
// which must have no error nor failure, and the run's output directory.
func runExperiment(t *testing.T, name string, p Profile, systems []string, timeout time.Duration) (*Result, string) {
	t.Helper()
	bin := crashBinary(t)
	exps, err := Lookup([]string{name})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	var log bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := Execute(ctx, RunOptions{Experiments: exps, Profile: p, Systems: systems, OutDir: out, Binary: bin, Out: &log, Registry: testRegistry(t)})
	t.Log(log.String())
	if err != nil || len(res) != 1 {
		t.Fatalf("%d results, %v", len(res), err)
	}
	if r := res[0]; r.Error != "" || len(r.Failures) > 0 {
		t.Fatalf("%s failed: %s %+v", name, r.Error, r.Failures)
	}
	return res[0], out
}

func TestLookupSkipsCrashInQuickAll(t *testing.T) {
	quick, err := LookupFor([]string{"all"}, "quick")
	if err != nil {
		t.Fatal(err)
	}
	standard, err := LookupFor([]string{"all"}, "standard")
	if err != nil {
		t.Fatal(err)
	}
	paper, err := LookupFor([]string{"all"}, "paper")
	if err != nil {
		t.Fatal(err)
	}
	named, err := LookupFor([]string{"all", "crash"}, "quick")
	if err != nil {
		t.Fatal(err)
	}
	has := func(es []Experiment) bool {
		return slices.ContainsFunc(es, func(e Experiment) bool { return e.Name == "crash" })
	}
	if has(quick) || has(standard) || !has(paper) || !has(named) || len(paper) != len(All()) {
		t.Fatalf("crash in quick all %v, standard all %v, paper all %v, named %v", has(quick), has(standard), has(paper), has(named))
	}
	// Standard keeps the embedded experiment, which quick leaves out.
	if !slices.ContainsFunc(standard, func(e Experiment) bool { return e.Name == "embedded" }) || len(standard) != len(All())-1 {
		t.Fatalf("standard all = %d experiments, want all but crash", len(standard))
	}
}

// TestCrashCampaign runs three kills on nezha (one aimed at GC) and checks
// that the campaign recorded them, lost nothing and converged.
func TestCrashCampaign(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	p := Quick()
	p.CrashKills, p.CrashKeys, p.CrashValueBytes, p.CrashWriters = 3, 200, 4*kib, 2
	p.CrashMaxWrites, p.CrashDuration, p.CrashLoadBetweenKills = 20_000, 40*time.Second, 300*time.Millisecond
	t.Logf("seed %d", p.CrashSeed)
	r, out := runExperiment(t, "crash", p, []string{"nezha"}, 2*time.Minute)
	if lost, ok := r.Metrics["crash_lost_writes/nezha"]; !ok || lost != 0 {
		t.Fatalf("lost writes metric %v (present %v)", lost, ok)
	}
	if _, ok := r.Metrics["crash_recover_write_p50_sec/nezha"]; !ok {
		t.Fatalf("no recovery time: %v", r.Metrics)
	}
	f, err := os.Open(filepath.Join(out, "crash", "kills.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil || len(rows) != 1+3 {
		t.Fatalf("kills.csv: %d rows, %v", len(rows), err)
	}
	for _, row := range rows[1:] {
		// Every kill's writes came back within the campaign.
		if row[8] != "" || len(row) != len(rows[0]) || row[14] != "true" {
			t.Fatalf("kill failed or its writes never came back: %v", row)
		}
	}
	if _, ok := r.Metrics["crash_writes_back_p50_sec/nezha"]; !ok {
		t.Fatalf("no time until writes were back: %v", r.Metrics)
	}
	figs, err := plots.Load(filepath.Join(out, "crash"))
	byName := map[string]plots.Figure{}
	for _, f := range figs {
		byName[f.Name] = f
	}
	if rec := byName["crash-recovery"]; err != nil || len(rec.Series) != 1 || len(rec.Series[0].Y) != 3 {
		t.Fatalf("figures: %+v, %v", figs, err)
	}
	// The throughput over the campaign shows each kill.
	if tp := byName["crash-throughput-nezha"]; len(tp.Series) != 1 || len(tp.Windows) != 3 || tp.Windows[0].Kind != plots.WindowFault {
		t.Fatalf("throughput figure: %+v", tp)
	}
	if len(r.Tables) != 1 || len(r.Tables[0].Rows) != 1 || r.Tables[0].Rows[0][8] != "0" || r.Tables[0].Rows[0][9] != "true" {
		t.Fatalf("summary table: %+v", r.Tables)
	}
}
