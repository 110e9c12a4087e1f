package workloads

import (
	"context"
	"errors"
	"io"
	"math"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/systems"
)

// Store is the part of the Go client (*client.Client) the workloads use.
type Store interface {
	Put(ctx context.Context, key, value []byte) (uint64, error)
	Get(ctx context.Context, key []byte) ([]byte, bool, error)
	Scan(ctx context.Context, start, end []byte, limit int) ([]systems.KeyValue, error)
}

// Common are the options every bench workload has.
type Common struct {
	// Clients is the number of closed-loop clients (-cnums); in an open
	// loop, the most operations in flight (its senders).
	Clients int `json:"clients"`
	// Ops is the total number of operations over all clients (-dnums),
	// the warm-up's included.
	Ops int64 `json:"ops"`
	// MaxDuration (-duration) ends the run once it has lasted this long
	// (warm-up included), after the operations in flight, even if fewer
	// than Ops were done; the summary counts what was done (0: no limit).
	// An open loop sends no operation due at or after it.
	MaxDuration time.Duration `json:"max_duration_ns"`
	// Rate (-rate), if positive, makes the run an open loop: operations
	// are due at Rate a second on a schedule of Arrivals, whatever the
	// answers, and each is timed from when it was due as well as from its
	// send (see OpenLoop). 0: closed loop. RateSource says where a rate
	// derived from a measured peak came from (see ParseRate).
	Rate       float64 `json:"rate_ops_per_sec"`
	RateSource string  `json:"rate_source,omitempty"`
	// Arrivals (-arrivals) is ArrivalsConstant (also "") or
	// ArrivalsPoisson, drawn from Seed.
	Arrivals string `json:"arrivals"`
	// Warmup (-warmup): the operations that start (open loop: are due) in
	// the first Warmup of the run are done but left out of every result.
	Warmup time.Duration `json:"warmup_ns"`
	// KeyPrefix names the keys: KeyPrefix + KeyDigits digits.
	KeyPrefix string `json:"key_prefix"`
	// Seed of every random choice; client i draws from Seed+i.
	Seed int64 `json:"seed"`
	// OpTimeout bounds one operation, retries included (each gets between
	// 0.9 and 1 times it: a client's operations share a context; see
	// opContext).
	OpTimeout time.Duration `json:"op_timeout_ns"`
	// StallTimeout stops the run with a *StallError once no operation got
	// an answer from the cluster for this long (-stallTimeout; 0: never).
	StallTimeout time.Duration `json:"stall_timeout_ns"`
	// Progress, if set, receives a progress bar (a terminal) or a line
	// every ProgressInterval.
	Progress         io.Writer     `json:"-"`
	ProgressInterval time.Duration `json:"progress_interval_ns"`
	// Raw, if set, receives the per-operation CSV (see WriteRawCSV) at
	// the end of the run.
	Raw io.Writer `json:"-"`
}

// DefaultCommon returns the defaults shared by the workloads.
func DefaultCommon() Common {
	return Common{Clients: 100, Ops: 10000, KeyPrefix: DefaultKeyPrefix, Seed: 1, OpTimeout: time.Minute,
		StallTimeout: DefaultStallTimeout, ProgressInterval: 5 * time.Second, Arrivals: ArrivalsConstant}
}

// clients is how many clients run starts: Clients, but no more than
// there are operations (a client beyond them would never run one, and
// -cnums 10000000 -dnums 10 held 7.8 GB for over a minute starting them).
func (c *Common) clients() int {
	return int(max(min(int64(c.Clients), c.Ops), 0))
}

func (c *Common) validate() []error {
	var errs []error
	if c.Clients < 1 {
		errs = append(errs, cmdline.Usagef("-cnums %d: want at least 1 client", c.Clients))
	}
	if c.Ops < 1 {
		errs = append(errs, cmdline.Usagef("-dnums %d: want at least 1 operation", c.Ops))
	}
	if c.KeyPrefix == "" {
		errs = append(errs, cmdline.Usagef("-keyprefix is empty"))
	}
	if len(c.KeyPrefix)+KeyDigits > systems.MaxKeyBytes {
		errs = append(errs, cmdline.Usagef("-keyprefix of %d bytes is too long", len(c.KeyPrefix)))
	}
	if c.OpTimeout <= 0 {
		errs = append(errs, cmdline.Usagef("-timeout %v must be positive", c.OpTimeout))
	}
	if c.MaxDuration < 0 {
		errs = append(errs, cmdline.Usagef("-duration %v must not be negative", c.MaxDuration))
	}
	if c.StallTimeout < 0 {
		errs = append(errs, cmdline.Usagef("-stallTimeout %v must not be negative", c.StallTimeout))
	}
	if c.Progress != nil && c.ProgressInterval <= 0 {
		errs = append(errs, cmdline.Usagef("-interval %v must be positive", c.ProgressInterval))
	}
	errs = append(errs, ValidateOpenLoop(c.Rate, c.Arrivals, c.Warmup)...)
	if c.MaxDuration > 0 && c.Warmup >= c.MaxDuration {
		errs = append(errs, cmdline.Usagef("-warmup %v leaves nothing of -duration %v to measure", c.Warmup, c.MaxDuration))
	}
	return errs
}

