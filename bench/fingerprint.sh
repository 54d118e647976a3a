#!/usr/bin/env bash
# Datum's Merkle fingerprint of the standard estate against its peers, side by side in one
# run (not a timed test). Warm rows: timecmd.py's warm-up run immediately before each
# measurement (this machine class pages out idle page cache after ~45 s, see the shared
# bench PEERS.md). Cold rows: caches dropped before every run (outside the timed region).
#
#   sudo bench/fingerprint.sh            # build, set up once, measure, print tables
#
# Environment (defaults in brackets):
#   BENCH_ROOT [/var/tmp/drift-bench]   estates and peer baselines (shared with run-peers.sh)
#   SHARED_BENCH [<repo>/../shared/bench]  make-estate.py, fingerprint_ref.py, timecmd.py
#   RUNS [5]  COLD_RUNS [3]             counted runs per row
#   PAIRS [5]                           alternating A/B pairs per paired ratio
#   INSTALL=1                           apt-get install aide (+ gcc libssl-dev for the C
#                                       floor) first; rows whose tool is missing are skipped
#   SKIP_COLD=1                         no cold-cache rows
#   FP                                  a prebuilt datum binary (default: build it); the
#                                       script runs `$FP fingerprint ...`
# Needs root: the estate must be owned by 0:0 for the reference root hash below, and
# dropping caches needs it. Writes nothing into the repository.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
SB=${SHARED_BENCH:-$REPO/../shared/bench}
D=${BENCH_ROOT:-/var/tmp/drift-bench}
E=$D/standard
W=$D/work
RUNS=${RUNS:-5}; COLD_RUNS=${COLD_RUNS:-3}
PY=/usr/bin/python3
TSV=$D/fingerprint.tsv
# fingerprint_ref.py on the standard estate owned by 0:0 (bench README).
REF_ROOT=1b894c224a714d4f9e7b99cbf553b981e91b0f3c2aba78b1ec18647b5738b38e

[[ $(id -u) == 0 ]] || { echo "run as root" >&2; exit 1; }
for f in make-estate.py fingerprint_ref.py timecmd.py; do
  [[ -f $SB/$f ]] || { echo "missing $SB/$f (set SHARED_BENCH)" >&2; exit 1; }
done
if [[ ${INSTALL:-0} == 1 ]]; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends aide gcc libssl-dev
fi

# ---------------------------------------------------------------- build
# FP=/path/to/datum measures a binary built elsewhere (e.g. from a clean checkout while
# the work tree is mid-edit). Datum is timed through `datum fingerprint` (the standalone
# datum-fingerprint binary was removed, issue 12).
if [[ -z ${FP:-} ]]; then
  (cd "$REPO" && cargo build --release -q -p datum --bin datum)
  FP=$REPO/target/release/datum
fi
FPC=("$FP" fingerprint)

# ---------------------------------------------------------------- setup (idempotent)
mkdir -p "$D" "$W"
[[ -d $E ]] || "$PY" "$SB/make-estate.py" "$E"
# sha256sum check lists, as run-peers.sh builds them (+ a round-robin split in two)
if [[ ! -f $W/sums.txt ]]; then
  (cd "$E" && find . -type f -print0 | xargs -0 sha256sum > "$W/sums.txt")
  rm -f "$W"/sums.part.*; (cd "$W" && split -n r/2 sums.txt sums.part.)
fi
# AIDE: only the estate (anchored regex), sha256 as the only digest, as run-peers.sh does
HAVE_AIDE=0
if command -v aide >/dev/null; then
  HAVE_AIDE=1
  for nw in 1 2; do
    cat > "$W/aide-std-w$nw.conf" <<EOF
database_in=file:$W/aide-std.db
database_out=file:$W/aide-std.db.new
gzip_dbout=no
report_url=stdout
num_workers=$nw
Bench = p+u+g+s+m+sha256
$E(/|\$) Bench
EOF
  done
  if [[ ! -f $W/aide-std.db ]]; then
    aide --init -c "$W/aide-std-w1.conf" >/dev/null && mv -f "$W/aide-std.db.new" "$W/aide-std.db"
  fi
fi

