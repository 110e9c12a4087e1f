package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

// kvpbBackend serves a Client's calls over the harness's own API (kvpb.KV,
// kvpb.Admin): it finds the leader, batches small requests on one stream
// per server (batch.go) unless Config.Unary, and retries as the package
// comment says.
type kvpbBackend struct {
	cfg Config
	mu  sync.Mutex // serializes add, the writer of servers
	// servers is replaced, never changed in place (under mu), so that
	// every request reads it without a lock or a copy.
	servers atomic.Pointer[[]*server]
	leader  atomic.Int64 // index into servers, -1 if unknown
	next    atomic.Uint64

	// sessions not in use: a write takes one for its duration, so each
	// session has at most one write in flight (its sequence numbers are in
	// the order of its writes).
	sessMu   sync.Mutex
	sessions []*session

	// onPause, if set, runs before each pause between attempts (a test
	// hook: it lets a test end the caller's context at a known point of
	// the retry loop). Nil in production.
	onPause func()
}

func newKVPBBackend(cfg Config) (*kvpbBackend, error) {
	k := &kvpbBackend{cfg: cfg}
	k.leader.Store(-1)
	for _, a := range cfg.Servers {
		if _, err := k.add(a); err != nil {
			k.close()
			return nil, err
		}
	}
	return k, nil
}

// session is one client session: a random id and the sequence number of
// its last write.
type session struct {
	id, seq uint64
}

type server struct {
	addr  string
	cc    *grpc.ClientConn
	kv    kvpb.KVClient
	batch *batcher      // nil with Config.Unary
	id    atomic.Uint64 // Raft id, once learned
}

func (k *kvpbBackend) add(addr string) (*server, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, s := range k.snapshot() {
		if s.addr == addr {
			return s, nil
		}
	}
	cc, err := grpc.NewClient(addr, DialOptions(k.cfg.MaxMessageBytes)...)
	if err != nil {
		return nil, cmdline.Usagef("server address %q: %v", addr, err)
	}
	s := &server{addr: addr, cc: cc, kv: kvpb.NewKVClient(cc)}
	if !k.cfg.Unary {
		s.batch = &batcher{kv: s.kv, sweepEvery: sweepPeriod(k.cfg.AttemptTimeout),
			learn: func(h *kvpb.ResponseHeader) { k.learn(s, h) }}
	}
	old := k.snapshot()
	ss := append(old[:len(old):len(old)], s) // always a new array: readers keep the old one
	k.servers.Store(&ss)
	return s, nil
}

// snapshot returns the servers the client knows; the caller must not
// change the slice.
func (k *kvpbBackend) snapshot() []*server {
	if ss := k.servers.Load(); ss != nil {
		return *ss
	}
	return nil
}

// learn records what a response header says about the cluster.
func (k *kvpbBackend) learn(s *server, h *kvpb.ResponseHeader) {
	if h == nil {
		return
	}
	s.id.Store(h.NodeId)
	k.learnLeader(h.LeaderId)
}

// learnLeader points writes at the server whose Raft id is leaderID, if the
// client knows it.
func (k *kvpbBackend) learnLeader(leaderID uint64) {
	if leaderID == 0 {
		return
	}
	for i, t := range k.snapshot() {
		if t.id.Load() == leaderID {
			k.leader.Store(int64(i))
			return
		}
	}
}

// pick returns the server to try on the given attempt: the known leader
// first, then round robin.
func (k *kvpbBackend) pick(attempt int) *server {
	ss := k.snapshot()
	if l := k.leader.Load(); attempt == 0 && l >= 0 && int(l) < len(ss) {
		return ss[l]
	}
	return ss[k.next.Add(1)%uint64(len(ss))]
}

func (k *kvpbBackend) forgetLeader(s *server) {
	for i, t := range k.snapshot() {
		if t == s {
			k.leader.CompareAndSwap(int64(i), -1)
		}
	}
}

// takeSession returns an idle session, or a new one with a random id.
func (k *kvpbBackend) takeSession() (*session, error) {
	k.sessMu.Lock()
	if n := len(k.sessions); n > 0 {
		s := k.sessions[n-1]
		k.sessions = k.sessions[:n-1]
		k.sessMu.Unlock()
		return s, nil
	}
	k.sessMu.Unlock()
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("client session id: %w", err)
		}
		if id := binary.LittleEndian.Uint64(b[:]); id != 0 {
			return &session{id: id}, nil
		}
	}
}

