package node

import (
	"bytes"
	"context"
	"flag"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/systems"
)

// ttlSM is memSM that supports TTLs and records each key's expiry time.
type ttlSM struct {
	*memSM
	mu  sync.Mutex
	exp map[string]int64
}

func (s *ttlSM) SupportsTTL() bool { return true }
func (s *ttlSM) Apply(ents []systems.AppliedEntry) error {
	s.mu.Lock()
	for _, e := range ents {
		if e.Command.Op == systems.OpPut {
			s.exp[string(e.Command.Key)] = e.Command.ExpiresUnixNano
		}
	}
	s.mu.Unlock()
	return s.memSM.Apply(ents)
}

func (s *ttlSM) expiry(key string) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.exp[key]
	return e, ok
}

type ttlConfig struct{}

func (ttlConfig) RegisterFlags(*flag.FlagSet) {}
func (ttlConfig) Validate() error             { return nil }
func (ttlConfig) Open(systems.Env) (systems.StateMachine, error) {
	return &ttlSM{memSM: &memSM{m: map[string][]byte{}}, exp: map[string]int64{}}, nil
}

// TestPutWithTTL: the leader turns a put's TTL into one expiry time in
// the replicated command, which every replica applies (small values and
// values the codec sends uncopied alike); a system without TTL support
// refuses the put, and writes nothing.
func TestPutWithTTL(t *testing.T) {
	tc := startClusterWith(t, 3, func(c *Config) { c.SystemConfig = ttlConfig{} })
	tc.waitLeader(20 * time.Second)
	c := tc.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ttl = 90 * time.Second
	for _, v := range [][]byte{[]byte("small"), bytes.Repeat([]byte{'L'}, 64<<10)} {
		key := string(v[:5])
		before := time.Now()
		if _, err := c.PutWithTTL(ctx, []byte(key), v, ttl); err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		var exps []int64
		waitFor(t, 20*time.Second, "every replica applied the put", func() bool {
			exps = exps[:0]
			for _, n := range tc.nodes {
				e, ok := n.sm.(*ttlSM).expiry(key)
				if !ok {
					return false
				}
				exps = append(exps, e)
			}
			return true
		})
		for i, e := range exps {
			if e != exps[0] {
				t.Fatalf("%s: replica %d has expiry %d, replica 1 %d", key, i+1, e, exps[0])
			}
		}
		if e := exps[0]; e < before.Add(ttl).UnixNano() || e > after.Add(ttl).UnixNano() {
			t.Fatalf("%s: expiry %v, want between %v and %v", key, time.Unix(0, e), before.Add(ttl), after.Add(ttl))
		}
	}
	if _, err := c.PutWithTTL(ctx, []byte("x"), nil, 0); err == nil {
		t.Fatal("a TTL of 0 was accepted")
	}

	plain := startCluster(t, 1)
	plain.waitLeader(20 * time.Second)
	pc := plain.client(t)
	if _, err := pc.PutWithTTL(ctx, []byte("k"), []byte("v"), time.Minute); status.Code(err) != codes.Unimplemented {
		t.Fatalf("PutWithTTL on a system without TTLs: %v, want Unimplemented", err)
	}
	if _, found, err := pc.Get(ctx, []byte("k")); err != nil || found {
		t.Fatalf("the refused put wrote: found %v, %v", found, err)
	}
}