# The C floor (lstat+open+read+SHA-256 via OpenSSL, 1 thread, path list given), when a
# compiler and OpenSSL's headers are there (run-peers.sh builds the same binary).
if [[ ! -x $W/floor ]] && command -v cc >/dev/null && [[ -f /usr/include/openssl/sha.h ]]; then
  cc -O2 -o "$W/floor" "$SB/floor.c" -lcrypto
fi
[[ -f $W/files.list ]] || find "$E" -type f -print0 > "$W/files.list"

# ---------------------------------------------------------------- correctness first
ours=$("${FPC[@]}" --compat "$E")
theirs=$("$PY" "$SB/fingerprint_ref.py" "$E")
echo "# compat root: datum $ours, reference $theirs (expected $REF_ROOT when owned by 0:0)"
[[ $ours == "$theirs" ]] || { echo "MISMATCH: datum --compat differs from fingerprint_ref.py" >&2; exit 1; }
[[ $ours == "$REF_ROOT" ]] || echo "# note: estate not owned by 0:0 or not the standard preset"

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
# "default" = ScanOptions::threads 0: max(cores, 8) workers (8 on this machine class)
T "datum native, default threads"  "$n" "$b" "${w[@]}" "${FPC[@]}" "$E"
T "datum native, 2 threads"        "$n" "$b" "${w[@]}" "${FPC[@]}" --threads 2 "$E"
T "datum native, 1 thread"         "$n" "$b" "${w[@]}" "${FPC[@]}" --threads 1 "$E"
T "datum compat, default threads"  "$n" "$b" "${w[@]}" "${FPC[@]}" --compat "$E"
T "datum compat, 2 threads"        "$n" "$b" "${w[@]}" "${FPC[@]}" --compat --threads 2 "$E"
T "datum compat, 1 thread"         "$n" "$b" "${w[@]}" "${FPC[@]}" --compat --threads 1 "$E"
T "python fingerprint_ref.py"      "$n" "$b" "${w[@]}" "$PY" "$SB/fingerprint_ref.py" "$E"
T "sha256sum -c"                   "$n" "$b" "${w[@]}" sh -c "cd '$E' && exec sha256sum -c --quiet '$W/sums.txt'"
T "sha256sum -c, 2 parallel"       "$n" "$b" "${w[@]}" sh -c "cd '$E' && ls '$W'/sums.part.* | xargs -P2 -n1 sha256sum -c --quiet"
if [[ $HAVE_AIDE == 1 ]]; then
  T "aide --check (1 worker)"      "$n" "$b" "${w[@]}" aide --check -c "$W/aide-std-w1.conf"
  T "aide --check (2 workers)"     "$n" "$b" "${w[@]}" aide --check -c "$W/aide-std-w2.conf"
fi
if [[ -x $W/floor ]]; then
  T "C floor lstat+read+sha256, 1 thread" "$n" "$b" "${w[@]}" "$W/floor" sha256 "$W/files.list"
fi
T "find -printf (metadata only)"   "$n" 0    "${w[@]}" sh -c "exec find '$E' -printf '%s %T@ %m %U %G\n' >/dev/null"

if [[ ${SKIP_COLD:-0} != 1 ]] && { sync && echo 3 > /proc/sys/vm/drop_caches; } 2>/dev/null; then
  c=(-n "$COLD_RUNS" --warmup 0 --drop-caches --)
  T "COLD datum native, default threads" "$n" "$b" "${c[@]}" "${FPC[@]}" "$E"
  T "COLD datum native, 2 threads" "$n" "$b" "${c[@]}" "${FPC[@]}" --threads 2 "$E"
  T "COLD datum compat, default threads" "$n" "$b" "${c[@]}" "${FPC[@]}" --compat "$E"
  T "COLD sha256sum -c, 2 parallel" "$n" "$b" "${c[@]}" sh -c "cd '$E' && ls '$W'/sums.part.* | xargs -P2 -n1 sha256sum -c --quiet"
  T "COLD python fingerprint_ref.py" "$n" "$b" "${c[@]}" "$PY" "$SB/fingerprint_ref.py" "$E"
  # leave the page cache warm for whatever runs next
  find "$E" -type f -print0 | xargs -0 cat > /dev/null
else
  echo "# no cold rows (SKIP_COLD=1 or drop_caches not writable)"
fi

