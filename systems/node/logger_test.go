package node

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
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
