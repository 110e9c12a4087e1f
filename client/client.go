// Package client is the Go client of the kvpb.KV API that every tool of the
// harness uses (kv, bench, ycsb, check). With Config.API = APIEtcd the same
// Client drives an etcd cluster through etcd's own Go client instead (see
// etcdBackend for what etcd cannot answer). It finds the leader, sends writes
// to it, retries reads on leader change, and reports a write whose outcome is
// unknown as ambiguous (errors.Is(err, ErrAmbiguous)), never as failed: a
// linearizability checker must treat such a write as possibly applied.
//
// Retry rules (what is safe to resend):
//   - reads: any transient error (Aborted, Unavailable, DeadlineExceeded of
//     one attempt) is retried on the next server until the caller's context
//     ends;
//   - writes carry a client session (Raft dissertation section 6.3: a
//     random client id and a sequence number per write; the cluster applies
//     each sequence number once and answers a resent one with the first
//     copy's index), so every transient error is retried, on the next
//     server, until the write succeeds, fails definitely, or the caller's
//     context ends. The write is ambiguous only if it ends without an
//     answer after an attempt that may have reached the cluster (not
//     codes.Aborted, not a connection that could not be established).
package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/systems"
)

// Config configures a Client.
type Config struct {
	// Servers are client addresses (host:port) of cluster members. At least
	// one; the others are learned from Status if reachable.
	Servers []string
	// AttemptTimeout bounds one read attempt on one server, so that a read
	// sent to a partitioned node moves on. Default 2s.
	AttemptTimeout time.Duration
	// RetryBackoff is the pause before retrying on another server. Default
	// 50ms.
	RetryBackoff time.Duration
	// Consistency of Get and Scan. Default LINEARIZABLE.
	Consistency kvpb.ReadConsistency
	// MaxMessageBytes bounds gRPC messages both ways. Default 1 GiB.
	MaxMessageBytes int
	// API is the protocol of the servers: APINezha (default, also "") or
	// APIEtcd.
	API string
	// Unary sends every request as a unary call of its own. By default
	// (false) puts and deletes of values under kvpb.LargeValueBytes, and
	// gets, from all of the client's callers go over one Batch stream per
	// server (kvpb.KV.Batch: many operations per gRPC message each way),
	// which saves gRPC's per-call work; scans and large values are always
	// unary. A server without Batch is sent unary calls.
	Unary bool
	// EtcdNoFsync says that the etcd members run with --unsafe-no-fsync
	// (etcd's Status does not tell): Status then reports sync=false.
	EtcdNoFsync bool
}

// DefaultConfig returns a Config with the documented defaults.
func DefaultConfig(servers ...string) Config {
	return Config{
		Servers:         servers,
		AttemptTimeout:  2 * time.Second,
		RetryBackoff:    50 * time.Millisecond,
		MaxMessageBytes: 1 << 30,
	}
}

// Validate reports every problem with c at once.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Servers) == 0 {
		errs = append(errs, cmdline.Usagef("no servers given (-servers or -cluster)"))
	}
	for _, s := range c.Servers {
		if s == "" || !strings.Contains(s, ":") {
			errs = append(errs, cmdline.Usagef("server address %q is not host:port", s))
		}
	}
	if c.AttemptTimeout <= 0 {
		errs = append(errs, cmdline.Usagef("attempt timeout %v must be positive", c.AttemptTimeout))
	}
	if c.RetryBackoff < 0 {
		errs = append(errs, cmdline.Usagef("retry backoff %v must not be negative", c.RetryBackoff))
	}
	if c.MaxMessageBytes <= 0 {
		errs = append(errs, cmdline.Usagef("max message size %d must be positive", c.MaxMessageBytes))
	}
	if c.API != "" && c.API != APINezha && c.API != APIEtcd {
		errs = append(errs, cmdline.Usagef("client API %q is not %s or %s", c.API, APINezha, APIEtcd))
	}
	return errors.Join(errs...)
}

// ErrAmbiguous is matched (errors.Is) by every error of a write whose
// outcome is unknown: it may or may not have been applied.
var ErrAmbiguous = errors.New("outcome unknown")

// AmbiguousError wraps the cause of an ambiguous write.
type AmbiguousError struct{ Err error }

func (e *AmbiguousError) Error() string        { return "write outcome unknown: " + e.Err.Error() }
func (e *AmbiguousError) Unwrap() error        { return e.Err }
func (e *AmbiguousError) Is(target error) bool { return target == ErrAmbiguous }

// KeyValue is one scan result.
type KeyValue = systems.KeyValue

type server struct {
	addr  string
	cc    *grpc.ClientConn
	kv    kvpb.KVClient
	batch *batcher      // nil with Config.Unary
	id    atomic.Uint64 // Raft id, once learned
}

