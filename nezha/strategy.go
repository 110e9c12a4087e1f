package nezha

import (
	"slices"
	"sort"

	"github.com/nezha-harness/nezha/internal/cmdline"
)

// Strategy names (-gc).
const (
	// StrategyTiered (default) is size-tiered runs over the value log, the
	// LSM idea applied to GC output (WiscKey's vLog, Badger's value log GC,
	// Titan's blob files; RocksDB's universal compaction for the tiers). A
	// round rewrites only what reclaims space or serves SCAN: files whose
	// reclaimable garbage (discard statistics) is at least -gcGarbageRatio
	// of their size; on the idle and scan triggers the whole frozen log,
	// sorted into a new run; and the runs of a tier once it holds
	// -gcFanout of them, merged into one run of a higher tier. A run's tier
	// is its size class: tier t holds runs of [1, fanout) x tierBaseBytes x
	// fanout^t bytes (tier 0 also the smaller ones). Under pure inserts no
	// round copies anything while writes flow (the log is only compacted);
	// a value is written by GC once when its log is sorted and once per
	// tier it climbs: about 1 + log_fanout(data / first run) in all.
	StrategyTiered = "tiered"
	// StrategySortOnce is the paper's first round: freeze the log and write
	// its live values in key order into a new run. Runs accumulate.
	StrategySortOnce = "sort-once"
	// StrategyMerge is the paper's later rounds: merge the frozen log with
	// the previous runs into one run, newest value wins (it is sort-once
	// when there is no run yet). A round is due once the log holds as much
	// as the runs (and at least -gcThresholdBytes).
	StrategyMerge = "merge"
	// StrategyGreedy is garbage-ratio-driven selection (WiscKey, Badger's
	// value log GC): rewrite only the frozen segments and runs whose
	// garbage ratio is at least -gcGarbageRatio.
	StrategyGreedy = "greedy"
)

// Strategies returns the accepted -gc values, the default first.
func Strategies() []string {
	return []string{StrategyTiered, StrategyMerge, StrategySortOnce, StrategyGreedy}
}

// tierBaseBytes is the size unit of the tiers: tier 0 holds runs below
// tierBaseBytes x fanout (4 MiB at the default fan-out 4).
const tierBaseBytes = 1 << 20

// tierFor returns the tier (size class) of a run of size bytes.
func tierFor(size int64, fanout int) int {
	t := 0
	for s := size; s >= tierBaseBytes*int64(fanout); s /= int64(fanout) {
		t++
	}
	return t
}

// minGarbageBytes: no file is rewritten, and no round runs, to reclaim
// less than one 4 KiB block.
const minGarbageBytes = 4 << 10

// fileStat is what a strategy knows about one file.
type fileStat struct {
	// id is a segment id, or runFlag|run id.
	id   uint64
	size int64
	live int64
	// dead is the bytes of records known to be garbage: superseded or
	// deleted values, and delete records (discard statistics, as Badger
	// keeps per value-log file). A run's is size - live.
	dead int64
	// tier of a run (0 for segments).
	tier int
}

func (f fileStat) garbageRatio() float64 {
	if f.size <= 0 {
		return 0
	}
	return 1 - float64(f.live)/float64(f.size)
}

// reclaimable is what rewriting the file gives back: all of it when
// nothing in it is live (then nothing is copied), else its dead bytes.
func (f fileStat) reclaimable() int64 {
	if f.live == 0 {
		return f.size
	}
	return max(0, min(f.dead, f.size-f.live))
}

// worthRewrite: at least ratio of the file, and a block, is reclaimable.
func (f fileStat) worthRewrite(ratio float64) bool {
	g := f.reclaimable()
	return f.size > 0 && g >= minGarbageBytes && float64(g) >= ratio*float64(f.size)
}

// planInput is what a strategy plans a round from.
type planInput struct {
	// frozen are the log segments the round may take (sealed, or the
	// active one that a rolling round freezes), runs the live runs.
	frozen, runs []fileStat
	trigger      string
	ratio        float64
	fanout       int
}

