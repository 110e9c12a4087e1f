package node

import (
	"container/heap"
	"context"
	"sync"
)

type applyResult struct {
	index uint64
	err   error
}

// waitRegistry maps the request id of a pending proposal to the channel its
// client waits on.
type waitRegistry struct {
	mu sync.Mutex
	m  map[uint64]chan applyResult
}

func newWaitRegistry() *waitRegistry { return &waitRegistry{m: map[uint64]chan applyResult{}} }

func (w *waitRegistry) register(id uint64) <-chan applyResult {
	ch := make(chan applyResult, 1)
	w.mu.Lock()
	w.m[id] = ch
	w.mu.Unlock()
	return ch
}

func (w *waitRegistry) cancel(id uint64) {
	w.mu.Lock()
	delete(w.m, id)
	w.mu.Unlock()
}

// trigger delivers r to the waiter of id, if any.
func (w *waitRegistry) trigger(id uint64, r applyResult) {
	w.mu.Lock()
	ch, ok := w.m[id]
	delete(w.m, id)
	w.mu.Unlock()
	if ok {
		ch <- r
	}
}

func (w *waitRegistry) failAll(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, ch := range w.m {
		ch <- applyResult{err: err}
		delete(w.m, id)
	}
}

// indexWait lets goroutines wait until the applied index reaches a value.
type indexWait struct {
	mu      sync.Mutex
	applied uint64
	h       waiterHeap
}

type indexWaiter struct {
	index uint64
	ch    chan struct{}
}

type waiterHeap []indexWaiter

func (h waiterHeap) Len() int           { return len(h) }
func (h waiterHeap) Less(i, j int) bool { return h[i].index < h[j].index }
func (h waiterHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *waiterHeap) Push(x any)        { *h = append(*h, x.(indexWaiter)) }
func (h *waiterHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func newIndexWait() *indexWait { return &indexWait{} }

// trigger records that index has been applied and wakes its waiters.
func (w *indexWait) trigger(index uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if index > w.applied {
		w.applied = index
	}
	for len(w.h) > 0 && w.h[0].index <= w.applied {
		close(heap.Pop(&w.h).(indexWaiter).ch)
	}
}

// wait blocks until index is applied, ctx ends or abort is closed.
func (w *indexWait) wait(ctx context.Context, index uint64, abort <-chan struct{}) error {
	w.mu.Lock()
	if index <= w.applied {
		w.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	heap.Push(&w.h, indexWaiter{index: index, ch: ch})
	w.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-abort:
		return errStopping
	}
}
