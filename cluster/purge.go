package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nezha-harness/nezha/internal/cmdline"
)

// What the harness makes in a cluster directory, and nothing else: a purge
// removes these names only, so that a file a user put there survives it.

// clusterFiles are made in DIR itself: the description, its temporary
// copy while it is saved, the lock (Lock) and the agents' token.
func clusterFiles() []string { return []string{FileName, FileName + ".tmp", LockFile, TokenFile} }

// nodeFiles are made in DIR/nodeN (a local cluster's node directory, its
// agent's -dir): the node's -data, its log, the agent's log, the agent's
// peer-link file and its disk probe.
func nodeFiles() []string {
	return []string{"data", "node.log", "agent.log", "dial-peers.json", "dial-peers.json.tmp", "disk-probe.tmp"}
}

// isNodeDir reports whether name is a node directory's (node<id>).
func isNodeDir(name string) bool {
	id, ok := strings.CutPrefix(name, "node")
	if !ok || id == "" || id[0] == '0' {
		return false
	}
	for _, c := range id {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// checkForeign refuses a cluster directory that holds something the
// harness did not make and no cluster.json: a directory of the user's
// (`-cluster ~/results`, say) that a later `down -purge` must not touch.
// An absent or empty directory, or one holding only the lock, is fine;
// one with a cluster.json is judged by Up (running or stopped cluster).
func checkForeign(dir string) error {
	des, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("cluster directory %s: %w", dir, err)
	}
	var foreign []string
	for _, de := range des {
		if de.Name() == FileName {
			return nil
		}
		if de.Name() != LockFile {
			foreign = append(foreign, de.Name())
		}
	}
	if len(foreign) == 0 {
		return nil
	}
	return cmdline.Usagef("%s is not empty and holds no %s (%s): name a new or empty directory for the cluster",
		dir, FileName, listSome(foreign, 3))
}

// purge removes what the harness made under s.Dir: cluster.json, the lock,
// the agents' token, and in each node directory (node1 up to the last id ever given, removed
// members included) the node's data, log and peer-link file; then every
// directory left empty. Anything else stays, and so do the directories
// that hold it; the error names them.
func (s *Spec) purge() error {
	var errs []error
	last := s.NextID
	for _, n := range s.Nodes {
		last = max(last, n.ID+1)
	}
	des, err := os.ReadDir(s.Dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	var kept []string
	for _, de := range des {
		name := de.Name()
		switch {
		case slices.Contains(clusterFiles(), name):
			// Removed last: the lock is held until the caller unlocks.
		case de.IsDir() && isNodeDir(name) && nodeIndex(name) < last:
			nd := filepath.Join(s.Dir, name)
			for _, f := range nodeFiles() {
				if err := os.RemoveAll(filepath.Join(nd, f)); err != nil {
					errs = append(errs, err)
				}
			}
			if left, _ := os.ReadDir(nd); len(left) > 0 {
				for _, l := range left {
					kept = append(kept, filepath.Join(name, l.Name()))
				}
				continue
			}
			if err := os.Remove(nd); err != nil {
				errs = append(errs, err)
			}
		default:
			kept = append(kept, name)
		}
	}
	for _, f := range clusterFiles() {
		if err := os.Remove(filepath.Join(s.Dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if len(kept) > 0 {
		errs = append(errs, fmt.Errorf("%s left in place: it holds files the harness did not make (%s)", s.Dir, listSome(kept, 5)))
	} else if err := os.Remove(s.Dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// nodeIndex is the id in a node directory's name (nodeDirName).
func nodeIndex(name string) uint64 {
	var id uint64
	fmt.Sscanf(strings.TrimPrefix(name, "node"), "%d", &id)
	return id
}

// listSome joins up to n names, with how many more there are.
func listSome(names []string, n int) string {
	slices.Sort(names)
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}
