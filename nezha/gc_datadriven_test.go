package nezha

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/nezha-harness/nezha/systems"
)

// TestGCDataDriven drives the GC collector's decisions (the trigger of
// due, the plan of a round per strategy, the tiers of the runs, the
// checkpoint rounds) through the commands of testdata/gc/*.txt and compares
// what it prints with the goldens there (go test -run TestGCDataDriven
// ./nezha -rewrite regenerates them). Sizes are bytes of a log with
// 4096-byte segments and values of fixed bytes; no timing is printed and
// the trigger clock moves only by `advance`. After every round the store is
// checked against a model of the writes.
//
// Commands:
//
//	open strategy=S [index=leveldb|memory] [threshold=BYTES] [ratio=F] [fanout=N] [max-round-bytes=BYTES] [min-bytes=BYTES] [idle-after=DURATION] [continuous]
//	put keys=A-B [size=BYTES] [batch=N]  puts k<A>..k<B> (inclusive), N per Append and Apply (default all)
//	delete keys=A-B [batch=N]            deletes them
//	roll                          seals the active log segment
//	advance by=DURATION           moves the trigger clock
//	due                           the trigger of the round due now, or none
//	plan trigger=T                the files a round on T takes, what it copies and reclaims
//	gc [trigger=T]                runs one round (default: the one due) and prints it
//	gc-due                        runs rounds while one is due (at most 20)
//	show                          segments, runs (with tiers), compacted and applied index
func TestGCDataDriven(t *testing.T) {
	datadriven.Walk(t, filepath.Join("testdata", "gc"), func(t *testing.T, path string) {
		var f *gcFixture
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if f == nil && d.Cmd != "open" {
				t.Fatalf("%s: open first", d.Pos)
			}
			if f != nil {
				f.t = t
			}
			switch d.Cmd {
			case "open":
				f = openDataDriven(t, d)
				return f.describe()
			case "put", "delete":
				from, to := keyRange(t, d)
				size := 100
				d.MaybeScanArgs(t, "size", &size)
				var cmds []systems.Command
				for i := from; i <= to; i++ {
					k := fmt.Sprintf("k%05d", i)
					if d.Cmd == "put" {
						cmds = append(cmds, put(k, []byte(strings.Repeat(string(rune('a'+i%26)), size))))
					} else {
						cmds = append(cmds, del(k))
					}
				}
				batch := len(cmds)
				d.MaybeScanArgs(t, "batch", &batch)
				for len(cmds) > 0 {
					n := min(max(batch, 1), len(cmds))
					f.apply(cmds[:n])
					cmds = cmds[n:]
				}
				return fmt.Sprintf("applied index %d", f.s.AppliedIndex())
			case "roll":
				if err := f.ctl.Roll(t.Context()); err != nil {
					t.Fatal(err)
				}
				return f.showSegments()
			case "advance":
				var by string
				d.ScanArgs(t, "by", &by)
				dur, err := time.ParseDuration(by)
				if err != nil {
					t.Fatalf("%s: %v", d.Pos, err)
				}
				f.clock.advance(dur)
				return "ok"
			case "due":
				if tr := f.s.gc.due(); tr != "" {
					return tr
				}
				return "none"
			case "plan":
				var tr string
				d.ScanArgs(t, "trigger", &tr)
				return f.showPlan(tr)
			case "gc":
				tr := f.s.gc.due()
				d.MaybeScanArgs(t, "trigger", &tr)
				if tr == "" {
					return "nothing due"
				}
				return f.gcRound(tr)
			case "gc-due":
				var out []string
				for i := 0; ; i++ {
					tr := f.s.gc.due()
					if tr == "" {
						break
					}
					if i == 20 {
						t.Fatalf("%s: rounds still due after 20", d.Pos)
					}
					out = append(out, f.gcRound(tr))
				}
				if len(out) == 0 {
					return "nothing due"
				}
				return strings.Join(out, "\n")
			case "show":
				return f.showSegments() + "\n" + f.showRuns() + fmt.Sprintf("\napplied %d compacted %d", f.s.AppliedIndex(), f.ctl.CompactedIndex())
			}
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			return ""
		})
	})
}

