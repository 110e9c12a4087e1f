package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"syscall"
	"time"

	"github.com/nezha-harness/nezha/internal/cmdline"
)

// ScheduleOptions configures NewSchedule. Zero durations take the defaults
// of DefaultScheduleOptions.
type ScheduleOptions struct {
	// Nemeses to use, in turn (a seeded rotation, so that every listed
	// nemesis gets its turn before any repeats).
	Nemeses []string `json:"nemeses"`
	// Nodes is the cluster size (for ValidateNemeses).
	Nodes int `json:"nodes"`
	// Duration of the workload; every fault is healed by Duration-CoolDown.
	Duration time.Duration `json:"duration"`
	// Seed drives every choice.
	Seed int64 `json:"seed"`
	// WarmUp passes before the first injection.
	WarmUp time.Duration `json:"warm_up"`
	// CoolDown is the quiet time at the end with everything healed.
	CoolDown time.Duration `json:"cool_down"`
	// A fault is held for a time in [MinHold, MaxHold], then healed, then
	// the cluster is left alone for a time in [MinQuiet, MaxQuiet].
	MinHold  time.Duration `json:"min_hold"`
	MaxHold  time.Duration `json:"max_hold"`
	MinQuiet time.Duration `json:"min_quiet"`
	MaxQuiet time.Duration `json:"max_quiet"`
	// MaxFaults bounds the number of injections. Default 1000.
	MaxFaults int `json:"max_faults"`
}

// DefaultScheduleOptions returns the default timing: 3 s warm-up, faults
// held 3-5 s, 1-3 s of quiet between them, 2 s cool-down.
func DefaultScheduleOptions() ScheduleOptions {
	return ScheduleOptions{
		Nodes:     3,
		WarmUp:    3 * time.Second,
		CoolDown:  2 * time.Second,
		MinHold:   3 * time.Second,
		MaxHold:   5 * time.Second,
		MinQuiet:  time.Second,
		MaxQuiet:  3 * time.Second,
		MaxFaults: 1000,
	}
}

// WithDefaults returns o with its zero fields set from
// DefaultScheduleOptions.
func (o ScheduleOptions) WithDefaults() ScheduleOptions {
	o.fill()
	return o
}

func (o *ScheduleOptions) fill() {
	d := DefaultScheduleOptions()
	if o.Nodes == 0 {
		o.Nodes = d.Nodes
	}
	if o.WarmUp == 0 {
		o.WarmUp = d.WarmUp
	}
	if o.CoolDown == 0 {
		o.CoolDown = d.CoolDown
	}
	if o.MinHold == 0 {
		o.MinHold = d.MinHold
	}
	if o.MaxHold == 0 {
		o.MaxHold = d.MaxHold
	}
	if o.MinQuiet == 0 {
		o.MinQuiet = d.MinQuiet
	}
	if o.MaxQuiet == 0 {
		o.MaxQuiet = d.MaxQuiet
	}
	if o.MaxFaults == 0 {
		o.MaxFaults = d.MaxFaults
	}
}

// MinDuration is the shortest workload that fits the warm-up, one fault
// and the cool-down (the warm-up alone without nemeses).
func (o ScheduleOptions) MinDuration() time.Duration {
	o.fill()
	if len(o.Nemeses) == 0 {
		return o.WarmUp
	}
	return o.WarmUp + o.MinHold + o.CoolDown
}

// FitAllDuration is a workload long enough for every nemesis of o to be
// injected once, whatever the seed draws: the warm-up, each nemesis's
// longest hold and pause, and the cool-down.
func (o ScheduleOptions) FitAllDuration() time.Duration {
	o.fill()
	if len(o.Nemeses) == 0 {
		return o.WarmUp
	}
	return o.WarmUp + o.CoolDown + time.Duration(len(o.Nemeses))*(o.MaxHold+o.MaxQuiet)
}

// Validate reports every problem at once, as *cmdline.UsageError values.
func (o ScheduleOptions) Validate() error {
	o.fill()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, cmdline.Usagef(format, args...)) }
	if err := ValidateNemeses(o.Nemeses, o.Nodes); err != nil {
		errs = append(errs, err)
	}
	if o.Duration <= 0 {
		bad("-duration %v must be positive", o.Duration)
	} else if min := o.MinDuration(); o.Duration < min {
		if len(o.Nemeses) == 0 {
			bad("-duration %v is below the warm-up of %v", o.Duration, o.WarmUp)
		} else {
			bad("-duration %v is below the warm-up (%v) plus one fault (%v) and the cool-down (%v): at least %v",
				o.Duration, o.WarmUp, o.MinHold, o.CoolDown, min)
		}
	}
	if o.MinHold <= 0 || o.MaxHold < o.MinHold {
		bad("fault hold range [%v, %v] is empty", o.MinHold, o.MaxHold)
	}
	if o.MinQuiet < 0 || o.MaxQuiet < o.MinQuiet {
		bad("quiet range [%v, %v] is empty", o.MinQuiet, o.MaxQuiet)
	}
	if o.WarmUp < 0 || o.CoolDown < 0 {
		bad("warm-up %v and cool-down %v must not be negative", o.WarmUp, o.CoolDown)
	}
	if o.MaxFaults < 0 {
		bad("max faults %d must not be negative", o.MaxFaults)
	}
	return errors.Join(errs...)
}

