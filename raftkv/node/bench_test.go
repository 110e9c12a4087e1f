package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/nezha-harness/nezha/raftkv/raftlog"
	"github.com/nezha-harness/nezha/systems"
)

// BenchmarkProposals measures the Raft layer alone (an in-memory state
// machine) on a local 3-node cluster over loopback gRPC, with fsync on:
// 100-byte values written by 1 and by 100 concurrent clients. It reports
// proposals/s and the fsyncs/s of the three logs together (group commit
// shows as fsyncs/s far below proposals/s x 3).
//
//	go test -run xxx -bench Proposals -benchtime 5000x ./raftkv/node/
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

// BenchmarkSessionFold measures what a compaction spends to move the
// session table over 256 MiB of log (1024 writes of 256 KiB, each with a
// session): reading the entries back from the log (the fallback after the
// delta queue overflowed; before the queue, every compaction), and
// replaying the queued deltas.
//
//	go test -run xxx -bench SessionFold ./raftkv/node/
func BenchmarkSessionFold(b *testing.B) {
	const entries, valueBytes = 1024, 256 << 10
	opts := raftlog.DefaultOptions(b.TempDir())
	opts.Sync = false
	opts.EntryCacheBytes = 0
	opts.Bootstrap = raftpb.ConfState{Voters: []uint64{1}}
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	l, err := raftlog.Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	first, _ := l.FirstIndex()
	value := make([]byte, valueBytes)
	var ents []raftpb.Entry
	for i := range uint64(entries) {
		c := systems.Command{Op: systems.OpPut, RequestID: i + 1, ClientID: i%100 + 1, Seq: i/100 + 1,
			Key: []byte(fmt.Sprintf("k%09d", i)), Value: value}
		ents = append(ents, raftpb.Entry{Index: first + i, Term: 1, Data: systems.AppendCommand(nil, &c)})
	}
	if err := l.Append(raftpb.HardState{Term: 1, Commit: first + entries - 1}, ents, true); err != nil {
		b.Fatal(err)
	}
	ents = nil
	n := &Node{log: l, logger: opts.Logger}
	last := first + entries - 1
	start := newSessionTable(MaxSessions)
	start.index = first - 1
	want := start.clone()
	deltas := newSessionDeltas(MaxSessionDeltas)
	deltas.reset(start.index)
	if err := n.foldLog(want, last, deltas); err != nil {
		b.Fatal(err)
	}
	_, ds := deltas.plan(start.index, last)
	b.Run("log", func(b *testing.B) {
		b.SetBytes(entries * valueBytes)
		for b.Loop() {
			if err := n.foldLog(start.clone(), last, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("deltas", func(b *testing.B) {
		b.SetBytes(entries * valueBytes)
		for b.Loop() {
			if err := start.clone().foldDeltas(ds, last); err != nil {
				b.Fatal(err)
			}
		}
	})
}
