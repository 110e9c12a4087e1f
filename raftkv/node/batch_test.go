package node

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/client"
)

// TestBatchStream drives a node's Batch stream directly: every operation
// of a request gets its own answer with the unary method's status (bad
// input included: the stream and the node carry on), GETs see the writes
// acknowledged before them, the node's header comes once per response, and
// closing the send side ends the stream once everything is answered.
func TestBatchStream(t *testing.T) {
	tc := startCluster(t, 3)
	leader := tc.waitLeader(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, s := openBatch(ctx, t, tc.cfgs[leader].Address)
	roundTrip := func(ops ...*kvpb.BatchOp) map[uint64]*kvpb.BatchResult {
		t.Helper()
		return batchRoundTrip(t, s, func(resp *kvpb.BatchResponse) {
			if resp.Header == nil || resp.Header.NodeId == 0 {
				t.Fatalf("response without the node's header: %v", resp)
			}
		}, ops...)
	}
	put := func(id uint64, key, value string) *kvpb.BatchOp {
		return &kvpb.BatchOp{Id: id, Op: &kvpb.BatchOp_Put{Put: &kvpb.PutRequest{Key: []byte(key), Value: []byte(value)}}}
	}
	get := func(id uint64, key string, c kvpb.ReadConsistency) *kvpb.BatchOp {
		return &kvpb.BatchOp{Id: id, Op: &kvpb.BatchOp_Get{Get: &kvpb.GetRequest{Key: []byte(key), Consistency: c}}}
	}
	got := roundTrip(put(1, "a", "1"), put(2, "b", "2"), put(3, "", "empty key"), &kvpb.BatchOp{Id: 4})
	for id := uint64(1); id <= 2; id++ {
		if r := got[id]; r.Code != 0 || r.GetPut().GetIndex() == 0 || r.GetPut().GetHeader() != nil {
			t.Fatalf("put %d: %v, want applied, with the header left to the response", id, r)
		}
	}
	if c := codes.Code(got[3].Code); c != codes.InvalidArgument {
		t.Fatalf("put with an empty key: %v, want InvalidArgument", got[3])
	}
	if c := codes.Code(got[4].Code); c != codes.InvalidArgument {
		t.Fatalf("operation without a request: %v, want InvalidArgument", got[4])
	}
	got = roundTrip(get(5, "a", kvpb.ReadConsistency_LINEARIZABLE), get(6, "b", kvpb.ReadConsistency_LINEARIZABLE),
		get(7, "a", kvpb.ReadConsistency_STALE), get(8, "nope", kvpb.ReadConsistency_LINEARIZABLE),
		get(9, "a", kvpb.ReadConsistency(7)), get(10, "", kvpb.ReadConsistency_STALE),
		&kvpb.BatchOp{Id: 12, Op: &kvpb.BatchOp_Scan{Scan: &kvpb.ScanRequest{Start: []byte("a"), End: []byte("z")}}})
	for id, want := range map[uint64]string{5: "1", 6: "2", 7: "1"} {
		if r := got[id].GetGet(); got[id].Code != 0 || !r.GetFound() || string(r.GetValue()) != want {
			t.Fatalf("get %d: %v, want %q", id, got[id], want)
		}
	}
	if r := got[8]; r.Code != 0 || r.GetGet().GetFound() {
		t.Fatalf("get of a missing key: %v, want not found", r)
	}
	if c := codes.Code(got[9].Code); c != codes.InvalidArgument {
		t.Fatalf("get with an unknown consistency: %v, want InvalidArgument", got[9])
	}
	if c := codes.Code(got[10].Code); c != codes.InvalidArgument {
		t.Fatalf("get with an empty key: %v, want InvalidArgument", got[10])
	}
	if r := got[12]; r.Code != 0 || len(r.GetScan().GetKvs()) != 2 {
		t.Fatalf("scan: %v, want a and b", r)
	}
	got = roundTrip(&kvpb.BatchOp{Id: 11, Op: &kvpb.BatchOp_Delete{Delete: &kvpb.DeleteRequest{Key: []byte("b")}}})
	if r := got[11]; r.Code != 0 || r.GetDelete().GetIndex() == 0 {
		t.Fatalf("delete: %v", r)
	}
	if got = roundTrip(get(13, "b", kvpb.ReadConsistency_LINEARIZABLE)); got[13].GetGet().GetFound() {
		t.Fatalf("get after the delete: %v, want not found", got[13])
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend the stream ended with %v, want io.EOF", err)
	}
}

// TestBatchNegativeConsistency: a GET on a Batch stream whose consistency
// is negative (proto3 enums are open: -1 decodes as -1) gets its own
// InvalidArgument, as the unary Get answers it, and the node carries on.
// It used to index the node's per-consistency groups with -1 and panic,
// taking the whole node down with one message.
func TestBatchNegativeConsistency(t *testing.T) {
	tc := startCluster(t, 1)
	leader := tc.waitLeader(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv, s := openBatch(ctx, t, tc.cfgs[leader].Address)
	got := batchRoundTrip(t, s, nil,
		&kvpb.BatchOp{Id: 1, Op: &kvpb.BatchOp_Get{Get: &kvpb.GetRequest{Key: []byte("a"), Consistency: -1}}},
		&kvpb.BatchOp{Id: 2, Op: &kvpb.BatchOp_Get{Get: &kvpb.GetRequest{Key: []byte("a"), Consistency: -(1 << 31)}}},
		&kvpb.BatchOp{Id: 3, Op: &kvpb.BatchOp_Get{Get: &kvpb.GetRequest{Key: []byte("a"), Consistency: kvpb.ReadConsistency_STALE}}},
	)
	for _, id := range []uint64{1, 2} {
		if c := codes.Code(got[id].Code); c != codes.InvalidArgument {
			t.Fatalf("get %d with a negative consistency: %v, want InvalidArgument", id, got[id])
		}
	}
	if got[3].Code != 0 || got[3].GetGet().GetFound() {
		t.Fatalf("stale get of a missing key: %v, want OK, not found", got[3])
	}
	if _, err := kv.Get(ctx, &kvpb.GetRequest{Key: []byte("a")}); err != nil {
		t.Fatalf("unary get after the bad batch: %v", err)
	}
}

// TestWriteErrorCodes: what a write's outcome inside the node becomes for
// the client; a write that surely was not applied is Aborted (retried as
// it is), one whose outcome is unknown is not.
func TestWriteErrorCodes(t *testing.T) {
	for _, c := range []struct {
		err  error
		want codes.Code
		says string
	}{
		{errDropped, codes.Aborted, "not accepted by raft"},
		{errNotProposed, codes.Aborted, "the request ended before it was proposed"},
		{errSuperseded, codes.Aborted, "write not applied"},
		{errLeaderChanged, codes.Unavailable, "write outcome unknown"},
		{context.DeadlineExceeded, codes.DeadlineExceeded, "write outcome unknown"},
		{errStopping, codes.Unavailable, "write outcome unknown"},
	} {
		err := writeError(c.err)
		if status.Code(err) != c.want || !strings.Contains(err.Error(), c.says) {
			t.Errorf("writeError(%v) = %v; want %v saying %q", c.err, err, c.want, c.says)
		}
	}
}

// openBatch dials addr and opens a Batch stream on it (both end with the
// test or ctx).
func openBatch(ctx context.Context, t *testing.T, addr string) (kvpb.KVClient, kvpb.KV_BatchClient) {
	t.Helper()
	cc, err := grpc.NewClient(addr, client.DialOptions(64<<20)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	kv := kvpb.NewKVClient(cc)
	s, err := kv.Batch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return kv, s
}

// batchRoundTrip sends ops as one BatchRequest on s and returns their
// results by id, once all arrived; check, if not nil, sees every response.
func batchRoundTrip(t *testing.T, s kvpb.KV_BatchClient, check func(*kvpb.BatchResponse), ops ...*kvpb.BatchOp) map[uint64]*kvpb.BatchResult {
	t.Helper()
	if err := s.Send(&kvpb.BatchRequest{Ops: ops}); err != nil {
		t.Fatal(err)
	}
	got := map[uint64]*kvpb.BatchResult{}
	for len(got) < len(ops) {
		resp, err := s.Recv()
		if err != nil {
			t.Fatalf("recv after %d of %d answers: %v", len(got), len(ops), err)
		}
		if check != nil {
			check(resp)
		}
		for _, r := range resp.Results {
			got[r.Id] = r
		}
	}
	return got
}
