package experiments

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nezha-harness/nezha/plots"
	"github.com/nezha-harness/nezha/ycsb"
)

// ycsbExperiment: YCSB Load then A-F on one cluster per system, 16 KiB
// values (the paper's Fig. 8 setup), throughput normalized to original.
func ycsbExperiment() Experiment {
	return Experiment{
		Name: "ycsb", WithOptional: true, Title: "YCSB Load and A-F",
		Shows: "the standard mixes (upstream YCSB definitions) normalized to Raft+RocksDB (original)",
		run: func(ctx context.Context, x *Run) error {
			p := x.Profile
			x.param("recordcount", p.YCSBRecords)
			x.param("operationcount", p.YCSBOps)
			x.param("fieldcount", 1)
			x.param("fieldlength", p.YCSBValueBytes)
			x.param("threadcount", p.YCSBThreads)
			x.param("workloads", p.YCSBWorkloads)
			x.param("geometry", p.Geometry)
			x.note("The workloads run in order on one cluster per system after one load (D and E insert records, so later workloads see more). go-ycsb seeds its workers from the clock: runs are not repeatable operation for operation.")
			phases := append([]string{"load"}, p.YCSBWorkloads...)
			opsps := map[string]map[string]float64{}
			tbl := Table{Title: "YCSB throughput (ops/s) and p99 latency (ms)", Columns: []string{"system"}}
			for _, ph := range phases {
				tbl.Columns = append(tbl.Columns, strings.ToUpper(ph)+" ops/s", strings.ToUpper(ph)+" p99")
			}
			for _, sys := range x.Systems {
				opsps[sys] = map[string]float64{}
				row := []string{sys}
				tb, err := x.start(ctx, sys, "ycsb", x.geometryArgs(sys, p.YCSBRecords*int64(p.YCSBValueBytes))...)
				if err != nil {
					x.fail(sys, "cluster up", err, nil)
					continue
				}
				ok := true
				for _, ph := range phases {
					if !ok {
						row = append(row, "-", "-")
						continue
					}
					o := ycsb.DefaultOptions("run")
					file := "workloada"
					if ph == "load" {
						o.Phase = "load"
					} else {
						file = "workload" + ph
					}
					o.Files = []string{file}
					o.Settings = []string{
						fmt.Sprintf("recordcount=%d", p.YCSBRecords), fmt.Sprintf("operationcount=%d", p.YCSBOps),
						"fieldcount=1", fmt.Sprintf("fieldlength=%d", p.YCSBValueBytes), fmt.Sprintf("threadcount=%d", p.YCSBThreads),
						"measurement.interval=86400", // no periodic go-ycsb summaries on the console (go-ycsb's prop.LogInterval)
					}
					o.MaxValueBytes = 64 * mib
					o.OpTimeout = time.Minute
					o.Output, o.Warn = io.Discard, x.Out
					x.logf("%s: YCSB %s", sys, ph)
					sum, err := ycsb.Run(ctx, tb.c, o)
					if err == nil {
						err = sum.Failures()
					}
					if err != nil {
						x.fail(sys, "ycsb "+ph, err, tb.spec)
						ok = false
						row = append(row, "-", "-")
						continue
					}
					opsps[sys][ph] = sum.OpsPerSec
					x.metric(fmt.Sprintf("ycsb_ops_per_sec/%s/%s", sys, ph), sum.OpsPerSec)
					row = append(row, f0(sum.OpsPerSec), ms(sum.P99Us))
					x.logf("%s: YCSB %s %.0f ops/s, p99 %.1f ms", sys, ph, sum.OpsPerSec, float64(sum.P99Us)/1000)
				}
				tb.stop(!ok)
				tbl.Rows = append(tbl.Rows, row)
			}
			x.table(tbl)
			var cats []string
			for _, ph := range phases {
				cats = append(cats, strings.ToUpper(ph))
			}
			base, haveBase := opsps[sysOriginal]
			abs := plots.Figure{Name: "ycsb-throughput", Title: "YCSB throughput", Kind: plots.Bars,
				XLabel: "workload", YLabel: "throughput (ops/s)", Categories: cats}
			norm := plots.Figure{Name: "ycsb-normalized", Title: "YCSB throughput normalized to original", Kind: plots.Bars,
				XLabel: "workload", YLabel: "throughput / original's", Categories: cats,
				HLines: []plots.Mark{{At: 1, Label: sysOriginal}}}
			ratios := Table{Title: "YCSB throughput normalized to original", Columns: append([]string{"system"}, cats...)}
			for _, sys := range x.Systems {
				a := plots.Series{Name: sys}
				n := plots.Series{Name: sys}
				row := []string{sys}
				for i, ph := range phases {
					v, ok := opsps[sys][ph]
					a.Values = append(a.Values, v)
					if !ok {
						a.Missing = append(a.Missing, i)
					}
					b := base[ph]
					if ok && haveBase && b > 0 {
						n.Values = append(n.Values, v/b)
						row = append(row, f2(v/b))
						x.metric(fmt.Sprintf("ycsb_ratio/%s/%s", sys, ph), v/b)
					} else {
						n.Values = append(n.Values, 0)
						n.Missing = append(n.Missing, i)
						row = append(row, "-")
					}
				}
				abs.Series = append(abs.Series, a)
				norm.Series = append(norm.Series, n)
				ratios.Rows = append(ratios.Rows, row)
			}
			x.figure(abs)
			if haveBase {
				x.table(ratios)
				x.figure(norm)
			} else {
				x.note("original did not run (or failed): no normalized figure.")
			}
			return nil
		},
	}
}
