package etcdapi

import (
	"context"
	"math"
	"sort"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/systems/kvpb"
)

// memKV is a kvpb.KVServer over a map whose Scan pages every 2 keys (as a
// node's response cap would), recording the consistency of the last read.
type memKV struct {
	kvpb.UnimplementedKVServer
	m        map[string]string
	index    uint64
	lastRead kvpb.ReadConsistency
}

func (k *memKV) hdr() *kvpb.ResponseHeader {
	return &kvpb.ResponseHeader{NodeId: 2, LeaderId: 1, Term: 7, AppliedIndex: k.index}
}

func (k *memKV) Put(_ context.Context, r *kvpb.PutRequest) (*kvpb.PutResponse, error) {
	k.index++
	k.m[string(r.Key)] = string(r.Value)
	return &kvpb.PutResponse{Header: k.hdr(), Index: k.index}, nil
}

func (k *memKV) Delete(_ context.Context, r *kvpb.DeleteRequest) (*kvpb.DeleteResponse, error) {
	k.index++
	delete(k.m, string(r.Key))
	return &kvpb.DeleteResponse{Header: k.hdr(), Index: k.index}, nil
}

func (k *memKV) Get(_ context.Context, r *kvpb.GetRequest) (*kvpb.GetResponse, error) {
	k.lastRead = r.Consistency
	v, ok := k.m[string(r.Key)]
	return &kvpb.GetResponse{Header: k.hdr(), Found: ok, Value: []byte(v)}, nil
}

