// Package ycsb runs `nezha ycsb load|run` (flags in cmd/nezha/ycsb.go): the
// YCSB core workload of go-ycsb
// (v1.0.3, used as a library) against any system through the harness's Go
// client.
//
// Property files: -P names a file on disk, or one of the upstream YCSB
// files shipped in ycsb/workloads (workloada..workloadf, embedded in the
// binary): `-P workloads/workloada` reads that path if it exists and the
// shipped copy otherwise (see ReadPropertyFile). The shipped files are
// upstream's, not go-ycsb's (which make A and F uniform and give E
// maxscanlength=1). workload= may name go-ycsb's "core" or upstream's Java
// class (site.ycsb.workloads.CoreWorkload).
//
// Every property the run uses is checked before any load starts (a bad
// value, a zero or negative count, a record over the servers' value limit
// is a usage error, exit 2): go-ycsb itself would misread a malformed
// number as its default, or exit mid-run.
//
// Records map onto the store as one key per record (table/key) and one
// value holding all fields (see EncodeRecord and DB). go-ycsb seeds every
// worker from the clock: a YCSB run cannot be repeated operation for
// operation (its run record says so).
//
// With a rate (Options.Rate) a phase runs as an open loop
// (workloads.OpenLoop) instead of go-ycsb's closed-loop threads, and every
// operation is also timed from its intended start.
//
// go-ycsb's measurements are process-global: run one Run at a time.
package ycsb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/magiconair/properties"
	gclient "github.com/pingcap/go-ycsb/pkg/client"
	"github.com/pingcap/go-ycsb/pkg/measurement"
	"github.com/pingcap/go-ycsb/pkg/prop"
	_ "github.com/pingcap/go-ycsb/pkg/workload" // registers the core workload
	gycsb "github.com/pingcap/go-ycsb/pkg/ycsb"

	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/systems"
	"github.com/nezha-harness/nezha/workloads"
)

// Options configures Run.
type Options struct {
	// Phase is "load" (insert the records) or "run" (the transactions).
	Phase string `json:"phase"`
	// Files are the -P property files, in order.
	Files []string `json:"property_files"`
	// Settings are the -p name=value overrides, applied after the files.
	Settings []string `json:"settings"`
	// MaxValueBytes is the servers' largest accepted value.
	MaxValueBytes int `json:"max_value_bytes"`
	// OpTimeout bounds one store call, retries included.
	OpTimeout time.Duration `json:"op_timeout_ns"`
	// StallTimeout stops the phase with a *workloads.StallError once no
	// operation got an answer from the cluster for this long
	// (-stallTimeout; 0: never).
	StallTimeout time.Duration `json:"stall_timeout_ns"`
	// Progress, if set, receives a progress bar (a terminal) or a line
	// every ProgressInterval, with errors and ambiguous writes so far.
	Progress         io.Writer     `json:"-"`
	ProgressInterval time.Duration `json:"progress_interval_ns"`
	// Output receives go-ycsb's final table (nil: os.Stdout). go-ycsb
	// writes its periodic summaries to os.Stdout itself.
	Output io.Writer `json:"-"`
	// Warn receives warnings (unused properties); nil discards them.
	Warn io.Writer `json:"-"`
	// Rate (-rate), if positive, runs the phase as an open loop (see
	// workloads.OpenLoop) instead of go-ycsb's closed-loop threads:
	// operations are due at Rate a second on a schedule of Arrivals
	// (drawn from Seed), threadcount is the most in flight, and each is
	// timed from when it was due as well as from its send. RateSource
	// says where a rate derived from a measured peak came from.
	Rate       float64 `json:"rate_ops_per_sec"`
	RateSource string  `json:"rate_source,omitempty"`
	Arrivals   string  `json:"arrivals"`
	Seed       int64   `json:"seed"`
	// Warmup (-warmup): the operations that start (open loop: are due) in
	// the first Warmup are done but left out of every result.
	Warmup time.Duration `json:"warmup_ns"`
}