func (k *kvpbBackend) releaseSession(s *session) {
	k.sessMu.Lock()
	k.sessions = append(k.sessions, s)
	k.sessMu.Unlock()
}

func (k *kvpbBackend) pause(ctx context.Context) error {
	if k.onPause != nil {
		k.onPause()
	}
	return pause(ctx, k.cfg.RetryBackoff)
}

// write sends a write, under a client session, until it succeeds, fails
// definitely, or ctx ends; it is ambiguous if it ends without an answer
// after an attempt that may have reached the cluster.
func (k *kvpbBackend) write(ctx context.Context, call func(context.Context, *server, *session) (*kvpb.ResponseHeader, error)) error {
	sess, err := k.takeSession()
	if err != nil {
		return err
	}
	defer k.releaseSession(sess)
	sess.seq++
	var last error
	mayHaveApplied := false
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil {
			err := ctx.Err()
			if last != nil {
				err = fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
			}
			if mayHaveApplied {
				return &AmbiguousError{Err: err}
			}
			return err
		}
		s := k.pick(attempt)
		h, err := call(ctx, s, sess)
		if err == nil {
			k.learn(s, h)
			return nil
		}
		switch {
		case definite(err):
			if mayHaveApplied || status.Code(err) == codes.Internal {
				return &AmbiguousError{Err: fmt.Errorf("%s: %w", s.addr, err)}
			}
			return err
		case status.Code(err) == codes.Aborted || notSent(err):
			last = err
		default:
			// The attempt may have reached the cluster: resend under the
			// same session, which the cluster applies at most once.
			mayHaveApplied = true
			last = fmt.Errorf("%s: %w", s.addr, err)
		}
		k.forgetLeader(s)
		if perr := k.pause(ctx); perr != nil {
			err := fmt.Errorf("%w (last error: %v)", perr, last)
			if mayHaveApplied {
				return &AmbiguousError{Err: err}
			}
			return err
		}
	}
}

// read sends a read until it succeeds, fails definitely, or ctx ends.
// call makes one attempt on a server, which must end by the attempt's
// deadline (AttemptTimeout from its start): a batched read gives it to the
// stream's sweeper (no timer per read), a unary one bounds its context by
// it (attemptContext).
func (k *kvpbBackend) read(ctx context.Context, call func(ctx context.Context, s *server, deadline time.Time) (*kvpb.ResponseHeader, error)) error {
	var last error
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil {
			if last == nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
		}
		s := k.pick(attempt)
		h, err := call(ctx, s, time.Now().Add(k.cfg.AttemptTimeout))
		if err == nil {
			k.learn(s, h)
			return nil
		}
		if definite(err) {
			return err
		}
		last = fmt.Errorf("%s: %w", s.addr, err)
		k.forgetLeader(s)
		if perr := k.pause(ctx); perr != nil {
			return fmt.Errorf("%w (last error: %v)", perr, last)
		}
	}
}

func (k *kvpbBackend) put(ctx context.Context, key, value []byte, ttlMs uint64) (uint64, error) {
	var idx uint64
	err := k.write(ctx, func(ctx context.Context, s *server, sess *session) (*kvpb.ResponseHeader, error) {
		req := &kvpb.PutRequest{Key: key, Value: value, ClientId: sess.id, Seq: sess.seq, TtlMs: ttlMs}
		if len(value) < kvpb.LargeValueBytes {
			br, err := s.batchOp(ctx, &kvpb.BatchOp{Op: &kvpb.BatchOp_Put{Put: req}}, len(key)+len(value), time.Time{})
			if err == nil {
				idx = br.GetPut().GetIndex()
				return br.GetPut().GetHeader(), nil
			}
			if err != errNoBatch {
				return nil, err
			}
		}
		r, err := s.kv.Put(ctx, req)
		if err != nil {
			return nil, err
		}
		idx = r.Index
		return r.Header, nil
	})
	return idx, err
}

// close closes every connection.
func (k *kvpbBackend) close() error {
	var errs []error
	for _, s := range k.snapshot() {
		if s.batch != nil {
			s.batch.close()
		}
		errs = append(errs, s.cc.Close())
	}
	return errors.Join(errs...)
}

