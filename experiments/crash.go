package experiments

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gonum.org/v1/gonum/stat"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/faults"
	"github.com/nezha-harness/nezha/linearizability"
	"github.com/nezha-harness/nezha/plots"
	"github.com/nezha-harness/nezha/systems"
)

// crashKill is one SIGKILL of the campaign and the recovery after it.
type crashKill struct {
	N    int
	Node uint64
	// DuringGC: the kill was aimed at a GC round (nezha) or a RocksDB
	// flush or compaction (baselines); Observed: the node reported new
	// activity (a finished round or a changed storage shape) just before.
	DuringGC, Observed bool
	WasLeader          bool
	// Leader and Write are the times from the restart's start until a
	// majority agreed on a leader and until a probe write was accepted.
	Leader, Write time.Duration
	// At is the kill and Restarted the end of the restart (the node
	// serving again), since the campaign's load began.
	At, Restarted time.Duration
	// Recovery is how the writers' load came back after the kill
	// (faults.MeasureRecovery: writes acknowledged again, throughput
	// back within 10 %).
	Recovery faults.Recovery
	Err      string
}

// crashKeyState is what the writers know of one key: the last acknowledged
// value ("" = absent, the state before any write and after a delete) and
// the writes issued after it whose outcome is unknown (failed or
// ambiguous), any of which the final value may be.
type crashKeyState struct {
	acked   string
	pending []string
}

func (s *crashKeyState) allowed(v string) bool { return v == s.acked || slices.Contains(s.pending, v) }

// crashWrites counts the writers' outcomes.
type crashWrites struct {
	Acked, Failed, Ambiguous int64
}

// crashLoad is the campaign's timeline of acknowledged writes: each
// writer's own acknowledgements (sent and acknowledged, since start), and
// a count per tenth of a second that the campaign reads while it runs.
type crashLoad struct {
	start time.Time
	acks  [][]faults.Ack // per writer
	bins  []atomic.Int64 // acknowledgements per crashBin since start
}

// crashBin is the resolution of crashLoad's live count.
const crashBin = 100 * time.Millisecond

// crashRecoveryWait bounds the wait, after each restart, for the writers'
// throughput to come back within 10 % of its level before the kill
// (awaitThroughput), so that each kill hits a recovered load.
const crashRecoveryWait = 10 * time.Second

func newCrashLoad(start time.Time, writers int, duration time.Duration) *crashLoad {
	// The campaign's bound plus a minute for the last kill's recovery.
	return &crashLoad{start: start, acks: make([][]faults.Ack, writers), bins: make([]atomic.Int64, int((duration+time.Minute)/crashBin)+1)}
}

// ack records that writer w's write sent at sent was acknowledged now.
func (l *crashLoad) ack(w int, sent time.Time) {
	now := time.Now()
	l.acks[w] = append(l.acks[w], faults.Ack{Sent: sent.Sub(l.start), Acked: now.Sub(l.start)})
	if b := int(now.Sub(l.start) / crashBin); b < len(l.bins) {
		l.bins[b].Add(1)
	}
}

// perSecond returns the acknowledgements in the second that starts at
// from (since start).
func (l *crashLoad) perSecond(from time.Duration) int64 {
	var n int64
	for b := int(from / crashBin); b < int((from+time.Second)/crashBin) && b < len(l.bins); b++ {
		if b >= 0 {
			n += l.bins[b].Load()
		}
	}
	return n
}

