package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"

	"github.com/nezha-harness/nezha/internal/cmdline"
)

// raftLogger adapts slog to raft.Logger.
type raftLogger struct{ l *slog.Logger }

// raftUnstableMissingFormat is etcd raft's message (unstable.stableTo, at
// INFO) when a MsgStorageAppendResp acknowledges an entry that is no longer
// in the unstable log. With asynchronous storage writes that is routine:
// several appends in flight answer with the same last index, and the first
// answer stabilises it. A busy node logged it thousands of times a run, so
// the adapter logs exactly this format at DEBUG; raft's other INFO messages
// (a mismatched term, a snapshot) keep their level.
const raftUnstableMissingFormat = "entry at index %d missing from unstable log; ignoring"

func (r *raftLogger) Debug(v ...any)                 { r.l.Debug(fmt.Sprint(v...)) }
func (r *raftLogger) Debugf(format string, v ...any) { r.l.Debug(fmt.Sprintf(format, v...)) }
func (r *raftLogger) Info(v ...any)                  { r.l.Info(fmt.Sprint(v...)) }
func (r *raftLogger) Infof(format string, v ...any) {
	if format == raftUnstableMissingFormat {
		r.l.Debug(fmt.Sprintf(format, v...))
		return
	}
	r.l.Info(fmt.Sprintf(format, v...))
}
func (r *raftLogger) Warning(v ...any) { r.l.Warn(fmt.Sprint(v...)) }
func (r *raftLogger) Warningf(format string, v ...any) {
	r.l.Warn(fmt.Sprintf(format, v...))
}
func (r *raftLogger) Error(v ...any)                 { r.l.Error(fmt.Sprint(v...)) }
func (r *raftLogger) Errorf(format string, v ...any) { r.l.Error(fmt.Sprintf(format, v...)) }
func (r *raftLogger) Fatal(v ...any) {
	r.l.Error(fmt.Sprint(v...))
	os.Exit(1)
}
func (r *raftLogger) Fatalf(format string, v ...any) {
	r.l.Error(fmt.Sprintf(format, v...))
	os.Exit(1)
}
func (r *raftLogger) Panic(v ...any)                 { panic(fmt.Sprint(v...)) }
func (r *raftLogger) Panicf(format string, v ...any) { panic(fmt.Sprintf(format, v...)) }

// Log formats of `serve -logFormat`: slog's own handlers.
const (
	LogFormatText = "text" // slog.TextHandler: key=value pairs (logfmt)
	LogFormatJSON = "json" // slog.JSONHandler: one JSON object per line
)

// NewLogHandler returns slog's handler for format (LogFormatText or
// LogFormatJSON) writing to w at level. An unknown format is a
// *cmdline.UsageError naming the accepted ones.
func NewLogHandler(format string, w io.Writer, level slog.Leveler) (slog.Handler, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case LogFormatText:
		return slog.NewTextHandler(w, opts), nil
	case LogFormatJSON:
		return slog.NewJSONHandler(w, opts), nil
	}
	return nil, cmdline.Usagef("-logFormat %q is not %s or %s", format, LogFormatText, LogFormatJSON)
}

// termHandler adds the node's current Raft term, as the Ready loop last
// published it (Node.term), to every record as the attribute "term", read
// when the record is handled. Attributes and groups added with With pass
// through to the wrapped handler; the term lands in the innermost open
// group (the node opens none).
type termHandler struct {
	slog.Handler
	term *atomic.Uint64
}

// Handle implements slog.Handler.
func (h termHandler) Handle(ctx context.Context, r slog.Record) error {
	r.AddAttrs(slog.Uint64("term", h.term.Load()))
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h termHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return termHandler{Handler: h.Handler.WithAttrs(as), term: h.term}
}

// WithGroup implements slog.Handler.
func (h termHandler) WithGroup(name string) slog.Handler {
	return termHandler{Handler: h.Handler.WithGroup(name), term: h.term}
}
