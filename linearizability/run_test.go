package linearizability

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/faults"
	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/systems/systemstest"
)

// The nezha executable the end-to-end tests run the nodes with: built
// from this module on first use (unit tests do not need it), or
// $NEZHA_BINARY if set.
var (
	binaryOnce sync.Once
	binary     string
	binaryErr  error
	binaryDir  string
)

func needBinary(t *testing.T) string {
	t.Helper()
	binaryOnce.Do(func() {
		if b := os.Getenv("NEZHA_BINARY"); b != "" {
			binary = b
			return
		}
		binaryDir, binaryErr = os.MkdirTemp("", "nezha-check-bin-")
		if binaryErr != nil {
			return
		}
		root, _ := filepath.Abs("..")
		binary, binaryErr = systemstest.BuildBinary(root, binaryDir)
	})
	if binaryErr != nil {
		t.Fatal(binaryErr)
	}
	return binary
}

// The image the docker tests run the nodes with: built on first use
// (systemstest.BuildImage), removed by TestMain.
var (
	imageOnce   sync.Once
	image       string
	imageRemove func() error
	imageErr    error
)

// needImage skips the test with one line when Docker (or root, or the
// image build) is missing, and returns the image otherwise.
func needImage(t *testing.T) string {
	t.Helper()
	if why := systemstest.DockerMissing(); why != "" {
		t.Skip("docker: " + why)
	}
	imageOnce.Do(func() {
		root, _ := filepath.Abs("..")
		begin := time.Now()
		image, imageRemove, imageErr = systemstest.BuildImage(root)
		t.Logf("image %s built in %v", image, time.Since(begin).Round(time.Second))
	})
	if imageErr != nil {
		t.Skip("docker: the image build failed: " + imageErr.Error())
	}
	return image
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binaryDir != "" {
		os.RemoveAll(binaryDir)
	}
	if imageRemove != nil {
		if err := imageRemove(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = max(code, 1)
		}
	}
	os.Exit(code)
}

func isUsage(err error) bool {
	var ue *cmdline.UsageError
	return errors.As(err, &ue)
}

// TestRunBadInput: Options that Validate (or Run, before any cluster
// starts) refuses are one-line usage errors (exit 2). Flag-level cases
// (unknown flags, positional arguments, bad nemesis names) are tested with
// the command line in cmd/nezha.
func TestRunBadInput(t *testing.T) {
	out := t.TempDir()
	opts := func(system, nemesis string, set func(*Options)) Options {
		o := DefaultOptions()
		o.System, o.Out = system, out
		names, err := faults.ParseNemeses(nemesis)
		if err != nil {
			t.Fatal(err)
		}
		o.Nemeses = names
		if set != nil {
			set(&o)
		}
		return o
	}
	for name, o := range map[string]Options{
		"no system":              opts("", "kill", nil),
		"halves on one node":     opts("original", "partition-halves", func(o *Options) { o.Nodes = 1 }),
		"duration below warm-up": opts("original", "none", func(o *Options) { o.Duration = time.Second }),
		"no room for a fault":    opts("original", "kill", func(o *Options) { o.Duration = 5 * time.Second }),
		"bad read mode":          opts("original", "all", func(o *Options) { o.ReadMode = "eventual" }),
		"too many clients":       opts("original", "all", func(o *Options) { o.Clients = 1000 }),
		"etcd under delay":       opts("etcd", "kill,delay", func(o *Options) { o.Duration = 20 * time.Second }),
		"etcd with lease reads":  opts("etcd", "kill", func(o *Options) { o.ReadMode = "lease" }),
		"unknown system": opts("rocksdb-classic", "none", func(o *Options) {
			o.Duration, o.Binary = 5*time.Second, needBinary(t)
		}),
	} {
		_, err := Run(context.Background(), o)
		if !isUsage(err) {
			t.Errorf("%s: %v, want a usage error (exit 2)", name, err)
		} else if strings.Contains(cmdline.OneLine("check", err).Error(), "\n") {
			t.Errorf("%s: usage error spans lines: %q", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "cluster")); err == nil {
		t.Fatal("bad input started a cluster")
	}
	// An output directory that holds a run is not reused.
	os.WriteFile(filepath.Join(out, "result.json"), []byte("{}"), 0o644)
	_, err := Run(context.Background(), opts("original", "none", func(o *Options) { o.Duration, o.Binary = 5*time.Second, needBinary(t) }))
	if !isUsage(err) {
		t.Fatalf("reused output directory: %v, want a usage error", err)
	}
}

// run runs one short check and reports its result.
func run(t *testing.T, o Options) *Result {
	t.Helper()
	o.Binary = needBinary(t)
	o.Out = filepath.Join(t.TempDir(), "check")
	begin := time.Now()
	o.Logf = func(format string, args ...any) {
		t.Logf("[%5.1fs] %s", time.Since(begin).Seconds(), fmt.Sprintf(format, args...))
	}
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %v seed %d read mode %s: verdict %s, %d ops (%d ok, %d ambiguous, %d failed), availability %.3f, checked in %v, run took %v",
		o.System, o.Nemeses, o.Seed, o.ReadMode, res.Verdict, res.Ops.Total, res.Ops.OK, res.Ops.Ambiguous, res.Ops.Failed,
		res.Availability, res.Check.Elapsed.Round(time.Millisecond), res.Elapsed.Round(time.Second))
	for _, f := range res.Failures {
		t.Logf("failure: %s", f)
	}
	if t.Failed() || !res.OK && o.ReadMode != ReadStale {
		for _, n := range []int{1, 2, 3} {
			log := filepath.Join(res.Dir, "cluster", fmt.Sprintf("node%d", n), "node.log")
			if res.Backend != cluster.BackendLocal {
				log = savedLog(filepath.Join(res.Dir, "nodes"), uint64(n))
			}
			t.Logf("node %d log tail:\n%s", n, cluster.Tail(log, 10))
		}
	}
	return res
}