// awaitThroughput waits, up to crashRecoveryWait, until the last whole
// second holds at least 90 % of the median per-second acknowledgements
// of the five seconds before at (the level faults.MeasureRecovery uses,
// at the live count's resolution). It returns at once without such
// seconds.
func (l *crashLoad) awaitThroughput(ctx context.Context, at time.Duration) {
	o := faults.DefaultRecoveryOptions()
	var level []float64
	for k := time.Duration(1); k*time.Second <= o.Before && at-k*time.Second >= 0; k++ {
		level = append(level, float64(l.perSecond(at-k*time.Second)))
	}
	if len(level) == 0 {
		return
	}
	need := (1 - o.Within) * median(level)
	for end := time.Now().Add(crashRecoveryWait); time.Now().Before(end); {
		now := time.Since(l.start).Truncate(crashBin)
		if now-time.Second >= at && float64(l.perSecond(now-time.Second)) >= need {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(crashBin):
		}
	}
}

// all returns every writer's acknowledgements.
func (l *crashLoad) all() []faults.Ack {
	var out []faults.Ack
	for _, a := range l.acks {
		out = append(out, a...)
	}
	return out
}

// crashExperiment: a campaign of SIGKILLs of random nodes under a mixed
// write load, half of them aimed at GC or compaction, each followed by a
// restart; every acknowledged write is read back at the end and the state
// hashes are compared.
func crashExperiment() Experiment {
	return Experiment{
		Name: "crash", Title: "Crash campaign",
		Shows:            "that no acknowledged write is lost across many SIGKILLs (half during GC or compaction) and how long a cluster takes to recover from each",
		NeedsOwnClusters: true, SmallDisk: true, Campaign: true,
		run: func(ctx context.Context, x *Run) error {
			p := x.Profile
			x.param("kills", p.CrashKills)
			x.param("keys", p.CrashKeys)
			x.param("value_bytes", p.CrashValueBytes)
			x.param("writers", p.CrashWriters)
			x.param("max_writes", p.CrashMaxWrites)
			x.param("duration", p.CrashDuration.String())
			x.param("seed", p.CrashSeed)
			x.note("Each kill picks a random node (seed %d); even-numbered kills wait (up to 10 s) until the node reports new GC or compaction activity (a finished GC or log-truncation round, or a changed LSM or sorted-run shape) and kill it at once%s. The others kill after a random pause of up to %v of load.",
				p.CrashSeed, x.gcStressText(), p.CrashLoadBetweenKills)
			x.note("Recovery is timed from the start of the restart: 'leader' until a majority agrees on a leader, 'write' until a probe write is accepted. A write whose outcome the client could not learn (failed or ambiguous) may or may not have applied; the final value of a key may be its last acknowledged value or any later unacknowledged one, nothing else.")
			ro := faults.DefaultRecoveryOptions()
			x.param("recovery", ro)
			x.note("Recovery of the load, timed from the kill on the writers' acknowledged writes (docs/latency.md, 'Recovery after a fault'): 'writes back' until a write sent after the kill is acknowledged; 'throughput back' until the start of the first %v (tried every %v from then on) that holds at least %.0f %% of the level before the kill, the median acknowledged writes per second of the %v before it. Each kill is looked at until the next one; after each restart the campaign waits (up to %v) for the throughput to be back before it goes on, so that every kill hits a recovered load. A time not reached before the next kill counts as not recovered ('n not back').",
				ro.Window, ro.Step, 100*(1-ro.Within), ro.Before, crashRecoveryWait)
			sum := Table{Title: "Crash campaign: acknowledged writes and recovery", Columns: []string{"system", "kills", "aimed at GC/compaction (activity seen)", "leader kills",
				"writes acked", "failed", "ambiguous", "keys checked", "lost or wrong", "states converged", "recovery to write p50 / p95 / max (s)", "recovery to leader p50 (s)",
				"writes back after kill p50 / max (s)", "throughput back within 10 % p50 / max (s)"}}
			fig := plots.Figure{Name: "crash-recovery", Title: "Time to recover per kill", Kind: plots.Lines,
				XLabel: "kill", YLabel: "restart to write accepted (s)",
				Caption: "Time from the start of each restart until a leader was elected and a probe write accepted."}
			backFig := plots.Figure{Name: "crash-throughput-back", Title: "Time until throughput is back per kill", Kind: plots.Lines,
				XLabel: "kill", YLabel: "kill to throughput back (s)",
				Caption: fmt.Sprintf("Time from each kill until the writers' throughput was back to %.0f %% of its level before the kill (kills after which it was not back before the next are left out).", 100*(1-ro.Within))}
			csvRows := [][]string{{"system", "kill", "node", "during_gc", "activity_seen", "was_leader", "leader_sec", "write_sec", "error",
				"kill_at_sec", "restarted_at_sec", "level_writes_per_sec", "level_seconds", "writes_back_sec", "writes_back_seen", "throughput_back_sec", "throughput_back_seen"}}
			var bad []string
			for si, sys := range x.Systems {
				r, err := x.crashRun(ctx, sys, uint64(si))
				if err != nil {
					bad = append(bad, sys)
					x.fail(sys, "crash campaign", err, r.spec)
					if r.spec == nil {
						continue
					}
				}
				var gc, seen, leaders int
				var lead, write, writesBack, tputBack []float64
				var writesNotBack, tputNotBack int
				s := plots.Series{Name: sys}
				bs := plots.Series{Name: sys}
				for _, k := range r.kills {
					rc := k.Recovery
					switch {
					case k.Err != "":
					case rc.WritesBackSeen:
						writesBack = append(writesBack, rc.WritesBack.Seconds())
					default:
						writesNotBack++
					}
					switch {
					case k.Err != "" || rc.LevelSeconds == 0:
					case rc.ThroughputBackSeen:
						tputBack = append(tputBack, rc.ThroughputBack.Seconds())
						bs.X, bs.Y = append(bs.X, float64(k.N)), append(bs.Y, rc.ThroughputBack.Seconds())
					default:
						tputNotBack++
					}
					if k.DuringGC {
						gc++
					}
					if k.Observed {
						seen++
					}
					if k.WasLeader {
						leaders++
					}
					if k.Err == "" {
						lead, write = append(lead, k.Leader.Seconds()), append(write, k.Write.Seconds())
						s.X, s.Y = append(s.X, float64(k.N)), append(s.Y, k.Write.Seconds())
					}
					sec := func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) }
					csvRows = append(csvRows, []string{sys, fmt.Sprint(k.N), fmt.Sprint(k.Node), fmt.Sprint(k.DuringGC), fmt.Sprint(k.Observed),
						fmt.Sprint(k.WasLeader), sec(k.Leader), sec(k.Write), k.Err,
						sec(k.At), sec(k.Restarted), f1(rc.LevelOpsPerSec), fmt.Sprint(rc.LevelSeconds), sec(rc.WritesBack), fmt.Sprint(rc.WritesBackSeen),
						sec(rc.ThroughputBack), fmt.Sprint(rc.ThroughputBackSeen)})
				}
				fig.Series = append(fig.Series, s)
				if len(bs.X) > 0 {
					backFig.Series = append(backFig.Series, bs)
				}
				if r.load != nil {
					f := crashThroughputFigure(sys, r)
					var ws []TimeWindow
					for _, w := range f.Windows {
						ws = append(ws, TimeWindow{Window: w})
					}
					x.recordWindows(RunWindows{Run: "crash campaign", System: sys, Start: r.load.start, Seconds: r.loadEnd.Seconds(), Windows: ws})
					x.figure(f)
				}
				slices.Sort(lead)
				slices.Sort(write)
				dist := "-"
				if len(write) > 0 {
					dist = fmt.Sprintf("%s / %s / %s", f2(stat.Quantile(0.5, stat.Empirical, write, nil)), f2(stat.Quantile(0.95, stat.Empirical, write, nil)), f2(write[len(write)-1]))
					x.metric("crash_recover_write_p50_sec/"+sys, stat.Quantile(0.5, stat.Empirical, write, nil))
					x.metric("crash_recover_write_max_sec/"+sys, write[len(write)-1])
				}
				leadP50 := "-"
				if len(lead) > 0 {
					leadP50 = f2(stat.Quantile(0.5, stat.Empirical, lead, nil))
				}
				if r.verified {
					x.metric("crash_lost_writes/"+sys, float64(r.lost))
				}
				converged, checked, lost := fmt.Sprint(r.converged.OK), fmt.Sprint(r.checked), fmt.Sprint(r.lost)
				if !r.verified {
					converged, checked, lost = "not checked", "not checked", "not checked"
				}
				sum.Rows = append(sum.Rows, []string{sys, fmt.Sprint(len(r.kills)), fmt.Sprintf("%d (%d)", gc, seen), fmt.Sprint(leaders),
					fmt.Sprint(r.writes.Acked), fmt.Sprint(r.writes.Failed), fmt.Sprint(r.writes.Ambiguous), checked,
					lost, converged, dist, leadP50, backText(writesBack, writesNotBack), backText(tputBack, tputNotBack)})
				if len(writesBack) > 0 {
					x.metric("crash_writes_back_p50_sec/"+sys, median(writesBack))
				}
				if len(tputBack) > 0 {
					x.metric("crash_throughput_back_p50_sec/"+sys, median(tputBack))
				}
				for _, l := range r.lostText {
					x.note("%s: %s", sys, l)
				}
				if !r.converged.OK && err == nil {
					x.note("%s: the nodes' states did not converge: %s", sys, r.converged.Error)
				}
				if err == nil && (r.lost > 0 || !r.converged.OK) {
					bad = append(bad, sys)
				}
				r.tb.stop(err != nil)
			}
			x.table(sum)
			x.figure(fig)
			if len(backFig.Series) > 0 {
				x.figure(backFig)
			}
			if err := writeCSV(filepath.Join(x.Dir, "kills.csv"), csvRows); err != nil {
				return err
			}
			if len(bad) > 0 {
				return fmt.Errorf("crash campaign failed on %s (lost writes, unconverged states or a failed step)", strings.Join(bad, ", "))
			}
			return nil
		},
	}
}

