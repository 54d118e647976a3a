#!/usr/bin/env bash
# Benchmark: observing 300 Package resources costs one parse of the dpkg
# status database per pass (issue 7). `datum plan` over a generated
# repository of 300 `type: Package` documents (each pinned to the version
# installed, so the plan is all "unchanged" and changes nothing) against
# this machine's real /var/lib/dpkg/status, side by side with
# `dpkg-query -W` for the same 300 packages (one process) and with one
# `dpkg -s` per package (what a provider that shells out per resource pays).
# Not a test: prints a table and appends rows to a TSV.
#
#   bench/packages.sh [SHARED_BENCH_DIR]     (default ../shared/bench)
#
# Read-only on the machine: plan never applies, and the repository lives
# under $BENCH_ROOT (default /var/tmp/datum-bench/packages).
set -euo pipefail
cd "$(dirname "$0")/.."
SB=${1:-../shared/bench}
W=${BENCH_ROOT:-/var/tmp/datum-bench}/packages
RUNS=${RUNS:-10}
N=${PACKAGES:-300}
mkdir -p "$W"

# Others may be mid-edit in a shared tree: fall back to the last build.
cargo build --release --quiet -p datum || {
  [ -x target/release/datum ] || exit 1
  echo "warning: build failed; timing the existing target/release/datum" >&2
}

# The first N installed packages, by name, with their versions.
dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Version}\n' |
  awk -v n="$N" '$1 == "ii" && c < n { print $2, $3; c++ }' >"$W/packages.txt"
have=$(wc -l <"$W/packages.txt")
[ "$have" -eq "$N" ] || { echo "only $have installed packages here, need $N" >&2; exit 1; }

write_repo() { # DIR COUNT
  rm -rf "$1"
  mkdir -p "$1/base"
  printf 'datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n' >"$1/datum.yaml"
  awk -v n="$2" 'NR <= n {
    printf "---\ndatum: v1alpha1\ntype: Package\nname: p%d\ndesired:\n  name: %s\n  version: \"%s\"\n", NR, $1, $2
  }' "$W/packages.txt" >"$1/base/packages.yaml"
}
write_repo "$W/repo" "$N"
write_repo "$W/repo-1" 1
printf 'name: bench\nlabels: {}\n' >"$W/host.yaml"

datum=(./target/release/datum --root / --host-file "$W/host.yaml")
out=$("${datum[@]}" --repo "$W/repo" plan) || { echo "datum plan failed or found changes:" >&2; echo "$out" >&2; exit 1; }
echo "$out" | tail -n 1

# One parse per pass: the status file is opened once however many
# Package resources there are.
if command -v strace >/dev/null; then
  opens=$(strace -f -e trace=openat -o /dev/stdout "${datum[@]}" --repo "$W/repo" plan 2>/dev/null |
    grep -c 'var/lib/dpkg/status"' || true)
  echo "status file opened $opens time(s) for $N Package resources"
fi

names=$(cut -d' ' -f1 "$W/packages.txt" | tr '\n' ' ')
stanzas=$(grep -c '^Package:' /var/lib/dpkg/status)
size=$(stat -c %s /var/lib/dpkg/status)
tsv="$W/results.tsv"
T() { python3 "$SB/timecmd.py" --tsv "$tsv" --files "$N" "$@"; }
echo "== $N packages (status file: $stanzas stanzas, $size bytes), warm cache, median [min-max]"
T --label "datum plan, $N Package resources" -n "$RUNS" --warmup 1 -- "${datum[@]}" --repo "$W/repo" plan
T --label "datum plan, 1 Package resource" -n "$RUNS" --warmup 1 -- "${datum[@]}" --repo "$W/repo-1" plan
# shellcheck disable=SC2086 # the names are meant to be split
T --label "dpkg-query -W, $N names" -n "$RUNS" --warmup 1 -- dpkg-query -W $names
T --label "$N x dpkg -s" -n 3 --warmup 1 -- sh -c 'for p in $0 "$@"; do dpkg -s "$p" >/dev/null; done' $names
echo "rows appended to $tsv"
