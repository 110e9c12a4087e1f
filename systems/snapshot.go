package systems

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
)

// Snapshot stream format (what a leader sends a follower that is behind its
// compaction point):
//
//	magic "NZSNAP1\n"
//	pair*: 0x01 | uvarint len(key) | uvarint len(value) | crc32c(key|value) (4, LE) | key | value
//	    or 0x03 | uvarint len(key) | uvarint len(value) | uvarint expiry | crc32c(expiry (8, LE)|key|value) (4, LE) | key | value
//	end:   0x02 | uvarint number of pairs
//
// Keys must be strictly ascending. A 0x03 pair carries the expiry time of
// a value with a TTL (Unix nanoseconds, > 0); streams written before TTLs
// existed hold only 0x01 pairs.
const snapshotMagic = "NZSNAP1\n"

const (
	snapPair         byte = 1
	snapEnd          byte = 2
	snapPairExpiring byte = 3
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// SnapshotWriter writes a snapshot stream.
type SnapshotWriter struct {
	w       *bufio.Writer
	n       uint64
	lastKey []byte
	started bool
	// Bytes counts what was written (keys and values).
	Bytes int64
}

// NewSnapshotWriter returns a writer on w; call Close to finish the stream.
func NewSnapshotWriter(w io.Writer) *SnapshotWriter {
	return &SnapshotWriter{w: bufio.NewWriterSize(w, 1<<20)}
}

// Add writes one pair. Keys must be strictly ascending.
func (s *SnapshotWriter) Add(key, value []byte) error { return s.AddExpiring(key, value, 0) }

// AddExpiring writes one pair whose value expires at expiresUnixNano (0:
// never, the same as Add). Keys must be strictly ascending.
func (s *SnapshotWriter) AddExpiring(key, value []byte, expiresUnixNano int64) error {
	if !s.started {
		if _, err := s.w.WriteString(snapshotMagic); err != nil {
			return err
		}
		s.started = true
	} else if string(key) <= string(s.lastKey) {
		return fmt.Errorf("snapshot: key %q after %q: keys must ascend", key, s.lastKey)
	}
	var hdr [1 + 3*binary.MaxVarintLen64 + 4]byte
	b := append(hdr[:0], snapPair)
	crc := uint32(0)
	if expiresUnixNano != 0 {
		b[0] = snapPairExpiring
	}
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = binary.AppendUvarint(b, uint64(len(value)))
	if expiresUnixNano != 0 {
		b = binary.AppendUvarint(b, uint64(expiresUnixNano))
		var e [8]byte
		binary.LittleEndian.PutUint64(e[:], uint64(expiresUnixNano))
		crc = crc32.Update(crc, crcTable, e[:])
	}
	crc = crc32.Update(crc32.Update(crc, crcTable, key), crcTable, value)
	b = binary.LittleEndian.AppendUint32(b, crc)
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	if _, err := s.w.Write(key); err != nil {
		return err
	}
	if _, err := s.w.Write(value); err != nil {
		return err
	}
	s.lastKey = append(s.lastKey[:0], key...)
	s.n++
	s.Bytes += int64(len(key) + len(value))
	return nil
}

// Close writes the end marker and flushes.
func (s *SnapshotWriter) Close() error {
	if !s.started {
		if _, err := s.w.WriteString(snapshotMagic); err != nil {
			return err
		}
	}
	b := binary.AppendUvarint([]byte{snapEnd}, s.n)
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.w.Flush()
}

// SnapshotReader reads a snapshot stream.
type SnapshotReader struct {
	r     *bufio.Reader
	n     uint64
	done  bool
	err   error
	key   []byte
	value []byte
	exp   int64
	// MaxPairBytes bounds one key+value (a corrupt length must not make the
	// reader allocate gigabytes). Default 1 GiB.
	MaxPairBytes uint64
}

// NewSnapshotReader returns a reader on r.
func NewSnapshotReader(r io.Reader) *SnapshotReader {
	return &SnapshotReader{r: bufio.NewReaderSize(r, 1<<20), MaxPairBytes: 1 << 30}
}

// ErrSnapshotCorrupt marks a malformed or truncated snapshot stream.
var ErrSnapshotCorrupt = errors.New("corrupt snapshot stream")

// Next advances to the next pair; false at the end or on error (see Err).
// Key and Value are valid until the next call.
func (s *SnapshotReader) Next() bool {
	if s.done || s.err != nil {
		return false
	}
	if s.n == 0 && s.key == nil {
		magic := make([]byte, len(snapshotMagic))
		if _, err := io.ReadFull(s.r, magic); err != nil || string(magic) != snapshotMagic {
			s.err = fmt.Errorf("%w: bad magic", ErrSnapshotCorrupt)
			return false
		}
		s.key = []byte{}
	}
	t, err := s.r.ReadByte()
	if err != nil {
		s.err = fmt.Errorf("%w: truncated after %d pairs", ErrSnapshotCorrupt, s.n)
		return false
	}
	switch t {
	case snapEnd:
		n, err := binary.ReadUvarint(s.r)
		if err != nil || n != s.n {
			s.err = fmt.Errorf("%w: end marker says %d pairs, read %d", ErrSnapshotCorrupt, n, s.n)
			return false
		}
		s.done = true
		return false
	case snapPair, snapPairExpiring:
	default:
		s.err = fmt.Errorf("%w: unknown frame type %d", ErrSnapshotCorrupt, t)
		return false
	}
	kl, err1 := binary.ReadUvarint(s.r)
	vl, err2 := binary.ReadUvarint(s.r)
	var exp uint64
	var errExp error
	crc := uint32(0)
	if t == snapPairExpiring {
		exp, errExp = binary.ReadUvarint(s.r)
		if errExp == nil && (exp == 0 || exp > math.MaxInt64) {
			errExp = errors.New("bad expiry")
		}
		var e [8]byte
		binary.LittleEndian.PutUint64(e[:], exp)
		crc = crc32.Update(crc, crcTable, e[:])
	}
	var crcb [4]byte
	_, err3 := io.ReadFull(s.r, crcb[:])
	if err := errors.Join(err1, err2, errExp, err3); err != nil || kl > s.MaxPairBytes || vl > s.MaxPairBytes || kl+vl > s.MaxPairBytes {
		s.err = fmt.Errorf("%w: bad pair header after %d pairs", ErrSnapshotCorrupt, s.n)
		return false
	}
	buf := make([]byte, kl+vl)
	if _, err := io.ReadFull(s.r, buf); err != nil {
		s.err = fmt.Errorf("%w: truncated pair after %d pairs", ErrSnapshotCorrupt, s.n)
		return false
	}
	if crc32.Update(crc, crcTable, buf) != binary.LittleEndian.Uint32(crcb[:]) {
		s.err = fmt.Errorf("%w: CRC mismatch in pair %d", ErrSnapshotCorrupt, s.n)
		return false
	}
	key := buf[:kl:kl]
	if s.n > 0 && string(key) <= string(s.key) {
		s.err = fmt.Errorf("%w: key %q after %q", ErrSnapshotCorrupt, key, s.key)
		return false
	}
	s.key, s.value, s.exp = key, buf[kl:], int64(exp)
	s.n++
	return true
}

// ExpiresUnixNano is the current pair's expiry time (0: none).
func (s *SnapshotReader) ExpiresUnixNano() int64 { return s.exp }

// Key and Value of the current pair; the slices are the caller's to keep.
func (s *SnapshotReader) Key() []byte   { return s.key }
func (s *SnapshotReader) Value() []byte { return s.value }

// Err returns the first error, or nil after a complete stream.
func (s *SnapshotReader) Err() error {
	if s.err == nil && !s.done {
		return fmt.Errorf("%w: stream not read to its end", ErrSnapshotCorrupt)
	}
	return s.err
}

// Count is the number of pairs read so far.
func (s *SnapshotReader) Count() uint64 { return s.n }
