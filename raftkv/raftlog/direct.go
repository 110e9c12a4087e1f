package raftlog

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// Direct I/O (Options.DirectIO): the active segment is written through a
// second descriptor opened with O_DIRECT, from one block-aligned copy of
// each write, so that the log's bytes never pass through the page cache.
// A direct write covers whole blocks: it starts at the block holding the
// segment's end and rewrites that block's bytes (kept in segment.tail,
// identical to what the file holds, so a torn write cannot change them),
// and it pads the last block with zeros. The file is therefore longer than
// the segment's data by less than a block: Roll truncates a segment to its
// size when it seals it, and recovery takes a zero tail shorter than a
// block at the end of the last segment for that padding, not for a torn
// write. Reads keep the buffered descriptor.

// directBlockBytes is the alignment of direct writes: offsets, lengths
// and buffer addresses (the page size, a multiple of every logical block
// size Linux supports).
const directBlockBytes = 4096

// maxDirectRecs bounds the sidecar records a direct-written segment keeps
// in memory (about 80 bytes each) so that indexSealed need not read the
// segment back from the disk; a segment of more records is scanned as a
// buffered one is.
const maxDirectRecs = 1 << 16

// openDirect gives seg an O_DIRECT write descriptor and its tail block,
// read back from the file (seg's size is known). A filesystem that
// refuses O_DIRECT (tmpfs) turns direct I/O off for the log: writes stay
// buffered.
func (l *Log) openDirect(seg *segment) error {
	if !l.direct {
		return nil
	}
	f, err := l.opts.FS.OpenFile(seg.path, os.O_WRONLY|syscall.O_DIRECT, 0)
	if err != nil {
		if errors.Is(err, syscall.EINVAL) {
			l.logger.Info("raftlog: the filesystem refuses O_DIRECT; writing through the page cache", "dir", l.opts.Dir)
			l.direct = false
			return nil
		}
		return fmt.Errorf("raftlog: open %s for direct writes: %w", seg.path, err)
	}
	size := seg.size.Load()
	tail := make([]byte, size%directBlockBytes, directBlockBytes)
	if len(tail) > 0 {
		if _, err := seg.f.ReadAtUnfaulted(tail, size-int64(len(tail))); err != nil {
			f.Close()
			return fmt.Errorf("raftlog: read the last block of %s: %w", seg.path, err)
		}
	}
	seg.dw, seg.tail = f, tail
	return nil
}

// closeDirect closes seg's direct descriptor, if any, and truncates the
// file to seg's size (the padding of its last block).
func (l *Log) closeDirect(seg *segment) error {
	if seg.dw == nil {
		return nil
	}
	err := seg.dw.Close()
	seg.dw, seg.tail = nil, nil
	if terr := seg.f.Truncate(seg.size.Load()); terr != nil {
		err = errors.Join(err, fmt.Errorf("raftlog: truncate the padding of %s: %w", seg.path, terr))
	}
	return err
}

// writeDirect writes the concatenation of bufs (size bytes) at seg's end
// through its direct descriptor (see the top of this file) and notes the
// records it holds for the sidecar index.
func (l *Log) writeDirect(seg *segment, bufs [][]byte, size int64) error {
	off := seg.size.Load()
	start := off - int64(len(seg.tail))
	total := len(seg.tail) + int(size)
	padded := (total + directBlockBytes - 1) &^ (directBlockBytes - 1)
	buf := l.alignedBuf(padded)
	n := copy(buf, seg.tail)
	for _, b := range bufs {
		n += copy(buf[n:], b)
	}
	clear(buf[n:padded])
	// The one-buffer vector is the log's: a literal would escape through
	// the file's interface and cost an allocation per append.
	l.dvec[0] = buf[:padded]
	err := seg.dw.Pwritev(l.dvec[:], start)
	l.dvec[0] = nil
	if err != nil {
		return err
	}
	l.noteRecords(seg, buf[len(seg.tail):total])
	keep := total &^ (directBlockBytes - 1)
	seg.tail = append(seg.tail[:0], buf[keep:total]...)
	return nil
}

// alignedBuf returns a buffer of n bytes whose address is a multiple of
// directBlockBytes, reusing the log's up to 64 MiB.
func (l *Log) alignedBuf(n int) []byte {
	if cap(l.dbuf) >= n {
		return l.dbuf[:n]
	}
	raw := make([]byte, n+directBlockBytes)
	skip := (directBlockBytes - int(uintptr(unsafe.Pointer(&raw[0]))%directBlockBytes)) % directBlockBytes
	b := raw[skip : skip+n : skip+n]
	if n <= 64<<20 {
		l.dbuf = b
	}
	return b
}

// noteRecords appends the sidecar records of the whole records in b to
// seg.recs, or drops them once there are more than maxDirectRecs.
func (l *Log) noteRecords(seg *segment, b []byte) {
	if seg.recsOver {
		return
	}
	for len(b) >= headerSize {
		var r segIndexRecord
		copy(r.raw[:], b[:headerSize])
		r.h = parseHeader(r.raw[:])
		end := headerSize + int(r.h.length)
		if !r.h.kind.isEntry() {
			r.payload = append([]byte(nil), b[headerSize:end]...)
		}
		seg.recs = append(seg.recs, r)
		b = b[end:]
	}
	if len(seg.recs) > maxDirectRecs {
		seg.recs, seg.recsOver = nil, true
	}
}
