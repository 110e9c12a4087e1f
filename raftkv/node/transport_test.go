package node

import (
	"bytes"
	"math/rand"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/systems"
)

func testMessages(rng *rand.Rand) []raftpb.Message {
	data := func(n int) []byte { b := make([]byte, n); rng.Read(b); return b }
	return []raftpb.Message{
		{Type: raftpb.MsgHeartbeat, To: 2, From: 1, Term: 3, Commit: 7, Context: data(24)},
		{Type: raftpb.MsgApp, To: 2, From: 1, Term: 3, LogTerm: 2, Index: 10, Commit: 9, Entries: []raftpb.Entry{
			{Term: 3, Index: 11, Type: raftpb.EntryNormal, Data: data(100)},
			{Term: 3, Index: 12, Type: raftpb.EntryNormal, Data: data(256 << 10)},
			{Term: 3, Index: 13, Type: raftpb.EntryNormal}, // empty: the leader's entry of a new term
			{Term: 3, Index: 14, Type: raftpb.EntryConfChangeV2, Data: data(inlineEntryBytes)},
			{Term: 3, Index: 15, Type: raftpb.EntryNormal, Data: data(inlineEntryBytes - 1)},
		}},
		{Type: raftpb.MsgAppResp, To: 1, From: 2, Term: 3, Index: 15, Reject: true, RejectHint: 12, LogTerm: 2},
		{Type: raftpb.MsgSnap, To: 3, From: 1, Term: 3, Snapshot: &raftpb.Snapshot{Data: []byte("/snap/x"),
			Metadata: raftpb.SnapshotMetadata{Index: 100, Term: 2, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}},
		{Type: raftpb.MsgReadIndex, To: 1, From: 3, Entries: []raftpb.Entry{{Data: data(24)}}},
	}
}

func sameMessages(t *testing.T, what string, got, want []raftpb.Message) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d messages, want %d", what, len(got), len(want))
	}
	for i := range want {
		g, _ := got[i].Marshal()
		w, _ := want[i].Marshal()
		if !bytes.Equal(g, w) {
			t.Fatalf("%s: message %d differs:\n got %s\nwant %s", what, i, got[i].String()[:min(200, len(got[i].String()))],
				want[i].String()[:min(200, len(want[i].String()))])
		}
	}
}

// The batch codec's bytes are a MessageBatch (a node of the previous
// version decodes them) and it decodes what the proto codec writes.
func TestBatchCodecIsMessageBatchWireForm(t *testing.T) {
	msgs := testMessages(rand.New(rand.NewSource(1)))
	c := &batchCodec{Codec: kvpb.NewCodec()}

	wire, err := c.Marshal(&outBatch{msgs: msgs})
	if err != nil {
		t.Fatal(err)
	}
	var mb kvpb.MessageBatch
	if err := proto.Unmarshal(wire.Materialize(), &mb); err != nil {
		t.Fatalf("batch codec output is not a MessageBatch: %v", err)
	}
	var viaProto []raftpb.Message
	for _, b := range mb.Messages {
		var m raftpb.Message
		if err := m.Unmarshal(b); err != nil {
			t.Fatal(err)
		}
		viaProto = append(viaProto, m)
	}
	sameMessages(t, "batch codec -> proto", viaProto, msgs)

	// And back, split into many small buffers as gRPC hands them over.
	var in inBatch
	if err := c.Unmarshal(splitBuffers(wire.Materialize(), 1000), &in); err != nil {
		t.Fatal(err)
	}
	sameMessages(t, "batch codec -> batch codec", in.msgs, msgs)

	mb = kvpb.MessageBatch{}
	for _, m := range msgs {
		b, _ := m.Marshal()
		mb.Messages = append(mb.Messages, b)
	}
	std, _ := proto.Marshal(&mb)
	in = inBatch{}
	if err := c.Unmarshal(splitBuffers(std, 16384), &in); err != nil {
		t.Fatal(err)
	}
	sameMessages(t, "proto -> batch codec", in.msgs, msgs)

	// Appending to a decoded entry's data must not reach into the next one.
	e := &in.msgs[1].Entries[0]
	next := append([]byte(nil), in.msgs[1].Entries[1].Data...)
	_ = append(e.Data, 0xff, 0xff, 0xff)
	if !bytes.Equal(in.msgs[1].Entries[1].Data, next) {
		t.Fatal("an append to a decoded entry's data overwrote the next entry")
	}
}

func TestBatchCodecRejectsGarbage(t *testing.T) {
	c := &batchCodec{Codec: kvpb.NewCodec()}
	for _, b := range [][]byte{{0x12, 0x01, 0x00}, {messageBatchTag, 0x05, 0x08}, {messageBatchTag, 0x02, 0x3a, 0x05}} {
		var in inBatch
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &in); err == nil {
			t.Errorf("decoding %x succeeded", b)
		}
	}
}

func splitBuffers(b []byte, size int) mem.BufferSlice {
	var out mem.BufferSlice
	for len(b) > 0 {
		n := min(size, len(b))
		out = append(out, mem.SliceBuffer(b[:n]))
		b = b[n:]
	}
	return out
}

// A PutRequest decodes into a putFrame whose command is built in place and
// equals the copied encoding, whatever the field order and extra fields.
func TestPutFrameBuildsCommandInPlace(t *testing.T) {
	value := bytes.Repeat([]byte{7}, 100000)
	std, _ := proto.Marshal(&kvpb.PutRequest{Key: []byte("k000000042"), Value: value})
	c := kvpb.NewCodec()
	vectored, _ := c.Marshal(&kvpb.PutRequest{Key: []byte("k000000042"), Value: value})
	valueFirst := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), value)
	valueFirst = protowire.AppendBytes(protowire.AppendTag(valueFirst, 1, protowire.BytesType), []byte("k000000042"))
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 5)
	for _, tc := range []struct {
		name      string
		wire      []byte
		valueLast bool
	}{
		{"proto.Marshal", std, true},
		{"kvpb.Codec", vectored.Materialize(), true},
		{"value first", valueFirst, false},
		{"unknown field first", append(append([]byte(nil), unknown...), std...), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f putFrame
			if err := (kvCodec{c}).Unmarshal(splitBuffers(tc.wire, 16384), &f); err != nil {
				t.Fatal(err)
			}
			if string(f.key) != "k000000042" || !bytes.Equal(f.value, value) || f.valueLast != tc.valueLast {
				t.Fatalf("decoded key %q, value of %d bytes, valueLast %v", f.key, len(f.value), f.valueLast)
			}
			cmd := &systems.Command{Op: systems.OpPut, RequestID: 1<<63 | 99, Key: f.key, Value: f.value}
			want := systems.AppendCommand(nil, cmd)
			if !f.valueLast {
				return
			}
			got, ok := systems.PrependCommandHeader(f.buf, f.valueStart, cmd)
			if !ok || !bytes.Equal(got, want) {
				t.Fatalf("in-place command (ok %v) differs from the copied one", ok)
			}
		})
	}
}
