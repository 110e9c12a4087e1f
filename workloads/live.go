package workloads

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/client"
)

// DefaultStallTimeout is the default of -stallTimeout: how long a run goes
// on while no operation gets an answer from the cluster.
const DefaultStallTimeout = 10 * time.Second

// Live counts a run's operations as they finish, for the progress lines
// and the stall watchdog. Safe for concurrent use.
type Live struct {
	// Done counts finished operations (every outcome); Errors and
	// Ambiguous those that failed and those whose outcome is unknown.
	Done, Errors, Ambiguous atomic.Int64
	// lastAnswer is when an operation last got an answer from the cluster
	// (UnixNano): it completed, or a node refused it definitely.
	lastAnswer atomic.Int64
}

// NewLive returns counters whose last answer is start (a run begins with
// the benefit of the doubt).
func NewLive(start time.Time) *Live {
	l := &Live{}
	l.lastAnswer.Store(start.UnixNano())
	return l
}

// Record counts one finished operation. A nil Live ignores it.
func (l *Live) Record(out Outcome, err error) {
	if l == nil {
		return
	}
	l.Done.Add(1)
	switch out {
	case Ambiguous:
		l.Ambiguous.Add(1)
	case Failed:
		l.Errors.Add(1)
	}
	if out == OK || out == Miss || answered(err) {
		l.lastAnswer.Store(time.Now().UnixNano())
	}
}

// resume restarts the stall clock at now: an operation is sent while none
// was outstanding (an open loop at a low rate leaves the cluster idle
// between operations, which is no stall). A nil Live ignores it.
func (l *Live) resume(now time.Time) {
	if l != nil {
		l.lastAnswer.Store(now.UnixNano())
	}
}

// answered reports whether err is a definite answer of a node (bad input,
// a full disk, corrupt data): the cluster is up, just saying no. Timeouts,
// transport errors, "no leader" (Aborted) and unknown outcomes are not.
func answered(err error) bool {
	if err == nil || errors.Is(err, client.ErrAmbiguous) {
		return false
	}
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.OK, codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Aborted, codes.Unknown:
		return false
	}
	return true
}

// StallError ends a run in which no operation got an answer from the
// cluster for Timeout (-stallTimeout). Nodes, if set, describes what the
// nodes said when probed afterwards (see ProbeNodes).
type StallError struct {
	Timeout time.Duration
	Nodes   string
}

func (e *StallError) Error() string {
	msg := fmt.Sprintf("stopped: no operation got an answer from the cluster for %v (the stall timeout: -stallTimeout of bench and ycsb)", e.Timeout)
	if e.Nodes != "" {
		msg += "; " + e.Nodes
	}
	return msg
}

// Watch returns a context that is cancelled, with a *StallError as its
// cause, once no operation recorded in l got an answer for timeout (0:
// never), and the function that ends the watch. Bind each operation to it
// (StallContext) so that a stall also ends the operations in flight.
func (l *Live) Watch(timeout time.Duration) (stallCtx context.Context, stop func()) {
	wctx, cancel := context.WithCancelCause(context.Background())
	if timeout <= 0 {
		return wctx, func() { cancel(nil) }
	}
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(min(timeout/4, time.Second))
		defer t.Stop()
		for {
			select {
			case now := <-t.C:
				if now.Sub(time.Unix(0, l.lastAnswer.Load())) >= timeout {
					cancel(&StallError{Timeout: timeout})
					return
				}
			case <-quit:
				return
			case <-wctx.Done():
				return
			}
		}
	}()
	return wctx, func() {
		close(quit)
		<-done
		cancel(nil)
	}
}

// StallContext is OpContext(ctx, timeout), also cancelled when stallCtx
// (from Watch) is.
func StallContext(ctx, stallCtx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	octx, cancel := OpContext(ctx, timeout)
	stop := context.AfterFunc(stallCtx, cancel)
	return octx, func() { stop(); cancel() }
}

// Stalled returns the *StallError that ended ctx (from Watch), or nil.
func Stalled(ctx context.Context) *StallError {
	var se *StallError
	if errors.As(context.Cause(ctx), &se) {
		return se
	}
	return nil
}

// ProbeNodes asks every server c knows for its status (timeout each) and
// describes the ones that did not answer and the ones without a leader,
// e.g. "unreachable: 127.0.0.1:3088 (connection refused); no leader:
// 127.0.0.1:3089".
func ProbeNodes(ctx context.Context, c *client.Client, timeout time.Duration) string {
	addrs := c.Servers()
	sort.Strings(addrs)
	var down, leaderless []string
	for _, a := range addrs {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		st, err := c.Status(pctx, a, false)
		cancel()
		switch {
		case err != nil:
			reason := err.Error()
			if s, ok := status.FromError(err); ok {
				reason = s.Message()
			}
			if strings.Contains(reason, "connection refused") {
				reason = "connection refused"
			}
			down = append(down, fmt.Sprintf("%s (%s)", a, reason))
		case st.Header.GetLeaderId() == 0:
			leaderless = append(leaderless, a)
		}
	}
	var parts []string
	if len(down) > 0 {
		parts = append(parts, "unreachable: "+strings.Join(down, ", "))
	}
	if len(leaderless) > 0 {
		parts = append(parts, "answering but without a leader: "+strings.Join(leaderless, ", "))
	}
	if len(parts) == 0 {
		return "every node answers a status request now: " + strings.Join(addrs, ", ")
	}
	return strings.Join(parts, "; ")
}
