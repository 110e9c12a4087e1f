package linearizability

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/nezha-harness/nezha/faults"
)

// h builds histories for the tests: each op is (client, kind, key, value or
// result, call, return).
type hist struct{ ops []Op }

func (h *hist) add(client int, in Input, out Output, call, ret int64) *hist {
	st := StatusOK
	if ret == math.MaxInt64 {
		st, out.Unknown = StatusAmbiguous, true
	}
	h.ops = append(h.ops, Op{Client: client, Input: in, Output: out, Call: call, Return: ret, Status: st})
	return h
}
func (h *hist) put(c int, k, v string, call, ret int64) *hist {
	return h.add(c, Input{Kind: OpPut, Key: k, Value: v}, Output{}, call, ret)
}
func (h *hist) del(c int, k string, call, ret int64) *hist {
	return h.add(c, Input{Kind: OpDelete, Key: k}, Output{}, call, ret)
}
func (h *hist) get(c int, k, v string, call, ret int64) *hist {
	out := Output{Found: v != "", Value: v}
	return h.add(c, Input{Kind: OpGet, Key: k}, out, call, ret)
}
func (h *hist) scan(c int, start, end string, limit int, kvs string, call, ret int64) *hist {
	var out Output
	for _, p := range strings.Fields(kvs) {
		k, v, _ := strings.Cut(p, "=")
		out.KVs = append(out.KVs, KV{Key: k, Value: v})
	}
	return h.add(c, Input{Kind: OpScan, Key: start, End: end, Limit: limit}, out, call, ret)
}
func (h *hist) failed(c int, in Input, call, ret int64) *hist {
	h.ops = append(h.ops, Op{Client: c, Input: in, Call: call, Return: ret, Status: StatusFailed})
	return h
}

const open = math.MaxInt64

var universe = []string{"a", "b", "c"}

