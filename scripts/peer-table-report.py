#!/usr/bin/env python3
"""Markdown report of one scripts/peer-table.sh run: OUT/report.md.

    scripts/peer-table-report.py OUT

Reads the files peer-table.sh writes in OUT (harness.txt, etcdtool.txt,
cpu.txt: Go benchmark lines; progress.log: the disk limits; config.txt, if
there, the run's builds and settings) and writes OUT/report.md, which it also
prints:

  - each workload's median [min..max] over the rounds for etcd, original and
    nezha, through the harness and through etcd's benchmark tool;
  - each system's ratio to etcd, round by round: both measured in the same
    round, minutes apart, so the ratio holds where the machine's speed,
    which drifts by tens of percent between minutes, does not;
  - node CPU seconds per GiB of 256 KiB PUT goodput, bin/nezha against OLD
    per round, and nezha-nogc's goodput as a fraction of the round's disk
    limit / 3 (every node writes every byte on the one disk).

A round is the "# round N" line peer-table.sh writes before it; files of
runs before those lines count the Nth line of a benchmark as round N.
Exits 2 on a bad argument or when OUT has no harness.txt.
"""
import collections
import os
import re
import statistics
import sys

SYSTEMS = ("etcd", "original", "nezha")
# (row label, benchmark name without /system=..., unit) through the harness.
HARNESS_ROWS = (
    ("100 B PUT, 1000 clients, ops/s", "BenchmarkPut/vsize=100/cnums=1000", "ops/s"),
    ("linearizable GET, 100 clients, ops/s", "BenchmarkGet/consistency=linearizable/cnums=100", "ops/s"),
    ("stale (serializable) GET, 100 clients, ops/s", "BenchmarkGet/consistency=stale/cnums=100", "ops/s"),
    ("256 KiB PUT, 50 clients, MB/s", "BenchmarkPut/vsize=262144/cnums=50", "MB/s"),
)
TOOL_ROWS = (
    ("put 100 B, 1000 clients over 100 connections, req/s", "BenchmarkEtcdTool/op=put100", "req/s"),
    ("range, linearizable, 100 clients, req/s", "BenchmarkEtcdTool/op=rangeL", "req/s"),
    ("range, serializable, 100 clients, req/s", "BenchmarkEtcdTool/op=rangeS", "req/s"),
    ("put 256 KiB, 50 clients over 50 connections, req/s", "BenchmarkEtcdTool/op=put256k", "req/s"),
)
ROUND_RE = re.compile(r"^# round (\d+)\s*$")
DISK_RE = re.compile(r"^([0-9.]+) MB/s in 1024 KiB")
LOG_ROUND_RE = re.compile(r"\] round (\d+) of \d+: disk limit$")


def die(msg):
    print(f"peer-table-report: {msg}", file=sys.stderr)
    sys.exit(2)


def read_bench(path):
    """{(name without /system=S, system or None): {round: {unit: value}}}."""
    out = collections.defaultdict(dict)
    if not os.path.exists(path):
        return out
    rnd, seen = None, collections.Counter()
    with open(path) as f:
        for line in f:
            m = ROUND_RE.match(line)
            if m:
                rnd = int(m.group(1))
                continue
            fields = line.split()
            if not fields or not fields[0].startswith("Benchmark"):
                continue
            parts = fields[0].split("/")
            system = next((p[len("system="):] for p in parts if p.startswith("system=")), None)
            name = "/".join(p for p in parts if not p.startswith("system="))
            key = (name, system)
            seen[key] += 1
            r = rnd if rnd is not None else seen[key]
            # Go benchmark lines: name, iterations, then value-unit pairs.
            values = {}
            for i in range(2, len(fields) - 1, 2):
                try:
                    values[fields[i + 1]] = float(fields[i])
                except ValueError:
                    pass
            out[key][r] = values
    return out


def cell(values):
    if not values:
        return "-"
    v = sorted(values)
    return f"{fmt(statistics.median(v))} [{fmt(v[0])}..{fmt(v[-1])}]"


def fmt(x):
    """x with thousands separators (3 significant digits under 100), or "-" for None."""
    if x is None:
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:,.3g}"


def table(title, rows, bench):
    lines = [f"| {title} | " + " | ".join(SYSTEMS) + " | original / etcd by round | nezha / etcd by round |",
             "|---" * (len(SYSTEMS) + 3) + "|"]
    for label, name, unit in rows:
        per = {s: {r: v[unit] for r, v in bench.get((name, s), {}).items() if unit in v} for s in SYSTEMS}
        cols = [cell(list(per[s].values())) for s in SYSTEMS]
        for s in ("original", "nezha"):
            rounds = sorted(set(per[s]) & set(per["etcd"]))
            ratios = [per[s][r] / per["etcd"][r] for r in rounds if per["etcd"][r] > 0]
            if not ratios:
                cols.append("-")
                continue
            ahead = sum(x > 1 for x in ratios)
            cols.append(", ".join(f"{x:.2f}x" for x in ratios) + f" (ahead in {ahead} of {len(ratios)})")
        lines.append(f"| {label} | " + " | ".join(cols) + " |")
    return lines


def main():
    if len(sys.argv) != 2:
        die("usage: scripts/peer-table-report.py OUT")
    out = sys.argv[1]
    if not os.path.exists(os.path.join(out, "harness.txt")):
        die(f"{out}/harness.txt missing: not a scripts/peer-table.sh output directory")
    report = ["# Peer table", ""]
    cfg = os.path.join(out, "config.txt")
    if os.path.exists(cfg):
        with open(cfg) as f:
            report += ["```", f.read().rstrip("\n"), "```", ""]
    report += ["Medians [min..max] over the rounds; ratios to etcd are per round (both systems in the same round).", ""]
    report += table("through the harness (`nezha bench`)", HARNESS_ROWS, read_bench(os.path.join(out, "harness.txt")))
    tool = read_bench(os.path.join(out, "etcdtool.txt"))
    if tool:
        report += [""] + table("through etcd's benchmark tool (etcd API)", TOOL_ROWS, tool)

    disks = {}  # round -> disk limit, MB/s
    if os.path.exists(os.path.join(out, "progress.log")):
        with open(os.path.join(out, "progress.log")) as f:
            rnd = 0
            for line in f:
                if m := LOG_ROUND_RE.search(line):
                    rnd = int(m.group(1))
                elif (m := DISK_RE.match(line)) and rnd not in disks:
                    disks[rnd] = float(m.group(1))
    cpu = read_bench(os.path.join(out, "cpu.txt"))
    head = cpu.get(("BenchmarkCPUPerGiB/bin=head", None), {})
    old = cpu.get(("BenchmarkCPUPerGiB/bin=old", None), {})
    if head:
        report += ["", "| round | disk limit, MB/s | nezha-nogc goodput, MB/s | of the disk limit / 3 "
                   "| node CPU s per GiB, bin/nezha | the same, OLD | bin/nezha / OLD |", "|---" * 7 + "|"]
        for r in sorted(head):
            h, o = head[r], old.get(r, {})
            disk = disks.get(r)
            mbs = h.get("MB/s")
            frac = f"{100 * mbs / (disk / 3):.0f} %" if disk and mbs is not None else "-"
            head_s, old_s = h.get("node-cpu-s/GiB"), o.get("node-cpu-s/GiB")
            ratio = f"{head_s / old_s:.2f}x" if head_s is not None and old_s else "-"
            report.append(f"| {r} | {fmt(disk)} | {fmt(mbs)} | {frac} | {fmt(head_s)} | {fmt(old_s)} | {ratio} |")
    text = "\n".join(report) + "\n"
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
