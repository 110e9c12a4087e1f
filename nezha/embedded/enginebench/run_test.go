package enginebench

import (
	"context"
	"math"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// TestRunSmall runs every engine briefly at one size: each phase does
// work and every GET finds its value (Run checks them). The experiment's
// test (experiments/embedded_test.go) runs all three sizes.
func TestRunSmall(t *testing.T) {
	o := DefaultOptions(t.TempDir())
	o.Engine.Sync = false
	o.ValueSizesBytes = []int{8 << 10}
	o.Writers, o.Readers = 4, 2
	o.PutDuration, o.GetDuration, o.ScanDuration = 200*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond
	o.PutMaxBytes, o.ReadSetBytes = 2<<20, 1<<20
	o.Engine.NezhaGCIdleAfter = 50 * time.Millisecond
	o.Logf = t.Logf
	rs, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3*3 {
		t.Fatalf("%d results, want 9", len(rs))
	}
	for _, r := range rs {
		if r.Ops == 0 || r.OpsPerSec <= 0 || r.Keys == 0 {
			t.Errorf("%s %d B %s: %d ops, %d keys", r.Engine, r.ValueBytes, r.Op, r.Ops, r.Keys)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	o := DefaultOptions("")
	o.Engines = []string{"rocks"}
	o.ValueSizesBytes = []int{1}
	o.Writers, o.ScanLength = 0, 0
	err := o.Validate()
	for _, want := range []string{"Dir", "rocks", "value size 1", "Writers", "ScanLength"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v; want it to name %s", err, want)
		}
	}
}

// The runtime's "no memory limit" reads as NoMemLimit and prints as
// "none"; a limit prints in bytes.
func TestMemLimitText(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	if _, limit := GCSettings(); limit != NoMemLimit || MemLimitText(limit) != "none" {
		t.Fatalf("no limit: GCSettings %d, text %q; want NoMemLimit and none", limit, MemLimitText(limit))
	}
	debug.SetMemoryLimit(1 << 40)
	if _, limit := GCSettings(); MemLimitText(limit) != "1099511627776" {
		t.Fatalf("a 1 TiB limit: text %q", MemLimitText(limit))
	}
}
