package linearizability

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/faults"
	"github.com/nezha-harness/nezha/internal/buildinfo"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

// Read modes (-read-mode).
const (
	// ReadLinearizable: reads use Raft ReadIndex (the default).
	ReadLinearizable = "linearizable"
	// ReadLease: the nodes run with -leaseRead (etcd/raft's
	// ReadOnlyLeaseBased, which relies on CheckQuorum and bounded clock
	// drift).
	ReadLease = "lease"
	// ReadStale: reads are served from the local state machine of the node
	// a client is pinned to, without any quorum check. Not linearizable:
	// the checker's self-test.
	ReadStale = "stale"
)

// ReadModes lists the read modes.
var ReadModes = []string{ReadLinearizable, ReadLease, ReadStale}

// Options configures Run. Zero values take the defaults of
// DefaultOptions, except System, which is required.
type Options struct {
	// System is the -system of every node.
	System string `json:"system"`
	// Nemeses to inject, one at a time (see faults.ParseNemeses); empty:
	// no faults.
	Nemeses []string `json:"nemeses"`
	// Duration of the workload. Default 30s.
	Duration time.Duration `json:"duration"`
	// Clients is the number of logical clients, pinned to the nodes in
	// turn. Default 6.
	Clients int `json:"clients"`
	// Nodes is the cluster size. Default 3.
	Nodes int `json:"nodes"`
	// Seed drives the fault schedule and the workload. Default (and 0) 1.
	Seed int64 `json:"seed"`
	// ReadMode is one of ReadModes. Default linearizable.
	ReadMode string `json:"read_mode"`
	// Out is the directory of the run (cluster, history, result, HTML).
	// Required.
	Out string `json:"out"`
	// Binary is the nezha executable. Default: the running executable.
	Binary string `json:"binary"`
	// Tick is the nodes' Raft tick (-tick). Default 50ms: elections in
	// 0.5-1 s (10 ticks), heartbeats every tick.
	Tick time.Duration `json:"tick"`
	// Keys is the size of the key space. Default 10.
	Keys int `json:"keys"`
	// ScanGroup is the number of keys a scan may span (keys are grouped
	// in consecutive groups of this size). Default 5.
	ScanGroup int `json:"scan_group"`
	// ValueBytes pads written values to this size (0: a short unique id).
	// Values longer than MaxModelValueBytes are hashed in the model.
	ValueBytes int `json:"value_bytes"`
	// ThinkTime is the mean pause of a client between operations.
	// Default 2ms; it keeps histories at a size Porcupine checks quickly.
	ThinkTime time.Duration `json:"think_time"`
	// ReadTimeout and WriteTimeout bound one operation. Defaults 2s and
	// 2s: a write stuck on an unreachable leader gives up (ambiguous) soon
	// enough for its client to write again while the fault lasts.
	ReadTimeout  time.Duration `json:"read_timeout"`
	WriteTimeout time.Duration `json:"write_timeout"`
	// CheckTimeout bounds Porcupine. Default 2m. A timeout is a failure.
	CheckTimeout time.Duration `json:"check_timeout"`
	// ExtraArgs are more serve flags for every node.
	ExtraArgs []string `json:"extra_args,omitempty"`
	// Schedule timing; zero fields take faults.DefaultScheduleOptions.
	Schedule faults.ScheduleOptions `json:"schedule"`
	// KeepData keeps the nodes' data directories of a passing run; on
	// the docker and ssh backends it keeps the cluster (containers,
	// volumes, remote directories: `nezha cluster down -cluster
	// OUT/cluster -purge` removes them), which is otherwise removed after
	// the nodes' logs are copied to OUT/nodes.
	KeepData bool `json:"keep_data"`
	// Backend is where the nodes run (default local). The clients always
	// run here: one clock for the history.
	Backend cluster.BackendOptions `json:"backend"`
	// Logf receives progress lines. Default: none.
	Logf func(format string, args ...any) `json:"-"`
}

// DefaultOptions returns the defaults (System and Out are left empty).
func DefaultOptions() Options {
	return Options{
		Nemeses:      faults.Names(),
		Duration:     30 * time.Second,
		Clients:      6,
		Nodes:        3,
		Seed:         1,
		ReadMode:     ReadLinearizable,
		Tick:         50 * time.Millisecond,
		Keys:         10,
		ScanGroup:    5,
		ThinkTime:    2 * time.Millisecond,
		ReadTimeout:  2 * time.Second,
		WriteTimeout: 2 * time.Second,
		CheckTimeout: 2 * time.Minute,
	}
}

