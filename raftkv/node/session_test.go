package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/systems"
)

func TestSessionTableDecide(t *testing.T) {
	tb := newSessionTable(3)
	check := func(index, client, seq uint64, want sessionVerdict, wantFirst uint64) {
		t.Helper()
		v, first := tb.decide(index, client, seq)
		if v != want || (want != sessionStale && first != wantFirst) {
			t.Fatalf("decide(%d, %d, %d) = %v %d, want %v %d", index, client, seq, v, first, want, wantFirst)
		}
	}
	check(1, 7, 1, sessionApply, 1)
	check(2, 7, 1, sessionDuplicate, 1) // a resend
	check(3, 7, 2, sessionApply, 3)
	check(4, 7, 1, sessionStale, 0) // a late copy of seq 1
	check(5, 8, 1, sessionApply, 5)
	check(6, 9, 1, sessionApply, 6)
	check(7, 7, 2, sessionDuplicate, 3) // touches 7: 8 is now the least recently used
	check(8, 10, 1, sessionApply, 8)    // evicts 8
	if _, ok := tb.m[8]; ok || tb.lru.Len() != 3 {
		t.Fatalf("client 8 not evicted: %d sessions", tb.lru.Len())
	}
	check(9, 8, 1, sessionApply, 9) // forgotten: applied as new; evicts 9
	tb.index = 9

	// The encoding keeps the order of use: a decoded table evicts the same
	// session next.
	dec, err := decodeSessionTable(tb.encode(), 3)
	if err != nil {
		t.Fatal(err)
	}
	if dec.index != 9 || dec.lru.Len() != 3 {
		t.Fatalf("decoded index %d with %d sessions", dec.index, dec.lru.Len())
	}
	for _, x := range []*sessionTable{tb, dec} {
		x.decide(10, 11, 1)
		if _, ok := x.m[7]; ok {
			t.Fatal("client 7 (least recently used) survived an eviction")
		}
	}
	if string(tb.encode()) != string(dec.encode()) {
		t.Fatal("a decoded table diverged from the original")
	}
	bad := tb.encode()
	bad[len(bad)/2] ^= 1
	if _, err := decodeSessionTable(bad, 3); !errors.Is(err, errSessionsCorrupt) {
		t.Fatalf("a flipped byte decoded: %v", err)
	}
	// A decoded table under a smaller limit forgets its oldest sessions.
	if small, err := decodeSessionTable(tb.encode(), 1); err != nil || small.lru.Len() != 1 || small.m[11] == nil {
		t.Fatalf("decode under a limit of 1: %v", err)
	}
}

func TestSessionTableFold(t *testing.T) {
	ents := []raftpb.Entry{{Index: 1}, {Index: 2}, {Index: 3}}
	for i, c := range []systems.Command{
		{Op: systems.OpPut, RequestID: 1, ClientID: 5, Seq: 1, Key: []byte("k"), Value: []byte("a")},
		{Op: systems.OpPut, RequestID: 2, Key: []byte("k"), Value: []byte("b")},
		{Op: systems.OpDelete, RequestID: 3, ClientID: 5, Seq: 1, Key: []byte("k")},
	} {
		ents[i].Data = systems.AppendCommand(nil, &c)
	}
	tb := newSessionTable(10)
	if _, err := tb.fold(ents, nil); err != nil {
		t.Fatal(err)
	}
	if s := tb.m[5].Value.(*session); tb.index != 3 || s.seq != 1 || s.index != 1 {
		t.Fatalf("folded to index %d, session %+v", tb.index, *s)
	}
	if _, err := tb.fold(ents[:1], nil); err == nil {
		t.Fatal("folding entry 1 into a table at 3 succeeded")
	}
}

