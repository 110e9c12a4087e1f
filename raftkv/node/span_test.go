package node

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nezha-harness/nezha/systems"
)

// spanSM is memSM with a systems.SpanReplicator that follows the span
// rules (systems/spans.go) over fixed spans: every node keeps the same
// spans to send, and records the spans it took, in order.
type spanSM struct {
	memSM
	send []fakeSpan // the spans this node sends when it leads

	leader  atomic.Bool
	mu      sync.Mutex
	stored  uint64
	took    []systems.SpanHeader
	replays int
}

type fakeSpan struct {
	h    systems.SpanHeader
	data []byte
}

func newSpanSM(ranges ...[2]uint64) *spanSM {
	s := &spanSM{memSM: memSM{m: map[string][]byte{}}}
	for _, r := range ranges {
		data := bytes.Repeat([]byte(fmt.Sprint(r[0])), 100_000+int(r[0])) // several chunks
		h := systems.SpanHeader{First: r[0], Last: r[1], SizeBytes: int64(len(data)),
			CRC32C: crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))}
		s.send = append(s.send, fakeSpan{h: h, data: data})
	}
	return s
}

func (s *spanSM) SetLeader(leader bool)    { s.leader.Store(leader) }
func (s *spanSM) SpanCut() <-chan struct{} { return make(chan struct{}) } // no span is ever cut

func (s *spanSM) OpenSpan(next uint64) (systems.SpanHeader, io.ReadCloser, error) {
	for _, sp := range s.send {
		if next == 0 && sp.h.Last == s.send[len(s.send)-1].h.Last || sp.h.First <= next && next <= sp.h.Last {
			return sp.h, io.NopCloser(bytes.NewReader(sp.data)), nil
		}
	}
	for _, sp := range s.send {
		if sp.h.First > next {
			h := sp.h
			h.NoEarlier = true
			return h, io.NopCloser(bytes.NewReader(sp.data)), nil
		}
	}
	return systems.SpanHeader{}, nil, systems.ErrNoSpan
}

func (s *spanSM) NextSpanIndex() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stored + 1
}

func (s *spanSM) fit(h systems.SpanHeader) systems.SpanVerdict {
	switch {
	case h.Last <= s.stored:
		return systems.SpanSkipped
	case h.First > s.stored+1:
		return systems.SpanGap
	case s.AppliedIndex() < h.Last:
		return systems.SpanBehind
	}
	return systems.SpanAccept
}

func (s *spanSM) OfferSpan(h systems.SpanHeader) (systems.SpanVerdict, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.fit(h)
	if v == systems.SpanGap && h.NoEarlier && s.AppliedIndex() >= h.Last {
		s.replays++
		s.stored = s.AppliedIndex()
		v = systems.SpanReplayed
	}
	return v, s.stored + 1, nil
}

func (s *spanSM) ReceiveSpan(h systems.SpanHeader, r io.Reader) (systems.SpanVerdict, uint64, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return 0, 0, err
	}
	if int64(len(data)) != h.SizeBytes || crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)) != h.CRC32C {
		return 0, 0, fmt.Errorf("%w: %v", systems.ErrSpanDamaged, h)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.fit(h); v != systems.SpanAccept {
		return v, s.stored + 1, nil
	}
	s.took = append(s.took, h)
	s.stored = h.Last
	return systems.SpanIngested, s.stored + 1, nil
}

// spanSMConfig opens a given spanSM.
type spanSMConfig struct{ sm *spanSM }

func (spanSMConfig) RegisterFlags(*flag.FlagSet)                      {}
func (spanSMConfig) Validate() error                                  { return nil }
func (c spanSMConfig) Open(systems.Env) (systems.StateMachine, error) { return c.sm, nil }

// startSpanCluster starts one node per state machine of sms.
func startSpanCluster(t *testing.T, sms ...*spanSM) *testCluster {
	return startClusterEach(t, len(sms), func(i int, c *Config) { c.SystemConfig = spanSMConfig{sms[i]} })
}

// putN writes n keys through the cluster.
func putN(t *testing.T, tc *testCluster, n int) {
	t.Helper()
	c := tc.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		if _, err := c.Put(ctx, []byte(fmt.Sprintf("k%03d", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
}

// The leader ships its spans to each follower in log order: it starts
// with its newest span, which a follower that stored nothing refuses as a
// gap (next index 1), goes back to the span covering 1, and sends each
// next span once the follower applied its last index; a follower takes
// each once, in order, with every byte.
func TestSpansShippedInOrder(t *testing.T) {
	ranges := [][2]uint64{{1, 10}, {11, 20}, {21, 30}}
	sms := []*spanSM{newSpanSM(ranges...), newSpanSM(ranges...), newSpanSM(ranges...)}
	tc := startSpanCluster(t, sms...)
	leader := tc.waitLeader(10 * time.Second)
	putN(t, tc, 40) // the followers apply past every span's last index
	want := []systems.SpanHeader{sms[0].send[0].h, sms[0].send[1].h, sms[0].send[2].h}
	for i, sm := range sms {
		if i == leader {
			continue
		}
		waitFor(t, 20*time.Second, fmt.Sprintf("node %d took every span", i+1), func() bool {
			sm.mu.Lock()
			defer sm.mu.Unlock()
			return len(sm.took) == len(want)
		})
		sm.mu.Lock()
		took := slices.Clone(sm.took)
		sm.mu.Unlock()
		if !slices.Equal(took, want) {
			t.Fatalf("node %d took %v, want %v", i+1, took, want)
		}
	}
	if !sms[leader].leader.Load() {
		t.Fatal("the leader's state machine was not told it leads")
	}
	m := tc.nodes[leader].metrics
	if got := testutil.ToFloat64(m.spanSends.WithLabelValues("ingested")); got != 6 {
		t.Fatalf("%v spans ingested, want 6", got)
	}
	if got := testutil.ToFloat64(m.spanSends.WithLabelValues("gap")); got < 2 {
		t.Fatalf("%v gaps, want at least 2 (the newest span first)", got)
	}
	var bytes int64
	for _, sp := range sms[leader].send {
		bytes += sp.h.SizeBytes
	}
	if got := testutil.ToFloat64(m.spanSentBytes); got != float64(2*bytes) {
		t.Fatalf("%v span bytes sent, want %d", got, 2*bytes)
	}
}

// A leader that keeps no span covering a follower's next index sends its
// oldest one with NoEarlier, and the follower replays what it holds.
func TestSpansNoEarlier(t *testing.T) {
	sms := []*spanSM{newSpanSM([2]uint64{21, 30}), newSpanSM([2]uint64{21, 30}), newSpanSM([2]uint64{21, 30})}
	tc := startSpanCluster(t, sms...)
	leader := tc.waitLeader(10 * time.Second)
	putN(t, tc, 40)
	for i, sm := range sms {
		if i == leader {
			continue
		}
		waitFor(t, 20*time.Second, fmt.Sprintf("node %d replayed", i+1), func() bool {
			sm.mu.Lock()
			defer sm.mu.Unlock()
			return sm.replays == 1 && len(sm.took) == 0 && sm.stored >= 30
		})
	}
}
