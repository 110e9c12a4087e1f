package raftlog

import (
	"bytes"
	"errors"
	"math/rand"
	"sync"
	"syscall"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/systems"
)

// With MmapReads, value reads of sealed segments come from their mappings
// and return the records' values, singly and coalesced; the active segment
// is read with pread; injected read errors and corrupt reads reach mapped
// reads (EIO, a CRC failure); and a segment removed while readers run
// fails them with ErrSegmentRemoved, never with a fault.
func TestMmapReads(t *testing.T) {
	const seed = 11
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	o := testOptions(t, t.TempDir())
	o.MmapReads = true
	o.FS = vfs.New()
	l := mustOpen(t, o)
	var all []raftpb.Entry
	for lo := uint64(1); lo <= 120; lo += 6 {
		all = append(all, appendRange(t, l, lo, lo+5, 2, 200+rng.Intn(400), rng)...)
	}
	locs := make([]systems.Location, len(all))
	for i, e := range all {
		loc, ok := l.Location(e.Index)
		if !ok {
			t.Fatalf("no location of entry %d", e.Index)
		}
		locs[i] = loc
		c, err := l.ReadCommand(loc)
		want, _ := systems.DecodeCommand(e.Data)
		if err != nil || !bytes.Equal(c.Value, want.Value) {
			t.Fatalf("ReadCommand(%d) = %d bytes, %v", e.Index, len(c.Value), err)
		}
	}
	cs, err := l.ReadCommands(locs)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		if want, _ := systems.DecodeCommand(all[i].Data); !bytes.Equal(c.Value, want.Value) {
			t.Fatalf("ReadCommands: entry %d differs", all[i].Index)
		}
	}
	mapped, sealed := 0, 0
	l.mu.RLock()
	segs := append([]*segment(nil), l.segs...)
	l.mu.RUnlock()
	for _, s := range segs {
		m := s.mapping.Get(s.f, 0) // returns the mapping made by a read, if any
		if s == l.active() {
			if m != nil {
				t.Fatalf("the active segment %d was mapped", s.id)
			}
			continue
		}
		sealed++
		if m != nil {
			mapped++
		}
	}
	if sealed < 2 || mapped != sealed {
		t.Fatalf("%d of %d sealed segments mapped, want all (and at least 2)", mapped, sealed)
	}

	first := locs[0] // in the first, sealed segment
	if err := o.FS.SetFaults(vfs.Fault{Kind: vfs.FaultReadError}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ReadCommand(first); !errors.Is(err, syscall.EIO) {
		t.Fatalf("mapped read under read-error: %v, want EIO", err)
	}
	if err := o.FS.SetFaults(vfs.Fault{Kind: vfs.FaultReadCorrupt}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ReadCommand(first); !errors.Is(err, systems.ErrCorrupt) {
		t.Fatalf("mapped corrupt read: %v, want ErrCorrupt", err)
	}
	if err := o.FS.SetFaults(); err != nil {
		t.Fatal(err)
	}

	// Readers of the first segment while it is removed.
	if err := l.Compact(all[len(all)-1].Index, raftpb.ConfState{Voters: []uint64{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				if _, err := l.ReadCommand(first); err != nil {
					if !errors.Is(err, systems.ErrSegmentRemoved) {
						errc <- err
					}
					return
				}
			}
		}()
	}
	if err := l.RemoveSegment(first.Segment); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("read during removal: %v", err)
	}
	if _, err := l.ReadCommand(first); !errors.Is(err, systems.ErrSegmentRemoved) {
		t.Fatalf("read after removal: %v, want ErrSegmentRemoved", err)
	}
}
