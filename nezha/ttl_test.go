package nezha

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/systems"
)

// putTTL is a put whose key expires at exp.
func putTTL(k string, v []byte, exp time.Time) systems.Command {
	c := put(k, v)
	c.ExpiresUnixNano = exp.UnixNano()
	return c
}

// openStoreClock opens a nezha-nogc store of kind whose TTL clock is clock.
func openStoreClock(t testing.TB, kind, dir string, l systems.ValueLog, clock *manualClock) *Store {
	t.Helper()
	c := newConfig(NameNoGC)
	c.Index, c.Clock = kind, clock.now
	s, err := c.OpenStore(systems.Env{Dir: dir, Log: l, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("OpenStore(%s): %v", kind, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// ttlVisible checks every read path of s (Get, Scan, StateHash's
// content through a snapshot stream) against want: the live keys.
func ttlVisible(t *testing.T, what string, s *Store, want []string) {
	t.Helper()
	for _, k := range []string{"keep", "short", "long", "renewed"} {
		_, found, err := s.Get([]byte(k))
		if err != nil {
			t.Fatalf("%s: Get(%s): %v", what, k, err)
		}
		wantFound := false
		for _, w := range want {
			wantFound = wantFound || w == k
		}
		if found != wantFound {
			t.Fatalf("%s: Get(%s) found %v, want %v", what, k, found, wantFound)
		}
	}
	kvs, _, err := s.Scan(nil, nil, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, kv := range kvs {
		got = append(got, string(kv.Key))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: Scan = %v, want %v", what, got, want)
	}
	if kvs, _, err := s.Scan(nil, nil, 1, 0); err != nil || len(want) > 0 && (len(kvs) != 1 || string(kvs[0].Key) != want[0]) {
		t.Fatalf("%s: Scan limit 1 = %v, %v; want %s", what, kvs, err, want)
	}
	r := systems.NewSnapshotReader(snapshotOf(t, s))
	got = nil
	for r.Next() {
		got = append(got, string(r.Key()))
	}
	if err := r.Err(); err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: snapshot = %v (%v), want %v", what, got, err, want)
	}
}

// snapshotOf returns s's snapshot stream.
func snapshotOf(t *testing.T, s *Store) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	w := systems.NewSnapshotWriter(&buf)
	if err := s.WriteSnapshot(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// TestTTLReplicatedStore: the expiry time travels in the replicated
// command; every read path of the state machine (Get, Scan, snapshot,
// StateHash) treats an expired key as absent, after a restart too (from
// the LevelDB index, or from the log replayed into a memory index), and a
// snapshot restore keeps the expiry times of the keys it carries.
func TestTTLReplicatedStore(t *testing.T) {
	forEachIndex(t, func(t *testing.T, kind string) {
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		clock := &manualClock{t: t0}
		dir := t.TempDir()
		l := openLog(t, dir)
		s := openStoreClock(t, kind, dir, l, clock)
		cmds := []systems.Command{
			put("keep", []byte("k")),
			putTTL("short", []byte("s"), t0.Add(time.Second)),
			putTTL("long", []byte("l"), t0.Add(time.Hour)),
			putTTL("renewed", []byte("r1"), t0.Add(time.Second)),
			put("renewed", []byte("r2")), // a put without a TTL clears it
		}
		ents := appendCommands(t, l, cmds...)
		mustApply(t, s, ents)
		ttlVisible(t, "before expiry", s, []string{"keep", "long", "renewed", "short"})
		sum1, _, err := s.StateHash()
		if err != nil {
			t.Fatal(err)
		}
		clock.advance(time.Second) // expiry is inclusive: at the expiry time the key is gone
		ttlVisible(t, "after 1s", s, []string{"keep", "long", "renewed"})
		sum2, _, err := s.StateHash()
		if err != nil || bytes.Equal(sum1, sum2) {
			t.Fatalf("StateHash did not change when a key expired (%v)", err)
		}

		// Snapshot restore into a fresh store: "long" keeps its expiry.
		buf := snapshotOf(t, s)
		dir2 := t.TempDir()
		s2 := openStoreClock(t, kind, dir2, openLog(t, dir2), clock)
		idx := ents[len(ents)-1].Index
		if err := s2.PrepareRestore(idx, systems.NewSnapshotReader(buf)); err != nil {
			t.Fatal(err)
		}
		if err := s2.CommitRestore(idx); err != nil {
			t.Fatal(err)
		}
		ttlVisible(t, "restored", s2, []string{"keep", "long", "renewed"})
		sum3, _, err := s2.StateHash()
		if err != nil || !bytes.Equal(sum2, sum3) {
			t.Fatalf("restored StateHash %x, want %x (%v)", sum3, sum2, err)
		}

		// Restart: the expiry times come back from the index or the log.
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l = openLog(t, dir)
		s = openStoreClock(t, kind, dir, l, clock)
		if kind == IndexMemory {
			es, err := l.Entries(1, idx+1, 1<<40)
			if err != nil {
				t.Fatal(err)
			}
			mustApply(t, s, appliedEntries(t, l, es))
		}
		ttlVisible(t, "after restart", s, []string{"keep", "long", "renewed"})
		clock.advance(time.Hour)
		ttlVisible(t, "after restart and 1h", s, []string{"keep", "renewed"})
		ttlVisible(t, "restored, after 1h", s2, []string{"keep", "renewed"})
	})
}

// TestGCDropsExpiredKeys: a GC round copies no expired value and removes
// the expired keys from the index (they would otherwise point into the
// files the round deletes); the keys with a TTL still ahead move into the
// run with their expiry time and expire there. Both indexes, the
// strategies whose continuous round sorts the whole frozen log (greedy
// rewrites only files with garbage, and GC's accounting counts a value
// that expired as live until a round reads it: expiry alone triggers no
// round).
func TestGCDropsExpiredKeys(t *testing.T) {
	for _, kind := range IndexKinds() {
		for _, strategy := range []string{StrategyTiered, StrategyMerge, StrategySortOnce} {
			t.Run(kind+"/"+strategy, func(t *testing.T) {
				f := newGCFixture(t, kind, strategy, 3)
				f.s.clock = f.clock.now
				t0 := f.clock.now()
				var cmds []systems.Command
				for i := 0; i < 30; i++ {
					v := bytes.Repeat([]byte{'v'}, 300)
					switch i % 3 {
					case 0:
						cmds = append(cmds, put(fmt.Sprintf("keep%02d", i), v))
					case 1:
						cmds = append(cmds, putTTL(fmt.Sprintf("soon%02d", i), v, t0.Add(time.Minute)))
					default:
						cmds = append(cmds, putTTL(fmt.Sprintf("late%02d", i), v, t0.Add(time.Hour)))
					}
				}
				f.mu.Lock()
				ents := appendCommands(t, f.l, cmds...)
				f.mu.Unlock()
				mustApply(t, f.s, ents)
				f.clock.advance(time.Minute)
				if r := f.round(); r.KeysMoved != 20 {
					t.Fatalf("round moved %d keys, want the 20 not expired", r.KeysMoved)
				}
				if n, ok := f.s.IndexEntries(); !ok || n != 20 {
					t.Fatalf("IndexEntries = %d, %v after the round; want 20", n, ok)
				}
				view, err := f.s.index.View()
				if err != nil {
					t.Fatal(err)
				}
				held := 0
				err = view.Iterate(nil, nil, func(key []byte, loc systems.Location) (bool, error) {
					held++
					if bytes.HasPrefix(key, []byte("soon")) {
						return false, fmt.Errorf("expired key %s still in the index at %s", key, loc)
					}
					if bytes.HasPrefix(key, []byte("late")) && loc.ExpiresUnixNano != t0.Add(time.Hour).UnixNano() {
						return false, fmt.Errorf("key %s lost its expiry in the run: %s", key, loc)
					}
					return true, nil
				})
				view.Release()
				if err != nil || held != 20 {
					t.Fatalf("index: %d keys, %v", held, err)
				}
				f.clock.advance(time.Hour)
				kvs, _, err := f.s.Scan(nil, nil, 0, 0)
				if err != nil || len(kvs) != 10 {
					t.Fatalf("after 1h: Scan = %d pairs, %v; want the 10 without a TTL", len(kvs), err)
				}
			})
		}
	}
}
