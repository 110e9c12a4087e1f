package baseline

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/nezha-harness/nezha/systems"
)

// lsmConfig is an lsm-raft test configuration: spans are cut by the tests
// (cutSpan), not by size or idleness, unless they change it.
func lsmConfig() *Config {
	c := testConfig(ModeLSMRaft)
	c.SpanBytes = 1 << 40
	c.SpanIdle = time.Hour
	c.MaxHeldBytes = 1 << 40
	return c
}

// openLSM opens an lsm-raft store in dir, as leader or follower.
func openLSM(t testing.TB, c *Config, dir string, leader bool) LSMRaftStore {
	t.Helper()
	l := LSMRaftStore{openTest(t, c, dir)}
	l.SetLeader(leader)
	return l
}

// cutSpan cuts the leader's span now and writes it, and returns its
// header (the newest kept span).
func cutSpan(t testing.TB, l LSMRaftStore) systems.SpanHeader {
	t.Helper()
	l.applyMu.Lock()
	c := l.lr.building
	l.lr.building = newKeyOps()
	l.applyMu.Unlock()
	if c.empty() {
		t.Fatal("cutSpan: nothing applied since the last cut")
	}
	if err := l.lr.writeSpan(c); err != nil {
		t.Fatal(err)
	}
	h, rc, err := l.OpenSpan(0)
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if h.First != c.first || h.Last != c.last {
		t.Fatalf("newest span %v, want %d..%d", h, c.first, c.last)
	}
	return h
}

// ship offers the span of from covering next (OpenSpan) to to, sending
// its data if to accepts, and returns to's verdict and next index.
func ship(t testing.TB, from, to LSMRaftStore, next uint64) (systems.SpanHeader, systems.SpanVerdict, uint64) {
	t.Helper()
	h, rc, err := from.OpenSpan(next)
	if err != nil {
		t.Fatalf("open span for %d: %v", next, err)
	}
	defer rc.Close()
	v, n, err := to.OfferSpan(h)
	if err != nil {
		t.Fatalf("offer %v: %v", h, err)
	}
	if v != systems.SpanAccept {
		return h, v, n
	}
	if v, n, err = to.ReceiveSpan(h, rc); err != nil {
		t.Fatalf("receive %v: %v", h, err)
	}
	return h, v, n
}

