package client

// Unit tests of the retry, leader-tracking, ambiguity and session rules of
// Client (see the package comment) against fake in-process KV servers on
// loopback listeners. Every test is deterministic: the fakes answer from a
// script, and a test that must end a retry loop cancels the caller's context
// from inside a fake's handler (no sleeps, no timing assumptions).

import (
	"context"
	"errors"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/api/kvpb"
)

// call is one request a fake server received.
type call struct {
	method        string // "Put", "Delete", "Get", "Scan", "Status"
	clientID, seq uint64
	key           []byte
}

// fakeKV is a scripted kvpb.KVServer with Raft id id. Each handler gets the
// number of the call (0-based, per server) and returns the error to answer
// with, or nil for success.
type fakeKV struct {
	kvpb.UnimplementedKVServer
	id       uint64
	leaderID uint64 // what the response headers say
	addr     string
	members  []*kvpb.Member

	mu    sync.Mutex
	calls []call
	// onWrite answers Put and Delete; onRead answers Get and Scan. Nil:
	// success.
	onWrite func(ctx context.Context, n int) error
	onRead  func(ctx context.Context, n int) error
	scan    func(req *kvpb.ScanRequest) *kvpb.ScanResponse
	// unary: the fake has no Batch method (Unimplemented), as an older
	// node; the client then sends it unary calls.
	unary bool
	// batchStreams counts the Batch streams opened to the fake.
	batchStreams int
}

// Batch serves a Batch stream with the unary handlers, through the
// nodes' own kvpb.ServeBatch.
func (f *fakeKV) Batch(stream kvpb.KV_BatchServer) error {
	f.mu.Lock()
	f.batchStreams++
	unary := f.unary
	f.mu.Unlock()
	if unary {
		return status.Error(codes.Unimplemented, "unknown method Batch")
	}
	broken := make(chan struct{})
	var breakOnce sync.Once
	served := make(chan error, 1)
	go func() {
		served <- kvpb.ServeBatch(stream, 1<<10, kvpb.ServeEach(f.serveBatchOp(stream, broken, &breakOnce)), f.header)
	}()
	select {
	case err := <-served:
		return err
	case <-broken:
		return status.Error(codes.Unavailable, "batch stream broken by the fake")
	}
}

// serveBatchOp answers op with the unary handlers; a handler's
// errBreakStream closes broken instead (the stream ends unanswered).
func (f *fakeKV) serveBatchOp(stream kvpb.KV_BatchServer, broken chan struct{}, once *sync.Once) func(op *kvpb.BatchOp) *kvpb.BatchResult {
	return func(op *kvpb.BatchOp) *kvpb.BatchResult {
		ctx := stream.Context()
		if op.TimeoutNs > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Duration(op.TimeoutNs))
			defer cancel()
		}
		r := kvpb.ServeBatchOp(ctx, f, op)
		r.ClearHeader() // the BatchResponse's header stands for it, as on a node
		if r.Message == errBreakStream.Error() {
			once.Do(func() { close(broken) })
			<-stream.Context().Done()
		}
		return r
	}
}

func (f *fakeKV) streams() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.batchStreams
}

func (f *fakeKV) record(c call) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
	return len(f.calls) - 1
}

func (f *fakeKV) callList() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

func (f *fakeKV) header() *kvpb.ResponseHeader {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &kvpb.ResponseHeader{NodeId: f.id, LeaderId: f.leaderID}
}

func (f *fakeKV) setLeader(id uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leaderID = id
}

func (f *fakeKV) setOnWrite(h func(ctx context.Context, n int) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onWrite = h
}

func (f *fakeKV) writeErr(ctx context.Context, n int) error {
	f.mu.Lock()
	h := f.onWrite
	f.mu.Unlock()
	if h == nil {
		return nil
	}
	return h(ctx, n)
}

func (f *fakeKV) readErr(ctx context.Context, n int) error {
	if f.onRead == nil {
		return nil
	}
	return f.onRead(ctx, n)
}

func (f *fakeKV) Put(ctx context.Context, r *kvpb.PutRequest) (*kvpb.PutResponse, error) {
	n := f.record(call{method: "Put", clientID: r.ClientId, seq: r.Seq, key: r.Key})
	if err := f.writeErr(ctx, n); err != nil {
		return nil, err
	}
	return &kvpb.PutResponse{Header: f.header(), Index: 100*f.id + uint64(n)}, nil
}

