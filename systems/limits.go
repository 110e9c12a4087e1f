package systems

import (
	"fmt"
)

const (
	// MaxKeyBytes is the largest key the client API accepts (64 KiB).
	MaxKeyBytes = 64 << 10
	// DefaultMaxValueBytes is the default of node.Config.MaxValueBytes (64 MiB).
	DefaultMaxValueBytes = 64 << 20
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
