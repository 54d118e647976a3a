#!/usr/bin/env bash
# Two builds of datum side by side on the same workloads, alternating run by run
# (a refactor must not make the hot paths slower; a benchmark, not a timed test).
#
#   sudo bench/compare.sh BEFORE_BIN AFTER_BIN
#
# Workloads (the standard estate of bench/check.sh: 20,000 files, 282 MB; run
# bench/check.sh once first, or this script sets the estate up the same way):
#   * check, one Tree owning the estate (full content);
#   * check, 20,000 File resources (full), and their metadata pass (--sample 0);
#   * plan --recompile of the 20,000 Files (the compile from YAML);
#   * no-op apply of the 20,000 Files from the catalogue snapshot (also with --trust-metadata,
#     when both builds have it);
#   * fingerprint of the estate.
# Each row runs BEFORE and AFTER alternately, RUNS times each after one warm-up,
# with ../shared/bench/timecmd.py; state stores (and the caches beside them)
# are per build, in a folder each, so neither reads what the other wrote.
# Prints a table (medians, min-max, CPU, peak RSS) and the load average before
# and after.
#
# BEFORE_ENV / AFTER_ENV: VAR=VALUE words set for that build's runs only (an old
# build that does not turn huge pages off itself: BEFORE_ENV=MIMALLOC_ALLOW_THP=0).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
SB=${SHARED_BENCH:-$REPO/../shared/bench}
D=${BENCH_ROOT:-/var/tmp/drift-bench}
E=$D/standard
C=$D/check
RUNS=${RUNS:-5}
PY=/usr/bin/python3
[[ $# == 2 ]] || { echo "usage: $0 BEFORE_BIN AFTER_BIN" >&2; exit 1; }
[[ $(id -u) == 0 ]] || { echo "run as root" >&2; exit 1; }
OUT=$(mktemp -d)
# A private state folder per build: the source-hash cache and the catalogue
# snapshots live beside the store, one per folder, so builds in one folder
# would share (and could overwrite) each other's cache.
mkdir -m 700 "$OUT/before" "$OUT/after"
trap 'rm -rf "$OUT"' EXIT
# Both builds are run from copies written here, one after the other: a program's
# peak RSS counts the pages of its own file that it maps, and a file written
# minutes ago (a fresh build) is mapped in larger pieces than one written long
# ago (seen here: the same binary, copied again, 2-3 MiB higher on every check row).
cp "$(realpath "$1")" "$OUT/before-datum"; cp "$(realpath "$2")" "$OUT/after-datum"
BEFORE=$OUT/before-datum; AFTER=$OUT/after-datum

mkdir -p "$D" "$C"
[[ -d $E ]] || "$PY" "$SB/make-estate.py" "$E"
printf 'name: bench\nlabels: {}\n' > "$C/host.yaml"
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
[[ -f $C/files-repo/base/estate.yaml ]] || "$PY" "$REPO/bench/make-datum-repo.py" "$E" "$C/files-repo" /standard >/dev/null

tag_of() { [[ $1 == "$BEFORE" ]] && echo before || echo after; }
cmd_for() { # cmd_for BIN files|tree|bare ARGS... -> sets the array CMD
  local bin=$1 which=$2 tag; tag=$(tag_of "$1"); shift 2
  case $which in
    files|tree) CMD=("$bin" --repo "$C/$which-repo" --root "$D" --host-file "$C/host.yaml"
                     --state "$OUT/$tag/$which.db" "$@") ;;
    bare) CMD=("$bin" "$@") ;;
  esac
  local envs; [[ $tag == before ]] && envs=${BEFORE_ENV:-} || envs=${AFTER_ENV:-}
  [[ -z $envs ]] || CMD=(env $envs "${CMD[@]}")
}
for bin in "$BEFORE" "$AFTER"; do
  # A verified apply first: the metadata pass and the no-op apply compare with it.
  cmd_for "$bin" files apply; "${CMD[@]}" >/dev/null || true
  cmd_for "$bin" files check; "${CMD[@]}" >/dev/null || { echo "$bin: check of the Files is not clean" >&2; exit 1; }
  cmd_for "$bin" tree check; "${CMD[@]}" >/dev/null || { echo "$bin: check of the Tree is not clean" >&2; exit 1; }
done

TSV=$OUT/rows.tsv
row() { # row LABEL files|tree|bare ARGS... (both builds, alternating; one warm-up each)
  local label=$1; shift
  for i in $(seq 0 "$RUNS"); do
    for bin in "$BEFORE" "$AFTER"; do
      cmd_for "$bin" "$@"
      if [[ $i == 0 ]]; then "${CMD[@]}" >/dev/null 2>&1 || true; continue; fi
      "$PY" "$SB/timecmd.py" -n 1 --warmup 0 --label "$label|$(tag_of "$bin")" --tsv "$TSV" -- "${CMD[@]}" >/dev/null
    done
  done
}
echo "# $(date -u +%FT%TZ) $(nproc) cores, load before $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# before: $1 ${BEFORE_ENV:-}"
echo "# after:  $2 ${AFTER_ENV:-}"
row "check, 1 Tree (full)" tree check
row "check, 20,000 Files (full)" files check
row "check, 20,000 Files (metadata)" files check --sample 0
row "plan --recompile, 20,000 Files" files plan --recompile
row "no-op apply from the snapshot, 20,000 Files" files apply
# Only when both builds have the flag (it came in 5592fee).
if "$BEFORE" apply --help | grep -q -- --trust-metadata && "$AFTER" apply --help | grep -q -- --trust-metadata; then
  row "no-op apply --trust-metadata, 20,000 Files" files apply --trust-metadata
fi
row "fingerprint of the estate" bare fingerprint "$E"
echo "# load after $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| workload | build | wall s, median [min-max] | cpu s (median) | peak MiB (median) |"
echo "| --- | --- | --- | --- | --- |"
"$PY" - "$TSV" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    rows.setdefault(f[0], []).append((float(f[3]), float(f[7]), float(f[8])))
for label, runs in rows.items():
    name, tag = label.split("|")
    wall = [r[0] for r in runs]
    print(f"| {name} | {tag} | {statistics.median(wall):.3f} [{min(wall):.3f}-{max(wall):.3f}] "
          f"| {statistics.median(r[1] for r in runs):.3f} | {statistics.median(r[2] for r in runs):.1f} |")
EOF
