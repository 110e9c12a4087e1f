package nezha

import "github.com/bits-and-blooms/bloom/v3"

// GC's live-byte accounting (liveAccount.set) needs the location a put
// replaces, one index lookup per put: on a LevelDB index, a second walk of
// the memtable's skiplist besides the write's own, about a third of a
// follower's CPU under small-value PUTs (in a profile of the peer table's
// 100 B PUT load). A put of a new key replaces nothing, so a Bloom filter
// of the keys the index may hold lets the accounting skip the lookup for
// keys it has certainly never seen, as the unique-key loads of the paper's
// PUT benchmark and of YCSB's load phase are.
//
// The filter is built from the index scan at open (collector.rebuildLive
// already reads every key), and every applied put adds its key. Deletes do
// not remove keys (a Bloom filter cannot), so the filter only answers "may
// be present" more often than needed: a false positive costs the lookup
// that every put paid before, never a wrong count. A snapshot restore
// replaces the index without a scan; the filter is dropped then (every put
// looks up again) until the next open.

const (
	// keyFilterMinKeys is the smallest capacity of a key filter, in keys.
	keyFilterMinKeys = 1 << 20
	// keyFilterMaxKeys caps its capacity (about 150 MiB of bits at
	// keyFilterFalsePositive); beyond it the false-positive rate grows
	// and more puts look up, which costs time, not correctness.
	keyFilterMaxKeys = 1 << 27
	// keyFilterFalsePositive is the target false-positive rate at
	// capacity.
	keyFilterFalsePositive = 0.01
)

// keyFilter is a Bloom filter of every key the index may hold. Not safe for
// concurrent use: the collector guards it with Store.applyMu.
type keyFilter struct {
	f *bloom.BloomFilter
}

// newKeyFilter returns an empty filter sized for keys present now, twice
// over (at least keyFilterMinKeys, at most keyFilterMaxKeys).
func newKeyFilter(keys int) *keyFilter {
	n := min(max(2*keys, keyFilterMinKeys), keyFilterMaxKeys)
	return &keyFilter{f: bloom.NewWithEstimates(uint(n), keyFilterFalsePositive)}
}

// add records key. A nil filter ignores it.
func (k *keyFilter) add(key []byte) {
	if k != nil {
		k.f.Add(key)
	}
}

// mayHold reports whether the index may hold key: false means certainly
// not. A nil filter (none built) answers true.
func (k *keyFilter) mayHold(key []byte) bool {
	return k == nil || k.f.Test(key)
}
