package node

import (
	"fmt"
	"log/slog"
	"os"
)

// raftLogger adapts slog to raft.Logger.
type raftLogger struct{ l *slog.Logger }

func (r *raftLogger) Debug(v ...any)                 { r.l.Debug(fmt.Sprint(v...)) }
func (r *raftLogger) Debugf(format string, v ...any) { r.l.Debug(fmt.Sprintf(format, v...)) }
func (r *raftLogger) Info(v ...any)                  { r.l.Info(fmt.Sprint(v...)) }
func (r *raftLogger) Infof(format string, v ...any)  { r.l.Info(fmt.Sprintf(format, v...)) }
func (r *raftLogger) Warning(v ...any)               { r.l.Warn(fmt.Sprint(v...)) }
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