// rocksOnly is the user data in s's RocksDB alone (held entries left out).
func rocksOnly(t testing.TB, s *Store) model {
	t.Helper()
	it := s.db.NewIteratorCF(s.ro, s.data)
	defer it.Close()
	m := model{}
	m2 := newMergedIter(it, nil, nil)
	for m2.seek(nil); m2.valid; m2.next() {
		m[string(m2.key)] = clone(m2.value)
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

func sameModel(a, b model) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// A span holds the last write of each key of its entries (puts, deletes as
// tombstones, last write wins), and the index under the empty key; a
// follower that ingests it holds nothing more and reads the same state.
func TestLSMRaftSpanContents(t *testing.T) {
	c := lsmConfig()
	leader := openLSM(t, c, t.TempDir(), true)
	defer leader.Close()
	follower := openLSM(t, c, t.TempDir(), false)
	defer follower.Close()
	base := []systems.AppliedEntry{put(1, "b", "old"), put(2, "gone", "x"), put(3, "kept", "k")}
	span := []systems.AppliedEntry{
		put(4, "a", "1"), put(5, "b", "2"), put(6, "a", "3"), // overwrite: the span keeps a=3
		del(7, "b"), del(8, "gone"), del(9, "never-written"), noop(10),
		put(11, "c", "x"), put(12, "c", ""), // last write wins, an empty value
	}
	for _, s := range []LSMRaftStore{leader, follower} {
		mustApply(t, s.Store, base...)
	}
	// The follower gets base through its own replay (a gap with no span
	// for it), the span through ingestion.
	if err := follower.lr.replayNow(replayBound); err != nil {
		t.Fatal(err)
	}
	cutSpan(t, leader)
	mustApply(t, leader.Store, span...)
	h := cutSpan(t, leader)
	if h.First != 4 || h.Last != 12 {
		t.Fatalf("span %v, want 4..12", h)
	}
	if size, crc, err := fileCRC(leader.lr.kept[len(leader.lr.kept)-1].path); err != nil || size != h.SizeBytes || crc != h.CRC32C {
		t.Fatalf("span file: %d bytes, CRC %08x, %v; header says %d, %08x", size, crc, err, h.SizeBytes, h.CRC32C)
	}
	// The file itself, ingested into an empty database: the index and
	// each key's last write, no deleted key.
	contents := spanFileContents(t, leader.lr.kept[len(leader.lr.kept)-1].path)
	want := map[string]string{"": string(spanIndexValue(4, 12)), "a": "3", "c": ""}
	if fmt.Sprint(contents) != fmt.Sprint(want) {
		t.Fatalf("span file holds %q, want %q", contents, want)
	}

	mustApply(t, follower.Store, span...)
	if got := follower.AppliedIndex(); got != 3 {
		t.Fatalf("follower applied index %d while it holds 4..12, want 3", got)
	}
	ref := model{}
	ref.apply(base)
	ref.apply(span)
	checkState(t, follower.Store, ref, "b", "gone", "never-written")
	_, v, next := ship(t, leader, follower, follower.NextSpanIndex())
	if v != systems.SpanIngested || next != 13 || follower.AppliedIndex() != 12 {
		t.Fatalf("ingest: %v, next %d, applied %d; want ingested, 13, 12", v, next, follower.AppliedIndex())
	}
	if follower.lr.heldBytes.Load() != 0 || follower.lr.held.t.Len() != 0 {
		t.Fatalf("follower still holds %d bytes after the span", follower.lr.heldBytes.Load())
	}
	if got := rocksOnly(t, follower.Store); !sameModel(got, ref) {
		t.Fatalf("follower's RocksDB alone holds %v, want %v", got, ref)
	}
	checkState(t, follower.Store, ref, "b", "gone", "never-written")
	checkState(t, leader.Store, ref)
	if follower.lr.counters.spansIngested.Load() != 1 || leader.lr.counters.spansCut.Load() != 2 {
		t.Fatalf("counters: ingested %d, cut %d; want 1, 2", follower.lr.counters.spansIngested.Load(), leader.lr.counters.spansCut.Load())
	}
}

// spanFileContents ingests a copy of a span file into an empty database and
// returns every key and value in it.
func spanFileContents(t *testing.T, path string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(dir, "copy.sst")
	if err := os.WriteFile(cp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	o := grocksdb.NewDefaultOptions()
	defer o.Destroy()
	o.SetCreateIfMissing(true)
	db, err := grocksdb.OpenDb(o, filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	io := grocksdb.NewDefaultIngestExternalFileOptions()
	defer io.Destroy()
	if err := db.IngestExternalFile([]string{cp}, io); err != nil {
		t.Fatal(err)
	}
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	it := db.NewIterator(ro)
	defer it.Close()
	out := map[string]string{}
	for it.SeekToFirst(); it.Valid(); it.Next() {
		out[string(it.Key().Data())] = string(it.Value().Data())
	}
	return out
}

// Spans are cut once the entries applied since the last cut hold
// -lsmraft.spanBytes, and once nothing was applied for -lsmraft.spanIdle;
// the leader keeps the newest -lsmraft.retainSpans.
func TestLSMRaftSpanCutting(t *testing.T) {
	c := lsmConfig()
	c.SpanBytes = 1000
	c.RetainSpans = 2
	leader := openLSM(t, c, t.TempDir(), true)
	defer leader.Close()
	value := string(bytes.Repeat([]byte("v"), 299)) // 300 bytes with its key
	for i := uint64(1); i <= 8; i++ {
		mustApply(t, leader.Store, put(i, "k", value))
	}
	// Cut after entries 4 (1200 bytes) and 8; written in the background.
	waitSpans(t, leader, 2)
	if h, _, _ := openHeader(leader, 1); h.First != 1 || h.Last != 4 {
		t.Fatalf("first span %v, want 1..4", h)
	}
	if h, _, _ := openHeader(leader, 5); h.First != 5 || h.Last != 8 {
		t.Fatalf("second span %v, want 5..8", h)
	}
	mustApply(t, leader.Store, put(9, "k", value))
	cutSpan(t, leader)
	// Only two are kept: 1..4 is gone; an index before the oldest kept
	// span gets it with NoEarlier.
	if h, _, err := openHeader(leader, 2); err != nil || h.First != 5 || !h.NoEarlier {
		t.Fatalf("span for index 2: %v (no earlier %v), %v; want 5..8 with NoEarlier", h, h.NoEarlier, err)
	}
	if _, _, err := openHeader(leader, 10); !errors.Is(err, systems.ErrNoSpan) {
		t.Fatalf("span for index 10: %v, want ErrNoSpan", err)
	}
	if files, _ := filepath.Glob(filepath.Join(leader.lr.spans, "*")); len(files) != 2 {
		t.Fatalf("span files %v, want the two kept", files)
	}

	// Idle: a short span is cut once nothing was applied for spanIdle
	// (the timer checks every 10 ms).
	c = lsmConfig()
	c.SpanIdle = 20 * time.Millisecond
	idle := openLSM(t, c, t.TempDir(), true)
	defer idle.Close()
	mustApply(t, idle.Store, put(1, "k", "x"), noop(2))
	waitSpans(t, idle, 1)
	if h, _, _ := openHeader(idle, 1); h.First != 1 || h.Last != 2 {
		t.Fatalf("idle span %v, want 1..2", h)
	}
}

func openHeader(l LSMRaftStore, next uint64) (systems.SpanHeader, bool, error) {
	h, rc, err := l.OpenSpan(next)
	if err == nil {
		rc.Close()
	}
	return h, h.NoEarlier, err
}

// waitSpans waits until n spans were cut.
func waitSpans(t *testing.T, l LSMRaftStore, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.lr.counters.spansCut.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d spans cut, want %d", l.lr.counters.spansCut.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A follower takes spans strictly in log order: one already passed is
// skipped, one too far ahead is refused with its next index (and with
// NoEarlier it replays what it holds instead), one it has not applied yet
// waits, and one that overlaps what it stored is taken.
func TestLSMRaftIngestOrder(t *testing.T) {
	c := lsmConfig()
	c.RetainSpans = 5
	leader := openLSM(t, c, t.TempDir(), true)
	defer leader.Close()
	follower := openLSM(t, c, t.TempDir(), false)
	defer follower.Close()
	r := rand.New(rand.NewPCG(testSeed(t), 51))
	ents := randomEntries(r, 0, 60, 15, 64)
	ref := model{}
	// Spans 1..10, 11..20, 21..30, 31..40, 41..50; 51..60 uncut.
	var spans []systems.SpanHeader
	for i := 0; i < 50; i += 10 {
		mustApply(t, leader.Store, ents[i:i+10]...)
		spans = append(spans, cutSpan(t, leader))
	}
	mustApply(t, leader.Store, ents[50:]...)
	ref.apply(ents)

	offer := func(h systems.SpanHeader) (systems.SpanVerdict, uint64) {
		t.Helper()
		v, next, err := follower.OfferSpan(h)
		if err != nil {
			t.Fatal(err)
		}
		return v, next
	}
	// Nothing applied yet: behind.
	if v, next := offer(spans[0]); v != systems.SpanBehind || next != 1 {
		t.Fatalf("span 1..10 before applying: %v, next %d; want behind, 1", v, next)
	}
	mustApply(t, follower.Store, ents[:35]...)
	// Too far ahead (the follower stored nothing): refused with next 1.
	if v, next := offer(spans[1]); v != systems.SpanGap || next != 1 {
		t.Fatalf("span 11..20 at 0: %v, next %d; want gap, 1", v, next)
	}
	if _, v, next := ship(t, leader, follower, 1); v != systems.SpanIngested || next != 11 {
		t.Fatalf("span 1..10: %v, next %d; want ingested, 11", v, next)
	}
	// Passed: skipped.
	if v, next := offer(spans[0]); v != systems.SpanSkipped || next != 11 {
		t.Fatalf("span 1..10 again: %v, next %d; want skipped, 11", v, next)
	}
	// Overlapping what it stored: the follower replays 11..35 itself
	// (stored 35), then 31..40 is taken over it once applied.
	if err := follower.lr.replayNow(replayBound); err != nil {
		t.Fatal(err)
	}
	if v, next := offer(spans[3]); v != systems.SpanBehind || next != 36 {
		t.Fatalf("span 31..40 at applied 35: %v, next %d; want behind, 36", v, next)
	}
	mustApply(t, follower.Store, ents[35:45]...)
	if _, v, next := ship(t, leader, follower, 36); v != systems.SpanIngested || next != 41 {
		t.Fatalf("span 31..40 at stored 35: %v, next %d; want ingested, 41", v, next)
	}
	mid := model{}
	mid.apply(ents[:45])
	checkState(t, follower.Store, mid)
	// NoEarlier and a gap: the follower replays what it holds (41..45)
	// and passes the span.
	mustApply(t, follower.Store, ents[45:]...)
	h := spans[4]
	h.First = 45 // a gap: 41..44 are in no span the leader has
	h.NoEarlier = true
	if v, next := offer(h); v != systems.SpanReplayed || next != 61 || follower.AppliedIndex() != 60 {
		t.Fatalf("NoEarlier span with a gap: %v, next %d, applied %d; want replayed, 61, 60", v, next, follower.AppliedIndex())
	}
	checkState(t, follower.Store, ref)
	if n := follower.lr.counters.replays[1].Load(); n != 1 {
		t.Fatalf("no_span replays %d, want 1", n)
	}
}

// Whatever the order of entries, cuts, transfers and replays, a follower
// reads the leader's state at every step, and after a restart (held
// entries lost) replaying the log above its AppliedIndex gets it back.
func TestLSMRaftRandomized(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 61))
	c := lsmConfig()
	c.MaxHeldBytes = 8 << 10 // some replays by the bound
	leader := openLSM(t, c, t.TempDir(), true)
	defer leader.Close()
	fdir := t.TempDir()
	follower := openLSM(t, c, fdir, false)
	ents := randomEntries(r, 0, 600, 40, 300)
	ref := model{}
	next := uint64(1)
	for i := 0; i < len(ents); {
		n := min(1+r.IntN(12), len(ents)-i)
		batch := ents[i : i+n]
		i += n
		mustApply(t, leader.Store, batch...)
		mustApply(t, follower.Store, batch...)
		ref.apply(batch)
		if r.IntN(4) == 0 {
			cutSpan(t, leader)
		}
		if r.IntN(3) == 0 {
			if _, _, err := leader.OpenSpan(next); err == nil {
				_, _, next = ship(t, leader, follower, next)
			}
		}
		if r.IntN(10) == 0 {
			checkState(t, follower.Store, ref)
		}
	}
	checkState(t, follower.Store, ref)
	checkState(t, leader.Store, ref)
	st := &follower.lr.counters
	t.Logf("seed %d: %d spans ingested, %d skipped, %d refused, %d replays by the bound; follower stored %d of %d",
		seed, st.spansIngested.Load(), st.spansSkipped.Load(), st.spansRefused.Load(), st.replays[2].Load(), follower.AppliedIndex(), len(ents))
	if st.spansIngested.Load() == 0 || st.replays[2].Load() == 0 {
		t.Fatalf("the run ingested %d spans and replayed %d times: both paths must run", st.spansIngested.Load(), st.replays[2].Load())
	}
	// A crash loses the held entries (Close does not write them).
	stored := follower.AppliedIndex()
	follower.Close()
	follower = openLSM(t, c, fdir, false)
	defer follower.Close()
	if got := follower.AppliedIndex(); got != stored {
		t.Fatalf("restart resumes at %d, want %d (the last span or replay)", got, stored)
	}
	mustApply(t, follower.Store, ents[stored:]...)
	checkState(t, follower.Store, ref)
}

// A follower holding more than -lsmraft.maxHeldBytes writes what it holds
// into RocksDB itself; a follower that becomes leader does so at once.
func TestLSMRaftReplay(t *testing.T) {
	c := lsmConfig()
	c.MaxHeldBytes = 100
	s := openLSM(t, c, t.TempDir(), false)
	defer s.Close()
	mustApply(t, s.Store, put(1, "a", "0123456789"), put(2, "b", "0123456789"))
	if s.AppliedIndex() != 0 || s.lr.heldBytes.Load() != 22 {
		t.Fatalf("applied %d, held %d bytes; want 0, 22", s.AppliedIndex(), s.lr.heldBytes.Load())
	}
	mustApply(t, s.Store, put(3, "c", string(bytes.Repeat([]byte("x"), 100))))
	if s.AppliedIndex() != 3 || s.lr.heldBytes.Load() != 0 || s.lr.counters.replays[2].Load() != 1 {
		t.Fatalf("over the bound: applied %d, held %d bytes, bound replays %d; want 3, 0, 1",
			s.AppliedIndex(), s.lr.heldBytes.Load(), s.lr.counters.replays[2].Load())
	}
	mustApply(t, s.Store, del(4, "a"), noop(5))
	s.SetLeader(true)
	deadline := time.Now().Add(10 * time.Second)
	for s.AppliedIndex() != 5 {
		if time.Now().After(deadline) {
			t.Fatalf("a new leader's held entries were not replayed: applied %d, want 5", s.AppliedIndex())
		}
		time.Sleep(time.Millisecond)
	}
	want := model{"b": []byte("0123456789"), "c": bytes.Repeat([]byte("x"), 100)}
	if got := rocksOnly(t, s.Store); !sameModel(got, want) {
		t.Fatalf("RocksDB holds %v after the replays, want %v", got, want)
	}
	// As leader it applies into RocksDB directly.
	mustApply(t, s.Store, put(6, "d", "1"))
	if s.AppliedIndex() != 6 || s.lr.heldBytes.Load() != 0 {
		t.Fatalf("leader: applied %d, held %d; want 6, 0", s.AppliedIndex(), s.lr.heldBytes.Load())
	}
	if s.lr.counters.replays[0].Load() != 1 {
		t.Fatalf("leader replays %d, want 1", s.lr.counters.replays[0].Load())
	}
}

// A span whose bytes do not match its header (a transfer cut short, a
// flipped byte, bytes added) is refused with ErrSpanDamaged and changes
// nothing; the intact span is taken after.
func TestLSMRaftDamagedSpan(t *testing.T) {
	c := lsmConfig()
	leader := openLSM(t, c, t.TempDir(), true)
	defer leader.Close()
	follower := openLSM(t, c, t.TempDir(), false)
	defer follower.Close()
	var ents []systems.AppliedEntry
	for i := uint64(1); i <= 40; i++ {
		ents = append(ents, put(i, fmt.Sprintf("k%02d", i), string(bytes.Repeat([]byte{byte(i)}, 500))))
	}
	mustApply(t, leader.Store, ents...)
	mustApply(t, follower.Store, ents...)
	h := cutSpan(t, leader)
	good, err := os.ReadFile(leader.lr.kept[0].path)
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)/3] ^= 0x40
	for name, data := range map[string][]byte{
		"cut short": good[:len(good)/2], "flipped byte": flipped, "bytes added": append(bytes.Clone(good), 0),
	} {
		v, _, err := follower.OfferSpan(h)
		if err != nil || v != systems.SpanAccept {
			t.Fatalf("%s: offer %v, %v", name, v, err)
		}
		if _, _, err := follower.ReceiveSpan(h, bytes.NewReader(data)); !errors.Is(err, systems.ErrSpanDamaged) {
			t.Fatalf("%s: %v, want ErrSpanDamaged", name, err)
		}
		if follower.AppliedIndex() != 0 || len(rocksOnly(t, follower.Store)) != 0 {
			t.Fatalf("%s: a damaged span changed the store (applied %d)", name, follower.AppliedIndex())
		}
		if files, _ := filepath.Glob(filepath.Join(follower.lr.in, "*")); len(files) != 0 {
			t.Fatalf("%s: files left behind: %v", name, files)
		}
	}
	ref := model{}
	ref.apply(ents)
	if v, next, err := follower.ReceiveSpan(h, bytes.NewReader(good)); err != nil || v != systems.SpanIngested || next != 41 {
		t.Fatalf("intact span: %v, next %d, %v", v, next, err)
	}
	checkState(t, follower.Store, ref)
	if got := rocksOnly(t, follower.Store); !sameModel(got, ref) {
		t.Fatal("the intact span's data is not in RocksDB")
	}
}

// A snapshot restore drops what a follower holds; its state is the
// snapshot's, and spans go on from its index.
func TestLSMRaftRestore(t *testing.T) {
	c := lsmConfig()
	leader := openLSM(t, c, t.TempDir(), true)
	defer leader.Close()
	follower := openLSM(t, c, t.TempDir(), false)
	defer follower.Close()
	ents := randomEntries(rand.New(rand.NewPCG(testSeed(t), 71)), 0, 80, 20, 100)
	mustApply(t, leader.Store, ents[:60]...)
	mustApply(t, follower.Store, ents[:20]...)
	var buf bytes.Buffer
	w := systems.NewSnapshotWriter(&buf)
	if err := leader.WriteSnapshot(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := follower.PrepareRestore(60, systems.NewSnapshotReader(&buf)); err != nil {
		t.Fatal(err)
	}
	if err := follower.CommitRestore(60); err != nil {
		t.Fatal(err)
	}
	if follower.AppliedIndex() != 60 || follower.lr.heldBytes.Load() != 0 {
		t.Fatalf("after the restore: applied %d, held %d; want 60, 0", follower.AppliedIndex(), follower.lr.heldBytes.Load())
	}
	mustApply(t, leader.Store, ents[60:]...)
	mustApply(t, follower.Store, ents[60:]...)
	// The leader's span 1..80 overlaps the restored 1..60: taken.
	if h := cutSpan(t, leader); h.First != 1 || h.Last != 80 {
		t.Fatalf("span %v, want 1..80", h)
	}
	if _, v, next := ship(t, leader, follower, 61); v != systems.SpanIngested || next != 81 {
		t.Fatalf("span 1..80 over a restore at 60: %v, next %d; want ingested, 81", v, next)
	}
	ref := model{}
	ref.apply(ents)
	checkState(t, follower.Store, ref)
}
