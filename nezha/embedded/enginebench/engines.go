// Package enginebench measures Nezha's embedded engine (nezha/embedded)
// against the best-known embedded key-value-separated store, Badger
// (github.com/dgraph-io/badger/v4: WiscKey in Go), and an LSM, Pebble
// (github.com/cockroachdb/pebble/v2), in one run with the same fsync
// setting: PUT, GET and SCAN at small, medium and large values (100 B,
// 4 KiB, 256 KiB). Run does the measurement; the `embedded` experiment
// (experiments/embedded.go) and the package's Go benchmarks call it.
package enginebench

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/dgraph-io/badger/v4"

	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/nezha"
	"github.com/nezha-harness/nezha/nezha/embedded"
)

// Engine names, the values of Options.Engines.
const (
	EngineNezha  = "nezha"
	EngineBadger = "badger"
	EnginePebble = "pebble"
)

// Engines returns every engine name, Nezha's first.
func Engines() []string { return []string{EngineNezha, EngineBadger, EnginePebble} }

// Engine is one embedded store under measurement. Its methods are safe for
// concurrent use.
type Engine interface {
	// Put writes key = value, durably when the engine was opened with sync.
	Put(key, value []byte) error
	// Load writes the pairs as one batch (one commit).
	Load(keys, values [][]byte) error
	// Get copies the value of key into dst's room (dst[:0], grown if too
	// small) and returns it: a copy the caller owns, in the buffer it
	// passed, so that a caller reusing one buffer measures the engine
	// rather than Go's allocator (nezha's DB.GetAppend, Badger's
	// Item.ValueCopy(dst), Pebble's Get copied before its closer is
	// closed). found is false if the key is absent.
	Get(dst, key []byte) (value []byte, found bool, err error)
	// Scan reads up to n pairs from the first key >= start, in key order,
	// copying each value once into one buffer reused for the scan's pairs
	// (nezha's DB.ScanFunc, Badger's Item.ValueCopy, Pebble's iterator
	// value appended), and returns how many it read and their bytes.
	Scan(start []byte, n int) (pairs int, bytes int64, err error)
	// Close releases the engine.
	Close() error
}

// EngineConfig says how an engine is opened.
type EngineConfig struct {
	// Sync: every acknowledged Put is fsynced (each engine's group commit
	// shares fsyncs among concurrent writers).
	Sync bool
	// NezhaIndex is the index of the nezha engine (nezha.IndexMemory or
	// nezha.IndexLevelDB).
	NezhaIndex string
	// NezhaGCIdleAfter: nezha's GC sorts the log into a run once no write
	// was applied for this long (nezha.Config.GCIdleAfter).
	NezhaGCIdleAfter time.Duration
	// BadgerValueThresholdBytes: values at least this long go to Badger's
	// value log (the rest stay in its LSM tree); 1 KiB as the dwisckey
	// system's default.
	BadgerValueThresholdBytes int64
	// BadgerVerifyValueChecksum makes Badger check each value's checksum
	// (a CRC32C; nezha checks one on every read: xxh3 in its sorted runs,
	// CRC32C in its log) when it reads the value log; off by default, as
	// in Badger (Options.VerifyValueChecksum).
	BadgerVerifyValueChecksum bool
}

// Open opens the named engine in dir (created).
func Open(name, dir string, c EngineConfig) (Engine, error) {
	switch name {
	case EngineNezha:
		o := embedded.DefaultOptions()
		o.Sync = c.Sync
		o.Store.Index = c.NezhaIndex
		o.Store.GCIdleAfter = c.NezhaGCIdleAfter
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		db, err := embedded.Open(dir, o)
		if err != nil {
			return nil, err
		}
		return nezhaEngine{db}, nil
	case EngineBadger:
		o := badger.DefaultOptions(dir).WithSyncWrites(c.Sync).WithValueThreshold(c.BadgerValueThresholdBytes).WithLogger(nil).
			WithVerifyValueChecksum(c.BadgerVerifyValueChecksum)
		db, err := badger.Open(o)
		if err != nil {
			return nil, fmt.Errorf("badger: %w", err)
		}
		return badgerEngine{db}, nil
	case EnginePebble:
		db, err := pebble.Open(dir, &pebble.Options{Logger: quietPebble{}})
		if err != nil {
			return nil, fmt.Errorf("pebble: %w", err)
		}
		wo := pebble.NoSync
		if c.Sync {
			wo = pebble.Sync
		}
		return pebbleEngine{db, wo}, nil
	}
	return nil, cmdline.Usagef("engine %q: want one of %v", name, Engines())
}

