package client

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/systems"
)

// API names (Config.API): the client protocol the servers speak.
const (
	// APINezha is the harness's kvpb.KV API, served by the nodes of every
	// system the harness builds (the default).
	APINezha = "nezha"
	// APIEtcd is etcd v3's gRPC API, driven through etcd's own Go client
	// (go.etcd.io/etcd/client/v3): the external system etcd.
	APIEtcd = "etcd"
)

// EtcdSystem is the ResponseHeader.system the etcd backend reports.
const EtcdSystem = "etcd"

// etcdBackend serves a Client's calls over etcd's API. The operations go
// through one clientv3.Client over every server (etcd's balancer picks the
// member; a follower forwards a write to its leader); Status is asked of one
// member over a connection of its own.
//
// What the harness's Status carries and etcd cannot answer is degraded, not
// invented: node ids are the members' names "node<N>" (as cluster up names
// them; else the position of the member's client URL in Config.Servers, else
// 0); sync is !Config.EtcdNoFsync (etcd's Status does not report
// --unsafe-no-fsync); the Raft log range, compaction, GC rounds, storage
// shape and pid are left empty; the state hash is etcd's HashKV (a CRC of
// the key-value history up to the member's current revision) preceded by
// that revision, taken at the applied index of the same Status.
type etcdBackend struct {
	cfg Config
	kv  *clientv3.Client

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn // per address: Maintenance and Cluster calls
	ids   map[uint64]uint64           // etcd member id -> node id
	addrs map[uint64]string           // etcd member id -> client address
}

func newEtcdBackend(cfg Config) (*etcdBackend, error) {
	kv, err := clientv3.New(clientv3.Config{
		Endpoints:          cfg.Servers,
		Logger:             zap.NewNop(),
		MaxCallSendMsgSize: cfg.MaxMessageBytes,
		MaxCallRecvMsgSize: cfg.MaxMessageBytes,
		DialOptions:        []grpc.DialOption{grpc.WithConnectParams(connectParams())},
	})
	if err != nil {
		return nil, cmdline.Usagef("etcd client for %s: %v", strings.Join(cfg.Servers, ","), err)
	}
	return &etcdBackend{cfg: cfg, kv: kv, conns: map[string]*grpc.ClientConn{}, ids: map[uint64]uint64{}, addrs: map[uint64]string{}}, nil
}

func connectParams() grpc.ConnectParams {
	return grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
		MinConnectTimeout: time.Second,
	}
}

func (b *etcdBackend) close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	errs := []error{b.kv.Close()}
	for _, cc := range b.conns {
		errs = append(errs, cc.Close())
	}
	b.conns = map[string]*grpc.ClientConn{}
	return errors.Join(errs...)
}

// etcdError turns the errors of etcd's Go client into gRPC status errors
// (rpctypes.EtcdError carries a code but no status), so that status.Code
// and the harness's classification apply.
func etcdError(err error) error {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return status.Error(ee.Code(), ee.Error())
	}
	return err
}

// tooManyRequests: etcd refused the request before proposing it (its
// applied index trails its committed index by too much); safe to resend.
func tooManyRequests(err error) bool {
	return errors.Is(err, rpctypes.ErrTooManyRequests) || errors.Is(err, rpctypes.ErrGRPCRequestTooManyRequests) ||
		strings.Contains(err.Error(), rpctypes.ErrTooManyRequests.Error())
}

func invalid(err error) error { return status.Error(codes.InvalidArgument, err.Error()) }

// etcdWrite sends a write until it succeeds, fails definitely, or becomes
// ambiguous (the same rules as Client.write).
func (b *etcdBackend) write(ctx context.Context, call func(context.Context) (*pb.ResponseHeader, error)) (uint64, error) {
	var last error
	for {
		if ctx.Err() != nil {
			if last == nil {
				return 0, ctx.Err()
			}
			return 0, fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
		}
		h, err := call(ctx)
		if err == nil {
			return uint64(h.GetRevision()), nil
		}
		raw := err
		err = etcdError(err)
		switch {
		case tooManyRequests(raw) || notSent(err):
			last = err
			if perr := pause(ctx, b.cfg.RetryBackoff); perr != nil {
				return 0, fmt.Errorf("%w (last error: %v)", perr, last)
			}
		case definite(err):
			return 0, err
		default:
			return 0, &AmbiguousError{Err: err}
		}
	}
}

