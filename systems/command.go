package systems

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Op is the kind of a replicated command.
type Op uint8

const (
	// OpNone marks a Raft entry that carries no command (the leader's empty
	// entry at the start of a term, conf changes).
	OpNone Op = 0
	// OpPut sets key to value.
	OpPut Op = 1
	// OpDelete removes key.
	OpDelete Op = 2
)

func (o Op) String() string {
	switch o {
	case OpNone:
		return "none"
	case OpPut:
		return "put"
	case OpDelete:
		return "delete"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Command is the payload of a normal Raft entry: one client write.
//
// Wire form (the Data of a raftpb.Entry, and so the payload of a log record):
//
//	op (1 byte) | request id (uvarint) | key length (uvarint) | key | value
//
// The value is the tail of the payload, so a reader that holds the record
// can return it without copying.
type Command struct {
	Op Op
	// RequestID identifies the proposal so that the node that proposed it can
	// answer the waiting client. Unique per proposing process.
	RequestID uint64
	Key       []byte
	// Value is nil for OpDelete.
	Value []byte
}

// ErrMalformedCommand is returned by DecodeCommand for payloads that are not
// a Command.
var ErrMalformedCommand = errors.New("malformed command")

// EncodedSize returns the length of AppendCommand's output for c.
func (c *Command) EncodedSize() int {
	return 1 + uvarintLen(c.RequestID) + uvarintLen(uint64(len(c.Key))) + len(c.Key) + len(c.Value)
}

// AppendCommand appends the wire form of c to dst.
func AppendCommand(dst []byte, c *Command) []byte {
	dst = append(dst, byte(c.Op))
	dst = binary.AppendUvarint(dst, c.RequestID)
	dst = binary.AppendUvarint(dst, uint64(len(c.Key)))
	dst = append(dst, c.Key...)
	return append(dst, c.Value...)
}

// PrependCommandHeader encodes c in place as the tail of buf, where
// buf[valueStart:] is c.Value and c.Key lies anywhere in buf before
// valueStart (or elsewhere): the key is moved to just before the value and
// the op, request id and key length are written before it. It returns the
// wire form (a suffix of buf, no copy of the value) and true, or false if
// there is not enough room before valueStart. Bytes of buf before the
// result are overwritten.
func PrependCommandHeader(buf []byte, valueStart int, c *Command) ([]byte, bool) {
	need := 1 + uvarintLen(c.RequestID) + uvarintLen(uint64(len(c.Key))) + len(c.Key)
	if valueStart < need || valueStart > len(buf) {
		return nil, false
	}
	start := valueStart - need
	i := valueStart - len(c.Key)
	copy(buf[i:], c.Key) // memmove: the key may overlap its new place
	i -= uvarintLen(uint64(len(c.Key)))
	binary.PutUvarint(buf[i:], uint64(len(c.Key)))
	i -= uvarintLen(c.RequestID)
	binary.PutUvarint(buf[i:], c.RequestID)
	buf[start] = byte(c.Op)
	return buf[start:], true
}

// DecodeCommand parses data without copying: Key and Value alias data.
// An empty data decodes to OpNone. Errors wrap ErrMalformedCommand.
func DecodeCommand(data []byte) (Command, error) {
	if len(data) == 0 {
		return Command{Op: OpNone}, nil
	}
	c := Command{Op: Op(data[0])}
	if c.Op != OpPut && c.Op != OpDelete {
		return Command{}, fmt.Errorf("%w: unknown op %d", ErrMalformedCommand, data[0])
	}
	rest := data[1:]
	id, n := binary.Uvarint(rest)
	if n <= 0 {
		return Command{}, fmt.Errorf("%w: bad request id", ErrMalformedCommand)
	}
	c.RequestID = id
	rest = rest[n:]
	klen, n := binary.Uvarint(rest)
	if n <= 0 || klen > uint64(len(rest)-n) {
		return Command{}, fmt.Errorf("%w: bad key length", ErrMalformedCommand)
	}
	rest = rest[n:]
	c.Key = rest[:klen:klen]
	if c.Op == OpPut {
		c.Value = rest[klen:]
	} else if len(rest) != int(klen) {
		return Command{}, fmt.Errorf("%w: delete with a value", ErrMalformedCommand)
	}
	return c, nil
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
