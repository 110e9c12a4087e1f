// Package etcdapi serves etcd v3's KV service (etcdserverpb.KV, the types of
// go.etcd.io/etcd/api/v3) on top of a node's own client API (kvpb.KV), so
// that clients nobody here wrote - etcdctl, etcd's benchmark tool, go-ycsb's
// etcd binding, any program on etcd's Go client - drive every system of the
// harness unchanged (the node's -etcdAddress).
//
// The mapping (etcd's API reference: https://etcd.io/docs/v3.4/learning/api/):
//
//   - Range: one key (range_end empty) is a Get; a range (range_end, or
//     "\x00" for every key from key on) is a Scan, paged through the node's
//     response cap; serializable=true is a stale read (the node's local
//     state machine, kvpb.ReadConsistency_STALE), otherwise a linearizable
//     one (ReadIndex). As etcd: count is the number of keys in the whole
//     range whatever the limit, more says whether the limit left keys out,
//     a sort by key or value (ascending when only the target is given)
//     orders the whole range before the limit applies, keys_only and
//     count_only are honoured, and a range whose end comes before its
//     start is empty with the header of a read. The systems keep no count,
//     so a range with a limit reads the range to its end; a range of more
//     than one page is several reads, not one snapshot. A historical
//     revision, revision filters and sorts by version, create or mod
//     revision are Unimplemented.
//   - Put: a Put. prev_kv, a lease, ignore_value and ignore_lease are
//     Unimplemented (a put that returns the previous value would need a
//     read-modify-write the systems cannot do atomically).
//   - DeleteRange of one key: a Delete; deleted is 1 if a linearizable
//     read just before the delete found the key (the pair is not atomic:
//     under a concurrent write of the same key the count may be off).
//     Deleting a range and prev_kv are Unimplemented (not atomic here).
//   - Txn and Compact: Unimplemented: the systems have no multi-key
//     transaction, compare-and-set or MVCC history.
//
// Maintenance.Status and Cluster.MemberList are answered too (see
// Maintenance and Cluster), so that etcd's clients find the members and the
// leader; Watch is Unimplemented with a message (see Watch); etcd's other
// services (Lease, Auth, Lock, Election) are not served.
//
// There is no MVCC. A response header's revision is the node's Raft index
// (of the write, or the applied index a read was served at): it grows with
// every write, but also with Raft's own entries. A key's create_revision,
// mod_revision and version are 0, a value etcd never gives a live key: the
// systems keep no per-key history, and a made-up revision would look
// plausible. Requests that depend on them are Unimplemented.
// Errors keep the node's gRPC codes (see kvpb.KV).
package etcdapi

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/api/kvpb"
)

// KV is etcd's KV service over a node's kvpb.KVServer.
type KV struct {
	pb.UnimplementedKVServer
	kv kvpb.KVServer
}

// New returns the facade of kv.
func New(kv kvpb.KVServer) *KV { return &KV{kv: kv} }

func header(h *kvpb.ResponseHeader, revision uint64) *pb.ResponseHeader {
	return &pb.ResponseHeader{MemberId: h.GetNodeId(), Revision: int64(revision), RaftTerm: h.GetTerm()}
}

func unimplemented(what string) error {
	return status.Errorf(codes.Unimplemented, "etcd facade: %s is not supported by this system (see package etcdapi)", what)
}

