package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nezha-harness/nezha/systems"
)

// TestLogLinesCarryNodeAndTerm: a node logging JSON writes one JSON object
// per line, each with the node id and the term current when it was
// written, also through loggers derived with With and WithGroup.
func TestLogLinesCarryNodeAndTerm(t *testing.T) {
	var buf bytes.Buffer
	h, err := NewLogHandler(LogFormatJSON, &buf, slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	var term atomic.Uint64
	l := slog.New(termHandler{Handler: h, term: &term}).With("node", 2)
	term.Store(3)
	l.Info("first")
	term.Store(4)
	l.With("k", "v").Info("second")
	l.Debug("below the level")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), buf.String())
	}
	for i, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %d is not JSON: %v\n%s", i+1, err, line)
		}
		if rec["node"] != 2.0 || rec["term"] != float64(3+i) {
			t.Errorf("line %d: node %v term %v, want 2 and %d: %s", i+1, rec["node"], rec["term"], 3+i, line)
		}
	}
	if _, err := NewLogHandler("xml", io.Discard, slog.LevelInfo); err == nil {
		t.Fatal("format xml accepted")
	}
}

// TestServeRefusesBadLogFlags: a bad -logFormat is a usage error (exit
// code 2) on one line, reported together with the other bad flags.
func TestServeRefusesBadLogFlags(t *testing.T) {
	reg, err := systems.NewRegistry(memSystem)
	if err != nil {
		t.Fatal(err)
	}
	err = Serve([]string{"-system", "mem", "-logFormat", "xml", "-logLevel", "loud", "-data", t.TempDir()}, reg, io.Discard, io.Discard)
	var ue *systems.UsageError
	if !errors.As(err, &ue) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("got %v, want a one-line usage error", err)
	}
	for _, want := range []string{`-logFormat "xml" is not text or json`, `-logLevel "loud"`, "-peers is required"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
