package experiments

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/nezha/embedded/enginebench"
	"github.com/nezha-harness/nezha/plots"
)

// embeddedExperiment: Nezha's storage as an embedded store
// (nezha/embedded) against Badger and Pebble in the same process and run,
// same fsync setting. It starts no cluster: x.Systems do not apply.
func embeddedExperiment() Experiment {
	return Experiment{
		Name: "embedded", Title: "Embedded engines: nezha vs Badger vs Pebble",
		Shows:            "Nezha's value log, index and GC as an embedded store (no Raft, no network) against Badger (WiscKey in Go) and Pebble (an LSM): PUT with fsync, GET and SCAN at 100 B, 4 KiB and 256 KiB",
		NeedsOwnClusters: true, SmallDisk: true,
		// About 60-70 s in quick on a busy 2-vCPU machine; run it by name.
		OutsideQuickAll: true,
		run: func(ctx context.Context, x *Run) error {
			p := x.Profile
			o := enginebench.DefaultOptions(filepath.Join(x.Dir, "engines"))
			o.PutDuration, o.PutMaxBytes = p.EmbeddedPutDuration, p.EmbeddedPutMaxBytes
			o.ReadSetBytes = p.EmbeddedReadSetBytes
			o.GetDuration, o.ScanDuration = p.EmbeddedReadDuration, p.EmbeddedReadDuration
			o.Writers, o.Readers = p.EmbeddedWriters, p.EmbeddedReaders
			o.Logf = x.logf
			if b := x.Backend.Name; b != "" && b != cluster.BackendLocal {
				x.note("The engines run in this process on the controller's machine, under the results directory: -backend %s does not apply to this experiment.", b)
			}
			x.param("engines", o.Engines)
			x.param("value_sizes_bytes", o.ValueSizesBytes)
			x.param("sync", o.Engine.Sync)
			x.param("nezha_index", o.Engine.NezhaIndex)
			x.param("nezha_gc_idle_after", o.Engine.NezhaGCIdleAfter.String())
			x.param("badger_value_threshold_bytes", o.Engine.BadgerValueThresholdBytes)
			x.param("writers", o.Writers)
			x.param("readers", o.Readers)
			x.param("put_duration", o.PutDuration.String())
			x.param("put_max_bytes", o.PutMaxBytes)
			x.param("read_set_bytes", o.ReadSetBytes)
			x.param("read_set_max_keys", o.ReadSetMaxKeys)
			x.param("read_duration", o.GetDuration.String())
			x.param("scan_length", o.ScanLength)
			gogc, memLimit := enginebench.GCSettings()
			x.param("gogc_percent", gogc)
			if memLimit == enginebench.NoMemLimit {
				x.param("gomemlimit_bytes", "none")
			} else {
				x.param("gomemlimit_bytes", memLimit)
			}
			rs, err := enginebench.Run(ctx, o)
			if err != nil {
				return err
			}
			x.embeddedReport(o, rs)
			return nil
		},
	}
}

