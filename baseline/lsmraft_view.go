package baseline

import (
	"bytes"

	"github.com/google/btree"
	"github.com/linxGnu/grocksdb"

	"github.com/nezha-harness/nezha/systems"
)

// keyOp is the last write of one key within a run of entries: a put of
// value, or a delete (del), at Raft index index.
type keyOp struct {
	key, value []byte
	del        bool
	index      uint64
}

func keyOpLess(a, b keyOp) bool { return bytes.Compare(a.key, b.key) < 0 }

// keyOps is the net effect of a run of entries first..last, in key order:
// an lsm-raft leader's span being built, or the entries a follower holds.
// Keys and values alias the entries' data (systems.AppliedEntry: the
// state machine may keep them). Not safe for concurrent use; the tree may
// be cloned (btree's copy-on-write Clone) for a reader.
type keyOps struct {
	t *btree.BTreeG[keyOp]
	// first and last are the indexes of the first and last entries added
	// (0: none), no-ops included.
	first, last uint64
	// bytes counts the keys and values of every write added, overwritten
	// ones included: what the entries pin in memory.
	bytes int64
}

// keyOpsDegree is the B-tree's degree (nodes of up to 63 items).
const keyOpsDegree = 32

func newKeyOps() *keyOps { return &keyOps{t: btree.NewG(keyOpsDegree, keyOpLess)} }

// empty reports whether no entry was added.
func (k *keyOps) empty() bool { return k.first == 0 }

// add records entry e (puts and deletes; a no-op only moves last).
func (k *keyOps) add(e *systems.AppliedEntry) {
	if k.first == 0 {
		k.first = e.Index
	}
	k.last = e.Index
	switch e.Command.Op {
	case systems.OpPut:
		k.t.ReplaceOrInsert(keyOp{key: e.Command.Key, value: e.Command.Value, index: e.Index})
		k.bytes += int64(len(e.Command.Key) + len(e.Command.Value))
	case systems.OpDelete:
		k.t.ReplaceOrInsert(keyOp{key: e.Command.Key, del: true, index: e.Index})
		k.bytes += int64(len(e.Command.Key))
	}
}

// get returns key's last write, if any.
func (k *keyOps) get(key []byte) (keyOp, bool) { return k.t.Get(keyOp{key: key}) }

// without returns the writes above index through (a span through it was
// ingested); bytes counts what stays.
func (k *keyOps) without(through uint64) *keyOps {
	out := newKeyOps()
	k.t.Ascend(func(op keyOp) bool {
		if op.index > through {
			out.t.ReplaceOrInsert(op)
			out.bytes += int64(len(op.key) + len(op.value))
		}
		return true
	})
	if k.last > through {
		out.first, out.last = through+1, k.last
	}
	return out
}

// heldCursor walks a (cloned) tree of keyOps in key order below end
// (empty: no bound), a batch of items at a time.
type heldCursor struct {
	t   *btree.BTreeG[keyOp]
	end []byte
	buf []keyOp
	i   int
}

// heldCursorBatch is how many items a heldCursor fetches per tree walk.
const heldCursorBatch = 64

// fill loads the items from key on (after it, unless inclusive).
func (c *heldCursor) fill(from []byte, inclusive bool) {
	c.buf, c.i = c.buf[:0], 0
	c.t.AscendGreaterOrEqual(keyOp{key: from}, func(op keyOp) bool {
		if !inclusive && bytes.Equal(op.key, from) {
			return true
		}
		if len(c.end) > 0 && bytes.Compare(op.key, c.end) >= 0 {
			return false
		}
		c.buf = append(c.buf, op)
		return len(c.buf) < heldCursorBatch
	})
}

func (c *heldCursor) valid() bool { return c.i < len(c.buf) }
func (c *heldCursor) op() keyOp   { return c.buf[c.i] }

func (c *heldCursor) next() {
	c.i++
	if c.i == len(c.buf) && len(c.buf) == heldCursorBatch {
		c.fill(c.buf[len(c.buf)-1].key, false)
	}
}

// mergedIter iterates user keys and values in key order over a RocksDB
// iterator of the data column family and, on an lsm-raft follower, the
// entries it holds (which are newer: a held write wins over RocksDB's
// value of its key, a held delete hides it). It skips the empty key, where
// lsm-raft keeps its applied index. key and value are valid until next.
type mergedIter struct {
	it   *grocksdb.Iterator
	held *heldCursor // nil: nothing held

	valid      bool
	key, value []byte
	// fromHeld and fromRocks: which side(s) the current pair is at.
	fromHeld, fromRocks bool
}

func newMergedIter(it *grocksdb.Iterator, held *btree.BTreeG[keyOp], end []byte) *mergedIter {
	m := &mergedIter{it: it}
	if held != nil && held.Len() > 0 {
		m.held = &heldCursor{t: held, end: end}
	}
	return m
}

func (m *mergedIter) seek(start []byte) {
	m.it.Seek(start)
	if m.held != nil {
		m.held.fill(start, true)
	}
	m.settle()
}

func (m *mergedIter) next() {
	if m.fromRocks {
		m.it.Next()
	}
	if m.fromHeld {
		m.held.next()
	}
	m.settle()
}

// settle moves to the next pair to return, from the current positions.
func (m *mergedIter) settle() {
	for {
		var rk []byte
		rv := m.it.Valid()
		if rv {
			if rk = m.it.Key().Data(); len(rk) == 0 {
				m.it.Next() // the applied index (lsm-raft)
				continue
			}
		}
		hv := m.held != nil && m.held.valid()
		switch {
		case !rv && !hv:
			m.valid = false
			return
		case hv && (!rv || bytes.Compare(m.held.op().key, rk) <= 0):
			op := m.held.op()
			same := rv && bytes.Equal(op.key, rk)
			if op.del {
				m.held.next()
				if same {
					m.it.Next()
				}
				continue
			}
			m.valid, m.key, m.value, m.fromHeld, m.fromRocks = true, op.key, op.value, true, same
			return
		default:
			m.valid, m.key, m.value, m.fromHeld, m.fromRocks = true, rk, m.it.Value().Data(), false, true
			return
		}
	}
}