// randomSessionLog returns n entries (index i+1 at i) as a cluster's
// clients write them: most carry a session of one of clients client ids,
// with new, resent, late and skipping sequence numbers; some carry no
// session, some are empty (a new leader's entry), conf changes or
// undecodable.
func randomSessionLog(r *rand.Rand, n, clients int) []raftpb.Entry {
	seqs := make([]uint64, clients+1)
	ents := make([]raftpb.Entry, n)
	for i := range ents {
		e := raftpb.Entry{Index: uint64(i + 1), Term: 1, Type: raftpb.EntryNormal}
		c := systems.Command{Op: systems.OpPut, RequestID: uint64(i + 1), Key: []byte("k"), Value: []byte("v")}
		switch p := r.IntN(100); {
		case p < 3:
			e.Type, e.Data = raftpb.EntryConfChange, []byte{0x08, 0x01}
		case p < 6:
			e.Data = []byte{0xff, 0x01} // undecodable: a no-op
		case p < 9:
			// empty: a new leader's entry
		case p < 20:
			e.Data = systems.AppendCommand(nil, &c)
		default:
			id := 1 + r.IntN(clients)
			switch q := r.IntN(10); {
			case q < 6 || seqs[id] == 0:
				seqs[id]++ // the next write
			case q < 8:
				// a resend of the last one
			case q < 9:
				seqs[id] += 1 + uint64(r.IntN(3)) // writes that never committed
			}
			c.ClientID, c.Seq = uint64(id), seqs[id]
			if q := r.IntN(10); q == 0 && seqs[id] > 1 {
				c.Seq = seqs[id] - 1 - uint64(r.IntN(int(seqs[id]-1))) // a late copy
			}
			if r.IntN(4) == 0 {
				c.Op, c.Value = systems.OpDelete, nil
			}
			e.Data = systems.AppendCommand(nil, &c)
		}
		ents[i] = e
	}
	return ents
}

// The table at each compaction point built from the queued deltas (and,
// after an overflow, the log entries the queue lost) is the table built
// from the log, byte for byte, over a seeded random history with evictions
// (4 sessions kept of 12 clients). With room for every delta, no
// compaction reads the log; with a queue of 150, overflows happen and the
// compactions after them read only the entries the queue lost.
func TestSessionDeltasMatchLog(t *testing.T) {
	for _, tc := range []struct {
		name      string
		maxDeltas int
	}{{"unbounded", 1 << 20}, {"overflowing", 150}} {
		t.Run(tc.name, func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			r := rand.New(rand.NewPCG(seed, 0x5e55))
			const maxSessions, entries = 4, 3000
			ents := randomSessionLog(r, entries, 12)
			base := newSessionTable(maxSessions) // the node's sessBase
			cur := newSessionTable(maxSessions)  // the apply goroutine's
			q := newSessionDeltas(tc.maxDeltas)
			var logFolded, compactions, fromDeltas, overflows int
			var ds []sessionDelta
			for cur.index < entries {
				// Apply a batch.
				end := min(cur.index+1+uint64(r.IntN(50)), entries)
				var err error
				if ds, err = cur.fold(ents[cur.index:end], ds[:0]); err != nil {
					t.Fatal(err)
				}
				if q.push(ds, cur.index) {
					overflows++
				}
				if r.IntN(4) != 0 {
					continue
				}
				// Compact to a random applied index.
				index := base.index + uint64(r.IntN(int(cur.index-base.index)+1))
				logTo, qds := q.plan(base.index, index)
				next := base.clone()
				if logTo == next.index && index > next.index {
					fromDeltas++
				}
				if logTo > next.index {
					logFolded += int(logTo - next.index)
					if _, err := next.fold(ents[next.index:logTo], nil); err != nil {
						t.Fatal(err)
					}
				}
				if err := next.foldDeltas(qds, index); err != nil {
					t.Fatalf("compaction to %d: %v", index, err)
				}
				want := base.clone()
				if _, err := want.fold(ents[want.index:index], nil); err != nil {
					t.Fatal(err)
				}
				if string(next.encode()) != string(want.encode()) {
					t.Fatalf("compaction to %d: the table from deltas differs from the table from the log", index)
				}
				base = next
				q.trim(index)
				compactions++
			}
			t.Logf("%d compactions (%d from deltas alone), %d overflows, %d entries folded from the log, %d sessions at the end",
				compactions, fromDeltas, q.overflows, logFolded, base.lru.Len())
			if compactions < 10 || base.lru.Len() != maxSessions {
				t.Fatalf("%d compactions, %d sessions: the history does not exercise the fold", compactions, base.lru.Len())
			}
			switch {
			case tc.maxDeltas > entries && (logFolded != 0 || q.overflows != 0):
				t.Fatalf("an unbounded queue overflowed %d times; %d entries folded from the log", q.overflows, logFolded)
			case tc.maxDeltas < entries && (q.overflows < 2 || overflows != 1 || logFolded == 0 || fromDeltas == 0):
				t.Fatalf("a queue of %d: %d overflows (%d first), %d entries folded from the log, %d compactions from deltas alone",
					tc.maxDeltas, q.overflows, overflows, logFolded, fromDeltas)
			}
		})
	}
}

