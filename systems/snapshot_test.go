package systems

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

func TestSnapshotStreamRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewSnapshotWriter(&buf)
	for i := 0; i < 100; i++ {
		if err := w.Add([]byte(fmt.Sprintf("k%03d", i)), bytes.Repeat([]byte{byte(i)}, i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Add([]byte("k000"), nil); err == nil {
		t.Fatal("descending key accepted")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	r := NewSnapshotReader(bytes.NewReader(data))
	n := 0
	for r.Next() {
		if string(r.Key()) != fmt.Sprintf("k%03d", n) || len(r.Value()) != n {
			t.Fatalf("pair %d = %q (%d bytes)", n, r.Key(), len(r.Value()))
		}
		n++
	}
	if err := r.Err(); err != nil || n != 100 {
		t.Fatalf("read %d pairs, err %v", n, err)
	}
	// Truncation and corruption are reported.
	for name, bad := range map[string][]byte{
		"truncated": data[:len(data)-5],
		"flipped":   flip(data, len(data)/2),
		"empty":     nil,
	} {
		r := NewSnapshotReader(bytes.NewReader(bad))
		for r.Next() {
		}
		if !errors.Is(r.Err(), ErrSnapshotCorrupt) {
			t.Fatalf("%s stream: err %v", name, r.Err())
		}
	}
	// An empty snapshot is valid.
	buf.Reset()
	if err := NewSnapshotWriter(&buf).Close(); err != nil {
		t.Fatal(err)
	}
	r = NewSnapshotReader(&buf)
	if r.Next() || r.Err() != nil {
		t.Fatalf("empty snapshot: err %v", r.Err())
	}
}

func flip(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 0x40
	return c
}
