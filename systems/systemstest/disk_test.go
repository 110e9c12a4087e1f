package systemstest

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/cluster"
)

// The systems the disk fault tests run on: nezha (values in the Raft log,
// runs and manifest through the node's file layer) and original (RocksDB,
// faults at the calls into it).
var diskSystems = []string{"nezha", "original"}

// setDiskFaults sets node id's injected disk faults (none: heal) through
// its DiskFaults RPC.
func (h *harness) setDiskFaults(id uint64, faults ...*kvpb.DiskFault) *kvpb.SetDiskFaultsResponse {
	h.t.Helper()
	n, _ := h.spec.Node(id)
	conn, err := grpc.NewClient(n.Address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		h.t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := ctxFor(10 * time.Second)
	defer cancel()
	resp, err := kvpb.NewDiskFaultsClient(conn).SetDiskFaults(ctx, &kvpb.SetDiskFaultsRequest{Faults: faults})
	if err != nil {
		h.t.Fatalf("node %d: set disk faults %v: %v", id, faults, err)
	}
	return resp
}

func (h *harness) setAllDiskFaults(faults ...*kvpb.DiskFault) {
	h.t.Helper()
	for _, n := range h.spec.Nodes {
		h.setDiskFaults(n.ID, faults...)
	}
}

// restartAll kills and restarts every node.
func (h *harness) restartAll() {
	h.t.Helper()
	for _, n := range h.spec.Nodes {
		if err := h.spec.Kill(n.ID); err != nil {
			h.t.Fatal(err)
		}
	}
	for _, n := range h.spec.Nodes {
		if err := h.spec.Restart(n.ID); err != nil {
			h.t.Fatal(err)
		}
	}
}

// checkAll waits for the nodes to converge and checks every acknowledged
// write on every node.
func (h *harness) checkAll(acked map[string]string) {
	h.t.Helper()
	h.leader()
	h.convergence()
	for _, n := range h.spec.Nodes {
		h.checkNode(n.ID, acked, nil)
	}
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// putUntilRefused puts new keys until one is refused with
// ResourceExhausted naming the full disk (it returns that error), adding
// the acknowledged ones to acked; at most 100,000 puts or 60 s.
func (h *harness) putUntilRefused(prefix string, acked map[string]string) error {
	h.t.Helper()
	// Writes that fit in space the node already holds (a preallocated log
	// segment, the page cache of a tmpfs) succeed until the node's
	// free-space check (every 500 ms) or an ENOSPC refuses them: put until
	// then, bounded in count and time. A put that times out counts as
	// ambiguous (it may be applied later); on a loaded machine a few of
	// them take most of the time, so the bound is generous.
	const bound = 60 * time.Second
	deadline := time.Now().Add(bound)
	var ok, ambiguous int
	for i := 0; i < 100_000 && time.Now().Before(deadline); i++ {
		k, v := fmt.Sprintf("%s%05d", prefix, i), fmt.Sprintf("value-%s-%d", prefix, i)
		ctx, cancel := ctxFor(10 * time.Second)
		_, err := h.c.Put(ctx, []byte(k), []byte(v))
		cancel()
		switch {
		case err == nil:
			acked[k] = v
			ok++
		case status.Code(err) == codes.ResourceExhausted:
			h.t.Logf("refused after %d acknowledged and %d ambiguous puts", ok, ambiguous)
			return err
		case errors.Is(err, client.ErrAmbiguous):
			ambiguous++
		default:
			h.t.Fatalf("put %s on a full disk: %v (want ResourceExhausted)", k, err)
		}
	}
	h.t.Fatalf("puts on a full disk for %v and none refused: %d acknowledged, %d ambiguous", bound, ok, ambiguous)
	return nil
}

// putWhenSpaceReturns waits, up to 20 s, for a put to succeed.
func (h *harness) putWhenSpaceReturns(k, v string) {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := ctxFor(5 * time.Second)
		_, err := h.c.Put(ctx, []byte(k), []byte(v))
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("writes did not resume within 20 s of the disk having space again: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// afterSpaceReturns heals the disk, checks that writes resume with no
// restart (then runs check, if not nil), and that nothing acknowledged is
// lost across a restart of every node.
func (h *harness) afterSpaceReturns(acked map[string]string, heal, check func()) {
	h.t.Helper()
	heal()
	h.putWhenSpaceReturns("resumed", "yes")
	acked["resumed"] = "yes"
	after := h.writeMany("after", 40, "b")
	if check != nil {
		check()
	}
	h.restartAll()
	h.checkAll(merge(acked, after))
}

// readFaults injects read errors, then corrupt reads, on every node: a
// read of a value fails (Internal, or DataLoss for a corrupt one), never
// returns a wrong value, and no node stops; healed, reads work again.
func (h *harness) readFaults(acked map[string]string) {
	h.t.Helper()
	var key string
	for k := range acked {
		key = k
		break
	}
	for _, kind := range []string{"read-error", "read-corrupt"} {
		h.setAllDiskFaults(&kvpb.DiskFault{Kind: kind})
		for _, n := range h.spec.Nodes {
			v, ok, err := h.staleGet(n, key)
			if err == nil {
				h.t.Fatalf("node %d under %s: get %s = %q (found %v), want an error", n.ID, kind, key, trunc(v), ok)
			}
			if kind == "read-corrupt" && status.Code(err) != codes.DataLoss {
				h.t.Fatalf("node %d under %s: get %s: %v, want DataLoss", n.ID, kind, key, err)
			}
		}
		h.setAllDiskFaults()
		for _, n := range h.spec.Nodes {
			if !cluster.Alive(n.PID) {
				h.t.Fatalf("node %d stopped on a %s", n.ID, kind)
			}
			if v, ok, err := h.staleGet(n, key); err != nil || !ok || v != acked[key] {
				h.t.Fatalf("node %d after %s healed: get %s = %q (found %v), %v", n.ID, kind, key, trunc(v), ok, err)
			}
		}
	}
}

// readsServed checks linearizable reads of acknowledged keys on every node.
func (h *harness) readsServed(acked map[string]string) {
	h.t.Helper()
	checked := 0
	for _, n := range h.spec.Nodes {
		c, err := client.New(client.DefaultConfig(n.Address))
		if err != nil {
			h.t.Fatal(err)
		}
		for k, want := range acked {
			ctx, cancel := ctxFor(10 * time.Second)
			got, ok, err := c.Get(ctx, []byte(k))
			cancel()
			if err != nil || !ok || string(got) != want {
				c.Close()
				h.t.Fatalf("node %d on a full disk: get %s = %q (found %v), %v; want %q", n.ID, k, trunc(string(got)), ok, err, trunc(want))
			}
			checked++
			if checked%5 == 0 {
				break
			}
		}
		c.Close()
	}
}

// TestDiskFaults runs, on one cluster per system, the two faults a node
// must survive or stop on:
//
//   - a full disk (injected on every node) refuses writes with a clear
//     error, keeps serving reads, and accepts writes again once it has
//     space, with no restart;
//   - a read error or a corrupt read of a value fails that read, never
//     returns a wrong value and never stops a node;
//   - a failed fsync stops the node, with the error in its log, and the
//     node acknowledges no write after it: puts sent to it fail. The
//     cluster goes on and the node restarts.
//
// Then every node restarts and nothing acknowledged is lost.
func TestDiskFaults(t *testing.T) {
	for i, sys := range diskSystems {
		t.Run(sys, func(t *testing.T) {
			t.Parallel() // one cluster each; most of the time is waiting
			h := start(t, Options{System: sys, Binary: binary, ExtraArgs: []string{"-diskFaults"}, Seed: int64(100 + i)})
			acked := h.writeMany("before", 60, "a")

			h.setAllDiskFaults(&kvpb.DiskFault{Kind: "disk-full"})
			err := h.putUntilRefused("full", acked)
			if !strings.Contains(err.Error(), "disk full") || !strings.Contains(err.Error(), "no space left on device") {
				t.Fatalf("refusal does not say the disk is full: %v", err)
			}
			t.Logf("refused: %v", err)
			h.readsServed(acked)
			h.setAllDiskFaults()
			h.putWhenSpaceReturns("resumed", "yes")
			acked["resumed"] = "yes"

			// A follower's full disk does not fail a write: once the
			// follower knows its disk is full (its next append, the
			// leader's replication of the next write, meets ENOSPC) a
			// write sent to it is not proposed there (Aborted, naming the
			// leader), and the client retries it on the other members.
			// Until then it forwards writes to the leader, which commits
			// them without it.
			lead := h.leader()
			var fid uint64
			for _, n := range h.spec.Nodes {
				if n.ID != lead {
					fid = n.ID
					break
				}
			}
			h.setDiskFaults(fid, &kvpb.DiskFault{Kind: "disk-full"})
			fn, _ := h.spec.Node(fid)
			conn, err := grpc.NewClient(fn.Address, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; ; i++ {
				k := fmt.Sprintf("on-full-follower-%d", i)
				ctx, cancel := ctxFor(10 * time.Second)
				_, err = kvpb.NewKVClient(conn).Put(ctx, &kvpb.PutRequest{Key: []byte(k), Value: []byte("x")})
				cancel()
				if err != nil || i == 20 {
					break
				}
				acked[k] = "x" // forwarded before the follower knew
			}
			conn.Close()
			if status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), fmt.Sprintf("send the write to the leader (node %d)", lead)) {
				t.Fatalf("put to follower %d with a full disk: %v; want Aborted naming leader %d", fid, err, lead)
			}
			// A client that tries the follower first (it took it for the
			// leader, as one does after a leadership transfer).
			addrs := []string{fn.Address}
			for _, n := range h.spec.Nodes {
				if n.ID != fid {
					addrs = append(addrs, n.Address)
				}
			}
			viaFollower, err := client.New(client.DefaultConfig(addrs...))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := ctxFor(20 * time.Second)
			_, err = viaFollower.Put(ctx, []byte("via-full-follower"), []byte("y"))
			cancel()
			viaFollower.Close()
			if err != nil {
				t.Fatalf("put through a client that tries follower %d (full disk) first: %v", fid, err)
			}
			acked["via-full-follower"] = "y"
			h.setDiskFaults(fid)

			h.readFaults(acked)

			l := h.leader()
			h.setDiskFaults(l, &kvpb.DiskFault{Kind: "fsync-error"})
			n, _ := h.spec.Node(l)
			pinned, err := client.New(client.DefaultConfig(n.Address))
			if err != nil {
				t.Fatal(err)
			}
			defer pinned.Close()
			for j := 0; j < 5 && cluster.Alive(n.PID); j++ {
				ctx, cancel := ctxFor(3 * time.Second)
				_, err := pinned.Put(ctx, []byte(fmt.Sprintf("unsynced%d", j)), []byte("x"))
				cancel()
				if err == nil {
					t.Fatalf("node %d acknowledged a put after its fsync failed", l)
				}
				t.Logf("put %d to node %d after the failed fsync: %v", j, l, err)
			}
			waitDead(t, h.spec, l, 20*time.Second)
			tail := cluster.Tail(n.Log, 30)
			if !strings.Contains(tail, "fatal error; the node stops") || !strings.Contains(tail, "input/output error") ||
				!strings.Contains(tail, "fdatasync") {
				t.Fatalf("node %d's log does not name the failed fsync:\n%s", l, tail)
			}
			after := h.writeMany("after", 30, "b")
			if err := h.spec.Restart(l); err != nil {
				t.Fatal(err)
			}
			h.restartAll()
			h.checkAll(merge(acked, after))
		})
	}
}

// liveRuns returns the ids the manifest of a nezha node lists, and the run
// files in its sorted/ directory with their sizes.
func liveRuns(t *testing.T, data string) (map[uint64]bool, map[string]int64) {
	t.Helper()
	dir := filepath.Join(data, "sorted")
	var m struct {
		Runs []uint64 `json:"runs"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "MANIFEST"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
	}
	live := map[uint64]bool{}
	for _, id := range m.Runs {
		live[id] = true
	}
	files := map[string]int64{}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if info, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), ".run") {
			files[e.Name()] = info.Size()
		}
	}
	return live, files
}

// failedRounds returns the nodes that report a GC (or log truncation)
// round failed with ENOSPC.
func (h *harness) failedRounds() map[uint64]bool {
	h.t.Helper()
	failed := map[uint64]bool{}
	for _, n := range h.spec.Nodes {
		ctx, cancel := ctxFor(5 * time.Second)
		st, err := h.c.Status(ctx, n.Address, false)
		cancel()
		if err != nil {
			h.t.Fatal(err)
		}
		for _, r := range st.GcRounds {
			if strings.Contains(r.Error, "no space left on device") {
				failed[n.ID] = true
			}
		}
	}
	return failed
}

// A full disk during a GC round fails the round cleanly, the node keeps
// serving, and once the disk has space writes and GC go on; nothing
// acknowledged is lost across a restart. nezha: ENOSPC on its sorted runs
// (no partial run stays). original: its GC is the Raft log truncation
// round (RocksDB's own compactions cannot be injected into): ENOSPC on the
// Raft log when the round rolls or compacts it.
func TestDiskFullDuringGC(t *testing.T) {
	t.Run("nezha", func(t *testing.T) {
		t.Parallel() // one cluster each; most of the time is waiting
		args := append([]string{"-diskFaults"}, gcArgs("tiered")...)
		h := start(t, Options{System: "nezha", Binary: binary, ExtraArgs: args, Seed: 300})
		acked := h.writeMany("before", 100, "a")
		h.setAllDiskFaults(&kvpb.DiskFault{Kind: "disk-full", PathContains: "/sorted/"})
		// Overwrites make garbage, so that rounds copy (and fail).
		deadline := time.Now().Add(30 * time.Second)
		for round := 0; len(h.failedRounds()) < len(h.spec.Nodes); round++ {
			if time.Now().After(deadline) {
				t.Fatalf("only nodes %v reported a GC round failed on the full disk within 30 s", h.failedRounds())
			}
			for j := 0; j < 20; j++ {
				k, v := fmt.Sprintf("before%05d", j), fmt.Sprintf("over-%d-%d", round, j)
				ctx, cancel := ctxFor(10 * time.Second)
				if _, err := h.c.Put(ctx, []byte(k), []byte(v)); err == nil {
					acked[k] = v
				}
				cancel()
			}
		}
		h.noPartialRuns()
		h.readsServed(acked)
		h.afterSpaceReturns(acked, func() { h.setAllDiskFaults() }, h.expectGC)
	})
	t.Run("original", func(t *testing.T) {
		t.Parallel()
		const retain = 256 << 10
		args := []string{"-diskFaults", "-segmentSizeBytes", "65536", "-rocksdb.logRetainBytes", fmt.Sprint(retain),
			"-rocksdb.logTruncateInterval", "500ms"}
		h := start(t, Options{System: "original", Binary: binary, ExtraArgs: args, Seed: 301})
		acked := map[string]string{}
		// Fill the log past the retained bytes on every node, then fill
		// the disk: the next round fails. A round that ran just before the
		// disk filled leaves too little to truncate; then go again.
		value := strings.Repeat("v", 16<<10)
		for cycle := 0; len(h.failedRounds()) < len(h.spec.Nodes); cycle++ {
			if cycle == 5 {
				t.Fatalf("5 cycles and only nodes %v reported a truncation round failed on the full disk", h.failedRounds())
			}
			h.setAllDiskFaults()
			for i := 0; !h.logsAbove(retain); i++ {
				if i == 100 {
					t.Fatal("the Raft logs never grew past the retained bytes")
				}
				for j := 0; j < 8; j++ {
					k := fmt.Sprintf("c%d-%03d-%d", cycle, i, j)
					h.putWhenSpaceReturns(k, value)
					acked[k] = value
				}
			}
			h.setAllDiskFaults(&kvpb.DiskFault{Kind: "disk-full", PathContains: "/raftlog/"})
			deadline := time.Now().Add(3 * time.Second)
			for len(h.failedRounds()) < len(h.spec.Nodes) && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
		}
		h.readsServed(acked)
		h.afterSpaceReturns(acked, func() { h.setAllDiskFaults() }, nil)
	})
}

// logsAbove reports whether every node's Raft log holds more than n bytes.
func (h *harness) logsAbove(n int64) bool {
	h.t.Helper()
	for _, node := range h.spec.Nodes {
		ctx, cancel := ctxFor(5 * time.Second)
		st, err := h.c.Status(ctx, node.Address, false)
		cancel()
		if err != nil {
			h.t.Fatal(err)
		}
		if st.LogBytes <= n {
			return false
		}
	}
	return true
}

// noPartialRuns fails if a nezha node keeps a run file its manifest does
// not list: one there, unchanged, a second apart is partial output a
// failed round left behind (a round in progress writes or removes its
// run in that time).
func (h *harness) noPartialRuns() {
	h.t.Helper()
	type snap struct {
		live  map[uint64]bool
		files map[string]int64
	}
	first := map[uint64]snap{}
	for _, n := range h.spec.Nodes {
		live, files := liveRuns(h.t, n.Data)
		first[n.ID] = snap{live, files}
	}
	time.Sleep(time.Second) // the interval defines "left behind", not synchronization
	for _, n := range h.spec.Nodes {
		live, files := liveRuns(h.t, n.Data)
		for name, size := range files {
			var id uint64
			fmt.Sscanf(name, "%d.run", &id)
			if !live[id] && !first[n.ID].live[id] && first[n.ID].files[name] == size {
				h.t.Fatalf("node %d: run %s (%d bytes) is not in the manifest and stayed: partial output of a failed round", n.ID, name, size)
			}
		}
	}
}

// mountTmpfs mounts a tmpfs of size bytes at dir (root only).
func mountTmpfs(t *testing.T, dir string, size int64) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a size-limited tmpfs to fill")
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("cannot mount a tmpfs (needs root and CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Logf("unmount %s: %v", dir, err)
		}
	})
}

// fill writes a file in dir until the file system is full.
func fill(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for i := 0; i < 1<<14; i++ {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, unix.ENOSPC) {
				return p
			}
			t.Fatal(err)
		}
	}
	t.Fatal("the file system never filled")
	return ""
}

// A real full disk (a 192 MiB tmpfs filled by another process) with no
// reserve (-minFreeDiskBytes 0), as in the bug report where every node
// stopped on the first ENOSPC: the nodes refuse writes with a clear error,
// serve reads, and accept writes again once the filler is gone, with no
// restart; nothing acknowledged is lost across a restart.
func TestDiskFullTmpfs(t *testing.T) {
	for i, sys := range diskSystems {
		t.Run(sys, func(t *testing.T) {
			t.Parallel() // one cluster each; most of the time is waiting
			dir := t.TempDir()
			mountTmpfs(t, dir, 192<<20)
			args := []string{"-diskBallastBytes", fmt.Sprint(4 << 20), "-segmentSizeBytes", fmt.Sprint(4 << 20),
				"-entryCacheBytes", fmt.Sprint(1 << 20)}
			if sys == "original" {
				args = append(args, "-rocksdb.writeBufferBytes", fmt.Sprint(4<<20))
			}
			h := startIn(t, Options{System: sys, Binary: binary, ExtraArgs: args, Seed: int64(400 + i)}, filepath.Join(dir, "cluster"))
			acked := h.writeMany("before", 60, "a")
			filler := fill(t, dir)
			var st unix.Statfs_t
			if err := unix.Statfs(dir, &st); err == nil {
				t.Logf("filled %s: %d bytes free", dir, int64(st.Bavail)*int64(st.Bsize))
			}
			err := h.putUntilRefused("full", acked)
			t.Logf("refused: %v", err)
			h.readsServed(acked)
			h.afterSpaceReturns(acked, func() {
				if err := os.Remove(filler); err != nil {
					t.Fatal(err)
				}
			}, nil)
		})
	}
}

// TestFullLeaderDiskHandsOverLeadership runs `nezha bench put` against a
// cluster and fills only the leader's disk once the bench has done 2000
// writes: the leader hands its leadership to a voter with space, and the
// bench's writes succeed again within a few election timeouts (the
// longest pause between completed writes after the fault is bounded), none
// refused or failed: a healthy quorum takes writes. The full node says why
// in its Status.
func TestFullLeaderDiskHandsOverLeadership(t *testing.T) {
	for i, sys := range diskSystems {
		t.Run(sys, func(t *testing.T) {
			t.Parallel()
			h := start(t, Options{System: sys, Binary: binary, ExtraArgs: []string{"-diskFaults"}, Seed: int64(500 + i)})
			lead := h.leader()
			dir := t.TempDir()
			raw, summary := filepath.Join(dir, "raw.csv"), filepath.Join(dir, "summary.json")
			ctx, cancel := ctxFor(2 * time.Minute)
			defer cancel()
			bench := exec.CommandContext(ctx, binary, "bench", "put", "-servers", strings.Join(h.spec.Addresses(), ","),
				"-cnums", "8", "-dnums", "100000000", "-vsize", "1024", "-duration", "12s", "-interval", "200ms",
				"-raw", raw, "-json", summary)
			var injected time.Time
			stdout, stderr, _, err := RunLoad(bench, 2000, func() {
				h.setDiskFaults(lead, &kvpb.DiskFault{Kind: "disk-full"})
				injected = time.Now()
			})
			if err != nil || injected.IsZero() {
				t.Fatalf("bench put: %v (disk filled: %v)\n%s\n%s", err, !injected.IsZero(), stdout, stderr)
			}

			// The longest pause between writes completing, from the fault to
			// the end of the run.
			f, err := os.Open(raw)
			if err != nil {
				t.Fatal(err)
			}
			rows, err := csv.NewReader(f).ReadAll()
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			var ends []int64
			for _, r := range rows[1:] {
				start, _ := strconv.ParseInt(r[1], 10, 64)
				lat, _ := strconv.ParseInt(r[2], 10, 64)
				if r[3] == "true" && start+lat >= injected.UnixMicro() {
					ends = append(ends, start+lat)
				}
			}
			slices.Sort(ends)
			last, gap := injected.UnixMicro(), int64(0)
			for _, e := range ends {
				gap, last = max(gap, e-last), e
			}
			pause := time.Duration(gap) * time.Microsecond
			var s struct{ Ops, Errors, Ambiguous int64 }
			if b, err := os.ReadFile(summary); err != nil || json.Unmarshal(b, &s) != nil {
				t.Fatalf("%s: %v", summary, err)
			}
			t.Logf("%s: %d writes after the fault, longest pause %v; summary %+v", sys, len(ends), pause, s)
			// Election timeout here: 10 ticks of 50 ms (suiteArgs).
			if pause > 3*time.Second || len(ends) < 1000 || s.Errors != 0 || s.Ambiguous != 0 {
				t.Fatalf("with only the leader's disk full, writes paused %v, %d completed after the fault, %d failed, %d ambiguous; want at most 3 s (6 election timeouts), and none failed\n%s",
					pause, len(ends), s.Errors, s.Ambiguous, stdout)
			}

			n, _ := h.spec.Node(lead)
			sctx, scancel := ctxFor(5 * time.Second)
			st, err := h.c.Status(sctx, n.Address, false)
			scancel()
			if err != nil || st.RaftState == "StateLeader" || !strings.Contains(st.DiskRefusal, "disk full") {
				t.Fatalf("node %d with the full disk: state %s, disk_refusal %q (%v); want a follower saying its disk is full",
					lead, st.GetRaftState(), st.GetDiskRefusal(), err)
			}
			h.setDiskFaults(lead)
		})
	}
}