func (f *fakeKV) Delete(ctx context.Context, r *kvpb.DeleteRequest) (*kvpb.DeleteResponse, error) {
	n := f.record(call{method: "Delete", clientID: r.ClientId, seq: r.Seq, key: r.Key})
	if err := f.writeErr(ctx, n); err != nil {
		return nil, err
	}
	return &kvpb.DeleteResponse{Header: f.header(), Index: 100*f.id + uint64(n)}, nil
}

func (f *fakeKV) Get(ctx context.Context, r *kvpb.GetRequest) (*kvpb.GetResponse, error) {
	n := f.record(call{method: "Get", key: r.Key})
	if err := f.readErr(ctx, n); err != nil {
		return nil, err
	}
	return &kvpb.GetResponse{Header: f.header(), Found: true, Value: []byte("v" + string(r.Key))}, nil
}

func (f *fakeKV) Scan(ctx context.Context, r *kvpb.ScanRequest) (*kvpb.ScanResponse, error) {
	n := f.record(call{method: "Scan", key: r.Start})
	if err := f.readErr(ctx, n); err != nil {
		return nil, err
	}
	resp := f.scan(r)
	resp.Header = f.header()
	return resp, nil
}

func (f *fakeKV) Status(ctx context.Context, r *kvpb.StatusRequest) (*kvpb.StatusResponse, error) {
	f.record(call{method: "Status"})
	return &kvpb.StatusResponse{Header: f.header(), Members: f.members, Address: f.addr}, nil
}

// startFakes serves each fake on its own loopback listener and returns
// their addresses; the servers stop when the test ends.
func startFakes(t *testing.T, fakes ...*fakeKV) []string {
	t.Helper()
	var addrs []string
	for _, f := range fakes {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		kvpb.RegisterKVServer(srv, f)
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		f.addr = lis.Addr().String()
		addrs = append(addrs, f.addr)
	}
	for _, f := range fakes {
		for i, g := range fakes {
			f.members = append(f.members, &kvpb.Member{Id: g.id, Address: addrs[i]})
		}
	}
	return addrs
}

// startFakesOn is startFakes with the fakes serving Batch (unary false,
// the client's default path) or not (unary true: the client falls back to
// unary calls).
func startFakesOn(t *testing.T, unary bool, fakes ...*fakeKV) []string {
	t.Helper()
	for _, f := range fakes {
		f.unary = unary
	}
	return startFakes(t, fakes...)
}

// bothPaths runs f as a subtest for each path a request can take: "batch"
// (a Batch stream) and "unary".
func bothPaths(t *testing.T, f func(t *testing.T, unary bool)) {
	for _, unary := range []bool{false, true} {
		name := "batch"
		if unary {
			name = "unary"
		}
		t.Run(name, func(t *testing.T) { f(t, unary) })
	}
}