// load describes how c offers its operations.
func (c *Common) load() Load {
	if c.Rate > 0 {
		return OpenLoad(c.Rate, c.RateSource, c.Arrivals, c.Seed, c.clients(), c.Warmup)
	}
	seed := c.Seed
	return Load{Loop: LoopClosed, Seed: &seed, MaxInFlight: c.clients(), WarmupSec: c.Warmup.Seconds()}
}

// PutOptions configures RunPut: Ops unique keys, indices 0..Ops-1, each
// written once with a ValueBytes value.
type PutOptions struct {
	Common
	// ValueBytes is the size of every value (-vsize).
	ValueBytes int `json:"value_bytes"`
	// MaxValueBytes is the servers' largest accepted value (their
	// -maxValueBytes; the API does not report it).
	MaxValueBytes int `json:"max_value_bytes"`
	// Order of the writes: "random" (a seeded permutation of the indices,
	// as the paper's randwrite) or "sequential".
	Order string `json:"order"`
	// OverwriteKeys (-overwrite), if positive, makes the run overwrite:
	// each operation writes the key of an index drawn uniformly from
	// 0..OverwriteKeys-1 (each client from its own source, Seed + its
	// number), keys an earlier run wrote, instead of a new key each, so
	// that the live data stays OverwriteKeys values and the rest becomes
	// garbage for GC or compaction. Order is then unused.
	OverwriteKeys int64 `json:"overwrite_keys,omitempty"`
	// ValueKind is what values are made of (-valueKind): ValueRandom
	// (default; uniformly random bytes, which no compressor shrinks) or
	// ValueLowercase (random letters a-z, as the paper's benchmark programs
	// write; a compressor with entropy coding shrinks them to ~59 %).
	ValueKind string `json:"value_kind"`
}

// Value kinds (PutOptions.ValueKind).
const (
	ValueRandom    = "random"
	ValueLowercase = "lowercase"
)

// DefaultPutOptions: the paper's randwrite_goroutine command line
// (-cnums 100 -dnums 39062 -vsize 256000).
func DefaultPutOptions() PutOptions {
	c := DefaultCommon()
	c.Ops = 39062
	return PutOptions{Common: c, ValueBytes: 256000, MaxValueBytes: systems.DefaultMaxValueBytes, Order: "random", ValueKind: ValueRandom}
}

// Validate reports every problem at once.
func (o *PutOptions) Validate() error {
	errs := o.validate()
	switch {
	case o.OverwriteKeys < 0 || o.OverwriteKeys > MaxKeys:
		errs = append(errs, cmdline.Usagef("-overwrite %d: want 0 (new keys) or up to %d keys", o.OverwriteKeys, MaxKeys))
	case o.OverwriteKeys == 0 && o.Ops > MaxKeys:
		errs = append(errs, cmdline.Usagef("-dnums %d: the key scheme names at most %d keys", o.Ops, MaxKeys))
	}
	if o.ValueBytes < 1 {
		errs = append(errs, cmdline.Usagef("-vsize %d: want at least 1 byte", o.ValueBytes))
	}
	if o.MaxValueBytes < 1 {
		errs = append(errs, cmdline.Usagef("-maxValueBytes %d must be positive", o.MaxValueBytes))
	} else if o.ValueBytes > o.MaxValueBytes {
		errs = append(errs, cmdline.Usagef("-vsize %d is over the servers' maximum value size of %d bytes (-maxValueBytes)", o.ValueBytes, o.MaxValueBytes))
	}
	if o.Order != "random" && o.Order != "sequential" {
		errs = append(errs, cmdline.Usagef("-order %q: want random or sequential", o.Order))
	}
	if o.ValueKind != "" && o.ValueKind != ValueRandom && o.ValueKind != ValueLowercase {
		errs = append(errs, cmdline.Usagef("-valueKind %q: want %s or %s", o.ValueKind, ValueRandom, ValueLowercase))
	}
	return errors.Join(errs...)
}

