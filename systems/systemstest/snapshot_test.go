package systemstest

import (
	"bufio"
	"encoding/json"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/cluster"
)

// firstIndexes returns every node's first Raft log index and applied index.
func (h *harness) firstIndexes() (first, applied map[uint64]uint64) {
	h.t.Helper()
	ctx, cancel := ctxFor(10 * time.Second)
	defer cancel()
	first, applied = map[uint64]uint64{}, map[uint64]uint64{}
	for _, n := range h.nodes() {
		st, err := h.c.Status(ctx, n.Address, false)
		if err != nil {
			h.t.Fatalf("status of node %d: %v", n.ID, err)
		}
		first[n.ID], applied[n.ID] = st.FirstIndex, st.Header.AppliedIndex
	}
	return first, applied
}

// jsonrpcTakeSnapshot sends raftpico's TakeSnapshot to n's JSON-RPC API
// and returns the reply's result and error code (0: none).
func jsonrpcTakeSnapshot(t *testing.T, n cluster.Node) (snapshotIndex uint64, code int, message string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", n.JSONRPCAddress, 10*time.Second)
	if err != nil {
		t.Fatalf("node %d JSON-RPC: %v", n.ID, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := c.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"TakeSnapshot"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		t.Fatalf("node %d JSON-RPC TakeSnapshot: %v", n.ID, err)
	}
	var r struct {
		Result struct {
			SnapshotIndex uint64 `json:"snapshot_index"`
		} `json:"result"`
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(line, &r); err != nil {
		t.Fatalf("node %d JSON-RPC reply %q: %v", n.ID, line, err)
	}
	if r.Error != nil {
		return 0, r.Error.Code, r.Error.Message
	}
	return r.Result.SnapshotIndex, 0, ""
}

// TestTakeSnapshot: `nezha cluster compact` (each node's Admin
// TakeSnapshot) compacts every node's Raft log now, past everything the
// nodes had applied, and raftpico's TakeSnapshot on the JSON-RPC API does
// the same on one node; the data reads back from every node. nezha-nogc
// and dwisckey never compact their log: they refuse, saying so
// (Unimplemented; JSON-RPC -32004).
func TestTakeSnapshot(t *testing.T) {
	for i, sys := range []string{"nezha", "nezha-nogc", "original", "pasv", "blobdb", "dwisckey", "lsm-raft"} {
		t.Run(sys, func(t *testing.T) {
			h := start(t, Options{System: sys, Binary: binary, Seed: int64(600 + i)})
			acked := h.writeMany("snap/", 60, "a")
			h.convergence()
			before, applied := h.firstIndexes()
			out, err := exec.Command(binary, "cluster", "compact", "-cluster", h.spec.Dir).CombinedOutput()
			refused := sys == "nezha-nogc" || sys == "dwisckey"
			if refused {
				if err == nil || strings.Count(string(out), ": not compacted:") != len(before) || !strings.Contains(string(out), "(Unimplemented)") {
					t.Fatalf("cluster compact on %s: %v, want every node refused (Unimplemented):\n%s", sys, err, out)
				}
				if _, code, msg := jsonrpcTakeSnapshot(t, h.node(1)); code != -32004 {
					t.Fatalf("JSON-RPC TakeSnapshot on %s: code %d (%s), want -32004", sys, code, msg)
				}
				t.Logf("refused: %s", strings.TrimSpace(string(out)))
			} else {
				if err != nil {
					t.Fatalf("cluster compact: %v\n%s", err, out)
				}
				after, _ := h.firstIndexes()
				for id, f := range after {
					if f <= before[id] || f <= applied[id] {
						t.Errorf("node %d: first log index %d after compact; before it %d, applied %d", id, f, before[id], applied[id])
					}
				}
				more := h.writeMany("snap2/", 20, "b")
				h.convergence()
				_, applied2 := h.firstIndexes()
				if idx, code, msg := jsonrpcTakeSnapshot(t, h.node(1)); code != 0 || idx < applied2[1] {
					t.Fatalf("JSON-RPC TakeSnapshot on node 1: index %d, error %d %s; want at least %d", idx, code, msg, applied2[1])
				}
				for k, v := range more {
					acked[k] = v
				}
			}
			first, _ := h.firstIndexes()
			if refused && first[1] != before[1] {
				t.Fatalf("node 1's log moved from %d to %d although the snapshot was refused", before[1], first[1])
			}
			h.checkAll(acked)
		})
	}
}
