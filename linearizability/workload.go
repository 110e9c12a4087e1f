package linearizability

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"time"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/cluster"
)

// Keys returns the workload's key space: k00, k01, ... (fixed width, so
// that key order is numeric order).
func Keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("k%02d", i)
	}
	return out
}

// ScanGroups splits keys into consecutive groups of size (the last may be
// smaller). Scans stay inside one group, so that the checker's partitions
// stay small while every scan is checked as one atomic snapshot.
func ScanGroups(keys []string, size int) [][]string {
	var out [][]string
	for i := 0; i < len(keys); i += size {
		out = append(out, keys[i:min(i+size, len(keys))])
	}
	return out
}

// Operation mix of the workload, in percent.
const (
	pctGet    = 40
	pctPut    = 35
	pctDelete = 10
	// the rest: scans
)

// workload drives the logical clients of a run.
type workload struct {
	o      Options
	rec    *Recorder
	keys   []string
	groups [][]string
	until  time.Time
}

// value returns worker w's seq-th value: unique in the run, padded to the
// configured size.
func (wl *workload) value(w, seq int) []byte {
	id := fmt.Sprintf("w%d-%d", w, seq)
	if wl.o.ValueBytes <= len(id) {
		return []byte(id)
	}
	return []byte(id + "-" + strings.Repeat("x", wl.o.ValueBytes-len(id)-1))
}

// run starts one goroutine per logical client, each pinned to one node
// (client i to node i mod N), and waits until they stop at wl.until or
// when ctx ends. Pinning makes a stale read by a client of an isolated
// node observable. Clients N..2N-1 (and 3N..4N-1, ...) only read: a write
// through an isolated node hangs until its timeout, and a client that
// also writes would spend most of a partition waiting instead of reading.
func (wl *workload) run(ctx context.Context, spec *cluster.Spec, nodes []cluster.Node) error {
	var clients []*client.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	var wg sync.WaitGroup
	for w := 0; w < wl.o.Clients; w++ {
		node := nodes[w%len(nodes)]
		cfg := spec.ClientConfig(node.Address)
		cfg.AttemptTimeout = time.Second
		if wl.o.ReadMode == ReadStale {
			cfg.Consistency = kvpb.ReadConsistency_STALE
		}
		c, err := client.New(cfg)
		if err != nil {
			return err
		}
		clients = append(clients, c)
		rc := wl.rec.Client(c, w, node.ID)
		rng := rand.New(rand.NewSource(wl.o.Seed*1_000_003 + int64(w)))
		wg.Add(1)
		readOnly := (w/len(nodes))%2 == 1
		go func(w int) {
			defer wg.Done()
			wl.worker(ctx, w, rc, rng, readOnly)
		}(w)
	}
	wg.Wait()
	return nil
}

func (wl *workload) worker(ctx context.Context, w int, c *Client, rng *rand.Rand, readOnly bool) {
	for seq := 0; ctx.Err() == nil && time.Now().Before(wl.until); seq++ {
		key := wl.keys[rng.Intn(len(wl.keys))]
		r := rng.Intn(100)
		if readOnly && r >= pctGet && r < pctGet+pctPut+pctDelete {
			r = rng.Intn(pctGet) // a read instead
		}
		switch {
		case r < pctGet:
			octx, cancel := context.WithTimeout(ctx, wl.o.ReadTimeout)
			_ = c.Get(octx, key)
			cancel()
		case r < pctGet+pctPut:
			octx, cancel := context.WithTimeout(ctx, wl.o.WriteTimeout)
			_ = c.Put(octx, key, wl.value(w, seq))
			cancel()
		case r < pctGet+pctPut+pctDelete:
			octx, cancel := context.WithTimeout(ctx, wl.o.WriteTimeout)
			_ = c.Delete(octx, key)
			cancel()
		default:
			g := wl.groups[rng.Intn(len(wl.groups))]
			i := rng.Intn(len(g))
			j := i + 1 + rng.Intn(len(g)-i) // scan g[i..j-1]
			limit := 0
			if rng.Intn(4) == 0 {
				limit = 1 + rng.Intn(3)
			}
			octx, cancel := context.WithTimeout(ctx, wl.o.ReadTimeout)
			// End just after g[j-1]: the range covers exactly g[i..j-1].
			_ = c.Scan(octx, g[i], g[j-1]+"\x00", limit)
			cancel()
		}
		if wl.o.ThinkTime > 0 {
			d := time.Duration(rng.Int63n(int64(2 * wl.o.ThinkTime)))
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
	}
}
