#!/usr/bin/env python3
"""Markdown report and figure of one scripts/flush-latency.sh run.

    scripts/flush-latency-report.py OUT

Reads OUT/bench.txt (Go benchmark lines BenchmarkPut/delay=D/cnums=N/bin=B,
each round after a "# round N" line) and OUT/config.txt, and writes:

  - OUT/report.md (also printed): per client count and added fsync
    latency, each binary's median [min..max] goodput in MB/s, that median
    as a fraction of the binary's own median without added latency, its
    median node CPU per operation and p99 latency, and head over old round
    by round (both measured in the same round, minutes apart);
  - OUT/figures.json: one Lines figure, goodput against the added
    latency, a series per binary and client count with min..max bars
    (`nezha plot OUT` draws it).

Exits 2 on a bad argument or when OUT has no benchmark line.
"""
import collections
import json
import os
import re
import statistics
import sys

LINE_RE = re.compile(r"^BenchmarkPut/delay=([^/]+)/cnums=(\d+)/bin=(\w+)\s+\d+\s+(.*)$")
ROUND_RE = re.compile(r"^# round (\d+)\s*$")
BINS = ("head", "old")
LABEL = {"head": "bin/nezha", "old": "OLD"}


def die(msg):
    print(f"flush-latency-report: {msg}", file=sys.stderr)
    sys.exit(2)


def delay_ms(d):
    """"0", "500us", "2ms", "1.5s" -> milliseconds."""
    if d == "0":
        return 0.0
    m = re.fullmatch(r"([0-9.]+)(us|µs|ms|s)", d)
    if not m:
        die(f"cannot read the delay {d!r}")
    return float(m.group(1)) * {"us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]


def metrics(rest):
    """'1253089 ns/op 798.0 ops/s ...' -> {'ns/op': 1253089.0, ...}."""
    f = rest.split()
    return {f[i + 1]: float(f[i]) for i in range(0, len(f) - 1, 2)}


def fmt(v, digits=0):
    return f"{v:,.{digits}f}"


def main():
    if len(sys.argv) != 2:
        die("usage: scripts/flush-latency-report.py OUT")
    out = sys.argv[1]
    path = os.path.join(out, "bench.txt")
    if not os.path.isfile(path):
        die(f"{path} is missing (scripts/flush-latency.sh writes it)")
    # runs[(cnums, delay, bin)] = [(round, metrics)]
    runs = collections.defaultdict(list)
    rnd = 0
    with open(path) as f:
        for line in f:
            m = ROUND_RE.match(line)
            if m:
                rnd = int(m.group(1))
                continue
            m = LINE_RE.match(line)
            if m:
                d, n, b, rest = m.groups()
                runs[(int(n), d, b)].append((rnd, metrics(rest)))
    if not runs:
        die(f"{path} has no benchmark line")
    clients = sorted({k[0] for k in runs}, reverse=True)
    delays = sorted({k[1] for k in runs}, key=delay_ms)
    bins = [b for b in BINS if any(k[2] == b for k in runs)]

    def values(n, d, b, unit):
        return [m[unit] for _, m in runs.get((n, d, b), []) if unit in m]

    def med(n, d, b, unit):
        v = values(n, d, b, unit)
        return statistics.median(v) if v else None

    lines = ["# Goodput when flushes slow down", ""]
    cfg = os.path.join(out, "config.txt")
    if os.path.isfile(cfg):
        lines += ["```", open(cfg).read().rstrip(), "```", ""]
    lines += [
        "256 KiB PUT goodput (MB/s, median [min..max] over the rounds) against a fixed latency added to",
        "every fsync of every node; \"of own\" is that median over the same binary's median without added",
        "latency; node CPU per operation and p99 latency are medians.",
        "",
    ]
    for n in clients:
        head = f"| {n} clients, added fsync latency |"
        sep = "|---|"
        for b in bins:
            head += f" {LABEL[b]} MB/s | of own | CPU µs/op | p99 ms |"
            sep += "---|---|---|---|"
        if len(bins) == 2:
            head += " bin/nezha over OLD, per round |"
            sep += "---|"
        lines += [head, sep]
        for d in delays:
            row = f"| {d} |"
            for b in bins:
                v = values(n, d, b, "MB/s")
                if not v:
                    row += " - | - | - | - |"
                    continue
                own = med(n, "0", b, "MB/s")
                of_own = f"{statistics.median(v) / own:.2f}" if own else "-"
                cpu = med(n, d, b, "node-cpu-us/op")
                p99 = med(n, d, b, "p99-us")
                row += (f" {fmt(statistics.median(v))} [{fmt(min(v))}..{fmt(max(v))}] | {of_own} |"
                        f" {fmt(cpu) if cpu is not None else '-'} | {fmt(p99 / 1000) if p99 is not None else '-'} |")
            if len(bins) == 2:
                by_round = {}
                for r, m in runs.get((n, d, "head"), []):
                    by_round.setdefault(r, {})["head"] = m.get("MB/s")
                for r, m in runs.get((n, d, "old"), []):
                    by_round.setdefault(r, {})["old"] = m.get("MB/s")
                ratios = [x["head"] / x["old"] for _, x in sorted(by_round.items()) if x.get("head") and x.get("old")]
                row += " " + (", ".join(f"{x:.2f}x" for x in ratios) or "-") + " |"
            lines.append(row)
        lines.append("")
    lines += ["The figure, goodput against the added latency: flush-latency.svg beside this report in OUT", "(`nezha plot OUT` draws it from OUT/figures.json).", ""]
    report = "\n".join(lines)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(report)
    print(report)

    series = []
    for b in bins:
        for n in clients:
            xs, ys, lo, hi, ns = [], [], [], [], []
            for d in delays:
                v = values(n, d, b, "MB/s")
                if not v:
                    continue
                m = statistics.median(v)
                xs.append(delay_ms(d))
                ys.append(m)
                lo.append(m - min(v))
                hi.append(max(v) - m)
                ns.append(len(v))
            if xs:
                series.append({"name": f"{LABEL[b]}, {n} clients", "x": xs, "y": ys, "errors": lo, "errors_up": hi, "n": ns})
    fig = {
        "name": "flush-latency",
        "title": "256 KiB PUT goodput when every fsync is slower (nezha-nogc, 3 nodes)",
        "kind": "lines",
        "x_label": "latency added to every fsync (ms)",
        "y_label": "goodput (MB/s)",
        "series": series,
        "caption": "Medians over the rounds, bars from min to max; bench -fsyncDelay on every node.",
    }
    with open(os.path.join(out, "figures.json"), "w") as f:
        json.dump([fig], f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