// backText renders recovery times: "p50 / max", and how many kills were
// not back before the next ("; 2 not back").
func backText(secs []float64, notBack int) string {
	t := "-"
	if len(secs) > 0 {
		t = f2(median(secs)) + " / " + f2(slices.Max(secs))
	}
	if notBack > 0 {
		t += fmt.Sprintf("; %d not back", notBack)
	}
	return t
}

// crashThroughputFigure is the writers' acknowledged writes per second
// over sys's campaign, each kill shaded from the kill to the end of the
// node's restart.
func crashThroughputFigure(sys string, r crashOutcome) plots.Figure {
	f := plots.Figure{Name: "crash-throughput-" + sanitize(sys), Title: "Acknowledged writes over the campaign, " + sys, Kind: plots.Lines,
		XLabel: "time since the load began (s)", YLabel: "acknowledged writes (1/s)",
		Caption: "Writes acknowledged per second; shaded: each kill, from the SIGKILL to the end of the node's restart."}
	acks := r.load.all()
	secs := int(r.loadEnd / time.Second)
	perSec := make([]float64, secs)
	for _, a := range acks {
		if s := int(a.Acked / time.Second); s < secs {
			perSec[s]++
		}
	}
	ser := plots.Series{Name: sys}
	for i, v := range perSec {
		ser.X, ser.Y = append(ser.X, float64(i)), append(ser.Y, v)
	}
	f.Series = []plots.Series{ser}
	for _, k := range r.kills {
		if k.Restarted <= k.At {
			continue
		}
		f.Windows = append(f.Windows, plots.Window{Kind: plots.WindowFault, Label: fmt.Sprintf("kill %d: node %d", k.N, k.Node),
			Start: k.At.Seconds(), End: k.Restarted.Seconds(), Node: k.Node})
	}
	return f
}

