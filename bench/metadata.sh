#!/usr/bin/env bash
# The metadata pass (`datum check --sample 0`) on the standard estate (20,000 Files),
# side by side: two builds (BEFORE, AFTER), each on an ordinary repository folder and on
# the same repository deployed as a `datum pull` checkout, and `find -printf` (issue 17,
# "the metadata pass stats twice"). A benchmark, not a timed test.
#
#   sudo bench/metadata.sh
#
# What it shows: how many stat calls a pass makes (strace -c, one run per row, not
# timed), and wall/CPU/peak RSS (timecmd.py) in ROUNDS rounds whose row order rotates,
# so a change in the machine's load falls on every row alike. With BUSY=1 a busy loop
# holds one core for the whole run (the issue's "other core busy" case).
#
# The pull checkout is made to look exactly like one `datum pull` writes (no git, no
# signature: those are the pull's business, not the pass's): the repository copied to
# ROOT/var/lib/datum/pull/checkouts/COMMIT (private folders 0700) with a marker
# `.datum-revision.json` naming COMMIT, and a link ROOT/etc/datum/repository to it.
#
# Everything lives under its own root (default /var/tmp/i17-bench), a copy of
# bench/check.sh's estate and Files repository (run check.sh once first), so nobody
# else's state store or snapshot is touched. One state store per build and repository.
#
# Environment (defaults in brackets):
#   BENCH_ROOT [/var/tmp/drift-bench]  where check.sh made the estate and the repository
#   ROOT [/var/tmp/i17-bench]          this script's root
#   BEFORE [/var/tmp/bins/datum-main-base]  AFTER [<repo>/target/release/datum]
#   SHARED_BENCH [<repo>/../shared/bench]   ROUNDS [3]  RUNS [5]  BUSY [0]
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
SB=${SHARED_BENCH:-$REPO/../shared/bench}
D=${BENCH_ROOT:-/var/tmp/drift-bench}
R=${ROOT:-/var/tmp/i17-bench}
BEFORE=${BEFORE:-/var/tmp/bins/datum-main-base}
AFTER=${AFTER:-$REPO/target/release/datum}
ROUNDS=${ROUNDS:-3}; RUNS=${RUNS:-5}
PY=/usr/bin/python3
TSV=$R/metadata.tsv

[[ $(id -u) == 0 ]] || { echo "run as root" >&2; exit 1; }
[[ -d $D/standard && -f $D/check/files-repo/base/estate.yaml ]] ||
  { echo "run bench/check.sh first (it makes $D/standard and $D/check/files-repo)" >&2; exit 1; }

# ---------------------------------------------------------------- setup (idempotent)
COMMIT=$(printf 'datum metadata bench' | sha1sum | cut -c1-40)
CHECKOUT=$R/var/lib/datum/pull/checkouts/$COMMIT
mkdir -p "$R/var/lib/datum/pull/checkouts" "$R/etc/datum" "$R/state"
chmod 700 "$R/var/lib/datum" "$R/var/lib/datum/pull" "$R/var/lib/datum/pull/checkouts" "$R/state"
[[ -d $R/standard ]] || cp -a "$D/standard" "$R/standard"
[[ -d $R/plain-repo ]] || cp -a "$D/check/files-repo" "$R/plain-repo"
# Written once, marker last (as a pull does); never touched again, so that the stamp
# the BEFORE build keeps of it stays valid from one run of this script to the next.
if [[ ! -f $CHECKOUT/.datum-revision.json ]]; then
  rm -rf "$CHECKOUT"
  cp -a "$D/check/files-repo" "$CHECKOUT"
  printf '{"format_version":1,"commit":"%s","tree":"%s","ref":"main","source":"bundle:bench","signer":"bench@example.com","key":"ED25519 SHA256:bench","checked_out_at":%s}\n' \
    "$COMMIT" "$(printf tree | sha1sum | cut -c1-40)" "$(date +%s)" > "$CHECKOUT/.datum-revision.json"
fi
ln -sfn "../../var/lib/datum/pull/checkouts/$COMMIT" "$R/etc/datum/repository"
printf 'name: bench\nlabels: {}\n' > "$R/host.yaml"

