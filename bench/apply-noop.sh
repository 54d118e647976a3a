#!/usr/bin/env bash
# Benchmark: a no-op `datum apply` over 2,000 File resources with content,
# side by side in one run with `puppet apply --noop` on the same files
# (issue 2). Not a test: prints a table and appends rows to a TSV.
#
#   bench/apply-noop.sh [SHARED_BENCH_DIR]     (default ../shared/bench)
#
# Needs root (owner checks) and Debian's puppet package (installed if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
SB=${1:-../shared/bench}
W=${BENCH_ROOT:-/var/tmp/datum-bench}/apply
RUNS=${RUNS:-5}
N=${FILES:-2000}
mkdir -p "$W"

command -v puppet >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq puppet >/dev/null; }
cargo build --release --quiet -p datum

# Two builds of one deterministic estate: the declared copy and the live one.
args=(--files "$N" --dirs 40 --seed 2002)
[ -d "$W/src" ] || python3 "$SB/make-estate.py" "${args[@]}" "$W/src" >/dev/null
[ -d "$W/root/estate" ] || { mkdir -p "$W/root"; python3 "$SB/make-estate.py" "${args[@]}" "$W/root/estate" >/dev/null; }
python3 bench/make-datum-repo.py "$W/src" "$W/repo" /estate >/dev/null
python3 "$SB/gen-cm-peers.py" "$W/src" "$W/root/estate" "$W/cm" >/dev/null
printf 'name: bench\nlabels: {}\n' >"$W/host.yaml"

datum=(./target/release/datum --repo "$W/repo" --root "$W/root" --host-file "$W/host.yaml")
# The first apply converges owners and modes and fills the state store; it
# must leave nothing to do.
"${datum[@]}" apply >/dev/null || true
"${datum[@]}" apply >/dev/null || { echo "datum apply is not a no-op on the bench estate" >&2; exit 1; }

# make-datum-repo.py has just rewritten the manifest: a repository changed
# less than 2 s ago is compiled on every run (the snapshot's racy window).
# Two rows each: compiling (the snapshot removed before every run, which is
# what a changed repository costs) and the steady state of a quiet host
# (the settled repository's catalogue snapshot reused).
sleep 3
snapshot="$W/root/var/lib/datum/state.catalogue"
tsv="$W/results.tsv"
T() { python3 "$SB/timecmd.py" --tsv "$tsv" --files "$N" "$@"; }
echo "== $N files, warm cache, $RUNS runs each (median [min-max])"
T --label "datum apply (no-op, compiling)" -n "$RUNS" --warmup 1 -- sh -c 'rm -f "$0"; exec "$@"' "$snapshot" "${datum[@]}" apply
T --label "datum apply (no-op, snapshot)" -n "$RUNS" --warmup 1 -- "${datum[@]}" apply
T --label "datum plan (snapshot)" -n "$RUNS" --warmup 1 -- "${datum[@]}" plan
T --label "puppet apply --noop" -n 3 --warmup 1 -- puppet apply --noop --detailed-exitcodes "$W/cm/puppet-files.pp"
echo "rows appended to $tsv"