// GetOptions configures RunGet: Ops GETs of keys drawn with a Zipf
// distribution over the indices 0..Keys-1, which must have been written.
type GetOptions struct {
	Common
	// Keys is the number of keys written (indices 0..Keys-1).
	Keys int64 `json:"keys"`
	// Zipf is the exponent s (> 1).
	Zipf float64 `json:"zipf"`
}

// DefaultGetOptions: the paper's zipf_read (-cnums 100 -dnums 10000, s 1.01).
func DefaultGetOptions() GetOptions {
	return GetOptions{Common: DefaultCommon(), Zipf: 1.01}
}

// Validate reports every problem at once.
func (o *GetOptions) Validate() error {
	errs := o.validate()
	errs = append(errs, validKeys(o.Keys)...)
	if !(o.Zipf > 1) || math.IsInf(o.Zipf, 1) {
		errs = append(errs, cmdline.Usagef("-zipf %v: the exponent must be a finite number > 1", o.Zipf))
	}
	return errors.Join(errs...)
}

func validKeys(n int64) []error {
	switch {
	case n < 1:
		return []error{cmdline.Usagef("-keys %d: want at least 1 written key (run bench put first)", n)}
	case n > MaxKeys:
		return []error{cmdline.Usagef("-keys %d: the key scheme names at most %d keys", n, MaxKeys)}
	}
	return nil
}

// ScanOptions configures RunScan: Ops scans of ScanSize keys, each from a
// start index drawn uniformly from 0..Keys-ScanSize, so that every scan
// lies within the written keys.
type ScanOptions struct {
	Common
	Keys     int64 `json:"keys"`
	ScanSize int   `json:"scan_size"`
}

// DefaultScanOptions: the paper's scan_pro (-cnums 1 -dnums 4); 100 keys a
// scan.
func DefaultScanOptions() ScanOptions {
	c := DefaultCommon()
	c.Clients, c.Ops = 1, 4
	return ScanOptions{Common: c, ScanSize: 100}
}

// Validate reports every problem at once.
func (o *ScanOptions) Validate() error {
	errs := o.validate()
	errs = append(errs, validKeys(o.Keys)...)
	if o.ScanSize < 1 {
		errs = append(errs, cmdline.Usagef("-scansize %d: want at least 1 key", o.ScanSize))
	} else if o.Keys >= 1 && int64(o.ScanSize) > o.Keys {
		errs = append(errs, cmdline.Usagef("-scansize %d is more than the %d written keys", o.ScanSize, o.Keys))
	}
	return errors.Join(errs...)
}

// opFunc does operation seq of client id and returns its outcome, payload
// bytes, items and error.
type opFunc func(ctx context.Context, id int, seq int64) (Outcome, int64, int64, error)

// clientFunc prepares client id's opFunc (its own random source).
type clientFunc func(id int) opFunc

// run drives c.Ops operations, or those of c.MaxDuration: by c.Clients
// closed-loop clients, or, with a c.Rate, by an open loop of at most
// c.Clients in flight. On ctx's end no operation is started any more and
// run returns the summary of what was done, marked StoppedInterrupted,
// with ctx's error; when no operation got an answer for c.StallTimeout,
// the operations in flight are cancelled and run returns the summary so
// far, marked StoppedStalled, with a *StallError. The raw CSV (c.Raw)
// holds every operation measured in either case.
func run(ctx context.Context, c Common, op string, mk clientFunc) (Summary, error) {
	start := time.Now()
	measured := start.Add(c.Warmup)
	live := NewLive(start)
	total := c.Ops
	if c.Rate > 0 && c.MaxDuration > 0 {
		total = min(total, int64(math.Ceil(c.Rate*c.MaxDuration.Seconds())))
	}
	stop := StartProgress(c.Progress, "bench "+op, total, live, c.ProgressInterval)
	stallCtx, stopWatch := live.Watch(c.StallTimeout)
	iv := NewIntervals(measured)
	recs := make([]*Recorder, c.clients())
	for id := range recs {
		recs[id] = NewRecorder(measured, c.Raw != nil, live).WithIntervals(iv)
	}
	if c.Rate > 0 {
		runOpen(ctx, stallCtx, c, op, mk, start, live, recs)
	} else {
		runClosed(ctx, stallCtx, c, op, mk, start, recs)
	}
	elapsed := max(time.Since(measured), 0)
	stalled := Stalled(stallCtx)
	stopWatch()
	stop()
	s := Summarize(op, recs, elapsed)
	s.Load = c.load()
	var err error
	switch {
	case stalled != nil:
		s.Stopped, err = StoppedStalled, stalled
	case ctx.Err() != nil:
		s.Stopped, err = StoppedInterrupted, ctx.Err()
	}
	if c.Raw != nil {
		if werr := WriteRawCSV(c.Raw, recs); werr != nil {
			return s, werr
		}
	}
	return s, err
}