func (o *Options) fill() {
	d := DefaultOptions()
	if o.Duration == 0 {
		o.Duration = d.Duration
	}
	if o.Seed == 0 {
		o.Seed = d.Seed
	}
	if o.Clients == 0 {
		o.Clients = d.Clients
	}
	if o.Nodes == 0 {
		o.Nodes = d.Nodes
	}
	if o.ReadMode == "" {
		o.ReadMode = d.ReadMode
	}
	if o.Tick == 0 {
		o.Tick = d.Tick
	}
	if o.Keys == 0 {
		o.Keys = d.Keys
	}
	if o.ScanGroup == 0 {
		o.ScanGroup = min(d.ScanGroup, o.Keys)
	}
	if o.ThinkTime == 0 {
		o.ThinkTime = d.ThinkTime
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = d.ReadTimeout
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = d.WriteTimeout
	}
	if o.CheckTimeout == 0 {
		o.CheckTimeout = d.CheckTimeout
	}
	o.Schedule.Nemeses = o.Nemeses
	o.Schedule.Nodes = o.Nodes
	o.Schedule.Duration = o.Duration
	o.Schedule.Seed = o.Seed
	o.Schedule = o.Schedule.WithDefaults()
}

// Validate reports every problem with o at once, as *cmdline.UsageError
// values. It fills defaults first.
func (o *Options) Validate() error {
	o.fill()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, cmdline.Usagef(format, args...)) }
	if o.System == "" {
		bad("-system is required")
	}
	if o.Out == "" && o.System != "" {
		bad("an output directory (-out) is required")
	}
	switch o.ReadMode {
	case ReadLinearizable, ReadLease, ReadStale:
	default:
		bad("-read-mode %q is not one of %s", o.ReadMode, strings.Join(ReadModes, ", "))
	}
	if o.Clients < 1 || o.Clients > 64 {
		bad("-clients %d is outside 1..64 (Porcupine's cost grows exponentially with concurrency)", o.Clients)
	}
	if o.Nodes < 1 || o.Nodes > 9 {
		bad("-nodes %d is outside 1..9", o.Nodes)
	}
	if o.Seed < 0 {
		bad("-seed %d must not be negative", o.Seed)
	}
	if o.Keys < 1 || o.Keys > 100 {
		bad("-keys %d is outside 1..100", o.Keys)
	}
	if o.ScanGroup < 1 || o.ScanGroup > o.Keys {
		bad("scan group of %d keys is outside 1..%d (the key space)", o.ScanGroup, o.Keys)
	}
	if o.ValueBytes < 0 || o.ValueBytes > 16<<20 {
		bad("-value-size %d is outside 0..16 MiB", o.ValueBytes)
	}
	if o.Tick <= 0 || o.Tick > 10*time.Second {
		bad("-tick %v is outside (0, 10s]", o.Tick)
	}
	if o.ThinkTime < 0 || o.ReadTimeout <= 0 || o.WriteTimeout <= 0 || o.CheckTimeout <= 0 {
		bad("think time must not be negative and timeouts must be positive")
	}
	if err := o.Schedule.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.Backend.Validate(o.Nodes); err != nil {
		errs = append(errs, err)
	}
	if cluster.External(o.System) {
		var unsupported []string
		for _, n := range o.Nemeses {
			if slices.Contains(externalUnsupported, n) {
				unsupported = append(unsupported, n)
			}
		}
		if len(unsupported) > 0 {
			bad("-system %s: nemeses %s do not apply to an external system (delay: its HTTP peer links have no per-message latency; torn-tail and lose-tail: they tear our Raft log's segments; membership: nezha does not change etcd's members); the others do", o.System, strings.Join(unsupported, ", "))
		}
		if o.ReadMode == ReadLease {
			bad("-system %s: -read-mode lease does not apply (etcd serves linearizable reads by ReadIndex only)", o.System)
		}
	}
	return errors.Join(errs...)
}

// externalUnsupported are the nemeses an external system (etcd) cannot be
// put under.
var externalUnsupported = []string{faults.Delay, faults.TornTail, faults.LoseTail, faults.Membership}