// read sends a read until it succeeds, fails definitely, or ctx ends; each
// attempt is bounded by AttemptTimeout.
func (b *etcdBackend) read(ctx context.Context, call func(context.Context) error) error {
	var last error
	for {
		if ctx.Err() != nil {
			if last == nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
		}
		actx, cancel := context.WithTimeout(ctx, b.cfg.AttemptTimeout)
		err := call(actx)
		cancel()
		if err == nil {
			return nil
		}
		err = etcdError(err)
		if definite(err) && !tooManyRequests(err) {
			return err
		}
		last = err
		if perr := pause(ctx, b.cfg.RetryBackoff); perr != nil {
			return fmt.Errorf("%w (last error: %v)", perr, last)
		}
	}
}

func (b *etcdBackend) readOpts() []clientv3.OpOption {
	if b.cfg.Consistency == kvpb.ReadConsistency_STALE {
		return []clientv3.OpOption{clientv3.WithSerializable()}
	}
	return nil
}

// Put and Delete return etcd's revision of the write where the harness's
// API returns the Raft index.
func (b *etcdBackend) put(ctx context.Context, key, value []byte, ttlMs uint64) (uint64, error) {
	if ttlMs > 0 {
		return 0, status.Errorf(codes.Unimplemented, "put: TTLs are not supported through etcd's API here")
	}
	if err := systems.CheckKey(key); err != nil {
		return 0, invalid(err)
	}
	k, v := string(key), string(value)
	return b.write(ctx, func(ctx context.Context) (*pb.ResponseHeader, error) {
		r, err := b.kv.Put(ctx, k, v)
		return (*pb.PutResponse)(r).GetHeader(), err
	})
}

func (b *etcdBackend) delete(ctx context.Context, key []byte) (uint64, error) {
	if err := systems.CheckKey(key); err != nil {
		return 0, invalid(err)
	}
	k := string(key)
	return b.write(ctx, func(ctx context.Context) (*pb.ResponseHeader, error) {
		r, err := b.kv.Delete(ctx, k)
		return (*pb.DeleteRangeResponse)(r).GetHeader(), err
	})
}

func (b *etcdBackend) get(ctx context.Context, key []byte) (value []byte, found bool, err error) {
	if err := systems.CheckKey(key); err != nil {
		return nil, false, invalid(err)
	}
	k := string(key)
	err = b.read(ctx, func(ctx context.Context) error {
		r, err := b.kv.Get(ctx, k, b.readOpts()...)
		if err != nil {
			return err
		}
		value, found = nil, len(r.Kvs) > 0
		if found {
			value = r.Kvs[0].Value
		}
		return nil
	})
	return value, found, err
}

// scan is one etcd Range: an atomic snapshot, whatever its size.
func (b *etcdBackend) scan(ctx context.Context, start, end []byte, limit int) ([]KeyValue, error) {
	if len(end) > 0 && string(start) > string(end) {
		return nil, invalid(fmt.Errorf("scan start %q is after end %q", start, end))
	}
	if len(start) == 0 {
		start = []byte{0} // etcd refuses an empty key; "\x00" is the first key
	}
	opts := b.readOpts()
	if len(end) == 0 {
		opts = append(opts, clientv3.WithFromKey())
	} else {
		opts = append(opts, clientv3.WithRange(string(end)))
	}
	if limit > 0 {
		opts = append(opts, clientv3.WithLimit(int64(limit)))
	}
	var out []KeyValue
	err := b.read(ctx, func(ctx context.Context) error {
		r, err := b.kv.Get(ctx, string(start), opts...)
		if err != nil {
			return err
		}
		out = make([]KeyValue, len(r.Kvs))
		for i, kv := range r.Kvs {
			out[i] = KeyValue{Key: kv.Key, Value: kv.Value}
		}
		return nil
	})
	return out, err
}

func (b *etcdBackend) conn(addr string) (*grpc.ClientConn, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cc, ok := b.conns[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithConnectParams(connectParams()))
	if err != nil {
		return nil, cmdline.Usagef("server address %q: %v", addr, err)
	}
	b.conns[addr] = cc
	return cc, nil
}

