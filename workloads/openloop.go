package workloads

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nezha-harness/nezha/internal/cmdline"
)

// Arrival processes of an open-loop run (-arrivals).
const (
	// ArrivalsConstant: one operation every 1/rate seconds.
	ArrivalsConstant = "constant"
	// ArrivalsPoisson: a Poisson process of the rate (exponential gaps
	// between arrivals), drawn from the seed.
	ArrivalsPoisson = "poisson"
)

// Loops of Load.Loop.
const (
	// LoopClosed: each client sends its next operation when its last one
	// is answered, so a stalled store is asked less.
	LoopClosed = "closed"
	// LoopOpen: operations arrive on a schedule whatever the answers.
	LoopOpen = "open"
)

// arrivalsStream keeps the arrival schedule's random numbers apart from
// the workload's, which derive from the same seed.
const arrivalsStream = 0x6172726976616c73 // "arrivals"

// Schedule yields the intended starts of an open-loop run's operations,
// as offsets from the run's start: rate a second, evenly spaced
// (ArrivalsConstant, the first at 0) or as a Poisson process
// (ArrivalsPoisson). The same rate, arrivals and seed give the same
// schedule.
type Schedule struct {
	rate float64
	rng  *rand.Rand // nil: constant arrivals
	n    int64
	at   float64 // seconds; Poisson arrivals
}

// NewSchedule returns the schedule of rate operations a second (> 0).
func NewSchedule(rate float64, arrivals string, seed int64) *Schedule {
	s := &Schedule{rate: rate}
	if arrivals == ArrivalsPoisson {
		s.rng = rand.New(rand.NewPCG(uint64(seed), arrivalsStream))
	}
	return s
}

// Next returns the intended start of the next operation.
func (s *Schedule) Next() time.Duration {
	if s.rng == nil {
		d := time.Duration(float64(s.n) * float64(time.Second) / s.rate)
		s.n++
		return d
	}
	s.at += s.rng.ExpFloat64() / s.rate
	return time.Duration(s.at * float64(time.Second))
}

// Arrival is one operation of an open-loop run.
type Arrival struct {
	// Seq numbers the operations from 0 in schedule order.
	Seq int64
	// Intended is when the schedule meant it to be sent.
	Intended time.Time
	// Late: it was not sent at Intended because every sender was busy
	// (see OpenLoop).
	Late bool
}

// OpenLoop offers operations at a fixed rate whatever the answers: at most
// MaxInFlight are outstanding at once (the senders), and an operation that
// finds them all busy waits for the first that frees (it is never
// dropped). Such an operation is late, and so is every operation whose
// intended start passes while the generator waits for a sender: a late
// operation is sent after its intended start because of the bound, and
// its latency from the intended start holds the wait. (A generator that is
// itself slow to wake shows in that latency too, but is not counted late.)
type OpenLoop struct {
	// Rate is the offered operations a second (> 0).
	Rate float64
	// Arrivals is ArrivalsConstant or ArrivalsPoisson; Seed draws the
	// Poisson gaps.
	Arrivals string
	Seed     int64
	// Ops ends the schedule after this many operations; MaxDuration (if
	// positive) ends it at the first intended start at or after it.
	Ops         int64
	MaxDuration time.Duration
	// MaxInFlight is the number of senders (>= 1).
	MaxInFlight int
}

// Drive runs the schedule from start: for each arrival, once a sender is
// free, it calls do(sender, arrival) on a goroutine of its own; sender (0
// .. MaxInFlight-1) is the caller's exclusively until do returns, so
// per-sender state needs no lock. Drive stops scheduling when ctx ends and
// returns when every call has returned. live, if not nil, restarts its
// stall clock whenever an operation is sent while none was outstanding (a
// low rate leaves the store idle between operations, which is no stall).
func (o OpenLoop) Drive(ctx context.Context, start time.Time, live *Live, do func(sender int, a Arrival)) {
	free := make(chan int, o.MaxInFlight)
	for i := range o.MaxInFlight {
		free <- i
	}
	var (
		wg       sync.WaitGroup
		inFlight atomic.Int64
		// waitedUntil is when the generator last got a sender after
		// waiting for one: operations due before it are late.
		waitedUntil time.Time
	)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	sched := NewSchedule(o.Rate, o.Arrivals, o.Seed)
	for seq := int64(0); seq < o.Ops && ctx.Err() == nil; seq++ {
		off := sched.Next()
		if o.MaxDuration > 0 && off >= o.MaxDuration {
			break
		}
		due := start.Add(off)
		if d := time.Until(due); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				wg.Wait()
				return
			}
		}
		late := due.Before(waitedUntil)
		var id int
		select {
		case id = <-free:
		default:
			late = true
			select {
			case id = <-free:
			case <-ctx.Done():
				wg.Wait()
				return
			}
			waitedUntil = time.Now()
		}
		if inFlight.Add(1) == 1 {
			live.resume(time.Now())
		}
		wg.Add(1)
		go func(id int, a Arrival) {
			defer wg.Done()
			do(id, a)
			inFlight.Add(-1)
			free <- id
		}(id, Arrival{Seq: seq, Intended: due, Late: late})
	}
	wg.Wait()
}