// sender is the state of one closed-loop client or open-loop sender: its
// operation, and the context its operations derive from, which a stall
// cancels (one per sender, so that each operation's context does not
// register with the stall watch, which every sender shares: a lock).
type sender struct {
	do   opFunc
	wctx context.Context
	octx opContext
	rec  *Recorder
}

// senders prepares the senders of recs; stop releases them.
func senders(stallCtx context.Context, mk clientFunc, recs []*Recorder) (ss []sender, stop func()) {
	ss = make([]sender, len(recs))
	var stops []func()
	for id := range ss {
		wctx, wcancel := context.WithCancel(context.Background())
		unbind := context.AfterFunc(stallCtx, wcancel)
		stops = append(stops, func() { unbind(); wcancel() })
		ss[id] = sender{do: mk(id), wctx: wctx, rec: recs[id]}
	}
	return ss, func() {
		for i := range ss {
			ss[i].octx.stop()
			stops[i]()
		}
	}
}

// send does operation seq as sender id, due at intended, and records it.
func (s *sender) send(c *Common, op string, id int, seq int64, intended time.Time, late bool) {
	sent := time.Now()
	if intended.IsZero() {
		intended = sent
	}
	out, bytes, items, err := s.do(s.octx.get(s.wctx, sent, c.OpTimeout), id, seq)
	s.rec.RecordTiming(op, Timing{Intended: intended, Sent: sent, Done: time.Now(), Late: late}, out, bytes, items, err)
}

// runClosed is run's closed loop: each client sends its next operation
// when the last one is answered.
func runClosed(ctx, stallCtx context.Context, c Common, op string, mk clientFunc, start time.Time, recs []*Recorder) {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	ss, release := senders(stallCtx, mk, recs)
	defer release()
	for id := range ss {
		wg.Add(1)
		go func(id int, s *sender) {
			defer wg.Done()
			for ctx.Err() == nil && stallCtx.Err() == nil {
				seq := next.Add(1) - 1
				if seq >= c.Ops || c.MaxDuration > 0 && time.Since(start) >= c.MaxDuration {
					return
				}
				s.send(&c, op, id, seq, time.Time{}, false)
			}
		}(id, &ss[id])
	}
	wg.Wait()
}

// runOpen is run's open loop (OpenLoop): operation seq is due at its
// time on the schedule.
func runOpen(ctx, stallCtx context.Context, c Common, op string, mk clientFunc, start time.Time, live *Live, recs []*Recorder) {
	ss, release := senders(stallCtx, mk, recs)
	defer release()
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(stallCtx, cancel)()
	ol := OpenLoop{Rate: c.Rate, Arrivals: c.Arrivals, Seed: c.Seed, Ops: c.Ops, MaxDuration: c.MaxDuration, MaxInFlight: len(ss)}
	ol.Drive(dctx, start, live, func(id int, a Arrival) {
		ss[id].send(&c, op, id, a.Seq, a.Intended, a.Late)
	})
}

// opContext is the deadline context of one client's operations: one
// context serves every operation that starts within a tenth of the timeout
// of its creation, so that each operation does not start a timer of its
// own (on a fast path, a timer per operation was about a tenth of the load
// generator's CPU). An operation thus gets between 0.9 and 1 times the
// timeout.
type opContext struct {
	ctx     context.Context
	cancel  context.CancelFunc
	created time.Time
}

// stop releases the last context's timer.
func (o *opContext) stop() {
	if o.cancel != nil {
		o.cancel()
	}
}

// get returns the context of an operation that starts at now.
func (o *opContext) get(parent context.Context, now time.Time, timeout time.Duration) context.Context {
	if o.ctx == nil || o.ctx.Err() != nil || now.Sub(o.created) > timeout/10 {
		o.stop()
		o.ctx, o.cancel = context.WithTimeout(parent, timeout)
		o.created = now
	}
	return o.ctx
}

// ValueBuffer is the pre-generated random buffer values are cut from, so
// that the client does no per-operation work for a value: the value of
// key index i is ValueBytes bytes at an offset that depends on i.
type ValueBuffer struct {
	buf  []byte
	size int
}

// NewValueBuffer returns a buffer for size-byte values of kind
// (ValueRandom, or "" for it, or ValueLowercase) from seed.
func NewValueBuffer(size int, seed int64, kind string) *ValueBuffer {
	n := size + 1<<20
	b := make([]byte, n)
	rng := rand.New(rand.NewSource(seed))
	if kind == ValueLowercase {
		for i := range b {
			b[i] = 'a' + byte(rng.Intn(26))
		}
	} else {
		rng.Read(b)
	}
	return &ValueBuffer{buf: b, size: size}
}