// crashOutcome is one system's campaign.
type crashOutcome struct {
	tb        *testbed
	spec      *cluster.Spec
	kills     []crashKill
	writes    crashWrites
	checked   int
	lost      int
	lostText  []string
	converged linearizability.Convergence
	// verified: the final read-back and hash comparison ran (not if the
	// campaign was interrupted or failed before them).
	verified bool
	// load is the writers' acknowledgements, until loadEnd.
	load    *crashLoad
	loadEnd time.Duration
}

// crashArgs make GC and compaction frequent: the RocksDB geometry of a
// system with compactions scaled to the campaign's data, otherwise the
// system's GCStressFlags (nezha's rounds back to back).
func (x *Run) crashArgs(sys string) []string {
	p := x.Profile
	if s, ok := x.system(sys); ok && s.Compactions && s.Geometry != nil {
		return s.Geometry(systems.GeometryScale{DataPerNodeBytes: int64(p.CrashKeys) * int64(p.CrashValueBytes), SegmentSizeBytes: p.SegmentSizeBytes}).Flags
	}
	return x.gcStressFlags(sys)
}

// gcStressFlags are sys's flags that keep its GC running
// (systems.System.GCStressFlags), for the fault campaigns.
func (x *Run) gcStressFlags(sys string) []string {
	s, _ := x.system(sys)
	return slices.Clone(s.GCStressFlags)
}

