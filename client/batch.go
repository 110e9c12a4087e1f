package client

import (
	"context"
	"errors"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/api/kvpb"
)

const (
	// maxBatchOps and maxBatchBytes bound one BatchRequest: the sender
	// takes whatever is queued up to these.
	maxBatchOps   = 256
	maxBatchBytes = 1 << 20
	// batchQueue is the number of operations queued per server before
	// callers wait for the sender.
	batchQueue = 4096
)

// batcher sends the small operations of a server's callers over one Batch
// stream (kvpb.KV.Batch, TiKV's BatchCommands): a sender writes whatever
// is queued as one BatchRequest, a receiver hands each BatchResult to its
// caller. A broken stream fails the operations it carried and is opened
// again by the next call. A server that does not implement Batch (an
// older node) is sent unary calls from then on.
type batcher struct {
	kv kvpb.KVClient
	// learn is given each BatchResponse's header (the node's), before its
	// results reach their callers.
	learn func(*kvpb.ResponseHeader)
	// sweepEvery is how often a stream's sweeper looks for calls past
	// their attempt deadline.
	sweepEvery time.Duration

	mu     sync.Mutex
	stream *batchStream // nil: none open
	// unary is set once the server answered Unimplemented to Batch.
	unary atomic.Bool
}

// batchStream is one open Batch stream.
type batchStream struct {
	cancel context.CancelFunc
	sendq  chan *batchCall
	nextID atomic.Uint64

	mu      sync.Mutex
	pending map[uint64]*batchCall
	broken  error // set once; then pending is empty and stays so
}

// batchCall is one operation waiting for its result.
type batchCall struct {
	op   *kvpb.BatchOp
	size int
	// deadline, if not zero, is the end of the attempt: the stream's
	// sweeper answers the call with DeadlineExceeded after it.
	deadline time.Time
	// sent (under the stream's mu): the sender handed the operation to
	// gRPC, so it may have reached the server.
	sent bool
	done chan batchOutcome // buffered; receives exactly once
}

type batchOutcome struct {
	r   *kvpb.BatchResult
	err error
}

// notSentError is a call's error when its operation surely never reached
// the server (notSent): a write is then not ambiguous.
type notSentError struct{ st *status.Status }

func (e *notSentError) Error() string              { return e.st.Err().Error() }
func (e *notSentError) GRPCStatus() *status.Status { return e.st }

