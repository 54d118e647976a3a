#!/usr/bin/env bash
# Benchmark: a first `datum apply` of 2,000 new files, side by side in one
# run with `puppet apply` of the same files (issue 17). Not a test: prints a
# table and appends rows to a TSV.
#
#   bench/apply-first.sh [SHARED_BENCH_DIR]     (default ../shared/bench)
#
# BASELINE=path/to/another/datum adds a third side, alternated with the two
# others in the same rounds (an older build: before and after side by side
# under the same load). DATUM=path picks the binary measured (default the
# release build, built first unless NO_BUILD=1).
#
# Every run starts from an empty live root: only the estate's directories
# exist (neither tool is asked to create them), no file, and for Datum no
# state store either (a real first apply: compile, observe 2,000 absent
# paths, stage, fsync and rename every file, record them). Puppet gets the
# same files from gen-cm-peers.py's manifest (`source`, `checksum =>
# sha256`, owner, group, mode) into a fresh destination. The two sides
# alternate, one run each per round, RUNS rounds (default 5) after one
# untimed warm-up each; the resets between runs are not timed and end with a
# `sync`, so no run pays for the other's writeback. Each run is timed
# by timecmd.py (whole process); the table gives the median [min-max] of the
# runs.
#
# Needs root (owner root is declared) and Debian's puppet package
# (installed if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
SB=$(cd "${1:-../shared/bench}" && pwd)
W=${BENCH_ROOT:-/var/tmp/datum-bench}/apply-first
RUNS=${RUNS:-5}
N=${FILES:-2000}
DATUM=${DATUM:-./target/release/datum}
mkdir -p "$W"

command -v puppet >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq puppet >/dev/null; }
[ -n "${NO_BUILD:-}" ] || cargo build --release --quiet -p datum
DATUM=$(realpath "$DATUM")

# One deterministic estate: the declared copy.
args=(--files "$N" --dirs 40 --seed 2002)
[ -d "$W/src" ] || python3 "$SB/make-estate.py" "${args[@]}" "$W/src" >/dev/null
python3 bench/make-datum-repo.py "$W/src" "$W/repo" /estate >/dev/null
python3 "$SB/gen-cm-peers.py" "$W/src" "$W/puppet/estate" "$W/cm" >/dev/null
printf 'name: bench\nlabels: {}\n' >"$W/host.yaml"
bytes=$(find "$W/src" -type f -printf '%s\n' | awk '{s += $1} END {print s}')

# An empty live tree at $1/estate: the estate's directories, nothing else.
fresh() {
	rm -rf "$1"
	mkdir -p "$1/estate"
	(cd "$W/src" && find . -mindepth 1 -type d -print0) | (cd "$1/estate" && xargs -0 -r mkdir -p)
	sync
}

datum=("$DATUM" --repo "$W/repo" --root "$W/root" --host-file "$W/host.yaml" apply)
BASELINE=${BASELINE:+$(realpath "$BASELINE")}
baseline=("$BASELINE" --repo "$W/repo" --root "$W/root" --host-file "$W/host.yaml" apply)
puppet=(puppet apply --detailed-exitcodes "$W/cm/puppet-files.pp")

# A file changed less than 2 s ago is compiled on every run anyway (there
# is no snapshot in an empty root), but let the repository settle.
sleep 3
tsv="$W/results.tsv"
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
T() {
	local label=$1
	shift
	python3 "$SB/timecmd.py" --tsv "$rows" --label "$label" -n 1 --warmup 0 --files "$N" --bytes "$bytes" -- "$@"
}
check_datum() {
	local got
	got=$(find "$W/root/estate" -type f | wc -l)
	[ "$got" = "$N" ] || { echo "datum apply wrote $got files, not $N" >&2; exit 1; }
}
check_puppet() {
	local got
	got=$(find "$W/puppet/estate" -type f | wc -l)
	[ "$got" = "$N" ] || { echo "puppet apply wrote $got files, not $N" >&2; exit 1; }
}

echo "== first apply of $N new files ($((bytes / 1000000)) MB), $RUNS runs each, alternating; load: $(cut -d' ' -f1-3 /proc/loadavg)"
# Warm-up (page cache of the declared copy, Puppet's Ruby): not counted.
fresh "$W/root"
"${datum[@]}" >/dev/null 2>&1 || [ $? = 2 ] || { echo "datum apply failed" >&2; "${datum[@]}"; exit 1; }
check_datum
fresh "$W/puppet"
"${puppet[@]}" >/dev/null 2>&1 || [ $? = 2 ] || { echo "puppet apply failed" >&2; exit 1; }
check_puppet
# Each side's tree is emptied right after its run, so its deletions are a
# whole run of the other side old when it runs again (ext4 avoids reusing
# inodes deleted moments ago, and searching past them costs a run that
# follows a mass deletion far more than a first apply on a host pays).
fresh "$W/root"
fresh "$W/puppet"
for _ in $(seq "$RUNS"); do
	T "datum apply (first)" "${datum[@]}" >/dev/null
	check_datum
	fresh "$W/root"
	T "puppet apply (first)" "${puppet[@]}" >/dev/null
	check_puppet
	fresh "$W/puppet"
	if [ -n "$BASELINE" ]; then
		T "datum apply (first, baseline)" "${baseline[@]}" >/dev/null
		check_datum
		fresh "$W/root"
	fi
done
load=$(cut -d' ' -f1-3 /proc/loadavg)
cat "$rows" >>"$tsv"

# Median [min-max] of the runs' wall, median CPU (user+sys) and peak RSS.
python3 - "$rows" "$load" "$N" <<'EOF'
import statistics as st, sys
rows, load, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
runs = {}
for line in open(rows):
    f = line.rstrip("\n").split("\t")
    runs.setdefault(f[0], []).append((float(f[3]), float(f[7]), float(f[8]), f[11]))
print("| command | wall s, median [min-max] | cpu s | peak MiB | µs/file | exit |")
print("| --- | --- | --- | --- | --- | --- |")
med = {}
for label, rs in runs.items():
    wall = [r[0] for r in rs]
    med[label] = st.median(wall)
    print("| `%s`, %d runs | %.3f [%.3f-%.3f] | %.3f | %.1f | %.0f | %s |" % (
        label, len(rs), med[label], min(wall), max(wall), st.median(r[1] for r in rs),
        st.median(r[2] for r in rs), med[label] / n * 1e6, ",".join(sorted({r[3] for r in rs}))))
d, p = med.get("datum apply (first)"), med.get("puppet apply (first)")
b = med.get("datum apply (first, baseline)")
print()
if d and p:
    print("Puppet / Datum (median wall): %.1fx" % (p / d))
if b and p:
    print("Puppet / baseline Datum (median wall): %.1fx" % (p / b))
print("load average at the end: %s" % load)
EOF
echo "rows appended to $tsv"
