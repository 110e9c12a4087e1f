package experiments

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/plots"
	"github.com/nezha-harness/nezha/workloads"
)

// gcConfig is one column of the gc experiment.
type gcConfig struct {
	name     string // label in tables and figures
	system   string
	strategy string // nezha only
	again    bool   // the second run of a config (nezha-nogc)
}

// gcConfigs: nezha-nogc first and again last (PUT and GET ratios use the
// mean of the two, so that a drift of the shared machine between the first
// and the last run weighs on every strategy alike), the strategies, then
// original.
func gcConfigs(systems, strategies []string) []gcConfig {
	var out []gcConfig
	has := map[string]bool{}
	for _, s := range systems {
		has[s] = true
	}
	if has[sysNezhaNoGC] {
		out = append(out, gcConfig{name: sysNezhaNoGC, system: sysNezhaNoGC})
	}
	if has[sysNezha] {
		for _, st := range strategies {
			out = append(out, gcConfig{name: sysNezha + "/" + st, system: sysNezha, strategy: st})
		}
	}
	if has[sysOriginal] {
		out = append(out, gcConfig{name: sysOriginal, system: sysOriginal})
	}
	if has[sysNezhaNoGC] {
		out = append(out, gcConfig{name: sysNezhaNoGC, system: sysNezhaNoGC, again: true})
	}
	return out
}

