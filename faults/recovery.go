package faults

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/nezha-harness/nezha/internal/cmdline"
)

// Recovery from a fault, measured on the acknowledged writes of the load
// that ran through it (docs/latency.md, "Recovery after a fault"): how
// long after the injection until a write sent after it is acknowledged,
// and until the write throughput is back near its level before the fault.
// The crash experiment and `nezha check` report it for every fault.

// RecoveryOptions say how recovery is measured.
type RecoveryOptions struct {
	// Before: the level before a fault is the median of the acknowledged
	// writes per second over the whole seconds of load in the Before
	// preceding its injection (seconds counted back from the injection).
	Before time.Duration `json:"before_ns"`
	// Within: throughput is back once a Window holds at least (1 -
	// Within) x the level's writes per second.
	Within float64 `json:"within"`
	// Window is the span over which throughput counts once back; Step
	// spaces the windows tried, from the moment writes were back on.
	Window time.Duration `json:"window_ns"`
	Step   time.Duration `json:"step_ns"`
}

// DefaultRecoveryOptions: the level is the median of the 5 seconds before
// the injection; back within 10 %: a second of at least 90 % of it,
// windows tried every 100 ms.
func DefaultRecoveryOptions() RecoveryOptions {
	return RecoveryOptions{Before: 5 * time.Second, Within: 0.1, Window: time.Second, Step: 100 * time.Millisecond}
}

// Validate reports every problem at once.
func (o RecoveryOptions) Validate() error {
	var errs []error
	if o.Before < time.Second {
		errs = append(errs, cmdline.Usagef("recovery: before %v: want at least one second", o.Before))
	}
	if !(o.Within >= 0 && o.Within < 1) {
		errs = append(errs, cmdline.Usagef("recovery: within %v: want a fraction in [0, 1)", o.Within))
	}
	if o.Window <= 0 || o.Step <= 0 {
		errs = append(errs, cmdline.Usagef("recovery: window %v and step %v must be positive", o.Window, o.Step))
	}
	return errors.Join(errs...)
}

// Ack is one acknowledged write: when it was sent and when it was
// acknowledged, on the fault schedule's clock (since Env.Start).
type Ack struct {
	Sent, Acked time.Duration
}

// Recovery is how the load came back after one fault.
type Recovery struct {
	// At is the injection.
	At time.Duration `json:"at_ns"`
	// LevelOpsPerSec is the level before the fault: the median
	// acknowledged writes per second of the LevelSeconds whole seconds
	// before At (RecoveryOptions.Before, those after the load's start);
	// LevelSeconds 0: no load before the fault, no level, and
	// ThroughputBack is not measured.
	LevelOpsPerSec float64 `json:"level_ops_per_sec"`
	LevelSeconds   int     `json:"level_seconds"`
	// BackOpsPerSec is what a Window must hold to count as back: (1 -
	// Within) x LevelOpsPerSec.
	BackOpsPerSec float64 `json:"back_ops_per_sec"`
	// Looked is how far after At the measurement looked: to the next
	// injection or the end of the load.
	Looked time.Duration `json:"looked_ns"`
	// WritesBack is the time from At to the acknowledgement of the first
	// write sent at or after At. WritesBackSeen false: none within Looked.
	WritesBack     time.Duration `json:"writes_back_ns"`
	WritesBackSeen bool          `json:"writes_back_seen"`
	// ThroughputBack is the time from At to the start of the first Window
	// (tried every Step from WritesBack on) that holds at least (1 -
	// Within) x LevelOpsPerSec acknowledged writes per second; it is never
	// below WritesBack. ThroughputBackSeen false: no such Window ended
	// within Looked.
	ThroughputBack     time.Duration `json:"throughput_back_ns"`
	ThroughputBackSeen bool          `json:"throughput_back_seen"`
}

// MeasureRecovery measures the recovery after each injection of
// injections from the acknowledged writes of a load that ran from
// loadStart to loadEnd. Each fault is looked at up to the next injection
// (or loadEnd). The order of acks does not matter; o must be valid.
func MeasureRecovery(acks []Ack, loadStart, loadEnd time.Duration, injections []time.Duration, o RecoveryOptions) []Recovery {
	byAck := slices.Clone(acks)
	slices.SortFunc(byAck, func(a, b Ack) int { return cmp.Compare(a.Acked, b.Acked) })
	// ackedIn counts the acknowledgements in [from, to).
	ackedIn := func(from, to time.Duration) int {
		lo := sort.Search(len(byAck), func(i int) bool { return byAck[i].Acked >= from })
		hi := sort.Search(len(byAck), func(i int) bool { return byAck[i].Acked >= to })
		return hi - lo
	}
	injs := slices.Clone(injections)
	slices.Sort(injs)
	out := make([]Recovery, 0, len(injs))
	for i, at := range injs {
		r := Recovery{At: at}
		until := loadEnd
		if i+1 < len(injs) {
			until = min(until, injs[i+1])
		}
		r.Looked = max(until-at, 0)
		var perSec []float64
		for k := time.Duration(1); k*time.Second <= o.Before; k++ {
			from := at - k*time.Second
			if from < loadStart {
				break
			}
			perSec = append(perSec, float64(ackedIn(from, from+time.Second)))
		}
		r.LevelSeconds = len(perSec)
		if len(perSec) > 0 {
			slices.Sort(perSec)
			if n := len(perSec); n%2 == 1 {
				r.LevelOpsPerSec = perSec[n/2]
			} else {
				r.LevelOpsPerSec = (perSec[n/2-1] + perSec[n/2]) / 2
			}
		}
		// The first write sent at or after the injection to be
		// acknowledged: only writes in flight at the injection can be
		// acknowledged after it and sent before it.
		for j := sort.Search(len(byAck), func(j int) bool { return byAck[j].Acked >= at }); j < len(byAck) && byAck[j].Acked <= until; j++ {
			if byAck[j].Sent >= at {
				r.WritesBack, r.WritesBackSeen = byAck[j].Acked-at, true
				break
			}
		}
		if !r.WritesBackSeen {
			r.WritesBack = r.Looked
		}
		r.ThroughputBack = r.Looked
		if r.LevelSeconds > 0 {
			r.BackOpsPerSec = (1 - o.Within) * r.LevelOpsPerSec
		}
		if r.WritesBackSeen && r.LevelSeconds > 0 {
			need := r.BackOpsPerSec * o.Window.Seconds()
			for t := at + r.WritesBack; t+o.Window <= until; t += o.Step {
				if float64(ackedIn(t, t+o.Window)) >= need {
					r.ThroughputBack, r.ThroughputBackSeen = t-at, true
					break
				}
			}
		}
		out = append(out, r)
	}
	return out
}

// Text says how the writes came back, e.g. "writes back after 1.502s,
// throughput back to 90.0 writes/s (level before 100.0) after 3.402s"; a
// time not reached within the look reads "> Looked".
func (r Recovery) Text() string {
	back := func(d time.Duration, seen bool) string {
		if !seen {
			return "> " + d.Round(time.Millisecond).String()
		}
		return d.Round(time.Millisecond).String()
	}
	s := "writes back after " + back(r.WritesBack, r.WritesBackSeen)
	switch {
	case r.LevelSeconds == 0:
		return s + "; no load before the fault to compare throughput with"
	case !r.WritesBackSeen:
		return s
	}
	return s + fmt.Sprintf(", throughput back to %.1f writes/s (level before %.1f) after %s", r.BackOpsPerSec, r.LevelOpsPerSec, back(r.ThroughputBack, r.ThroughputBackSeen))
}
