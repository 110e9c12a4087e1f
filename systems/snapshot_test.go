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

// TestSnapshotStreamExpiry: pairs with an expiry time read back with it,
// mixed with pairs without; a stream of the old format (0x01 pairs only,
// as Add still writes them) is unchanged; a changed expiry fails the CRC.
func TestSnapshotStreamExpiry(t *testing.T) {
	var buf bytes.Buffer
	w := NewSnapshotWriter(&buf)
	exps := []int64{0, 1_800_000_000_000_000_000, 0, 5}
	for i, e := range exps {
		if err := w.AddExpiring([]byte(fmt.Sprintf("k%d", i)), []byte("v"), e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	r := NewSnapshotReader(bytes.NewReader(data))
	for i := 0; r.Next(); i++ {
		if r.ExpiresUnixNano() != exps[i] || string(r.Value()) != "v" {
			t.Fatalf("pair %d: expiry %d, value %q; want %d", i, r.ExpiresUnixNano(), r.Value(), exps[i])
		}
	}
	if err := r.Err(); err != nil || r.Count() != 4 {
		t.Fatalf("read %d pairs, %v", r.Count(), err)
	}
	// The old format, byte for byte: magic, one 0x01 pair, the end.
	var old bytes.Buffer
	ow := NewSnapshotWriter(&old)
	if err := ow.Add([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := ow.Close(); err != nil {
		t.Fatal(err)
	}
	if want := "NZSNAP1\n\x01\x01\x01"; !bytes.HasPrefix(old.Bytes(), []byte(want)) {
		t.Fatalf("Add wrote %q, want the 0x01 pair format", old.Bytes())
	}
	// Flip the expiry of pair 1 (its uvarint's last byte): the CRC catches it.
	bad := bytes.Clone(data)
	i := bytes.IndexByte(bad, snapPairExpiring)
	bad[i+3+8] ^= 0x01 // type, key length, value length, then the expiry uvarint (9 bytes)
	r = NewSnapshotReader(bytes.NewReader(bad))
	for r.Next() {
	}
	if err := r.Err(); !errors.Is(err, ErrSnapshotCorrupt) {
		t.Fatalf("changed expiry: %v, want ErrSnapshotCorrupt", err)
	}
}