// OpenLoad is the Load of an open loop at rate (from source) with
// arrivals drawn from seed, maxInFlight senders and a warm-up.
func OpenLoad(rate float64, source, arrivals string, seed int64, maxInFlight int, warmup time.Duration) Load {
	if arrivals == "" {
		arrivals = ArrivalsConstant
	}
	return Load{Loop: LoopOpen, RateOpsPerSec: rate, RateSource: source, Arrivals: arrivals, Seed: &seed,
		MaxInFlight: maxInFlight, WarmupSec: warmup.Seconds()}
}

func validArrivals(a string) bool { return a == "" || a == ArrivalsConstant || a == ArrivalsPoisson }

// ValidateOpenLoop checks the open-loop settings shared by bench and ycsb:
// a rate (0: closed loop), an arrival process and a warm-up.
func ValidateOpenLoop(rate float64, arrivals string, warmup time.Duration) []error {
	var errs []error
	if rate < 0 || math.IsNaN(rate) || math.IsInf(rate, 0) {
		errs = append(errs, cmdline.Usagef("-rate %v: want a finite number of operations a second (> 0), or none for a closed loop", rate))
	}
	if !validArrivals(arrivals) {
		errs = append(errs, cmdline.Usagef("-arrivals %q: want %s or %s", arrivals, ArrivalsConstant, ArrivalsPoisson))
	}
	if warmup < 0 {
		errs = append(errs, cmdline.Usagef("-warmup %v must not be negative", warmup))
	}
	return errs
}

// ParseRate reads a -rate argument: empty (a closed loop: 0), a number of
// operations a second ("5000"), or a fraction of the throughput of an
// earlier closed-loop run, "FRACTIONx:FILE" ("0.7x:results/put/summary.json";
// FILE is a summary.json or -json file of bench or ycsb, or the -out
// directory holding one), which is its peak. source says where a fraction
// came from (empty for a plain number).
func ParseRate(spec string) (opsPerSec float64, source string, err error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return 0, "", nil
	}
	frac, file, isFrac := strings.Cut(spec, "x:")
	if !isFrac {
		if strings.HasSuffix(spec, "x") {
			return 0, "", cmdline.Usagef("-rate %s: a fraction needs the closed-loop run it is a fraction of: -rate %s:DIR/summary.json", spec, spec)
		}
		r, perr := strconv.ParseFloat(spec, 64)
		if perr != nil || !(r > 0) || math.IsInf(r, 1) {
			return 0, "", cmdline.Usagef("-rate %q: want operations a second (> 0), or FRACTIONx:SUMMARY.json", spec)
		}
		return r, "", nil
	}
	f, perr := strconv.ParseFloat(frac, 64)
	if perr != nil || !(f > 0) || math.IsInf(f, 1) {
		return 0, "", cmdline.Usagef("-rate %s: the fraction %q is not a number > 0", spec, frac)
	}
	if st, serr := os.Stat(file); serr == nil && st.IsDir() {
		file = filepath.Join(file, "summary.json")
	}
	b, rerr := os.ReadFile(file)
	if rerr != nil {
		return 0, "", cmdline.Usagef("-rate %s: %v", spec, rerr)
	}
	var peak struct {
		OpsPerSec float64 `json:"ops_per_sec"`
		Stopped   string  `json:"stopped"`
		Load      *Load   `json:"load"`
	}
	if jerr := json.Unmarshal(b, &peak); jerr != nil {
		return 0, "", cmdline.Usagef("-rate %s: %s is not a summary of bench or ycsb: %v", spec, file, jerr)
	}
	switch {
	case peak.Load != nil && peak.Load.Loop == LoopOpen:
		return 0, "", cmdline.Usagef("-rate %s: %s is of an open-loop run: its throughput is the rate it was offered, not a peak", spec, file)
	case !(peak.OpsPerSec > 0):
		return 0, "", cmdline.Usagef("-rate %s: %s has no throughput (ops_per_sec)", spec, file)
	case peak.Stopped != "":
		return 0, "", cmdline.Usagef("-rate %s: the run of %s was %s: its throughput is no peak", spec, file, peak.Stopped)
	}
	return f * peak.OpsPerSec, strconv.FormatFloat(f, 'g', -1, 64) + " x the " +
		strconv.FormatFloat(peak.OpsPerSec, 'f', 1, 64) + " ops/s of " + file, nil
}
