package kvpb

import (
	"strings"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// TestCodecRefusesHugeBatchRequest: a BatchRequest of more than
// MaxBatchRequestOps operations is refused before it is decoded. Without
// the check a request of empty operations, 2 bytes each on the wire, was
// decoded into a message about 90 times its size (a 4 MB request took a
// node's RSS up by 360 MB; the receive limit is about 129 MiB).
func TestCodecRefusesHugeBatchRequest(t *testing.T) {
	const limit = 1 << 16 // MaxBatchRequestOps
	c := NewCodec()
	emptyOps := func(n int) mem.BufferSlice {
		b := make([]byte, 0, 2*n)
		for i := 0; i < n; i++ {
			b = append(b, 0x0a, 0x00) // field 1 (ops), length 0
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}
	}
	var req BatchRequest
	if err := c.Unmarshal(emptyOps(limit), &req); err != nil {
		t.Fatalf("request of %d operations: %v", limit, err)
	}
	if len(req.Ops) != limit {
		t.Fatalf("decoded %d operations, want %d", len(req.Ops), limit)
	}
	err := c.Unmarshal(emptyOps(limit+1), &BatchRequest{})
	if err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Fatalf("request of %d operations: %v, want refused as over the limit", limit+1, err)
	}
	// Other messages and ordinary requests are untouched.
	ok := &BatchRequest{Ops: []*BatchOp{{Id: 1, Op: &BatchOp_Get{Get: &GetRequest{Key: []byte("k")}}}}}
	b, err := proto.Marshal(ok)
	if err != nil {
		t.Fatal(err)
	}
	var got BatchRequest
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &got); err != nil || !proto.Equal(&got, ok) {
		t.Fatalf("ordinary request: %v, %v", &got, err)
	}
	// A malformed request is left to proto.Unmarshal's error.
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0x0a, 0x05, 0x00})}, &BatchRequest{}); err == nil {
		t.Fatal("malformed request decoded")
	}
}
