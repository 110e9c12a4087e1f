package embedded

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/nezha"
)

// clock is a manual clock for TTL tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// visible checks Get, GetAppend, Scan and ScanFunc of db against the live
// keys want (in key order) among every key named in all.
func visible(t *testing.T, what string, db *DB, all, want []string) {
	t.Helper()
	live := map[string]bool{}
	for _, k := range want {
		live[k] = true
	}
	for _, k := range all {
		v, err := db.Get([]byte(k))
		va, errA := db.GetAppend(nil, []byte(k))
		switch {
		case live[k] && (err != nil || string(v) != "v-"+k || errA != nil || string(va) != "v-"+k):
			t.Fatalf("%s: Get(%s) = %q, %v, GetAppend %q, %v; want it", what, k, v, err, va, errA)
		case !live[k] && (!errors.Is(err, ErrNotFound) || !errors.Is(errA, ErrNotFound)):
			t.Fatalf("%s: Get(%s) = %q, %v, GetAppend %q, %v; want ErrNotFound", what, k, v, err, va, errA)
		}
	}
	kvs, err := db.Scan(nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got, gotFunc []string
	for _, kv := range kvs {
		got = append(got, string(kv.Key))
	}
	if err := db.ScanFunc(nil, nil, 0, func(k, _ []byte) (bool, error) {
		gotFunc = append(gotFunc, string(k))
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(gotFunc) != fmt.Sprint(want) {
		t.Fatalf("%s: Scan = %v, ScanFunc = %v, want %v", what, got, gotFunc, want)
	}
}

// TestTTL: an expired key is absent from Get, GetAppend, Scan, ScanFunc and a backup, after a
// restart and in a restored backup too; a put without a TTL clears one.
// (GC's dropping of expired keys: nezha's TestGCDropsExpiredKeys.)
func TestTTL(t *testing.T) {
	for _, index := range nezha.IndexKinds() {
		t.Run(index, func(t *testing.T) {
			c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			o := testOptions(t, index, true)
			o.Clock = c.now
			dir := t.TempDir()
			db := mustOpen(t, dir, o)
			all := []string{"keep", "late", "renewed", "soon"}
			put := func(k string, ttl time.Duration) {
				t.Helper()
				var err error
				if ttl == 0 {
					err = db.Put([]byte(k), []byte("v-"+k))
				} else {
					err = db.PutWithTTL([]byte(k), []byte("v-"+k), ttl)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			put("keep", 0)
			put("soon", time.Second)
			put("late", time.Hour)
			var b Batch
			if err := b.PutWithTTL([]byte("renewed"), []byte("v-renewed"), time.Second); err != nil {
				t.Fatal(err)
			}
			b.Put([]byte("renewed"), []byte("v-renewed")) // the later put, without a TTL, wins
			if err := db.Write(&b); err != nil {
				t.Fatal(err)
			}
			if err := b.PutWithTTL([]byte("x"), nil, 0); err == nil {
				t.Fatal("a TTL of 0 was accepted")
			}
			visible(t, "at once", db, all, []string{"keep", "late", "renewed", "soon"})
			c.advance(time.Second)
			visible(t, "after 1s", db, all, []string{"keep", "late", "renewed"})

			// A backup leaves the expired key out and keeps the others' expiry.
			bdir := filepath.Join(t.TempDir(), "backup")
			if err := db.Backup(bdir); err != nil {
				t.Fatal(err)
			}
			bk := mustOpen(t, bdir, o)
			visible(t, "backup", bk, all, []string{"keep", "late", "renewed"})

			// Restart: expiry times come back with the index or the log.
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db = mustOpen(t, dir, o)
			visible(t, "after restart", db, all, []string{"keep", "late", "renewed"})
			c.advance(time.Hour)
			visible(t, "after restart and 1h", db, all, []string{"keep", "renewed"})
			visible(t, "backup after 1h", bk, all, []string{"keep", "renewed"})

			// An expired key written again is back.
			put("soon", 0)
			visible(t, "soon again", db, all, []string{"keep", "renewed", "soon"})
		})
	}
}

// TestTTLOutOfRange: a TTL whose expiry time does not fit an int64 of Unix
// nanoseconds (a huge duration, or a clock near 2262) is refused before it
// reaches the log. Before the check, such a put was appended, then failed
// to decode on apply: the DB stopped, and Open failed on that entry forever.
func TestTTLOutOfRange(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{t: time.Date(2250, 1, 1, 0, 0, 0, 0, time.UTC)}
	o := testOptions(t, nezha.IndexLevelDB, false)
	o.Clock = clk.now
	db, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, ttl := range []time.Duration{math.MaxInt64, 200 * 365 * 24 * time.Hour, 20 * 365 * 24 * time.Hour, 0, -time.Second} {
		if err := db.PutWithTTL([]byte("k"), []byte("v"), ttl); err == nil {
			t.Fatalf("PutWithTTL(%v) at %v succeeded", ttl, clk.now())
		}
		var b Batch
		b.Put([]byte("other"), []byte("v"))
		if err := b.PutWithTTL([]byte("k"), []byte("v"), ttl); err == nil {
			if err := db.Write(&b); err == nil {
				t.Fatalf("Batch.PutWithTTL(%v) at %v committed", ttl, clk.now())
			}
		}
	}
	if err := db.PutWithTTL([]byte("k"), []byte("v"), time.Hour); err != nil {
		t.Fatalf("PutWithTTL(1h) after the refused ones: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = mustOpen(t, dir, o)
	if v, err := db.Get([]byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("Get after reopen = %q, %v", v, err)
	}
	if _, err := db.Get([]byte("other")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a refused batch's other put is visible: %v", err)
	}
}