// NodeArgs returns the serve flags the run gives every node (besides the
// per-node -dialPeers).
func (o *Options) NodeArgs() []string {
	args := []string{"-tick", o.Tick.String()}
	if o.ReadMode == ReadLease {
		args = append(args, "-leaseRead")
	}
	if faults.NeedsDiskFaults(o.Nemeses) {
		args = append(args, faults.DiskNodeArgs()...)
	}
	return append(args, o.ExtraArgs...)
}

// OpCounts counts recorded operations.
type OpCounts struct {
	Total     int            `json:"total"`
	OK        int            `json:"ok"`
	Ambiguous int            `json:"ambiguous"`
	Failed    int            `json:"failed"`
	ByKind    map[string]int `json:"by_kind"`
}

// FinalWrite is the write after healing that must succeed.
type FinalWrite struct {
	OK       bool   `json:"ok"`
	Key      string `json:"key"`
	Value    string `json:"value"`
	Index    uint64 `json:"index,omitempty"`
	Attempts int    `json:"attempts"`
	Error    string `json:"error,omitempty"`
}

// NodeState is one node's answer to Status after the run.
type NodeState struct {
	ID             uint64 `json:"id"`
	AppliedIndex   uint64 `json:"applied_index"`
	StateHash      string `json:"state_hash"`
	StateHashIndex uint64 `json:"state_hash_index"`
	Error          string `json:"error,omitempty"`
}

// Convergence says whether every node reached the same state hash at the
// same applied index after healing.
type Convergence struct {
	OK      bool          `json:"ok"`
	Nodes   []NodeState   `json:"nodes"`
	Elapsed time.Duration `json:"elapsed_ns"`
	Error   string        `json:"error,omitempty"`
}

// Result of a run; it is saved as result.json in the run's directory.
type Result struct {
	// OK: the history is linearizable, the final write succeeded and the
	// nodes converged.
	OK bool `json:"ok"`
	// Verdict is Linearizable, NotLinearizable, Unknown, or "interrupted".
	Verdict  string   `json:"verdict"`
	Failures []string `json:"failures,omitempty"`
	Options  Options  `json:"options"`
	// NodeFlags are the serve flags of every node (-dialPeers aside).
	NodeFlags []string `json:"node_flags"`
	// Backend is where the nodes ran (local, docker, ssh).
	Backend string `json:"backend"`
	// LinkMechanism is how the network nemeses cut links
	// (faults.Net.Mechanism: proxy, proxy+nftables, nftables,
	// http-proxy); Partitions says it with where (faults.Net.Describe).
	LinkMechanism string   `json:"link_mechanism"`
	Partitions    string   `json:"partitions"`
	Ops           OpCounts `json:"ops"`
	// Availability is the fraction of operations that succeeded.
	Availability float64          `json:"availability"`
	Check        CheckOutcome     `json:"check"`
	Schedule     *faults.Schedule `json:"schedule"`
	Events       []faults.Event   `json:"events"`
	Windows      []faults.Window  `json:"windows"`
	// Recovery is, per fault window (in the order of Windows), how long
	// the workload's writes took to succeed again and to get back within
	// 10 % of their throughput before it (faults.MeasureRecovery with
	// RecoveryOptions).
	Recovery        []faults.Recovery      `json:"recovery"`
	RecoveryOptions faults.RecoveryOptions `json:"recovery_options"`
	FinalWrite      FinalWrite             `json:"final_write"`
	Convergence     Convergence            `json:"convergence"`
	Dir             string                 `json:"dir"`
	HistoryPath     string                 `json:"history"`
	HTMLPath        string                 `json:"html,omitempty"`
	ResultPath      string                 `json:"result"`
	Started         time.Time              `json:"started"`
	Elapsed         time.Duration          `json:"elapsed_ns"`
	GoVersion       string                 `json:"go_version"`
	Host            string                 `json:"host"`
	// Build is what `nezha version` prints for the binary that ran the
	// check (module version, VCS revision, Go version), so that a result
	// names the commit that made it, as experiments' result.json do.
	Build buildinfo.Info `json:"build"`
}

// Interrupted is the verdict of a run whose context was cancelled.
const Interrupted = "interrupted"