// do sends op (whose Id do sets) and returns its result, or an error with
// the status codes of the unary methods: the operation's own status, the
// stream's transport error (codes.Unavailable: the outcome of a write is
// unknown), a *notSentError, ctx's end (DeadlineExceeded, Canceled), or
// DeadlineExceeded once the attempt's deadline (if not zero) has passed.
// The server is told the sooner of ctx's deadline and the attempt's.
func (b *batcher) do(ctx context.Context, op *kvpb.BatchOp, size int, deadline time.Time) (*kvpb.BatchResult, error) {
	end := deadline
	if dl, ok := ctx.Deadline(); ok && (end.IsZero() || dl.Before(end)) {
		end = dl
	}
	if !end.IsZero() {
		op.TimeoutNs = int64(time.Until(end))
		if op.TimeoutNs <= 0 {
			return nil, &notSentError{st: status.FromContextError(context.DeadlineExceeded)}
		}
	}
	st, err := b.open()
	if err != nil {
		return nil, err
	}
	call := &batchCall{op: op, size: size, deadline: deadline, done: make(chan batchOutcome, 1)}
	if err := st.register(call); err != nil {
		if st.brokenWith(codes.Unimplemented) {
			// The server answered the stream's opening with Unimplemented
			// before any call was pending: unary calls from now on, and
			// this one goes unary to the same server (batchOp), not to the
			// next server as a failed attempt.
			b.unary.Store(true)
		}
		b.forget(st)
		return nil, err
	}
	select {
	case st.sendq <- call:
	case out := <-call.done:
		// The stream broke (its sender is gone) or the sweeper gave up
		// while the queue was full.
		return b.outcome(st, out)
	case <-ctx.Done():
		if st.remove(op.Id) {
			return nil, &notSentError{st: status.FromContextError(ctx.Err())}
		}
		// The stream broke meanwhile and answered the call.
	}
	select {
	case out := <-call.done:
		return b.outcome(st, out)
	case <-ctx.Done():
		if st.remove(op.Id) {
			// The operation may be on its way: its outcome is unknown.
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return b.outcome(st, <-call.done) // answered as ctx ended
	}
}

// outcome turns what a call received into do's result.
func (b *batcher) outcome(st *batchStream, out batchOutcome) (*kvpb.BatchResult, error) {
	if out.err != nil {
		if status.Code(out.err) == codes.Unimplemented {
			// The server has no Batch method: unary calls from now on.
			b.unary.Store(true)
		}
		b.forget(st)
		return nil, out.err
	}
	if out.r.Code != uint32(codes.OK) {
		return nil, status.Error(codes.Code(out.r.Code), out.r.Message)
	}
	return out.r, nil
}

// open returns the open stream, opening one if there is none. Opening
// takes no time once the connection is up; on a connection still being
// made it waits, with the callers behind it, until gRPC gives up on it
// (the client's MinConnectTimeout, 1 s).
func (b *batcher) open() (*batchStream, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stream != nil {
		return b.stream, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := b.kv.Batch(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	st := &batchStream{cancel: cancel, sendq: make(chan *batchCall, batchQueue), pending: map[uint64]*batchCall{}}
	b.stream = st
	go st.send(s)
	go st.receive(s, b.learn)
	go st.sweep(ctx, b.sweepEvery)
	return st, nil
}

// sweepPeriod is how often a stream looks for attempts past their
// deadline: a sixteenth of the attempt timeout, within 1 ms and 100 ms.
func sweepPeriod(attemptTimeout time.Duration) time.Duration {
	return min(max(attemptTimeout/16, time.Millisecond), 100*time.Millisecond)
}

// sweep answers, every period until ctx ends, the pending calls past
// their attempt deadline with DeadlineExceeded (not-sent if the sender
// never handed them to gRPC): one ticker per stream instead of a timer per
// call.
func (st *batchStream) sweep(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			st.mu.Lock()
			for id, call := range st.pending {
				if call.deadline.IsZero() || now.Before(call.deadline) {
					continue
				}
				delete(st.pending, id)
				late := status.New(codes.DeadlineExceeded, "no answer within the attempt's deadline")
				if !call.sent {
					call.done <- batchOutcome{err: &notSentError{st: late}}
				} else {
					call.done <- batchOutcome{err: late.Err()}
				}
			}
			st.mu.Unlock()
		}
	}
}

// forget drops st as the open stream once it is broken.
func (b *batcher) forget(st *batchStream) {
	st.mu.Lock()
	broken := st.broken != nil
	st.mu.Unlock()
	if !broken {
		return
	}
	b.mu.Lock()
	if b.stream == st {
		b.stream = nil
	}
	b.mu.Unlock()
}

// close ends the open stream, if any.
func (b *batcher) close() {
	b.mu.Lock()
	st := b.stream
	b.stream = nil
	b.mu.Unlock()
	if st != nil {
		st.fail(status.Error(codes.Canceled, "client closed"))
	}
}

// brokenWith reports whether the stream broke with an error of code c.
func (st *batchStream) brokenWith(c codes.Code) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.broken != nil && status.Code(st.broken) == c
}

// register gives call an id and records it as pending, unless the stream
// is broken.
func (st *batchStream) register(call *batchCall) error {
	call.op.Id = st.nextID.Add(1)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.broken != nil {
		return &notSentError{st: status.Newf(codes.Unavailable, "batch stream closed before the request was sent: %v", st.broken)}
	}
	st.pending[call.op.Id] = call
	return nil
}

