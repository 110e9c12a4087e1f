package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nezha-harness/nezha/internal/vfs"
)

// Segment index files: recovery without reading every value.
//
// Recovery used to read and CRC-check every record of every segment. For
// nezha the log is the value store, so a restart read all the values
// since the last compaction (7 GB and 22 s per node in the paper
// profile's crash campaign, growing with the GC threshold). A sealed
// segment never changes again (appends go to the active segment; only the
// last segment's torn tail is ever truncated; removal deletes the whole
// file), so once it is sealed its record headers are written to a sidecar,
// NNNNNN.idx, and recovery replays the sidecar instead of the segment.
//
// Layout of NNNNNN.idx:
//
//	magic "NZLIDX1\n" | segment size in bytes (8, little endian)
//	| records (uvarint) | per record, in file order: its 25-byte header,
//	  then its payload unless it is an entry (hard state, compaction and
//	  snapshot markers: small) | crc32c of everything before (4, little
//	  endian)
//
// A sidecar that is missing, torn (CRC), or written for another size of
// its segment is ignored: recovery scans that segment as before and
// writes the sidecar again. Entry payloads are not CRC-checked at
// recovery when a sidecar is used; every read of an entry checks its
// record's CRC (Entries, ReadCommands), so corruption is still reported,
// by the read that meets it. The sidecar needs no fsync: its CRC and
// size make a lost or partial one harmless, and the segment it describes
// was fsynced before it was sealed.
const segIndexMagic = "NZLIDX1\n"

func segIndexName(id uint64) string { return fmt.Sprintf("%06d.idx", id) }

// segIndexRecord is one record of a sidecar.
type segIndexRecord struct {
	h       header
	raw     [headerSize]byte
	payload []byte // non-entry records only
}