// Run checks one system: it starts a fresh cluster under o.Out on
// o.Backend whose peer links can be cut (faults.Net: through the nodes'
// agents, or for etcd on the local backend through HTTP proxies here),
// runs the workload (its clients here) and the fault
// schedule for o.Duration, heals everything, requires one final write to
// succeed and every node to reach the same state hash at the same applied
// index, tears the cluster down, and checks the history with Porcupine.
// It writes o.Out/config.json (the options, before it starts),
// o.Out/history.json, o.Out/result.json and, unless the history is
// linearizable, o.Out/check.html. o.Out must not hold a run already.
//
// Bad options are a *cmdline.UsageError. A run that could not be carried
// out returns an error; a run that was carried out returns a Result, OK or
// not (and ctx.Err() if ctx ended, after healing and tearing down).
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	sched, err := faults.NewSchedule(o.Schedule)
	if err != nil {
		return nil, err
	}
	if o.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		o.Binary = exe
	}
	if !cluster.External(o.System) { // cluster.Up finds an external system's binary
		if err := checkSystem(o.Binary, o.System); err != nil {
			return nil, err
		}
	}
	dir, err := filepath.Abs(o.Out)
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"cluster", "result.json", "history.json"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return nil, cmdline.Usagef("output directory %s already holds a run (%s); choose another -out", o.Out, name)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, cmdline.Usagef("output directory %s: %v", o.Out, err)
	}
	host, _ := os.Hostname()
	res := &Result{
		Options: o, NodeFlags: o.NodeArgs(), Schedule: sched, Dir: dir,
		HistoryPath: filepath.Join(dir, "history.json"), ResultPath: filepath.Join(dir, "result.json"),
		Started: time.Now(), GoVersion: runtime.Version(), Host: host, Build: buildinfo.Read(),
	}
	if err := writeJSON(filepath.Join(dir, "config.json"), res); err != nil {
		return nil, err
	}
	logf("check: system %s, nemeses %s, read mode %s, seed %d, %d clients, %d nodes, duration %v, tick %v; output in %s",
		o.System, nemesisList(o.Nemeses), o.ReadMode, o.Seed, o.Clients, o.Nodes, o.Duration, o.Tick, dir)
	for _, st := range sched.Steps {
		logf("schedule: step %d %s at %v for %v", st.Index, st.Nemesis, st.At, st.Hold)
	}

	network, spec, leader, err := startCluster(ctx, o, filepath.Join(dir, "cluster"), logf)
	if err != nil {
		return nil, err
	}
	clusterDir := spec.Dir
	defer network.Close()
	local := spec.BackendName() == cluster.BackendLocal
	downed := false
	down := func() {
		if downed {
			return
		}
		downed = true
		purge := false
		if !local {
			// The nodes' files are in containers or on other hosts: keep
			// their logs here, and remove the rest unless asked not to.
			saveLogs(spec, filepath.Join(dir, "nodes"), logf)
			purge = !o.KeepData
		}
		if err := spec.Down(purge); err != nil {
			logf("cluster down: %v", err)
		}
	}
	defer down()
	res.Backend, res.LinkMechanism, res.Partitions = spec.BackendName(), network.Mechanism(), network.Describe()
	logf("cluster of %d %s nodes up in %s (backend %s), leader %d; partitions: %s", o.Nodes, cluster.Label(o.System), clusterDir, res.Backend, leader, res.Partitions)
	if err := writeJSON(filepath.Join(dir, "config.json"), res); err != nil {
		return nil, err
	}

	start := time.Now()
	rec := NewRecorder(start)
	env := &faults.Env{Cluster: spec, Net: network, Start: start, Logf: logf, DiskFaults: faults.NeedsDiskFaults(o.Nemeses)}
	// The workload's clients are pinned to the nodes of the start: the
	// schedule's goroutine may change spec.Nodes (the membership nemesis).
	startNodes := slices.Clone(spec.Nodes)
	scheduleDone := make(chan []faults.Event, 1)
	go func() { scheduleDone <- sched.Run(ctx, env) }()
	wl := &workload{o: o, rec: rec, keys: Keys(o.Keys), groups: ScanGroups(Keys(o.Keys), o.ScanGroup), until: start.Add(o.Duration)}
	werr := wl.run(ctx, spec, startNodes)
	res.Events = <-scheduleDone
	workEnd := time.Duration(rec.Now())
	logf("workload done after %v: %d operations", workEnd.Round(time.Millisecond), len(rec.Ops()))
	if werr != nil {
		return nil, werr
	}

	// The membership nemesis changes the members; cluster.json (saved on
	// every change) is the final membership the last steps check.
	final, err := cluster.Load(clusterDir)
	if err != nil {
		return nil, fmt.Errorf("reload the final membership: %w", err)
	}
	spec.Nodes = final.Nodes // spec keeps Detach false: the nodes die with this process
	interrupted := ctx.Err() != nil
	if !interrupted {
		res.FinalWrite = finalWrite(ctx, spec, rec, wl.keys, logf)
		if res.FinalWrite.OK {
			res.Convergence = Converge(ctx, spec, 30*time.Second)
		} else {
			res.Convergence.Error = "not checked: the final write failed"
		}
		logf("final write ok=%v (%d attempts), convergence ok=%v %s", res.FinalWrite.OK, res.FinalWrite.Attempts, res.Convergence.OK, res.Convergence.Error)
		interrupted = ctx.Err() != nil
	}
	end := time.Duration(rec.Now())
	down()
	for _, n := range spec.Nodes {
		log := n.Log
		if !local {
			log = savedLog(filepath.Join(dir, "nodes"), n.ID)
		}
		if strings.Contains(readFile(log), "panic:") {
			res.Failures = append(res.Failures, fmt.Sprintf("node %d panicked (see %s)", n.ID, log))
		}
	}

	ops := rec.Ops()
	res.Ops = countOps(ops)
	if res.Ops.Total > 0 {
		res.Availability = float64(res.Ops.OK) / float64(res.Ops.Total)
	}
	res.Windows = faults.Windows(res.Events, end)
	res.RecoveryOptions = faults.DefaultRecoveryOptions()
	res.Recovery = recovery(ops, res.Windows, workEnd, res.RecoveryOptions)
	if err := writeJSON(res.HistoryPath, ops); err != nil {
		return nil, err
	}
	for _, e := range res.Events {
		if e.Error != "" {
			res.Failures = append(res.Failures, fmt.Sprintf("nemesis %s step %d %s failed: %s", e.Nemesis, e.Step, e.Action, e.Error))
		}
	}

	if interrupted {
		res.Verdict = Interrupted
		res.Failures = append(res.Failures, "interrupted: faults healed, cluster torn down, history saved unchecked")
		res.Elapsed = time.Since(res.Started)
		_ = writeJSON(res.ResultPath, res)
		return res, ctx.Err()
	}

	logf("checking %d operations with Porcupine (timeout %v)", len(ops), o.CheckTimeout)
	res.Check = Check(ops, wl.keys, o.CheckTimeout)
	res.Verdict = res.Check.Verdict
	res.Check.Anomalies = SelectAnomalies(res.Check.Anomalies, res.Windows, 10)
	logf("verdict: %s (%d operations checked in %d partitions, %v; %d ambiguous puts dropped as unobserved, %d closed at their first observation)",
		res.Verdict, res.Check.Operations, res.Check.Partitions, res.Check.Elapsed.Round(time.Millisecond),
		res.Check.Patch.DroppedUnobserved, res.Check.Patch.Closed)
	if res.Verdict != Linearizable {
		res.Failures = append(res.Failures, "history is "+res.Verdict)
		res.HTMLPath = filepath.Join(dir, "check.html")
		extra := []porcupine.Annotation{
			{Tag: "run", Start: 0, End: int64(workEnd), Description: "workload", BackgroundColor: "#e0ecff"},
			{Tag: "run", Start: int64(workEnd), End: int64(end), Description: "healed: final write and reads", BackgroundColor: "#dff5df"},
		}
		if err := res.Check.Visualize(res.HTMLPath, res.Windows, extra); err != nil {
			res.Failures = append(res.Failures, "visualization: "+err.Error())
			res.HTMLPath = ""
		} else {
			logf("visualization: %s", res.HTMLPath)
		}
	}
	if !res.FinalWrite.OK {
		res.Failures = append(res.Failures, "the final write after healing did not succeed: "+res.FinalWrite.Error)
	}
	if !res.Convergence.OK {
		res.Failures = append(res.Failures, "nodes did not converge: "+res.Convergence.Error)
	}
	res.OK = len(res.Failures) == 0 && res.Verdict == Linearizable
	if res.OK && !o.KeepData && local {
		for _, n := range spec.Nodes {
			_ = os.RemoveAll(n.Data)
		}
	}
	res.Elapsed = time.Since(res.Started)
	if err := writeJSON(res.ResultPath, res); err != nil {
		return nil, err
	}
	return res, nil
}

