#!/usr/bin/env bash
# Runs a measuring command and keeps what it printed as a dated record,
# docs/results/<date>-NAME.md: the command, when it ran and how long it
# took, the commit, the machine (and its load while it ran), then the
# output as the command printed it, or with -file FILE that file as the
# command left it (a Markdown report is kept as Markdown, anything else as
# a code block); with -figures DIR, the SVG files the command left in DIR
# are kept beside the record, in docs/results/<date>-NAME/, and shown at
# its end. Figures in docs/ and the README come from such records
# (or from `nezha experiment record`), never from typing.
#
#   scripts/record.sh NAME [-file FILE] [-figures DIR] -- COMMAND [ARG...]
#   scripts/record.sh memory-index -- go test -run xxx -bench 'BenchmarkMemoryIndex$/keys=1M' -short ./nezha/
#   scripts/record.sh peer-table -file /tmp/pt/report.md -- scripts/peer-table.sh /tmp/pt 3
#
# The command runs from the repository's root. A record is never replaced
# (use another NAME); a command that fails leaves no record, and the
# script exits with its status. RECORD_DIR overrides docs/results.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
usage() { echo "usage: scripts/record.sh NAME [-file FILE] [-figures DIR] -- COMMAND [ARG...]" >&2; exit 2; }
[ $# -ge 1 ] || usage
name=$1; shift
case $name in '' | -* | */* | .*) echo "record: NAME '$name' must be a file name (no '/', not starting with '-' or '.')" >&2; exit 2 ;; esac
file=""
if [ "${1:-}" = "-file" ]; then
  [ $# -ge 2 ] || usage
  file=$2; shift 2
fi
figures=""
if [ "${1:-}" = "-figures" ]; then
  [ $# -ge 2 ] || usage
  figures=$2; shift 2
fi
[ "${1:-}" = "--" ] || usage
shift
[ $# -ge 1 ] || usage

dir=${RECORD_DIR:-docs/results}
out="$dir/$(date -u +%F)-$name.md"
if [ -e "$out" ]; then
  echo "record: $out exists; records are not replaced (choose another NAME)" >&2
  exit 2
fi

commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  commit="$commit+dirty (uncommitted changes)"
fi
cpu=$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo 2>/dev/null)
mem=$(awk '/^MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo 2>/dev/null)
machine="$(hostname), $(nproc) CPUs (${cpu:-unknown model}), $mem of memory, kernel $(uname -r)"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u '+%F %T UTC')
t0=$(date +%s)

log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
took=$(( $(date +%s) - t0 ))
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
if [ "$status" -ne 0 ]; then
  echo "record: the command exited $status; no record written" >&2
  exit "$status"
fi
if [ -n "$file" ] && [ ! -f "$file" ]; then
  echo "record: the command left no $file; no record written" >&2
  exit 1
fi
svgs=()
if [ -n "$figures" ]; then
  shopt -s nullglob
  svgs=("$figures"/*.svg)
  shopt -u nullglob
  if [ ${#svgs[@]} -eq 0 ]; then
    echo "record: the command left no SVG in $figures; no record written" >&2
    exit 1
  fi
fi

# The command as one line a shell reads back: words of plain characters
# as they are, others in single quotes.
cmdline=""
for w in "$@"; do
  if [[ $w =~ ^[A-Za-z0-9_./=:,+@%-]+$ ]]; then q=$w; else q="'${w//\'/\'\\\'\'}'"; fi
  cmdline+="${cmdline:+ }$q"
done
mkdir -p "$dir"
{
  echo "# $name"
  echo
  echo "Written by \`scripts/record.sh\` from what the command printed$([ -n "$file" ] && echo " (here: the file $file it wrote)")."
  echo
  echo "- command: \`$cmdline\`"
  echo "- started: $started, took ${took} s"
  echo "- commit: $commit"
  echo "- machine: $machine"
  echo "- load average (1, 5, 15 min) before and after: $load_before; $load_after"
  echo
  if [ -n "$file" ] && [[ $file == *.md ]]; then
    # A Markdown report: its headings (outside code blocks) one level down,
    # under the record's.
    awk '/^```/{fence=!fence} !fence && /^#/{$0="#" $0} {print}' "$file"
  else
    echo '```'
    if [ -n "$file" ]; then cat "$file"; else cat "$log"; fi
    echo '```'
  fi
  if [ ${#svgs[@]} -gt 0 ]; then
    stem=$(basename "$out" .md)
    mkdir -p "$dir/$stem"
    echo
    for f in "${svgs[@]}"; do
      cp "$f" "$dir/$stem/"
      echo "![$(basename "$f" .svg)]($stem/$(basename "$f"))"
    done
  fi
} > "$out"
echo "record: $out"
