package node

import (
	"sync"
	"testing"
	"time"
)

// TestReaderPool: jobs beyond the busy workers start at once (nothing
// queues behind a blocked read), idle workers are reused, and after stop
// the workers end and run still runs every job.
func TestReaderPool(t *testing.T) {
	stop := make(chan struct{})
	p := newReaderPool(2, stop)
	release := make(chan struct{})
	started := make(chan int, 3)
	for i := range 3 { // two workers and one goroutine of its own, all blocked
		p.run(func() { started <- i; <-release })
	}
	for range 3 {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("a job waited behind blocked ones")
		}
	}
	if got := p.workers.Load(); got != 2 {
		t.Fatalf("%d workers, want 2 (the most)", got)
	}
	close(release)
	// The workers stay, idle: a job handed straight to the pool's channel
	// (what run tries first) is taken.
	waitFor(t, 10*time.Second, "an idle worker takes a job", func() bool {
		select {
		case p.jobs <- func() {}:
			return true
		default:
			return false
		}
	})
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		p.run(wg.Done)
	}
	wg.Wait()
	if got := p.workers.Load(); got > 2 {
		t.Fatalf("%d workers, want at most 2", got)
	}
	close(stop)
	waitFor(t, 10*time.Second, "workers end after stop", func() bool { return p.workers.Load() == 0 })
	done := make(chan struct{})
	p.run(func() { close(done) })
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a job after stop did not run")
	}
}