// A snapshot, or a restart, resets the queue to its table; a compaction
// whose base does not match the queue reads the log.
func TestSessionDeltasReset(t *testing.T) {
	q := newSessionDeltas(10)
	q.push([]sessionDelta{{index: 2, client: 1, seq: 1}, {index: 5, client: 2, seq: 1}}, 6)
	if logTo, ds := q.plan(0, 5); logTo != 0 || len(ds) != 2 {
		t.Fatalf("plan(0, 5) = %d, %d deltas; want 0, 2", logTo, len(ds))
	}
	if logTo, _ := q.plan(0, 7); logTo != 7 {
		t.Fatalf("plan beyond the queue: log up to %d, want 7", logTo)
	}
	q.trim(4)
	if logTo, ds := q.plan(4, 6); logTo != 4 || len(ds) != 1 || ds[0].index != 5 {
		t.Fatalf("after trim(4): plan(4, 6) = %d, %v", logTo, ds)
	}
	if logTo, _ := q.plan(0, 6); logTo != 6 {
		t.Fatalf("a base the queue does not start at: log up to %d, want 6", logTo)
	}
	q.reset(100) // a snapshot at 100
	q.push(nil, 103)
	if logTo, ds := q.plan(100, 103); logTo != 100 || len(ds) != 0 {
		t.Fatalf("after reset(100): plan(100, 103) = %d, %v", logTo, ds)
	}
	tb := newSessionTable(3)
	if err := tb.foldDeltas([]sessionDelta{{index: 0, client: 1, seq: 1}}, 3); err == nil {
		t.Fatal("folded a delta at index 0 into a table at 0")
	}
	if err := tb.foldDeltas([]sessionDelta{{index: 4, client: 1, seq: 1}}, 3); err == nil {
		t.Fatal("folded a delta above the target index")
	}
}

// rawKV is a kvpb client of one node, to send writes with chosen sessions.
func rawKV(t *testing.T, addr string) kvpb.KVClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, client.DialOptions(1<<20)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return kvpb.NewKVClient(cc)
}