// TestCheck runs a short check per system under a fault, expecting it to
// be linearizable, healed and converged.
func TestCheck(t *testing.T) {
	for _, c := range []struct {
		system  string
		nemeses []string
		seed    int64
		args    []string
	}{
		{"nezha-nogc", []string{faults.PartitionLeader, faults.TornTail}, 1, nil},
		{"original", []string{faults.Kill, faults.PauseLeader}, 2, nil},
		// GC rounds back to back over 1 MiB segments: faults hit GC too.
		{"nezha", []string{faults.KillLeader, faults.Bridge}, 3, []string{"-gcContinuous", "-segmentSizeBytes", "1048576"}},
		// The external reference system: its peer links go through one
		// HTTP proxy per member (faults.NewHTTPNet).
		{cluster.Etcd, []string{faults.PartitionLeader, faults.Kill}, 4, nil},
		// Members come and go; convergence is checked on the final ones.
		// Seed 5 adds node 4, transfers the leadership to it and removes
		// node 2; the partition that follows isolates the added leader
		// through the proxies its links got.
		{"nezha-nogc", []string{faults.Membership, faults.PartitionLeader}, 5, nil},
	} {
		t.Run(c.system, func(t *testing.T) {
			if _, err := exec.LookPath("etcd"); cluster.External(c.system) && err != nil {
				t.Skip("etcd is not installed (apt-get install etcd-server; scripts/setup.sh installs it)")
			}
			// Shorter faults than the default, so that both fit in 12 s.
			sched := faults.ScheduleOptions{WarmUp: 2 * time.Second, MinHold: 2 * time.Second, MaxHold: 3 * time.Second,
				MinQuiet: time.Second, MaxQuiet: 1500 * time.Millisecond, CoolDown: 2 * time.Second}
			res := run(t, Options{System: c.system, Nemeses: c.nemeses, Duration: 12 * time.Second, Seed: c.seed, Schedule: sched, ExtraArgs: c.args})
			injected := map[string]bool{}
			for _, e := range res.Events {
				if e.Action == "inject" && e.Error == "" {
					injected[e.Nemesis] = true
				}
			}
			if len(injected) != len(c.nemeses) {
				t.Fatalf("injected %v, want %v: %+v", injected, c.nemeses, res.Events)
			}
			if !res.OK || res.Verdict != Linearizable {
				t.Fatalf("not OK: verdict %s, failures %v (html %s)", res.Verdict, res.Failures, res.HTMLPath)
			}
			if !res.FinalWrite.OK || !res.Convergence.OK || res.Ops.OK == 0 {
				t.Fatalf("final write %+v, convergence %+v", res.FinalWrite, res.Convergence)
			}
			if res.Ops.Failed+res.Ops.Ambiguous == 0 {
				t.Fatalf("no operation failed or was ambiguous: the faults did not reach the clients (%+v)", res.Ops)
			}
			if _, err := os.Stat(res.HistoryPath); err != nil {
				t.Fatal(err)
			}
			// Recovery is measured per fault; the writes came back after
			// at least one of them within the run.
			back := false
			for i, rc := range res.Recovery {
				if i >= len(res.Windows) || rc.At != res.Windows[i].Start {
					t.Fatalf("recovery %d at %v; windows %+v", i, rc.At, res.Windows)
				}
				back = back || rc.WritesBackSeen
			}
			if len(res.Recovery) != len(res.Windows) || !back {
				t.Fatalf("recovery %+v for %d fault windows: want one per window, writes back after one at least", res.Recovery, len(res.Windows))
			}
			if !slices.Contains(c.nemeses, faults.Membership) {
				return
			}
			cutAdded := false
			for _, e := range res.Events {
				_, cuts, _ := strings.Cut(e.Detail, "; cut ")
				cutAdded = cutAdded || e.Action == "inject" && e.Error == "" && (strings.Contains(cuts, "4->") || strings.Contains(cuts, "->4"))
			}
			if !cutAdded {
				t.Fatalf("no partition cut a link of the added node 4: %+v", res.Events)
			}
			final, err := cluster.Load(filepath.Join(filepath.Dir(res.HistoryPath), "cluster"))
			if err != nil {
				t.Fatal(err)
			}
			var want, got []uint64
			for _, n := range final.Nodes {
				want = append(want, n.ID)
			}
			for _, n := range res.Convergence.Nodes {
				got = append(got, n.ID)
			}
			if !slices.Equal(got, want) || final.NextID <= 4 {
				t.Fatalf("convergence checked nodes %v; cluster.json lists %v (next id %d, want > 4: a node added)", got, want, final.NextID)
			}
		})
	}
}