// Client is safe for concurrent use.
type Client struct {
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

	// etcd, if set, serves every call (Config.API = APIEtcd).
	etcd *etcdBackend

	// onPause, if set, runs before each pause between attempts (a test
	// hook: it lets a test end the caller's context at a known point of
	// the retry loop). Nil in production.
	onPause func()
}

// session is one client session: a random id and the sequence number of
// its last write.
type session struct {
	id, seq uint64
}

// New connects lazily to cfg.Servers; it does not fail if they are down.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg}
	c.leader.Store(-1)
	if cfg.API == APIEtcd {
		b, err := newEtcdBackend(cfg)
		if err != nil {
			return nil, err
		}
		c.etcd = b
		return c, nil
	}
	for _, a := range cfg.Servers {
		if _, err := c.add(a); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// DialOptions are the gRPC options the client uses; exported for tools that
// talk to the same servers.
// Each call returns options with a codec and buffer pool of their own
// (kvpb.Codec: gRPC's proto codec without the zeroing of every buffer).
func DialOptions(maxMessageBytes int) []grpc.DialOption {
	codec := kvpb.NewCodec()
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageBytes), grpc.MaxCallSendMsgSize(maxMessageBytes),
			grpc.ForceCodecV2(codec)),
		experimental.WithBufferPool(codec.Pool),
		grpc.WithInitialWindowSize(kvpb.StreamWindowBytes), grpc.WithInitialConnWindowSize(kvpb.ConnWindowBytes),
		grpc.WithWriteBufferSize(kvpb.ConnBufferBytes), grpc.WithReadBufferSize(kvpb.ConnBufferBytes),
		// Reconnect quickly after a node restarts (gRPC's default backoff
		// grows to two minutes).
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		}),
	}
}

func (c *Client) add(addr string) (*server, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.snapshot() {
		if s.addr == addr {
			return s, nil
		}
	}
	cc, err := grpc.NewClient(addr, DialOptions(c.cfg.MaxMessageBytes)...)
	if err != nil {
		return nil, cmdline.Usagef("server address %q: %v", addr, err)
	}
	s := &server{addr: addr, cc: cc, kv: kvpb.NewKVClient(cc)}
	if !c.cfg.Unary {
		s.batch = &batcher{kv: s.kv, sweepEvery: sweepPeriod(c.cfg.AttemptTimeout),
			learn: func(h *kvpb.ResponseHeader) { c.learn(s, h) }}
	}
	old := c.snapshot()
	ss := append(old[:len(old):len(old)], s) // always a new array: readers keep the old one
	c.servers.Store(&ss)
	return s, nil
}

// snapshot returns the servers the client knows; the caller must not
// change the slice.
func (c *Client) snapshot() []*server {
	if ss := c.servers.Load(); ss != nil {
		return *ss
	}
	return nil
}

// Close closes all connections.
func (c *Client) Close() error {
	if c.etcd != nil {
		return c.etcd.close()
	}
	var errs []error
	for _, s := range c.snapshot() {
		if s.batch != nil {
			s.batch.close()
		}
		errs = append(errs, s.cc.Close())
	}
	return errors.Join(errs...)
}

// learn records what a response header says about the cluster.
func (c *Client) learn(s *server, h *kvpb.ResponseHeader) {
	if h == nil {
		return
	}
	s.id.Store(h.NodeId)
	c.learnLeader(h.LeaderId)
}

// learnLeader points writes at the server whose Raft id is leaderID, if the
// client knows it.
func (c *Client) learnLeader(leaderID uint64) {
	if leaderID == 0 {
		return
	}
	for i, t := range c.snapshot() {
		if t.id.Load() == leaderID {
			c.leader.Store(int64(i))
			return
		}
	}
}

// pick returns the server to try on the given attempt: the known leader
// first, then round robin.
func (c *Client) pick(attempt int) *server {
	ss := c.snapshot()
	if l := c.leader.Load(); attempt == 0 && l >= 0 && int(l) < len(ss) {
		return ss[l]
	}
	return ss[c.next.Add(1)%uint64(len(ss))]
}

func (c *Client) forgetLeader(s *server) {
	for i, t := range c.snapshot() {
		if t == s {
			c.leader.CompareAndSwap(int64(i), -1)
		}
	}
}

// notSent reports whether err proves the request never reached a server.
func notSent(err error) bool {
	var ns *notSentError
	if errors.As(err, &ns) {
		return true
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	m := st.Message()
	return strings.Contains(m, "Error while dialing") || strings.Contains(m, "connection refused") ||
		strings.Contains(m, "no such host")
}

// definite reports errors that are final answers, not worth a retry.
func definite(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.ResourceExhausted, codes.DataLoss, codes.Unimplemented,
		codes.OutOfRange, codes.PermissionDenied, codes.Unauthenticated, codes.Internal:
		return true
	}
	return false
}

