package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
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

// TestRaftLoggerDemotesUnstableMissing drives etcd raft itself (one voter,
// asynchronous storage writes) into stepping the same MsgStorageAppendResp
// twice: the second logs raftUnstableMissingFormat, which the adapter must
// write at DEBUG, while raft's other INFO messages stay at INFO. Going
// through raft ties the format to the library's wording.
func TestRaftLoggerDemotesUnstableMissing(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf bytes.Buffer
		h, err := NewLogHandler(LogFormatText, &buf, level)
		if err != nil {
			t.Fatal(err)
		}
		st := raft.NewMemoryStorage()
		if err := st.ApplySnapshot(raftpb.Snapshot{Metadata: raftpb.SnapshotMetadata{
			Index: 1, Term: 1, ConfState: raftpb.ConfState{Voters: []uint64{1}}}}); err != nil {
			t.Fatal(err)
		}
		rn, err := raft.NewRawNode(&raft.Config{ID: 1, ElectionTick: 10, HeartbeatTick: 1, Storage: st,
			MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 16, AsyncStorageWrites: true, Logger: &raftLogger{l: slog.New(h)}})
		if err != nil {
			t.Fatal(err)
		}
		// persist runs the local storage work of every Ready and returns
		// the append responses it stepped.
		persist := func() []raftpb.Message {
			var stepped []raftpb.Message
			for rn.HasReady() {
				for _, m := range rn.Ready().Messages {
					switch m.To {
					case raft.LocalAppendThread:
						if !raft.IsEmptyHardState(raftpb.HardState{Term: m.Term, Vote: m.Vote, Commit: m.Commit}) {
							st.SetHardState(raftpb.HardState{Term: m.Term, Vote: m.Vote, Commit: m.Commit})
						}
						if err := st.Append(m.Entries); err != nil {
							t.Fatal(err)
						}
						for _, r := range m.Responses {
							if r.Type == raftpb.MsgStorageAppendResp {
								stepped = append(stepped, r)
							}
							if err := rn.Step(r); err != nil {
								t.Fatal(err)
							}
						}
					case raft.LocalApplyThread:
						for _, r := range m.Responses {
							if err := rn.Step(r); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
			}
			return stepped
		}
		if err := rn.Campaign(); err != nil {
			t.Fatal(err)
		}
		persist()
		if rn.Status().RaftState != raft.StateLeader {
			t.Fatalf("state %v, want leader", rn.Status().RaftState)
		}
		if err := rn.Propose([]byte("x")); err != nil {
			t.Fatal(err)
		}
		var resp *raftpb.Message
		for _, r := range persist() {
			if r.Index > 0 {
				resp = &r
			}
		}
		if resp == nil {
			t.Fatal("no append response for the proposal")
		}
		if err := rn.Step(*resp); err != nil { // its entry is stable already
			t.Fatal(err)
		}
		out := buf.String()
		missing := fmt.Sprintf(raftUnstableMissingFormat, resp.Index)
		if !strings.Contains(out, "level=INFO msg=\"1 became leader at term 1\"") {
			t.Errorf("raft's own INFO message is not at INFO (level %v):\n%s", level, out)
		}
		switch n := strings.Count(out, missing); {
		case level == slog.LevelInfo && n != 0:
			t.Errorf("level INFO: %q logged:\n%s", missing, out)
		case level == slog.LevelDebug && !strings.Contains(out, "level=DEBUG msg=\""+missing+"\""):
			t.Errorf("level DEBUG: %q not logged at DEBUG:\n%s", missing, out)
		}
	}
}
