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
// client waits on, and to the epoch (Node.propEpoch) Raft accepted it in.
type waitRegistry struct {
	mu sync.Mutex
	m  map[uint64]*waiter
}

type waiter struct {
	ch chan applyResult // nil for a proposal of a group
	// group and slot: the group the proposal belongs to and its place in
	// the group's results.
	group *waitGroup
	slot  int
	// epoch is the leader/term epoch the proposal was handed to Raft in;
	// 0 until then.
	epoch uint64
}

// waitGroup is what the proposals of one batch wait on together
// (registerGroup): one wake-up for the batch instead of one per proposal.
// results[i] and delivered[i] are written under the registry's lock, when
// proposal i is answered; done is closed once every proposal of the group
// was answered.
type waitGroup struct {
	results   []applyResult
	delivered []bool
	left      int
	done      chan struct{}
}

// deliver answers wt with r (registry lock held, wt already removed).
func (wt *waiter) deliver(r applyResult) {
	if g := wt.group; g != nil {
		g.results[wt.slot] = r
		g.delivered[wt.slot] = true
		if g.left--; g.left == 0 {
			close(g.done)
		}
		return
	}
	wt.ch <- r
}

func newWaitRegistry() *waitRegistry { return &waitRegistry{m: map[uint64]*waiter{}} }

func (w *waitRegistry) register(id uint64) <-chan applyResult {
	ch := make(chan applyResult, 1)
	w.mu.Lock()
	w.m[id] = &waiter{ch: ch}
	w.mu.Unlock()
	return ch
}

// registerGroup registers the proposals ids, which are answered together:
// the group's done channel is closed once each of them was answered.
func (w *waitRegistry) registerGroup(ids []uint64) *waitGroup {
	g := &waitGroup{results: make([]applyResult, len(ids)), delivered: make([]bool, len(ids)),
		left: len(ids), done: make(chan struct{})}
	ws := make([]waiter, len(ids))
	w.mu.Lock()
	for i, id := range ids {
		ws[i] = waiter{group: g, slot: i}
		w.m[id] = &ws[i]
	}
	w.mu.Unlock()
	return g
}

// cancelGroup stops waiting for the proposals of g (ids, as registered)
// that were not answered yet; it returns which were (g.delivered is
// stable afterwards).
func (w *waitRegistry) cancelGroup(ids []uint64, g *waitGroup) []bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, id := range ids {
		if !g.delivered[i] {
			delete(w.m, id)
		}
	}
	return g.delivered
}

// expire stops waiting for proposal i of g (ids[i], as registered) if it
// was not answered yet, and counts it as done; it reports whether it
// expired it (false: it was answered).
func (w *waitRegistry) expire(id uint64, g *waitGroup, i int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if g.delivered[i] {
		return false
	}
	delete(w.m, id)
	if g.left--; g.left == 0 {
		close(g.done)
	}
	return true
}

func (w *waitRegistry) cancel(id uint64) {
	w.mu.Lock()
	delete(w.m, id)
	w.mu.Unlock()
}

// proposed records that Raft accepted proposals ids in epoch.
func (w *waitRegistry) proposed(epoch uint64, ids ...uint64) {
	w.mu.Lock()
	for _, id := range ids {
		if wt, ok := w.m[id]; ok {
			wt.epoch = epoch + 1 // 0 stays "not proposed yet"
		}
	}
	w.mu.Unlock()
}

// failProposedBefore fails, with err, every proposal Raft accepted in an
// epoch before epoch.
func (w *waitRegistry) failProposedBefore(epoch uint64, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, wt := range w.m {
		if wt.epoch != 0 && wt.epoch-1 < epoch {
			delete(w.m, id)
			wt.deliver(applyResult{err: err})
		}
	}
}

// trigger delivers r to the waiter of id, if any.
func (w *waitRegistry) trigger(id uint64, r applyResult) {
	w.mu.Lock()
	wt, ok := w.m[id]
	if !ok {
		w.mu.Unlock()
		return
	}
	delete(w.m, id)
	if wt.group != nil {
		wt.deliver(r)
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	wt.ch <- r
}

func (w *waitRegistry) failAll(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, wt := range w.m {
		delete(w.m, id)
		wt.deliver(applyResult{err: err})
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

// leaderWatch tells waiters when the node knows a leader: a write that Raft
// dropped because the node had none (right after a start or an election)
// waits for one and is proposed again, instead of failing at once.
type leaderWatch struct {
	mu    sync.Mutex
	known bool
	ch    chan struct{} // closed while a leader is known
}

func newLeaderWatch() *leaderWatch { return &leaderWatch{ch: make(chan struct{})} }

// set records whether a leader is known. Ready loop only.
func (w *leaderWatch) set(known bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case known && !w.known:
		close(w.ch)
	case !known && w.known:
		w.ch = make(chan struct{})
	}
	w.known = known
}

// wait returns a channel closed once a leader is known (at once if one is).
func (w *leaderWatch) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}
