package raftlog

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/nezha-harness/nezha/internal/vfs"
)

var (
	crashSeed  = flag.Uint64("raftlog.crashseed", 0, "TestCrashRecovery: run only this seed (0: seeds 1..-raftlog.crashseeds)")
	crashSeeds = flag.Int("raftlog.crashseeds", 300, "TestCrashRecovery: how many seeds")
)

// crashModel is what a log must hold after a crash: the entries of every
// Append that returned (each synced, as raft's appends of entries are),
// the compaction point, and the HardState of the last synced append; and
// what it may hold: commit indexes set without a sync, and a prefix of
// the entries of an append whose fdatasync failed.
type crashModel struct {
	first   uint64            // compaction point + 1
	ents    map[uint64][]byte // index -> the durable record's bytes (term in front)
	last    uint64
	hs      raftpb.HardState // synced
	commit  uint64           // the highest commit index set, synced or not
	pending []raftpb.Entry   // the entries of the append whose fdatasync failed
}

func recordOf(e raftpb.Entry) []byte { return append(fmt.Appendf(nil, "%d:", e.Term), e.Data...) }

// TestCrashRecovery runs seeded programs against a log on a MemFS:
// appends, commit-only HardState changes (not synced, as raft asks for
// none), overwritten suffixes, rolls into small segments (and their
// sidecar indexes, never synced), compactions, and appends whose
// fdatasync fails (a crash inside an append: written, not synced). After
// each crash, which keeps only what was synced and sometimes a torn tail
// of the rest, the log must open and hold what crashModel says. A failure
// names its seed: go test ./raftkv/raftlog -run TestCrashRecovery
// -raftlog.crashseed N.
func TestCrashRecovery(t *testing.T) {
	seeds := []uint64{*crashSeed}
	if *crashSeed == 0 {
		seeds = nil
		for s := range uint64(*crashSeeds) {
			seeds = append(seeds, s+1)
		}
	}
	for _, seed := range seeds {
		if err := crashProgram(seed); err != nil {
			t.Fatalf("seed %d: %v\nreplay: go test ./raftkv/raftlog -run TestCrashRecovery -raftlog.crashseed %d", seed, err, seed)
		}
	}
}

func crashProgram(seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	mem := vfs.NewMem()
	o := DefaultOptions("/node/log")
	o.SegmentSizeBytes = 4096
	o.EntryCacheBytes = int64(rng.IntN(2)) * 8192
	o.Bootstrap = raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	m := &crashModel{first: 1, ents: map[uint64][]byte{}}
	for crash := 0; crash < 4; crash++ {
		fs := vfs.NewOn(mem)
		o.FS = fs
		l, err := Open(o)
		if err != nil {
			return fmt.Errorf("open after crash %d: %w", crash, err)
		}
		if err := m.check(l); err != nil {
			l.Close()
			return fmt.Errorf("after crash %d: %w", crash, err)
		}
		m.adopt(l)
		failed := false
		for op := 0; op < 30 && !failed; op++ {
			if failed, err = m.step(rng, l, fs); err != nil {
				l.Close()
				return fmt.Errorf("crash %d, op %d: %w", crash, op, err)
			}
		}
		l.WaitIndexed()
		mem = mem.CrashClone(vfs.CrashOptions{TornTailPercent: rng.IntN(101), RNG: rng})
		l.Close() // writes nothing the clone sees
	}
	return nil
}

