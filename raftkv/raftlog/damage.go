package raftlog

// Damage to a stopped node's Raft log files, the way a crash or a lying
// disk leaves them (the torn-tail and lose-tail nemeses, through the
// node's agent). It is here because it knows the record format.

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
)

// Tear modes.
const (
	// TearCut: the segment ends in part of a record (a write cut short).
	TearCut = "cut"
	// TearCorrupt: the segment ends in a whole record with one byte wrong
	// (a sector written halfway).
	TearCorrupt = "corrupt"
)

// lengthOffset is where a record header's payload length sits
// (record.go), and maxCopiedRecord bounds the record TearFile copies.
const (
	lengthOffset    = 4
	maxCopiedRecord = 1 << 20
)

// MaxLoseBytes bounds how far from the end lose-tail reaches: below one
// record header, so the damage stays inside the last record, which
// recovery truncates as a torn write (damage reaching an earlier record is
// corruption in the middle of the log, which a node rightly refuses to
// start on).
const MaxLoseBytes = headerSize - 1

// logDirs are the Raft log directories of the systems under -data (the
// System.LogDir values). Other directories (a LevelDB index, say) hold
// *.log files too and must not be touched.
var logDirs = []string{"valuelog", "raftlog"}

var segmentFileName = regexp.MustCompile(`^[0-9]+\.log$`)

// LastSegment returns the newest Raft log segment under a node's data
// directory.
func LastSegment(dataDir string) (string, error) {
	var segs []string
	for _, d := range logDirs {
		m, _ := filepath.Glob(filepath.Join(dataDir, d, "*.log"))
		for _, p := range m {
			if segmentFileName.MatchString(filepath.Base(p)) {
				segs = append(segs, p)
			}
		}
	}
	if len(segs) == 0 {
		return "", fmt.Errorf("no Raft log segment under %s (looked in %v)", dataDir, logDirs)
	}
	sort.Slice(segs, func(i, j int) bool {
		if filepath.Base(segs[i]) != filepath.Base(segs[j]) {
			return filepath.Base(segs[i]) < filepath.Base(segs[j])
		}
		return segs[i] < segs[j]
	})
	return segs[len(segs)-1], nil
}

// TearTail makes the newest Raft log segment of a stopped node end in a
// torn record, as a crash in the middle of writing a record leaves it:
// the record being written was not fsynced, so no peer was told it was
// stored, and recovery must drop it. The torn record is a copy of the
// segment's first record, cut short (TearCut, after 1 up to all but one
// of its bytes, chosen by pick) or whole with one byte flipped
// (TearCorrupt). It says what it did.
func TearTail(dataDir, mode string, pick uint64) (string, error) {
	seg, err := LastSegment(dataDir)
	if err != nil {
		return "", err
	}
	return TearFile(seg, mode, pick)
}