// encodeSegIndex renders recs for a segment of size bytes.
func encodeSegIndex(size int64, recs []segIndexRecord) []byte {
	b := make([]byte, 0, len(segIndexMagic)+8+binary.MaxVarintLen64+len(recs)*headerSize+4)
	b = append(b, segIndexMagic...)
	b = binary.LittleEndian.AppendUint64(b, uint64(size))
	b = binary.AppendUvarint(b, uint64(len(recs)))
	for i := range recs {
		b = append(b, recs[i].raw[:]...)
		if !recs[i].h.kind.isEntry() {
			b = append(b, recs[i].payload...)
		}
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

var errSegIndex = errors.New("raftlog: unusable segment index")

// decodeSegIndex parses a sidecar written for a segment of size bytes.
func decodeSegIndex(b []byte, size int64) ([]segIndexRecord, error) {
	if len(b) < len(segIndexMagic)+8+1+4 || string(b[:len(segIndexMagic)]) != segIndexMagic {
		return nil, fmt.Errorf("%w: bad magic or short", errSegIndex)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", errSegIndex)
	}
	p := body[len(segIndexMagic):]
	if got := int64(binary.LittleEndian.Uint64(p)); got != size {
		return nil, fmt.Errorf("%w: written for %d bytes, segment has %d", errSegIndex, got, size)
	}
	p = p[8:]
	n, k := binary.Uvarint(p)
	if k <= 0 || n > uint64(len(p))/headerSize {
		return nil, fmt.Errorf("%w: bad record count", errSegIndex)
	}
	p = p[k:]
	recs := make([]segIndexRecord, 0, n)
	off := int64(0)
	for i := uint64(0); i < n; i++ {
		if len(p) < headerSize {
			return nil, fmt.Errorf("%w: truncated at record %d", errSegIndex, i)
		}
		var r segIndexRecord
		copy(r.raw[:], p[:headerSize])
		r.h = parseHeader(r.raw[:])
		p = p[headerSize:]
		if !r.h.kind.isEntry() {
			if uint64(len(p)) < uint64(r.h.length) {
				return nil, fmt.Errorf("%w: truncated payload at record %d", errSegIndex, i)
			}
			r.payload, p = p[:r.h.length], p[r.h.length:]
		}
		off += headerSize + int64(r.h.length)
		recs = append(recs, r)
	}
	if len(p) != 0 || off != size {
		return nil, fmt.Errorf("%w: records cover %d of %d bytes", errSegIndex, off, size)
	}
	return recs, nil
}

// writeSegIndex writes the sidecar of segment id in dir (temporary file,
// then rename; no fsync, see above).
func writeSegIndex(fsys vfs.FileSystem, dir string, id uint64, b []byte) error {
	path := filepath.Join(dir, segIndexName(id))
	tmp := path + ".tmp"
	if err := vfs.WriteFile(fsys, tmp, b, 0o644); err != nil {
		fsys.Remove(tmp)
		return err
	}
	return fsys.Rename(tmp, path)
}

// readSegIndex returns the sidecar records of segment id, if a usable
// sidecar exists for its size.
func readSegIndex(fsys vfs.FileSystem, dir string, id uint64, size int64) ([]segIndexRecord, error) {
	b, err := vfs.ReadFile(fsys, filepath.Join(dir, segIndexName(id)))
	if err != nil {
		return nil, err
	}
	return decodeSegIndex(b, size)
}

// removeOrphanSegIndexes deletes sidecars (and their temporary files)
// whose segment is gone, and the temporary files of interrupted writes.
func removeOrphanSegIndexes(fsys vfs.FileSystem, dir string, ids []uint64) {
	have := make(map[uint64]bool, len(ids))
	for _, id := range ids {
		have[id] = true
	}
	des, err := fsys.ReadDir(dir)
	if err != nil {
		return
	}
	for _, de := range des {
		name := de.Name()
		if strings.HasSuffix(name, ".idx.tmp") {
			fsys.Remove(filepath.Join(dir, name))
			continue
		}
		s, ok := strings.CutSuffix(name, ".idx")
		if !ok {
			continue
		}
		if id, err := strconv.ParseUint(s, 10, 64); err != nil || !have[id] {
			fsys.Remove(filepath.Join(dir, name))
		}
	}
}

// scanHeaders reads the record headers of a sealed segment of size bytes
// (and the payloads of its non-entry records, CRC-checked), skipping the
// entry payloads where they are larger than the read window. It fails on
// anything a sealed segment cannot hold (a torn or corrupt record).
func scanHeaders(seg *segment, size int64) ([]segIndexRecord, error) {
	const window = 64 << 10
	buf := make([]byte, window)
	var bufOff, bufLen int64 // the file range buf holds
	get := func(off, n int64) ([]byte, error) {
		if off >= bufOff && off+n <= bufOff+bufLen {
			return buf[off-bufOff : off-bufOff+n], nil
		}
		m := min(max(n, window), size-off)
		if m < n {
			return nil, fmt.Errorf("raftlog: %s: record at %d extends past the end (%d bytes)", seg.path, off, size)
		}
		if int64(cap(buf)) < m {
			buf = make([]byte, m)
		}
		buf = buf[:m]
		if err := seg.readAt(buf, off, false); err != nil {
			return nil, err
		}
		bufOff, bufLen = off, m
		return buf[:n], nil
	}
	var recs []segIndexRecord
	for off := int64(0); off < size; {
		hb, err := get(off, headerSize)
		if err != nil {
			return nil, err
		}
		var r segIndexRecord
		copy(r.raw[:], hb)
		r.h = parseHeader(r.raw[:])
		end := off + headerSize + int64(r.h.length)
		if isZero(r.raw[:]) || r.h.length > maxPayloadBytes || end > size {
			return nil, fmt.Errorf("raftlog: %s: no record at offset %d of a sealed segment", seg.path, off)
		}
		if !r.h.kind.isEntry() {
			rec, err := get(off, end-off)
			if err != nil {
				return nil, err
			}
			if _, err := checkRecord(rec); err != nil {
				return nil, fmt.Errorf("raftlog: %s at offset %d: %w", seg.path, off, err)
			}
			r.payload = append([]byte(nil), rec[headerSize:]...)
		}
		recs = append(recs, r)
		off = end
	}
	return recs, nil
}
