package systems

import (
	"bytes"
	"encoding/hex"
	"strings"
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
		expires   int64
	}{
		{name: "key just before the value", key: []byte("k000000001"), id: 1<<63 | 5, keyAt: 40, headroom: 50, wantFits: true},
		{name: "key at the start, overlapping its new place", key: bytes.Repeat([]byte("a"), 200), id: 7, keyAt: 0, headroom: 210, wantFits: true},
		{name: "key elsewhere", key: []byte("x"), id: 1 << 40, keyAt: -1, headroom: 20, wantFits: true},
		{name: "no room", key: []byte("k000000001"), id: 1 << 63, keyAt: -1, headroom: 15, wantFits: false},
		{name: "with a session", key: []byte("k000000001"), id: 9, keyAt: 20, headroom: 60, wantFits: true, client: 1<<62 + 3},
		{name: "with a session, no room", key: []byte("k000000001"), id: 9, keyAt: -1, headroom: 22, wantFits: false, client: 1 << 62},
		{name: "with an expiry", key: []byte("k000000001"), id: 9, keyAt: 20, headroom: 60, wantFits: true, expires: 1_800_000_000_000_000_000},
		{name: "with a session and an expiry", key: []byte("k000000001"), id: 9, keyAt: -1, headroom: 60, wantFits: true, client: 5, expires: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]byte, tc.headroom+len(value))
			copy(buf[tc.headroom:], value)
			key := tc.key
			if tc.keyAt >= 0 {
				copy(buf[tc.keyAt:], tc.key)
				key = buf[tc.keyAt : tc.keyAt+len(tc.key)]
			}
			want := AppendCommand(nil, &Command{Op: OpPut, RequestID: tc.id, ClientID: tc.client, Seq: 77, ExpiresUnixNano: tc.expires, Key: tc.key, Value: value})
			got, ok := PrependCommandHeader(buf, tc.headroom, &Command{Op: OpPut, RequestID: tc.id, ClientID: tc.client, Seq: 77,
				ExpiresUnixNano: tc.expires, Key: key, Value: buf[tc.headroom:]})
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
		{Op: OpPut, RequestID: 3, ExpiresUnixNano: 1_800_000_000_123_456_789, Key: []byte("ttl"), Value: []byte("v")},
		{Op: OpPut, RequestID: 4, ClientID: 9, Seq: 2, ExpiresUnixNano: 1, Key: []byte("ttl"), Value: nil},
	} {
		got, err := DecodeCommand(AppendCommand(nil, &c))
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if got.Op != c.Op || got.RequestID != c.RequestID || got.ClientID != c.ClientID || got.Seq != c.Seq || got.ExpiresUnixNano != c.ExpiresUnixNano ||
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

// TestDecodeCommandOldEncodings: commands written before expiry times
// existed (no 0x40 flag) still decode, with no expiry; an expiry on a
// delete, or of 0, is malformed.
func TestDecodeCommandOldEncodings(t *testing.T) {
	for _, tc := range []struct {
		hex  string
		want Command
	}{
		{"0105016b76", Command{Op: OpPut, RequestID: 5, Key: []byte("k"), Value: []byte("v")}},
		{"8103070200616263", Command{Op: OpPut, RequestID: 3, ClientID: 7, Seq: 2, Key: []byte{}, Value: []byte("abc")}},
		{"02020467 6f6e65", Command{Op: OpDelete, RequestID: 2, Key: []byte("gone")}},
	} {
		b, err := hex.DecodeString(strings.ReplaceAll(tc.hex, " ", ""))
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeCommand(b)
		if err != nil {
			t.Fatalf("%s: %v", tc.hex, err)
		}
		if got.Op != tc.want.Op || got.RequestID != tc.want.RequestID || got.ClientID != tc.want.ClientID || got.Seq != tc.want.Seq ||
			got.ExpiresUnixNano != 0 || !bytes.Equal(got.Key, tc.want.Key) || !bytes.Equal(got.Value, tc.want.Value) {
			t.Fatalf("%s decoded %+v, want %+v", tc.hex, got, tc.want)
		}
	}
	for _, bad := range []string{"42020a0467 6f6e65", "41050001 6b76"} {
		b, _ := hex.DecodeString(strings.ReplaceAll(bad, " ", ""))
		if _, err := DecodeCommand(b); err == nil {
			t.Errorf("%s decoded", bad)
		}
	}
}
