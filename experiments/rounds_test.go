package experiments

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

// interleaved rotates the order every round, runs a system until want
// says it has enough, never reruns a system whose run failed, and stops
// at maxRounds.
func TestInterleaved(t *testing.T) {
	secs := map[string]float64{"a": 1, "b": 5, "c": 2}
	var order []string
	got := interleaved(context.Background(), []string{"a", "b", "c"}, 10, 1,
		func(round int, sys string, tl tally) bool { return round == 0 || tl.Seconds < 4 },
		func(round int, sys string) (string, float64, bool) {
			order = append(order, fmt.Sprint(round, sys))
			return sys, secs[sys], sys == "c" && round == 0
		})
	// Round 0: all three from offset 1 (b c a); c fails. Round 1: a (1 s
	// so far). Rounds 2 and 3: a, until it has 4 s.
	want := []string{"0b", "0c", "0a", "1a", "2a", "3a"}
	if !slices.Equal(order, want) {
		t.Fatalf("runs %v, want %v", order, want)
	}
	if len(got) != len(want) {
		t.Fatalf("%d results, want %d", len(got), len(want))
	}

	order = nil
	interleaved(context.Background(), []string{"a", "b"}, 3, 0,
		func(int, string, tally) bool { return true },
		func(round int, sys string) (string, float64, bool) {
			order = append(order, fmt.Sprint(round, sys))
			return sys, 0, false
		})
	if want := []string{"0a", "0b", "1b", "1a", "2a", "2b"}; !slices.Equal(order, want) {
		t.Fatalf("bounded runs %v, want %v", order, want)
	}

	ctx, cancel := context.WithCancel(context.Background())
	order = nil
	interleaved(ctx, []string{"a", "b"}, 5, 0,
		func(int, string, tally) bool { return true },
		func(round int, sys string) (string, float64, bool) {
			order = append(order, fmt.Sprint(round, sys))
			cancel()
			return sys, 0, false
		})
	if want := []string{"0a", "0b"}; !slices.Equal(order, want) {
		t.Fatalf("runs after cancel %v, want the round in progress only %v", order, want)
	}
}
