package experiments

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nezha-harness/nezha/systems"
	"github.com/nezha-harness/nezha/workloads"
)

// cancelingStore accepts every write and cancels the run's context at its
// cancelAt-th put (an interrupt, mid-run); cancelAt 0: never.
type cancelingStore struct {
	puts     atomic.Int64
	cancelAt int64
	cancel   context.CancelFunc
}

func (s *cancelingStore) Put(context.Context, []byte, []byte) (uint64, error) {
	if n := s.puts.Add(1); n == s.cancelAt {
		s.cancel()
	}
	return 1, nil
}

func (s *cancelingStore) Get(context.Context, []byte) ([]byte, bool, error) { return nil, false, nil }

func (s *cancelingStore) Scan(context.Context, []byte, []byte, int) ([]systems.KeyValue, error) {
	return nil, nil
}

// An experiment run interrupted mid-experiment says so, not that a step
// failed with "context canceled": the step cut short is marked
// interrupted in result.json and report.md, what was measured before it
// stays, and the experiments after it are named as not run.
func TestInterruptedRunIsMarked(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	put := Experiment{Name: "put-two", Title: "two PUT runs", Shows: "what an interrupt leaves", SmallDisk: true,
		run: func(ctx context.Context, x *Run) error {
			tbl := Table{Title: "PUT", Columns: []string{"system", "ops/s"}}
			defer func() { x.table(tbl) }()
			for i, sys := range x.Systems {
				st := &cancelingStore{cancel: cancel}
				o := workloads.DefaultPutOptions()
				o.Clients, o.Ops, o.ValueBytes = 2, 100, 16
				if i == 1 {
					o.Ops, st.cancelAt = 1_000_000, 200
				}
				s, err := workloads.RunPut(ctx, st, o)
				if err != nil {
					x.fail(sys, "put 16 B", err, nil)
					continue
				}
				tbl.Rows = append(tbl.Rows, []string{sys, f0(s.OpsPerSec)})
				x.metric("put_ops/"+sys, float64(s.Ops))
			}
			return nil
		}}
	never := Experiment{Name: "never", Title: "never", Shows: "not run", SmallDisk: true,
		run: func(context.Context, *Run) error { t.Error("an experiment ran after the interrupt"); return nil }}
	dir := t.TempDir()
	var out bytes.Buffer
	res, err := Execute(ctx, RunOptions{Experiments: []Experiment{put, never}, Profile: Quick(),
		Systems: []string{sysNezha, sysOriginal}, OutDir: dir, Out: &out, Registry: testRegistry(t)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || !res[0].Interrupted || res[0].Error != "" || res[0].Metrics["put_ops/"+sysNezha] != 100 {
		t.Fatalf("results %+v, want put-two interrupted with nezha's 100 PUTs measured\n%s", res, out.String())
	}
	var saved Result
	b, err := os.ReadFile(filepath.Join(dir, "put-two", "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &saved); err != nil || !saved.Interrupted || len(saved.Failures) != 1 ||
		!saved.Failures[0].Interrupted || saved.Failures[0].System != sysOriginal || len(saved.Tables[0].Rows) != 1 {
		t.Fatalf("result.json: %s (%v)", b, err)
	}
	log := out.String()
	for _, want := range []string{"original interrupted at put 16 B", "=== put-two interrupted after", "not run (interrupted): never"} {
		if !strings.Contains(log, want) {
			t.Errorf("output lacks %q:\n%s", want, log)
		}
	}
	path, err := WriteReport(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	report, _ := os.ReadFile(path)
	if !strings.Contains(string(report), "**original interrupted** at put 16 B") || !strings.Contains(string(report), "interrupted during this experiment") {
		t.Errorf("report.md does not say what was interrupted:\n%s", report)
	}
	for _, text := range []string{log, string(report)} {
		if strings.Contains(text, "context canceled") || strings.Contains(text, "FAILED") || strings.Contains(text, "failed**") {
			t.Errorf("an interrupt reported as a failure:\n%s", text)
		}
	}
}
