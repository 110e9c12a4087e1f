package systems

import (
	"errors"
	"fmt"
	"io"
)

// Span replication (LSM-Raft; baseline's lsm-raft system,
// docs/design/2026-12-04-lsm-raft.md). A span is a state machine's applied
// state over a run of Raft log indexes First..Last, shipped as one file:
// the net effect of every entry in the run (the last write of each key).
// A follower that ingests it needs none of the run's entries in its own
// storage. Spans replicate committed state only, so a span is correct for
// every replica whoever cut it; the rules below only keep a replica's
// storage contiguous in log order.
//
// A replica whose storage reflects the log up to index D (its next index is
// D+1) may take a span First..Last when First <= D+1 <= Last: the entries
// First..D it already has are overwritten with their own later effects.
// Last <= D: the span is already passed (skipped). First > D+1: the span
// is too far ahead (a gap) and refused with D+1, so that the sender goes
// back to the span that covers it.

// SpanHeader describes one span on the wire.
type SpanHeader struct {
	// First and Last are the Raft indexes the span covers (1 <= First <=
	// Last).
	First, Last uint64
	// SizeBytes and CRC32C (Castagnoli) are the file's; the receiver
	// takes the span only if the bytes it got match both.
	SizeBytes int64
	CRC32C    uint32
	// NoEarlier: the sender has no span that covers the receiver's next
	// index, and this is its oldest span above it. A receiver with a gap
	// then replays the entries it holds into its own storage instead.
	NoEarlier bool
}

// Check reports why h cannot describe a span, or nil.
func (h SpanHeader) Check() error {
	switch {
	case h.First == 0 || h.Last < h.First:
		return fmt.Errorf("span %d..%d: want 1 <= first <= last", h.First, h.Last)
	case h.SizeBytes <= 0:
		return fmt.Errorf("span %d..%d: size %d bytes, want > 0", h.First, h.Last, h.SizeBytes)
	}
	return nil
}

func (h SpanHeader) String() string {
	return fmt.Sprintf("span %d..%d (%d bytes)", h.First, h.Last, h.SizeBytes)
}

// SpanVerdict is a receiver's answer to a span.
type SpanVerdict int

const (
	// SpanAccept: send the data (the answer to an offer only).
	SpanAccept SpanVerdict = iota
	// SpanIngested: the span is in the receiver's storage.
	SpanIngested
	// SpanSkipped: the receiver's storage already reflects Last.
	SpanSkipped
	// SpanGap: First is above the receiver's next index; the sender goes
	// back to it (or, if it has no span covering it, sends its oldest one
	// with NoEarlier).
	SpanGap
	// SpanReplayed: a gap under NoEarlier: the receiver replayed the
	// entries it held into its storage and passed the span.
	SpanReplayed
	// SpanBehind: the receiver has not applied up to Last yet; the sender
	// tries again later.
	SpanBehind
)

var spanVerdictNames = [...]string{"accept", "ingested", "skipped", "gap", "replayed", "behind"}

func (v SpanVerdict) String() string {
	if v >= 0 && int(v) < len(spanVerdictNames) {
		return spanVerdictNames[v]
	}
	return fmt.Sprintf("verdict(%d)", int(v))
}

// SpanVerdicts lists every verdict a transfer can end with, for metrics.
func SpanVerdicts() []SpanVerdict {
	return []SpanVerdict{SpanIngested, SpanSkipped, SpanGap, SpanReplayed, SpanBehind}
}

// ErrNoSpan: the state machine has no span ending at or after the index
// asked for (the follower is up to date with every span cut so far).
var ErrNoSpan = errors.New("no span")

// ErrSpanDamaged marks a span whose bytes do not match its header (a
// broken or corrupted transfer); nothing of it was taken.
var ErrSpanDamaged = errors.New("span damaged in transfer")

// SpanReplicator is implemented by state machines that replicate applied
// state to followers as spans instead of having them apply log entries
// (lsm-raft). The node detects it: it tells the state machine whether it
// leads, runs one sender per peer while it leads (OpenSpan, in index
// order, going back on a gap), and serves the spans its peers send it
// (OfferSpan, then ReceiveSpan), after waiting until its own applied index
// reaches the span's Last. Every method is safe for concurrent use.
//
// The state machine's AppliedIndex is the index its own storage reflects
// (the last ingested span, or the last entry it wrote itself); entries
// above it that Apply was given may be held in memory. After a restart the
// node replays the log above AppliedIndex, as for any system.
type SpanReplicator interface {
	// SetLeader tells the state machine whether its node is the Raft
	// leader now (called when the role changes; cheap, never blocks).
	SetLeader(leader bool)
	// SpanCut returns a channel that is closed when the next span is cut
	// (take it before OpenSpan, wait on it after ErrNoSpan).
	SpanCut() <-chan struct{}
	// OpenSpan returns the kept span that covers next (First <= next <=
	// Last; next 0: the newest span), else the oldest kept span above next
	// with NoEarlier set, else ErrNoSpan. The caller closes the reader.
	OpenSpan(next uint64) (SpanHeader, io.ReadCloser, error)
	// NextSpanIndex is the receiver's next index: its AppliedIndex + 1.
	NextSpanIndex() uint64
	// OfferSpan decides, before the data is sent, what the receiver does
	// with h: SpanAccept, SpanSkipped, SpanGap or (NoEarlier and a gap)
	// SpanReplayed, and returns its next index. The caller has waited
	// until the node applied h.Last.
	OfferSpan(h SpanHeader) (SpanVerdict, uint64, error)
	// ReceiveSpan reads the span's bytes from r (until io.EOF) and ingests
	// them if they match h and the span still fits (SpanIngested; else
	// SpanSkipped or SpanGap), and returns the receiver's next index. A
	// damaged transfer returns an error wrapping ErrSpanDamaged and
	// changes nothing.
	ReceiveSpan(h SpanHeader, r io.Reader) (SpanVerdict, uint64, error)
}