// step runs one random operation; failed reports an append whose
// fdatasync failed (the FS is failed: crash next).
func (m *crashModel) step(rng *rand.Rand, l *Log, fs *vfs.FS) (failed bool, err error) {
	term := m.hs.Term
	if m.last >= m.first {
		term = max(term, recordTerm(m.ents[m.last]))
	}
	switch r := rng.IntN(100); {
	case r < 50 || m.last < m.first: // append, sometimes over an uncommitted suffix
		start := m.last + 1
		if m.last > m.commit && rng.IntN(4) == 0 {
			start = m.commit + 1 + uint64(rng.IntN(int(m.last-m.commit)))
			term++
		}
		ents := make([]raftpb.Entry, 1+rng.IntN(5))
		for i := range ents {
			v := make([]byte, rng.IntN(3000))
			for j := range v {
				v[j] = byte(rng.Uint32())
			}
			ents[i] = putEntry(start+uint64(i), term, fmt.Sprintf("k%d", rng.IntN(100)), v)
		}
		hs := raftpb.HardState{Term: term, Vote: m.hs.Vote, Commit: m.commit}
		if rng.IntN(10) == 0 {
			if err := fs.SetFaults(vfs.Fault{Kind: vfs.FaultFsyncError}); err != nil {
				return false, err
			}
			if err := l.Append(hs, ents, true); err == nil {
				return false, fmt.Errorf("append with a failing fdatasync succeeded")
			}
			m.pending = ents
			if debugCrash {
				fmt.Printf("failed append %d..%d term %d\n", start, start+uint64(len(ents))-1, term)
			}
			return true, nil
		}
		if err := l.Append(hs, ents, true); err != nil {
			return false, fmt.Errorf("append [%d, %d]: %w", start, start+uint64(len(ents))-1, err)
		}
		if debugCrash {
			fmt.Printf("append %d..%d term %d\n", start, start+uint64(len(ents))-1, term)
		}
		for i := start; i <= m.last; i++ {
			delete(m.ents, i)
		}
		for _, e := range ents {
			m.ents[e.Index] = recordOf(e)
		}
		m.last = start + uint64(len(ents)) - 1
		m.hs = hs
	case r < 70: // commit more, without a sync
		if m.last > m.commit {
			m.commit += 1 + uint64(rng.IntN(int(m.last-m.commit)))
			if err := l.Append(raftpb.HardState{Term: m.hs.Term, Vote: m.hs.Vote, Commit: m.commit}, nil, false); err != nil {
				return false, fmt.Errorf("commit %d: %w", m.commit, err)
			}
		}
	case r < 80:
		if err := l.Roll(); err != nil {
			return false, fmt.Errorf("roll: %w", err)
		}
	default: // compact to a committed index
		if m.commit >= m.first {
			idx := m.first + uint64(rng.IntN(int(m.commit-m.first+1)))
			if err := l.Compact(idx, raftpb.ConfState{Voters: []uint64{1, 2, 3}}); err != nil {
				return false, fmt.Errorf("compact to %d: %w", idx, err)
			}
			for i := m.first; i <= idx; i++ {
				delete(m.ents, i)
			}
			m.first = idx + 1
		}
	}
	return false, nil
}

func recordTerm(rec []byte) uint64 {
	var t uint64
	fmt.Sscanf(string(rec[:bytes.IndexByte(rec, ':')]), "%d", &t)
	return t
}

// check compares a reopened log with the model.
func (m *crashModel) check(l *Log) error {
	first, _ := l.FirstIndex()
	last, _ := l.LastIndex()
	if first != m.first {
		return fmt.Errorf("first index %d, want %d (compactions are synced)", first, m.first)
	}
	// The entries before the failed append's first are durable; from it,
	// the log holds either the old entries or a prefix of the new ones.
	keep := m.last
	if len(m.pending) > 0 {
		keep = min(keep, m.pending[0].Index-1)
	}
	if last < keep {
		return fmt.Errorf("last index %d, want at least %d: synced entries lost", last, keep)
	}
	// torn: the log holds the failed append's first entry (then only a
	// prefix of it follows), not the old one at its index.
	torn := false
	if len(m.pending) > 0 && last >= m.pending[0].Index {
		ents, err := l.Entries(m.pending[0].Index, m.pending[0].Index+1, 1<<30)
		torn = err == nil && bytes.Equal(recordOf(ents[0]), recordOf(m.pending[0]))
	}
	for i := first; i <= last; i++ {
		ents, err := l.Entries(i, i+1, 1<<30)
		if err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
		got := recordOf(ents[0])
		want, ok := m.ents[i]
		if torn && i >= m.pending[0].Index {
			k := i - m.pending[0].Index
			if k >= uint64(len(m.pending)) {
				return fmt.Errorf("entry %d past the failed append's last %d", i, m.pending[len(m.pending)-1].Index)
			}
			want, ok = recordOf(m.pending[k]), true
		}
		if !ok {
			return fmt.Errorf("entry %d was never written (last synced %d)", i, m.last)
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("entry %d differs from what was written", i)
		}
	}
	if !torn && last > m.last {
		return fmt.Errorf("last index %d above the last written %d", last, m.last)
	}
	hs := l.HardState()
	if hs.Term < m.hs.Term || hs.Commit < min(m.hs.Commit, last) || hs.Commit > max(m.commit, first-1) {
		return fmt.Errorf("hard state %v, want term >= %d and commit in [%d, %d]", hs, m.hs.Term, min(m.hs.Commit, last), m.commit)
	}
	return nil
}

// adopt makes the reopened log the model's durable state (a crash's
// clone holds only durable bytes).
func (m *crashModel) adopt(l *Log) {
	m.first, _ = l.FirstIndex()
	m.last, _ = l.LastIndex()
	m.ents = map[uint64][]byte{}
	for i := m.first; i <= m.last; i++ {
		ents, _ := l.Entries(i, i+1, 1<<30)
		m.ents[i] = recordOf(ents[0])
	}
	m.hs = l.HardState()
	m.commit = m.hs.Commit
	m.pending = nil
}

const debugCrash = false
