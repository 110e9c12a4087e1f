package node

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// TestLogWriterWritesAheadOfFlush checks the group commit bound: the writer
// writes at most groupBytes ahead of the flush under way, and the flush
// itself does not count, so that a slow flush does not stop the writing of
// the next group.
func TestLogWriterWritesAheadOfFlush(t *testing.T) {
	const bound = 4 << 10
	w := &logWriter{groupBytes: bound}
	queue := func() {
		m := raftpb.Message{Type: raftpb.MsgStorageAppend, Entries: []raftpb.Entry{{Index: 1, Data: make([]byte, 100)}}}
		w.queue = append(w.queue, m)
		w.queueBytes += appendBytes(&m)
	}
	written := func(bytes int64) {
		w.written = append(w.written, logGroup{bytes: bytes, appends: 1})
		w.unflushedBytes += bytes
	}

	if w.canWrite() {
		t.Fatal("canWrite with nothing queued")
	}
	queue()
	if !w.canWrite() {
		t.Fatal("cannot write a queued append with nothing written")
	}
	written(bound)
	if w.canWrite() {
		t.Fatalf("canWrite with %d bytes written and not flushed (bound %d)", w.unflushedBytes, bound)
	}
	groups := w.takeWritten()
	if len(groups) != 1 || w.flushingBytes != bound || len(w.written) != 0 {
		t.Fatalf("takeWritten: %d groups, flushingBytes %d, %d left written", len(groups), w.flushingBytes, len(w.written))
	}
	if !w.canWrite() {
		t.Fatal("the flush under way stops the writer: write and flush take turns")
	}
	written(bound - 1)
	if !w.canWrite() {
		t.Fatalf("cannot write with %d bytes ahead of the flush (bound %d)", w.unflushedBytes-w.flushingBytes, bound)
	}
	written(1)
	if w.canWrite() {
		t.Fatalf("canWrite with %d bytes ahead of the flush (bound %d)", w.unflushedBytes-w.flushingBytes, bound)
	}
}
