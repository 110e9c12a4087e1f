package workloads

import (
	"context"
	"fmt"
	"math/rand"
)

// The key scheme of bench: prefix + the index in KeyDigits decimal digits,
// zero-padded, so that key order is index order. With the default prefix
// "k" keys are 10 bytes, as the paper's.
const (
	KeyDigits = 9
	// MaxKeys is the number of indices the scheme can name.
	MaxKeys = int64(1_000_000_000)
	// DefaultKeyPrefix is the default -keyprefix.
	DefaultKeyPrefix = "k"
)

// Key returns prefix + i in KeyDigits digits (0 <= i < MaxKeys).
func Key(prefix string, i int64) []byte {
	b := make([]byte, len(prefix)+KeyDigits)
	copy(b, prefix)
	for j := len(b) - 1; j >= len(prefix); j-- {
		b[j] = byte('0' + i%10)
		i /= 10
	}
	return b
}

// KeyEnd is the exclusive upper bound of every key of prefix: prefix
// followed by the byte after '9'.
func KeyEnd(prefix string) []byte { return append([]byte(prefix), '9'+1) }

// Permutation is a bijection of [0, n): i -> (a*i + b) mod n with a coprime
// to n. It spreads a sequence over the key space (the write order of bench
// put, the hot keys of the Zipf distribution) without a table.
type Permutation struct{ n, a, b uint64 }

// NewPermutation draws a permutation of [0, n) from rng (n >= 1).
func NewPermutation(n int64, rng *rand.Rand) Permutation {
	if n <= 1 {
		return Permutation{n: 1, a: 1}
	}
	u := uint64(n)
	// A multiplier near n/phi keeps consecutive indices far apart.
	a := uint64(float64(u)*0.6180339887) + uint64(rng.Int63n(int64(u/8)+1))
	if a == 0 {
		a = 1
	}
	a %= u
	for gcd(a, u) != 1 {
		a = (a + 1) % u
		if a == 0 {
			a = 1
		}
	}
	return Permutation{n: u, a: a, b: uint64(rng.Int63n(n))}
}

// Identity is the permutation i -> i of [0, n).
func Identity(n int64) Permutation { return Permutation{n: uint64(max(n, 1)), a: 1} }

// At returns the image of i (0 <= i < n). n < MaxKeys keeps a*i in range.
func (p Permutation) At(i int64) int64 {
	return int64((p.a*uint64(i) + p.b) % p.n)
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// ZipfKeys draws key indices in [0, n) with a Zipf distribution: rank r
// (0 the most popular) has probability proportional to (1+r)^-s, and ranks
// are mapped onto indices by a permutation shared by all clients, so that
// the hot keys are the same for every client but not adjacent. Not safe
// for concurrent use: one per client.
type ZipfKeys struct {
	z    *rand.Zipf
	perm Permutation
}

// NewZipfKeys returns a chooser over [0, n) drawing from rng. s must be > 1
// (math/rand's Zipf), n >= 1.
func NewZipfKeys(rng *rand.Rand, s float64, n int64, perm Permutation) (*ZipfKeys, error) {
	if s <= 1 || n < 1 {
		return nil, fmt.Errorf("zipf: exponent %v must be > 1 and keys %d >= 1", s, n)
	}
	z := rand.NewZipf(rng, s, 1, uint64(n-1))
	if z == nil {
		return nil, fmt.Errorf("zipf: bad parameters s=%v n=%d", s, n)
	}
	return &ZipfKeys{z: z, perm: perm}, nil
}

// Next returns the next key index.
func (z *ZipfKeys) Next() int64 { return z.perm.At(int64(z.z.Uint64())) }

// Getter is the part of the client CountKeys needs.
type Getter interface {
	Get(ctx context.Context, key []byte) ([]byte, bool, error)
}

// CountKeys finds how many keys bench put wrote under prefix, assuming it
// wrote the indices 0..N-1 (a complete put run): an exponential then a
// binary search for the first missing index, about 2*log2(N) GETs.
func CountKeys(ctx context.Context, c Getter, prefix string) (int64, error) {
	exists := func(i int64) (bool, error) {
		_, ok, err := c.Get(ctx, Key(prefix, i))
		return ok, err
	}
	ok, err := exists(0)
	if err != nil || !ok {
		return 0, err
	}
	lo, hi := int64(0), int64(1) // lo exists; hi is unknown
	for {
		if hi >= MaxKeys {
			hi = MaxKeys
			break
		}
		ok, err := exists(hi)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		lo, hi = hi, hi*2
	}
	// lo exists, hi does not (or is MaxKeys).
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := exists(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo + 1, nil
}
