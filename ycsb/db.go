package ycsb

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/pingcap/go-ycsb/pkg/measurement"
	gycsb "github.com/pingcap/go-ycsb/pkg/ycsb"

	"github.com/nezha-harness/nezha/workloads"
)

// Store is the part of the Go client (*client.Client) the adapter uses.
type Store interface {
	workloads.Store
	Delete(ctx context.Context, key []byte) (uint64, error)
}

// Operation names, as go-ycsb prints them.
const (
	OpRead            = "READ"
	OpUpdate          = "UPDATE"
	OpInsert          = "INSERT"
	OpScan            = "SCAN"
	OpDelete          = "DELETE"
	OpReadModifyWrite = "READ_MODIFY_WRITE"
	OpTotal           = "TOTAL"
)

// Record encoding: one YCSB record (a map of fields) is one value:
//
//	0x01, then for each field in name order: uvarint(len(name)) name uvarint(len(value)) value
//
// The same map always encodes to the same bytes.
const recordVersion = 1

// EncodeRecord encodes fields deterministically into a new buffer (it
// keeps no reference to the caller's buffers, which go-ycsb reuses).
func EncodeRecord(fields map[string][]byte) []byte {
	names := make([]string, 0, len(fields))
	n := 1
	for k, v := range fields {
		names = append(names, k)
		n += 2*binary.MaxVarintLen64 + len(k) + len(v)
	}
	sort.Strings(names)
	b := make([]byte, 1, n)
	b[0] = recordVersion
	for _, k := range names {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(fields[k])))
		b = append(b, fields[k]...)
	}
	return b
}

// MaxRecordBytes is the largest encoded size of a record of fieldCount
// fields (named field0..) of at most fieldLength bytes.
func MaxRecordBytes(fieldCount, fieldLength int64) int64 {
	size := int64(1)
	for i := int64(0); i < fieldCount; i++ {
		name := "field" + strconv.FormatInt(i, 10)
		size += int64(uvarintLen(uint64(len(name)))) + int64(len(name)) + int64(uvarintLen(uint64(fieldLength))) + fieldLength
		if size > 1<<40 {
			return size
		}
	}
	return size
}

func uvarintLen(x uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], x)
}

