package systems

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecodeCommand: any bytes either fail with ErrMalformedCommand or
// decode to a command that encodes and decodes back to itself; nothing
// panics (a committed entry is decoded on every replica).
func FuzzDecodeCommand(f *testing.F) {
	for _, c := range []Command{
		{Op: OpPut, RequestID: 1, Key: []byte("k"), Value: []byte("v")},
		{Op: OpDelete, RequestID: 1 << 40, Key: []byte("key")},
		{Op: OpPut, RequestID: 7, ClientID: 3, Seq: 9, Key: []byte("k"), Value: bytes.Repeat([]byte("x"), 300)},
		{Op: OpDelete, RequestID: 2, ClientID: 1 << 50, Seq: 1, Key: []byte{}},
		{Op: OpPut, RequestID: 3, ClientID: 4, Seq: 5, ExpiresUnixNano: 1_800_000_000_000_000_000, Key: []byte("t"), Value: []byte("v")},
	} {
		f.Add(AppendCommand(nil, &c))
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCommand(data)
		if err != nil {
			if !errors.Is(err, ErrMalformedCommand) {
				t.Fatalf("error %v does not wrap ErrMalformedCommand", err)
			}
			return
		}
		if c.Op == OpNone {
			return
		}
		again, err := DecodeCommand(AppendCommand(nil, &c))
		if err != nil {
			t.Fatalf("re-encoded command does not decode: %v", err)
		}
		if again.Op != c.Op || again.RequestID != c.RequestID || again.ClientID != c.ClientID || again.Seq != c.Seq || again.ExpiresUnixNano != c.ExpiresUnixNano ||
			!bytes.Equal(again.Key, c.Key) || !bytes.Equal(again.Value, c.Value) {
			t.Fatalf("round trip: %+v became %+v", c, again)
		}
	})
}

// FuzzSnapshotReader: any stream either fails with ErrSnapshotCorrupt or
// yields strictly ascending pairs that a SnapshotWriter writes back to a
// stream that reads the same; nothing panics and a corrupt length does not
// allocate past MaxPairBytes.
func FuzzSnapshotReader(f *testing.F) {
	var buf bytes.Buffer
	w := NewSnapshotWriter(&buf)
	w.Add([]byte("a"), []byte("1"))
	w.Add([]byte("b"), bytes.Repeat([]byte("v"), 100))
	w.Close()
	f.Add(buf.Bytes())
	var empty bytes.Buffer
	NewSnapshotWriter(&empty).Close()
	f.Add(empty.Bytes())
	f.Add([]byte(snapshotMagic))
	read := func(b []byte) (keys, vals [][]byte, err error) {
		r := NewSnapshotReader(bytes.NewReader(b))
		r.MaxPairBytes = 1 << 20
		for r.Next() {
			keys, vals = append(keys, r.Key()), append(vals, r.Value())
		}
		return keys, vals, r.Err()
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		keys, vals, err := read(data)
		if err != nil {
			if !errors.Is(err, ErrSnapshotCorrupt) {
				t.Fatalf("error %v does not wrap ErrSnapshotCorrupt", err)
			}
			return
		}
		var out bytes.Buffer
		w := NewSnapshotWriter(&out)
		for i := range keys {
			if err := w.Add(keys[i], vals[i]); err != nil {
				t.Fatalf("pairs the reader accepted do not write: %v", err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		k2, v2, err := read(out.Bytes())
		if err != nil || len(k2) != len(keys) {
			t.Fatalf("rewritten stream: %d pairs, %v; want %d", len(k2), err, len(keys))
		}
		for i := range keys {
			if !bytes.Equal(k2[i], keys[i]) || !bytes.Equal(v2[i], vals[i]) {
				t.Fatalf("pair %d differs after a rewrite", i)
			}
		}
	})
}