// gcExperiment: an overwrite-heavy load with reads, per GC strategy, then
// SCANs over the compacted data, against nezha-nogc and original.
func gcExperiment() Experiment {
	return Experiment{
		Name: "gc", Title: "Raft-aware GC: strategies under an overwrite-heavy load",
		Shows:            "what each GC strategy costs while it runs and what it gives back: space, and sequential SCANs over sorted runs",
		NeedsOwnClusters: true,
		run: func(ctx context.Context, x *Run) error {
			p := x.Profile
			// Twice the live data: rounds spaced by a few seconds, so that
			// seconds with and without GC can be compared.
			threshold := max(2*p.GCKeys*int64(p.GCValueBytes), p.SegmentSizeBytes)
			x.param("keys", p.GCKeys)
			x.param("value_bytes", p.GCValueBytes)
			x.param("writers", p.GCWriters)
			x.param("readers", p.GCReaders)
			x.param("duration", p.GCDuration.String())
			x.param("gc_threshold_bytes", threshold)
			x.param("scan_ops", p.gcScanOps())
			x.param("scan_runs", p.ReadRuns)
			x.param("scan_size", p.ScanSize)
			knobs, err := x.describeDefaults(sysNezha)
			if err != nil {
				return err
			}
			for _, k := range []string{"gc_fanout", "gc_idle_after", "gc_rate_bytes_per_sec", "gc_stagger", "gc_min_bytes", "gc_garbage_ratio", "gc_scan_log_bytes"} {
				x.param("nezha_"+k, knobs[k])
			}
			x.note("After a load of %d keys, %d writers overwrite uniformly drawn keys and %d readers GET Zipf-drawn keys for %v. GC runs once a node's log holds %d bytes. 'PUT during GC / without' compares the mean PUT ops/s of the seconds that overlap a GC round on node 1 with the other seconds of the same run (the number of seconds of each kind in brackets: few seconds make it noisy). 'PUT / nezha-nogc' compares the whole phase with nezha-nogc's, which never runs GC (the mean of a run before the strategies and one after them). GC write amplification = bytes GC wrote on node 1 from the start of the phase until GC is done after it (idle rounds included) / user bytes written in the phase. After the phase, nezha's rounds are waited for until a node has been quiet for -gcIdleAfter and its idle round (if any) has run, as a read bed would. Every strategy runs with the nodes' default GC knobs (fan-out, idle, rate limit, stagger: see the parameters) and the threshold above. 'x / nezha-nogc' and 'x / original' compare with those systems in the same run (mean ops/s of the phase; SCAN: median of the read runs). Space amplification counts allocated blocks, including the space RocksDB preallocates for its active WAL file (about 1.1 write buffers per node). SCANs read from the disk as in the read experiments (see read_cache). nezha-nogc runs first and again last; the ratios to it use the mean of both runs.",
				p.GCKeys, p.GCWriters, p.GCReaders, p.GCDuration, threshold)
			tbl := Table{Title: "GC per strategy", Columns: []string{"config", "GC rounds", "GC MB written", "GC write amp",
				"space amp before", "space amp after", "shape after (node 1)", "PUT ops/s", "PUT during GC / without", "PUT / nezha-nogc", "GET ops/s",
				"GET / nezha-nogc", "SCAN ops/s after (median)", "SCAN / nezha-nogc", "SCAN / original"}}
			outcomes := map[string]gcOutcome{}
			cfgs := gcConfigs(x.Systems, p.GCStrategies)
			x.param("strategies", p.GCStrategies)
			var cats []string
			for _, c := range cfgs {
				cats = append(cats, c.label())
			}
			space := plots.Figure{Name: "gc-space-amplification", Title: "Space amplification before and after the overwrite phase", Kind: plots.Bars,
				XLabel: "configuration", YLabel: "bytes on disk per node / live user bytes", Categories: cats}
			before := plots.Series{Name: "before"}
			after := plots.Series{Name: "after"}
			scanBars := plots.Figure{Name: "gc-scan", Title: "SCAN throughput after the overwrite phase (median of runs, range as error bars)", Kind: plots.Bars,
				XLabel: "configuration", YLabel: "throughput (scans/s)", Categories: []string{fmt.Sprintf("scan of %d keys", p.ScanSize)}}
			during := plots.Figure{Name: "gc-throughput-during", Title: "PUT throughput during GC relative to without", Kind: plots.Bars,
				XLabel: "strategy", YLabel: "PUT ops/s during GC / without GC", Categories: []string{"ratio"},
				HLines: []plots.Mark{{At: 1, Label: "no slowdown"}}}
			for i, c := range cfgs {
				r, err := x.gcRun(ctx, c, threshold)
				if err != nil {
					before.Values, after.Values = append(before.Values, 0), append(after.Values, 0)
					before.Missing, after.Missing = append(before.Missing, i), append(after.Missing, i)
					scanBars.Series = append(scanBars.Series, plots.Series{Name: c.label(), Values: []float64{0}, Missing: []int{0}})
					continue
				}
				before.Values = append(before.Values, r.spaceBefore)
				after.Values = append(after.Values, r.spaceAfter)
				scanBars.Series = append(scanBars.Series, plots.Series{Name: c.label(), Values: []float64{r.scanOps},
					Errors: []float64{r.scanOps - slices.Min(r.scanRuns)}, ErrorsUp: []float64{slices.Max(r.scanRuns) - r.scanOps}, N: []int{len(r.scanRuns)}})
				if prev, ok := outcomes[c.name]; ok && c.again {
					// The ratios' base: the mean of the first and the last run.
					r.putOps, r.getOps, r.scanOps = (prev.putOps+r.putOps)/2, (prev.getOps+r.getOps)/2, (prev.scanOps+r.scanOps)/2
					x.note("nezha-nogc ran first and again last: PUT %.0f then %.0f ops/s, GET %.0f then %.0f ops/s; the ratios to nezha-nogc use the means.",
						prev.putOps, (2*r.putOps - prev.putOps), prev.getOps, (2*r.getOps - prev.getOps))
					outcomes[c.name] = r
					x.metric("gc_scan_ops_per_sec/"+c.name, r.scanOps)
					continue
				}
				outcomes[c.name] = r
				ratio := "-"
				if r.duringRatio > 0 {
					ratio = fmt.Sprintf("%.2f (%d/%d s)", r.duringRatio, r.inGCSeconds, r.outGCSeconds)
					during.Series = append(during.Series, plots.Series{Name: c.name, Values: []float64{r.duringRatio}})
					x.metric("gc_during_ratio/"+c.name, r.duringRatio)
				}
				tbl.Rows = append(tbl.Rows, []string{c.name, fmt.Sprint(r.rounds), f1(r.gcBytes / 1e6), f2(r.gcWriteAmp),
					f2(r.spaceBefore), f2(r.spaceAfter), r.shapeAfter, f0(r.putOps), ratio, "", f0(r.getOps), "", f1(r.scanOps), "", ""})
				x.metric("gc_space_before/"+c.name, r.spaceBefore)
				x.metric("gc_space_after/"+c.name, r.spaceAfter)
				x.metric("gc_scan_ops_per_sec/"+c.name, r.scanOps)
				x.metric("gc_write_amp/"+c.name, r.gcWriteAmp)
				x.figure(plots.Figure{Name: "gc-timeseries-" + sanitize(c.name), Title: "Throughput over time, " + c.name,
					Kind: plots.Lines, XLabel: "time (s)", YLabel: "throughput (ops/s)", Series: r.series, Windows: r.windows,
					Caption: windowsCaption(false)})
			}
			space.Series = []plots.Series{before, after}
			// Ratios to the baselines of the same run; "-" where one is missing.
			for i, row := range tbl.Rows {
				r := outcomes[row[0]]
				for _, rc := range []struct {
					col    int
					base   string
					metric string
					of     func(gcOutcome) float64
				}{
					{9, sysNezhaNoGC, "gc_put_vs_nogc", func(o gcOutcome) float64 { return o.putOps }},
					{11, sysNezhaNoGC, "gc_get_vs_nogc", func(o gcOutcome) float64 { return o.getOps }},
					{13, sysNezhaNoGC, "gc_scan_vs_nogc", func(o gcOutcome) float64 { return o.scanOps }},
					{14, sysOriginal, "gc_scan_vs_original", func(o gcOutcome) float64 { return o.scanOps }},
				} {
					tbl.Rows[i][rc.col] = "-"
					if b, ok := outcomes[rc.base]; ok && rc.of(b) > 0 {
						v := rc.of(r) / rc.of(b)
						tbl.Rows[i][rc.col] = f2(v)
						x.metric(rc.metric+"/"+row[0], v)
					}
				}
			}
			x.table(tbl)
			x.figure(space)
			x.figure(scanBars)
			if len(during.Series) > 0 {
				x.figure(during)
			}
			if v, ok := x.res.Metrics["gc_scan_ops_per_sec/original"]; ok && v > 0 {
				rt := Table{Title: "SCAN after GC relative to original", Columns: []string{"config", "SCAN ops/s / original's"}}
				for _, c := range cfgs {
					if c.again {
						continue
					}
					if s, ok := x.res.Metrics["gc_scan_ops_per_sec/"+c.name]; ok {
						rt.Rows = append(rt.Rows, []string{c.name, f2(s / v)})
						x.metric("gc_scan_ratio/"+c.name, s/v)
					}
				}
				x.table(rt)
			}
			return nil
		},
	}
}