// Value returns the value of key index i (shared memory: do not modify).
func (v *ValueBuffer) Value(i int64) []byte {
	span := int64(len(v.buf) - v.size + 1)
	off := (i * 4099) % span
	return v.buf[off : off+int64(v.size) : off+int64(v.size)]
}

// RunPut writes o.Ops unique keys (indices 0..Ops-1 in o.Order), or with
// o.OverwriteKeys overwrites uniformly drawn ones of those keys, with
// o.Clients closed-loop clients (an open loop with o.Rate).
func RunPut(ctx context.Context, s Store, o PutOptions) (Summary, error) {
	if err := o.Validate(); err != nil {
		return Summary{Op: "put"}, err
	}
	vb := NewValueBuffer(o.ValueBytes, o.Seed, o.ValueKind)
	put := func(ctx context.Context, i, seq int64) (Outcome, int64, int64, error) {
		// An overwrite writes another value than the key's last (the
		// value of the operation's sequence number).
		v := vb.Value(seq)
		_, err := s.Put(ctx, Key(o.KeyPrefix, i), v)
		return Classify(err), int64(len(v)), 1, err
	}
	if o.OverwriteKeys > 0 {
		return run(ctx, o.Common, "put", func(id int) opFunc {
			rng := rand.New(rand.NewSource(o.Seed + int64(id)))
			return func(ctx context.Context, _ int, seq int64) (Outcome, int64, int64, error) {
				return put(ctx, rng.Int63n(o.OverwriteKeys), seq)
			}
		})
	}
	order := Identity(o.Ops)
	if o.Order == "random" {
		order = NewPermutation(o.Ops, rand.New(rand.NewSource(o.Seed)))
	}
	return run(ctx, o.Common, "put", func(int) opFunc {
		return func(ctx context.Context, _ int, seq int64) (Outcome, int64, int64, error) {
			i := order.At(seq)
			return put(ctx, i, i)
		}
	})
}

// RunGet reads o.Ops keys drawn with a Zipf distribution over the written
// indices 0..Keys-1. A key that is not found is a Miss.
func RunGet(ctx context.Context, s Store, o GetOptions) (Summary, error) {
	if err := o.Validate(); err != nil {
		return Summary{Op: "get"}, err
	}
	perm := NewPermutation(o.Keys, rand.New(rand.NewSource(o.Seed)))
	choosers := make([]*ZipfKeys, o.clients())
	for id := range choosers {
		z, err := NewZipfKeys(rand.New(rand.NewSource(o.Seed+int64(id))), o.Zipf, o.Keys, perm)
		if err != nil {
			return Summary{Op: "get"}, cmdline.Usagef("%v", err)
		}
		choosers[id] = z
	}
	return run(ctx, o.Common, "get", func(id int) opFunc {
		z := choosers[id]
		return func(ctx context.Context, _ int, _ int64) (Outcome, int64, int64, error) {
			v, found, err := s.Get(ctx, Key(o.KeyPrefix, z.Next()))
			switch {
			case err != nil:
				return Classify(err), 0, 0, err
			case !found:
				return Miss, 0, 0, nil
			}
			return OK, int64(len(v)), 1, nil
		}
	})
}

// RunScan does o.Ops scans of o.ScanSize keys from uniformly drawn start
// indices in 0..Keys-ScanSize. A scan that returns fewer keys is a Miss.
func RunScan(ctx context.Context, s Store, o ScanOptions) (Summary, error) {
	if err := o.Validate(); err != nil {
		return Summary{Op: "scan"}, err
	}
	end := KeyEnd(o.KeyPrefix)
	starts := o.Keys - int64(o.ScanSize) + 1
	return run(ctx, o.Common, "scan", func(id int) opFunc {
		rng := rand.New(rand.NewSource(o.Seed + int64(id)))
		return func(ctx context.Context, _ int, _ int64) (Outcome, int64, int64, error) {
			kvs, err := s.Scan(ctx, Key(o.KeyPrefix, rng.Int63n(starts)), end, o.ScanSize)
			if err != nil {
				return Classify(err), 0, 0, err
			}
			var n int64
			for _, kv := range kvs {
				n += int64(len(kv.Key) + len(kv.Value))
			}
			out := OK
			if len(kvs) < o.ScanSize {
				out = Miss
			}
			return out, n, int64(len(kvs)), nil
		}
	})
}