// gcStressText says which of the run's systems run with which
// GCStressFlags, as "; nezha runs with [...] so that rounds run back to
// back" ("" if none has any).
func (x *Run) gcStressText() string {
	var b strings.Builder
	for _, sys := range x.Systems {
		if f := x.gcStressFlags(sys); len(f) > 0 {
			fmt.Fprintf(&b, "; %s runs with %v so that rounds run back to back", sys, f)
		}
	}
	return b.String()
}

// crashRun runs the campaign on sys: start, load, kills, final checks.
// The caller stops out.tb when it is set.
func (x *Run) crashRun(ctx context.Context, sys string, stream uint64) (out crashOutcome, err error) {
	p := x.Profile
	tb, err := x.start(ctx, sys, "crash", x.crashArgs(sys)...)
	if err != nil {
		return out, err
	}
	out.tb, out.spec = tb, tb.spec
	if _, err := tb.spec.WaitLeader(ctx, 30*time.Second); err != nil {
		return out, err
	}
	deadline := time.Now().Add(p.CrashDuration)
	wctx, stopWriters := context.WithDeadline(ctx, deadline)
	defer stopWriters()
	load := newCrashLoad(time.Now(), p.CrashWriters, p.CrashDuration)
	out.load = load
	states := make([]map[string]*crashKeyState, p.CrashWriters)
	counts := make([]crashWrites, p.CrashWriters)
	var wg sync.WaitGroup
	perWriter := max(p.CrashMaxWrites/int64(p.CrashWriters), 1)
	for w := range p.CrashWriters {
		states[w] = map[string]*crashKeyState{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			x.crashWriter(wctx, tb.c, w, perWriter, states[w], &counts[w], load, mrand.New(mrand.NewPCG(uint64(p.CrashSeed), stream<<32|uint64(w)+1)))
		}()
	}
	x.logf("%s: %d writers on %d keys; %d kills (seed %d), at most %v", sys, p.CrashWriters, p.CrashKeys, p.CrashKills, p.CrashSeed, p.CrashDuration)
	rng := mrand.New(mrand.NewPCG(uint64(p.CrashSeed), stream<<32))
	var campaignErr error
	for i := 1; i <= p.CrashKills; i++ {
		if time.Now().After(deadline) || ctx.Err() != nil {
			x.note("%s: stopped after %d of %d kills (time bound %v)", sys, i-1, p.CrashKills, p.CrashDuration)
			break
		}
		k, err := x.crashOnce(ctx, tb, i, rng, load)
		out.kills = append(out.kills, k)
		if err != nil {
			campaignErr = fmt.Errorf("kill %d (node %d): %w", i, k.Node, err)
			break
		}
		load.awaitThroughput(ctx, k.At)
		if i%10 == 0 || i == p.CrashKills {
			x.logf("%s: kill %d/%d: node %d (leader %v, GC %v/%v), leader after %v, write after %v", sys, i, p.CrashKills, k.Node,
				k.WasLeader, k.DuringGC, k.Observed, k.Leader.Round(time.Millisecond), k.Write.Round(time.Millisecond))
		}
	}
	stopWriters()
	out.loadEnd = time.Since(load.start)
	wg.Wait()
	var at []time.Duration
	for _, k := range out.kills {
		at = append(at, k.At)
	}
	for i, rc := range faults.MeasureRecovery(load.all(), 0, out.loadEnd, at, faults.DefaultRecoveryOptions()) {
		out.kills[i].Recovery = rc
	}
	if campaignErr != nil {
		return out, campaignErr
	}
	keys := map[string]*crashKeyState{}
	for w := range states {
		out.writes.Acked += counts[w].Acked
		out.writes.Failed += counts[w].Failed
		out.writes.Ambiguous += counts[w].Ambiguous
		for k, s := range states[w] {
			keys[k] = s
		}
	}
	if _, err := tb.spec.WaitLeader(ctx, 30*time.Second); err != nil {
		return out, err
	}
	// Each round of the check hashes every node's values (GBs in the
	// paper profile: 20,000 keys of up to 256 KiB per node).
	out.converged = linearizability.Converge(ctx, tb.spec, 5*time.Minute)
	out.verified = true
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		st := keys[k]
		got, err := crashRead(ctx, tb.c, k)
		if err != nil {
			return out, fmt.Errorf("read back %s: %w", k, err)
		}
		out.checked++
		if !st.allowed(got) {
			out.lost++
			if len(out.lostText) < 10 {
				out.lostText = append(out.lostText, fmt.Sprintf("key %s reads %.40q; acknowledged %.40q, unknown outcomes %d", k, got, st.acked, len(st.pending)))
			}
		}
	}
	x.logf("%s: %d kills; %d writes acked, %d failed, %d ambiguous; %d keys checked, %d lost or wrong; converged %v",
		sys, len(out.kills), out.writes.Acked, out.writes.Failed, out.writes.Ambiguous, out.checked, out.lost, out.converged.OK)
	return out, nil
}