// Range reads one key or a range of keys.
func (s *KV) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	order := r.SortOrder
	if r.SortTarget != pb.RangeRequest_KEY && order == pb.RangeRequest_NONE {
		// etcd sorts ascending when a target other than the key is
		// named without an order (etcdctl get --sort-by VALUE).
		order = pb.RangeRequest_ASCEND
	}
	switch {
	case r.Revision != 0:
		return nil, unimplemented("a read at a past revision")
	case r.SortTarget == pb.RangeRequest_VERSION || r.SortTarget == pb.RangeRequest_CREATE || r.SortTarget == pb.RangeRequest_MOD:
		return nil, unimplemented("sorting by version, create or mod revision (the systems keep no per-key revisions)")
	case r.MinModRevision != 0 || r.MaxModRevision != 0 || r.MinCreateRevision != 0 || r.MaxCreateRevision != 0:
		return nil, unimplemented("revision filters (the systems keep no per-key revisions)")
	case r.SortTarget != pb.RangeRequest_KEY && r.SortTarget != pb.RangeRequest_VALUE:
		return nil, status.Errorf(codes.InvalidArgument, "etcd facade: unknown sort target %d", r.SortTarget)
	case order != pb.RangeRequest_NONE && order != pb.RangeRequest_ASCEND && order != pb.RangeRequest_DESCEND:
		return nil, status.Errorf(codes.InvalidArgument, "etcd facade: unknown sort order %d", r.SortOrder)
	case len(r.Key) == 0:
		return nil, status.Error(codes.InvalidArgument, "etcdserver: key is not provided")
	}
	consistency := kvpb.ReadConsistency_LINEARIZABLE
	if r.Serializable {
		consistency = kvpb.ReadConsistency_STALE
	}
	if len(r.RangeEnd) == 0 {
		var g *kvpb.GetResponse
		err := retryNotApplied(ctx, func() (err error) {
			g, err = s.kv.Get(ctx, &kvpb.GetRequest{Key: r.Key, Consistency: consistency})
			return err
		})
		if err != nil {
			return nil, err
		}
		resp := &pb.RangeResponse{Header: header(g.Header, g.Header.GetAppliedIndex())}
		if g.Found {
			resp.Count = 1
			if !r.CountOnly {
				resp.Kvs = []*mvccpb.KeyValue{keyValue(r.Key, g.Value, r.KeysOnly)}
			}
		}
		return resp, nil
	}
	end := r.RangeEnd
	if bytes.Equal(end, []byte{0}) {
		end = nil // "\x00": every key from key on
	} else if bytes.Compare(r.Key, end) > 0 {
		end = r.Key // an empty range, still read for the header at the read point
	}
	// etcd counts every key of the range (count), whatever the limit, and
	// sorts the whole range before it applies the limit. The systems keep
	// no count: the range is read to its end, keeping only the pairs the
	// answer needs.
	limit := int64(0)
	if r.Limit > 0 && !r.CountOnly {
		limit = r.Limit
	}
	sorted := order == pb.RangeRequest_DESCEND || (order == pb.RangeRequest_ASCEND && r.SortTarget == pb.RangeRequest_VALUE)
	keep := func(n int64) bool { return !r.CountOnly && (limit == 0 || sorted || n < limit) }
	var (
		kvs   []*kvpb.KeyValue
		h     *kvpb.ResponseHeader
		count int64
	)
	from := r.Key
	for {
		var page *kvpb.ScanResponse
		err := retryNotApplied(ctx, func() (err error) {
			page, err = s.kv.Scan(ctx, &kvpb.ScanRequest{Start: from, End: end, Consistency: consistency})
			return err
		})
		if err != nil {
			return nil, err
		}
		if h == nil {
			h = page.Header
		}
		for _, kv := range page.Kvs {
			if keep(count) {
				kvs = append(kvs, kv)
			}
			count++
		}
		if !page.More || len(page.Kvs) == 0 {
			break
		}
		from = append(append([]byte(nil), page.Kvs[len(page.Kvs)-1].Key...), 0)
	}
	resp := &pb.RangeResponse{Header: header(h, h.GetAppliedIndex()), Count: count}
	if r.CountOnly {
		return resp, nil
	}
	if sorted {
		sortKVs(kvs, r.SortTarget, order)
	}
	if limit > 0 && count > limit {
		kvs, resp.More = kvs[:limit], true
	}
	resp.Kvs = make([]*mvccpb.KeyValue, len(kvs))
	for i, kv := range kvs {
		resp.Kvs[i] = keyValue(kv.Key, kv.Value, r.KeysOnly)
	}
	return resp, nil
}

// sortKVs sorts kvs (in ascending key order, as a scan returns them) by
// target in order; pairs with equal values keep their key order.
func sortKVs(kvs []*kvpb.KeyValue, target pb.RangeRequest_SortTarget, order pb.RangeRequest_SortOrder) {
	field := func(kv *kvpb.KeyValue) []byte { return kv.Key }
	if target == pb.RangeRequest_VALUE {
		field = func(kv *kvpb.KeyValue) []byte { return kv.Value }
	}
	sign := 1
	if order == pb.RangeRequest_DESCEND {
		sign = -1
	}
	slices.SortStableFunc(kvs, func(a, b *kvpb.KeyValue) int { return sign * bytes.Compare(field(a), field(b)) })
}

// keyValue is etcd's KeyValue of a pair. The systems keep no per-key
// history, so create_revision, mod_revision and version stay 0 (a value
// etcd never gives a live key) rather than a made-up revision.
func keyValue(key, value []byte, keysOnly bool) *mvccpb.KeyValue {
	kv := &mvccpb.KeyValue{Key: key}
	if !keysOnly {
		kv.Value = value
	}
	return kv
}

// Put writes one key.
func (s *KV) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	switch {
	case r.PrevKv:
		return nil, unimplemented("prev_kv")
	case r.Lease != 0 || r.IgnoreLease:
		return nil, unimplemented("leases")
	case r.IgnoreValue:
		return nil, unimplemented("ignore_value")
	}
	var p *kvpb.PutResponse
	err := retryNotApplied(ctx, func() (err error) {
		p, err = s.kv.Put(ctx, &kvpb.PutRequest{Key: r.Key, Value: r.Value})
		return err
	})
	if err != nil {
		return nil, err
	}
	return &pb.PutResponse{Header: header(p.Header, p.Index)}, nil
}