// TearFile is TearTail on a given segment file.
func TearFile(path, mode string, pick uint64) (string, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	size := st.Size()
	end, err := dataEnd(f, size)
	if err != nil {
		return "", err
	}
	var hdr [headerSize]byte
	if end < headerSize {
		return fmt.Sprintf("left %s alone (%d bytes of records, no whole record to copy)", path, end), nil
	}
	if _, err := f.ReadAt(hdr[:], 0); err != nil {
		return "", err
	}
	n := int64(headerSize) + int64(parseHeader(hdr[:]).length)
	if n > end || n > maxCopiedRecord {
		return fmt.Sprintf("left %s alone (first record of %d bytes cannot be copied)", path, n), nil
	}
	rec := make([]byte, n)
	if _, err := f.ReadAt(rec, 0); err != nil {
		return "", err
	}
	var what string
	switch mode {
	case TearCut:
		k := 1 + int64(pick%uint64(n-1))
		// Bytes cut off that are all zero are no cut over zero padding:
		// the record would read whole. Cut before its last nonzero byte.
		last := n - 1
		for last > 1 && rec[last] == 0 {
			last--
		}
		k = min(k, last)
		rec = rec[:k]
		what = fmt.Sprintf("wrote the first %d of %d bytes of a record after the last record of %s (at offset %d of %d bytes)", k, n, path, end, size)
	case TearCorrupt:
		i := lengthOffset + int64(pick%uint64(n-lengthOffset))
		rec[i] ^= 0xff
		what = fmt.Sprintf("wrote a %d-byte record with byte %d flipped after the last record of %s (at offset %d of %d bytes)", n, i, path, end, size)
	default:
		return "", fmt.Errorf("unknown tear mode %q (want %s or %s)", mode, TearCut, TearCorrupt)
	}
	// At the end of the records, not of the file: over the zero padding a
	// node killed while writing with direct I/O leaves, as its own next
	// write would have gone.
	if _, err := f.WriteAt(rec, end); err != nil {
		return "", err
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	return what, f.Close()
}

// LoseSyncedTail damages the end of the newest Raft log segment of a stopped
// node in place: it cuts its last n bytes (TearCut) or flips the byte n
// bytes from the end (TearCorrupt), n in 1..MaxLoseBytes. Unlike TearTail
// this loses a record that was fsynced and may have been acknowledged to
// the leader: a disk that lied about fsync. Raft does not tolerate it.
func LoseSyncedTail(dataDir, mode string, n int) (string, error) {
	seg, err := LastSegment(dataDir)
	if err != nil {
		return "", err
	}
	return LoseSyncedFile(seg, mode, n)
}

// LoseSyncedFile is LoseSyncedTail on a given file.
func LoseSyncedFile(path, mode string, n int) (string, error) {
	if n < 1 || n > MaxLoseBytes {
		return "", fmt.Errorf("damage of %d bytes is outside 1..%d", n, MaxLoseBytes)
	}
	// The last n bytes of the records, not of the file: the zero padding a
	// node killed while writing with direct I/O leaves holds no entry.
	size, err := SegmentDataBytes(path)
	if err != nil {
		return "", err
	}
	if size <= MaxLoseBytes {
		return fmt.Sprintf("left %s alone (%d bytes of records, shorter than a record)", path, size), nil
	}
	switch mode {
	case TearCut:
		if err := os.Truncate(path, size-int64(n)); err != nil {
			return "", err
		}
		return fmt.Sprintf("cut the last %d bytes of the records of %s (%d -> %d bytes)", n, path, size, size-int64(n)), nil
	case TearCorrupt:
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return "", err
		}
		defer f.Close()
		off := size - int64(n)
		var b [1]byte
		if _, err := f.ReadAt(b[:], off); err != nil {
			return "", err
		}
		b[0] ^= 0xff
		if _, err := f.WriteAt(b[:], off); err != nil {
			return "", err
		}
		if err := f.Sync(); err != nil {
			return "", err
		}
		return fmt.Sprintf("flipped the byte %d bytes from the end of the records of %s (offset %d of %d)", n, path, off, size), f.Close()
	}
	return "", fmt.Errorf("unknown tear mode %q (want %s or %s)", mode, TearCut, TearCorrupt)
}

// SegmentDataBytes returns where the records of a Raft log segment end, in
// bytes from its start: its size less the zero padding after the last
// record that a node killed while writing with direct I/O leaves (a block
// of 4096 bytes at most; direct.go), or less a torn record
// already there. It walks the record headers from the start; a header of
// zeros, a short one, or a record that runs past the end of the file ends
// the walk. It does not check CRCs.
func SegmentDataBytes(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return dataEnd(f, st.Size())
}

// dataEnd is SegmentDataBytes on an open segment of size bytes.
func dataEnd(f *os.File, size int64) (int64, error) {
	r := bufio.NewReaderSize(io.NewSectionReader(f, 0, size), 1<<16)
	var hdr [headerSize]byte
	off := int64(0)
	for {
		if size-off < headerSize {
			return off, nil
		}
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return 0, fmt.Errorf("read %s at %d: %w", f.Name(), off, err)
		}
		if isZero(hdr[:]) {
			return off, nil
		}
		payload := int64(parseHeader(hdr[:]).length)
		if off+headerSize+payload > size {
			return off, nil
		}
		if _, err := r.Discard(int(payload)); err != nil {
			return 0, fmt.Errorf("read %s at %d: %w", f.Name(), off, err)
		}
		off += headerSize + payload
	}
}