// refusedAddr returns a loopback address nothing listens on (a listener
// opened and closed), so connecting to it is refused.
func refusedAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func newTestClient(t *testing.T, addrs ...string) *Client {
	t.Helper()
	cfg := DefaultConfig(addrs...)
	cfg.RetryBackoff = time.Millisecond
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testCtx bounds a test's calls; the tests end their loops by cancelling it
// from a handler, the deadline only keeps a broken client from hanging.
func testCtx(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

func countMethod(calls []call, method string) int {
	n := 0
	for _, c := range calls {
		if c.method == method {
			n++
		}
	}
	return n
}

var errUnavailable = status.Error(codes.Unavailable, "not the leader, leader unknown")

// TestLeaderTracking: once Discover learned the leader from the members'
// headers, every write goes to the leader first; a leader that fails is
// forgotten and the retry goes elsewhere.
func TestLeaderTracking(t *testing.T) {
	bothPaths(t, func(t *testing.T, unary bool) {
		a := &fakeKV{id: 1, leaderID: 2}
		b := &fakeKV{id: 2, leaderID: 2}
		addrs := startFakesOn(t, unary, a, b)
		c := newTestClient(t, addrs[0]) // knows only a; learns b from Status
		ctx, cancel := testCtx(t)
		defer cancel()

		if got := len(c.Discover(ctx)); got != 1 {
			t.Fatalf("Discover answered %d statuses, want 1 (only a was known)", got)
		}
		if got := c.Servers(); len(got) != 2 {
			t.Fatalf("client knows servers %v, want both members", got)
		}
		for i := 0; i < 4; i++ {
			idx, err := c.Put(ctx, []byte("k"), []byte("v"))
			if err != nil {
				t.Fatal(err)
			}
			if idx/100 != 2 {
				t.Fatalf("put %d applied at index %d, want an index from the leader b (2xx)", i, idx)
			}
		}
		if n := countMethod(a.callList(), "Put"); n != 0 {
			t.Fatalf("follower a got %d puts, want 0 once the leader is known", n)
		}

		// The leader fails twice: the retries go round robin (b, then a),
		// a answers and (naming b as leader) points the client back at b.
		b.setOnWrite(func(_ context.Context, n int) error {
			if n == 4 || n == 5 {
				return errUnavailable
			}
			return nil
		})
		if _, err := c.Put(ctx, []byte("k"), []byte("v")); err != nil {
			t.Fatal(err)
		}
		if n := countMethod(a.callList(), "Put"); n != 1 {
			t.Fatalf("a got %d puts after the leader failed, want 1 (the retry)", n)
		}
		// Round robin alone would send one of the next two puts to a.
		for i := 0; i < 2; i++ {
			if _, err := c.Put(ctx, []byte("k"), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		if n := countMethod(b.callList(), "Put"); n != 8 {
			t.Fatalf("b got %d puts, want 8 (leader relearned from a's header)", n)
		}
		if n := countMethod(a.callList(), "Put"); n != 1 {
			t.Fatalf("a got %d puts, want still 1", n)
		}
	})
}

// TestFailedLeaderIsForgotten: when the leader fails and nobody names a
// new one, the next write does not start at the failed leader again.
func TestFailedLeaderIsForgotten(t *testing.T) {
	bothPaths(t, func(t *testing.T, unary bool) {
		a := &fakeKV{id: 1, leaderID: 2}
		b := &fakeKV{id: 2, leaderID: 2}
		d := &fakeKV{id: 3, leaderID: 2}
		addrs := startFakesOn(t, unary, a, b, d)
		c := newTestClient(t, addrs...)
		ctx, cancel := testCtx(t)
		defer cancel()
		c.Discover(ctx)
		// b steps down and keeps failing; the others no longer know a leader.
		b.setOnWrite(func(context.Context, int) error { return errUnavailable })
		a.setLeader(0)
		d.setLeader(0)
		// Put 1: b (the known leader) fails, round robin tries b, then d,
		// which answers. Put 2: the leader is forgotten, so round robin
		// starts at a, which answers; b is not tried again.
		for i := 0; i < 2; i++ {
			if _, err := c.Put(ctx, []byte("k"), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		if n := countMethod(b.callList(), "Put"); n != 2 {
			t.Fatalf("the failed leader got %d puts, want 2 (only during the first put)", n)
		}
	})
}

// TestWriteSessionResend: a write whose attempt may have reached the
// cluster is resent under the same client id and sequence number; the next
// write reuses the idle session with the next sequence number.
func TestWriteSessionResend(t *testing.T) {
	bothPaths(t, func(t *testing.T, unary bool) {
		a := &fakeKV{id: 1}
		b := &fakeKV{id: 2}
		fail := func(_ context.Context, n int) error {
			if n == 0 {
				return errUnavailable
			}
			return nil
		}
		a.onWrite, b.onWrite = fail, fail
		addrs := startFakesOn(t, unary, a, b)
		c := newTestClient(t, addrs...)
		ctx, cancel := testCtx(t)
		defer cancel()

		if _, err := c.Put(ctx, []byte("k1"), []byte("v")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Delete(ctx, []byte("k2")); err != nil {
			t.Fatal(err)
		}
		var all []call
		all = append(all, a.callList()...)
		all = append(all, b.callList()...)
		var put, del []call
		for _, cl := range all {
			switch cl.method {
			case "Put":
				put = append(put, cl)
			case "Delete":
				del = append(del, cl)
			}
		}
		if len(put) < 2 {
			t.Fatalf("put sent %d times, want a failed attempt and a resend", len(put))
		}
		id := put[0].clientID
		if id == 0 {
			t.Fatal("put carried no client id")
		}
		for _, p := range put {
			if p.clientID != id || p.seq != 1 {
				t.Fatalf("put attempts carried (client %d, seq %d), want every attempt (client %d, seq 1): %+v", p.clientID, p.seq, id, put)
			}
		}
		if len(del) == 0 {
			t.Fatal("delete never reached a server")
		}
		for _, d := range del {
			if d.clientID != id || d.seq != 2 {
				t.Fatalf("delete attempts carried (client %d, seq %d), want the idle session (client %d, seq 2): %+v", d.clientID, d.seq, id, del)
			}
		}
	})
}

// TestConcurrentWritesUseDistinctSessions: two writes in flight at once
// never share a session (each session has at most one write in flight).
func TestConcurrentWritesUseDistinctSessions(t *testing.T) {
	bothPaths(t, func(t *testing.T, unary bool) {
		both := make(chan struct{})
		var arrived sync.WaitGroup
		arrived.Add(2)
		a := &fakeKV{id: 1, onWrite: func(ctx context.Context, n int) error {
			if n < 2 {
				arrived.Done()
				select { // hold both first writes until both are in flight
				case <-both:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}}
		addrs := startFakesOn(t, unary, a)
		c := newTestClient(t, addrs...)
		ctx, cancel := testCtx(t)
		defer cancel()
		go func() { arrived.Wait(); close(both) }()
		errs := make(chan error, 2)
		for i := 0; i < 2; i++ {
			go func() { _, err := c.Put(ctx, []byte("k"), []byte("v")); errs <- err }()
		}
		for i := 0; i < 2; i++ {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		calls := a.callList()
		if calls[0].clientID == calls[1].clientID {
			t.Fatalf("two concurrent writes shared client id %d", calls[0].clientID)
		}
	})
}

// TestWriteAmbiguity covers which failed writes are ambiguous.
func TestWriteAmbiguity(t *testing.T) {
	bothPaths(t, func(t *testing.T, unary bool) {
		errAborted := status.Error(codes.Aborted, "proposal dropped")
		errInvalid := status.Error(codes.InvalidArgument, "key too long")
		errInternal := status.Error(codes.Internal, "apply failed")
		cases := []struct {
			name string
			// script answers attempt n (counted over both fakes).
			script func(n int) error
			// cancelAtPause, if > 0, ends the caller's context in the
			// client's pause after that many failed attempts (so the
			// cancellation never races an attempt in flight).
			cancelAtPause int
			// cancelInAttempt ends the caller's context inside the first
			// attempt, while it is in flight.
			cancelInAttempt bool
			wantAmbiguous   bool
			wantCode        codes.Code // of the returned error, if not ambiguous
			wantAttempts    int
		}{
			{
				name:          "aborted until the context ends",
				script:        func(int) error { return errAborted },
				cancelAtPause: 4, wantAmbiguous: false, wantCode: codes.Canceled, wantAttempts: 4,
			},
			{
				name:          "unavailable until the context ends",
				script:        func(int) error { return errUnavailable },
				cancelAtPause: 4, wantAmbiguous: true, wantAttempts: 4,
			},
			{
				name:          "definite error on the first attempt",
				script:        func(int) error { return errInvalid },
				wantAmbiguous: false, wantCode: codes.InvalidArgument, wantAttempts: 1,
			},
			{
				name: "definite error after an attempt that may have applied",
				script: func(n int) error {
					if n == 0 {
						return errUnavailable
					}
					return errInvalid
				},
				wantAmbiguous: true, wantAttempts: 2,
			},
			{
				name: "definite error after aborted attempts",
				script: func(n int) error {
					if n < 2 {
						return errAborted
					}
					return errInvalid
				},
				wantAmbiguous: false, wantCode: codes.InvalidArgument, wantAttempts: 3,
			},
			{
				name:          "internal error on the first attempt",
				script:        func(int) error { return errInternal },
				wantAmbiguous: true, wantAttempts: 1,
			},
			{
				// The handler's answer races the cancellation; the client
				// sees either Unavailable or its own Canceled
				// of an attempt in flight, and either is ambiguous.
				name:            "caller's context ends during an attempt",
				script:          func(int) error { return errUnavailable },
				cancelInAttempt: true, wantAmbiguous: true, wantAttempts: 1,
			},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				ctx, cancel := testCtx(t)
				defer cancel()
				var mu sync.Mutex
				attempts := 0
				h := func(context.Context, int) error {
					mu.Lock()
					n := attempts
					attempts++
					mu.Unlock()
					if tc.cancelInAttempt {
						cancel()
					}
					return tc.script(n)
				}
				a := &fakeKV{id: 1, onWrite: h}
				b := &fakeKV{id: 2, onWrite: h}
				addrs := startFakesOn(t, unary, a, b)
				c := newTestClient(t, addrs...)
				pauses := 0
				c.b.(*kvpbBackend).onPause = func() {
					pauses++
					if pauses == tc.cancelAtPause {
						cancel()
					}
				}
				_, err := c.Put(ctx, []byte("k"), []byte("v"))
				if err == nil {
					t.Fatal("put succeeded, want an error")
				}
				if got := errors.Is(err, ErrAmbiguous); got != tc.wantAmbiguous {
					t.Fatalf("errors.Is(%v, ErrAmbiguous) = %v, want %v", err, got, tc.wantAmbiguous)
				}
				if !tc.wantAmbiguous {
					code := status.Code(err)
					if errors.Is(err, context.Canceled) {
						code = codes.Canceled
					}
					if code != tc.wantCode {
						t.Fatalf("error %v has code %v, want %v", err, code, tc.wantCode)
					}
				}
				mu.Lock()
				defer mu.Unlock()
				if attempts != tc.wantAttempts {
					t.Fatalf("%d attempts, want %d", attempts, tc.wantAttempts)
				}
			})
		}
	})
}

// TestWriteNotSentIsNotAmbiguous: attempts on a server whose connection is
// refused never reached the cluster, so with only such attempts and aborted
// ones the write is not ambiguous.
func TestWriteNotSentIsNotAmbiguous(t *testing.T) {
	bothPaths(t, func(t *testing.T, unary bool) {
		ctx, cancel := testCtx(t)
		defer cancel()
		a := &fakeKV{id: 1, onWrite: func(context.Context, int) error {
			return status.Error(codes.Aborted, "proposal dropped")
		}}
		addrs := startFakesOn(t, unary, a)
		dead := refusedAddr(t)
		c := newTestClient(t, dead, addrs[0])
		pauses := 0
		c.b.(*kvpbBackend).onPause = func() {
			if pauses++; pauses == 6 {
				cancel()
			}
		}
		_, err := c.Put(ctx, []byte("k"), []byte("v"))
		if err == nil || errors.Is(err, ErrAmbiguous) {
			t.Fatalf("put: %v, want a non-ambiguous error", err)
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("put: %v, want the caller's cancellation", err)
		}
		// Round robin alternated between the two servers: 3 attempts each.
		if n := len(a.callList()); n != 3 {
			t.Fatalf("a got %d attempts, want 3", n)
		}
	})
}

// TestReadRetry: a read moves on from a failing server and from one that
// does not answer within AttemptTimeout; a definite error ends it at once.
func TestReadRetry(t *testing.T) {
	bothPaths(t, func(t *testing.T, unary bool) {
		t.Run("transient error", func(t *testing.T) {
			a := &fakeKV{id: 1, onRead: func(context.Context, int) error { return errUnavailable }}
			b := &fakeKV{id: 2}
			addrs := startFakesOn(t, unary, a, b)
			c := newTestClient(t, addrs...)
			ctx, cancel := testCtx(t)
			defer cancel()
			for i := 0; i < 3; i++ {
				v, found, err := c.Get(ctx, []byte("k"))
				if err != nil || !found || string(v) != "vk" {
					t.Fatalf("get = %q, %v, %v; want \"vk\", true, nil", v, found, err)
				}
			}
			if n := len(b.callList()); n != 3 {
				t.Fatalf("b answered %d gets, want 3", n)
			}
		})
		t.Run("attempt timeout", func(t *testing.T) {
			// a never answers: it waits for the attempt's context to end.
			a := &fakeKV{id: 1, onRead: func(ctx context.Context, _ int) error {
				<-ctx.Done()
				return status.FromContextError(ctx.Err()).Err()
			}}
			b := &fakeKV{id: 2}
			addrs := startFakesOn(t, unary, a, b)
			cfg := DefaultConfig(addrs...)
			cfg.RetryBackoff = time.Millisecond
			cfg.AttemptTimeout = 50 * time.Millisecond
			c, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := testCtx(t)
			defer cancel()
			for i := 0; i < 2; i++ {
				if _, _, err := c.Get(ctx, []byte("k")); err != nil {
					t.Fatalf("get %d: %v", i, err)
				}
			}
			if n := len(b.callList()); n != 2 {
				t.Fatalf("b answered %d gets, want 2", n)
			}
		})
		t.Run("definite error", func(t *testing.T) {
			a := &fakeKV{id: 1, onRead: func(context.Context, int) error {
				return status.Error(codes.InvalidArgument, "bad range")
			}}
			addrs := startFakesOn(t, unary, a, &fakeKV{id: 2})
			c := newTestClient(t, addrs[0])
			ctx, cancel := testCtx(t)
			defer cancel()
			_, _, err := c.Get(ctx, []byte("k"))
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("get: %v, want InvalidArgument", err)
			}
			if n := len(a.callList()); n != 1 {
				t.Fatalf("a got %d gets, want 1 (no retry of a definite error)", n)
			}
		})
	})
}

// TestScanPaging: Scan follows the server's pages, starting each page just
// after the last key of the previous one, and stops at the limit.
func TestScanPaging(t *testing.T) {
	keys := []string{"a", "b", "c", "d", "e"}
	a := &fakeKV{id: 1}
	a.scan = func(r *kvpb.ScanRequest) *kvpb.ScanResponse {
		var resp kvpb.ScanResponse
		for _, k := range keys {
			if k >= string(r.Start) && len(resp.Kvs) < 2 && (r.Limit == 0 || len(resp.Kvs) < int(r.Limit)) {
				resp.Kvs = append(resp.Kvs, &kvpb.KeyValue{Key: []byte(k), Value: []byte("v" + k)})
			}
		}
		resp.More = len(resp.Kvs) > 0 && string(resp.Kvs[len(resp.Kvs)-1].Key) != keys[len(keys)-1]
		return &resp
	}
	addrs := startFakes(t, a)
	c := newTestClient(t, addrs...)
	ctx, cancel := testCtx(t)
	defer cancel()
	kvs, err := c.Scan(ctx, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, kv := range kvs {
		got = append(got, string(kv.Key))
	}
	if len(got) != len(keys) {
		t.Fatalf("scan returned %v, want %v", got, keys)
	}
	for i := range keys {
		if got[i] != keys[i] {
			t.Fatalf("scan returned %v, want %v", got, keys)
		}
	}
	if n := countMethod(a.callList(), "Scan"); n != 3 {
		t.Fatalf("scan took %d pages, want 3", n)
	}
	kvs, err = c.Scan(ctx, []byte("b"), nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(kvs) != 3 || string(kvs[0].Key) != "b" || string(kvs[2].Key) != "d" {
		t.Fatalf("scan from b limit 3 returned %d pairs, want b..d", len(kvs))
	}
	// A limit past the request's uint32 is "more than there are", not
	// the limit modulo 2^32 (before, kv scan -limit 4294967297
	// printed one pair).
	// The fake answers as a node does: more only when its size cap (2
	// pairs) stopped the page, not the request's limit.
	a.scan = func(r *kvpb.ScanRequest) *kvpb.ScanResponse {
		var resp kvpb.ScanResponse
		for _, k := range keys {
			if k < string(r.Start) || (r.Limit != 0 && len(resp.Kvs) == int(r.Limit)) {
				continue
			}
			if len(resp.Kvs) == 2 {
				resp.More = true
				break
			}
			resp.Kvs = append(resp.Kvs, &kvpb.KeyValue{Key: []byte(k), Value: []byte("v" + k)})
		}
		return &resp
	}
	for _, limit := range []int{1 << 32, 1<<32 + 1, math.MaxInt} {
		kvs, err = c.Scan(ctx, nil, nil, limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(kvs) != len(keys) {
			t.Fatalf("scan limit %d returned %d pairs, want all %d", limit, len(kvs), len(keys))
		}
	}
}
