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

	"github.com/nezha-harness/nezha/api/kvpb"
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
	// count is every key of the range, whatever the limit (etcd; not the
	// keys returned plus one).
	r, err = s.Range(ctx, &pb.RangeRequest{Key: []byte("b"), RangeEnd: []byte("c"), Limit: 3, KeysOnly: true})
	if err != nil || keys(r) != "b1=,b2=,b3=" || !r.More || r.Count != 4 {
		t.Fatalf("limit 3, keys only: %v %v", r, err)
	}
	r, err = s.Range(ctx, &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte{0}, Limit: 1})
	if err != nil || keys(r) != "a=va" || !r.More || r.Count != 6 {
		t.Fatalf("limit 1 of 6: %v %v", r, err)
	}
	r, err = s.Range(ctx, &pb.RangeRequest{Key: []byte("b"), RangeEnd: []byte("c"), Limit: 4})
	if err != nil || keys(r) != "b1=vb1,b2=vb2,b3=vb3,b4=vb4" || r.More || r.Count != 4 {
		t.Fatalf("limit 4 of 4: %v %v", r, err)
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
	// An empty range answers with the header of a read, as etcd.
	r, err = s.Range(ctx, &pb.RangeRequest{Key: []byte("c"), RangeEnd: []byte("b")})
	if err != nil || len(r.Kvs) != 0 || r.Count != 0 || r.More ||
		r.Header.Revision != int64(mem.index) || r.Header.MemberId != 2 || r.Header.RaftTerm != 7 {
		t.Fatalf("empty range: %v %v", r, err)
	}
	// No per-key history: the revisions and version of a key are 0, not
	// made up.
	r, err = s.Range(ctx, &pb.RangeRequest{Key: []byte("b"), RangeEnd: []byte("c")})
	for _, kv := range r.Kvs {
		if kv.CreateRevision != 0 || kv.ModRevision != 0 || kv.Version != 0 {
			t.Fatalf("%s: create %d mod %d version %d, want 0 0 0", kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version)
		}
	}
	r, err = s.Range(ctx, &pb.RangeRequest{Key: []byte("b2")})
	if kv := r.Kvs[0]; err != nil || kv.CreateRevision != 0 || kv.ModRevision != 0 || kv.Version != 0 {
		t.Fatalf("get b2: %v %v", r, err)
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
		"sort by version": func() error {
			_, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), SortTarget: pb.RangeRequest_VERSION})
			return err
		}(),
		"sort by create": func() error {
			_, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), SortTarget: pb.RangeRequest_CREATE})
			return err
		}(),
		"sort by mod": func() error {
			_, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), SortTarget: pb.RangeRequest_MOD})
			return err
		}(),
		"min mod revision": func() error {
			_, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), MinModRevision: 1})
			return err
		}(),
		"watch":       Watch{}.Watch(nil),
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

// TestRangeSort checks etcd's sorts: by value ascending when only the
// target is given (etcdctl get --sort-by VALUE), by key or value in
// either order, over the whole range before the limit.
func TestRangeSort(t *testing.T) {
	ctx := context.Background()
	mem := &memKV{m: map[string]string{}}
	s := New(mem)
	for k, v := range map[string]string{"k1": "c", "k2": "a", "k3": "e", "k4": "b", "k5": "d"} {
		if _, err := s.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		target pb.RangeRequest_SortTarget
		order  pb.RangeRequest_SortOrder
		limit  int64
		want   string
	}{
		{pb.RangeRequest_KEY, pb.RangeRequest_NONE, 0, "k1=c,k2=a,k3=e,k4=b,k5=d"},
		{pb.RangeRequest_KEY, pb.RangeRequest_ASCEND, 0, "k1=c,k2=a,k3=e,k4=b,k5=d"},
		{pb.RangeRequest_KEY, pb.RangeRequest_DESCEND, 0, "k5=d,k4=b,k3=e,k2=a,k1=c"},
		{pb.RangeRequest_KEY, pb.RangeRequest_DESCEND, 2, "k5=d,k4=b"},
		{pb.RangeRequest_VALUE, pb.RangeRequest_NONE, 0, "k2=a,k4=b,k1=c,k5=d,k3=e"},
		{pb.RangeRequest_VALUE, pb.RangeRequest_ASCEND, 2, "k2=a,k4=b"},
		{pb.RangeRequest_VALUE, pb.RangeRequest_DESCEND, 0, "k3=e,k5=d,k1=c,k4=b,k2=a"},
		{pb.RangeRequest_VALUE, pb.RangeRequest_DESCEND, 1, "k3=e"},
	} {
		r, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l"), SortTarget: c.target, SortOrder: c.order, Limit: c.limit})
		if err != nil || keys(r) != c.want || r.Count != 5 || r.More != (c.limit > 0 && c.limit < 5) {
			t.Errorf("sort by %v %v limit %d: %v %v; want %s, count 5", c.target, c.order, c.limit, r, err, c.want)
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
