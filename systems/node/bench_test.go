package node

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkProposals measures the Raft layer alone (an in-memory state
// machine) on a local 3-node cluster over loopback gRPC, with fsync on:
// 100-byte values written by 1 and by 100 concurrent clients. It reports
// proposals/s and the fsyncs/s of the three logs together (group commit
// shows as fsyncs/s far below proposals/s x 3).
//
//	go test -run xxx -bench Proposals -benchtime 5000x ./systems/node/
func BenchmarkProposals(b *testing.B) {
	for _, writers := range []int{1, 100} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			tc := startCluster(b, 3)
			tc.waitLeader(10 * time.Second)
			c := tc.client(b)
			ctx := context.Background()
			value := make([]byte, 100)
			// Warm up connections and leader discovery.
			if _, err := c.Put(ctx, []byte("warm"), value); err != nil {
				b.Fatal(err)
			}
			fsyncs := func() int64 {
				var s int64
				for _, nd := range tc.nodes {
					s += nd.log.Stats().Fsyncs
				}
				return s
			}
			f0 := fsyncs()
			var next atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			b.ResetTimer()
			start := time.Now()
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						if _, err := c.Put(ctx, []byte(fmt.Sprintf("k%d", i)), value); err != nil {
							errs <- err
							return
						}
					}
				}(w)
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "proposals/s")
			b.ReportMetric(float64(fsyncs()-f0)/elapsed.Seconds(), "fsyncs/s")
		})
	}
}
