package experiments

import (
	"context"
	"fmt"
	"time"

	"github.com/nezha-harness/nezha/plots"
	"github.com/nezha-harness/nezha/workloads"
)

// meanDiskUsage is the mean bytes on disk of the nodes' data directories
// (each walked by the node's agent).
func (x *Run) meanDiskUsage(ctx context.Context, tb *testbed) (float64, error) {
	var sum int64
	for _, n := range tb.spec.Nodes {
		st, err := tb.nodeStats(ctx, n.ID, false, true)
		if err != nil {
			return 0, err
		}
		sum += st.DataAllocatedBytes
	}
	x.measured(Measurement{What: measureDiskUsage, Backend: tb.spec.BackendName(), Where: agentWhere(tb.spec.BackendName(), tb.hosts),
		How: "blocks allocated under each node's data directory, walked by its agent (Stats disk_usage)"})
	return float64(sum) / float64(len(tb.spec.Nodes)), nil
}

// amplification: write and space amplification after a load and after
// overwriting half the keys.
func amplification() Experiment {
	return Experiment{
		Name: "amplification", Title: "Write and space amplification",
		Shows:            "bytes each node writes and keeps per user byte: once for nezha, several times through RocksDB",
		NeedsOwnClusters: true,
		run: func(ctx context.Context, x *Run) error {
			p := x.Profile
			x.param("keys", p.AmpKeys)
			x.param("value_bytes", p.AmpValueBytes)
			x.param("geometry", p.Geometry)
			x.note("Write amplification = bytes a node wrote (/proc/<pid>/io write_bytes minus cancelled_write_bytes, averaged over the nodes) / user bytes written (keys and values). Space amplification = bytes on disk under a node's data directory (allocated blocks) / live user bytes. Measured after the nodes went quiet (flushes, compactions, GC done): after each phase the run waits for nezha's idle GC round (-gcIdleAfter plus a stagger slot per node) and for GC to stop, then for the nodes' writes to stop, alike for every system. nezha's figure includes what its GC wrote (the nodes' default strategy: tiered, not the paper's merge; its size threshold here is half the load, and a round copies nothing from garbage-free data, so under the load's inserts GC may only sort the log when the nodes go idle; the rounds column counts node 1's GC rounds, and the baselines' Raft log truncations); nezha-nogc shows the value path alone. The baselines truncate their Raft log once it holds more than -rocksdb.logRetainBytes (64 MiB), so their space amplification includes at most that much log. RocksDB's last memtable (%s per node) may still be unflushed when measured, so the baselines' write amplification is a lower bound. Allocated blocks include the space RocksDB preallocates for its active WAL file (about 1.1 write buffers per node), a fixed cost that weighs on small loads only.", bytesText(x.writeBufferBytes(p.AmpKeys*int64(p.AmpValueBytes))))
			cats := []string{"after load", "after overwriting half"}
			wf := plots.Figure{Name: "write-amplification", Title: "Write amplification", Kind: plots.Bars,
				XLabel: "phase", YLabel: "bytes written per node / user bytes", Categories: cats, HLines: []plots.Mark{{At: 1, Label: "1 (written once)"}}}
			sf := plots.Figure{Name: "space-amplification", Title: "Space amplification", Kind: plots.Bars,
				XLabel: "phase", YLabel: "bytes on disk per node / live user bytes", Categories: cats, HLines: []plots.Mark{{At: 1, Label: "1"}}}
			tbl := Table{Title: "Amplification per system", Columns: []string{"system", "write amp (load)", "space amp (load)", "write amp (overwrite)", "space amp (overwrite)", "user MB written", "live MB", "GC or log truncation rounds (node 1)"}}
			keyBytes := int64(len(workloads.Key("a", 0)))
			for _, sys := range x.Systems {
				// GC (nezha) runs once the log holds half the loaded bytes.
				tb, err := x.start(ctx, sys, "amp", append(x.geometryArgs(sys, p.AmpKeys*int64(p.AmpValueBytes)),
					x.gcArgs(sys, "", max(p.AmpKeys*int64(p.AmpValueBytes)/2, p.SegmentSizeBytes))...)...)
				if err != nil {
					x.fail(sys, "cluster up", err, nil)
					wf.Series = append(wf.Series, plots.Series{Name: sys, Values: []float64{0, 0}, Missing: []int{0, 1}})
					sf.Series = append(sf.Series, plots.Series{Name: sys, Values: []float64{0, 0}, Missing: []int{0, 1}})
					continue
				}
				w, s, user, live, rounds, err := x.ampPhases(ctx, tb, keyBytes)
				if err != nil {
					x.fail(sys, "amplification", err, tb.spec)
					tb.stop(true)
					wf.Series = append(wf.Series, plots.Series{Name: sys, Values: []float64{0, 0}, Missing: []int{0, 1}})
					sf.Series = append(sf.Series, plots.Series{Name: sys, Values: []float64{0, 0}, Missing: []int{0, 1}})
					continue
				}
				tb.stop(false)
				wf.Series = append(wf.Series, plots.Series{Name: sys, Values: w})
				sf.Series = append(sf.Series, plots.Series{Name: sys, Values: s})
				tbl.Rows = append(tbl.Rows, []string{sys, f2(w[0]), f2(s[0]), f2(w[1]), f2(s[1]), f1(user / 1e6), f1(live / 1e6), fmt.Sprint(rounds)})
				x.metric("write_amp_load/"+sys, w[0])
				x.metric("space_amp_load/"+sys, s[0])
				x.metric("write_amp_overwrite/"+sys, w[1])
				x.metric("space_amp_overwrite/"+sys, s[1])
				x.logf("%s: write amp %.2f / %.2f, space amp %.2f / %.2f", sys, w[0], w[1], s[0], s[1])
			}
			x.table(tbl)
			x.figure(wf)
			x.figure(sf)
			return nil
		},
	}
}

