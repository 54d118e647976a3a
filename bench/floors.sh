#!/usr/bin/env bash
# The floors under issue 17's time goals, beside datum in one run: what the bare work a
# command cannot skip costs on this machine (a benchmark, not a timed test).
#
#   sudo bench/floors.sh            # build, measure, print the table
#
# The work each goal's command must do, done by bench/floor (a small program outside the
# workspace) with nothing else:
#   * a full check or a no-op apply of 20,000 Files reads every file and hashes it
#     (282 MB): `read` opens and reads every file of the standard estate, `read-hash` also
#     feeds BLAKE3 (Datum's content hash), one thread, one 128 KiB buffer;
#   * `plan --recompile` parses the repository's YAML: `yaml PARSER` reads every event of
#     the manifest with Datum's parser (saphyr-parser) and with two others (yaml-rust2, and
#     libyaml-safer, a port of libyaml), so the floor is not one parser's; then it observes
#     what the apply would (the same reads and hashes);
#   * the metadata pass: `find -printf` of the estate (the peer the issue names).
# Rows for datum: its full check, metadata pass, no-op apply and plan --recompile of the
# 20,000 Files (bench/compare.sh's workloads), and plan --recompile of 100,000 Files in one
# 21 MB manifest (bench/scaling.sh's). Each row: timecmd.py, RUNS counted runs after one
# warm-up, rows interleaved in rounds so that a change in load touches all of them alike.
#
# Needs bench/compare.sh's (or check.sh's) 20,000-File repository and, for the 100,000 rows,
# bench/scaling.sh's (`ONLY=files`); rows whose inputs are missing are skipped.
#
# Environment (defaults in brackets):
#   BENCH_ROOT [/var/tmp/drift-bench]   SHARED_BENCH [<repo>/../shared/bench] (timecmd.py)
#   RUNS [5]   DATUM (a prebuilt binary; default: build release)
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
SB=${SHARED_BENCH:-$REPO/../shared/bench}
D=${BENCH_ROOT:-/var/tmp/drift-bench}
E=$D/standard
C=$D/check
S=$D/scaling
RUNS=${RUNS:-5}
PY=/usr/bin/python3
[[ $(id -u) == 0 ]] || { echo "run as root" >&2; exit 1; }
[[ -f $SB/timecmd.py ]] || { echo "missing $SB/timecmd.py (set SHARED_BENCH)" >&2; exit 1; }
[[ -d $E && -f $C/files-repo/base/estate.yaml ]] ||
  { echo "run bench/compare.sh (or bench/check.sh) once first: it sets up $C/files-repo" >&2; exit 1; }

if [[ -z ${DATUM:-} ]]; then (cd "$REPO" && cargo build --release -q -p datum); fi
DATUM=${DATUM:-$REPO/target/release/datum}
FLOOR_TARGET=$REPO/target/bench-floor
cargo build --release -q --manifest-path "$REPO/bench/floor/Cargo.toml" --target-dir "$FLOOR_TARGET"
FLOOR=$FLOOR_TARGET/release/datum-bench-floor

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
mkdir -m 700 "$OUT/state20" "$OUT/state100"
# The files in the order the manifest declares them (the order datum reads them in).
sed -n 's|^  path: |'"$D"'|p' "$C/files-repo/base/estate.yaml" > "$OUT/files.txt"
[[ $(wc -l < "$OUT/files.txt") == 20000 ]] || { echo "expected 20,000 paths in the manifest" >&2; exit 1; }

files20=(--repo "$C/files-repo" --root "$D" --host-file "$C/host.yaml" --state "$OUT/state20/files.db")
"$DATUM" "${files20[@]}" apply >/dev/null || true
"$DATUM" "${files20[@]}" check >/dev/null || { echo "the 20,000 Files do not check clean" >&2; exit 1; }
ROWS=()
add() { ROWS+=("$*"); }  # add LABEL|COMMAND... (words split on spaces when run)
add "floor: read 20,000 files (282 MB)|$FLOOR read $OUT/files.txt"
add "floor: read + BLAKE3 20,000 files|$FLOOR read-hash $OUT/files.txt"
add "datum check, 20,000 Files (full)|$DATUM ${files20[*]} check"
add "datum no-op apply, 20,000 Files|$DATUM ${files20[*]} apply"
add "find -printf of the estate (size, mtime, mode, uid, gid)|find $E -printf %s,%T@,%m,%U,%G\n"
add "datum check, 20,000 Files (metadata)|$DATUM ${files20[*]} check --sample 0"
for p in saphyr yaml-rust2 libyaml-safer; do
  add "floor: YAML events, $p, 20,000 documents (4 MB)|$FLOOR yaml $p $C/files-repo/base/estate.yaml"
done
add "datum plan --recompile, 20,000 Files|$DATUM ${files20[*]} plan --recompile"
if [[ -f $S/files-files100k/base/estate.yaml && -d $D/files100k ]]; then
  files100=(--repo "$S/files-files100k" --root "$D" --host-file "$S/host.yaml" --state "$OUT/state100/files.db")
  "$DATUM" "${files100[@]}" apply >/dev/null || true
  sed -n 's|^  path: |'"$D"'|p' "$S/files-files100k/base/estate.yaml" > "$OUT/files100k.txt"
  add "floor: read + BLAKE3 100,000 files|$FLOOR read-hash $OUT/files100k.txt"
  add "floor: YAML events, saphyr, 100,000 documents (21 MB)|$FLOOR yaml saphyr $S/files-files100k/base/estate.yaml"
  add "datum plan --recompile, 100,000 Files|$DATUM ${files100[*]} plan --recompile"
else
  echo "# no 100,000-File repository (bench/scaling.sh ONLY=files sets it up): those rows skipped" >&2
fi

TSV=$OUT/rows.tsv
echo "# $(date -u +%FT%TZ) $(nproc) cores, load before $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# datum: $DATUM"
for row in "${ROWS[@]}"; do  # warm-up: page cache, snapshots, source-hash caches
  read -r -a cmd <<< "${row#*|}"; "${cmd[@]}" >/dev/null 2>&1 || true
done
for i in $(seq "$RUNS"); do
  for row in "${ROWS[@]}"; do
    read -r -a cmd <<< "${row#*|}"
    "$PY" "$SB/timecmd.py" -n 1 --warmup 0 --label "${row%%|*}" --tsv "$TSV" -- "${cmd[@]}" >/dev/null
  done
done
echo "# load after $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| work | wall s, median [min-max] | cpu s (median) | peak MiB (median) |"
echo "| --- | --- | --- | --- |"
"$PY" - "$TSV" <<'PYEOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    if f[-1].strip() not in ("0", "[0]"):
        sys.exit(f"{f[0]}: exit codes {f[-1]}")
    rows.setdefault(f[0], []).append((float(f[3]), float(f[7]), float(f[8])))
for label, runs in rows.items():
    wall = [r[0] for r in runs]
    print(f"| {label} | {statistics.median(wall):.3f} [{min(wall):.3f}-{max(wall):.3f}] "
          f"| {statistics.median(r[1] for r in runs):.3f} | {statistics.median(r[2] for r in runs):.1f} |")
PYEOF