func openDataDriven(t *testing.T, d *datadriven.TestData) *gcFixture {
	var strategy string
	index := IndexLevelDB
	d.ScanArgs(t, "strategy", &strategy)
	d.MaybeScanArgs(t, "index", &index)
	f := newGCFixture(t, index, strategy, 1)
	cfg := f.s.gc.cfg
	cfg.GCRateBytesPerSec = 0
	f.s.gc.limiter = nil
	d.MaybeScanArgs(t, "threshold", &cfg.GCThresholdBytes)
	d.MaybeScanArgs(t, "ratio", &cfg.GCGarbageRatio)
	d.MaybeScanArgs(t, "max-round-bytes", &cfg.GCMaxRoundBytes)
	d.MaybeScanArgs(t, "min-bytes", &cfg.GCMinBytes)
	cfg.GCContinuous = d.HasArg("continuous")
	var idle string
	if d.MaybeScanArgs(t, "idle-after", &idle) {
		dur, err := time.ParseDuration(idle)
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		cfg.GCIdleAfter = dur
	}
	if d.MaybeScanArgs(t, "fanout", &cfg.GCFanout) {
		st, err := NewStrategy(strategy, cfg.GCFanout)
		if err != nil {
			t.Fatal(err)
		}
		f.s.gc.strategy = st
	}
	return f
}

func (f *gcFixture) describe() string {
	c := f.s.gc.cfg
	return fmt.Sprintf("strategy %s index %s threshold %d ratio %g fanout %d max-round-bytes %d min-bytes %d idle-after %s continuous %t",
		f.s.gc.strategy.Name(), c.Index, c.GCThresholdBytes, c.GCGarbageRatio, c.GCFanout, c.GCMaxRoundBytes, c.GCMinBytes, c.GCIdleAfter, c.GCContinuous)
}

// keyRange parses keys=A-B (or keys=A).
func keyRange(t *testing.T, d *datadriven.TestData) (int, int) {
	var s string
	d.ScanArgs(t, "keys", &s)
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		b = a
	}
	from, err1 := strconv.Atoi(a)
	to, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || to < from {
		t.Fatalf("%s: keys=%q is not A-B", d.Pos, s)
	}
	return from, to
}

func fileName(id uint64) string {
	if id&runFlag != 0 {
		return fmt.Sprintf("run %d", id&^runFlag)
	}
	return fmt.Sprintf("seg %d", id)
}

func (f *gcFixture) showSegments() string {
	f.s.applyMu.Lock()
	defer f.s.applyMu.Unlock()
	var b strings.Builder
	for i, sg := range f.ctl.Segments() {
		if i > 0 {
			b.WriteByte('\n')
		}
		state := "sealed"
		if sg.Active {
			state = "active"
		}
		fmt.Fprintf(&b, "seg %d %s entries %d-%d size %d live %d dead %d", sg.ID, state, sg.FirstIndex, sg.LastIndex, sg.SizeBytes, f.s.gc.live[sg.ID], f.s.gc.dead[sg.ID])
	}
	return b.String()
}

func (f *gcFixture) showRuns() string {
	f.s.applyMu.Lock()
	defer f.s.applyMu.Unlock()
	ids := f.s.runs.ids()
	if len(ids) == 0 {
		return "no runs"
	}
	var lines []string
	for _, id := range ids {
		rn := f.s.runs.get(id)
		if rn == nil {
			continue
		}
		lines = append(lines, fmt.Sprintf("run %d tier %d records %d data %d size %d live %d", id, rn.tier, rn.records, rn.dataBytes, rn.size, f.s.gc.live[runFlag|id]))
	}
	return strings.Join(lines, "\n")
}

func (f *gcFixture) showPlan(trigger string) string {
	p := f.s.gc.planFor(f.ctl.Segments(), f.ctl.CompactBound(), trigger)
	names := make([]string, len(p.ids))
	for i, id := range p.ids {
		names[i] = fileName(id)
	}
	if len(names) == 0 {
		names = []string{"nothing"}
	}
	return fmt.Sprintf("%s: %s; copy %d reclaim %d (rolls %t)", trigger, strings.Join(names, ", "), p.copyBytes, p.reclaim, f.s.gc.strategy.Rolls(trigger))
}

// gcRound runs a round on trigger, checks the store against the model and
// prints the round without its times.
func (f *gcFixture) gcRound(trigger string) string {
	before := slices.Clone(f.s.runs.ids())
	r := f.roundOn(trigger)
	f.check()
	var made []string
	for _, id := range f.s.runs.ids() {
		if !slices.Contains(before, id) {
			made = append(made, fmt.Sprintf("run %d tier %d", id, f.s.runs.get(id).tier))
		}
	}
	if len(made) == 0 {
		made = []string{"none"}
	}
	return fmt.Sprintf("round %s: moved %d keys, read %d, wrote %d, live %d, reclaimed %d, removed %d segments %d runs, compacted to %d, new runs: %s",
		r.Trigger, r.KeysMoved, r.BytesRead, r.BytesWritten, r.LiveBytes, r.ReclaimedBytes, r.SegmentsRemoved, r.RunsRemoved, r.CompactedIndex, strings.Join(made, ", "))
}