func (k *kvpbBackend) delete(ctx context.Context, key []byte) (uint64, error) {
	var idx uint64
	err := k.write(ctx, func(ctx context.Context, s *server, sess *session) (*kvpb.ResponseHeader, error) {
		req := &kvpb.DeleteRequest{Key: key, ClientId: sess.id, Seq: sess.seq}
		br, err := s.batchOp(ctx, &kvpb.BatchOp{Op: &kvpb.BatchOp_Delete{Delete: req}}, len(key), time.Time{})
		if err == nil {
			idx = br.GetDelete().GetIndex()
			return br.GetDelete().GetHeader(), nil
		}
		if err != errNoBatch {
			return nil, err
		}
		r, err := s.kv.Delete(ctx, req)
		if err != nil {
			return nil, err
		}
		idx = r.Index
		return r.Header, nil
	})
	return idx, err
}

func (k *kvpbBackend) get(ctx context.Context, key []byte) (value []byte, found bool, err error) {
	err = k.read(ctx, func(ctx context.Context, s *server, deadline time.Time) (*kvpb.ResponseHeader, error) {
		req := &kvpb.GetRequest{Key: key, Consistency: k.cfg.Consistency}
		br, err := s.batchOp(ctx, &kvpb.BatchOp{Op: &kvpb.BatchOp_Get{Get: req}}, len(key), deadline)
		if err == nil {
			value, found = br.GetGet().GetValue(), br.GetGet().GetFound()
			return br.GetGet().GetHeader(), nil
		}
		if err != errNoBatch {
			return nil, err
		}
		ctx, cancel := attemptContext(ctx, deadline)
		defer cancel()
		r, err := s.kv.Get(ctx, req)
		if err != nil {
			return nil, err
		}
		value, found = r.Value, r.Found
		return r.Header, nil
	})
	return value, found, err
}

func (k *kvpbBackend) scan(ctx context.Context, start, end []byte, limit int) ([]KeyValue, error) {
	var out []KeyValue
	from := start
	for {
		want := 0
		if limit > 0 {
			// ScanRequest.limit is a uint32: a larger limit asks for
			// at most that many per page (not the limit modulo 2^32).
			want = min(limit-len(out), math.MaxUint32)
		}
		var page *kvpb.ScanResponse
		err := k.read(ctx, func(ctx context.Context, s *server, deadline time.Time) (*kvpb.ResponseHeader, error) {
			ctx, cancel := attemptContext(ctx, deadline)
			defer cancel()
			r, err := s.kv.Scan(ctx, &kvpb.ScanRequest{Start: from, End: end, Limit: uint32(want), Consistency: k.cfg.Consistency})
			if err != nil {
				return nil, err
			}
			page = r
			return r.Header, nil
		})
		if err != nil {
			return out, err
		}
		for _, kv := range page.Kvs {
			out = append(out, KeyValue{Key: kv.Key, Value: kv.Value})
		}
		if !page.More || len(page.Kvs) == 0 || (limit > 0 && len(out) >= limit) {
			return out, nil
		}
		from = append(append([]byte(nil), page.Kvs[len(page.Kvs)-1].Key...), 0)
	}
}

func (k *kvpbBackend) status(ctx context.Context, addr string, req *kvpb.StatusRequest) (*kvpb.StatusResponse, error) {
	s, err := k.add(addr)
	if err != nil {
		return nil, err
	}
	r, err := s.kv.Status(ctx, req)
	if err != nil {
		return nil, err
	}
	k.learn(s, r.Header)
	return r, nil
}

func (k *kvpbBackend) takeSnapshot(ctx context.Context, addr string) (*kvpb.TakeSnapshotResponse, error) {
	s, err := k.add(addr)
	if err != nil {
		return nil, err
	}
	return kvpb.NewAdminClient(s.cc).TakeSnapshot(ctx, &kvpb.TakeSnapshotRequest{})
}

func (k *kvpbBackend) health(ctx context.Context, addr string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	s, err := k.add(addr)
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN, err
	}
	r, err := healthpb.NewHealthClient(s.cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN, err
	}
	return r.Status, nil
}

func (k *kvpbBackend) serverAddrs() []string {
	var out []string
	for _, s := range k.snapshot() {
		out = append(out, s.addr)
	}
	return out
}

// learnMembers adds the members the statuses name and learns the leader.
func (k *kvpbBackend) learnMembers(out []*kvpb.StatusResponse) {
	for _, r := range out {
		for _, m := range r.Members {
			if m.Address != "" {
				if s, err := k.add(m.Address); err == nil && s.id.Load() == 0 {
					s.id.Store(m.Id)
				}
			}
		}
		k.learnLeader(r.Header.LeaderId)
	}
}