// DefaultOptions returns the defaults for phase.
func DefaultOptions(phase string) Options {
	return Options{Phase: phase, MaxValueBytes: systems.DefaultMaxValueBytes, OpTimeout: time.Minute,
		StallTimeout: workloads.DefaultStallTimeout, ProgressInterval: 5 * time.Second,
		Arrivals: workloads.ArrivalsConstant, Seed: 1}
}

// Properties loads and checks the properties of o, reporting every problem
// at once; it returns the sources of the files and the warnings.
func (o *Options) Properties() (*properties.Properties, []string, []string, error) {
	var errs []error
	if o.Phase != "load" && o.Phase != "run" {
		errs = append(errs, cmdline.Usagef("phase %q: want load or run", o.Phase))
	}
	if o.MaxValueBytes < 1 {
		errs = append(errs, cmdline.Usagef("-maxValueBytes %d must be positive", o.MaxValueBytes))
	}
	if o.OpTimeout <= 0 {
		errs = append(errs, cmdline.Usagef("-timeout %v must be positive", o.OpTimeout))
	}
	if o.StallTimeout < 0 {
		errs = append(errs, cmdline.Usagef("-stallTimeout %v must not be negative", o.StallTimeout))
	}
	if o.Progress != nil && o.ProgressInterval <= 0 {
		errs = append(errs, cmdline.Usagef("-interval %v must be positive", o.ProgressInterval))
	}
	errs = append(errs, workloads.ValidateOpenLoop(o.Rate, o.Arrivals, o.Warmup)...)
	p, sources, err := LoadProperties(o.Files, o.Settings)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, nil, nil, errors.Join(errs...)
	}
	warnings, err := ValidateProperties(p, o.Phase, o.MaxValueBytes)
	if err != nil {
		return p, sources, warnings, err
	}
	target, warmup := p.GetInt64(prop.Target, 0), p.GetInt64(prop.WarmUpTime, 0)
	switch {
	case o.Rate > 0 && target > 0:
		errs = append(errs, cmdline.Usagef("-rate and target=%d: -rate offers operations open loop; target paces go-ycsb's closed-loop threads: give one", target))
	case target > 0:
		warnings = append(warnings, fmt.Sprintf("target=%d paces go-ycsb's closed-loop threads, timed from each operation's send: "+
			"a stall delays the threads' next operations, and their wait shows in no latency (coordinated omission); -rate %d runs open loop and times operations from when they were due", target, target))
	}
	if o.Rate > 0 && warmup > 0 {
		errs = append(errs, cmdline.Usagef("-rate and warmuptime=%d: an open loop leaves its warm-up out with -warmup", warmup))
	}
	return p, sources, warnings, errors.Join(errs...)
}

// load describes how o offers the operations of p.
func (o *Options) load(p *properties.Properties) workloads.Load {
	threads := int(p.GetInt64(prop.ThreadCount, 1))
	if o.Rate > 0 {
		return workloads.OpenLoad(o.Rate, o.RateSource, o.Arrivals, o.Seed, threads, o.Warmup)
	}
	return workloads.Load{Loop: workloads.LoopClosed, MaxInFlight: threads, WarmupSec: o.Warmup.Seconds()}
}

// Validate reports every problem with o and its properties at once.
func (o *Options) Validate() error {
	_, _, _, err := o.Properties()
	return err
}

// Summary is the result of a YCSB phase. Its embedded Summary is TOTAL:
// one operation per YCSB operation (a read-modify-write counts once), its
// bytes the sum of the store operations'. Operations has one entry per
// operation type (READ, UPDATE, INSERT, SCAN, READ_MODIFY_WRITE; a
// READ_MODIFY_WRITE's read and update also count in READ and UPDATE, as in
// go-ycsb).
type Summary struct {
	workloads.Summary
	Phase      string                       `json:"phase"`
	Sources    []string                     `json:"property_files"`
	Properties map[string]string            `json:"properties"`
	Operations map[string]workloads.Summary `json:"operations"`
}