// Compactions of a running node move the table at the compaction point
// from the deltas the apply goroutine queued, without reading the log, to
// the table the log gives; after the queue overflowed, one compaction
// reads the entries the queue lost from the log, and the next ones again
// read nothing.
func TestCompactionFoldsSessionDeltas(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0xc0))
	tc := startCluster(t, 1)
	tc.waitLeader(10 * time.Second)
	n := tc.nodes[0]
	kv := rawKV(t, tc.cfgs[0].Address)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seqs := map[uint64]uint64{}
	write := func(count int) {
		t.Helper()
		for range count {
			req := &kvpb.PutRequest{Key: []byte("k"), Value: []byte("v")}
			if r.IntN(5) != 0 { // else no session
				id := 1 + uint64(r.IntN(30))
				switch q := r.IntN(10); {
				case q < 7 || seqs[id] == 0:
					seqs[id]++
				case q < 9:
					// a resend
				default:
					seqs[id]++
					req.ClientId, req.Seq = id, seqs[id]
					if _, err := kv.Put(ctx, req); err != nil {
						t.Fatal(err)
					}
					req.Seq = seqs[id] - 1 // and then a late copy of an earlier write
					if _, err := kv.Put(ctx, req); status.Code(err) != codes.Aborted {
						t.Fatalf("a late copy: %v, want Aborted", err)
					}
					continue
				}
				req.ClientId, req.Seq = id, seqs[id]
			}
			if _, err := kv.Put(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
	}
	compact := func() uint64 { t.Helper(); return compactAndCheck(t, ctx, n) }
	for round := range 2 {
		write(60)
		if folded := compact(); folded != 0 {
			t.Fatalf("round %d: the compaction read %d entries from the log", round, folded)
		}
	}
	// 60 writes queue about 50 deltas; 10 writes at most 20.
	n.sessMu.Lock()
	n.sessDeltas.max = 25
	n.sessMu.Unlock()
	write(60)
	if folded := compact(); folded == 0 {
		t.Fatal("after the queue overflowed, the compaction read nothing from the log")
	}
	write(10)
	if folded := compact(); folded != 0 {
		t.Fatalf("after a compaction past the overflow, the next read %d entries from the log", folded)
	}
}

// compactAndCheck compacts n's log to its applied index, checks the table
// at the new compaction point against the one the log gives, and returns
// how many entries the compaction read from the log.
func compactAndCheck(t *testing.T, ctx context.Context, n *Node) uint64 {
	t.Helper()
	index := n.applied.Load()
	n.sessMu.Lock()
	want := n.sessBase.clone()
	n.sessMu.Unlock()
	if err := n.foldLog(want, index, nil); err != nil {
		t.Fatal(err)
	}
	before := n.sessLogFolded.Load()
	if err := n.compactLog(ctx, index); err != nil {
		t.Fatalf("compact to %d: %v", index, err)
	}
	n.sessMu.Lock()
	got := n.sessBase.encode()
	n.sessMu.Unlock()
	if string(got) != string(want.encode()) {
		t.Fatalf("compaction to %d: the table from deltas differs from the table from the log", index)
	}
	return n.sessLogFolded.Load() - before
}

// durableConfig opens a memSM that keeps its pairs and applied index in
// a file of its directory, rewritten after every Apply, so that a restart
// resumes at the applied index (as nezha and the RocksDB systems do).
type durableConfig struct{ memConfig }

type durableSM struct {
	memSM
	path string
}

func (durableConfig) Open(env systems.Env) (systems.StateMachine, error) {
	s := &durableSM{memSM: memSM{m: map[string][]byte{}}, path: filepath.Join(env.Dir, "durable.json")}
	if b, err := os.ReadFile(s.path); err == nil {
		var st struct {
			M       map[string][]byte
			Applied uint64
		}
		if err := json.Unmarshal(b, &st); err != nil {
			return nil, err
		}
		s.m, s.applied = st.M, st.Applied
	}
	return s, nil
}

func (s *durableSM) Apply(ents []systems.AppliedEntry) error {
	if err := s.memSM.Apply(ents); err != nil {
		return err
	}
	s.mu.RLock()
	b, err := json.Marshal(struct {
		M       map[string][]byte
		Applied uint64
	}{s.m, s.applied})
	s.mu.RUnlock()
	if err != nil {
		return err
	}
	tmp := s.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, s.path)
}