// label names the config in tables and figures.
func (c gcConfig) label() string {
	if c.again {
		return c.name + " (again)"
	}
	return c.name
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '-'
		}
	}
	return string(b)
}

type gcOutcome struct {
	rounds                  int
	gcBytes, gcWriteAmp     float64
	spaceBefore, spaceAfter float64
	putOps, getOps          float64
	duringRatio             float64
	inGCSeconds             int
	outGCSeconds            int
	scanOps                 float64
	scanRuns                []float64 // ops/s of each SCAN run (scanOps: their median)
	shapeAfter              string    // node 1's storage after the phase and its GC (shapeText)
	series                  []plots.Series
	windows                 []plots.Window
}

func (x *Run) gcRun(ctx context.Context, c gcConfig, threshold int64) (gcOutcome, error) {
	p := x.Profile
	var out gcOutcome
	extra := x.geometryArgs(c.system, p.GCKeys*int64(p.GCValueBytes))
	extra = append(extra, x.gcArgs(c.system, c.strategy, threshold)...)
	label := sanitize(c.name)
	if c.again {
		label += "-again"
	}
	tb, err := x.start(ctx, c.system, label, extra...)
	if err != nil {
		x.fail(c.name, "cluster up", err, nil)
		return out, err
	}
	fail := func(step string, err error) (gcOutcome, error) {
		x.fail(c.name, step, err, tb.spec)
		tb.stop(true)
		return out, err
	}
	load := workloads.PutOptions{Common: x.benchCommon("g", p.Clients, p.GCKeys, 1, nil), ValueBytes: p.GCValueBytes,
		MaxValueBytes: max(p.GCValueBytes, 64*mib), Order: "random"}
	x.logf("%s: load %d keys x %d KiB", c.name, p.GCKeys, p.GCValueBytes/kib)
	sum, err := workloads.RunPut(ctx, tb.c, load)
	if err == nil {
		err = sum.Failures()
	}
	if err != nil {
		return fail("load", err)
	}
	keyBytes := float64(len(workloads.Key("g", 0)))
	live := float64(p.GCKeys) * (keyBytes + float64(p.GCValueBytes))
	if err := settle(ctx, tb); err != nil {
		return fail("settle", err)
	}
	du, err := x.meanDiskUsage(ctx, tb)
	if err != nil {
		return fail("disk usage", err)
	}
	out.spaceBefore = du / live
	x.logf("%s: %v of overwrites by %d writers with %d readers", c.name, p.GCDuration, p.GCWriters, p.GCReaders)
	start := time.Now()
	ph, err := x.overwritePhase(ctx, tb, keyBytes)
	if err != nil {
		return fail("overwrite phase", err)
	}
	if c.system == sysNezha {
		if err := x.waitIdleGC(ctx, tb, time.Now()); err != nil {
			return fail("GC after the phase", err)
		}
	}
	if err := settle(ctx, tb); err != nil {
		return fail("settle", err)
	}
	if du, err = x.meanDiskUsage(ctx, tb); err != nil {
		return fail("disk usage", err)
	}
	out.spaceAfter = du / live
	out.shapeAfter = shapeText(x.shapeOf(ctx, tb))
	out.putOps = float64(ph.puts) / ph.elapsed.Seconds()
	out.getOps = float64(ph.gets) / ph.elapsed.Seconds()
	putS := plots.Series{Name: "PUT"}
	getS := plots.Series{Name: "GET"}
	for i := range ph.putPerSec {
		putS.X, putS.Y = append(putS.X, float64(i)), append(putS.Y, float64(ph.putPerSec[i]))
		getS.X, getS.Y = append(getS.X, float64(i)), append(getS.Y, float64(ph.getPerSec[i]))
	}
	out.series = []plots.Series{putS, getS}
	ws, err := x.nodeWindows(ctx, tb, start, float64(len(ph.putPerSec)))
	if err != nil {
		x.logf("%s: %v", c.name, err)
	}
	x.recordWindows(RunWindows{Run: "overwrite phase, " + c.label(), System: c.system, Start: start, Seconds: float64(len(ph.putPerSec)), Windows: ws})
	out.windows = figureWindows(ws, 0, "")
	if c.system == sysNezha {
		rounds, err := gcRounds(ctx, tb)
		if err != nil {
			return fail("status", err)
		}
		inGC := make([]bool, len(ph.putPerSec))
		for _, r := range rounds {
			s := time.Unix(0, r.StartUnixNanos).Sub(start).Seconds()
			e := time.Unix(0, r.EndUnixNanos).Sub(start).Seconds()
			if e < 0 {
				continue // a round of the load
			}
			out.rounds++
			out.gcBytes += float64(r.BytesWritten)
			for sec := max(int(s), 0); sec <= int(e) && sec < len(inGC); sec++ {
				inGC[sec] = true
			}
		}
		if ph.userBytes > 0 {
			out.gcWriteAmp = out.gcBytes / ph.userBytes
		}
		var inSum, outSum, inN, outN float64
		for sec, n := range ph.putPerSec {
			if inGC[sec] {
				inSum, inN = inSum+float64(n), inN+1
			} else {
				outSum, outN = outSum+float64(n), outN+1
			}
		}
		out.inGCSeconds, out.outGCSeconds = int(inN), int(outN)
		if inN > 0 && outN > 0 && outSum > 0 {
			out.duringRatio = (inSum / inN) / (outSum / outN)
		}
	}
	// SCAN after GC: the median of ReadRuns runs (one run of a few hundred
	// scans moved by +-20 % between runs), reading from the disk as the
	// read experiments do.
	rc := x.arrangeReads(ctx, []*testbed{tb})
	defer rc.release()
	x.mu.Lock()
	x.res.Params["read_cache"] = rc.Short
	x.mu.Unlock()
	var scans []float64
	for run := 0; run < p.ReadRuns; run++ {
		if err := rc.beforeRun(ctx); err != nil {
			return fail("scan", err)
		}
		so := workloads.ScanOptions{Common: x.benchCommon("g", p.ScanClients, p.gcScanOps(), int64(3+run), nil), Keys: p.GCKeys, ScanSize: min(p.ScanSize, int(p.GCKeys))}
		ssum, err := workloads.RunScan(ctx, tb.c, so)
		if err == nil {
			err = ssum.Failures()
		}
		if err == nil {
			err = rc.oomKilled(ctx, tb.system)
		}
		if err != nil {
			return fail("scan", err)
		}
		scans = append(scans, ssum.OpsPerSec)
	}
	out.scanOps, out.scanRuns = median(scans), scans
	x.logf("%s: PUT %.0f ops/s, GET %.0f ops/s, %d GC rounds, space amp %.2f -> %.2f, shape after %s, SCAN %.1f ops/s",
		c.name, out.putOps, out.getOps, out.rounds, out.spaceBefore, out.spaceAfter, out.shapeAfter, out.scanOps)
	tb.stop(false)
	return out, nil
}

