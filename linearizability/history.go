package linearizability

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/client"
)

// Status of a recorded operation.
const (
	// StatusOK: the operation returned normally.
	StatusOK = "ok"
	// StatusAmbiguous: a write whose outcome is unknown; it may or may not
	// have been applied. Checked as an operation that never returns.
	StatusAmbiguous = "ambiguous"
	// StatusFailed: a write that was definitely not applied, or a read that
	// got no answer. Not checked (it did not happen, or told nothing).
	StatusFailed = "failed"
)

// Op is one recorded operation, as saved in history.json.
type Op struct {
	// Client is the Porcupine client id: a logical client, whose operations
	// never overlap. A client whose write became ambiguous continues under
	// a new id.
	Client int `json:"client"`
	// Worker is the workload goroutine that issued the operation (-1 for
	// the final phase).
	Worker int `json:"worker"`
	// Node is the node the client is pinned to (0: any node).
	Node   uint64 `json:"node,omitempty"`
	Input  Input  `json:"input"`
	Output Output `json:"output"`
	// Call and Return are nanoseconds since the start of the run on one
	// monotonic clock. Return is math.MaxInt64 for an ambiguous write.
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
	// Index is the Raft index that applied a write.
	Index uint64 `json:"index,omitempty"`
}

// MaxModelValueBytes: longer values are replaced in the model (and in
// history.json) by a hash of them, see ModelValue.
const MaxModelValueBytes = 48

// ModelValue is how the model sees a value: the value itself if short and
// printable, else "sha256:<first 12 bytes in hex>/<length>". Written
// values are unique, so their hashes are too.
func ModelValue(b []byte) string {
	if len(b) <= MaxModelValueBytes && printable(b) {
		return string(b)
	}
	sum := sha256.Sum256(b)
	return fmt.Sprintf("sha256:%s/%d", hex.EncodeToString(sum[:12]), len(b))
}

func printable(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// Recorder collects the operations of every client of a run, with call and
// return times from one monotonic clock (time.Since(start)).
type Recorder struct {
	start   time.Time
	clients atomic.Int64
	mu      sync.Mutex
	ops     []Op
}

// NewRecorder returns a recorder whose clock starts at start.
func NewRecorder(start time.Time) *Recorder { return &Recorder{start: start} }

// Now returns the recorder's clock: nanoseconds since start.
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// Start returns the origin of the clock.
func (r *Recorder) Start() time.Time { return r.start }

func (r *Recorder) newClientID() int { return int(r.clients.Add(1) - 1) }

func (r *Recorder) add(op Op) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// Ops returns a copy of the recorded operations, in call order.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	out := append([]Op(nil), r.ops...)
	r.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].Call < out[j].Call })
	return out
}

// Client is a recording wrapper around the Go client for one logical
// client: every call is recorded with its call and return time. It is not
// safe for concurrent use (a logical client is sequential).
type Client struct {
	r      *Recorder
	c      *client.Client
	id     int
	worker int
	node   uint64
}

// Client wraps c. Worker and node are recorded with each operation (node:
// the node c is pinned to, or 0).
func (r *Recorder) Client(c *client.Client, worker int, node uint64) *Client {
	return &Client{r: r, c: c, id: r.newClientID(), worker: worker, node: node}
}

// ID returns the current Porcupine client id.
func (c *Client) ID() int { return c.id }

func (c *Client) begin(in Input) Op {
	return Op{Client: c.id, Worker: c.worker, Node: c.node, Input: in, Call: c.r.Now()}
}

// writeStatus classifies a write's error: ambiguous unless it proves that
// nothing was applied. The Go client reports unknown outcomes as
// client.ErrAmbiguous; a server's Internal error ("write outcome unknown")
// is treated as ambiguous too, whatever the client says.
func writeStatus(err error) string {
	switch {
	case err == nil:
		return StatusOK
	case errors.Is(err, client.ErrAmbiguous), status.Code(err) == codes.Internal:
		return StatusAmbiguous
	}
	return StatusFailed
}

func (c *Client) endWrite(op Op, index uint64, err error) error {
	op.Status = writeStatus(err)
	op.Index = index
	switch op.Status {
	case StatusOK:
		op.Return = c.r.Now()
	case StatusAmbiguous:
		op.Return = math.MaxInt64
		op.Output.Unknown = true
		op.Error = err.Error()
		c.id = c.r.newClientID() // the old client may still be "running"
	default:
		op.Return = c.r.Now()
		op.Error = err.Error()
	}
	c.r.add(op)
	return err
}

func (c *Client) endRead(op Op, err error) error {
	op.Return = c.r.Now()
	op.Status = StatusOK
	if err != nil {
		op.Status, op.Error = StatusFailed, err.Error()
	}
	c.r.add(op)
	return err
}

