package experiments

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/baseline"
	"github.com/nezha-harness/nezha/cluster/agent/agenttest"
	"github.com/nezha-harness/nezha/dwisckey"
	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/nezha"
	"github.com/nezha-harness/nezha/plots"
	"github.com/nezha-harness/nezha/raftkv/node"
	"github.com/nezha-harness/nezha/systems"
)

// toyName is the -system name of the toy system, defined only in this file.
const toyName = "toy"

// TestMain lets the test binary double as the agent and node binary:
// cluster.Up (run by the experiments' Run.start) launches `<binary> agent
// ...` per node, whose agent starts `<binary> serve -system toy ...`,
// which serves the toy system from a registry built here. No file outside
// this one knows the toy system.
func TestMain(m *testing.M) {
	agenttest.MaybeServe() // the local backend's agents are this binary too
	if f := os.Getenv(growHeapEnv); f != "" {
		growHeap(f)
	}
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		cfg, err := toyServeConfig(os.Args[2:])
		if err == nil {
			err = node.Serve(cfg, "")
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "serve:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// toyServeConfig parses the serve flags the launcher (cluster.Spec.Args)
// and the experiments (Run.systemArgs) give a node of the toy system. The
// binary's full serve command line is cmd/nezha/serve.go; this test binary
// cannot import it (package main).
func toyServeConfig(args []string) (node.Config, error) {
	cfg := node.Default()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	system := fs.String("system", "", "")
	peers := fs.String("peers", "", "")
	fs.StringVar(&cfg.Address, "address", "", "")
	fs.StringVar(&cfg.InternalAddress, "internalAddress", "", "")
	fs.StringVar(&cfg.MetricsAddress, "metricsAddress", "", "")
	fs.StringVar(&cfg.JSONRPCAddress, "jsonrpcAddress", "", "")
	fs.StringVar(&cfg.EtcdAddress, "etcdAddress", "", "")
	fs.String("pprofAddress", "", "") // the toy's nodes serve no profiler
	fs.BoolVar(&cfg.DiskFaults, "diskFaults", false, "")
	fs.StringVar(&cfg.DataDir, "data", "", "")
	fs.StringVar(&cfg.ClusterID, "clusterID", "", "")
	voters := fs.String("bootstrapVoters", "", "")
	fs.Int64Var(&cfg.SegmentSizeBytes, "segmentSizeBytes", cfg.SegmentSizeBytes, "")
	fs.DurationVar(&cfg.RequestTimeout, "requestTimeout", cfg.RequestTimeout, "")
	fs.BoolVar(&cfg.CampaignOnBoot, "campaign", cfg.CampaignOnBoot, "")
	toy := toySystem()
	cfg.System, cfg.SystemConfig = toy, toy.NewConfig()
	cfg.SystemConfig.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if *system != toyName {
		return cfg, fmt.Errorf("-system %q: this test binary serves only %s", *system, toyName)
	}
	cfg.Peers = cmdline.SplitList(*peers)
	for _, v := range cmdline.SplitList(*voters) {
		id, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return cfg, err
		}
		cfg.BootstrapVoters = append(cfg.BootstrapVoters, id)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	return cfg, cfg.Validate()
}

// registryWith is the binary's registry (cmd/nezha/main.go) plus extra.
func registryWith(extra ...systems.System) (*systems.Registry, error) {
	return systems.NewRegistry(append([]systems.System{nezha.Nezha(), nezha.NezhaNoGC(), baseline.Original(), baseline.PASV(), baseline.BlobDB(), baseline.LSMRaft()}, extra...)...)
}

func testRegistry(t *testing.T, extra ...systems.System) *systems.Registry {
	t.Helper()
	reg, err := registryWith(extra...)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// toySM is a trivial in-memory state machine: it keeps nothing on disk, so
// AppliedIndex is 0 after a restart and the node replays the whole log.
type toySM struct {
	mu      sync.RWMutex
	m       map[string][]byte
	applied uint64
}

func (s *toySM) AppliedIndex() uint64 { s.mu.RLock(); defer s.mu.RUnlock(); return s.applied }

func (s *toySM) Apply(ents []systems.AppliedEntry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range ents {
		switch e.Command.Op {
		case systems.OpPut:
			s.m[string(e.Command.Key)] = e.Command.Value
		case systems.OpDelete:
			delete(s.m, string(e.Command.Key))
		}
		s.applied = e.Index
	}
	return nil
}

func (s *toySM) Get(key []byte) ([]byte, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.m[string(key)]
	return slices.Clone(v), ok, nil
}

func (s *toySM) Scan(start, end []byte, limit, maxBytes int) ([]systems.KeyValue, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var keys []string
	for k := range s.m {
		if k >= string(start) && (len(end) == 0 || k < string(end)) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out []systems.KeyValue
	size := 0
	for _, k := range keys {
		if limit > 0 && len(out) >= limit {
			break
		}
		if len(out) > 0 && size >= maxBytes {
			return out, true, nil
		}
		out = append(out, systems.KeyValue{Key: []byte(k), Value: slices.Clone(s.m[k])})
		size += len(k) + len(s.m[k])
	}
	return out, false, nil
}

func (s *toySM) Close() error { return nil }

type toyConfig struct{}

func (toyConfig) RegisterFlags(*flag.FlagSet) {}
func (toyConfig) Validate() error             { return nil }
func (toyConfig) Open(systems.Env) (systems.StateMachine, error) {
	return &toySM{m: map[string][]byte{}}, nil
}

func toySystem() systems.System {
	return systems.System{Name: toyName, Summary: "in-memory map (test only)", Role: systems.RoleBaseline, LogDir: "raftlog",
		NewConfig: func() systems.SystemConfig { return toyConfig{} }}
}

// TestRegistryRoles: the default system list is the registry's studied
// systems and baselines in registration order (today's list unchanged),
// a registered system joins it with no other edit, and -systems accepts it.
func TestRegistryRoles(t *testing.T) {
	want := []string{nezha.Name, nezha.NameNoGC, string(baseline.ModeOriginal), string(baseline.ModePASV), string(baseline.ModeBlobDB), string(baseline.ModeLSMRaft)}
	if got := DefaultSystems(testRegistry(t)); !slices.Equal(got, want) {
		t.Fatalf("DefaultSystems = %v, want %v", got, want)
	}
	reg := testRegistry(t, toySystem())
	if got := DefaultSystems(reg); !slices.Equal(got, append(slices.Clone(want), toyName)) {
		t.Fatalf("with the toy system, DefaultSystems = %v", got)
	}
	if got := reg.Reference(); got != string(baseline.ModeOriginal) {
		t.Fatalf("Reference = %q", got)
	}
	if got := reg.ByRole(systems.RoleStudied); !slices.Equal(got, want[:2]) {
		t.Fatalf("studied = %v", got)
	}
	// A bad -servers address fails validation after -systems is checked:
	// the toy system passes that check.
	err := RunAndReport(context.Background(), reg, RunRequest{Names: []string{"scan"}, Profile: "quick", Systems: []string{toyName},
		Servers: []string{"bogus"}, OutDir: t.TempDir(), Force: true, Out: &bytes.Buffer{}})
	if err == nil || strings.Contains(err.Error(), "unknown system") || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("run -systems toy: %v", err)
	}
	if _, err := systems.NewRegistry(toySystem(), func() systems.System { s := toySystem(); s.Name = "toy2"; s.Role = ""; return s }()); err == nil {
		t.Fatal("a system without a role was registered")
	}
}

// TestOptionalSystems: the optional systems run only in the experiments
// that are WithOptional (get-zipf, scan, ycsb), after the others, and an
// unknown optional system fails validation.
func TestOptionalSystems(t *testing.T) {
	var wantWith []string
	for _, e := range All() {
		if e.WithOptional {
			wantWith = append(wantWith, e.Name)
		}
	}
	if !slices.Equal(wantWith, []string{"get-zipf", "scan", "ycsb"}) {
		t.Fatalf("experiments WithOptional = %v, want get-zipf, scan, ycsb", wantWith)
	}
	if got := testRegistry(t, dwisckey.System()).Optional(); !slices.Equal(got, []string{sysDwisckey}) {
		t.Fatalf("Optional() = %v, want [dwisckey]", got)
	}
	seen := map[string][]string{}
	record := func(name string, with bool) Experiment {
		return Experiment{Name: name, Title: name, Shows: "systems", SmallDisk: true, WithOptional: with,
			run: func(_ context.Context, x *Run) error { seen[name] = slices.Clone(x.Systems); return nil }}
	}
	_, err := Execute(context.Background(), RunOptions{Experiments: []Experiment{record("plain", false), record("with", true)}, Profile: Quick(),
		Systems: []string{sysNezha, sysOriginal}, OptionalSystems: []string{sysDwisckey, sysNezha}, OutDir: t.TempDir(), Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seen["plain"], []string{sysNezha, sysOriginal}) || !slices.Equal(seen["with"], []string{sysNezha, sysOriginal, sysDwisckey}) {
		t.Fatalf("systems per experiment = %v", seen)
	}
	err = RunRequest{Names: []string{"scan"}, Profile: "quick", Systems: []string{sysNezha}, OptionalSystems: []string{"nosuch"}}.Validate(testRegistry(t))
	if err == nil || !strings.Contains(err.Error(), `unknown system "nosuch"`) {
		t.Fatalf("unknown optional system: %v", err)
	}
}

// TestToySystemThroughExecute runs the toy system, defined only in this
// file, through the experiments' harness path: Execute -> Run.start ->
// cluster.Up of three `serve` processes (this test binary) -> client
// writes and reads -> result.json.
func TestToySystemThroughExecute(t *testing.T) {
	reg := testRegistry(t, toySystem())
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	toyExp := Experiment{Name: "toy-roundtrip", Title: "toy", Shows: "a registered system runs", SmallDisk: true,
		run: func(ctx context.Context, x *Run) error {
			for _, sys := range x.Systems {
				tb, err := x.start(ctx, sys, "toy")
				if err != nil {
					return err
				}
				for i := range 20 {
					k, v := []byte(fmt.Sprintf("k%02d", i)), []byte(fmt.Sprintf("v%02d", i))
					if _, err := tb.c.Put(ctx, k, v); err != nil {
						tb.stop(true)
						return err
					}
					got, found, err := tb.c.Get(ctx, k)
					if err != nil || !found || !bytes.Equal(got, v) {
						tb.stop(true)
						return fmt.Errorf("get %s = %q %v %v", k, got, found, err)
					}
				}
				tb.stop(false)
				x.metric("toy_keys/"+sys, 20)
			}
			return nil
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	systemsToRun := slices.DeleteFunc(DefaultSystems(reg), func(s string) bool { return s != toyName })
	res, err := Execute(ctx, RunOptions{Experiments: []Experiment{toyExp}, Profile: Quick(), Systems: systemsToRun,
		OutDir: t.TempDir(), Binary: exe, Out: &out, Registry: reg})
	if err != nil {
		t.Fatalf("Execute: %v\n%s", err, out.String())
	}
	if len(res) != 1 || res[0].Error != "" || len(res[0].Failures) > 0 || res[0].Metrics["toy_keys/"+toyName] != 20 {
		t.Fatalf("result %+v\n%s", res, out.String())
	}
}

// TestToySystemFlags: a system declares its geometry, condition flags and
// background work in its registration, and the experiments' planning
// gives its nodes exactly those flags, with no edit in this package.
func TestToySystemFlags(t *testing.T) {
	toy := toySystem()
	toy.Geometry = func(s systems.GeometryScale) systems.Geometry {
		if s.DataPerNodeBytes == 0 {
			return systems.Geometry{WriteBufferBytes: 7, SoftPendingCompactionBytes: 3}
		}
		return systems.Geometry{Flags: []string{"-toy.cacheBytes", fmt.Sprint(int64(s.Factor() * 1e6)), "-toy.segmentBytes", fmt.Sprint(s.SegmentSizeBytes)},
			SoftPendingCompactionBytes: 5}
	}
	toy.ConditionFlags = func(cond string, dataPerNode int64) []string {
		switch cond {
		case systems.CondCacheOff:
			return []string{"-toy.cache=false"}
		case systems.CondPaperGC:
			return []string{"-toy.gcBytes", fmt.Sprint(dataPerNode / 2)}
		}
		return nil
	}
	toy.Compactions = true
	x := &Run{Profile: Quick(), reg: testRegistry(t, toy)}
	x.Profile.Geometry = GeometryScaled
	seg := fmt.Sprint(x.Profile.SegmentSizeBytes)
	check := func(what string, got []string, want ...string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s = %q, want %q", what, got, want)
		}
	}
	check("scaled geometry", x.geometryArgs(toyName, 1e9), "-toy.cacheBytes", "10000", "-toy.segmentBytes", seg)
	check("cache-off", x.conditionArgs(CondCacheOff, toyName, 1e9), "-toy.cache=false")
	check("paper-gc", x.conditionArgs(CondPaperGC, toyName, 1e9), "-toy.gcBytes", "500000000")
	check("no-fsync", x.conditionArgs(CondNoFsync, toyName, 1e9), "-sync=false")
	check("all", x.conditionArgs(CondAll, toyName, 1e9), "-sync=false", "-toy.cache=false", "-toy.gcBytes", "500000000")
	if x.sameAsOurs(CondCacheOff, toyName, 1e9) || !x.sameAsOurs(CondCacheOff, sysNezha, 1e9) {
		t.Error("sameAsOurs: cache-off changes the toy's flags and not nezha's")
	}
	if got := x.softPendingBytes(toyName, 1e9); got != 5 {
		t.Errorf("soft pending bytes = %v, want the toy's 5", got)
	}
	check("crash flags", x.crashArgs(toyName), "-toy.cacheBytes", fmt.Sprint(int64(float64(int64(x.Profile.CrashKeys)*int64(x.Profile.CrashValueBytes))/1e11*1e6)), "-toy.segmentBytes", seg)
	if k, split := x.latencyGCWindowKind(toyName); !split || k != plots.WindowCompaction {
		t.Errorf("latency-gc windows of a system with compactions: %v %v", k, split)
	}
	x.Profile.Geometry = GeometryNative
	check("native geometry", x.geometryArgs(toyName, 1e9))
	if got := x.softPendingBytes(toyName, 1e9); got != 3 {
		t.Errorf("native soft pending bytes = %v, want the toy's default 3", got)
	}
	// A system with GC declares the flags that keep it running in the
	// fault campaigns: its crash campaign, its linearizability checks and
	// their notes use them.
	gc := toySystem()
	gc.GCStressFlags = []string{"-toy.gcAlways"}
	stressed := &Run{Profile: Quick(), reg: testRegistry(t, gc), Systems: []string{toyName}}
	check("crash flags of a system with GC", stressed.crashArgs(toyName), "-toy.gcAlways")
	check("check flags of a system with GC", stressed.gcStressFlags(toyName), "-toy.gcAlways")
	if got, want := stressed.gcStressText(), "; toy runs with [-toy.gcAlways] so that rounds run back to back"; got != want {
		t.Errorf("crash note = %q, want %q", got, want)
	}
	// Its GC strategy and round threshold come from its own flags too, in
	// every experiment that sets them (and the profile's threshold on
	// every run).
	gc.GCFlags = func(strategy string, thresholdBytes int64) []string {
		return []string{"-toy.gcMode", strategy, "-toy.gcAt", fmt.Sprint(thresholdBytes)}
	}
	withGC := &Run{Profile: Quick(), reg: testRegistry(t, gc), Systems: []string{toyName}}
	check("gc flags", withGC.gcArgs(toyName, "sweep", 7), "-toy.gcMode", "sweep", "-toy.gcAt", "7")
	check("serve flags of a system with GC", withGC.systemArgs(toyName, "-x", "1"),
		"-segmentSizeBytes", fmt.Sprint(withGC.Profile.SegmentSizeBytes), "-requestTimeout", "1m",
		"-toy.gcMode", "", "-toy.gcAt", fmt.Sprint(withGC.Profile.GCThresholdBytes), "-x", "1")
	// A system that declares nothing gets no flags but the node's.
	plain := &Run{Profile: Quick(), reg: testRegistry(t, toySystem()), Systems: []string{toyName}}
	plain.Profile.Geometry = GeometryScaled
	check("plain toy geometry", plain.geometryArgs(toyName, 1e9))
	check("plain toy, all conditions", plain.conditionArgs(CondAll, toyName, 1e9), "-sync=false")
	check("plain toy crash flags", plain.crashArgs(toyName))
	check("plain toy gc flags", plain.gcArgs(toyName, "sweep", 7))
	check("plain toy serve flags", plain.systemArgs(toyName), "-segmentSizeBytes", fmt.Sprint(plain.Profile.SegmentSizeBytes), "-requestTimeout", "1m")
	if got := plain.gcStressText(); got != "" {
		t.Errorf("crash note of a system without GC stress flags = %q", got)
	}
	if !plain.sameAsOurs(CondCacheOff, toyName, 1e9) || !plain.sameAsOurs(CondPaperGC, toyName, 1e9) {
		t.Error("sameAsOurs: cache-off and paper-gc change nothing for a system that declares no condition flags")
	}
}

// TestSystemNames: the names and facts the experiments keep by value
// (the systems their prose singles out, the gc experiment's strategies)
// are those of the systems' registrations.
func TestSystemNames(t *testing.T) {
	for _, c := range [][2]string{{sysNezha, nezha.Name}, {sysNezhaNoGC, nezha.NameNoGC}, {sysOriginal, string(baseline.ModeOriginal)},
		{sysBlobDB, string(baseline.ModeBlobDB)}, {sysDwisckey, dwisckey.Name}, {sysLSMRaft, string(baseline.ModeLSMRaft)}} {
		if c[0] != c[1] {
			t.Errorf("experiments name %q, the system's package %q", c[0], c[1])
		}
	}
	if got := nezha.Nezha().GCStrategies; !slices.Equal(gcStrategies(), got) {
		t.Errorf("gcStrategies() = %v, nezha's registration %v", gcStrategies(), got)
	}
	if testRegistry(t).Reference() != sysOriginal {
		t.Error("the reference baseline is not original")
	}
}

// TestExecuteNeedsRegistry: an experiment that starts a cluster fails
// with a clear error when RunOptions has no registry, instead of running
// every system with its defaults; one that starts none still runs.
func TestExecuteNeedsRegistry(t *testing.T) {
	started := Experiment{Name: "starts", Title: "starts", Shows: "a cluster", SmallDisk: true,
		run: func(ctx context.Context, x *Run) error {
			tb, err := x.start(ctx, sysNezha, "t")
			if err == nil {
				tb.stop(false)
			}
			return err
		}}
	ran := false
	none := Experiment{Name: "none", Title: "none", Shows: "nothing", SmallDisk: true,
		run: func(context.Context, *Run) error { ran = true; return nil }}
	res, err := Execute(context.Background(), RunOptions{Experiments: []Experiment{started, none}, Profile: Quick(),
		Systems: []string{sysNezha}, OutDir: t.TempDir(), Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || !strings.Contains(res[0].Error, "RunOptions.Registry is nil") || res[1].Error != "" || !ran {
		t.Fatalf("results %+v, ran %v", res, ran)
	}
}
