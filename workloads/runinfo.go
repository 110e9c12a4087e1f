package workloads

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/internal/buildinfo"
	"github.com/nezha-harness/nezha/internal/machine"
)

// RunInfo is the record of how a run was made, written as config.json next
// to its results: the exact command line, the seed, every option, the
// servers and the machine.
type RunInfo struct {
	Tool    string   `json:"tool"`
	Command []string `json:"command"`
	// Seed is null when the run cannot be seeded (SeedNote says why).
	Seed     *int64    `json:"seed"`
	SeedNote string    `json:"seed_note,omitempty"`
	Start    time.Time `json:"start"`
	// GitCommit and GitDirty are the binary's VCS revision, from its build
	// info (Build); GitCommitSource says where they came from: "build info",
	// else (a binary built by go test, go run or with -buildvcs=false)
	// `git rev-parse HEAD` beside the binary or in the working directory,
	// labelled as such, else "unknown".
	GitCommit       string         `json:"git_commit"`
	GitDirty        bool           `json:"git_dirty"`
	GitCommitSource string         `json:"git_commit_source"`
	Build           buildinfo.Info `json:"build"`
	GoVersion       string         `json:"go_version"`
	Hostname        string         `json:"hostname"`
	CPUs            int            `json:"cpus"`
	CPUModel        string         `json:"cpu_model"`
	Kernel          string         `json:"kernel"`
	// DataDevice is the block device (name and major:minor) holding the
	// results and node data directories, and ReadAheadKB its kernel
	// readahead (/sys/block/DEV/queue/read_ahead_kb; 0: unknown). Reads
	// through mmap (Badger) fault in a whole readahead window per miss, so
	// a large window (8 MiB on some VMs, against Linux's default 128 KiB)
	// multiplies their device reads. Set by SetDataDir.
	DataDevice  string       `json:"data_device,omitempty"`
	ReadAheadKB int          `json:"read_ahead_kb,omitempty"`
	System      string       `json:"system,omitempty"`
	Servers     []ServerInfo `json:"servers,omitempty"`
	Config      any          `json:"config"`
}

// ServerInfo is what a server said about itself before the run.
type ServerInfo struct {
	Address   string `json:"address"`
	ID        uint64 `json:"id"`
	RaftState string `json:"raft_state"`
	Leader    uint64 `json:"leader"`
	Term      uint64 `json:"term"`
	// Sync false: the node does not fsync its log (comparison only).
	Sync bool `json:"sync"`
}

// NewRunInfo records the machine and the moment. command is the exact
// command line (os.Args for the binary); seed may be nil.
func NewRunInfo(tool string, command []string, seed *int64, config any) RunInfo {
	r := RunInfo{
		Tool: tool, Command: command, Seed: seed, Config: config, Start: time.Now(),
		GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), Build: buildinfo.Read(),
	}
	r.Hostname, _ = os.Hostname()
	r.CPUModel, r.Kernel = machine.CPUModel(), machine.Kernel()
	r.GitCommit, r.GitDirty, r.GitCommitSource = Revision(r.Build)
	return r
}

// SetDataDir records the block device that holds dir and its readahead
// (DataDevice, ReadAheadKB); it leaves them empty where /sys does not say.
func (r *RunInfo) SetDataDir(dir string) {
	name, q := machine.DataDevice(dir)
	r.DataDevice, r.ReadAheadKB = name, int(machine.ReadAheadKB(q))
}

// SetServers records the servers' statuses (from client.Discover).
func (r *RunInfo) SetServers(sts []*kvpb.StatusResponse) {
	for _, s := range sts {
		si := ServerInfo{Address: s.Address, RaftState: strings.TrimPrefix(s.RaftState, "State"), Sync: s.Sync}
		if s.Header != nil {
			si.ID, si.Leader, si.Term = s.Header.NodeId, s.Header.LeaderId, s.Header.Term
		}
		r.Servers = append(r.Servers, si)
	}
}

// Revision is the binary's VCS revision, whether the tree was dirty, and
// where that came from: the build info when the toolchain stamped it; else,
// as a labelled fallback, git's HEAD of the repository that holds the
// binary, else of the working directory; else "unknown".
func Revision(b buildinfo.Info) (commit string, dirty bool, source string) {
	if b.RevisionSource == buildinfo.SourceBuildInfo {
		return b.Revision, b.Dirty, buildinfo.SourceBuildInfo
	}
	if c, d, dir := gitHead(); c != "" {
		return c, d, "git rev-parse HEAD in " + dir + " (fallback: the binary's build info has no revision: " + b.RevisionSource + ")"
	}
	return "unknown", false, "unknown: no revision in the build info (" + b.RevisionSource + ") and no git repository around the binary"
}

// gitHead asks git for HEAD of the repository that holds the running
// binary, else of the working directory; "" if neither is one.
func gitHead() (commit string, dirty bool, dir string) {
	var dirs []string
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe))
	}
	if wd, err := os.Getwd(); err == nil {
		dirs = append(dirs, wd)
	}
	for _, d := range dirs {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cmd := exec.CommandContext(ctx, "git", "rev-parse", "HEAD")
		cmd.Dir = d
		out, err := cmd.Output()
		if err != nil {
			cancel()
			continue
		}
		st := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no")
		st.Dir = d
		dirty, _ := st.Output()
		cancel()
		return strings.TrimSpace(string(out)), len(strings.TrimSpace(string(dirty))) > 0, d
	}
	return "", false, ""
}

// WriteJSON writes v as indented JSON to path.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