datum() { # datum BIN REPO STATE ARGS...
  local bin=$1 repo=$2 state=$3; shift 3
  "$bin" --repo "$repo" --root "$R" --host-file "$R/host.yaml" --state "$R/state/$state.db" "$@"
}
rows=()
for b in before after; do
  bin=BEFORE; [[ $b == after ]] && bin=AFTER
  for r in plain pull; do
    repo=$R/plain-repo; [[ $r == pull ]] && repo=$R/etc/datum/repository
    # A verified apply records the metadata the pass trusts; then a check remembers
    # the catalogue, and the pass must trust all 20,000 files from the snapshot.
    datum "${!bin}" "$repo" "$b-$r" apply >/dev/null || true
    datum "${!bin}" "$repo" "$b-$r" check --sample 0 >/dev/null ||
      { echo "$b/$r: the estate is not clean" >&2; exit 1; }
    out=$(datum "${!bin}" "$repo" "$b-$r" check --sample 0 --output json)
    grep -q '"metadata_only": 20000' <<<"$out" && grep -q '"catalogue": "snapshot"' <<<"$out" ||
      { echo "$b/$r: not a metadata pass of 20,000 files from the snapshot" >&2; exit 1; }
    rows+=("$b $r")
  done
done

# ---------------------------------------------------------------- measurements
busy_pid=
if [[ ${BUSY:-0} == 1 ]]; then
  sh -c 'while :; do :; done' & busy_pid=$!
  trap 'kill $busy_pid 2>/dev/null' EXIT
fi
E=$R/standard
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg), busy loop: ${BUSY:-0}"
echo "# BEFORE $BEFORE ($(stat -c %y "$BEFORE" | cut -c1-19))  AFTER $AFTER ($(stat -c %y "$AFTER" | cut -c1-19))"

echo "# stat calls per run (strace -c -f -e trace=newfstatat,statx,fstat,lstat,stat)"
stats() { # stats LABEL CMD...
  local label=$1; shift
  strace -c -f -e trace=newfstatat,statx,fstat,lstat,stat -o "$R/strace.out" "$@" >/dev/null 2>&1 || true
  printf '%-28s %s\n' "$label" "$(awk '$NF ~ /^(newfstatat|statx|fstat|lstat|stat)$/ {printf "%s %s  ", $NF, $4}' "$R/strace.out")"
}
for row in "${rows[@]}"; do
  read -r b r <<<"$row"; bin=BEFORE; [[ $b == after ]] && bin=AFTER
  repo=$R/plain-repo; [[ $r == pull ]] && repo=$R/etc/datum/repository
  stats "datum $b, $r repository" "${!bin}" --repo "$repo" --root "$R" --host-file "$R/host.yaml" \
    --state "$R/state/$b-$r.db" check --sample 0
done
stats "find -printf" sh -c "exec find '$E' -printf '%s %T@ %m %U %G\n'"

: > "$TSV"
n=$(find "$E" -type f | wc -l)
for ((round = 0; round < ROUNDS; round++)); do
  labels=("find -printf" "${rows[@]}")
  k=${#labels[@]}
  for ((i = 0; i < k; i++)); do
    row=${labels[$(((i + round) % k))]}
    if [[ $row == "find -printf" ]]; then
      "$PY" "$SB/timecmd.py" --label "find -printf (metadata only)" --files "$n" --tsv "$TSV" -n "$RUNS" --warmup 1 -- \
        sh -c "exec find '$E' -printf '%s %T@ %m %U %G\n' >/dev/null"
    else
      read -r b r <<<"$row"; bin=BEFORE; [[ $b == after ]] && bin=AFTER
      repo=$R/plain-repo; [[ $r == pull ]] && repo=$R/etc/datum/repository
      "$PY" "$SB/timecmd.py" --label "datum $b, $r repository" --files "$n" --tsv "$TSV" -n "$RUNS" --warmup 1 -- \
        "${!bin}" --repo "$repo" --root "$R" --host-file "$R/host.yaml" --state "$R/state/$b-$r.db" check --sample 0
    fi
  done
  echo "# after round $((round + 1)): load $(cut -d' ' -f1-3 /proc/loadavg)"
done

# ---------------------------------------------------------------- table
# Per row: the median of the rounds' medians, the smallest and largest single run.
echo
echo "| row | wall s, median [min-max] | cpu s (user+sys) | cpu / find | peak MiB |"
echo "| --- | --- | --- | --- | --- |"
"$PY" - "$TSV" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    rows.setdefault(f[0], []).append(f)
med = statistics.median
find = med(float(r[7]) for r in rows["find -printf (metadata only)"])
for label, rs in rows.items():
    wall = med(float(r[3]) for r in rs)
    cpu = med(float(r[7]) for r in rs)
    print("| %s | %.3f [%.3f-%.3f] | %.3f | %.2f× | %.1f |" % (
        label, wall, min(float(r[2]) for r in rs), max(float(r[4]) for r in rs),
        cpu, cpu / find, med(float(r[8]) for r in rs)))
EOF
