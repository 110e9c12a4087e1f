package raftlog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/nezha-harness/nezha/systems"
)

// Record format (docs/architecture.md section 4.1), little endian:
//
//	crc32c (4) | payload length (4) | kind (1) | term (8) | index (8) | payload
//
// The CRC (Castagnoli) covers everything after itself: the rest of the header
// and the payload. A header of all zero bytes marks the end of written data.
const headerSize = 25

// maxPayloadBytes bounds the payload length field so that a corrupt length
// cannot make a reader allocate gigabytes.
const maxPayloadBytes = 1 << 30

// kind is the type of a record.
type kind uint8

const (
	// Entry records carry one raftpb.Entry; the kind encodes its EntryType.
	kindEntryNormal       kind = 1
	kindEntryConfChange   kind = 2
	kindEntryConfChangeV2 kind = 3
	// kindHardState carries a marshaled raftpb.HardState.
	kindHardState kind = 4
	// kindCompact carries a marshaled raftpb.SnapshotMetadata: entries at or
	// below its index are no longer kept as Raft entries (log compaction).
	kindCompact kind = 5
	// kindSnapshot carries a marshaled raftpb.SnapshotMetadata of a snapshot
	// received from the leader: every entry written before it is discarded.
	kindSnapshot kind = 6
)

func (k kind) isEntry() bool { return k >= kindEntryNormal && k <= kindEntryConfChangeV2 }

func (k kind) String() string {
	switch k {
	case kindEntryNormal:
		return "entry"
	case kindEntryConfChange:
		return "confchange"
	case kindEntryConfChangeV2:
		return "confchangev2"
	case kindHardState:
		return "hardstate"
	case kindCompact:
		return "compact"
	case kindSnapshot:
		return "snapshot"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type header struct {
	crc    uint32
	length uint32
	kind   kind
	term   uint64
	index  uint64
}

// appendRecord appends one record to dst.
func appendRecord(dst []byte, k kind, term, index uint64, payload []byte) []byte {
	return append(appendRecordHeader(dst, k, term, index, payload), payload...)
}

// appendRecordHeader appends the header of a record whose payload the
// caller writes right after it (a vectored write); the CRC covers payload.
func appendRecordHeader(dst []byte, k kind, term, index uint64, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, headerSize)...)
	h := dst[start : start+headerSize]
	binary.LittleEndian.PutUint32(h[4:], uint32(len(payload)))
	h[8] = byte(k)
	binary.LittleEndian.PutUint64(h[9:], term)
	binary.LittleEndian.PutUint64(h[17:], index)
	crc := crc32.Update(crc32.Update(0, castagnoli, h[4:]), castagnoli, payload)
	binary.LittleEndian.PutUint32(h, crc)
	return dst
}

func parseHeader(b []byte) header {
	return header{
		crc:    binary.LittleEndian.Uint32(b[0:]),
		length: binary.LittleEndian.Uint32(b[4:]),
		kind:   kind(b[8]),
		term:   binary.LittleEndian.Uint64(b[9:]),
		index:  binary.LittleEndian.Uint64(b[17:]),
	}
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// checkRecord verifies the CRC of a whole record (header and payload) in rec.
func checkRecord(rec []byte) (header, error) {
	if len(rec) < headerSize {
		return header{}, fmt.Errorf("%w: record of %d bytes is shorter than its header", systems.ErrCorrupt, len(rec))
	}
	h := parseHeader(rec)
	if int(h.length) != len(rec)-headerSize {
		return header{}, fmt.Errorf("%w: record length %d does not match %d bytes read", systems.ErrCorrupt, h.length, len(rec)-headerSize)
	}
	if got := crc32.Update(0, castagnoli, rec[4:]); got != h.crc {
		return header{}, fmt.Errorf("%w: CRC mismatch (stored %08x, computed %08x)", systems.ErrCorrupt, h.crc, got)
	}
	return h, nil
}
