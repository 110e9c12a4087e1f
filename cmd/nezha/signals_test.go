package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// A stop signal cancels the command's context with the signal as its
// cause; the command's error wrapping it exits 128 + the signal's number
// (130 for SIGINT), as a shell reports a process the signal killed. After
// stop, the process no longer catches it.
func TestStopSignalExitCode(t *testing.T) {
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		ctx, _, stop := stopContext(context.Background(), io.Discard)
		if err := syscall.Kill(os.Getpid(), tc.sig); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("%v: context not canceled within 10 s", tc.sig)
		}
		stop()
		cause := context.Cause(ctx)
		var stderr bytes.Buffer
		c := &cli{stdout: io.Discard, stderr: &stderr}
		if code := c.exitCode(fmt.Errorf("bench put: %w (saved)", cause)); code != tc.code {
			t.Errorf("%v: exit %d, want %d", tc.sig, code, tc.code)
		}
		if want := "nezha: bench put: interrupted by " + unix.SignalName(tc.sig) + " (saved)\n"; stderr.String() != want {
			t.Errorf("%v: stderr %q, want %q", tc.sig, stderr.String(), want)
		}
	}
	// A closed output is not a signal: exit 1.
	c := &cli{stdout: io.Discard, stderr: io.Discard}
	if code := c.exitCode(fmt.Errorf("x: %w", errOutputCut)); code != 1 {
		t.Errorf("EPIPE: exit %d, want 1", code)
	}
}

// interrupted adds ctx's cause to an error of the steps before a run
// (which does not say it was interrupted), and leaves other errors alone.
func TestInterruptedNamesTheCause(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	connect := errors.New("no server answered within 5s")
	if err := interrupted(ctx, connect); err != connect {
		t.Fatalf("not interrupted: %v, want the error as it is", err)
	}
	cause := &signalError{sig: syscall.SIGINT}
	cancel(cause)
	var se *signalError
	if err := interrupted(ctx, connect); !errors.As(err, &se) || !strings.Contains(err.Error(), connect.Error()) {
		t.Fatalf("interrupted: %v, want both the error and the signal", err)
	}
	if err := interrupted(ctx, fmt.Errorf("bench put: %w", cause)); err.Error() != "bench put: interrupted by SIGINT" {
		t.Fatalf("already says it: %v", err)
	}
	if err := interrupted(ctx, nil); err != nil {
		t.Fatalf("no error: %v", err)
	}
}
