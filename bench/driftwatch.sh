#!/usr/bin/env bash
# Benchmark `driftwatch report` on the big synthetic plan pair, side by side with jq.
#
#   bench/driftwatch.sh [PATH/TO/timecmd.py]
#
# Inputs: shared/bench/make-plans.py writes refresh_only.json, plan.json and main.tf.json
# (20,000 resources, ~127 MB per plan) into $DW_BENCH_DIR (default
# /var/tmp/driftwatch-bench); they are generated only when missing. Each command is the
# whole process, warm cache. With a timecmd.py path the runs are timed by it (median of
# $RUNS runs after one warm-up, peak RSS from rusage); without, by /usr/bin/time -v.
# Not a test: nothing here fails on a slow machine.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
shared="${SHARED:-$here/../shared}"
timecmd="${1:-}"
runs="${RUNS:-3}"
data="${DW_BENCH_DIR:-/var/tmp/driftwatch-bench}"

if [ ! -s "$data/plan.json" ] || [ ! -s "$data/refresh_only.json" ]; then
    echo "generating the plan pair in $data (about a minute)..." >&2
    python3 "$shared/bench/make-plans.py" "$data" >&2
fi
command -v jq >/dev/null || { echo "jq is missing (apt-get install -y jq)" >&2; exit 1; }

(cd "$here" && cargo build --release -p driftwatch >&2)
dw="$here/target/release/driftwatch"

ro="$data/refresh_only.json"
pl="$data/plan.json"
cfg="$data/main.tf.json"
ls -l "$ro" "$pl" >&2

# The jq baseline is the one in PEERS.md section 7: merely reading both files.
jq_cmd="jq '[.resource_drift[]|.address]|length' '$ro' >/dev/null && jq '[.resource_changes[]|.change.actions]|length' '$pl' >/dev/null"
dw_text=("$dw" report --refresh-plan "$ro" --plan "$pl" --config "$cfg" --stack bench)
dw_all=("$dw" report --refresh-plan "$ro" --plan "$pl" --config "$cfg" --stack bench --json --markdown /tmp/driftwatch-bench.md)

# Sanity: the report exits 2 (there is drift) and prints no secret.
set +e
"${dw_all[@]}" > /tmp/driftwatch-bench.json
rc=$?
set -e
[ "$rc" = 2 ] || { echo "unexpected exit $rc from driftwatch" >&2; exit 1; }
if grep -q 'SECRET-' /tmp/driftwatch-bench.json /tmp/driftwatch-bench.md; then
    echo "a SECRET- value leaked into the report" >&2; exit 1
fi
jq -c .summary /tmp/driftwatch-bench.json >&2

if [ -n "$timecmd" ]; then
    python3 "$timecmd" -n "$runs" --label "jq reading both files" -- sh -c "$jq_cmd"
    python3 "$timecmd" -n "$runs" --label "driftwatch report (text)" -- "${dw_text[@]}"
    python3 "$timecmd" -n "$runs" --label "driftwatch report (json+md)" -- "${dw_all[@]}"
else
    measure() {
        local label="$1"; shift
        local out
        # /usr/bin/time writes its report on stderr after the command's own; keep its tail.
        out="$( { /usr/bin/time -v "$@" >/dev/null; } 2>&1 | tail -n 30 || true)"
        local wall rss
        wall="$(printf '%s\n' "$out" | awk -F': ' '/Elapsed \(wall clock\)/ {print $2}')"
        rss="$(printf '%s\n' "$out" | awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2/1024}')"
        printf '%-30s wall %s  peak %s MiB\n' "$label" "$wall" "$rss"
    }
    for _ in $(seq "$runs"); do
        measure "jq reading both files" sh -c "$jq_cmd"
        measure "driftwatch report (text)" "${dw_text[@]}"
        measure "driftwatch report (json+md)" "${dw_all[@]}"
    done
fi