// TestCheckDocker runs a short check per system on the docker backend
// under partitions (the agents' proxies and packet filter in each
// container), kills and pauses: linearizable, healed and converged, and
// no container of the run left behind.
func TestCheckDocker(t *testing.T) {
	img := needImage(t)
	nemeses := []string{faults.PartitionLeader, faults.Kill, faults.Pause}
	for _, system := range []string{"nezha", "original"} {
		t.Run(system, func(t *testing.T) {
			sched := faults.ScheduleOptions{WarmUp: 2 * time.Second, MinHold: 2 * time.Second, MaxHold: 3 * time.Second,
				MinQuiet: time.Second, MaxQuiet: 1500 * time.Millisecond, CoolDown: 2 * time.Second}
			res := run(t, Options{System: system, Nemeses: nemeses, Duration: 16 * time.Second, Seed: 1, Schedule: sched,
				Backend: cluster.BackendOptions{Name: cluster.BackendDocker, Docker: cluster.DockerOptions{Image: img}}})
			if !res.OK || res.Verdict != Linearizable || !res.FinalWrite.OK || !res.Convergence.OK {
				t.Fatalf("not OK: verdict %s, failures %v, final write %+v, convergence %+v", res.Verdict, res.Failures, res.FinalWrite, res.Convergence)
			}
			injected := map[string]bool{}
			for _, e := range res.Events {
				if e.Action == "inject" && e.Error == "" {
					injected[e.Nemesis] = true
				}
			}
			if len(injected) != len(nemeses) {
				t.Fatalf("injected %v, want %v: %+v", injected, nemeses, res.Events)
			}
			if res.Backend != cluster.BackendDocker || res.LinkMechanism != "proxy+nftables" || !strings.Contains(res.Partitions, "container") {
				t.Fatalf("backend %q, link mechanism %q (%q), want docker, proxy+nftables in each container", res.Backend, res.LinkMechanism, res.Partitions)
			}
			if b, err := os.ReadFile(filepath.Join(res.Dir, "nodes", "node1.log")); err != nil || !bytes.Contains(b, []byte("start:")) {
				t.Fatalf("node 1's log was not copied out of its container: %v", err)
			}
			if out, err := exec.Command("docker", "ps", "-aq", "--filter", "ancestor="+img).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
				t.Fatalf("containers of the run left behind: %s %v", out, err)
			}
		})
	}
}

// TestStaleReadsAreCaught is the checker's self-test: local (stale) reads
// while the leader is isolated must be found not linearizable, on every
// run with the default seed, and the visualization must show a stale read.
func TestStaleReadsAreCaught(t *testing.T) {
	begin := time.Now()
	res := run(t, Options{System: "original", Nemeses: []string{faults.PartitionLeader}, ReadMode: ReadStale, Duration: 10 * time.Second, Seed: DefaultOptions().Seed})
	if res.Verdict != NotLinearizable || res.OK {
		t.Fatalf("stale reads under partition-leader: verdict %s, ok %v; the checker cannot fail", res.Verdict, res.OK)
	}
	if took := time.Since(begin); took > 60*time.Second {
		t.Fatalf("caught after %v, want within 60 s", took)
	}
	var during *Anomaly
	for i, a := range res.Check.Anomalies {
		if a.Kind == AnomalyStaleRead && strings.HasPrefix(a.During, faults.PartitionLeader) && isolated(res, a.Read.Node) {
			during = &res.Check.Anomalies[i]
			break
		}
	}
	if during == nil {
		t.Fatalf("no stale read from the isolated leader during the partition among the anomalies %+v", res.Check.Anomalies)
	}
	html, err := os.ReadFile(res.HTMLPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"stale read", faults.PartitionLeader} {
		if !bytes.Contains(html, []byte(want)) {
			t.Fatalf("%s does not show %q", res.HTMLPath, want)
		}
	}
	t.Logf("caught in %v: %s, during %s; visualization %s", time.Since(begin).Round(time.Second), during.Description, during.During, res.HTMLPath)
}

// isolated reports whether node was the one a partition-leader of the run
// isolated.
func isolated(res *Result, node uint64) bool {
	for _, w := range res.Windows {
		if w.Nemesis == faults.PartitionLeader && slices.Contains(w.Nodes, node) {
			return true
		}
	}
	return false
}
