package node

import (
	"testing"
)

// FuzzDecodeSessionTable: any bytes either are refused or decode to a
// table that encodes and decodes to the same table; nothing panics (the
// table arrives with snapshots from other nodes).
func FuzzDecodeSessionTable(f *testing.F) {
	t := newSessionTable(8)
	for i := uint64(1); i <= 5; i++ {
		t.decide(i, i%3+1, i)
	}
	t.index = 5
	f.Add(t.encode())
	f.Add(newSessionTable(8).encode())
	f.Fuzz(func(t *testing.T, data []byte) {
		tbl, err := decodeSessionTable(data, 8)
		if err != nil {
			return
		}
		enc := tbl.encode()
		again, err := decodeSessionTable(enc, 8)
		if err != nil {
			t.Fatalf("re-encoded table does not decode: %v", err)
		}
		if string(again.encode()) != string(enc) {
			t.Fatal("table changed in a round trip")
		}
	})
}
