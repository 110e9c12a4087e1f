package kvpb

import (
	"context"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// stuckClientStream is a Batch stream whose client never reads: the first
// Send blocks until release is closed. Recv hands out reqs, then waits for
// end to be closed and returns io.EOF.
type stuckClientStream struct {
	grpc.ServerStream
	reqs    chan *BatchRequest
	end     chan struct{}
	release chan struct{}
	sent    chan int // the size of the first (blocked) response

	mu      sync.Mutex
	results []*BatchResult
	first   bool
}

func (s *stuckClientStream) Context() context.Context { return context.Background() }

func (s *stuckClientStream) Recv() (*BatchRequest, error) {
	select {
	case r := <-s.reqs:
		return r, nil
	case <-s.end:
		return nil, io.EOF
	}
}

func (s *stuckClientStream) Send(resp *BatchResponse) error {
	s.mu.Lock()
	first := !s.first
	s.first = true
	s.results = append(s.results, resp.Results...)
	s.mu.Unlock()
	if first {
		s.sent <- len(resp.Results)
		<-s.release
	}
	return nil
}

// TestServeBatchBoundsOpsWaitingToBeSent: operations whose results wait
// for a client that does not read its responses still count against the
// stream's limit of operations in flight, so a stream holds at most that
// many goroutines. They used to leave the count as soon as they had a
// result, before it was queued: a client that sent requests and never read
// could park any number of goroutines (46,000 and 270 MB on a node after
// three requests of 60,000 stale GETs; more with every request).
func TestServeBatchBoundsOpsWaitingToBeSent(t *testing.T) {
	const limit = 6000
	st := &stuckClientStream{reqs: make(chan *BatchRequest), end: make(chan struct{}),
		release: make(chan struct{}), sent: make(chan int, 1)}
	var started, returned atomic.Int64
	var served []int // operations handed to serve, per request
	serve := func(req *BatchRequest, answer func(*BatchResult)) {
		served = append(served, len(req.Ops))
		for _, op := range req.Ops {
			go func() {
				started.Add(1)
				answer(&BatchResult{Id: op.Id})
				returned.Add(1)
			}()
		}
	}
	request := func(first uint64, n int) *BatchRequest {
		req := &BatchRequest{}
		for i := 0; i < n; i++ {
			req.Ops = append(req.Ops, &BatchOp{Id: first + uint64(i)})
		}
		return req
	}
	admitted := make(chan int64, 2) // what each request found in flight
	done := make(chan error, 1)
	go func() { done <- serveBatch(st, limit, serve, nil, func(n int64) { admitted <- n }) }()

	// limit operations, all admitted; the sender takes a first response
	// and blocks in Send; the results channel (4096) fills up, and the
	// other answers wait for room.
	st.reqs <- request(1, limit)
	if n := <-admitted; n != 0 {
		t.Fatalf("the first request found %d operations in flight", n)
	}
	gathered := <-st.sent
	absorbed := int64(gathered + 4096)
	if absorbed >= limit {
		t.Fatalf("the first response gathered %d results: nothing is left waiting", gathered)
	}
	// Exactly absorbed answers can complete while Send blocks; wait until
	// they have, and until every operation has asked to answer.
	waitFor(t, func() bool { return returned.Load() == absorbed && started.Load() == limit })
	parked := limit - int(absorbed)

	// The next request meets a stream whose waiting answers still hold
	// their slots: only limit-parked of it may be served.
	st.reqs <- request(limit+1, limit)
	if n := <-admitted; n != int64(parked) {
		t.Fatalf("the second request found %d operations in flight while %d answers waited for the client to read, want %d (limit %d)",
			n, parked, parked, limit)
	}
	close(st.release)
	close(st.end)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(served) != 2 {
		t.Fatalf("serve called %d times, want 2", len(served))
	}
	if want := limit - parked; served[1] != want {
		t.Fatalf("second request: %d operations served while %d answers waited for the client, want %d (limit %d)",
			served[1], parked, want, limit)
	}
	exhausted := 0
	for _, r := range st.results {
		if codes.Code(r.Code) == codes.ResourceExhausted {
			exhausted++
		}
	}
	if exhausted != parked {
		t.Fatalf("%d operations refused as over the limit, want %d", exhausted, parked)
	}
	if got := len(st.results); got != 2*limit {
		t.Fatalf("%d results, want %d", got, 2*limit)
	}
}

// waitFor waits until cond holds, for at most 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		runtime.Gosched()
	}
}