// crashRead reads key (absent = ""), retrying for up to 30 s.
func crashRead(ctx context.Context, c *client.Client, key string) (string, error) {
	var last error
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, found, err := c.Get(rctx, []byte(key))
		cancel()
		if err == nil {
			if !found {
				return "", nil
			}
			return string(v), nil
		}
		last = err
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
	}
	return "", last
}

// crashWriter writes to its own keys (key i belongs to writer i mod
// writers, so each key's writes are sequential) until ctx ends or it has
// issued limit writes: nine puts of a random size for each delete.
func (x *Run) crashWriter(ctx context.Context, c *client.Client, w int, limit int64, states map[string]*crashKeyState, n *crashWrites, load *crashLoad, rng *mrand.Rand) {
	p := x.Profile
	var own []int
	for i := w; i < p.CrashKeys; i += p.CrashWriters {
		own = append(own, i)
	}
	if len(own) == 0 {
		return
	}
	for seq := int64(1); seq <= limit && ctx.Err() == nil; seq++ {
		key := fmt.Sprintf("crash-%07d", own[rng.IntN(len(own))])
		st := states[key]
		if st == nil {
			st = &crashKeyState{}
			states[key] = st
		}
		value := ""
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		sent := time.Now()
		var err error
		if rng.IntN(10) == 0 {
			_, err = c.Delete(octx, []byte(key))
		} else {
			head := fmt.Sprintf("%s w%d s%d ", key, w, seq)
			size := max(len(head), 1+rng.IntN(p.CrashValueBytes))
			value = head + strings.Repeat("v", size-len(head))
			_, err = c.Put(octx, []byte(key), []byte(value))
		}
		cancel()
		switch {
		case err == nil:
			n.Acked++
			load.ack(w, sent)
			st.acked, st.pending = value, nil
		case errors.Is(err, client.ErrAmbiguous):
			n.Ambiguous++
			st.pending = append(st.pending, value)
		default:
			n.Failed++
			st.pending = append(st.pending, value)
		}
	}
}

