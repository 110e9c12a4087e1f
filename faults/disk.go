package faults

import (
	"encoding/binary"
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

// recordHeaderBytes is the size of a Raft log record header (crc32c 4,
// payload length 4, kind 1, term 8, index 8: systems/raftlog), and
// lengthOffset where its payload length sits.
const (
	recordHeaderBytes = 25
	lengthOffset      = 4
	// maxCopiedRecord bounds the record torn-tail copies.
	maxCopiedRecord = 1 << 20
)

// MaxLoseBytes bounds how far from the end lose-tail reaches: below one
// record header, so the damage stays inside the last record, which
// recovery truncates as a torn write (damage reaching an earlier record is
// corruption in the middle of the log, which a node rightly refuses to
// start on).
const MaxLoseBytes = recordHeaderBytes - 1

// logDirs are the Raft log directories of the systems under -data (the
// System.LogDir values). Other directories (a LevelDB index, say) hold
// *.log files too and must not be touched.
var logDirs = []string{"valuelog", "raftlog"}

var segmentName = regexp.MustCompile(`^[0-9]+\.log$`)

// LastSegment returns the newest Raft log segment under a node's data
// directory.
func LastSegment(dataDir string) (string, error) {
	var segs []string
	for _, d := range logDirs {
		m, _ := filepath.Glob(filepath.Join(dataDir, d, "*.log"))
		for _, p := range m {
			if segmentName.MatchString(filepath.Base(p)) {
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
	var hdr [recordHeaderBytes]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil {
		if err == io.EOF {
			return fmt.Sprintf("left %s alone (%d bytes, no whole record to copy)", path, size), nil
		}
		return "", err
	}
	n := int64(recordHeaderBytes) + int64(binary.LittleEndian.Uint32(hdr[lengthOffset:]))
	if n > size || n > maxCopiedRecord {
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
		rec = rec[:k]
		what = fmt.Sprintf("appended the first %d of %d bytes of a record to %s (%d -> %d bytes)", k, n, path, size, size+k)
	case TearCorrupt:
		i := lengthOffset + int64(pick%uint64(n-lengthOffset))
		rec[i] ^= 0xff
		what = fmt.Sprintf("appended a %d-byte record with byte %d flipped to %s (%d -> %d bytes)", n, i, path, size, size+n)
	default:
		return "", fmt.Errorf("unknown tear mode %q (want %s or %s)", mode, TearCut, TearCorrupt)
	}
	if _, err := f.WriteAt(rec, size); err != nil {
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
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	size := st.Size()
	if size <= MaxLoseBytes {
		return fmt.Sprintf("left %s alone (%d bytes, shorter than a record)", path, size), nil
	}
	switch mode {
	case TearCut:
		if err := os.Truncate(path, size-int64(n)); err != nil {
			return "", err
		}
		return fmt.Sprintf("cut the last %d bytes of %s (%d -> %d bytes)", n, path, size, size-int64(n)), nil
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
		return fmt.Sprintf("flipped the byte %d bytes from the end of %s (offset %d of %d)", n, path, off, size), f.Close()
	}
	return "", fmt.Errorf("unknown tear mode %q (want %s or %s)", mode, TearCut, TearCorrupt)
}
