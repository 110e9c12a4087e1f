package node

import "sync/atomic"

// readerPool runs the GETs of Batch streams (serveBatchGets) on
// long-lived goroutines whose stacks have already grown.
//
// A GET served on a new goroutine starts on the smallest stack and grows
// it on every call (runtime.newstack, copystack): in a CPU profile of a
// nezha node serving stale GETs at 100 clients, stack growth under
// LevelDB's Get was 14 % of the node's CPU. A worker of the pool keeps its
// grown stack from one GET to the next. A GET is handed only to a worker
// that is idle at that moment; with none idle, a new worker starts with
// it (up to maxWorkers) or, beyond, it gets a goroutine of its own, as
// before: reads never queue behind each other (a read that waits for the
// disk holds its worker, not the others').
type readerPool struct {
	jobs       chan func() // unbuffered: a send succeeds only into an idle worker
	stop       <-chan struct{}
	maxWorkers int32
	workers    atomic.Int32
}

// readerWorkers is the most pool workers a node keeps. Page-cache reads
// are CPU-bound, so a few per core are busy at once; beyond them a GET
// runs on a goroutine of its own.
const readerWorkers = 64

// newReaderPool returns a pool of at most maxWorkers workers, started as
// GETs need them, that end when stop is closed.
func newReaderPool(maxWorkers int, stop <-chan struct{}) *readerPool {
	return &readerPool{jobs: make(chan func()), stop: stop, maxWorkers: int32(maxWorkers)}
}

// run runs f on an idle worker, on a new worker, or, with maxWorkers
// busy or the pool stopped, on a goroutine of its own. It never blocks.
func (p *readerPool) run(f func()) {
	select {
	case p.jobs <- f:
		return
	default:
	}
	select {
	case <-p.stop:
		go f()
		return
	default:
	}
	if p.workers.Add(1) <= p.maxWorkers {
		go p.work(f)
		return
	}
	p.workers.Add(-1)
	go f()
}

// work runs f, then the jobs handed to it, until stop is closed.
func (p *readerPool) work(f func()) {
	defer p.workers.Add(-1)
	for {
		f()
		select {
		case f = <-p.jobs:
		case <-p.stop:
			return
		}
	}
}