func TestKnownHistories(t *testing.T) {
	cases := []struct {
		name string
		h    *hist
		want string
	}{
		{"empty", &hist{}, Linearizable},
		{"read your write", (&hist{}).put(0, "a", "1", 0, 10).get(0, "a", "1", 20, 30), Linearizable},
		{"read of a never-written key", (&hist{}).get(0, "a", "", 0, 10), Linearizable},
		{"concurrent put and get may see either", (&hist{}).put(0, "a", "1", 0, 100).get(1, "a", "", 10, 20).get(2, "a", "1", 30, 40), Linearizable},
		{"stale read after overwrite", (&hist{}).put(0, "a", "1", 0, 10).put(0, "a", "2", 20, 30).get(1, "a", "1", 40, 50), NotLinearizable},
		{"read goes back in time", (&hist{}).put(0, "a", "1", 0, 100).get(1, "a", "1", 10, 20).get(2, "a", "", 30, 40), NotLinearizable},
		{"found after delete", (&hist{}).put(0, "a", "1", 0, 10).del(0, "a", 20, 30).get(1, "a", "1", 40, 50), NotLinearizable},
		{"not found after delete", (&hist{}).put(0, "a", "1", 0, 10).del(0, "a", 20, 30).get(1, "a", "", 40, 50), Linearizable},
		{"value never written", (&hist{}).put(0, "a", "1", 0, 10).get(1, "a", "9", 20, 30), NotLinearizable},
		{"keys are independent", (&hist{}).put(0, "a", "1", 0, 10).put(1, "b", "2", 0, 10).get(2, "a", "1", 20, 30).get(2, "b", "2", 40, 50), Linearizable},
		{"ambiguous put applied later", (&hist{}).put(0, "a", "1", 0, open).get(1, "a", "", 10, 20).get(1, "a", "1", 30, 40), Linearizable},
		{"ambiguous put never applied", (&hist{}).put(0, "a", "1", 0, open).get(1, "a", "", 10, 20).get(1, "a", "", 30, 40), Linearizable},
		{"ambiguous put seen then unseen", (&hist{}).put(0, "a", "1", 0, open).get(1, "a", "1", 10, 20).get(1, "a", "", 30, 40), NotLinearizable},
		{"ambiguous put seen before it was called", (&hist{}).get(1, "a", "1", 0, 5).put(0, "a", "1", 10, open), NotLinearizable},
		{"ambiguous delete may apply late", (&hist{}).put(0, "a", "1", 0, 10).del(0, "a", 20, open).get(1, "a", "1", 30, 40).get(1, "a", "", 50, 60), Linearizable},
		{"failed put is not applied", (&hist{}).failed(0, Input{Kind: OpPut, Key: "a", Value: "1"}, 0, 10).get(1, "a", "1", 20, 30), NotLinearizable},
		{"failed read is dropped", (&hist{}).put(0, "a", "1", 0, 10).failed(1, Input{Kind: OpGet, Key: "a"}, 20, 30), Linearizable},
		// Scans.
		{"scan sees a snapshot", (&hist{}).put(0, "a", "1", 0, 10).put(0, "b", "2", 20, 30).scan(1, "a", "c", 0, "a=1 b=2", 40, 50), Linearizable},
		{"scan range and limit", (&hist{}).put(0, "a", "1", 0, 10).put(0, "b", "2", 20, 30).put(0, "c", "3", 20, 30).
			scan(1, "b", "", 0, "b=2 c=3", 40, 50).scan(1, "a", "c", 1, "a=1", 60, 70).scan(1, "b", "b\x00", 0, "b=2", 60, 70), Linearizable},
		{"scan ignores the limit", (&hist{}).put(0, "a", "1", 0, 10).put(0, "b", "2", 20, 30).scan(1, "a", "c", 1, "a=1 b=2", 40, 50), NotLinearizable},
		{"scan misses a completed write", (&hist{}).put(0, "a", "1", 0, 10).put(0, "b", "2", 20, 30).scan(1, "a", "c", 0, "a=1", 40, 50), NotLinearizable},
		{"scan sees a deleted key", (&hist{}).put(0, "a", "1", 0, 10).del(0, "a", 20, 30).scan(1, "a", "c", 0, "a=1", 40, 50), NotLinearizable},
		{"scan concurrent with writes", (&hist{}).put(0, "a", "1", 0, 10).put(0, "b", "2", 20, 100).scan(1, "a", "c", 0, "a=1", 30, 40).scan(2, "a", "c", 0, "a=1 b=2", 50, 60), Linearizable},
		// Atomicity across keys: the scan saw b's new value but not a's,
		// though a was written before b began. Per-key projections of
		// this history are linearizable; only a scan over both keys in one
		// partition catches it.
		{"scan is not atomic", (&hist{}).put(0, "a", "1", 0, 10).put(0, "b", "1", 0, 10).
			put(1, "a", "2", 20, 100).put(2, "b", "2", 110, 120).scan(3, "a", "c", 0, "a=1 b=2", 15, 130), NotLinearizable},
		{"scan returns a key outside the key space", (&hist{}).scan(1, "a", "c", 0, "ab=1", 0, 10), NotLinearizable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Check(c.h.ops, universe, 10*time.Second)
			if got.Verdict != c.want {
				t.Fatalf("verdict %q, want %q (bad partitions %+v)", got.Verdict, c.want, got.Bad)
			}
		})
	}
}

func TestPartitionByKeyAndScanRange(t *testing.T) {
	h := (&hist{}).put(0, "a", "1", 0, 10).put(0, "b", "2", 0, 10).put(0, "c", "3", 0, 10).
		scan(1, "a", "b\x00", 0, "a=1 b=2", 20, 30)
	parts := NewModel(universe).Partition(Operations(h.ops))
	if len(parts) != 2 {
		t.Fatalf("%d partitions, want 2 ({a, b} tied by the scan, and {c})", len(parts))
	}
	var sizes []int
	for _, p := range parts {
		sizes = append(sizes, len(p))
	}
	if !(sizes[0] == 3 && sizes[1] == 1) && !(sizes[0] == 1 && sizes[1] == 3) {
		t.Fatalf("partition sizes %v, want 3 and 1", sizes)
	}
}