type nezhaEngine struct{ db *embedded.DB }

func (e nezhaEngine) Put(k, v []byte) error { return e.db.Put(k, v) }
func (e nezhaEngine) Load(ks, vs [][]byte) error {
	var b embedded.Batch
	for i := range ks {
		b.Put(ks[i], vs[i])
	}
	return e.db.Write(&b)
}
func (e nezhaEngine) Get(dst, k []byte) ([]byte, bool, error) {
	v, err := e.db.GetAppend(dst[:0], k)
	if errors.Is(err, embedded.ErrNotFound) {
		return dst, false, nil
	}
	return v, err == nil, err
}
func (e nezhaEngine) Scan(start []byte, n int) (pairs int, b int64, err error) {
	// ScanFunc copies each value once, into its reused buffer.
	err = e.db.ScanFunc(start, nil, n, func(k, v []byte) (bool, error) {
		pairs++
		b += int64(len(k) + len(v))
		return true, nil
	})
	return pairs, b, err
}
func (e nezhaEngine) Close() error { return e.db.Close() }

// idleSorted reports whether nezha's GC has finished an idle round (the
// load sorted into a run, as the replicated read beds wait for).
func (e nezhaEngine) idleSorted() bool {
	for _, r := range e.db.GCRounds() {
		if r.Trigger == nezha.TriggerIdle && r.Error == "" {
			return true
		}
	}
	return false
}

type badgerEngine struct{ db *badger.DB }

func (e badgerEngine) Put(k, v []byte) error {
	return e.db.Update(func(txn *badger.Txn) error { return txn.Set(k, v) })
}
func (e badgerEngine) Load(ks, vs [][]byte) error {
	wb := e.db.NewWriteBatch()
	for i := range ks {
		if err := wb.Set(ks[i], vs[i]); err != nil {
			wb.Cancel()
			return err
		}
	}
	return wb.Flush()
}
func (e badgerEngine) Get(dst, k []byte) (v []byte, found bool, err error) {
	err = e.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(k)
		if err != nil {
			return err
		}
		v, err = it.ValueCopy(dst) // into dst[:0]
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return dst, false, nil
	}
	return v, err == nil, err
}
func (e badgerEngine) Scan(start []byte, n int) (pairs int, b int64, err error) {
	err = e.db.View(func(txn *badger.Txn) error {
		o := badger.DefaultIteratorOptions
		o.PrefetchSize = n
		it := txn.NewIterator(o)
		defer it.Close()
		var buf []byte
		for it.Seek(start); it.Valid() && pairs < n; it.Next() {
			item := it.Item()
			var err error
			if buf, err = item.ValueCopy(buf); err != nil {
				return err
			}
			pairs++
			b += int64(len(item.Key()) + len(buf))
		}
		return nil
	})
	return pairs, b, err
}
func (e badgerEngine) Close() error { return e.db.Close() }

type pebbleEngine struct {
	db *pebble.DB
	wo *pebble.WriteOptions
}

func (e pebbleEngine) Put(k, v []byte) error { return e.db.Set(k, v, e.wo) }
func (e pebbleEngine) Load(ks, vs [][]byte) error {
	b := e.db.NewBatch()
	for i := range ks {
		if err := b.Set(ks[i], vs[i], nil); err != nil {
			b.Close()
			return err
		}
	}
	return b.Commit(e.wo)
}
func (e pebbleEngine) Get(dst, k []byte) ([]byte, bool, error) {
	v, closer, err := e.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return dst, false, nil
	}
	if err != nil {
		return dst, false, err
	}
	out := append(dst[:0], v...) // v is valid until closer.Close
	return out, true, closer.Close()
}
func (e pebbleEngine) Scan(start []byte, n int) (pairs int, b int64, err error) {
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: start})
	if err != nil {
		return 0, 0, err
	}
	var buf []byte
	for ok := it.First(); ok && pairs < n; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return pairs, b, err
		}
		buf = append(buf[:0], v...) // v is valid until the iterator moves
		pairs++
		b += int64(len(it.Key()) + len(buf))
	}
	return pairs, b, it.Close()
}
func (e pebbleEngine) Close() error { return e.db.Close() }

// quietPebble discards Pebble's log messages (Fatalf still stops).
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)         {}
func (quietPebble) Errorf(string, ...any)        {}
func (quietPebble) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
