package nezha

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/nezha-harness/nezha/systems"
)

// Index key space. User keys and metadata share one ordered key space in
// the index, kept apart by a one-byte prefix: user key k is stored as
// userPrefix+k, metadata name n as metaPrefix+n. Every user key sorts
// between userPrefix and userPrefix+1 (userLimit).
const (
	metaPrefix = 'm'
	userPrefix = 'u'
	userLimit  = userPrefix + 1
)

// metaApplied is the metadata key holding the applied index (8 bytes, big
// endian), written in the same batch as the key changes it covers.
var metaApplied = []byte{metaPrefix, 'a', 'p', 'p', 'l', 'i', 'e', 'd'}

// userKey returns userPrefix+key in a new slice.
func userKey(key []byte) []byte {
	k := make([]byte, 1+len(key))
	k[0] = userPrefix
	copy(k[1:], key)
	return k
}

// userRange returns the index keys bounding user keys in [start, end);
// an empty end means no upper bound.
func userRange(start, end []byte) (lo, hi []byte) {
	lo = userKey(start)
	if len(end) == 0 {
		return lo, []byte{userLimit}
	}
	return lo, userKey(end)
}

// maxLocationBytes is the longest encoding of a Location: five uvarints.
const maxLocationBytes = 4*binary.MaxVarintLen64 + binary.MaxVarintLen32

// appendLocation appends the index value of loc to dst: uvarints of
// Segment, Offset, Length and Index (typically 8-12 bytes), then, for a
// value with a TTL, of ExpiresUnixNano (values written before TTLs existed
// have four fields, and decode with no expiry).
func appendLocation(dst []byte, loc systems.Location) []byte {
	dst = binary.AppendUvarint(dst, loc.Segment)
	dst = binary.AppendUvarint(dst, uint64(loc.Offset))
	dst = binary.AppendUvarint(dst, uint64(loc.Length))
	dst = binary.AppendUvarint(dst, loc.Index)
	if loc.ExpiresUnixNano != 0 {
		dst = binary.AppendUvarint(dst, uint64(loc.ExpiresUnixNano))
	}
	return dst
}

// decodeLocation parses appendLocation's output. Errors wrap
// systems.ErrCorrupt.
func decodeLocation(b []byte) (systems.Location, error) {
	var f [5]uint64
	rest := b
	fields := 0
	for ; fields < len(f) && (fields < 4 || len(rest) > 0); fields++ {
		v, n := binary.Uvarint(rest)
		if n <= 0 {
			return systems.Location{}, fmt.Errorf("%w: index value %x is not a location (field %d)", systems.ErrCorrupt, b, fields)
		}
		f[fields], rest = v, rest[n:]
	}
	if len(rest) != 0 || f[2] > math.MaxUint32 || f[1] > math.MaxInt64 || f[4] > math.MaxInt64 || (fields == 5 && f[4] == 0) {
		return systems.Location{}, fmt.Errorf("%w: index value %x is not a location", systems.ErrCorrupt, b)
	}
	return systems.Location{Segment: f[0], Offset: int64(f[1]), Length: uint32(f[2]), Index: f[3], ExpiresUnixNano: int64(f[4])}, nil
}

// appendApplied encodes an applied index (8 bytes, big endian).
func appendApplied(dst []byte, applied uint64) []byte {
	return binary.BigEndian.AppendUint64(dst, applied)
}

func decodeApplied(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: applied index value %x is not 8 bytes", systems.ErrCorrupt, b)
	}
	return binary.BigEndian.Uint64(b), nil
}

// keyString renders a key for error messages: quoted, cut at 64 bytes.
func keyString(k []byte) string {
	const max = 64
	if len(k) > max {
		return fmt.Sprintf("%q... (%d bytes)", k[:max], len(k))
	}
	return fmt.Sprintf("%q", k)
}
