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
# Every run starts from an empty live root of its own: only the estate's
# directories exist (neither tool is asked to create them), no file, and for
# Datum no state store either (a real first apply: compile, observe 2,000
# absent paths, stage, fsync and rename every file, record them). Puppet
# gets the same files from gen-cm-peers.py's manifest (`source`, `checksum
# => sha256`, owner, group, mode) into a fresh destination. The sides
# alternate, one run each per round, RUNS rounds (default 5) after one
# untimed warm-up each. Each run is timed by timecmd.py (whole process); the
# table gives the median [min-max] of the runs.
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
skeleton() {
	mkdir -p "$1/estate"
	(cd "$W/src" && find . -mindepth 1 -type d -print0) | (cd "$1/estate" && xargs -0 -r mkdir -p)
}

# Every run gets its own fresh root (Datum) or destination (Puppet, with
# its manifest pointed there), made before the first run: nothing is
# deleted while runs are timed (ext4 avoids reusing inodes deleted moments
# ago, and a run right after a mass deletion pays for searching past them,
# which a first apply on a host does not).
rm -rf "$W/runs"
mkdir -p "$W/runs"
sides=(datum puppet)
[ -n "${BASELINE:-}" ] && sides+=(baseline)
for i in $(seq 0 "$RUNS"); do
	for side in "${sides[@]}"; do
		skeleton "$W/runs/$side-$i"
	done
	sed "s#'$W/puppet/estate/#'$W/runs/puppet-$i/estate/#" "$W/cm/puppet-files.pp" >"$W/runs/puppet-$i.pp"
done
sync
BASELINE=${BASELINE:+$(realpath "$BASELINE")}
cmd() { # side run
	case $1 in
	datum) echo "$DATUM" --repo "$W/repo" --root "$W/runs/datum-$2" --host-file "$W/host.yaml" apply ;;
	baseline) echo "$BASELINE" --repo "$W/repo" --root "$W/runs/baseline-$2" --host-file "$W/host.yaml" apply ;;
	puppet) echo puppet apply --detailed-exitcodes "$W/runs/puppet-$2.pp" ;;
	esac
}
label() {
	case $1 in
	datum) echo "datum apply (first)" ;;
	baseline) echo "datum apply (first, baseline)" ;;
	puppet) echo "puppet apply (first)" ;;
	esac
}
check() { # side run
	local got
	got=$(find "$W/runs/$1-$2/estate" -type f | wc -l)
	[ "$got" = "$N" ] || { echo "$(label "$1") wrote $got files, not $N" >&2; exit 1; }
}

# Let the regenerated repository settle.
sleep 3
tsv="$W/results.tsv"
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
echo "== first apply of $N new files ($((bytes / 1000000)) MB), $RUNS runs each, alternating (${sides[*]}); load: $(cut -d' ' -f1-3 /proc/loadavg)"
# Warm-up (page cache of the declared copy, Puppet's Ruby): run 0, not counted.
for side in "${sides[@]}"; do
	# shellcheck disable=SC2046
	$(cmd "$side" 0) >/dev/null 2>&1 || [ $? = 2 ] || { echo "$(label "$side") failed" >&2; exit 1; }
	check "$side" 0
done
for i in $(seq 1 "$RUNS"); do
	for side in "${sides[@]}"; do
		# shellcheck disable=SC2046
		python3 "$SB/timecmd.py" --tsv "$rows" --label "$(label "$side")" -n 1 --warmup 0 \
			--files "$N" --bytes "$bytes" -- $(cmd "$side" "$i") >/dev/null
		check "$side" "$i"
	done
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
rm -rf "$W/runs"
echo "rows appended to $tsv"