// DecodeRecord decodes a record; with want non-empty it returns only those
// fields. The values alias b.
func DecodeRecord(b []byte, want []string) (map[string][]byte, error) {
	if len(b) == 0 || b[0] != recordVersion {
		return nil, fmt.Errorf("record: unknown encoding (first byte %v of %d)", b[:min(len(b), 1)], len(b))
	}
	out := make(map[string][]byte)
	for i := 1; i < len(b); {
		kl, n := binary.Uvarint(b[i:])
		if n <= 0 || uint64(len(b)-i-n) < kl {
			return nil, fmt.Errorf("record: bad field name at offset %d", i)
		}
		i += n
		k := string(b[i : i+int(kl)])
		i += int(kl)
		vl, n := binary.Uvarint(b[i:])
		if n <= 0 || uint64(len(b)-i-n) < vl {
			return nil, fmt.Errorf("record: bad value of field %q at offset %d", k, i)
		}
		i += n
		v := b[i : i+int(vl) : i+int(vl)]
		i += int(vl)
		if len(want) == 0 || contains(want, k) {
			out[k] = v
		}
	}
	return out, nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// RowKey is the key of a YCSB record: table + "/" + key.
func RowKey(table, key string) []byte { return []byte(table + "/" + key) }

// tableEnd bounds the keys of table ('/' + 1 is '0').
func tableEnd(table string) []byte { return []byte(table + "0") }

// DB is the go-ycsb database of the harness: each record is one key
// (RowKey) with one value (EncodeRecord) in the store.
//
//   - Read of a missing key returns no fields and no error (go-ycsb's
//     latest and zipfian choosers may pick keys not inserted yet); it is
//     counted as a miss.
//   - Insert is one Put.
//   - Update is a Get, then a Put of the record with the new fields (not
//     atomic: a concurrent update of the same record between the two may
//     be lost). An update of a missing record writes nothing and returns
//     ErrNoRecord (go-ycsb counts an UPDATE_ERROR): YCSB's update modifies
//     a record (its read-modify-write bindings, RocksDB's or Badger's,
//     fail likewise), where a blind Put would insert it unnoticed. The
//     harness counts it as a miss, as a read of a missing key: go-ycsb's
//     choosers pick a key just past the loaded ones now and then (see
//     Read), and a run over more records than the load shows as misses.
//   - Scan is one Scan(RowKey(table, start), end of table, count).
//   - Delete is one Delete.
//
// DB keeps per-thread latency recorders (see InitThread) for the summary.
type DB struct {
	store      Store
	fieldCount int
	timeout    time.Duration
	// start is when the measurement starts (the run's start, or the end
	// of its warm-up): operations due before it are not recorded.
	start time.Time
	live  *workloads.Live
	// intervals, if set, receives the per-second latencies of TOTAL.
	intervals *workloads.Intervals
	// stall, if set, is the run's stall watch (workloads.Live.Watch): a
	// stall also ends the store calls in flight.
	stall context.Context

	mu      sync.Mutex
	threads []*threadState
}

// threadState is one go-ycsb worker's (or open-loop sender's): its
// recorders by operation, the operations of its current transaction and,
// in an open loop, the arrival it serves.
type threadState struct {
	db      *DB
	recs    map[string]*workloads.Recorder
	txn     []string
	arrival *workloads.Arrival
}

type threadKey struct{}

// NewDB returns a DB over store. fieldCount is the workload's fieldcount;
// opTimeout bounds each store call. Recorders count from start (earlier
// operations are a warm-up); live, if not nil, counts finished YCSB
// operations (warm-up included).
func NewDB(store Store, fieldCount int, opTimeout time.Duration, start time.Time, live *workloads.Live) *DB {
	return &DB{store: store, fieldCount: fieldCount, timeout: opTimeout, start: start, live: live}
}

// Close implements ycsb.DB; the store is the caller's to close.
func (d *DB) Close() error { return nil }

// InitThread attaches the worker's recorders to its context.
func (d *DB) InitThread(ctx context.Context, _, _ int) context.Context {
	t := &threadState{db: d, recs: map[string]*workloads.Recorder{}}
	d.mu.Lock()
	d.threads = append(d.threads, t)
	d.mu.Unlock()
	return context.WithValue(ctx, threadKey{}, t)
}

// CleanupThread implements ycsb.DB.
func (d *DB) CleanupThread(context.Context) {}

func threadOf(ctx context.Context) *threadState {
	t, _ := ctx.Value(threadKey{}).(*threadState)
	return t
}

// record adds one operation, sent at sent and done at done, to the
// worker's recorder of op (outside a warm-up). In an open loop it was due
// when the YCSB operation it belongs to was (as Java YCSB's intended
// latencies). The error of a miss (ErrNoRecord) is not kept as an error
// sample.
func (t *threadState) record(op string, sent, done time.Time, out workloads.Outcome, bytes, items int64, err error) {
	if t == nil {
		return
	}
	if out == workloads.Miss {
		err = nil
	}
	if op == OpTotal {
		t.db.live.Record(out, err)
	}
	if !measurement.IsWarmUpFinished() {
		return
	}
	r := t.recs[op]
	if r == nil {
		r = workloads.NewRecorder(t.db.start, false, nil)
		if op == OpTotal && t.db.intervals != nil {
			r.WithIntervals(t.db.intervals)
		}
		t.recs[op] = r
	}
	tm := workloads.Timing{Intended: sent, Sent: sent, Done: done}
	if a := t.arrival; a != nil {
		tm.Intended, tm.Late = a.Intended, a.Late
	}
	r.RecordTiming(op, tm, out, bytes, items, err)
}

func (d *DB) op(ctx context.Context, name string, f func(ctx context.Context) (workloads.Outcome, int64, int64, error)) error {
	t := threadOf(ctx)
	if t != nil {
		t.txn = append(t.txn, name)
	}
	stall := d.stall
	if stall == nil {
		stall = context.Background()
	}
	octx, cancel := workloads.StallContext(ctx, stall, d.timeout)
	defer cancel()
	begin := time.Now()
	out, bytes, items, err := f(octx)
	t.record(name, begin, time.Now(), out, bytes, items, err)
	return err
}

// classify is workloads.Classify, but an update of a missing record
// (ErrNoRecord) is a miss.
func classify(err error) workloads.Outcome {
	if errors.Is(err, ErrNoRecord) {
		return workloads.Miss
	}
	return workloads.Classify(err)
}

// Read implements ycsb.DB.
func (d *DB) Read(ctx context.Context, table, key string, fields []string) (map[string][]byte, error) {
	var res map[string][]byte
	err := d.op(ctx, OpRead, func(ctx context.Context) (workloads.Outcome, int64, int64, error) {
		v, found, err := d.store.Get(ctx, RowKey(table, key))
		if err != nil {
			return workloads.Classify(err), 0, 0, err
		}
		if !found {
			return workloads.Miss, 0, 0, nil
		}
		res, err = DecodeRecord(v, fields)
		if err != nil {
			return workloads.Failed, 0, 0, fmt.Errorf("read %s: %w", key, err)
		}
		return workloads.OK, int64(len(v)), 1, nil
	})
	return res, err
}

// Scan implements ycsb.DB.
func (d *DB) Scan(ctx context.Context, table, startKey string, count int, fields []string) ([]map[string][]byte, error) {
	var res []map[string][]byte
	err := d.op(ctx, OpScan, func(ctx context.Context) (workloads.Outcome, int64, int64, error) {
		kvs, err := d.store.Scan(ctx, RowKey(table, startKey), tableEnd(table), count)
		if err != nil {
			return workloads.Classify(err), 0, 0, err
		}
		var n int64
		for _, kv := range kvs {
			n += int64(len(kv.Key) + len(kv.Value))
			m, err := DecodeRecord(kv.Value, fields)
			if err != nil {
				return workloads.Failed, 0, 0, fmt.Errorf("scan %s: key %q: %w", startKey, kv.Key, err)
			}
			res = append(res, m)
		}
		out := workloads.OK
		if len(kvs) < count {
			out = workloads.Miss
		}
		return out, n, int64(len(kvs)), nil
	})
	return res, err
}

// allFields reports whether values names every field of the record
// (field0..field{fieldcount-1}), so that an update needs no merge.
func (d *DB) allFields(values map[string][]byte) bool {
	if len(values) != d.fieldCount {
		return false
	}
	for i := 0; i < d.fieldCount; i++ {
		if _, ok := values["field"+strconv.Itoa(i)]; !ok {
			return false
		}
	}
	return true
}

// ErrNoRecord is the error of an update of a record that does not exist.
var ErrNoRecord = errors.New("no such record (an update does not insert one)")

// Update implements ycsb.DB.
func (d *DB) Update(ctx context.Context, table, key string, values map[string][]byte) error {
	return d.op(ctx, OpUpdate, func(ctx context.Context) (workloads.Outcome, int64, int64, error) {
		k := RowKey(table, key)
		old, found, err := d.store.Get(ctx, k)
		if err != nil {
			return workloads.Classify(err), 0, 0, err
		}
		if !found {
			return workloads.Miss, 0, 0, fmt.Errorf("update %s: %w", key, ErrNoRecord)
		}
		rec := values
		if !d.allFields(values) {
			merged, err := DecodeRecord(old, nil)
			if err != nil {
				return workloads.Failed, 0, 0, fmt.Errorf("update %s: %w", key, err)
			}
			for f, v := range values {
				merged[f] = v
			}
			rec = merged
		}
		b := EncodeRecord(rec)
		_, err = d.store.Put(ctx, k, b)
		return workloads.Classify(err), int64(len(b)), 1, err
	})
}

// Insert implements ycsb.DB.
func (d *DB) Insert(ctx context.Context, table, key string, values map[string][]byte) error {
	return d.op(ctx, OpInsert, func(ctx context.Context) (workloads.Outcome, int64, int64, error) {
		b := EncodeRecord(values)
		_, err := d.store.Put(ctx, RowKey(table, key), b)
		return workloads.Classify(err), int64(len(b)), 1, err
	})
}

// Delete implements ycsb.DB.
func (d *DB) Delete(ctx context.Context, table, key string) error {
	return d.op(ctx, OpDelete, func(ctx context.Context) (workloads.Outcome, int64, int64, error) {
		_, err := d.store.Delete(ctx, RowKey(table, key))
		return workloads.Classify(err), 0, 1, err
	})
}

// Summaries merges the workers' recorders: one Summary per operation name.
func (d *DB) Summaries(elapsed time.Duration) map[string]workloads.Summary {
	d.mu.Lock()
	defer d.mu.Unlock()
	byOp := map[string][]*workloads.Recorder{}
	for _, t := range d.threads {
		for op, r := range t.recs {
			byOp[op] = append(byOp[op], r)
		}
	}
	out := map[string]workloads.Summary{}
	for op, rs := range byOp {
		out[op] = workloads.Summarize(op, rs, elapsed)
	}
	return out
}

// timed wraps go-ycsb's workload to time each YCSB operation as a whole
// (TOTAL), and a read-modify-write (a READ then an UPDATE in one
// transaction) as READ_MODIFY_WRITE.
type timed struct {
	gycsb.Workload
}

func (m timed) DoInsert(ctx context.Context, db gycsb.DB) error {
	t := threadOf(ctx)
	if t != nil {
		t.txn = t.txn[:0]
	}
	begin := time.Now()
	err := m.Workload.DoInsert(ctx, db)
	t.record(OpTotal, begin, time.Now(), workloads.Classify(err), 0, 0, err)
	return err
}

func (m timed) DoTransaction(ctx context.Context, db gycsb.DB) error {
	t := threadOf(ctx)
	if t != nil {
		t.txn = t.txn[:0]
	}
	begin := time.Now()
	err := m.Workload.DoTransaction(ctx, db)
	end := time.Now()
	out := classify(err)
	if t != nil && len(t.txn) == 2 && t.txn[0] == OpRead && t.txn[1] == OpUpdate {
		t.record(OpReadModifyWrite, begin, end, out, 0, 0, err)
	}
	t.record(OpTotal, begin, end, out, 0, 0, err)
	return err
}

var _ gycsb.DB = (*DB)(nil)