// Strategy chooses the input of a GC round.
type Strategy interface {
	Name() string
	// Select returns the ids of the files to rewrite for the garbage and
	// size triggers, given the frozen segments and the runs.
	Select(frozen, runs []fileStat, garbageRatio float64) []uint64
	// Plan returns the ids of the files a round with in.trigger rewrites
	// (files with no live byte are removed without a copy).
	Plan(in planInput) []uint64
	// LogThreshold is how many bytes the log may hold before a round is due,
	// given -gcThresholdBytes and the bytes in sorted runs.
	LogThreshold(threshold, runBytes int64) int64
	// Rolls reports whether a round with trigger freezes the active segment.
	Rolls(trigger string) bool
}

// NewStrategy returns the named strategy; fanout is -gcFanout (tiered).
func NewStrategy(name string, fanout int) (Strategy, error) {
	switch name {
	case StrategyTiered:
		return tiered{fanout: max(fanout, 2)}, nil
	case StrategySortOnce:
		return sortOnce{}, nil
	case StrategyMerge:
		return merge{}, nil
	case StrategyGreedy:
		return greedy{}, nil
	}
	return nil, cmdline.Usagef("-gc %q: want one of %v", name, Strategies())
}

// paperPlan is the plan of the paper's strategies and greedy: their
// selection, plus the whole frozen log when the round is to sort it (idle,
// scan).
func paperPlan(st Strategy, in planInput) []uint64 {
	ids := st.Select(in.frozen, in.runs, in.ratio)
	if in.trigger == TriggerIdle || in.trigger == TriggerScan {
		for _, f := range in.frozen {
			if !slices.Contains(ids, f.id) {
				ids = append(ids, f.id)
			}
		}
	}
	return ids
}

type sortOnce struct{}

func (sortOnce) Name() string                                 { return StrategySortOnce }
func (sortOnce) LogThreshold(threshold, runBytes int64) int64 { return threshold }
func (sortOnce) Rolls(string) bool                            { return true }
func (s sortOnce) Plan(in planInput) []uint64                 { return paperPlan(s, in) }
func (sortOnce) Select(frozen, runs []fileStat, _ float64) []uint64 {
	ids := idsOf(frozen)
	for _, r := range runs {
		if r.live == 0 {
			ids = append(ids, r.id)
		}
	}
	return ids
}

type merge struct{}

func (merge) Name() string { return StrategyMerge }

// LogThreshold of merge grows with the runs: a round rewrites every run, so
// waiting until the log holds as much as the runs keeps GC's writes within
// about twice the user's (the size-ratio rule of LSM compaction); a fixed
// threshold would make them grow with the data, quadratically under inserts.
func (merge) LogThreshold(threshold, runBytes int64) int64 { return max(threshold, runBytes) }
func (merge) Rolls(string) bool                            { return true }
func (m merge) Plan(in planInput) []uint64                 { return paperPlan(m, in) }
func (merge) Select(frozen, runs []fileStat, _ float64) []uint64 {
	if len(frozen) == 0 {
		return nil
	}
	return append(idsOf(frozen), idsOf(runs)...)
}

type greedy struct{}

func (greedy) Name() string                                 { return StrategyGreedy }
func (greedy) LogThreshold(threshold, runBytes int64) int64 { return threshold }
func (greedy) Rolls(string) bool                            { return true }
func (g greedy) Plan(in planInput) []uint64                 { return paperPlan(g, in) }
func (greedy) Select(frozen, runs []fileStat, ratio float64) []uint64 {
	var ids []uint64
	for _, f := range append(append([]fileStat(nil), frozen...), runs...) {
		if f.live == 0 || (f.garbageRatio() >= ratio && f.size-f.live >= minGarbageBytes) {
			ids = append(ids, f.id)
		}
	}
	return ids
}

type tiered struct{ fanout int }

func (tiered) Name() string                                 { return StrategyTiered }
func (tiered) LogThreshold(threshold, runBytes int64) int64 { return threshold }

// Rolls: only the rounds that sort the whole log freeze the active
// segment; the others take sealed segments (no sliver segments).
func (tiered) Rolls(trigger string) bool {
	return trigger == TriggerIdle || trigger == TriggerScan || trigger == TriggerContinuous
}

// Select is the garbage selection: files with no live byte, and files at
// least ratio reclaimable (by their discard statistics).
func (tiered) Select(frozen, runs []fileStat, ratio float64) []uint64 {
	var ids []uint64
	for _, fs := range [][]fileStat{frozen, runs} {
		for _, f := range fs {
			if f.live == 0 || f.worthRewrite(ratio) {
				ids = append(ids, f.id)
			}
		}
	}
	return ids
}