// gcRounds returns node 1's GC rounds.
func gcRounds(ctx context.Context, tb *testbed) ([]*kvpb.GCRound, error) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := tb.c.Status(sctx, tb.spec.Nodes[0].Address, false)
	if err != nil {
		return nil, err
	}
	rs := st.GcRounds
	sort.Slice(rs, func(i, j int) bool { return rs[i].StartUnixNanos < rs[j].StartUnixNanos })
	return rs, nil
}

type phaseResult struct {
	puts, gets           int64
	userBytes            float64
	elapsed              time.Duration
	putPerSec, getPerSec []int64
}

// overwritePhase runs GCWriters writers overwriting uniformly drawn keys
// and GCReaders readers of Zipf-drawn keys for GCDuration, counting
// completed operations per second.
func (x *Run) overwritePhase(ctx context.Context, tb *testbed, keyBytes float64) (phaseResult, error) {
	p := x.Profile
	secs := int(p.GCDuration/time.Second) + 2
	putPer := make([]atomic.Int64, secs)
	getPer := make([]atomic.Int64, secs)
	vb := workloads.NewValueBuffer(p.GCValueBytes, 7, workloads.ValueRandom)
	perm := workloads.Identity(p.GCKeys)
	pctx, cancel := context.WithTimeout(ctx, p.GCDuration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, p.GCWriters+p.GCReaders)
	var puts, gets atomic.Int64
	for w := 0; w < p.GCWriters; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(100 + w)))
			for pctx.Err() == nil {
				i := rng.Int63n(p.GCKeys)
				octx, ocancel := context.WithTimeout(ctx, time.Minute)
				_, err := tb.c.Put(octx, workloads.Key("g", i), vb.Value(rng.Int63n(1<<30)))
				ocancel()
				if err != nil {
					errc <- fmt.Errorf("put: %w", err)
					return
				}
				puts.Add(1)
				if s := int(time.Since(start) / time.Second); s < secs {
					putPer[s].Add(1)
				}
			}
		}(w)
	}
	for r := 0; r < p.GCReaders; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			z, err := workloads.NewZipfKeys(rand.New(rand.NewSource(int64(200+r))), p.Zipf, p.GCKeys, perm)
			if err != nil {
				errc <- err
				return
			}
			for pctx.Err() == nil {
				octx, ocancel := context.WithTimeout(ctx, time.Minute)
				_, found, err := tb.c.Get(octx, workloads.Key("g", z.Next()))
				ocancel()
				if err != nil {
					errc <- fmt.Errorf("get: %w", err)
					return
				}
				if !found {
					errc <- fmt.Errorf("get: a key that was written is missing")
					return
				}
				gets.Add(1)
				if s := int(time.Since(start) / time.Second); s < secs {
					getPer[s].Add(1)
				}
			}
		}(r)
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errc)
	for err := range errc {
		return phaseResult{}, err
	}
	n := min(int(elapsed/time.Second), secs)
	res := phaseResult{puts: puts.Load(), gets: gets.Load(), elapsed: elapsed,
		userBytes: float64(puts.Load()) * (keyBytes + float64(p.GCValueBytes))}
	for i := 0; i < n; i++ {
		res.putPerSec = append(res.putPerSec, putPer[i].Load())
		res.getPerSec = append(res.getPerSec, getPer[i].Load())
	}
	return res, nil
}

// describeDefaults is sys's default configuration as its Describe method
// names its settings (nezha's and the baselines' configurations have one).
func (x *Run) describeDefaults(sys string) (map[string]any, error) {
	s, ok := x.system(sys)
	if !ok {
		return nil, fmt.Errorf("%s: not in the run's registry", sys)
	}
	d, ok := s.NewConfig().(interface{ Describe() map[string]any })
	if !ok {
		return nil, fmt.Errorf("%s: its configuration does not describe itself", sys)
	}
	return d.Describe(), nil
}

// idleGCAfter is the longest time after the last write at which a system
// of the run's registry starts its idle GC round on a cluster of nodes
// nodes (systems.System.IdleGCAfter; nezha's): waiting that long treats
// every system alike.
func (x *Run) idleGCAfter(nodes int) time.Duration {
	var d time.Duration
	if x.reg != nil {
		for _, s := range x.reg.Systems() {
			if s.IdleGCAfter != nil {
				d = max(d, s.IdleGCAfter(nodes))
			}
		}
	}
	return d
}