// embeddedReport records the table, CSV, metrics, figures and the
// engine's targets from the results.
func (x *Run) embeddedReport(o enginebench.Options, rs []enginebench.Result) {
	by := map[string]enginebench.Result{}
	id := func(engine, op string, size int) string { return fmt.Sprintf("%s/%s/%d", op, engine, size) }
	tbl := Table{Title: "Throughput and latency per engine (fsync on every acknowledged PUT)",
		Columns: []string{"value size", "op", "engine", "ops/s", "MB/s", "p50 us", "p99 us", "keys"}}
	rows := [][]string{{"engine", "value_bytes", "op", "ops", "seconds", "ops_per_sec", "mb_per_sec", "p50_us", "p99_us", "keys", "settle_seconds", "gogc_percent", "gomemlimit_bytes"}}
	for _, r := range rs {
		by[id(r.Engine, r.Op, r.ValueBytes)] = r
		x.metric(fmt.Sprintf("ops_per_sec/%s/%s/%d", r.Op, r.Engine, r.ValueBytes), r.OpsPerSec)
		rows = append(rows, []string{r.Engine, fmt.Sprint(r.ValueBytes), r.Op, fmt.Sprint(r.Ops), f2(r.Seconds), f0(r.OpsPerSec),
			f2(r.MBPerSec), f0(r.P50Us), f0(r.P99Us), fmt.Sprint(r.Keys), f2(r.SettleSeconds), fmt.Sprint(r.GOGCPercent), enginebench.MemLimitText(r.GOMemLimitBytes)})
	}
	for _, size := range o.ValueSizesBytes {
		for _, op := range []string{enginebench.OpPut, enginebench.OpGet, enginebench.OpScan} {
			for _, e := range o.Engines {
				r, ok := by[id(e, op, size)]
				if !ok {
					continue
				}
				tbl.Rows = append(tbl.Rows, []string{sizeText(float64(size)), op, e, f0(r.OpsPerSec), f1(r.MBPerSec), f0(r.P50Us), f0(r.P99Us), fmt.Sprint(r.Keys)})
			}
		}
	}
	x.table(tbl)
	if err := writeCSV(filepath.Join(x.Dir, "engines.csv"), rows); err != nil {
		x.note("engines.csv not written: %v", err)
	}
	// Ratios of nezha over each other engine, and the engine's targets.
	ratio := func(op, other string, size int) (float64, bool) {
		a, ok1 := by[id(enginebench.EngineNezha, op, size)]
		b, ok2 := by[id(other, op, size)]
		if !ok1 || !ok2 || b.OpsPerSec == 0 {
			return 0, false
		}
		v := a.OpsPerSec / b.OpsPerSec
		x.metric(fmt.Sprintf("nezha_vs_%s/%s/%d", other, op, size), v)
		return v, true
	}
	rt := Table{Title: "nezha's throughput over each other engine's (ops/s ratio)", Columns: []string{"value size", "op", "over badger", "over pebble"}}
	for _, size := range o.ValueSizesBytes {
		for _, op := range []string{enginebench.OpPut, enginebench.OpGet, enginebench.OpScan} {
			row := []string{sizeText(float64(size)), op}
			for _, other := range []string{enginebench.EngineBadger, enginebench.EnginePebble} {
				if v, ok := ratio(op, other, size); ok {
					row = append(row, f2(v))
				} else {
					row = append(row, "-")
				}
			}
			rt.Rows = append(rt.Rows, row)
		}
	}
	x.table(rt)
	if v, ok := ratio(enginebench.OpPut, enginebench.EnginePebble, 256<<10); ok {
		x.note("Target: nezha's 256 KiB PUT with fsync >= 1.5x Pebble's: measured %.2fx (%s).", v, verdict(v >= 1.5))
	}
	for _, op := range []string{enginebench.OpGet, enginebench.OpScan} {
		var parts []string
		all := true
		for _, size := range o.ValueSizesBytes {
			if v, ok := ratio(op, enginebench.EngineBadger, size); ok {
				parts = append(parts, fmt.Sprintf("%s %.2fx", sizeText(float64(size)), v))
				all = all && v >= 0.8
			}
		}
		x.note("Target: nezha's %s within 20 %% of Badger's or ahead (>= 0.8x): %s (%s).", strings.ToUpper(op), strings.Join(parts, ", "), verdict(all))
	}
	x.note("All engines run in this process, one after the other (order rotated per value size), on the same disk, with their default caches. Per engine and size: the read set (%s of values, at most %d keys: the same keys for every engine) loaded in batches of about 1 MiB, GET and SCAN (%d pairs) by %d readers for %v each, then PUT of new keys by %d writers until %v or %s. nezha uses the %s index with GC on, and its reads start after its idle GC round sorted the read set (settle_seconds in engines.csv); Badger keeps values of %d B and more in its value log. Reads hit the page cache. Every engine copies each value it reads once, into a buffer the reader reuses (GET: one per reader; SCAN: one per scan), so that large values measure the engines rather than Go's allocator and collector. nezha checks a checksum on every value it reads (xxh3 in its sorted runs, where its reads find the values, CRC32C in its log); Badger (value checksums off) and Pebble as configured by default. Go collector: %s (gogc_percent, -1: off, and gomemlimit_bytes, none: no limit, in engines.csv).",
		bytesText(o.ReadSetBytes), o.ReadSetMaxKeys, o.ScanLength, o.Readers, o.GetDuration, o.Writers, o.PutDuration, bytesText(o.PutMaxBytes),
		o.Engine.NezhaIndex, o.Engine.BadgerValueThresholdBytes, gcSettingsText(rs))
	var cats []string
	for _, size := range o.ValueSizesBytes {
		cats = append(cats, sizeText(float64(size)))
	}
	for _, op := range []string{enginebench.OpPut, enginebench.OpGet, enginebench.OpScan} {
		f := plots.Figure{Name: "embedded-" + op, Title: fmt.Sprintf("Embedded %s throughput per engine", strings.ToUpper(op)), Kind: plots.Bars,
			XLabel: "value size", YLabel: "throughput (MB/s, keys and values)", LogY: true, Categories: cats}
		for _, e := range o.Engines {
			s := plots.Series{Name: e}
			for i, size := range o.ValueSizesBytes {
				r, ok := by[id(e, op, size)]
				if !ok || r.MBPerSec <= 0 {
					s.Missing = append(s.Missing, i)
				}
				s.Values = append(s.Values, r.MBPerSec)
			}
			f.Series = append(f.Series, s)
		}
		x.figure(f)
	}
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

// gcSettingsText renders the Go collector's settings of the results'
// process (GOGC and GOMEMLIMIT), as the runtime read them.
func gcSettingsText(rs []enginebench.Result) string {
	if len(rs) == 0 {
		return "unknown"
	}
	gogc, limit := "off", "none"
	if rs[0].GOGCPercent >= 0 {
		gogc = fmt.Sprint(rs[0].GOGCPercent)
	}
	if rs[0].GOMemLimitBytes != math.MaxInt64 {
		limit = bytesText(rs[0].GOMemLimitBytes)
	}
	return fmt.Sprintf("GOGC=%s, GOMEMLIMIT=%s", gogc, limit)
}
