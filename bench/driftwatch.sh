#!/usr/bin/env bash
# Benchmark `driftwatch report` on synthetic plan pairs of 20,000 and 100,000 resources,
# side by side with jq merely reading the same files, in one run.
#
#   bench/driftwatch.sh [PATH/TO/timecmd.py]      # SIZES="20000 100000" RUNS=3
#
# Inputs: shared/bench/make-plans.py writes refresh_only.json, plan.json and main.tf.json
# (about 6.3 KB of JSON per resource per plan: 20,000 resources ~127 MB per plan, 100,000
# ~640 MB) into $DW_BENCH_DIR/N (default /var/tmp/driftwatch-bench/N); they are generated
# only when missing. Each command is the whole process, warm cache. With a timecmd.py path
# the runs are timed by it (median of $RUNS runs after one warm-up, min-max, user/sys, peak
# RSS from rusage); without, by /usr/bin/time -v. The load average is printed before and
# after (the machine may be shared). Not a test: nothing here fails on a slow machine.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
shared="${SHARED:-$here/../shared}"
timecmd="${1:-}"
runs="${RUNS:-3}"
sizes="${SIZES:-20000 100000}"
root="${DW_BENCH_DIR:-/var/tmp/driftwatch-bench}"

command -v jq >/dev/null || { echo "jq is missing (apt-get install -y jq)" >&2; exit 1; }
(cd "$here" && cargo build --release -p driftwatch >&2)
dw="$here/target/release/driftwatch"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for n in $sizes; do
    data="$root/$n"
    # The 20,000-resource pair used to live directly in $root: reuse it.
    if [ "$n" = 20000 ] && [ ! -s "$data/plan.json" ] && [ -s "$root/plan.json" ]; then
        data="$root"
    fi
    if [ ! -s "$data/plan.json" ] || [ ! -s "$data/refresh_only.json" ]; then
        echo "generating the $n-resource plan pair in $data..." >&2
        python3 "$shared/bench/make-plans.py" "$data" --resources "$n" >&2
    fi
    ro="$data/refresh_only.json"
    pl="$data/plan.json"
    cfg="$data/main.tf.json"
    ls -l "$ro" "$pl" >&2

    # The jq baseline is the one in PEERS.md section 7: merely reading both files.
    jq_cmd="jq '[.resource_drift[]|.address]|length' '$ro' >/dev/null && jq '[.resource_changes[]|.change.actions]|length' '$pl' >/dev/null"
    dw_text=("$dw" report --refresh-plan "$ro" --plan "$pl" --config "$cfg" --stack bench)
    dw_all=("$dw" report --refresh-plan "$ro" --plan "$pl" --config "$cfg" --stack bench --output json --markdown "$out/report.md")

    # Sanity: the report exits 2 (there is drift) and prints no secret.
    set +e
    "${dw_all[@]}" >"$out/report.json"
    rc=$?
    set -e
    [ "$rc" = 2 ] || { echo "unexpected exit $rc from driftwatch" >&2; exit 1; }
    if grep -q 'SECRET-' "$out/report.json" "$out/report.md"; then
        echo "a SECRET- value leaked into the report" >&2; exit 1
    fi
    echo "== $n resources: $(jq -c .summary "$out/report.json")"

    if [ -n "$timecmd" ]; then
        python3 "$timecmd" -n "$runs" --label "$n: jq reading both files" -- sh -c "$jq_cmd"
        python3 "$timecmd" -n "$runs" --label "$n: driftwatch report (text)" -- "${dw_text[@]}"
        python3 "$timecmd" -n "$runs" --label "$n: driftwatch report (json+md)" -- "${dw_all[@]}"
    else
        measure() {
            local label="$1"; shift
            local report
            # /usr/bin/time writes its report on stderr after the command's own; keep its tail.
            report="$( { /usr/bin/time -v "$@" >/dev/null; } 2>&1 | tail -n 30 || true)"
            local wall rss
            wall="$(printf '%s\n' "$report" | awk -F': ' '/Elapsed \(wall clock\)/ {print $2}')"
            rss="$(printf '%s\n' "$report" | awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2/1024}')"
            printf '%-36s wall %s  peak %s MiB\n' "$label" "$wall" "$rss"
        }
        for _ in $(seq "$runs"); do
            measure "$n: jq reading both files" sh -c "$jq_cmd"
            measure "$n: driftwatch report (text)" "${dw_text[@]}"
            measure "$n: driftwatch report (json+md)" "${dw_all[@]}"
        done
    fi
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
