package systems

import (
	"bytes"
	"testing"
)

func TestPrependCommandHeaderMatchesAppendCommand(t *testing.T) {
	value := bytes.Repeat([]byte("v"), 300)
	for _, tc := range []struct {
		name      string
		key       []byte
		id        uint64
		keyAt     int // where the key sits in buf before the value; -1: not in buf
		headroom  int
		wantFits  bool
		keyLength int
	}{
		{name: "key just before the value", key: []byte("k000000001"), id: 1<<63 | 5, keyAt: 40, headroom: 50, wantFits: true},
		{name: "key at the start, overlapping its new place", key: bytes.Repeat([]byte("a"), 200), id: 7, keyAt: 0, headroom: 210, wantFits: true},
		{name: "key elsewhere", key: []byte("x"), id: 1 << 40, keyAt: -1, headroom: 20, wantFits: true},
		{name: "no room", key: []byte("k000000001"), id: 1 << 63, keyAt: -1, headroom: 15, wantFits: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]byte, tc.headroom+len(value))
			copy(buf[tc.headroom:], value)
			key := tc.key
			if tc.keyAt >= 0 {
				copy(buf[tc.keyAt:], tc.key)
				key = buf[tc.keyAt : tc.keyAt+len(tc.key)]
			}
			want := AppendCommand(nil, &Command{Op: OpPut, RequestID: tc.id, Key: tc.key, Value: value})
			got, ok := PrependCommandHeader(buf, tc.headroom, &Command{Op: OpPut, RequestID: tc.id, Key: key, Value: buf[tc.headroom:]})
			if ok != tc.wantFits {
				t.Fatalf("fits = %v, want %v", ok, tc.wantFits)
			}
			if !ok {
				return
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("in-place encoding differs from AppendCommand:\n got %x\nwant %x", got[:40], want[:40])
			}
			if &got[len(got)-1] != &buf[len(buf)-1] {
				t.Fatal("the result is not a suffix of buf")
			}
		})
	}
}