// startCluster starts the run's cluster in dir on o.Backend, with the
// network its partitions cut: the agents' links (faults.NewNet), or for
// etcd on the local backend (one loopback: no packet filter, and etcd's
// members dial their peers themselves) HTTP proxies in this process
// (faults.NewHTTPNet). On the local backend the nodes' ports are chosen
// free and released before the nodes bind them, so another process may
// take one in between: it starts again (at most three times) if that
// happens.
func startCluster(ctx context.Context, o Options, dir string, logf func(string, ...any)) (*faults.Net, *cluster.Spec, uint64, error) {
	httpNet := cluster.External(o.System) && (o.Backend.Name == "" || o.Backend.Name == cluster.BackendLocal)
	for attempt := 1; ; attempt++ {
		up := cluster.UpOptions{Dir: dir, System: o.System, Nodes: o.Nodes, Binary: o.Binary, Backend: o.Backend,
			ExtraArgs: o.NodeArgs(), Links: !httpNet, ReadyTimeout: 30 * time.Second}
		var network *faults.Net
		if httpNet {
			network = faults.NewHTTPNet(faults.EtcdSenderHeader, faults.EtcdReceiverHeader)
			if err := network.Reserve(o.Nodes); err != nil {
				network.Close()
				return nil, nil, 0, err
			}
			up.NodeArgs = network.NodeArgs
		}
		spec, leader, err := cluster.Up(ctx, up)
		if err == nil && !httpNet {
			network, err = faults.NewNet(ctx, spec)
			if err != nil {
				_ = spec.Down(spec.BackendName() != cluster.BackendLocal)
				return nil, nil, 0, fmt.Errorf("the cluster's peer links: %w", err)
			}
		}
		if err == nil {
			return network, spec, leader, nil
		}
		if network != nil {
			network.Close()
			if nerr := network.Err(); nerr != nil {
				return nil, nil, 0, fmt.Errorf("peer link proxies: %w", nerr)
			}
		}
		if attempt < 3 && ctx.Err() == nil && strings.Contains(err.Error(), "address already in use") {
			logf("cluster start failed on a port taken in between (%v); starting again", firstLine(err))
			continue
		}
		return nil, nil, 0, fmt.Errorf("start the cluster: %w", err)
	}
}