// Run runs one phase of the YCSB core workload against s. Cancelling ctx
// stops the workers after their current operation: Run returns what was
// done, marked workloads.StoppedInterrupted (its TOTAL's Stopped), with
// ctx's error; a stall returns it marked workloads.StoppedStalled with a
// *workloads.StallError.
func Run(ctx context.Context, s Store, o Options) (Summary, error) {
	p, sources, warnings, err := o.Properties()
	if err != nil {
		return Summary{}, err
	}
	if o.Phase == "run" {
		sctx, cancel := context.WithTimeout(ctx, o.OpTimeout)
		if w := recordShapeWarning(sctx, s, p); w != "" {
			warnings = append(warnings, w)
		}
		cancel()
	}
	if o.Warn != nil {
		for _, w := range warnings {
			fmt.Fprintln(o.Warn, "ycsb: warning:", w)
		}
	}
	out := o.Output
	if out == nil {
		out = os.Stdout
	}
	p.Set(prop.DoTransactions, strconv.FormatBool(o.Phase == "run"))
	p.Set(prop.Command, o.Phase)
	res := Summary{Phase: o.Phase, Sources: sources, Properties: p.Map()}

	// go-ycsb writes its final table to measurement.output_file or to
	// os.Stdout; route it to out through a temporary file.
	tmp := ""
	if _, ok := p.Get(prop.MeasurementRawOutputFile); !ok {
		f, err := os.CreateTemp("", "nezha-ycsb-*.txt")
		if err != nil {
			return res, err
		}
		tmp = f.Name()
		f.Close()
		defer os.Remove(tmp)
		p.Set(prop.MeasurementRawOutputFile, tmp)
	}
	measurement.InitMeasure(p)
	// Every accepted workload name is the core workload.
	wl, err := gycsb.GetWorkloadCreator("core").Create(p)
	if err != nil {
		return res, cmdline.Usagef("ycsb: workload: %v", err)
	}
	defer wl.Close()

	start := time.Now()
	measured := start.Add(o.Warmup)
	live := workloads.NewLive(start)
	db := NewDB(s, int(p.GetInt64(prop.FieldCount, prop.FieldCountDefault)), o.OpTimeout, measured, live)
	db.intervals = workloads.NewIntervals(measured)
	stallCtx, stopWatch := live.Watch(o.StallTimeout)
	db.stall = stallCtx
	rctx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	stopOnStall := context.AfterFunc(stallCtx, cancelRun)
	defer stopOnStall()
	if sec := p.GetInt64(prop.MaxExecutiontime, 0); sec > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(rctx, time.Duration(sec)*time.Second)
		defer cancel()
	}
	stopProgress := workloads.StartProgress(o.Progress, "ycsb "+o.Phase, phaseOps(p, o.Phase), live, o.ProgressInterval)
	if o.Rate > 0 {
		o.runOpen(rctx, p, wl, db, start, live)
	} else {
		gclient.NewClient(p, timed{wl}, gclient.DbWrapper{DB: db}).Run(rctx)
	}
	elapsed := max(time.Since(measured), 0)
	stalled := workloads.Stalled(stallCtx)
	stopWatch()
	stopProgress()
	measurement.Output()
	if tmp != "" {
		if b, err := os.ReadFile(tmp); err == nil {
			out.Write(b)
		}
	}

	res.Operations = db.Summaries(elapsed)
	total, ok := res.Operations[OpTotal]
	if !ok {
		total = workloads.Summarize(OpTotal, nil, elapsed)
	}
	delete(res.Operations, OpTotal)
	total.Bytes = 0
	for op, s := range res.Operations {
		if op != OpReadModifyWrite {
			total.Bytes += s.Bytes
		}
	}
	if total.DurationSec > 0 {
		total.MBPerSec = float64(total.Bytes) / 1e6 / total.DurationSec
	}
	res.Summary = total
	res.Load = o.load(p)
	for op, s := range res.Operations {
		s.Load = res.Load
		res.Operations[op] = s
	}
	switch {
	case stalled != nil:
		res.Stopped = workloads.StoppedStalled
		return res, stalled
	case ctx.Err() != nil:
		res.Stopped = workloads.StoppedInterrupted
		return res, ctx.Err()
	}
	return res, nil
}

