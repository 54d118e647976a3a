#!/usr/bin/env bash
# `datum check` on the standard estate (20,000 files, 282 MB) against its peers, side by
# side in one run (issue 5; a benchmark, not a timed test). Every datum row is the whole
# command: start, compile the repository (which hashes the declared side), lock, observe,
# diff, record the history in the state store, report.
#
#   sudo bench/check.sh
#
# Rows:
#   * full content check of one Tree owning the estate (declared side: a copy of the
#     estate in the repository);
#   * full content check of 20,000 File resources (bench/make-datum-repo.py);
#   * metadata check of the same 20,000 Files (`--sample 0`: a metadata pass, every file
#     trusted by size, mtime, ctime, inode and device from the last verified apply);
#   * peers, as bench/fingerprint.sh and ../shared/bench/run-peers.sh set them up:
#     aide --check, the Python reference fingerprint, sha256sum -c (1 and 2 readers),
#     find -printf (metadata only); cold-cache rows with caches dropped before each run.
# Peak memory is timecmd.py's peak RSS column.
#
# Environment (defaults in brackets):
#   BENCH_ROOT [/var/tmp/drift-bench]   shared with bench/fingerprint.sh (reuses its
#                                       estate and peer baselines; run that first for aide)
#   SHARED_BENCH [<repo>/../shared/bench]
#   RUNS [5]  COLD_RUNS [3]  SKIP_COLD=1
#   DATUM                               a prebuilt datum binary (default: build release)
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
SB=${SHARED_BENCH:-$REPO/../shared/bench}
D=${BENCH_ROOT:-/var/tmp/drift-bench}
E=$D/standard          # the live estate: /standard under --root $D
W=$D/work
C=$D/check             # this script's repositories and host file
RUNS=${RUNS:-5}; COLD_RUNS=${COLD_RUNS:-3}
PY=/usr/bin/python3
TSV=$D/check.tsv

[[ $(id -u) == 0 ]] || { echo "run as root" >&2; exit 1; }
if [[ -z ${DATUM:-} ]]; then
  (cd "$REPO" && cargo build --release -q -p datum)
  DATUM=$REPO/target/release/datum
fi

# ---------------------------------------------------------------- setup (idempotent)
mkdir -p "$D" "$W" "$C"
[[ -d $E ]] || "$PY" "$SB/make-estate.py" "$E"
if [[ ! -f $W/sums.txt ]]; then
  (cd "$E" && find . -type f -print0 | xargs -0 sha256sum > "$W/sums.txt")
  rm -f "$W"/sums.part.*; (cd "$W" && split -n r/2 sums.txt sums.part.)
fi
printf 'name: bench\nlabels: {}\n' > "$C/host.yaml"
# One Tree owning the estate; its declared content is a copy of the estate.
if [[ ! -d $C/tree-repo/base/trees/estate ]]; then
  mkdir -p "$C/tree-repo/base/trees"
  cp -a "$E" "$C/tree-repo/base/trees/estate"
fi
printf 'datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n' > "$C/tree-repo/datum.yaml"
cat > "$C/tree-repo/base/tree.yaml" <<'EOF'
datum: v1alpha1
type: Tree
name: estate
desired: {path: /standard, source: trees/estate, owner: root, group: root}
EOF
# 20,000 File resources, one per estate file (sources copied into the repository).
[[ -f $C/files-repo/base/estate.yaml ]] || "$PY" "$REPO/bench/make-datum-repo.py" "$E" "$C/files-repo" /standard >/dev/null
tree=("$DATUM" --repo "$C/tree-repo" --root "$D" --host-file "$C/host.yaml" --state "$C/tree-state.db")
files=("$DATUM" --repo "$C/files-repo" --root "$D" --host-file "$C/host.yaml" --state "$C/files-state.db")
# A verified apply records the metadata that metadata-first compares against; both
# checks must then find no drift (anything else would time a different workload).
"${files[@]}" apply >/dev/null || true
for cmd in tree files; do
  declare -n argv=$cmd
  "${argv[@]}" check >/dev/null || { echo "datum check ($cmd) is not clean on the estate" >&2; "${argv[@]}" check | tail -5; exit 1; }
done
"${files[@]}" check --sample 0 --output json | grep -q '"metadata_only": 20000' ||
  { echo "the metadata pass did not trust every file" >&2; exit 1; }

AIDE_CONF=$W/aide-std-w1.conf
HAVE_AIDE=0
[[ -f $AIDE_CONF && -f $W/aide-std.db ]] && command -v aide >/dev/null && HAVE_AIDE=1