// A restart starts the session table from the newest checkpoint instead
// of folding the log from its compaction point: a write resent after the
// restart is still answered with its first copy's index, and the first
// compaction after the restart starts from the checkpoint too (it reads no
// entry from the log) and gives the table the log gives.
func TestSessionCheckpointAcrossRestart(t *testing.T) {
	durable := systems.System{Name: "durable", Summary: "test", LogDir: "raftlog",
		NewConfig: func() systems.SystemConfig { return durableConfig{} }}
	tc := startClusterWith(t, 1, func(c *Config) {
		c.System, c.SystemConfig = durable, durableConfig{}
		c.sessionCheckpointEntries = 16
	})
	tc.waitLeader(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	put := func(client, seq uint64, key string) (uint64, error) {
		r, err := rawKV(t, tc.cfgs[0].Address).Put(ctx, &kvpb.PutRequest{Key: []byte(key), Value: []byte("v"), ClientId: client, Seq: seq})
		if err != nil {
			return 0, err
		}
		return r.Index, nil
	}
	first, err := put(7, 1, "a")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := put(uint64(1+i%5), uint64(1+i/5), fmt.Sprint("k", i)); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(tc.cfgs[0].DataDir, "sessions")
	ckpt := func() uint64 {
		idx, _ := sessionFiles(vfs.OS(), dir)
		if len(idx) == 0 {
			return 0
		}
		return idx[len(idx)-1]
	}
	waitFor(t, 10*time.Second, "a session checkpoint above the first write", func() bool { return ckpt() > first })
	if idx, _ := sessionFiles(vfs.OS(), dir); len(idx) > 2 {
		t.Fatalf("session files %v: want at most the two newest checkpoints (nothing compacted)", idx)
	}
	tc.stop(0)
	tc.start(0)
	tc.waitLeader(10 * time.Second)
	n := tc.nodes[0]
	n.sessMu.Lock()
	ck := n.sessCkpt
	n.sessMu.Unlock()
	if ck == nil || ck.index <= first {
		t.Fatalf("after the restart the table did not start from a checkpoint above %d (%v)", first, ck)
	}
	if again, err := put(7, 1, "a"); err != nil || again != first {
		t.Fatalf("resent after the restart: index %d, %v; the first copy was applied at %d", again, err, first)
	}
	if _, err := put(7, 2, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := put(7, 1, "a"); status.Code(err) != codes.Aborted {
		t.Fatalf("a late copy after the restart: %v, want Aborted", err)
	}
	if folded := compactAndCheck(t, ctx, n); folded != 0 {
		t.Fatalf("the compaction after the restart read %d entries from the log", folded)
	}
}

// A write sent to each node of a cluster that has not elected its first
// leader yet waits for the election and is applied once: Raft drops a
// proposal while the node knows no leader, and the node proposes it again
// once one is known (proposeDataAndWait), instead of failing it at once.
func TestWriteBeforeFirstElection(t *testing.T) {
	// First election after 3-6 s: the nodes are surely up before it, even
	// on a slow machine under -race.
	tc := startClusterWith(t, 3, func(c *Config) { c.ElectionTicks, c.RequestTimeout = 150, 20*time.Second })
	for i, nd := range tc.nodes {
		if l := nd.lead.Load(); l != 0 {
			t.Fatalf("node %d already knows leader %d: the test needs writes sent before the first election", i+1, l)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, len(tc.nodes))
	for i := range tc.nodes {
		kv := rawKV(t, tc.cfgs[i].Address)
		go func() {
			_, err := kv.Put(ctx, &kvpb.PutRequest{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("v"), ClientId: uint64(100 + i), Seq: 1})
			if err != nil {
				err = fmt.Errorf("put on node %d: %w", i+1, err)
			}
			errs <- err
		}()
	}
	for range tc.nodes {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	c := tc.client(t)
	for i := range tc.nodes {
		if v, _, err := c.Get(ctx, []byte(fmt.Sprintf("k%d", i))); err != nil || string(v) != "v" {
			t.Fatalf("get k%d = %q %v", i, v, err)
		}
	}
}
