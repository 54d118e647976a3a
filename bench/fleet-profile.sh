#!/usr/bin/env bash
# Where PostgreSQL's time goes while `datum server` ingests reports (issue 13).
#
#   bench/fleet-profile.sh                      # target/release/datum
#   DATUM=/path/to/other/datum bench/fleet-profile.sh
#
# A throwaway PostgreSQL (scripts/postgres) with pg_stat_statements loaded,
# a server on it, WARM reports (default 1,000) to warm up, then INGEST
# reports (default 10,000) from 64 hosts at once, as bench/fleet.sh's ingest
# (needs target/release/examples/fleet-load). Prints the load generator's
# line, PostgreSQL's own CPU seconds (postmaster and its children) for the
# measured series, the statements by time, the row writes per table and the
# plan of the stored-findings read. WARM=HOSTS (10,000) measures the steady
# state (every host has reported before: its findings are stored already).
# Run two builds one after the other on the same load to compare them.
set -euo pipefail
cd "$(dirname "$0")/.."
HOSTS=${HOSTS:-10000}; INGEST=${INGEST:-10000}; CONCURRENCY=64
W=$(mktemp -d); server_pid=""; pg_dir=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null; [ -n "$pg_dir" ] && ./scripts/postgres stop "$pg_dir" || true; rm -rf "$W"; }
trap cleanup EXIT
datum=${DATUM:-$PWD/target/release/datum}; load=$PWD/target/release/examples/fleet-load
eval "$(./scripts/postgres start)"; pg_dir=$DATUM_TEST_POSTGRES_DIR
psql -X -q "$DATUM_TEST_POSTGRES" -c "ALTER SYSTEM SET shared_preload_libraries='pg_stat_statements'"
# Restart with the library loaded, as the cluster's owner (scripts/postgres
# runs it as `postgres` when we are root), with the options it started with.
bin=""
for v in 17 16 15 14 13; do [ -x "/usr/lib/postgresql/$v/bin/pg_ctl" ] && { bin=/usr/lib/postgresql/$v/bin; break; }; done
as_owner() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
as_owner "$bin/pg_ctl" -D "$pg_dir/data" -w restart -l "$pg_dir/server.log" >/dev/null
psql -X -q "$DATUM_TEST_POSTGRES" -c "CREATE DATABASE fleet"
store="${DATUM_TEST_POSTGRES%/*}/fleet"
psql -X -q "$store" -c "CREATE EXTENSION pg_stat_statements"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$datum" server init --dir "$W/srv" --listen "127.0.0.1:$port" --store "$store" >/dev/null
sed -i 's/reports_per_minute: .*/reports_per_minute: 1000000/' "$W/srv/server.yaml"
python3 bench/fleet-load.py tokens --hosts "$HOSTS" | psql -X -q "$store"
"$datum" server serve --dir "$W/srv" 2>"$W/serve.log" & server_pid=$!
for _ in $(seq 100); do grep -q listening "$W/serve.log" && break; sleep 0.1; done
url="https://127.0.0.1:$port"
pg_cpu() { python3 - "$(head -1 "$pg_dir/data/postmaster.pid")" <<'PY'
import os, sys
pm, t = sys.argv[1], 0
for p in os.listdir("/proc"):
    try: f = open("/proc/%s/stat" % p).read().rsplit(")", 1)[1].split()
    except (OSError, IndexError): continue
    if p == pm or f[1] == pm: t += int(f[11]) + int(f[12])
print(round(t / os.sysconf("SC_CLK_TCK"), 2))
PY
}
"$load" ingest "$url" "$W/srv/ca.pem" --hosts "$HOSTS" --count "${WARM:-1000}" --concurrency "$CONCURRENCY" --seq-offset 0 >/dev/null
psql -X -q "$store" -c "SELECT pg_stat_statements_reset()" >/dev/null
c0=$(pg_cpu)
r=$("$load" ingest "$url" "$W/srv/ca.pem" --hosts "$HOSTS" --count "$INGEST" --concurrency "$CONCURRENCY" --pid "$server_pid" --seq-offset 1)
echo "$r"; echo "pg_cpu_s $(python3 -c "print(round($(pg_cpu) - $c0, 2))") load $(cut -d' ' -f1 /proc/loadavg)"
psql -X "$store" -c "SELECT calls, round(total_exec_time::numeric,0) ms, round((total_exec_time/calls)::numeric,3) per_call, rows, left(regexp_replace(query,'\s+',' ','g'),110) q FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 25"
psql -X "$store" -c "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables ORDER BY n_tup_upd+n_tup_ins DESC LIMIT 10"
psql -X "$store" -c "SELECT sum(calls) calls, round(sum(total_exec_time)::numeric) ms, left(regexp_replace(query,'\s+',' ','g'),70) q FROM pg_stat_statements GROUP BY 3 ORDER BY 2 DESC LIMIT 15"
hosts=$(python3 -c "print(','.join(\"'host-%05d'\" % i for i in range(100,164)))")
types=$(python3 -c "print(','.join(['text']*64))")
args=$(python3 -c "print(','.join('\$%d' % i for i in range(1,65)))")
psql -X "$store" -c "SET plan_cache_mode = force_generic_plan" -c "PREPARE f($types) AS SELECT signature, observed, class, changed_by, host FROM findings WHERE host IN ($args)" -c "EXPLAIN (ANALYZE, BUFFERS) EXECUTE f($hosts)"
psql -X "$store" -c "SELECT pg_size_pretty(pg_total_relation_size('reports')) reports, pg_size_pretty(pg_total_relation_size('findings')) findings, pg_size_pretty(pg_total_relation_size('hosts')) hosts, (SELECT avg(pg_column_size(body)) FROM reports) body_bytes"