// Step is one fault of a schedule: inject Nemesis at At (from the start of
// the workload), heal it Hold later. Pick is the seeded random number the
// nemesis chooses its target with (node, halves, direction, latency).
type Step struct {
	Index   int           `json:"index"`
	Nemesis string        `json:"nemesis"`
	At      time.Duration `json:"at"`
	Hold    time.Duration `json:"hold"`
	Pick    uint64        `json:"pick"`
}

// Schedule is a seeded plan of faults, one at a time.
type Schedule struct {
	Options ScheduleOptions `json:"options"`
	Steps   []Step          `json:"steps"`
}

// NewSchedule plans the faults: the same options and seed give the same
// schedule.
func NewSchedule(o ScheduleOptions) (*Schedule, error) {
	o.fill()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	s := &Schedule{Options: o}
	if len(o.Nemeses) == 0 {
		return s, nil
	}
	rng := rand.New(rand.NewSource(o.Seed))
	between := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		// Whole milliseconds keep schedules readable.
		return lo + time.Duration(rng.Int63n(int64((hi-lo)/time.Millisecond)+1))*time.Millisecond
	}
	order := append([]string(nil), o.Nemeses...)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	end := o.Duration - o.CoolDown
	t := o.WarmUp
	for i := 0; i < o.MaxFaults; i++ {
		hold := between(o.MinHold, o.MaxHold)
		if t+hold > end {
			if t+o.MinHold > end {
				break
			}
			hold = end - t
		}
		s.Steps = append(s.Steps, Step{Index: i, Nemesis: order[i%len(order)], At: t, Hold: hold, Pick: rng.Uint64()})
		t += hold + between(o.MinQuiet, o.MaxQuiet)
	}
	if len(s.Steps) < len(order) {
		// Say so rather than leave nemeses out silently.
		need := o.FitAllDuration()
		return nil, cmdline.Usagef("-duration %v fits %d of the %d nemeses (%s): each needs up to %v with its pause; use -duration %v or more",
			o.Duration, len(s.Steps), len(order), strings.Join(o.Nemeses, ","), o.MaxHold+o.MaxQuiet, need.Round(time.Second))
	}
	return s, nil
}

// Event is one injection or heal, as it happened.
type Event struct {
	// Time since Env.Start (monotonic clock), in nanoseconds in JSON.
	Time    time.Duration `json:"time_ns"`
	Wall    time.Time     `json:"wall"`
	Step    int           `json:"step"`
	Nemesis string        `json:"nemesis"`
	// Action is "inject", "heal", "heal-all" (the final sweep), or "skip"
	// (a step that came too late to hold its fault: Schedule.HealAt).
	Action string   `json:"action"`
	Nodes  []uint64 `json:"nodes,omitempty"`
	Detail string   `json:"detail,omitempty"`
	Error  string   `json:"error,omitempty"`
}

// Window is one fault from injection to heal, for annotations.
type Window struct {
	Step    int           `json:"step"`
	Nemesis string        `json:"nemesis"`
	Start   time.Duration `json:"start_ns"`
	End     time.Duration `json:"end_ns"`
	Nodes   []uint64      `json:"nodes,omitempty"`
	Detail  string        `json:"detail,omitempty"`
}

// Windows pairs the inject and heal events of a run. A fault never healed
// by its own heal event ends at the next heal-all event, or at end.
func Windows(events []Event, end time.Duration) []Window {
	var out []Window
	open := map[int]int{} // step -> index in out
	for _, e := range events {
		switch e.Action {
		case "inject":
			if e.Error != "" {
				continue
			}
			open[e.Step] = len(out)
			out = append(out, Window{Step: e.Step, Nemesis: e.Nemesis, Start: e.Time, End: end, Nodes: e.Nodes, Detail: e.Detail})
		case "heal":
			if i, ok := open[e.Step]; ok {
				out[i].End = e.Time
				delete(open, e.Step)
			}
		case "heal-all":
			for s, i := range open {
				out[i].End = e.Time
				delete(open, s)
			}
		}
	}
	return out
}