// remove takes the pending call id out (the sender will not send it if it
// has not yet); false if it was answered already.
func (st *batchStream) remove(id uint64) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, ok := st.pending[id]; !ok {
		return false
	}
	delete(st.pending, id)
	return true
}

// fail breaks the stream: every pending call is answered, with a
// *notSentError if its operation was never handed to gRPC (or the server
// has no Batch method), else with codes.Unavailable (a write's outcome is
// unknown). The stream's goroutines end.
func (st *batchStream) fail(err error) {
	st.mu.Lock()
	if st.broken != nil {
		st.mu.Unlock()
		return
	}
	st.broken = err
	pending := st.pending
	st.pending = map[uint64]*batchCall{}
	st.mu.Unlock()
	st.cancel()
	code := status.Code(err)
	for _, call := range pending {
		if !call.sent || code == codes.Unimplemented {
			call.done <- batchOutcome{err: &notSentError{st: status.Newf(code, "batch stream broken before the request was sent: %v", err)}}
			continue
		}
		call.done <- batchOutcome{err: status.Errorf(codes.Unavailable, "batch stream broken: %v", err)}
	}
}

// send writes queued calls as BatchRequests until the stream breaks: each
// request holds whatever is queued, up to maxBatchOps and maxBatchBytes.
// Calls no longer pending (their callers gave up) are left out.
func (st *batchStream) send(s kvpb.KV_BatchClient) {
	ctx := s.Context()
	var calls []*batchCall
	for {
		select {
		case call := <-st.sendq:
			calls = append(calls[:0], call)
		case <-ctx.Done():
			return
		}
		size := calls[0].size
		if len(st.sendq) == 0 {
			// Let the callers that are about to queue (those a response
			// just woke) do so, so that they share this request.
			runtime.Gosched()
		}
	gather:
		for len(calls) < maxBatchOps && size < maxBatchBytes {
			select {
			case more := <-st.sendq:
				calls = append(calls, more)
				size += more.size
			default:
				break gather
			}
		}
		req := &kvpb.BatchRequest{Ops: make([]*kvpb.BatchOp, 0, len(calls))}
		st.mu.Lock()
		if st.broken != nil {
			st.mu.Unlock()
			return
		}
		for _, call := range calls {
			if _, ok := st.pending[call.op.Id]; ok {
				call.sent = true
				req.Ops = append(req.Ops, call.op)
			}
		}
		st.mu.Unlock()
		clear(calls)
		if len(req.Ops) == 0 {
			continue
		}
		if err := s.Send(req); err != nil {
			// io.EOF: the stream ended, and receive's Recv gets its
			// status.
			if !errors.Is(err, io.EOF) {
				st.fail(err)
			}
			return
		}
	}
}

// receive hands each result to its caller until the stream breaks, after
// giving learn (if set) the response's header.
func (st *batchStream) receive(s kvpb.KV_BatchClient, learn func(*kvpb.ResponseHeader)) {
	for {
		resp, err := s.Recv()
		if err != nil {
			st.fail(err)
			return
		}
		if learn != nil && resp.Header != nil {
			learn(resp.Header)
		}
		st.mu.Lock()
		for _, r := range resp.Results {
			if call, ok := st.pending[r.Id]; ok {
				delete(st.pending, r.Id)
				call.done <- batchOutcome{r: r}
			}
		}
		st.mu.Unlock()
	}
}

// errNoBatch: the server does not implement Batch; use a unary call.
var errNoBatch = errors.New("server has no Batch method")

// batchOp sends op through the server's batcher (batcher.do), or returns
// errNoBatch if the server takes unary calls only.
func (s *server) batchOp(ctx context.Context, op *kvpb.BatchOp, size int, deadline time.Time) (*kvpb.BatchResult, error) {
	if s.batch == nil || s.batch.unary.Load() {
		return nil, errNoBatch
	}
	r, err := s.batch.do(ctx, op, size, deadline)
	if err != nil && s.batch.unary.Load() {
		return nil, errNoBatch
	}
	return r, err
}