func TestPatch(t *testing.T) {
	h := (&hist{}).
		put(0, "a", "seen", 0, open).   // seen at 30: closed at 30
		put(1, "a", "unseen", 5, open). // never seen: dropped
		del(2, "a", 6, open).           // deletes stay open
		get(3, "a", "seen", 20, 30).
		scan(3, "a", "", 0, "a=seen", 40, 50)
	out, st := Patch(Operations(h.ops))
	if st.DroppedUnobserved != 1 || st.Closed != 1 || len(out) != 4 {
		t.Fatalf("patch: %+v, %d ops left; want 1 dropped, 1 closed, 4 left", st, len(out))
	}
	for _, op := range out {
		in := op.Input.(Input)
		switch {
		case in.Kind == OpPut && op.Return != 30:
			t.Fatalf("seen ambiguous put returns at %d, want 30 (its first observation)", op.Return)
		case in.Kind == OpDelete && op.Return != math.MaxInt64:
			t.Fatalf("ambiguous delete was closed at %d", op.Return)
		}
	}
	// Patching never changes a verdict.
	for _, hh := range []*hist{
		(&hist{}).put(0, "a", "1", 0, open).get(1, "a", "1", 10, 20).get(1, "a", "", 30, 40),
		(&hist{}).put(0, "a", "1", 0, open).put(1, "a", "2", 0, 5).get(1, "a", "2", 10, 20),
	} {
		m := NewModel(universe)
		plain := porcupine.CheckOperations(m, Operations(hh.ops))
		patched, _ := Patch(Operations(hh.ops))
		if porcupine.CheckOperations(m, patched) != plain {
			t.Fatalf("patch changed the verdict of %+v", hh.ops)
		}
	}
}

func TestExplainAndVisualize(t *testing.T) {
	h := (&hist{}).put(0, "a", "1", 0, 10).put(0, "a", "2", 20, 30).get(1, "a", "1", 40, 50).
		put(0, "b", "3", 0, 10).get(1, "b", "", 60, 70).
		get(2, "c", "9", 0, 5)
	h.ops[2].Node = 2
	as := Explain(h.ops, 10)
	kinds := map[string]int{}
	for _, a := range as {
		kinds[a.Kind]++
	}
	if kinds[AnomalyStaleRead] != 2 || kinds[AnomalyPhantom] != 1 {
		t.Fatalf("anomalies %+v, want 2 stale reads and 1 phantom", as)
	}
	for _, a := range as {
		if a.Key == "a" && !strings.Contains(a.Description, "via node 2") {
			t.Fatalf("stale read description %q does not name the node", a.Description)
		}
	}
	out := Check(h.ops, universe, 10*time.Second)
	if out.Verdict != NotLinearizable || len(out.Anomalies) == 0 {
		t.Fatalf("check: %+v", out)
	}
	path := filepath.Join(t.TempDir(), "check.html")
	windows := []faults.Window{{Step: 0, Nemesis: "partition-leader", Start: 15, End: 55, Nodes: []uint64{2}, Detail: "leader 2 isolated"}}
	if err := out.Visualize(path, windows, nil); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"partition-leader", "stale read a", `get(a) -\u003e 1`} {
		if !strings.Contains(string(b), want) {
			t.Fatalf("visualization lacks %q", want)
		}
	}
}

func TestModelValue(t *testing.T) {
	if got := ModelValue([]byte("w1-2")); got != "w1-2" {
		t.Fatalf("short value %q", got)
	}
	big := make([]byte, 1000)
	a, b := ModelValue(big), ModelValue(append(big[:999:999], 1))
	if !strings.HasPrefix(a, "sha256:") || !strings.HasSuffix(a, "/1000") || a == b {
		t.Fatalf("large values: %q %q", a, b)
	}
	if got := ModelValue([]byte("a\x00b")); !strings.HasPrefix(got, "sha256:") {
		t.Fatalf("a value with NUL is hashed (the state encoding uses NUL): %q", got)
	}
}