// nodeIDs maps etcd member ids to node ids (see etcdBackend), asking the
// member behind cc for the member list while some id is unknown.
func (b *etcdBackend) nodeIDs(ctx context.Context, cc *grpc.ClientConn, want ...uint64) (map[uint64]uint64, error) {
	b.mu.Lock()
	known := true
	for _, id := range want {
		if _, ok := b.ids[id]; !ok && id != 0 {
			known = false
		}
	}
	b.mu.Unlock()
	if !known {
		ml, err := pb.NewClusterClient(cc).MemberList(ctx, &pb.MemberListRequest{})
		if err != nil {
			return nil, etcdError(err)
		}
		b.mu.Lock()
		for _, m := range ml.Members {
			addr := ""
			if len(m.ClientURLs) > 0 {
				if u, err := url.Parse(m.ClientURLs[0]); err == nil {
					addr = u.Host
				}
			}
			b.addrs[m.ID] = addr
			if n, err := strconv.ParseUint(strings.TrimPrefix(m.Name, "node"), 10, 64); err == nil && strings.HasPrefix(m.Name, "node") {
				b.ids[m.ID] = n
			} else if i := slices.Index(b.cfg.Servers, addr); i >= 0 {
				b.ids[m.ID] = uint64(i + 1)
			}
		}
		b.mu.Unlock()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.ids), nil
}

// status asks the member at addr for its status (one attempt). etcd
// reports no activities (req.activities_since_unix_nanos).
func (b *etcdBackend) status(ctx context.Context, addr string, req *kvpb.StatusRequest) (*kvpb.StatusResponse, error) {
	cc, err := b.conn(addr)
	if err != nil {
		return nil, err
	}
	mc := pb.NewMaintenanceClient(cc)
	st, err := mc.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		return nil, etcdError(err)
	}
	self := st.GetHeader().GetMemberId()
	ids, err := b.nodeIDs(ctx, cc, self, st.Leader)
	if err != nil {
		return nil, err
	}
	state := "StateFollower"
	if st.Leader == self {
		state = "StateLeader"
	}
	r := &kvpb.StatusResponse{
		Header: &kvpb.ResponseHeader{NodeId: ids[self], LeaderId: ids[st.Leader], Term: st.RaftTerm,
			AppliedIndex: st.RaftAppliedIndex, System: EtcdSystem},
		RaftState:   state,
		CommitIndex: st.RaftIndex,
		Sync:        !b.cfg.EtcdNoFsync,
		Address:     addr,
	}
	b.mu.Lock()
	for mid, nid := range b.ids {
		r.Members = append(r.Members, &kvpb.Member{Id: nid, Address: b.addrs[mid]})
	}
	b.mu.Unlock()
	slices.SortFunc(r.Members, func(x, y *kvpb.Member) int { return int(x.Id) - int(y.Id) })
	if req.WithStateHash {
		h, err := mc.HashKV(ctx, &pb.HashKVRequest{})
		if err != nil {
			return nil, etcdError(err)
		}
		r.StateHash = binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, uint64(h.GetHeader().GetRevision())), h.Hash)
		r.StateHashIndex = r.Header.AppliedIndex
	}
	return r, nil
}

// takeSnapshot is not asked of etcd through its client: etcd compacts its
// log by itself (--snapshot-count).
func (b *etcdBackend) takeSnapshot(context.Context, string) (*kvpb.TakeSnapshotResponse, error) {
	return nil, errors.New("take snapshot: not asked of etcd (it compacts its own log: --snapshot-count)")
}

// health is not asked of etcd through its client (ErrHealthNotAsked).
func (b *etcdBackend) health(context.Context, string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	return healthpb.HealthCheckResponse_UNKNOWN, ErrHealthNotAsked
}

// serverAddrs returns Config.Servers: etcd's client finds the members
// itself.
func (b *etcdBackend) serverAddrs() []string { return append([]string(nil), b.cfg.Servers...) }

// learnMembers does nothing: etcd's client finds members and leader
// itself.
func (b *etcdBackend) learnMembers([]*kvpb.StatusResponse) {}

func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
