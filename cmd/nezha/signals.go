package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// stopSignals cancel a long command (experiment run, check): it then heals
// its faults, tears its clusters down and reports what ran.
//
// SIGPIPE is not among them. Once caught with signal.Notify, SIGPIPE is
// delivered for a write to any broken pipe or socket, not only stdout's,
// and a client's write to a node the kill nemesis had just killed canceled
// whole runs (the standard profile's linearizability, twice). The commands
// ignore SIGPIPE instead and notice a cut output (`| head`) by the EPIPE
// of their own writes (cutPipeWriter).
func stopSignals() []os.Signal { return []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP} }

// stopContext returns ctx canceled by stopSignals or by an EPIPE on out,
// and out wrapped to notice it. It ignores SIGPIPE for the process, so a
// write to a cut stdout fails with EPIPE instead of killing the process
// before it can tear its clusters down.
func stopContext(ctx context.Context, out io.Writer) (context.Context, io.Writer, context.CancelFunc) {
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(ctx, stopSignals()...)
	ctx, cancel := context.WithCancel(ctx)
	return ctx, cutPipeWriter{w: out, cancel: cancel}, func() { cancel(); stop() }
}

// cutPipeWriter cancels its command when a write fails with EPIPE: the
// reader of the pipe (`| head`) is gone.
type cutPipeWriter struct {
	w      io.Writer
	cancel context.CancelFunc
}

func (p cutPipeWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	if errors.Is(err, syscall.EPIPE) {
		p.cancel()
	}
	return n, err
}