// takeSession returns an idle session, or a new one with a random id.
func (c *Client) takeSession() (*session, error) {
	c.sessMu.Lock()
	if n := len(c.sessions); n > 0 {
		s := c.sessions[n-1]
		c.sessions = c.sessions[:n-1]
		c.sessMu.Unlock()
		return s, nil
	}
	c.sessMu.Unlock()
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

func (c *Client) releaseSession(s *session) {
	c.sessMu.Lock()
	c.sessions = append(c.sessions, s)
	c.sessMu.Unlock()
}

func (c *Client) pause(ctx context.Context) error {
	if c.onPause != nil {
		c.onPause()
	}
	return pause(ctx, c.cfg.RetryBackoff)
}

// write sends a write, under a client session, until it succeeds, fails
// definitely, or ctx ends; it is ambiguous if it ends without an answer
// after an attempt that may have reached the cluster.
func (c *Client) write(ctx context.Context, call func(context.Context, *server, *session) (*kvpb.ResponseHeader, error)) error {
	sess, err := c.takeSession()
	if err != nil {
		return err
	}
	defer c.releaseSession(sess)
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
		s := c.pick(attempt)
		h, err := call(ctx, s, sess)
		if err == nil {
			c.learn(s, h)
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
		c.forgetLeader(s)
		if perr := c.pause(ctx); perr != nil {
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
func (c *Client) read(ctx context.Context, call func(ctx context.Context, s *server, deadline time.Time) (*kvpb.ResponseHeader, error)) error {
	var last error
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil {
			if last == nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
		}
		s := c.pick(attempt)
		h, err := call(ctx, s, time.Now().Add(c.cfg.AttemptTimeout))
		if err == nil {
			c.learn(s, h)
			return nil
		}
		if definite(err) {
			return err
		}
		last = fmt.Errorf("%s: %w", s.addr, err)
		c.forgetLeader(s)
		if perr := c.pause(ctx); perr != nil {
			return fmt.Errorf("%w (last error: %v)", perr, last)
		}
	}
}

// attemptContext bounds ctx by an attempt's deadline (a timer), unless ctx
// ends sooner.
func attemptContext(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && !dl.After(deadline) {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, deadline)
}

// Put writes key = value and returns the Raft index that applied it. A
// value of kvpb.LargeValueBytes or more is sent without a copy (gRPC's
// SendMsg contract): do not modify it until Put returns, nor afterwards if
// Put failed or was ambiguous (gRPC may still be sending it).
func (c *Client) Put(ctx context.Context, key, value []byte) (uint64, error) {
	if c.etcd != nil {
		return c.etcd.put(ctx, key, value)
	}
	return c.put(ctx, key, value, 0)
}

// PutWithTTL is Put with a time to live (rounded up to a millisecond; it
// must be positive): the leader that proposes the write sets its expiry
// time to its clock + ttl, and from then on every replica reads the key as
// absent. Systems whose state machine does not support TTLs refuse it with
// codes.Unimplemented (a definite error: nothing was written); so does
// etcd through this client.
func (c *Client) PutWithTTL(ctx context.Context, key, value []byte, ttl time.Duration) (uint64, error) {
	if ttl <= 0 {
		return 0, fmt.Errorf("put: TTL %v must be positive", ttl)
	}
	if c.etcd != nil {
		return 0, status.Errorf(codes.Unimplemented, "put: TTLs are not supported through etcd's API here")
	}
	return c.put(ctx, key, value, uint64((ttl+time.Millisecond-1)/time.Millisecond))
}

func (c *Client) put(ctx context.Context, key, value []byte, ttlMs uint64) (uint64, error) {
	var idx uint64
	err := c.write(ctx, func(ctx context.Context, s *server, sess *session) (*kvpb.ResponseHeader, error) {
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

// Delete removes key (a no-op if absent) and returns the applying index.
func (c *Client) Delete(ctx context.Context, key []byte) (uint64, error) {
	if c.etcd != nil {
		return c.etcd.delete(ctx, key)
	}
	var idx uint64
	err := c.write(ctx, func(ctx context.Context, s *server, sess *session) (*kvpb.ResponseHeader, error) {
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

// Get returns the value of key and whether it exists.
func (c *Client) Get(ctx context.Context, key []byte) (value []byte, found bool, err error) {
	if c.etcd != nil {
		return c.etcd.get(ctx, key)
	}
	err = c.read(ctx, func(ctx context.Context, s *server, deadline time.Time) (*kvpb.ResponseHeader, error) {
		req := &kvpb.GetRequest{Key: key, Consistency: c.cfg.Consistency}
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

// Scan returns up to limit (0: all) pairs with start <= key < end in key
// order (empty end: no upper bound), following the server's paging. Each
// page is one linearizable read; a scan over several pages is not one
// atomic snapshot.
func (c *Client) Scan(ctx context.Context, start, end []byte, limit int) ([]KeyValue, error) {
	if c.etcd != nil {
		return c.etcd.scan(ctx, start, end, limit)
	}
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
		err := c.read(ctx, func(ctx context.Context, s *server, deadline time.Time) (*kvpb.ResponseHeader, error) {
			ctx, cancel := attemptContext(ctx, deadline)
			defer cancel()
			r, err := s.kv.Scan(ctx, &kvpb.ScanRequest{Start: from, End: end, Limit: uint32(want), Consistency: c.cfg.Consistency})
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

// Status asks the server at addr for its status (one attempt).
func (c *Client) Status(ctx context.Context, addr string, withStateHash bool) (*kvpb.StatusResponse, error) {
	if c.etcd != nil {
		return c.etcd.status(ctx, addr, withStateHash)
	}
	s, err := c.add(addr)
	if err != nil {
		return nil, err
	}
	r, err := s.kv.Status(ctx, &kvpb.StatusRequest{WithStateHash: withStateHash})
	if err != nil {
		return nil, err
	}
	c.learn(s, r.Header)
	return r, nil
}

// StatusWithActivities is Status (without the state hash) with the
// node's activities from since on: its RocksDB compactions and write
// stalls, and the leader changes it saw (StatusResponse.activities;
// experiments draw them as windows). An etcd node reports none.
func (c *Client) StatusWithActivities(ctx context.Context, addr string, since time.Time) (*kvpb.StatusResponse, error) {
	if c.etcd != nil {
		return c.etcd.status(ctx, addr, false)
	}
	s, err := c.add(addr)
	if err != nil {
		return nil, err
	}
	r, err := s.kv.Status(ctx, &kvpb.StatusRequest{ActivitiesSinceUnixNanos: max(since.UnixNano(), 1)})
	if err != nil {
		return nil, err
	}
	c.learn(s, r.Header)
	return r, nil
}

// TakeSnapshot asks the node at addr to make its applied state durable
// and compact its own Raft log up to it (kvpb.Admin's TakeSnapshot; one
// attempt). Not asked of etcd through its client: etcd compacts its log by
// itself (--snapshot-count).
func (c *Client) TakeSnapshot(ctx context.Context, addr string) (*kvpb.TakeSnapshotResponse, error) {
	if c.etcd != nil {
		return nil, errors.New("take snapshot: not asked of etcd (it compacts its own log: --snapshot-count)")
	}
	s, err := c.add(addr)
	if err != nil {
		return nil, err
	}
	return kvpb.NewAdminClient(s.cc).TakeSnapshot(ctx, &kvpb.TakeSnapshotRequest{})
}

// Health asks the server at addr for its status in the standard gRPC
// health service (grpc.health.v1.Health/Check, service ""; one attempt):
// SERVING when the node knows a leader, NOT_SERVING while it does not or
// while it stops. Errors are gRPC's (Unavailable when the node is down);
// with the etcd API (an etcd cluster) it is not asked (ErrHealthNotAsked).
func (c *Client) Health(ctx context.Context, addr string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	if c.etcd != nil {
		return healthpb.HealthCheckResponse_UNKNOWN, ErrHealthNotAsked
	}
	s, err := c.add(addr)
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN, err
	}
	r, err := healthpb.NewHealthClient(s.cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN, err
	}
	return r.Status, nil
}

// ErrHealthNotAsked: Health is not asked of etcd through its client.
var ErrHealthNotAsked = errors.New("health not asked (etcd client)")

// Servers returns the addresses the client knows.
func (c *Client) Servers() []string {
	if c.etcd != nil {
		return append([]string(nil), c.cfg.Servers...)
	}
	var out []string
	for _, s := range c.snapshot() {
		out = append(out, s.addr)
	}
	return out
}

// Discover asks every known server for its status, learns the leader and
// the members' client addresses, and returns the statuses that answered.
func (c *Client) Discover(ctx context.Context) []*kvpb.StatusResponse {
	var (
		mu  sync.Mutex
		out []*kvpb.StatusResponse
		wg  sync.WaitGroup
	)
	for _, addr := range c.Servers() {
		wg.Add(1)
		go func(addr string) {
			defer wg.Done()
			r, err := c.Status(ctx, addr, false)
			if err != nil {
				return
			}
			mu.Lock()
			out = append(out, r)
			mu.Unlock()
		}(addr)
	}
	wg.Wait()
	if c.etcd != nil {
		return out // etcd's client finds members and leader itself
	}
	for _, r := range out {
		for _, m := range r.Members {
			if m.Address != "" {
				if s, err := c.add(m.Address); err == nil && s.id.Load() == 0 {
					s.id.Store(m.Id)
				}
			}
		}
		c.learnLeader(r.Header.LeaderId)
	}
	return out
}
