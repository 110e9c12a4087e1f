package systems

import (
	"fmt"
	"math"
	"time"
)

const (
	// MaxKeyBytes is the largest key the client API accepts (64 KiB).
	MaxKeyBytes = 64 << 10
	// DefaultMaxValueBytes is the default of node.Config.MaxValueBytes (64 MiB).
	DefaultMaxValueBytes = 64 << 20
	// MaxTTL is the longest time to live a put accepts (100 years), so
	// that its expiry time (Command.ExpiresUnixNano) fits an int64 of Unix
	// nanoseconds.
	MaxTTL = 100 * 365 * 24 * time.Hour
)

// CheckKey reports why key is not acceptable, or nil.
func CheckKey(key []byte) error {
	switch {
	case len(key) == 0:
		return fmt.Errorf("empty key")
	case len(key) > MaxKeyBytes:
		return fmt.Errorf("key of %d bytes is over the maximum of %d bytes", len(key), MaxKeyBytes)
	}
	return nil
}

// CheckValue reports why value is not acceptable under maxValueBytes, or nil.
// An empty value is allowed.
func CheckValue(value []byte, maxValueBytes int) error {
	if len(value) > maxValueBytes {
		return fmt.Errorf("value of %d bytes is over the maximum of %d bytes", len(value), maxValueBytes)
	}
	return nil
}

// CheckTTL reports why ttl is not an acceptable time to live, or nil: it
// must be positive and at most MaxTTL.
func CheckTTL(ttl time.Duration) error {
	switch {
	case ttl <= 0:
		return fmt.Errorf("TTL %v must be positive", ttl)
	case ttl > MaxTTL:
		return fmt.Errorf("TTL %v is over the maximum of %v (100 years)", ttl, MaxTTL)
	}
	return nil
}

// ExpiryUnixNano returns the expiry time of a put with ttl written at now
// (Command.ExpiresUnixNano: Unix nanoseconds), or why it has none: ttl
// fails CheckTTL, or now+ttl is not after 1970 or not before 2262 (an
// int64 of Unix nanoseconds holds no other time; a command carrying such
// an expiry would fail DecodeCommand).
func ExpiryUnixNano(now time.Time, ttl time.Duration) (int64, error) {
	if err := CheckTTL(ttl); err != nil {
		return 0, err
	}
	exp := now.Add(ttl)
	if !exp.After(time.Unix(0, 0)) || !exp.Before(time.Unix(0, math.MaxInt64)) {
		return 0, fmt.Errorf("expiry time %v (clock %v + TTL %v) is outside 1970..2262", exp, now, ttl)
	}
	return exp.UnixNano(), nil
}