// Run carries out the schedule on env: it waits for each step's time,
// injects, waits for the hold, heals; a step reached late keeps its hold
// or is skipped (HealAt). It returns when the schedule is done
// or ctx ends, always after healing everything (HealAll), and records every
// injection and heal with its time. Faults that cannot be injected are
// recorded with their error and skipped.
func (s *Schedule) Run(ctx context.Context, env *Env) (events []Event) {
	// events is the named result: the deferred final heal and heal-all
	// below append to what the caller receives.
	record := func(e Event) {
		e.Time, e.Wall = time.Since(env.Start), time.Now()
		events = append(events, e)
		msg := fmt.Sprintf("nemesis %s step %d %s at %v", e.Nemesis, e.Step, e.Action, e.Time.Round(time.Millisecond))
		if e.Detail != "" {
			msg += ": " + e.Detail
		}
		if e.Error != "" {
			msg += ": ERROR " + e.Error
		}
		env.logf("%s", msg)
	}
	var pending *fault
	var pendingStep Step
	heal := func() {
		if pending == nil {
			return
		}
		err := pending.heal()
		e := Event{Step: pendingStep.Index, Nemesis: pendingStep.Nemesis, Action: "heal", Nodes: pending.nodes}
		if err != nil {
			e.Error = err.Error()
		}
		record(e)
		pending = nil
	}
	defer func() {
		heal()
		err := HealAll(env)
		e := Event{Step: -1, Nemesis: "all", Action: "heal-all", Detail: "every link restored, delay removed, every node running"}
		if err != nil {
			e.Error = err.Error()
		}
		record(e)
	}()
	for _, st := range s.Steps {
		if !sleepUntil(ctx, env.Start.Add(st.At)) {
			return events
		}
		reached := time.Since(env.Start)
		healAt, keep := s.HealAt(st, reached)
		if !keep {
			record(Event{Step: st.Index, Nemesis: st.Nemesis, Action: "skip",
				Detail: fmt.Sprintf("due at %v, reached at %v (the previous heal ran long): less than half of its %v hold was left before %v",
					st.At.Round(time.Millisecond), reached.Round(time.Millisecond), st.Hold.Round(time.Millisecond), s.healBy(st).Round(time.Millisecond))})
			continue
		}
		n, _ := lookup(st.Nemesis)
		f, err := n.inject(ctx, env, st)
		e := Event{Step: st.Index, Nemesis: st.Nemesis, Action: "inject", Nodes: f.nodes, Detail: f.detail}
		if late := reached - st.At; late > lateNote {
			e.Detail += fmt.Sprintf(" (%v late: the previous heal ran long; held until %v)", late.Round(time.Millisecond), healAt.Round(time.Millisecond))
		}
		if err != nil {
			e.Error = err.Error()
			record(e)
			continue
		}
		record(e)
		pending, pendingStep = &f, st
		ok := sleepUntil(ctx, env.Start.Add(healAt))
		heal()
		if !ok {
			return events
		}
	}
	return events
}

// HealAt returns when step st, reached at elapsed since the run's start,
// is healed, and whether it is injected at all. A step is reached late
// when the heal before it ran long (a killed node took seconds to restart
// on a loaded machine). It then starts late and keeps its whole hold,
// healed at elapsed+st.Hold, but never after the time every fault must be
// healed by (Options.Duration - Options.CoolDown, or the step's own heal
// time when the schedule has no duration) nor before its planned heal
// time (st.At+st.Hold). A step left with less than half of its hold is
// skipped and recorded as "skip", rather than injected for a few
// milliseconds and listed like a fault that was tested.
func (s *Schedule) HealAt(st Step, elapsed time.Duration) (time.Duration, bool) {
	at := max(st.At+st.Hold, min(elapsed+st.Hold, s.healBy(st)))
	return at, at-elapsed >= st.Hold/2
}

// healBy is the latest time step st may be healed at: the end of the
// schedule's fault time, or, without a duration, the step's own heal time.
func (s *Schedule) healBy(st Step) time.Duration {
	if s.Options.Duration > 0 {
		return max(s.Options.Duration-s.Options.CoolDown, st.At+st.Hold)
	}
	return st.At + st.Hold
}

// lateNote is how late a step's start must be for its inject event to
// say so.
const lateNote = 100 * time.Millisecond

func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// HealAll undoes every fault a nemesis can leave behind, whatever the
// schedule knows: it restores every link, removes the delay, clears the
// disk faults of every running node, SIGCONTs every running node and
// restarts every node that is not running (as its agent says).
func HealAll(env *Env) error {
	var errs []error
	if env.Net != nil {
		errs = append(errs, env.Net.HealAll())
	}
	errs = append(errs, env.healAllDisks())
	for i := range env.Cluster.Nodes {
		n := &env.Cluster.Nodes[i]
		// An agent that does not answer is started again by Restart.
		if env.Cluster.State(context.Background(), n).Alive() {
			errs = append(errs, env.Cluster.Signal(n.ID, syscall.SIGCONT))
			continue
		}
		errs = append(errs, env.Cluster.Restart(n.ID))
	}
	return errors.Join(errs...)
}