// notAppliedBackoff is the pause before a write that was surely not
// applied is sent again.
const notAppliedBackoff = 20 * time.Millisecond

// retryNotApplied calls call until it returns anything but Aborted (the
// node's "not applied; retry" or "read not served; retry": raft did not
// accept the proposal or read, e.g. a follower that does not know its new
// leader yet) or ctx ends. etcd's clients do not resend on that code, so a
// request during an election would fail although resending it is safe.
func retryNotApplied(ctx context.Context, call func() error) error {
	for {
		err := call()
		if status.Code(err) != codes.Aborted {
			return err
		}
		t := time.NewTimer(notAppliedBackoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// DeleteRange deletes one key.
func (s *KV) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	switch {
	case len(r.RangeEnd) > 0:
		return nil, unimplemented("deleting a range (not atomic here; delete its keys one by one)")
	case r.PrevKv:
		return nil, unimplemented("prev_kv")
	}
	var g *kvpb.GetResponse
	err := retryNotApplied(ctx, func() (err error) {
		g, err = s.kv.Get(ctx, &kvpb.GetRequest{Key: r.Key})
		return err
	})
	if err != nil {
		return nil, err
	}
	var d *kvpb.DeleteResponse
	err = retryNotApplied(ctx, func() (err error) {
		d, err = s.kv.Delete(ctx, &kvpb.DeleteRequest{Key: r.Key})
		return err
	})
	if err != nil {
		return nil, err
	}
	resp := &pb.DeleteRangeResponse{Header: header(d.Header, d.Index)}
	if g.Found {
		resp.Deleted = 1
	}
	return resp, nil
}

// Txn is Unimplemented: the systems have no multi-key transaction.
func (s *KV) Txn(context.Context, *pb.TxnRequest) (*pb.TxnResponse, error) {
	return nil, unimplemented("Txn (no multi-key transaction or compare-and-set)")
}

// Compact is Unimplemented: the systems keep no MVCC history.
func (s *KV) Compact(context.Context, *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	return nil, unimplemented("Compact (no MVCC history)")
}

// Watch is etcd's Watch service, which the systems cannot serve: they
// keep no history of revisions to watch from. Answering Unimplemented
// with a message tells etcd's clients why, where an unregistered service
// would answer "unknown service".
type Watch struct {
	pb.UnimplementedWatchServer
}

// Watch refuses the stream.
func (Watch) Watch(pb.Watch_WatchServer) error {
	return unimplemented("Watch (no history of revisions to watch from)")
}

// Maintenance answers etcd's Status from the node's Status (member, leader,
// Raft term, commit and applied index), so that etcd's tools and the
// harness's etcd client find the leader; version is "nezha-<system>" and
// the database sizes are 0. Every other Maintenance call is Unimplemented.
type Maintenance struct {
	pb.UnimplementedMaintenanceServer
	kv kvpb.KVServer
}

// NewMaintenance returns the Maintenance facade of kv.
func NewMaintenance(kv kvpb.KVServer) *Maintenance { return &Maintenance{kv: kv} }

// Status reports the node's Raft state.
func (m *Maintenance) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	st, err := m.kv.Status(ctx, &kvpb.StatusRequest{})
	if err != nil {
		return nil, err
	}
	return &pb.StatusResponse{
		Header: header(st.Header, st.Header.GetAppliedIndex()), Version: "nezha-" + st.Header.GetSystem(),
		Leader: st.Header.GetLeaderId(), RaftIndex: st.CommitIndex, RaftTerm: st.Header.GetTerm(),
		RaftAppliedIndex: st.Header.GetAppliedIndex(),
	}, nil
}

// Cluster answers etcd's MemberList from the node's Status: member ids are
// the Raft ids, names "node<id>", peer URLs the internal addresses and
// client URLs the kvpb addresses the node knows (not their -etcdAddress,
// which nodes do not exchange). Changing membership is Unimplemented.
type Cluster struct {
	pb.UnimplementedClusterServer
	kv kvpb.KVServer
}

// NewCluster returns the Cluster facade of kv.
func NewCluster(kv kvpb.KVServer) *Cluster { return &Cluster{kv: kv} }

// MemberList lists the members.
func (c *Cluster) MemberList(ctx context.Context, _ *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	st, err := c.kv.Status(ctx, &kvpb.StatusRequest{})
	if err != nil {
		return nil, err
	}
	resp := &pb.MemberListResponse{Header: header(st.Header, st.Header.GetAppliedIndex())}
	for _, m := range st.Members {
		pm := &pb.Member{ID: m.Id, Name: fmt.Sprintf("node%d", m.Id), PeerURLs: []string{"http://" + m.InternalAddress}}
		if m.Address != "" {
			pm.ClientURLs = []string{"http://" + m.Address}
		}
		resp.Members = append(resp.Members, pm)
	}
	return resp, nil
}