// crashOnce kills a random node (kill i; even kills aimed at GC or
// compaction), restarts it and times the recovery.
func (x *Run) crashOnce(ctx context.Context, tb *testbed, i int, rng *mrand.Rand, load *crashLoad) (crashKill, error) {
	spec := tb.spec
	node := spec.Nodes[rng.IntN(len(spec.Nodes))]
	k := crashKill{N: i, Node: node.ID, DuringGC: i%2 == 0}
	pause := time.Duration(rng.Int64N(int64(x.Profile.CrashLoadBetweenKills) + 1))
	if st, err := tb.c.Status(ctx, node.Address, false); err == nil {
		k.WasLeader = st.Header.LeaderId == node.ID
	}
	if k.DuringGC {
		k.Observed = waitActivity(ctx, tb.c, node.Address, 10*time.Second)
	} else {
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
	k.At = time.Since(load.start)
	if err := spec.Kill(node.ID); err != nil {
		k.Err = err.Error()
		return k, err
	}
	begin := time.Now()
	if err := spec.Restart(node.ID); err != nil {
		k.Err = err.Error()
		return k, err
	}
	k.Restarted = time.Since(load.start)
	if _, err := spec.WaitLeader(ctx, 30*time.Second); err != nil {
		k.Err = err.Error()
		return k, err
	}
	k.Leader = time.Since(begin)
	var last error
	for end := time.Now().Add(30 * time.Second); ; {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := tb.c.Put(wctx, []byte("crash-probe"), []byte(fmt.Sprint("after kill ", i)))
		cancel()
		if err == nil {
			break
		}
		last = err
		if time.Now().After(end) || ctx.Err() != nil {
			k.Err = fmt.Sprintf("no write accepted within 30 s of the restart: %v", last)
			return k, errors.New(k.Err)
		}
	}
	k.Write = time.Since(begin)
	return k, nil
}

// waitActivity polls a node's status until its GC rounds or storage shape
// change (a round finished, a flush or compaction happened), up to
// timeout; it reports whether they did.
func waitActivity(ctx context.Context, c *client.Client, addr string, timeout time.Duration) bool {
	first := ""
	for end := time.Now().Add(timeout); time.Now().Before(end) && ctx.Err() == nil; {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := c.Status(sctx, addr, false)
		cancel()
		if err == nil {
			fp := activityPrint(st)
			if first == "" {
				first = fp
			} else if fp != first {
				return true
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return false
}

// activityPrint renders what changes when a GC round ends or RocksDB
// flushes or compacts: the last GC round and the storage shape.
func activityPrint(st *kvpb.StatusResponse) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rounds %d", len(st.GcRounds))
	if n := len(st.GcRounds); n > 0 {
		fmt.Fprintf(&b, " last %d", st.GcRounds[n-1].EndUnixNanos)
	}
	if sh := st.Storage; sh != nil {
		fmt.Fprintf(&b, " runs %d blobs %d", sh.SortedRunBytes, sh.BlobFileBytes)
		for _, l := range sh.Levels {
			fmt.Fprintf(&b, " L%d %d/%d", l.Level, l.Files, l.Bytes)
		}
	}
	return b.String()
}

func writeCSV(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if err := w.WriteAll(rows); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
