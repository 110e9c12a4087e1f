package main

import (
	"context"
	"errors"
	"os"
	"slices"
	"syscall"
	"testing"
)

// A caught SIGPIPE also arrives for writes to sockets of killed nodes and
// canceled whole experiment runs: the commands must not catch it.
func TestStopSignalsLeaveSIGPIPE(t *testing.T) {
	has := func(sig os.Signal) bool { return slices.Contains(stopSignals(), sig) }
	if has(syscall.SIGPIPE) {
		t.Fatal("stopSignals catches SIGPIPE: a write to a killed node's socket would cancel the run")
	}
	if !has(syscall.SIGTERM) || !has(syscall.SIGHUP) {
		t.Fatalf("stopSignals = %v, want SIGTERM and SIGHUP among them", stopSignals())
	}
}

type errWriter struct{ err error }

func (w errWriter) Write(b []byte) (int, error) { return 0, w.err }

func TestCutPipeWriterCancelsOnEPIPE(t *testing.T) {
	for _, tc := range []struct {
		err        error
		wantCancel bool
	}{
		{nil, false},
		{errors.New("disk full"), false},
		{syscall.EPIPE, true},
		{&wrappedErr{syscall.EPIPE}, true},
	} {
		ctx, out, stop := stopContext(context.Background(), errWriter{tc.err})
		_, _ = out.Write([]byte("line\n"))
		if got := ctx.Err() != nil; got != tc.wantCancel {
			t.Errorf("write error %v: canceled %v, want %v", tc.err, got, tc.wantCancel)
		}
		stop()
	}
}

type wrappedErr struct{ err error }

func (e *wrappedErr) Error() string { return "write /dev/stdout: " + e.err.Error() }
func (e *wrappedErr) Unwrap() error { return e.err }