# ---------------------------------------------------------------- paired ratios
# On a shared 2-core machine the load drifts between rows; alternating A and B and taking
# the ratio per pair (as PEERS.md does) cancels most of that drift.
PAIRS=${PAIRS:-5}
PAIRS_OUT=$D/fingerprint-pairs.txt
: > "$PAIRS_OUT"
pair() { # pair "A label" "B label" TIMECMD_OPTION; commands in the arrays PA and PB; prints B/A
  local tsv=$D/pairs.tmp i
  : > "$tsv"
  for ((i = 0; i < PAIRS; i++)); do
    "$PY" "$SB/timecmd.py" -n 1 $3 --label A --tsv "$tsv" -- "${PA[@]}" > /dev/null
    "$PY" "$SB/timecmd.py" -n 1 $3 --label B --tsv "$tsv" -- "${PB[@]}" > /dev/null
  done
  awk -F'\t' '$1 == "A" {a = $4} $1 == "B" {printf "%.3f\n", $4 / a}' "$tsv" | sort -n |
    awk -v l="$2 / $1" '{r[NR] = $1} END {m = (NR % 2) ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
      printf "%s: %.2fx [%.2f-%.2f] over %d pairs\n", l, m, r[1], r[NR], NR}' | tee -a "$PAIRS_OUT"
  rm -f "$tsv"
}
echo
echo "# paired, alternating A and B, ratio B/A per pair: median [min-max]"
PA=("${FPC[@]}" "$E"); PB=("$PY" "$SB/fingerprint_ref.py" "$E")
pair "datum native, default threads" "python fingerprint_ref.py" "--warmup 1"
PA=("${FPC[@]}" --compat "$E")
pair "datum compat, default threads" "python fingerprint_ref.py" "--warmup 1"
if [[ $HAVE_AIDE == 1 ]]; then
  PA=("${FPC[@]}" "$E"); PB=(aide --check -c "$W/aide-std-w1.conf")
  pair "datum native, default threads" "aide --check (1 worker)" "--warmup 1"
fi
if [[ ${SKIP_COLD:-0} != 1 ]]; then
  PA=(sh -c "cd '$E' && ls '$W'/sums.part.* | xargs -P2 -n1 sha256sum -c --quiet"); PB=("${FPC[@]}" "$E")
  pair "COLD sha256sum -c, 2 parallel" "COLD datum native, default threads" "--warmup 0 --drop-caches"
  find "$E" -type f -print0 | xargs -0 cat > /dev/null
fi

# ---------------------------------------------------------------- tables
echo
echo "| measurement | wall s, median [min-max] | cpu s | peak MiB | us/file | MB/s |"
echo "| --- | --- | --- | --- | --- | --- |"
awk -F'\t' '{u=($10=="nan")?"-":$10; m=($11=="nan")?"-":$11
  printf "| %s | %s [%s-%s] | %s | %s | %s | %s |\n", $1, $4, $3, $5, $8, $9, u, m}' "$TSV"
awk -F'\t' '{w[$1]=$4}
  function r(a, b) { return (w[a] != "" && w[b] != "") ? sprintf("%.2fx", w[a] / w[b]) : "-" }
  END {
    print ""
    print "aide --check (1 worker) / datum native, default: " r("aide --check (1 worker)", "datum native, default threads") " (target >= 10x); 2 threads: " r("aide --check (1 worker)", "datum native, 2 threads") "; compat default: " r("aide --check (1 worker)", "datum compat, default threads")
    print "python reference / datum native, default: " r("python fingerprint_ref.py", "datum native, default threads") " (target >= 2.5x); 2 threads: " r("python fingerprint_ref.py", "datum native, 2 threads") "; compat default: " r("python fingerprint_ref.py", "datum compat, default threads") "; compat 1 thread: " r("python fingerprint_ref.py", "datum compat, 1 thread")
    print "datum compat 1 thread / C floor (1 thread): " r("datum compat, 1 thread", "C floor lstat+read+sha256, 1 thread")
    print "cold: datum native, default / 2 parallel sha256sum -c: " r("COLD datum native, default threads", "COLD sha256sum -c, 2 parallel") " (target <= 1.2x); 2 threads: " r("COLD datum native, 2 threads", "COLD sha256sum -c, 2 parallel")
  }' "$TSV"
echo; cat "$PAIRS_OUT"
