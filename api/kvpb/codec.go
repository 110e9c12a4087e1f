package kvpb

import (
	"fmt"
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// CodecName is the name of Codec: the name of gRPC's own proto codec, so
// that requests carry the same content type and the wire format is
// unchanged.
const CodecName = "proto"

// Codec is gRPC's proto codec (google.golang.org/grpc/encoding/proto) with
// its own BufferPool instead of gRPC's default pool, which zeroes every
// buffer it hands out: one more pass over every value on each side of each
// hop. Use it with grpc.ForceCodecV2 (clients) and grpc.ForceServerCodecV2
// (servers). Safe for concurrent use.
type Codec struct {
	Pool *BufferPool
}

// NewCodec returns a Codec with a fresh BufferPool.
func NewCodec() *Codec { return &Codec{Pool: NewBufferPool()} }

// Name implements encoding.CodecV2.
func (c *Codec) Name() string { return CodecName }

// LargeValueBytes is the size from which Codec hands the value of a
// PutRequest or GetResponse to gRPC as a buffer of its own, without copying
// it (gRPC's SendMsg contract already forbids modifying a message after
// sending it).
const LargeValueBytes = 16 << 10

// Marshal implements encoding.CodecV2.
func (c *Codec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *PutRequest:
		if len(m.Value) >= LargeValueBytes {
			return marshalWithTail(&PutRequest{Key: m.Key, ClientId: m.ClientId, Seq: m.Seq, TtlMs: m.TtlMs}, 2, m.Value)
		}
	case *GetResponse:
		if len(m.Value) >= LargeValueBytes {
			return marshalWithTail(&GetResponse{Header: m.Header, Found: m.Found}, 3, m.Value)
		}
	}
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("kvpb codec: cannot marshal %T, want a proto.Message", v)
	}
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true} // the Size call above is what makes this safe
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := c.Pool.Get(size)
	if _, err := opts.MarshalAppend((*buf)[:0], m); err != nil {
		c.Pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, c.Pool)}, nil
}

// marshalWithTail encodes head, then the bytes field number field holding
// tail, which is not copied. Field order does not matter to a protobuf
// decoder; this is also the canonical order when field is head's last.
func marshalWithTail(head proto.Message, field protowire.Number, tail []byte) (mem.BufferSlice, error) {
	b, err := proto.Marshal(head)
	if err != nil {
		return nil, err
	}
	b = protowire.AppendTag(b, field, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(len(tail)))
	return mem.BufferSlice{mem.SliceBuffer(b), mem.SliceBuffer(tail)}, nil
}

// Unmarshal implements encoding.CodecV2. The message does not alias data
// (proto.Unmarshal copies bytes fields).
func (c *Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("kvpb codec: cannot unmarshal into %T, want a proto.Message", v)
	}
	buf := data.MaterializeToBuffer(c.Pool)
	defer buf.Free()
	if _, ok := m.(*BatchRequest); ok {
		if n := countBatchOps(buf.ReadOnlyData()); n > MaxBatchRequestOps {
			return fmt.Errorf("batch: a request of %d operations is over the limit of %d per request", n, MaxBatchRequestOps)
		}
	}
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

// MaxBatchRequestOps bounds the operations of one BatchRequest; Codec
// refuses a larger one before decoding it. An operation costs its decoded
// message (about 100 bytes) even when it is 2 bytes on the wire (an empty
// BatchOp), so a request as large as the servers' receive limit (about
// 129 MiB) would otherwise be decoded into some 67 million operations,
// several GiB. The Go client sends at most 256 per request.
const MaxBatchRequestOps = 1 << 16

// countBatchOps counts the ops fields of the encoded BatchRequest b (up to
// the first malformed field: proto.Unmarshal then reports it).
func countBatchOps(b []byte) int {
	n := 0
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return n
		}
		b = b[l:]
		l = protowire.ConsumeFieldValue(num, typ, b)
		if l < 0 {
			return n
		}
		b = b[l:]
		if num == 1 && typ == protowire.BytesType {
			n++
		}
	}
	return n
}

// BufferPool is a gRPC mem.BufferPool of power-of-two size classes from
// 512 B to 64 MiB that, unlike gRPC's default pool, does not zero the
// buffers it hands out (gRPC fills every buffer it gets before reading it,
// and so do Codec and the node's transport). Larger buffers are not
// pooled. Safe for concurrent use.
type BufferPool struct {
	classes [maxPoolClass - minPoolClass + 1]sync.Pool
}

const (
	minPoolClass = 9  // 512 B
	maxPoolClass = 26 // 64 MiB
)

var _ mem.BufferPool = (*BufferPool)(nil)

// NewBufferPool returns an empty pool.
func NewBufferPool() *BufferPool { return &BufferPool{} }

// class returns the size class whose buffers hold size bytes.
func poolClass(size int) int {
	if size <= 1<<minPoolClass {
		return minPoolClass
	}
	return bits.Len(uint(size - 1))
}

// Get returns a buffer of length size; its contents are undefined.
func (p *BufferPool) Get(size int) *[]byte {
	k := poolClass(size)
	if k > maxPoolClass {
		b := make([]byte, size)
		return &b
	}
	if b, ok := p.classes[k-minPoolClass].Get().(*[]byte); ok {
		*b = (*b)[:size]
		return b
	}
	b := make([]byte, size, 1<<k)
	return &b
}

// Put returns a buffer obtained from Get (or any buffer whose capacity is
// a size class) for reuse.
func (p *BufferPool) Put(b *[]byte) {
	c := cap(*b)
	k := poolClass(c)
	if k > maxPoolClass || c != 1<<k {
		return
	}
	p.classes[k-minPoolClass].Put(b)
}

// Flow control and buffers of the KV API's gRPC connections, set alike on
// both ends (the client's DialOptions and the node's server). gRPC's
// defaults, a 64 KiB window grown by BDP estimation and 32 KiB read and
// write buffers, cut a 256 KiB value into many window updates, BDP pings
// and writes, each a wake-up of a thread on both sides; these let a value
// of up to StreamWindowBytes travel in one go, while a connection holds
// at most ConnWindowBytes that its reader has not taken.
const (
	StreamWindowBytes = 4 << 20
	ConnWindowBytes   = 16 << 20
	ConnBufferBytes   = 256 << 10
)
