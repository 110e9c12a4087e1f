package experiments

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nezha-harness/nezha/experiments/probe"
)

// Write amplification per node, by role and cause. Every system's nodes
// write the Raft log; what else each writes, and whether the leader and
// the followers write alike, is what tells the systems apart: original's
// followers apply every entry into RocksDB as the leader does, nezha's
// write nothing but the log (and GC), lsm-raft's followers ingest the
// leader's span files instead of writing WAL, memtable flushes and their
// own compactions of the entries. A window (windowStats.Nodes) holds each
// node's bytes (/proc/PID/io), whether it led at the window's end, and its
// bytes by cause from its /metrics (probe.WriteCauses).

// roleWriteAmpText is "leader 4.10, followers 3.95" (the leader's write
// amplification and the followers' mean), noting a leader change;
// "leader and followers unknown" without roles.
func roleWriteAmpText(leader, followers float64, changed bool) string {
	if leader == 0 && followers == 0 {
		return "leader and followers unknown"
	}
	t := fmt.Sprintf("leader %.2f, followers %.2f", leader, followers)
	if changed {
		t += "; the leader changed in the window"
	}
	return t
}

// roleCell is roleWriteAmpText for a table cell: "4.10 / 3.95", "-"
// without roles, a "*" after a leader change.
func roleCell(leader, followers float64, changed bool) string {
	if leader == 0 && followers == 0 {
		return "-"
	}
	t := f2(leader) + " / " + f2(followers)
	if changed {
		t += " (leader changed)"
	}
	return t
}

// nodeWriteAmpText is each node's write amplification in w (its bytes
// over user bytes), its role and its bytes by cause per user byte:
// "node 1 leader 4.10 = log 1.00 + WAL 1.00 + flush 0.98 + compaction 1.12
// + other 0.00; node 2 follower ..."; "" without nodes or user bytes.
func nodeWriteAmpText(w windowStats, user float64) string {
	if user <= 0 || len(w.Nodes) == 0 {
		return ""
	}
	var parts []string
	for _, n := range w.Nodes {
		role := "follower"
		switch {
		case !n.Scraped:
			role = "(role unknown)"
		case n.Leader:
			role = "leader"
		}
		t := fmt.Sprintf("node %d %s %.2f", n.ID, role, n.WriteBytes/user)
		if c := causeText(n.WrittenBytesByCause, n.WriteBytes, user); c != "" {
			t += " = " + c
		}
		parts = append(parts, t)
	}
	return strings.Join(parts, "; ")
}

// causeText is "log 1.00 + WAL 1.00 + other 0.01": bytes by cause over
// user, in probe.WriteCauses order, then what of total no cause names; "" when
// by is empty.
func causeText(by map[string]float64, total, user float64) string {
	if len(by) == 0 || user <= 0 {
		return ""
	}
	var parts []string
	sum := 0.0
	for _, c := range probe.WriteCauses() {
		if v, ok := by[c.Key]; ok {
			parts = append(parts, fmt.Sprintf("%s %.2f", c.Short, v/user))
			sum += v
		}
	}
	return strings.Join(append(parts, fmt.Sprintf("other %.2f", (total-sum)/user)), " + ")
}

// withRoles are the runs of rs whose window knew the leader and followers.
func withRoles(rs []putRun) []putRun {
	return slices.DeleteFunc(slices.Clone(rs), func(r putRun) bool { return r.LeaderWriteAmp == 0 && r.FollowerWriteAmp == 0 })
}

// roleMedians are the medians of the leader's and the followers' write
// amplification over the runs of rs that know them; ok is false if none
// does.
func roleMedians(rs []putRun) (leader, followers float64, ok bool) {
	rs = withRoles(rs)
	if len(rs) == 0 {
		return 0, 0, false
	}
	return medianOf(rs, func(r putRun) float64 { return r.LeaderWriteAmp }), medianOf(rs, func(r putRun) float64 { return r.FollowerWriteAmp }), true
}

// causeTable gathers, run by run, the leader's and the followers' bytes by
// cause per user byte, and makes them a table with a column per cause that
// any run has.
type causeTable struct {
	title string
	rows  []causeRow
}

type causeRow struct {
	system, data, role string
	writeAmp           float64
	// byCause per user byte; other is what no cause names.
	byCause map[string]float64
	other   float64
}

// add adds r's leader and followers (nothing if r's window has no roles
// or causes).
func (t *causeTable) add(r putRun) {
	lc, fc, ok := r.Window.roleCauseBytes()
	lb, fb, ok2 := r.Window.roleWriteBytes()
	if !ok || !ok2 || r.UserBytes <= 0 || len(lc) == 0 && len(fc) == 0 {
		return
	}
	for _, role := range []struct {
		name   string
		by     map[string]float64
		writes float64
	}{{"leader", lc, lb}, {"followers (mean)", fc, fb}} {
		row := causeRow{system: r.System, data: bytesText(r.DataBytes), role: role.name, writeAmp: role.writes / r.UserBytes, byCause: map[string]float64{}}
		sum := 0.0
		for k, v := range role.by {
			row.byCause[k] = v / r.UserBytes
			sum += v
		}
		row.other = (role.writes - sum) / r.UserBytes
		if role.name == "leader" && r.Window.LeaderChanged {
			row.role += " (changed in the window)"
		}
		t.rows = append(t.rows, row)
	}
}

// table renders the rows; ok is false without any.
func (t *causeTable) table() (Table, bool) {
	if len(t.rows) == 0 {
		return Table{}, false
	}
	var causes []probe.WriteCause
	for _, c := range probe.WriteCauses() {
		if slices.ContainsFunc(t.rows, func(r causeRow) bool { return r.byCause[c.Key] != 0 }) {
			causes = append(causes, c)
		}
	}
	out := Table{Title: t.title, Columns: []string{"system", "data/node", "node", "write amp"}}
	for _, c := range causes {
		out.Columns = append(out.Columns, c.Short)
	}
	out.Columns = append(out.Columns, "other")
	for _, r := range t.rows {
		cells := []string{r.system, r.data, r.role, f2(r.writeAmp)}
		for _, c := range causes {
			cells = append(cells, f2(r.byCause[c.Key]))
		}
		out.Rows = append(out.Rows, append(cells, f2(r.other)))
	}
	return out, true
}