// saveLogs copies the end of every node's log (what its agent returns, up
// to a MiB) to dir/node<ID>.log (savedLog), before the cluster is removed.
func saveLogs(spec *cluster.Spec, dir string, logf func(string, ...any)) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		logf("node logs: %v", err)
		return
	}
	for i := range spec.Nodes {
		n := &spec.Nodes[i]
		if err := os.WriteFile(savedLog(dir, n.ID), []byte(spec.NodeTail(n, math.MaxInt32)+"\n"), 0o644); err != nil {
			logf("node %d's log: %v", n.ID, err)
		}
	}
}

// savedLog is node id's log copied by saveLogs.
func savedLog(dir string, id uint64) string { return filepath.Join(dir, fmt.Sprintf("node%d.log", id)) }

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

func nemesisList(ns []string) string {
	if len(ns) == 0 {
		return "none"
	}
	return strings.Join(ns, ",")
}

// checkSystem asks the binary whether it knows the system (`serve -system
// S -h` exits 0 if it does, 2 if not), so that a typo is a usage error
// rather than a cluster that fails to start.
func checkSystem(binary, system string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "serve", "-system", system, "-h")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = nil, &stderr
	err := cmd.Run()
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 2 {
		msg := strings.TrimSpace(stderr.String())
		msg = strings.TrimPrefix(msg, "nezha: ")
		msg = strings.TrimPrefix(msg, "serve: ")
		return cmdline.Usagef("-system %s: %s", system, msg)
	}
	return fmt.Errorf("run %s serve -system %s -h: %v: %s", binary, system, err, strings.TrimSpace(stderr.String()))
}

