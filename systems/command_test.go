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
		client    uint64
	}{
		{name: "key just before the value", key: []byte("k000000001"), id: 1<<63 | 5, keyAt: 40, headroom: 50, wantFits: true},
		{name: "key at the start, overlapping its new place", key: bytes.Repeat([]byte("a"), 200), id: 7, keyAt: 0, headroom: 210, wantFits: true},
		{name: "key elsewhere", key: []byte("x"), id: 1 << 40, keyAt: -1, headroom: 20, wantFits: true},
		{name: "no room", key: []byte("k000000001"), id: 1 << 63, keyAt: -1, headroom: 15, wantFits: false},
		{name: "with a session", key: []byte("k000000001"), id: 9, keyAt: 20, headroom: 60, wantFits: true, client: 1<<62 + 3},
		{name: "with a session, no room", key: []byte("k000000001"), id: 9, keyAt: -1, headroom: 22, wantFits: false, client: 1 << 62},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]byte, tc.headroom+len(value))
			copy(buf[tc.headroom:], value)
			key := tc.key
			if tc.keyAt >= 0 {
				copy(buf[tc.keyAt:], tc.key)
				key = buf[tc.keyAt : tc.keyAt+len(tc.key)]
			}
			want := AppendCommand(nil, &Command{Op: OpPut, RequestID: tc.id, ClientID: tc.client, Seq: 77, Key: tc.key, Value: value})
			got, ok := PrependCommandHeader(buf, tc.headroom, &Command{Op: OpPut, RequestID: tc.id, ClientID: tc.client, Seq: 77,
				Key: key, Value: buf[tc.headroom:]})
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

func TestDecodeCommandRoundTrip(t *testing.T) {
	for _, c := range []Command{
		{Op: OpPut, RequestID: 5, Key: []byte("k"), Value: []byte("v")},
		{Op: OpPut, RequestID: 1 << 40, ClientID: 1<<63 + 1, Seq: 300, Key: []byte("key"), Value: []byte("value")},
		{Op: OpDelete, RequestID: 2, ClientID: 7, Seq: 1, Key: []byte("gone")},
	} {
		got, err := DecodeCommand(AppendCommand(nil, &c))
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if got.Op != c.Op || got.RequestID != c.RequestID || got.ClientID != c.ClientID || got.Seq != c.Seq ||
			!bytes.Equal(got.Key, c.Key) || !bytes.Equal(got.Value, c.Value) {
			t.Fatalf("decoded %+v, want %+v", got, c)
		}
	}
	// A session flag with client id 0 is malformed.
	bad := AppendCommand(nil, &Command{Op: OpPut, RequestID: 1, ClientID: 1, Seq: 1, Key: []byte("k")})
	bad[2] = 0
	if _, err := DecodeCommand(bad); err == nil {
		t.Fatal("client id 0 with the session flag decoded")
	}
}
