package nezha

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/raftkv/raftlog"
	"github.com/nezha-harness/nezha/systems"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// openLog opens a raft log with small segments (so that entries span several
// segments) and no fsync (tests only).
func openLog(t testing.TB, dir string) *raftlog.Log {
	t.Helper()
	return openLogSegments(t, dir, 8192)
}

func openLogSegments(t testing.TB, dir string, segmentBytes int64) *raftlog.Log {
	t.Helper()
	o := raftlog.DefaultOptions(filepath.Join(dir, ValueLogDir))
	o.SegmentSizeBytes = segmentBytes
	o.Sync = false
	o.Bootstrap = raftpb.ConfState{Voters: []uint64{1}}
	o.Logger = quietLogger()
	l, err := raftlog.Open(o)
	if err != nil {
		t.Fatalf("raftlog.Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func openStore(t testing.TB, kind, dir string, l *raftlog.Log) *Store {
	t.Helper()
	c := newConfig(NameNoGC)
	c.Index = kind
	s, err := c.OpenStore(systems.Env{Dir: dir, Log: l, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("OpenStore(%s): %v", kind, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func put(k string, v []byte) systems.Command {
	return systems.Command{Op: systems.OpPut, Key: []byte(k), Value: v}
}
func del(k string) systems.Command { return systems.Command{Op: systems.OpDelete, Key: []byte(k)} }
func none() systems.Command        { return systems.Command{Op: systems.OpNone} }

// appendCommands appends cmds to l as entries of term 1 after its last
// index, with one Append, and returns them as applied entries.
func appendCommands(t testing.TB, l *raftlog.Log, cmds ...systems.Command) []systems.AppliedEntry {
	t.Helper()
	last, _ := l.LastIndex()
	ents := make([]raftpb.Entry, len(cmds))
	for i := range cmds {
		c := cmds[i]
		e := raftpb.Entry{Index: last + 1 + uint64(i), Term: 1, Type: raftpb.EntryNormal}
		if c.Op != systems.OpNone {
			c.RequestID = e.Index
			e.Data = systems.AppendCommand(nil, &c)
		}
		ents[i] = e
	}
	if err := l.Append(raftpb.HardState{Term: 1, Commit: last + uint64(len(cmds))}, ents, true); err != nil {
		t.Fatalf("Append: %v", err)
	}
	return appliedEntries(t, l, ents)
}

func appliedEntries(t testing.TB, l *raftlog.Log, ents []raftpb.Entry) []systems.AppliedEntry {
	t.Helper()
	out := make([]systems.AppliedEntry, len(ents))
	for i, e := range ents {
		c, err := systems.DecodeCommand(e.Data)
		if err != nil {
			t.Fatal(err)
		}
		loc, ok := l.Location(e.Index)
		if !ok {
			t.Fatalf("no location for entry %d", e.Index)
		}
		out[i] = systems.AppliedEntry{Index: e.Index, Term: e.Term, Command: c, Location: loc}
	}
	return out
}

// model is the expected state: live key -> value.
type model map[string][]byte

func (m model) apply(cmds ...systems.Command) {
	for _, c := range cmds {
		switch c.Op {
		case systems.OpPut:
			m[string(c.Key)] = c.Value
		case systems.OpDelete:
			delete(m, string(c.Key))
		}
	}
}

// scan is the model's Scan.
func (m model) scan(start, end string, limit, maxBytes int) ([]systems.KeyValue, bool) {
	var keys []string
	for k := range m {
		if k >= start && (end == "" || k < end) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var kvs []systems.KeyValue
	total := 0
	for i, k := range keys {
		kvs = append(kvs, systems.KeyValue{Key: []byte(k), Value: m[k]})
		total += len(k) + len(m[k])
		if limit > 0 && len(kvs) == limit {
			return kvs, false
		}
		if maxBytes > 0 && total >= maxBytes {
			return kvs, i+1 < len(keys)
		}
	}
	return kvs, false
}

func mustApply(t testing.TB, s *Store, ents []systems.AppliedEntry) {
	t.Helper()
	if err := s.Apply(ents); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

func checkModel(t *testing.T, s *Store, m model) {
	t.Helper()
	for k, want := range m {
		got, found, err := s.Get([]byte(k))
		if err != nil || !found || !bytes.Equal(got, want) {
			t.Fatalf("Get(%q) = %d bytes, found %v, err %v; want %d bytes", k, len(got), found, err, len(want))
		}
	}
	kvs, more, err := s.Scan(nil, nil, 0, 0)
	if err != nil {
		t.Fatalf("Scan all: %v", err)
	}
	want, _ := m.scan("", "", 0, 0)
	checkKVs(t, "scan all", kvs, more, want, false)
	checkAppendPaths(t, s, m, want)
}

// checkAppendPaths compares GetAppend (after bytes already in dst) and
// ScanFunc (all pairs, and stopped after two) with the model; want is the
// model's full scan.
func checkAppendPaths(t *testing.T, s *Store, m model, want []systems.KeyValue) {
	t.Helper()
	prefix := []byte("dst:")
	buf := append([]byte(nil), prefix...)
	for k, v := range m {
		got, found, err := s.GetAppend(buf[:len(prefix)], []byte(k))
		if err != nil || !found || !bytes.Equal(got[:len(prefix)], prefix) || !bytes.Equal(got[len(prefix):], v) {
			t.Fatalf("GetAppend(%q) = %d bytes, found %v, err %v; want %d bytes after the prefix", k, len(got), found, err, len(v))
		}
		buf = got
	}
	if got, found, err := s.GetAppend(prefix, []byte("no such key")); err != nil || found || !bytes.Equal(got, prefix) {
		t.Fatalf("GetAppend of an absent key = %q, found %v, err %v; want dst", got, found, err)
	}
	for _, stopAfter := range []int{0, 2} {
		var got []systems.KeyValue
		err := s.ScanFunc(nil, nil, 0, func(k, v []byte) (bool, error) {
			got = append(got, systems.KeyValue{Key: bytes.Clone(k), Value: bytes.Clone(v)})
			return stopAfter == 0 || len(got) < stopAfter, nil
		})
		if err != nil {
			t.Fatalf("ScanFunc: %v", err)
		}
		w := want
		if stopAfter > 0 && len(w) > stopAfter {
			w = w[:stopAfter]
		}
		checkKVs(t, fmt.Sprintf("ScanFunc stopped after %d", stopAfter), got, false, w, false)
	}
}

func checkKVs(t *testing.T, what string, got []systems.KeyValue, gotMore bool, want []systems.KeyValue, wantMore bool) {
	t.Helper()
	if len(got) != len(want) || gotMore != wantMore {
		t.Fatalf("%s: %d pairs more=%v, want %d pairs more=%v", what, len(got), gotMore, len(want), wantMore)
	}
	for i := range want {
		if !bytes.Equal(got[i].Key, want[i].Key) || !bytes.Equal(got[i].Value, want[i].Value) {
			t.Fatalf("%s: pair %d is %q (%d bytes), want %q (%d bytes)", what, i, got[i].Key, len(got[i].Value), want[i].Key, len(want[i].Value))
		}
	}
}

func forEachIndex(t *testing.T, f func(t *testing.T, kind string)) {
	for _, kind := range IndexKinds() {
		t.Run(kind, func(t *testing.T) { f(t, kind) })
	}
}

func newRand(t testing.TB, seed int64) *rand.Rand {
	t.Logf("seed %d", seed)
	return rand.New(rand.NewSource(seed))
}

func randValue(rng *rand.Rand, n int) []byte {
	v := make([]byte, n)
	rng.Read(v)
	return v
}

func TestGetOverwriteDelete(t *testing.T) {
	forEachIndex(t, func(t *testing.T, kind string) {
		dir := t.TempDir()
		l := openLog(t, dir)
		s := openStore(t, kind, dir, l)
		if s.AppliedIndex() != 0 {
			t.Fatalf("new store applied index %d", s.AppliedIndex())
		}
		cmds := []systems.Command{put("a", []byte("1")), put("b", []byte("2")), none(), put("a", []byte("3")),
			del("b"), put("c", []byte{}), del("never-written")}
		ents := appendCommands(t, l, cmds...)
		mustApply(t, s, ents)
		if got := s.AppliedIndex(); got != ents[len(ents)-1].Index {
			t.Fatalf("applied index %d, want %d", got, ents[len(ents)-1].Index)
		}
		m := model{}
		m.apply(cmds...)
		checkModel(t, s, m)
		for _, k := range []string{"b", "never-written", "zzz", ""} {
			if v, found, err := s.Get([]byte(k)); found || err != nil || v != nil {
				t.Fatalf("Get(%q) = %q, %v, %v; want absent", k, v, found, err)
			}
		}
		// An empty value is found, and not nil.
		if v, found, err := s.Get([]byte("c")); !found || err != nil || v == nil || len(v) != 0 {
			t.Fatalf("Get(c) = %q, %v, %v", v, found, err)
		}
		// The returned value is the caller's.
		v, _, _ := s.Get([]byte("a"))
		v[0] = 'x'
		if v2, _, _ := s.Get([]byte("a")); string(v2) != "3" {
			t.Fatalf("value changed under the store: %q", v2)
		}
		// OpNone alone advances the applied index.
		ents = appendCommands(t, l, none())
		mustApply(t, s, ents)
		if s.AppliedIndex() != ents[0].Index {
			t.Fatalf("applied %d after a no-op entry %d", s.AppliedIndex(), ents[0].Index)
		}
	})
}

func TestApplyRejectsForeignLocation(t *testing.T) {
	forEachIndex(t, func(t *testing.T, kind string) {
		dir := t.TempDir()
		l := openLog(t, dir)
		s := openStore(t, kind, dir, l)
		ents := appendCommands(t, l, put("a", []byte("1")), put("b", []byte("2")))
		ents[1].Location = ents[0].Location
		if err := s.Apply(ents); err == nil {
			t.Fatal("Apply accepted a put whose location is another entry's")
		}
		bad := []systems.AppliedEntry{{Index: 9, Command: systems.Command{Op: 7}}}
		if err := s.Apply(bad); err == nil {
			t.Fatal("Apply accepted an unknown op")
		}
	})
}

func TestScan(t *testing.T) {
	forEachIndex(t, func(t *testing.T, kind string) {
		rng := newRand(t, 42)
		dir := t.TempDir()
		l := openLog(t, dir)
		s := openStore(t, kind, dir, l)
		m := model{}
		for round := 0; round < 5; round++ {
			var cmds []systems.Command
			for i := 0; i < 60; i++ {
				k := fmt.Sprintf("k%03d", rng.Intn(150))
				switch r := rng.Intn(10); {
				case r < 7:
					cmds = append(cmds, put(k, randValue(rng, rng.Intn(300))))
				case r < 9:
					cmds = append(cmds, del(k))
				default:
					cmds = append(cmds, none())
				}
			}
			mustApply(t, s, appendCommands(t, l, cmds...))
			m.apply(cmds...)
		}
		checkModel(t, s, m)
		key := func() string { return fmt.Sprintf("k%03d", rng.Intn(160)) }
		for i := 0; i < 300; i++ {
			start, end := key(), key()
			if rng.Intn(5) == 0 {
				end = ""
			}
			if rng.Intn(10) == 0 {
				start = ""
			}
			limit, maxBytes := 0, 0
			if rng.Intn(2) == 0 {
				limit = 1 + rng.Intn(20)
			}
			if rng.Intn(2) == 0 {
				maxBytes = 1 + rng.Intn(3000)
			}
			what := fmt.Sprintf("Scan(%q, %q, %d, %d)", start, end, limit, maxBytes)
			got, more, err := s.Scan([]byte(start), []byte(end), limit, maxBytes)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			want, wantMore := m.scan(start, end, limit, maxBytes)
			if end != "" && start >= end {
				want, wantMore = nil, false
			}
			checkKVs(t, what, got, more, want, wantMore)
		}
		// Specific cases.
		keys, _ := m.scan("", "", 0, 0)
		if len(keys) < 10 {
			t.Fatalf("model too small: %d keys", len(keys))
		}
		k3, k7 := keys[3].Key, keys[7].Key
		got, _, _ := s.Scan(k3, k7, 0, 0)
		if len(got) != 4 || !bytes.Equal(got[0].Key, k3) || !bytes.Equal(got[3].Key, keys[6].Key) {
			t.Fatalf("Scan [k3, k7) returned %d pairs; the end bound must be exclusive", len(got))
		}
		if got, more, _ := s.Scan(k7, k3, 0, 0); len(got) != 0 || more {
			t.Fatalf("Scan with start > end returned %d pairs", len(got))
		}
		if got, more, _ := s.Scan(k3, k3, 0, 0); len(got) != 0 || more {
			t.Fatalf("Scan with start == end returned %d pairs", len(got))
		}
		if got, more, _ := s.Scan([]byte("zz"), nil, 0, 0); len(got) != 0 || more {
			t.Fatalf("Scan past the last key returned %d pairs", len(got))
		}
		// maxBytes 1 returns one pair and more=true; continuing from the last
		// key + "\x00" walks the whole key space one pair at a time.
		var all []systems.KeyValue
		start := []byte(nil)
		for {
			got, more, err := s.Scan(start, nil, 0, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 && (len(got) != 0 || more) {
				t.Fatalf("Scan with maxBytes 1 returned %d pairs, more=%v", len(got), more)
			}
			all = append(all, got...)
			if !more {
				break
			}
			start = append(bytes.Clone(got[0].Key), 0)
		}
		checkKVs(t, "paged scan", all, false, keys, false)
		// A limit that ends the range exactly is not "more".
		if got, more, _ := s.Scan(nil, nil, len(keys), 1<<30); len(got) != len(keys) || more {
			t.Fatalf("Scan with limit = #keys returned %d pairs, more=%v", len(got), more)
		}
	})
}

func TestReopen(t *testing.T) {
	forEachIndex(t, func(t *testing.T, kind string) {
		rng := newRand(t, 7)
		dir := t.TempDir()
		l := openLog(t, dir)
		s := openStore(t, kind, dir, l)
		m := model{}
		var all []systems.AppliedEntry
		for round := 0; round < 4; round++ {
			var cmds []systems.Command
			for i := 0; i < 40; i++ {
				k := fmt.Sprintf("key-%02d", rng.Intn(50))
				if rng.Intn(4) == 0 {
					cmds = append(cmds, del(k))
				} else {
					cmds = append(cmds, put(k, randValue(rng, rng.Intn(500))))
				}
			}
			ents := appendCommands(t, l, cmds...)
			mustApply(t, s, ents)
			all = append(all, ents...)
			m.apply(cmds...)
		}
		last := all[len(all)-1].Index
		sum1, applied1, err := s.StateHash()
		if err != nil || applied1 != last {
			t.Fatalf("StateHash: applied %d, err %v", applied1, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l = openLog(t, dir)
		s = openStore(t, kind, dir, l)
		switch kind {
		case IndexLevelDB:
			if s.AppliedIndex() != last {
				t.Fatalf("leveldb applied index after reopen %d, want %d", s.AppliedIndex(), last)
			}
			// Replaying everything (as after a crash) changes nothing.
			mustApply(t, s, all)
		case IndexMemory:
			if s.AppliedIndex() != 0 {
				t.Fatalf("memory applied index after reopen %d, want 0", s.AppliedIndex())
			}
			if v, found, _ := s.Get([]byte("key-00")); found {
				t.Fatalf("memory index kept %q over a restart", v)
			}
			// The node replays the log from index 1; rebuild it the same way,
			// re-reading entries and locations from the reopened log.
			ents, err := l.Entries(1, last+1, 1<<40)
			if err != nil {
				t.Fatal(err)
			}
			mustApply(t, s, appliedEntries(t, l, ents))
		}
		checkModel(t, s, m)
		sum2, applied2, err := s.StateHash()
		if err != nil || applied2 != last || !bytes.Equal(sum1, sum2) {
			t.Fatalf("StateHash after reopen: %x at %d (err %v), want %x at %d", sum2, applied2, err, sum1, last)
		}
	})
}

func TestIdempotentReapply(t *testing.T) {
	forEachIndex(t, func(t *testing.T, kind string) {
		dir := t.TempDir()
		l := openLog(t, dir)
		s := openStore(t, kind, dir, l)
		first := appendCommands(t, l, put("k", []byte("old")), del("k"), put("j", []byte("j1")))
		mustApply(t, s, first)
		second := appendCommands(t, l, put("j", []byte("j2")), put("n", []byte("new")))
		mustApply(t, s, second)
		// After a torn log tail the node rewinds and replays in order from
		// an earlier index: the end state is the same (re-applying put k
		// before its delete must not resurrect it).
		mustApply(t, s, append(append([]systems.AppliedEntry(nil), first...), second...))
		mustApply(t, s, append(append([]systems.AppliedEntry(nil), first[1:]...), second...))
		if s.AppliedIndex() != second[1].Index {
			t.Fatalf("applied index %d, want %d", s.AppliedIndex(), second[1].Index)
		}
		checkModel(t, s, model{"j": []byte("j2"), "n": []byte("new")})
	})
}

func TestCorruptLocation(t *testing.T) {
	forEachIndex(t, func(t *testing.T, kind string) {
		rng := newRand(t, 3)
		dir := t.TempDir()
		l := openLog(t, dir)
		s := openStore(t, kind, dir, l)
		m := model{}
		var cmds []systems.Command
		for i := 0; i < 40; i++ {
			cmds = append(cmds, put(fmt.Sprintf("k%02d", i), randValue(rng, 100+rng.Intn(400))))
		}
		ents := appendCommands(t, l, cmds...)
		mustApply(t, s, ents)
		m.apply(cmds...)
		segs := l.Segments()
		if len(segs) < 2 {
			t.Fatalf("want entries over several segments, got %d", len(segs))
		}

		// Point keys at bad places directly in the index.
		var b IndexBatch
		past := ents[5].Location
		past.Offset = segs[0].SizeBytes + 1000 // past the end of segment 1
		if past.Segment != segs[0].ID {
			t.Fatalf("entry 5 is not in the first segment")
		}
		b.Put([]byte("past-end"), past)
		b.Put([]byte("no-segment"), systems.Location{Segment: 999, Offset: 0, Length: 100, Index: 1})
		b.Put([]byte("other-key"), ents[6].Location) // the record of k06
		b.SetApplied(s.AppliedIndex())
		if err := s.index.Write(&b); err != nil {
			t.Fatal(err)
		}
		// Corrupt k20's record: flip the last byte (value payload) on disk.
		loc := ents[20].Location
		flipByte(t, segmentPath(t, l, loc.Segment), loc.Offset+int64(loc.Length)-1)

		for _, k := range []string{"past-end", "no-segment", "other-key", "k20"} {
			v, found, err := s.Get([]byte(k))
			if !errors.Is(err, systems.ErrCorrupt) || found || v != nil {
				t.Fatalf("Get(%q) = %d bytes, found %v, err %v; want an error wrapping ErrCorrupt", k, len(v), found, err)
			}
			t.Logf("Get(%q): %v", k, err)
		}
		delete(m, "k20")
		for k, want := range m {
			if got, found, err := s.Get([]byte(k)); err != nil || !found || !bytes.Equal(got, want) {
				t.Fatalf("Get(%q) after corruption elsewhere: found %v err %v", k, found, err)
			}
		}
		if _, _, err := s.Scan([]byte("k19"), []byte("k21"), 0, 0); !errors.Is(err, systems.ErrCorrupt) {
			t.Fatalf("Scan over the corrupt record: err %v", err)
		}
		if got, _, err := s.Scan([]byte("k21"), []byte("k30"), 0, 0); err != nil || len(got) != 9 {
			t.Fatalf("Scan beside the corrupt record: %d pairs, err %v", len(got), err)
		}
		if _, _, err := s.StateHash(); !errors.Is(err, systems.ErrCorrupt) {
			t.Fatalf("StateHash over a corrupt record: err %v", err)
		}
		// Deleting the bad keys heals the store.
		ents = appendCommands(t, l, del("past-end"), del("no-segment"), del("other-key"), del("k20"))
		mustApply(t, s, ents)
		if _, _, err := s.StateHash(); err != nil {
			t.Fatalf("StateHash after deleting the bad keys: %v", err)
		}
	})
}

func segmentPath(t *testing.T, l *raftlog.Log, id uint64) string {
	t.Helper()
	for _, sg := range l.Segments() {
		if sg.ID == id {
			return sg.Path
		}
	}
	t.Fatalf("no segment %d", id)
	return ""
}

func TestStateHashEqualAcrossIndexes(t *testing.T) {
	rng := newRand(t, 11)
	dir := t.TempDir()
	l := openLog(t, dir)
	ldb := openStore(t, IndexLevelDB, dir, l)
	mem := openStore(t, IndexMemory, dir, l)
	var cmds []systems.Command
	for i := 0; i < 300; i++ {
		k := fmt.Sprintf("%x", rng.Intn(100))
		if rng.Intn(5) == 0 {
			cmds = append(cmds, del(k))
		} else {
			cmds = append(cmds, put(k, randValue(rng, rng.Intn(200))))
		}
	}
	ents := appendCommands(t, l, cmds...)
	for _, part := range [][]systems.AppliedEntry{ents[:100], ents[100:250], ents[250:]} {
		mustApply(t, ldb, part)
		mustApply(t, mem, part)
		a, ai, err1 := ldb.StateHash()
		b, bi, err2 := mem.StateHash()
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) || ai != bi || ai != part[len(part)-1].Index {
			t.Fatalf("state hashes differ: leveldb %x at %d, memory %x at %d", a, ai, b, bi)
		}
	}
	// A different state (one more put) gives a different sum.
	before, _, _ := mem.StateHash()
	mustApply(t, mem, appendCommands(t, l, put("extra", []byte("x"))))
	after, _, _ := mem.StateHash()
	if bytes.Equal(before, after) {
		t.Fatal("state hash did not change with the state")
	}
}

// TestConcurrentReads runs Gets and Scans against Apply (for -race). Each
// value names its key and version; a reader checks the pairing and that
// versions never go backwards for its key.
func TestConcurrentReads(t *testing.T) {
	forEachIndex(t, func(t *testing.T, kind string) {
		dir := t.TempDir()
		l := openLog(t, dir)
		s := openStore(t, kind, dir, l)
		const keys, versions = 8, 60
		var batches [][]systems.AppliedEntry
		for v := 0; v < versions; v++ {
			var cmds []systems.Command
			for k := 0; k < keys; k++ {
				cmds = append(cmds, put(fmt.Sprintf("k%d", k), []byte(fmt.Sprintf("k%d=%04d", k, v))))
			}
			batches = append(batches, appendCommands(t, l, cmds...))
		}
		var wg sync.WaitGroup
		errc := make(chan error, 4)
		done := make(chan struct{})
		for r := 0; r < 3; r++ {
			wg.Add(1)
			go func(r int) {
				defer wg.Done()
				last := -1
				key := fmt.Sprintf("k%d", r)
				for i := 0; ; i++ {
					select {
					case <-done:
						return
					default:
					}
					if i%2 == 0 {
						v, found, err := s.Get([]byte(key))
						if err != nil {
							errc <- err
							return
						}
						if !found {
							continue
						}
						var ver int
						if _, err := fmt.Sscanf(string(v), key+"=%d", &ver); err != nil || ver < last {
							errc <- fmt.Errorf("Get(%s) = %q after version %d", key, v, last)
							return
						}
						last = ver
						continue
					}
					kvs, _, err := s.Scan(nil, nil, 0, 0)
					if err != nil {
						errc <- err
						return
					}
					// A scan is one consistent view: all keys of one batch
					// carry the same version.
					for _, kv := range kvs {
						if !bytes.Equal(kv.Value[len(kv.Key)+1:], kvs[0].Value[len(kvs[0].Key)+1:]) {
							errc <- fmt.Errorf("inconsistent scan: %q vs %q", kv.Value, kvs[0].Value)
							return
						}
					}
				}
			}(r)
		}
		for _, b := range batches {
			mustApply(t, s, b)
		}
		close(done)
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Fatal(err)
		}
	})
}

func TestConfig(t *testing.T) {
	for _, sys := range []systems.System{NezhaNoGC(), Nezha()} {
		if sys.LogDir != ValueLogDir || sys.NewConfig == nil {
			t.Fatalf("%s: LogDir %q", sys.Name, sys.LogDir)
		}
		c := sys.NewConfig().(*Config)
		if c.Index != IndexLevelDB || c.Validate() != nil {
			t.Fatalf("%s: default index %q, Validate %v", sys.Name, c.Index, c.Validate())
		}
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		c.RegisterFlags(fs)
		if err := fs.Parse([]string{"-index", "memory"}); err != nil || c.Index != IndexMemory {
			t.Fatalf("-index memory: %v, index %q", err, c.Index)
		}
		d := c.Describe()
		if d["system"] != sys.Name || d["index"] != IndexMemory || d["gc"] != (sys.Name == Name) {
			t.Fatalf("Describe = %v", d)
		}
	}
	if _, err := systems.NewRegistry(NezhaNoGC(), Nezha()); err != nil {
		t.Fatal(err)
	}
	c := &Config{Index: "btree"}
	err := c.Validate()
	var ue *cmdline.UsageError
	if err == nil || !errors.As(err, &ue) {
		t.Fatalf("Validate of a bad config = %v, want usage errors", err)
	}
	t.Logf("Validate: %v", err)
	if _, err := c.Open(systems.Env{Dir: t.TempDir()}); err == nil {
		t.Fatal("Open of an invalid config succeeded")
	}
	// Open lays out <data>/index/ and <data>/sorted/.
	dir := t.TempDir()
	l := openLog(t, dir)
	openStore(t, IndexLevelDB, dir, l)
	for _, sub := range []string{IndexDir, SortedDir, ValueLogDir} {
		if fi, err := os.Stat(filepath.Join(dir, sub)); err != nil || !fi.IsDir() {
			t.Fatalf("%s/: %v", sub, err)
		}
	}
	if des, _ := os.ReadDir(filepath.Join(dir, SortedDir)); len(des) != 0 {
		t.Fatalf("sorted/ is not empty: %d files", len(des))
	}
}

func TestLocationEncoding(t *testing.T) {
	rng := newRand(t, 5)
	for i := 0; i < 1000; i++ {
		loc := systems.Location{Segment: rng.Uint64() >> rng.Intn(64), Offset: rng.Int63() >> rng.Intn(63),
			Length: rng.Uint32() >> rng.Intn(32), Index: rng.Uint64() >> rng.Intn(64)}
		if i%2 == 1 { // a TTL (at least two bytes: a cut one does not decode)
			loc.ExpiresUnixNano = rng.Int63()>>rng.Intn(40) | 1<<8
		}
		enc := appendLocation(nil, loc)
		if len(enc) > maxLocationBytes {
			t.Fatalf("%s encodes to %d bytes", loc, len(enc))
		}
		got, err := decodeLocation(enc)
		if err != nil || got != loc {
			t.Fatalf("decode(encode(%s)) = %s, %v", loc, got, err)
		}
		if _, err := decodeLocation(enc[:len(enc)-1]); !errors.Is(err, systems.ErrCorrupt) {
			t.Fatalf("truncated location decoded: %v", err)
		}
	}
	if n := len(appendLocation(nil, systems.Location{Segment: 3, Offset: 40 << 20, Length: 256 << 10, Index: 1 << 20})); n > 12 {
		t.Fatalf("typical location takes %d bytes", n)
	}
	// A location written before TTLs existed (four fields) decodes with no
	// expiry; a fifth field of 0 is not a location.
	old := []byte{0x03, 0x80, 0x01, 0x80, 0x08, 0x07}
	if got, err := decodeLocation(old); err != nil || got != (systems.Location{Segment: 3, Offset: 128, Length: 1024, Index: 7}) {
		t.Fatalf("old location decoded as %s, %v", got, err)
	}
	if _, err := decodeLocation(append(old, 0)); !errors.Is(err, systems.ErrCorrupt) {
		t.Fatalf("expiry 0 decoded: %v", err)
	}
}

// TestGCFlags: the flags the experiments give nezha for a GC strategy and
// round threshold are nezha's own serve flags, and parse.
func TestGCFlags(t *testing.T) {
	for _, tc := range []struct {
		strategy string
		want     string
	}{
		{"", "-gcThresholdBytes 4096"},
		{StrategyMerge, "-gc merge -gcThresholdBytes 4096"},
	} {
		args := Nezha().GCFlags(tc.strategy, 4096)
		if got := strings.Join(args, " "); got != tc.want {
			t.Errorf("GCFlags(%q) = %q, want %q", tc.strategy, got, tc.want)
		}
		c := newConfig(Name)
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		c.RegisterFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Errorf("GCFlags(%q): %v", tc.strategy, err)
		}
	}
}