// finalWrite writes one value after healing, through any node, retrying
// for up to 30 s; every attempt is recorded. Then it reads every key once
// (recorded too), so that the history ends with the cluster's final state.
func finalWrite(ctx context.Context, spec *cluster.Spec, rec *Recorder, keys []string, logf func(string, ...any)) FinalWrite {
	fw := FinalWrite{Key: keys[0]}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := spec.WaitLeader(wctx, 30*time.Second); err != nil {
		fw.Error = "no leader after healing: " + err.Error()
		return fw
	}
	c, err := client.New(spec.ClientConfig())
	if err != nil {
		fw.Error = err.Error()
		return fw
	}
	defer c.Close()
	rc := rec.Client(c, -1, 0)
	for wctx.Err() == nil {
		fw.Attempts++
		fw.Value = fmt.Sprintf("final-%d", fw.Attempts)
		actx, acancel := context.WithTimeout(wctx, 5*time.Second)
		err := rc.Put(actx, fw.Key, []byte(fw.Value))
		acancel()
		if err == nil {
			fw.OK, fw.Error = true, ""
			break
		}
		fw.Error = err.Error()
		logf("final write attempt %d: %v", fw.Attempts, err)
		select {
		case <-wctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	if !fw.OK {
		return fw
	}
	ops := rec.Ops()
	if last := ops[len(ops)-1]; last.Input.Value == fw.Value {
		fw.Index = last.Index
	}
	for _, k := range keys {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		_ = rc.Get(rctx, k)
		rcancel()
	}
	return fw
}

// Converge waits (up to timeout) until every node reports the same state hash at the same
// applied index (and state hash index). A node's state hash reads every value it holds
// (gigabytes in the paper profile's crash campaign), so each node's answer may take the
// rest of timeout (at least 5 s).
func Converge(ctx context.Context, spec *cluster.Spec, timeout time.Duration) Convergence {
	begin := time.Now()
	c, err := client.New(spec.ClientConfig())
	if err != nil {
		return Convergence{Error: err.Error()}
	}
	defer c.Close()
	deadline := time.Now().Add(timeout)
	var cv Convergence
	for {
		cv = Convergence{}
		for _, n := range spec.Nodes {
			sctx, cancel := context.WithTimeout(ctx, max(5*time.Second, time.Until(deadline)))
			st, err := c.Status(sctx, n.Address, true)
			cancel()
			ns := NodeState{ID: n.ID}
			if err != nil {
				ns.Error = err.Error()
			} else {
				ns.AppliedIndex = st.Header.AppliedIndex
				ns.StateHash = fmt.Sprintf("%x", st.StateHash)
				ns.StateHashIndex = st.StateHashIndex
			}
			cv.Nodes = append(cv.Nodes, ns)
		}
		cv.OK, cv.Error = sameState(cv.Nodes)
		if cv.OK || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	cv.Elapsed = time.Since(begin)
	return cv
}

func sameState(ns []NodeState) (bool, string) {
	var parts []string
	ok := len(ns) > 0
	for _, n := range ns {
		if n.Error != "" {
			ok = false
			parts = append(parts, fmt.Sprintf("node %d: %s", n.ID, n.Error))
			continue
		}
		parts = append(parts, fmt.Sprintf("node %d applied %d hash %.16s at %d", n.ID, n.AppliedIndex, n.StateHash, n.StateHashIndex))
		f := ns[0]
		if n.AppliedIndex != f.AppliedIndex || n.StateHash != f.StateHash || n.StateHashIndex != f.StateHashIndex {
			ok = false
		}
		if n.StateHash != "" && n.StateHashIndex != n.AppliedIndex {
			ok = false
		}
	}
	if ok {
		if ns[0].StateHash == "" {
			return true, "same applied index; the system reports no state hash"
		}
		return true, ""
	}
	return false, strings.Join(parts, "; ")
}

// recovery measures the recovery after each fault window from the
// workload's acknowledged writes (the final phase's left out), up to the
// end of the workload.
func recovery(ops []Op, windows []faults.Window, workEnd time.Duration, o faults.RecoveryOptions) []faults.Recovery {
	var acks []faults.Ack
	for _, op := range ops {
		if op.Worker >= 0 && op.Status == StatusOK && (op.Input.Kind == OpPut || op.Input.Kind == OpDelete) {
			acks = append(acks, faults.Ack{Sent: time.Duration(op.Call), Acked: time.Duration(op.Return)})
		}
	}
	var at []time.Duration
	for _, w := range windows {
		at = append(at, w.Start)
	}
	return faults.MeasureRecovery(acks, 0, workEnd, at, o)
}

func countOps(ops []Op) OpCounts {
	c := OpCounts{Total: len(ops), ByKind: map[string]int{}}
	for _, op := range ops {
		c.ByKind[op.Input.Kind]++
		switch op.Status {
		case StatusOK:
			c.OK++
		case StatusAmbiguous:
			c.Ambiguous++
		default:
			c.Failed++
		}
	}
	return c
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