// Put writes key = value.
func (c *Client) Put(ctx context.Context, key string, value []byte) error {
	op := c.begin(Input{Kind: OpPut, Key: key, Value: ModelValue(value)})
	idx, err := c.c.Put(ctx, []byte(key), value)
	return c.endWrite(op, idx, err)
}

// Delete removes key.
func (c *Client) Delete(ctx context.Context, key string) error {
	op := c.begin(Input{Kind: OpDelete, Key: key})
	idx, err := c.c.Delete(ctx, []byte(key))
	return c.endWrite(op, idx, err)
}

// Get reads key.
func (c *Client) Get(ctx context.Context, key string) error {
	op := c.begin(Input{Kind: OpGet, Key: key})
	v, found, err := c.c.Get(ctx, []byte(key))
	if err == nil {
		op.Output = Output{Found: found}
		if found {
			op.Output.Value = ModelValue(v)
		}
	}
	return c.endRead(op, err)
}

// Scan reads [start, end) with limit (0: none; end "": no bound).
func (c *Client) Scan(ctx context.Context, start, end string, limit int) error {
	op := c.begin(Input{Kind: OpScan, Key: start, End: end, Limit: limit})
	var e []byte
	if end != "" {
		e = []byte(end)
	}
	kvs, err := c.c.Scan(ctx, []byte(start), e, limit)
	if err == nil {
		op.Output.KVs = make([]KV, len(kvs))
		for i, kv := range kvs {
			op.Output.KVs[i] = KV{Key: string(kv.Key), Value: ModelValue(kv.Value)}
		}
	}
	return c.endRead(op, err)
}

// metadata is shown in the visualization's tooltip.
func (op Op) metadata() string {
	s := fmt.Sprintf("client %d, worker %d", op.Client, op.Worker)
	if op.Node != 0 {
		s += fmt.Sprintf(", pinned to node %d", op.Node)
	}
	if op.Index != 0 {
		s += fmt.Sprintf(", raft index %d", op.Index)
	}
	s += fmt.Sprintf(", call %v", time.Duration(op.Call).Round(time.Microsecond))
	if op.Return != math.MaxInt64 {
		s += fmt.Sprintf(", return %v", time.Duration(op.Return).Round(time.Microsecond))
	}
	if op.Error != "" {
		s += ", error: " + op.Error
	}
	return s
}

// Operations turns recorded operations into Porcupine's: failed ones are
// dropped (a failed write was not applied; a failed read tells nothing),
// ambiguous writes become operations that never return.
func Operations(ops []Op) []porcupine.Operation {
	var out []porcupine.Operation
	for _, op := range ops {
		if op.Status == StatusFailed {
			continue
		}
		ret := op.Return
		if op.Status == StatusAmbiguous {
			ret = math.MaxInt64
		}
		out = append(out, porcupine.Operation{
			ClientId: op.Client,
			Input:    op.Input,
			Call:     op.Call,
			Output:   op.Output,
			Return:   ret,
			Metadata: op.metadata(),
		})
	}
	return out
}

// PatchStats says what Patch changed.
type PatchStats struct {
	// DroppedUnobserved: ambiguous puts whose value no read returned.
	DroppedUnobserved int `json:"dropped_unobserved"`
	// Closed: ambiguous puts whose value a read returned; their return is
	// set to the earliest return of such a read.
	Closed int `json:"closed"`
}

// Patch returns a history that is linearizable if and only if ops is, and
// is much cheaper to check (as etcd's robustness tests do). Every put
// writes a unique value, so for a put of unknown outcome:
//   - if no read returned its value, it can be dropped: placing it at the
//     very end of a linearization is always possible (nothing observes it
//     there), and removing it from a linearization that applied it earlier
//     changes no read's result (no read saw the value);
//   - if reads returned it, it must be linearized before the first of them
//     returned, so its return can be set to that time (not before its call).
//
// Deletes of unknown outcome carry no value and stay open.
func Patch(ops []porcupine.Operation) ([]porcupine.Operation, PatchStats) {
	firstSeen := map[string]int64{}
	see := func(v string, t int64) {
		if old, ok := firstSeen[v]; !ok || t < old {
			firstSeen[v] = t
		}
	}
	for _, op := range ops {
		in := op.Input.(Input)
		out := op.Output.(Output)
		switch in.Kind {
		case OpGet:
			if out.Found {
				see(out.Value, op.Return)
			}
		case OpScan:
			for _, kv := range out.KVs {
				see(kv.Value, op.Return)
			}
		}
	}
	var st PatchStats
	out := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		in := op.Input.(Input)
		if in.Kind == OpPut && op.Return == math.MaxInt64 {
			t, seen := firstSeen[in.Value]
			if !seen {
				st.DroppedUnobserved++
				continue
			}
			op.Return = max(t, op.Call)
			st.Closed++
		}
		out = append(out, op)
	}
	return out, st
}