// runOpen runs the phase as an open loop (workloads.OpenLoop) until ctx
// ends: each sender is a thread of the workload and of db (threadcount of
// them), and serves one YCSB operation at a time.
func (o *Options) runOpen(ctx context.Context, p *properties.Properties, wl gycsb.Workload, db *DB, start time.Time, live *workloads.Live) {
	n := int(p.GetInt64(prop.ThreadCount, 1))
	dbw := gclient.DbWrapper{DB: db}
	w := timed{wl}
	threads := make([]context.Context, n)
	for i := range threads {
		threads[i] = dbw.InitThread(wl.InitThread(ctx, i, n), i, n)
	}
	ol := workloads.OpenLoop{Rate: o.Rate, Arrivals: o.Arrivals, Seed: o.Seed, Ops: phaseOps(p, o.Phase), MaxInFlight: n}
	ol.Drive(ctx, start, live, func(id int, a workloads.Arrival) {
		tctx := threads[id]
		t := threadOf(tctx)
		t.arrival = &a
		if o.Phase == "run" {
			_ = w.DoTransaction(tctx, dbw) // recorded
		} else {
			_ = w.DoInsert(tctx, dbw)
		}
		t.arrival = nil
	})
	for _, tctx := range threads {
		dbw.CleanupThread(tctx)
		wl.CleanupThread(tctx)
	}
}

// recordShapeWarning compares one loaded record (the table's first, one
// Scan) with the record shape of p, the run's fieldcount and fieldlength:
// a run whose shape differs from the load's measures records of another
// size than its properties say, and its updates write records of another
// shape. It returns a warning, or "" if the shapes agree.
func recordShapeWarning(ctx context.Context, s Store, p *properties.Properties) string {
	table := p.GetString(prop.TableName, prop.TableNameDefault)
	kvs, err := s.Scan(ctx, RowKey(table, ""), tableEnd(table), 1)
	if err != nil {
		return fmt.Sprintf("could not read a loaded record of table %s to compare its shape with this run's fieldcount and fieldlength: %v", table, err)
	}
	if len(kvs) == 0 {
		return fmt.Sprintf("table %s holds no record: run `ycsb load` with the same properties first (every READ misses, every UPDATE fails)", table)
	}
	rec, err := DecodeRecord(kvs[0].Value, nil)
	if err != nil {
		return fmt.Sprintf("the record %q is not a record of `ycsb load`: %v", kvs[0].Key, err)
	}
	fc := p.GetInt64(prop.FieldCount, prop.FieldCountDefault)
	fl := p.GetInt64(prop.FieldLength, prop.FieldLengthDefault)
	constant := p.GetString(prop.FieldLengthDistribution, "constant") == "constant"
	longest, fits := 0, true
	for _, v := range rec {
		longest = max(longest, len(v))
		if int64(len(v)) > fl || constant && int64(len(v)) != fl {
			fits = false
		}
	}
	if int64(len(rec)) == fc && fits {
		return ""
	}
	return fmt.Sprintf("the loaded record %q has %d field(s) of up to %d B, but this run has fieldcount=%d fieldlength=%d: "+
		"give the run the load's fieldcount and fieldlength (-p), or it reads and updates records of another shape than it reports",
		kvs[0].Key, len(rec), longest, fc, fl)
}