// ampPhases loads, overwrites half, and returns write and space
// amplification after each phase, the user bytes written, the live bytes
// and node 1's GC rounds at the end.
func (x *Run) ampPhases(ctx context.Context, tb *testbed, keyBytes int64) (w, s []float64, user, live float64, rounds int, err error) {
	p := x.Profile
	before, err := readIO(ctx, tb)
	if err != nil {
		return nil, nil, 0, 0, 0, err
	}
	x.measureNodeCounters(tb)
	put := func(ops int64, seed int64) error {
		o := workloads.PutOptions{Common: x.benchCommon("a", p.Clients, ops, seed, nil), ValueBytes: p.AmpValueBytes,
			MaxValueBytes: max(p.AmpValueBytes, 64*mib), Order: "random"}
		sum, err := workloads.RunPut(ctx, tb.c, o)
		if err == nil {
			err = sum.Failures()
		}
		return err
	}
	perKey := float64(keyBytes + int64(p.AmpValueBytes))
	live = float64(p.AmpKeys) * perKey
	measure := func(user float64) error {
		// nezha's idle round starts after -gcIdleAfter without writes, later
		// than the nodes' writes may look settled.
		if err := x.waitIdleGC(ctx, tb, time.Now()); err != nil {
			return err
		}
		if err := settle(ctx, tb); err != nil {
			return err
		}
		after, err := readIO(ctx, tb)
		if err != nil {
			return err
		}
		du, err := x.meanDiskUsage(ctx, tb)
		if err != nil {
			return err
		}
		w = append(w, perNodeWritten(before, after)/user)
		s = append(s, du/live)
		return nil
	}
	x.logf("%s: load %d keys x %d KiB", tb.system, p.AmpKeys, p.AmpValueBytes/kib)
	if err := put(p.AmpKeys, 1); err != nil {
		return nil, nil, 0, 0, 0, err
	}
	user = live
	if err := measure(user); err != nil {
		return nil, nil, 0, 0, 0, err
	}
	// Overwrite the first half of the key indices (same prefix, same
	// sizes): live bytes stay the same, half of them become garbage.
	x.logf("%s: overwrite %d keys", tb.system, p.AmpKeys/2)
	if err := put(p.AmpKeys/2, 2); err != nil {
		return nil, nil, 0, 0, 0, err
	}
	user += float64(p.AmpKeys/2) * perKey
	if err := measure(user); err != nil {
		return nil, nil, 0, 0, 0, err
	}
	rs, err := gcRounds(ctx, tb)
	if err != nil {
		return nil, nil, 0, 0, 0, err
	}
	return w, s, user, live, len(rs), nil
}