func (k *memKV) Scan(_ context.Context, r *kvpb.ScanRequest) (*kvpb.ScanResponse, error) {
	k.lastRead = r.Consistency
	var keys []string
	for key := range k.m {
		if key >= string(r.Start) && (len(r.End) == 0 || key < string(r.End)) {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	resp := &kvpb.ScanResponse{Header: k.hdr()}
	for _, key := range keys {
		if r.Limit > 0 && len(resp.Kvs) == int(r.Limit) {
			break
		}
		if len(resp.Kvs) == 2 {
			resp.More = true
			break
		}
		resp.Kvs = append(resp.Kvs, &kvpb.KeyValue{Key: []byte(key), Value: []byte(k.m[key])})
	}
	return resp, nil
}

func keys(r *pb.RangeResponse) string {
	var out []string
	for _, kv := range r.Kvs {
		out = append(out, string(kv.Key)+"="+string(kv.Value))
	}
	return strings.Join(out, ",")
}

func TestKV(t *testing.T) {
	ctx := context.Background()
	mem := &memKV{m: map[string]string{}}
	s := New(mem)
	for _, k := range []string{"a", "b1", "b2", "b3", "b4", "c"} {
		p, err := s.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte("v" + k)})
		if err != nil || p.Header.Revision != int64(mem.index) || p.Header.MemberId != 2 || p.Header.RaftTerm != 7 {
			t.Fatalf("put %s: %v %v", k, p, err)
		}
	}
	r, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("b2")})
	if err != nil || keys(r) != "b2=vb2" || r.Count != 1 || mem.lastRead != kvpb.ReadConsistency_LINEARIZABLE {
		t.Fatalf("get: %v %v (read %v)", r, err, mem.lastRead)
	}
	r, err = s.Range(ctx, &pb.RangeRequest{Key: []byte("zz"), Serializable: true})
	if err != nil || len(r.Kvs) != 0 || r.Count != 0 || mem.lastRead != kvpb.ReadConsistency_STALE {
		t.Fatalf("serializable get of a missing key: %v %v (read %v)", r, err, mem.lastRead)
	}
	// A prefix (etcdctl get --prefix b) pages through the node's cap.
	r, err = s.Range(ctx, &pb.RangeRequest{Key: []byte("b"), RangeEnd: []byte("c")})
	if err != nil || keys(r) != "b1=vb1,b2=vb2,b3=vb3,b4=vb4" || r.More || r.Count != 4 {
		t.Fatalf("prefix: %v %v", r, err)
	}
	r, err = s.Range(ctx, &pb.RangeRequest{Key: []byte("b"), RangeEnd: []byte("c"), Limit: 3, KeysOnly: true})
	if err != nil || keys(r) != "b1=,b2=,b3=" || !r.More || r.Count != 4 {
		t.Fatalf("limit 3, keys only: %v %v", r, err)
	}
	// A limit past ScanRequest's uint32 is not taken modulo 2^32 (before,
	// limit 4294967296 returned one key).
	for _, limit := range []int64{1<<32 - 1, 1 << 32, 1<<32 + 1, math.MaxInt64} {
		r, err = s.Range(ctx, &pb.RangeRequest{Key: []byte("b"), RangeEnd: []byte("c"), Limit: limit})
		if err != nil || keys(r) != "b1=vb1,b2=vb2,b3=vb3,b4=vb4" || r.More || r.Count != 4 {
			t.Fatalf("limit %d: %v %v", limit, r, err)
		}
	}
	r, err = s.Range(ctx, &pb.RangeRequest{Key: []byte("b2"), RangeEnd: []byte{0}, CountOnly: true, Limit: 1})
	if err != nil || len(r.Kvs) != 0 || r.Count != 4 || r.More {
		t.Fatalf("count only from b2: %v %v", r, err)
	}
	r, err = s.Range(ctx, &pb.RangeRequest{Key: []byte("c"), RangeEnd: []byte("b")})
	if err != nil || len(r.Kvs) != 0 {
		t.Fatalf("empty range: %v %v", r, err)
	}
	d, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("a")})
	if err != nil || d.Deleted != 1 {
		t.Fatalf("delete a: %v %v", d, err)
	}
	d, err = s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("a")})
	if err != nil || d.Deleted != 0 {
		t.Fatalf("delete a again: %v %v", d, err)
	}
	if _, ok := mem.m["a"]; ok {
		t.Fatal("a still there")
	}
	for name, err := range map[string]error{
		"empty key": func() error { _, err := s.Range(ctx, &pb.RangeRequest{}); return err }(),
	} {
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	for name, err := range map[string]error{
		"txn":      func() error { _, err := s.Txn(ctx, &pb.TxnRequest{}); return err }(),
		"compact":  func() error { _, err := s.Compact(ctx, &pb.CompactionRequest{}); return err }(),
		"past rev": func() error { _, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("a"), Revision: 3}); return err }(),
		"descend": func() error {
			_, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("a"), SortOrder: pb.RangeRequest_DESCEND})
			return err
		}(),
		"put prev_kv": func() error { _, err := s.Put(ctx, &pb.PutRequest{Key: []byte("a"), PrevKv: true}); return err }(),
		"put lease":   func() error { _, err := s.Put(ctx, &pb.PutRequest{Key: []byte("a"), Lease: 5}); return err }(),
		"delete range": func() error {
			_, err := s.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte("b")})
			return err
		}(),
	} {
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("%s: %v, want Unimplemented", name, err)
		}
	}
}

func TestRetryNotApplied(t *testing.T) {
	calls := 0
	err := retryNotApplied(context.Background(), func() error {
		if calls++; calls < 3 {
			return status.Error(codes.Aborted, "write not applied: no leader; retry")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("after two refusals: err %v, %d calls; want nil after 3", err, calls)
	}
	calls = 0
	err = retryNotApplied(context.Background(), func() error {
		calls++
		return status.Error(codes.Unavailable, "write outcome unknown")
	})
	if status.Code(err) != codes.Unavailable || calls != 1 {
		t.Fatalf("an unknown outcome: err %v, %d calls; want it returned after 1 (never resent)", err, calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = retryNotApplied(ctx, func() error { return status.Error(codes.Aborted, "retry") })
	if status.Code(err) != codes.Aborted {
		t.Fatalf("with the context done: %v, want the last Aborted", err)
	}
}
