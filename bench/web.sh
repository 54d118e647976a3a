#!/usr/bin/env bash
# Benchmark of the web view (issue 15) at 10,000 hosts with 30 days of
# history on PostgreSQL: the overview and the hosts table (all hosts, and
# filtered by two labels), server time (Server-Timing) and total time over
# keep-alive HTTPS, and in headless Chromium the HTML's arrival and first
# contentful paint. Goal (the issue): under 300 ms server time, first paint
# under 1 s. Not a test: prints one JSON line and appends it to $OUT.
#
#   bench/web.sh            (NO_BUILD=1 uses target/release/datum as built)
#   BASELINE_BIN=/tmp/datum-old NO_BUILD=1 bench/web.sh   (side by side with an older build)
#
# The fleet is populated with SQL by bench/fleet-load.py (the same data as
# bench/fleet.sh's queries: 10% drifted with 20 findings, 5% failed on the
# latest revision, 5% stale), then the current-state tables the views read
# are derived from it as the migration does and the server's start-up
# backfill renders each host's picture. No peer: Puppetboard needs a
# PuppetDB holding the same fleet and is not measured here.
# Needs root (runuser for PostgreSQL), chromium, node (scripts/deps).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/web-results.jsonl}
HOSTS=${HOSTS:-10000}
LOADS=${LOADS:-20}
W=$(mktemp -d)
server_pid=""
pg_dir=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  if [ -n "$pg_dir" ]; then ./scripts/postgres stop "$pg_dir" || true; fi
  rm -rf "$W"
}
trap cleanup EXIT

[ -n "${NO_BUILD:-}" ] || cargo build --release --quiet -p datum
datum=${DATUM_BIN:-$PWD/target/release/datum}
SCREENSHOTS="" ./scripts/browser-tests --install-only >/dev/null 2>&1 || true
export PLAYWRIGHT_DIR=$PWD/target/playwright

eval "$(./scripts/postgres start)"
pg_dir=$DATUM_TEST_POSTGRES_DIR
psql -X -q "$DATUM_TEST_POSTGRES" -c "CREATE DATABASE fleetweb"
store="${DATUM_TEST_POSTGRES%/*}/fleetweb"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$datum" server init --dir "$W/srv" --listen "127.0.0.1:$port" --store "$store" >/dev/null
serve() {
  "$datum" server serve --dir "$W/srv" 2>"$W/serve.log" &
  server_pid=$!
  for _ in $(seq 300); do grep -q listening "$W/serve.log" && return; sleep 0.1; done
  cat "$W/serve.log" >&2; exit 1
}
serve # migrates the schema
kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""
python3 bench/fleet-load.py populate --hosts "$HOSTS" --days 30 --reports-per-host "${REPORTS_PER_HOST:-3}" | psql -X -q "$store" >/dev/null
# The current state ingest would have kept (as migration 2 derives it).
psql -X -q "$store" <<'SQL'
UPDATE host_revisions SET labels = coalesce((SELECT hosts.labels FROM hosts WHERE hosts.name = host_revisions.host), '{}');
INSERT INTO revisions (revision, first_at, last_at)
    SELECT revision, min(first_at), max(last_at) FROM host_revisions GROUP BY revision ON CONFLICT DO NOTHING;
INSERT INTO drift_clusters (signature, observed, hosts, subject, category, class, paths, first_seen, last_seen, checks)
    SELECT signature, observed, count(*), min(subject), min(category), min(class), min(paths),
           min(first_seen), max(last_seen), 1
    FROM findings GROUP BY signature, observed ON CONFLICT DO NOTHING;
ANALYZE;
SQL
url="https://127.0.0.1:$port"
admin=$(sed -n 's/^token: //p' "$W/srv/admin.yaml")
# BASELINE_BIN=<an older datum>: the same store served by it and by this
# build in turn (baseline, current, baseline, current), each run its own line
# with "bin": "baseline" or "current", so the two are compared in one run.
runs=(current)
if [ -n "${BASELINE_BIN:-}" ]; then runs=(baseline current baseline current); fi
for which in "${runs[@]}"; do
  if [ "$which" = baseline ]; then bin=$BASELINE_BIN; else bin=$datum; fi
  datum=$bin serve # the first renders every host's picture (backfill), then serves
  load_start=$(cut -d' ' -f1 /proc/loadavg)
  r=$(node bench/web-load.mjs "$url" "$admin" "$W/srv/server.pem" "$W/srv/ca.pem" "$LOADS")
  echo "{\"run\": \"$(date -u +%FT%TZ)\", \"bin\": \"$which\", \"hosts\": $HOSTS, \"store\": \"postgres\", \"nproc\": $(nproc), \"load1\": $load_start, \"load1_end\": $(cut -d' ' -f1 /proc/loadavg), \"web\": $r, \"server_rss_mib\": $(awk '/VmHWM/ {print $2/1024}' "/proc/$server_pid/status")}" | tee -a "$OUT"
  kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""
done
