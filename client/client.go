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
	"errors"
	"fmt"
	"strings"
	"sync"
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

// Client is safe for concurrent use.
type Client struct {
	// b serves every call: the node's kvpb API, or etcd's (Config.API).
	b backend
}

// backend is what a Client asks of a cluster: kvpbBackend over the
// harness's gRPC API, etcdBackend over etcd's Go client. Retries, batching
// and the classification of errors are the backend's.
type backend interface {
	put(ctx context.Context, key, value []byte, ttlMs uint64) (uint64, error)
	delete(ctx context.Context, key []byte) (uint64, error)
	get(ctx context.Context, key []byte) (value []byte, found bool, err error)
	scan(ctx context.Context, start, end []byte, limit int) ([]KeyValue, error)
	// status asks the server at addr (one attempt).
	status(ctx context.Context, addr string, req *kvpb.StatusRequest) (*kvpb.StatusResponse, error)
	takeSnapshot(ctx context.Context, addr string) (*kvpb.TakeSnapshotResponse, error)
	health(ctx context.Context, addr string) (healthpb.HealthCheckResponse_ServingStatus, error)
	// serverAddrs returns the addresses the client knows.
	serverAddrs() []string
	// learnMembers learns the members and the leader the statuses of
	// Discover name.
	learnMembers([]*kvpb.StatusResponse)
	close() error
}

// New connects lazily to cfg.Servers; it does not fail if they are down.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var (
		b   backend
		err error
	)
	if cfg.API == APIEtcd {
		b, err = newEtcdBackend(cfg)
	} else {
		b, err = newKVPBBackend(cfg)
	}
	if err != nil {
		return nil, err
	}
	return &Client{b: b}, nil
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

// attemptContext bounds ctx by an attempt's deadline (a timer), unless ctx
// ends sooner.
func attemptContext(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && !dl.After(deadline) {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, deadline)
}

// Close closes all connections.
func (c *Client) Close() error { return c.b.close() }

// Put writes key = value and returns the Raft index that applied it. A
// value of kvpb.LargeValueBytes or more is sent without a copy (gRPC's
// SendMsg contract): do not modify it until Put returns, nor afterwards if
// Put failed or was ambiguous (gRPC may still be sending it).
func (c *Client) Put(ctx context.Context, key, value []byte) (uint64, error) {
	return c.b.put(ctx, key, value, 0)
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
	return c.b.put(ctx, key, value, uint64((ttl+time.Millisecond-1)/time.Millisecond))
}

// Delete removes key (a no-op if absent) and returns the applying index.
func (c *Client) Delete(ctx context.Context, key []byte) (uint64, error) {
	return c.b.delete(ctx, key)
}

// Get returns the value of key and whether it exists.
func (c *Client) Get(ctx context.Context, key []byte) (value []byte, found bool, err error) {
	return c.b.get(ctx, key)
}

// Scan returns up to limit (0: all) pairs with start <= key < end in key
// order (empty end: no upper bound), following the server's paging. Each
// page is one linearizable read; a scan over several pages is not one
// atomic snapshot.
func (c *Client) Scan(ctx context.Context, start, end []byte, limit int) ([]KeyValue, error) {
	return c.b.scan(ctx, start, end, limit)
}

// Status asks the server at addr for its status (one attempt).
func (c *Client) Status(ctx context.Context, addr string, withStateHash bool) (*kvpb.StatusResponse, error) {
	return c.b.status(ctx, addr, &kvpb.StatusRequest{WithStateHash: withStateHash})
}

// StatusWithActivities is Status (without the state hash) with the
// node's activities from since on: its RocksDB compactions and write
// stalls, and the leader changes it saw (StatusResponse.activities;
// experiments draw them as windows). An etcd node reports none.
func (c *Client) StatusWithActivities(ctx context.Context, addr string, since time.Time) (*kvpb.StatusResponse, error) {
	return c.b.status(ctx, addr, &kvpb.StatusRequest{ActivitiesSinceUnixNanos: max(since.UnixNano(), 1)})
}

// TakeSnapshot asks the node at addr to make its applied state durable
// and compact its own Raft log up to it (kvpb.Admin's TakeSnapshot; one
// attempt). Not asked of etcd through its client: etcd compacts its log by
// itself (--snapshot-count).
func (c *Client) TakeSnapshot(ctx context.Context, addr string) (*kvpb.TakeSnapshotResponse, error) {
	return c.b.takeSnapshot(ctx, addr)
}

// Health asks the server at addr for its status in the standard gRPC
// health service (grpc.health.v1.Health/Check, service ""; one attempt):
// SERVING when the node knows a leader, NOT_SERVING while it does not or
// while it stops. Errors are gRPC's (Unavailable when the node is down);
// with the etcd API (an etcd cluster) it is not asked (ErrHealthNotAsked).
func (c *Client) Health(ctx context.Context, addr string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	return c.b.health(ctx, addr)
}

// ErrHealthNotAsked: Health is not asked of etcd through its client.
var ErrHealthNotAsked = errors.New("health not asked (etcd client)")

// Servers returns the addresses the client knows.
func (c *Client) Servers() []string {
	return c.b.serverAddrs()
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
	c.b.learnMembers(out)
	return out
}