// reclaimSelect is tiered's selection while writes flow: nothing but the
// files with no live byte unless the garbage of these files is at least
// ratio of their bytes; then the files worth a rewrite, most garbage
// first, until the garbage left is at most reclaimDownTo x ratio
// (hysteresis: the next such round is due only after more garbage comes;
// taking fewer, emptier files per round copies less). Deferring
// and picking the emptiest files first copies the least per byte
// reclaimed (LFS's cost-benefit cleaning, Badger's discard statistics).
func (t tiered) reclaimSelect(frozen, runs []fileStat, ratio float64) []uint64 {
	var total, garbage int64
	var ids []uint64
	var cands []fileStat
	for _, fs := range [][]fileStat{frozen, runs} {
		for _, f := range fs {
			total += f.size
			garbage += f.reclaimable()
			if f.live == 0 {
				ids = append(ids, f.id)
				garbage -= f.size
				total -= f.size
			} else if f.worthRewrite(ratio) {
				cands = append(cands, f)
			}
		}
	}
	if float64(garbage) < ratio*float64(total) {
		return ids
	}
	sort.SliceStable(cands, func(i, j int) bool {
		return float64(cands[i].reclaimable())/float64(cands[i].size) > float64(cands[j].reclaimable())/float64(cands[j].size)
	})
	for _, f := range cands {
		if float64(garbage) <= reclaimDownTo*ratio*float64(total) {
			break
		}
		ids = append(ids, f.id)
		garbage -= f.reclaimable()
		total -= f.reclaimable()
	}
	return ids
}

// reclaimDownTo: a tiered garbage round stops once the garbage left is at
// most this fraction of -gcGarbageRatio.
const reclaimDownTo = 0.8

// fullTier returns the runs of the lowest tier that holds at least need
// runs (nil if none does).
func (t tiered) fullTier(runs []fileStat, need int) []uint64 {
	byTier := map[int][]uint64{}
	lowest := -1
	for _, r := range runs {
		byTier[r.tier] = append(byTier[r.tier], r.id)
		if len(byTier[r.tier]) >= need && (lowest < 0 || r.tier < lowest) {
			lowest = r.tier
		}
	}
	if lowest < 0 {
		return nil
	}
	return byTier[lowest]
}

// fullMergeWorth: when idle, merging every run and the log into one run
// (the best layout for SCAN) is worth its cost, the rewrite of all live
// data, once the log's live bytes and the runs' garbage are at least
// 1/fanout of the live data: an idle round then costs at most fanout
// times the bytes that came in or died since the previous one.
func (t tiered) fullMergeWorth(in planInput) bool {
	var fresh, live int64
	files := 0
	for _, f := range in.frozen {
		fresh += f.live
		live += f.live
		if f.live > 0 {
			files++
		}
	}
	for _, r := range in.runs {
		fresh += r.reclaimable()
		live += r.live
		files++
	}
	return files > 1 && fresh*int64(t.fanout) >= live
}

func (t tiered) Plan(in planInput) []uint64 {
	var ids []uint64
	add := func(id uint64) {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	dead := func() {
		for _, fs := range [][]fileStat{in.frozen, in.runs} {
			for _, f := range fs {
				if f.live == 0 {
					add(f.id)
				}
			}
		}
	}
	switch in.trigger {
	case TriggerCheckpoint:
		dead()
	case TriggerSize, TriggerGarbage:
		for _, id := range t.reclaimSelect(in.frozen, in.runs, in.ratio) {
			add(id)
		}
	case TriggerTier:
		dead()
		for _, id := range t.fullTier(in.runs, t.fanout) {
			add(id)
		}
	case TriggerIdle, TriggerScan, TriggerContinuous:
		for _, f := range in.frozen {
			add(f.id)
		}
		if in.trigger == TriggerIdle && t.fullMergeWorth(in) {
			for _, r := range in.runs {
				add(r.id)
			}
			break
		}
		for _, id := range t.Select(nil, in.runs, in.ratio) {
			add(id)
		}
		for _, id := range t.fullTier(in.runs, t.fanout) {
			add(id)
		}
	}
	return ids
}

func idsOf(fs []fileStat) []uint64 {
	ids := make([]uint64, len(fs))
	for i, f := range fs {
		ids[i] = f.id
	}
	return ids
}
