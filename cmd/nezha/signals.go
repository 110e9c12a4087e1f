package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// stopSignals cancel a long command (bench, ycsb, experiment run, check):
// it then stops its load, heals its faults, tears its clusters down, saves
// and reports what ran.
//
// SIGPIPE is not among them. Once caught with signal.Notify, SIGPIPE is
// delivered for a write to any broken pipe or socket, not only stdout's,
// and a client's write to a node the kill nemesis had just killed canceled
// whole runs (the standard profile's linearizability, twice). The commands
// ignore SIGPIPE instead and notice a cut output (`| head`) by the EPIPE
// of their own writes (cutPipeWriter).
func stopSignals() []os.Signal { return []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP} }

// signalError is the cause (context.Cause) of a command's context that a
// stop signal canceled. A command that returns it (wrapped) has the exit
// code 128 + the signal's number (exitCode), and the process then dies of
// the signal (signalExit): a shell reports 130 for SIGINT, as when the
// signal killed the process outright, and scripts tell an interrupted run
// from a failed one (exit 1).
type signalError struct{ sig syscall.Signal }

func (e *signalError) Error() string { return "interrupted by " + unix.SignalName(e.sig) }

// exitCode is 128 + the signal's number.
func (e *signalError) exitCode() int { return 128 + int(e.sig) }

// signalExit returns code, run's exit code, unless it says that a stop
// signal interrupted the command (128 + the signal's number, from a
// signalError): then, the command having saved and reported what it ran,
// the process dies of that signal, as it would have had it not caught it.
// Exiting with 130 instead would look the same to a shell's $?, but a
// shell running the command in a script goes on with the script after a
// child that exited, whatever its code (bash assumes the child handled
// the signal), and stops only after one the signal killed. If the signal
// does not kill the process (its parent had it ignored), it returns code
// after a second.
func signalExit(code int) int {
	if code <= 128 || code >= 128+65 {
		return code
	}
	sig := syscall.Signal(code - 128)
	signal.Reset(sig)
	if err := syscall.Kill(os.Getpid(), sig); err == nil {
		time.Sleep(time.Second) // the signal's delivery; the fallback below only if it is ignored
	}
	return code
}

// errOutputCut is the cause of a command's context canceled by an EPIPE on
// its output (its reader, `| head`, is gone).
var errOutputCut = errors.New("interrupted: the output was closed (EPIPE)")

// stopContext returns ctx canceled by stopSignals (cause *signalError) or
// by an EPIPE on out (cause errOutputCut), and out wrapped to notice it.
// It ignores SIGPIPE for the process, so a write to a cut stdout fails with
// EPIPE instead of killing the process before it can tear its clusters
// down. stop ends the signal handling (idempotent): a stop signal after it
// has its default effect and kills the process.
func stopContext(ctx context.Context, out io.Writer) (_ context.Context, _ io.Writer, stop func()) {
	signal.Ignore(syscall.SIGPIPE)
	ctx, cancel := context.WithCancelCause(ctx)
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, stopSignals()...)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigc:
			sig, _ := s.(syscall.Signal)
			cancel(&signalError{sig: sig})
		case <-done:
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			signal.Stop(sigc)
			close(done)
			cancel(context.Canceled)
		})
	}
	return ctx, cutPipeWriter{w: out, cancel: cancel}, stop
}

// killOnSecondSignal makes the second stop signal kill the process: once
// ctx (from stopContext) ends, stop restores the signals' default effect.
// For a command whose orderly stop may take long (a load waits for its
// operations in flight), and whose user may not want to wait.
func killOnSecondSignal(ctx context.Context, stop func()) {
	context.AfterFunc(ctx, stop)
}

// cutPipeWriter cancels its command when a write fails with EPIPE: the
// reader of the pipe (`| head`) is gone.
type cutPipeWriter struct {
	w      io.Writer
	cancel context.CancelCauseFunc
}

func (p cutPipeWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	if errors.Is(err, syscall.EPIPE) {
		p.cancel(errOutputCut)
	}
	return n, err
}
