package systems

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
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
//	op|0x80 (1 byte) | request id | client id (uvarint) | sequence (uvarint) | key length | key | value
//
// The second form carries a client session (ClientID != 0). Either form may
// have 0x40 set in the op byte: an expiry time (uvarint, ExpiresUnixNano)
// then follows the request id and session fields, before the key length
// (a put with a TTL; encodings without the flag, written before TTLs
// existed, decode with ExpiresUnixNano 0). The value is the tail of the
// payload, so a reader that holds the record can return it without
// copying.
type Command struct {
	Op Op
	// RequestID identifies the proposal so that the node that proposed it can
	// answer the waiting client. Unique per proposing process.
	RequestID uint64
	// ClientID and Seq are the write's client session (Raft dissertation
	// section 6.3): the node applies a session's sequence number once, so a
	// client may resend a write whose outcome it does not know. ClientID 0:
	// no session (every copy of the command applies).
	ClientID, Seq uint64
	// ExpiresUnixNano is when a put's key expires, in Unix nanoseconds
	// (0: never): from then on every read path treats the key as absent
	// and GC drops it. The proposer computes it (now + TTL) once, so every
	// replica applies the same expiry time.
	ExpiresUnixNano int64
	Key             []byte
	// Value is nil for OpDelete.
	Value []byte
}

// opSessionFlag marks, in the op byte, a command that carries a session;
// opExpiryFlag one that carries an expiry time.
const (
	opSessionFlag = 0x80
	opExpiryFlag  = 0x40
)

// ErrMalformedCommand is returned by DecodeCommand for payloads that are not
// a Command.
var ErrMalformedCommand = errors.New("malformed command")

// EncodedSize returns the length of AppendCommand's output for c.
func (c *Command) EncodedSize() int {
	return c.headerSize() + len(c.Value)
}

// headerSize is the length of the wire form before the value.
func (c *Command) headerSize() int {
	n := 1 + uvarintLen(c.RequestID) + uvarintLen(uint64(len(c.Key))) + len(c.Key)
	if c.ClientID != 0 {
		n += uvarintLen(c.ClientID) + uvarintLen(c.Seq)
	}
	if c.ExpiresUnixNano != 0 {
		n += uvarintLen(uint64(c.ExpiresUnixNano))
	}
	return n
}

// opByte is the op with the flags of the fields c carries.
func (c *Command) opByte() byte {
	op := byte(c.Op)
	if c.ClientID != 0 {
		op |= opSessionFlag
	}
	if c.ExpiresUnixNano != 0 {
		op |= opExpiryFlag
	}
	return op
}

// AppendCommand appends the wire form of c to dst.
func AppendCommand(dst []byte, c *Command) []byte {
	dst = append(dst, c.opByte())
	dst = binary.AppendUvarint(dst, c.RequestID)
	if c.ClientID != 0 {
		dst = binary.AppendUvarint(dst, c.ClientID)
		dst = binary.AppendUvarint(dst, c.Seq)
	}
	if c.ExpiresUnixNano != 0 {
		dst = binary.AppendUvarint(dst, uint64(c.ExpiresUnixNano))
	}
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
	need := c.headerSize()
	if valueStart < need || valueStart > len(buf) {
		return nil, false
	}
	start := valueStart - need
	i := valueStart - len(c.Key)
	copy(buf[i:], c.Key) // memmove: the key may overlap its new place
	i -= uvarintLen(uint64(len(c.Key)))
	binary.PutUvarint(buf[i:], uint64(len(c.Key)))
	if c.ExpiresUnixNano != 0 {
		i -= uvarintLen(uint64(c.ExpiresUnixNano))
		binary.PutUvarint(buf[i:], uint64(c.ExpiresUnixNano))
	}
	if c.ClientID != 0 {
		i -= uvarintLen(c.Seq)
		binary.PutUvarint(buf[i:], c.Seq)
		i -= uvarintLen(c.ClientID)
		binary.PutUvarint(buf[i:], c.ClientID)
	}
	i -= uvarintLen(c.RequestID)
	binary.PutUvarint(buf[i:], c.RequestID)
	buf[start] = c.opByte()
	return buf[start:], true
}

// DecodeCommand parses data without copying: Key and Value alias data.
// An empty data decodes to OpNone. Errors wrap ErrMalformedCommand.
func DecodeCommand(data []byte) (Command, error) {
	if len(data) == 0 {
		return Command{Op: OpNone}, nil
	}
	c := Command{Op: Op(data[0] &^ (opSessionFlag | opExpiryFlag))}
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
	if data[0]&opSessionFlag != 0 {
		if c.ClientID, n = binary.Uvarint(rest); n <= 0 || c.ClientID == 0 {
			return Command{}, fmt.Errorf("%w: bad client id", ErrMalformedCommand)
		}
		rest = rest[n:]
		if c.Seq, n = binary.Uvarint(rest); n <= 0 {
			return Command{}, fmt.Errorf("%w: bad sequence number", ErrMalformedCommand)
		}
		rest = rest[n:]
	}
	if data[0]&opExpiryFlag != 0 {
		exp, n := binary.Uvarint(rest)
		if n <= 0 || exp == 0 || exp > math.MaxInt64 || c.Op != OpPut {
			return Command{}, fmt.Errorf("%w: bad expiry time", ErrMalformedCommand)
		}
		c.ExpiresUnixNano = int64(exp)
		rest = rest[n:]
	}
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