# ---------------------------------------------------------------- measurements
n=$(find "$E" -type f | wc -l)
b=$(find "$E" -type f -printf '%s\n' | awk '{s+=$1} END {print s}')
: > "$TSV"
T() { # T LABEL FILES BYTES [timecmd options] -- CMD...
  local label=$1 files=$2 bytes=$3; shift 3
  "$PY" "$SB/timecmd.py" --label "$label" --files "$files" --bytes "$bytes" --tsv "$TSV" "$@"
}
w=(-n "$RUNS" --warmup 1 --)
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
T "datum check, 1 Tree (full)"          "$n" "$b" "${w[@]}" "${tree[@]}" check
T "datum check, 20,000 Files (full)"    "$n" "$b" "${w[@]}" "${files[@]}" check
T "datum check, 20,000 Files (metadata)" "$n" 0   "${w[@]}" "${files[@]}" check --sample 0
T "datum catalogue, 20,000 Files (JSON written)" "$n" "$b" "${w[@]}" sh -c "exec \"\$@\" > /dev/null" _ "${files[@]}" catalogue
T "python fingerprint_ref.py"           "$n" "$b" "${w[@]}" "$PY" "$SB/fingerprint_ref.py" "$E"
T "sha256sum -c"                        "$n" "$b" "${w[@]}" sh -c "cd '$E' && exec sha256sum -c --quiet '$W/sums.txt'"
T "sha256sum -c, 2 parallel"            "$n" "$b" "${w[@]}" sh -c "cd '$E' && ls '$W'/sums.part.* | xargs -P2 -n1 sha256sum -c --quiet"
if [[ $HAVE_AIDE == 1 ]]; then
  T "aide --check (1 worker)"           "$n" "$b" -n 3 --warmup 1 -- aide --check -c "$AIDE_CONF"
fi
T "find -printf (metadata only)"        "$n" 0    "${w[@]}" sh -c "exec find '$E' -printf '%s %T@ %m %U %G\n' >/dev/null"

if [[ ${SKIP_COLD:-0} != 1 ]] && { sync && echo 3 > /proc/sys/vm/drop_caches; } 2>/dev/null; then
  c=(-n "$COLD_RUNS" --warmup 0 --drop-caches --)
  T "COLD datum check, 1 Tree (full)"       "$n" "$b" "${c[@]}" "${tree[@]}" check
  T "COLD datum check, 20,000 Files (full)" "$n" "$b" "${c[@]}" "${files[@]}" check
  T "COLD datum check, 20,000 Files (metadata)" "$n" 0 "${c[@]}" "${files[@]}" check --sample 0
  T "COLD sha256sum -c, 2 parallel"         "$n" "$b" "${c[@]}" sh -c "cd '$E' && ls '$W'/sums.part.* | xargs -P2 -n1 sha256sum -c --quiet"
  find "$E" -type f -print0 | xargs -0 cat > /dev/null
else
  echo "# no cold rows (SKIP_COLD=1 or drop_caches not writable)"
fi

# ---------------------------------------------------------------- table
echo
echo "| measurement | wall s, median [min-max] | cpu s | peak MiB | us/file | MB/s |"
echo "| --- | --- | --- | --- | --- | --- |"
awk -F'\t' '{u=($10=="nan")?"-":$10; m=($11=="nan")?"-":$11
  printf "| %s | %s [%s-%s] | %s | %s | %s | %s |\n", $1, $4, $3, $5, $8, $9, u, m}' "$TSV"
awk -F'\t' '{w[$1]=$4}
  function r(a, b) { return (w[a] != "" && w[b] != "") ? sprintf("%.2fx", w[a] / w[b]) : "-" }
  END {
    print ""
    print "aide --check / datum check Tree: " r("aide --check (1 worker)", "datum check, 1 Tree (full)") ", Files: " r("aide --check (1 worker)", "datum check, 20,000 Files (full)") " (target >= 10x)"
    print "python reference / datum check Tree: " r("python fingerprint_ref.py", "datum check, 1 Tree (full)") ", Files: " r("python fingerprint_ref.py", "datum check, 20,000 Files (full)") " (target >= 2.5x)"
    print "datum metadata check / find -printf: " r("datum check, 20,000 Files (metadata)", "find -printf (metadata only)") " (target <= 1.5x)"
    print "cold: datum check Tree / 2 parallel sha256sum -c: " r("COLD datum check, 1 Tree (full)", "COLD sha256sum -c, 2 parallel") ", Files: " r("COLD datum check, 20,000 Files (full)", "COLD sha256sum -c, 2 parallel") " (target <= 1.2x)"
  }' "$TSV"
