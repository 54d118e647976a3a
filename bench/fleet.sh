#!/usr/bin/env bash
# Benchmark of the fleet server (issue 13), side by side in one run with
# PuppetDB 7 (the kit in ../shared/bench/puppetdb). Not a test: prints
# JSON lines and a summary, and appends them to $OUT.
#
#   bench/fleet.sh [SHARED_BENCH_DIR]      (default ../shared/bench)
#
# 1. Ingest: realistic reports (500 resources, 20 findings, 5 Trees, 5.8 KB)
#    from $CONCURRENCY (default 64) simulated hosts at once, each on its own
#    keep-alive HTTPS connection and waiting for its answer before the next
#    report (as a host's outbox does), into `datum server` on a PostgreSQL of
#    its own (scripts/postgres): reports/s stored (every 200 is committed),
#    POST latency, server peak RSS; then the same with 4 hosts at once. The
#    load generator is compiled (datum-server's example `fleet-load`), so
#    the two cores go to the server and the database. Then PuppetDB 7 ingesting
#    its own reports of the same size (500 resources, 20 events, 185 KB
#    wire format) through the kit's bench.py, processed/s.
# 2. Queries at 10,000 hosts with 30 days of history (populated with SQL:
#    the tables as the server would hold them after 30 days, retention
#    included; the reports table itself, which none of these queries reads,
#    holds 3 whole reports per host instead of 100 to keep the set-up short):
#    `hosts`, `rollout`, `drift`, `stale`, p50/p99 over HTTPS.
# 3. Host side: what reporting adds to a no-op `datum apply` (2,000 Files),
#    and the outbox after an hour's outage (60 checks queued; size; drain).
#
# Needs root (PuppetDB's kit, runuser for PostgreSQL). The machine may be
# shared: every result carries the load average.
#
# SECTIONS (default "ingest puppetdb queries host") runs only some of them,
# e.g. SECTIONS=queries NO_BUILD=1 bench/fleet.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
SB=${1:-../shared/bench}
OUT=${OUT:-bench/fleet-results.jsonl}
HOSTS=${HOSTS:-10000}
INGEST=${INGEST:-20000}
PDB_COUNT=${PDB_COUNT:-2000}
RUNS=${RUNS:-20}
W=$(mktemp -d)
server_pid=""
pg_dir=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
  [ -n "$pg_dir" ] && ./scripts/postgres stop "$pg_dir" || true
  rm -rf "$W"
}
trap cleanup EXIT

CONCURRENCY=${CONCURRENCY:-64}
SECTIONS=${SECTIONS:-ingest puppetdb queries host}
want() { case " $SECTIONS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
[ -n "${NO_BUILD:-}" ] || { cargo build --release --quiet -p datum && cargo build --release --quiet -p datum-server --example fleet-load; }
datum=$PWD/target/release/datum
load=$PWD/target/release/examples/fleet-load
note() { echo "$*" | tee -a "$OUT"; }
note "{\"run\": \"$(date -u +%FT%TZ)\", \"load1\": $(cut -d' ' -f1 /proc/loadavg), \"nproc\": $(nproc)}"

# --- 1. Datum ingest into PostgreSQL -------------------------------------
eval "$(./scripts/postgres start)"
pg_dir=$DATUM_TEST_POSTGRES_DIR
psql -X -q "$DATUM_TEST_POSTGRES" -c "CREATE DATABASE fleet"
store="${DATUM_TEST_POSTGRES%/*}/fleet"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$datum" server init --dir "$W/srv" --listen "127.0.0.1:$port" --store "$store" >/dev/null
# No rate limit for the load generator (it posts for 10,000 hosts from one
# address; the per-identity limit is not what is measured).
sed -i 's/reports_per_minute: .*/reports_per_minute: 1000000/' "$W/srv/server.yaml"
python3 bench/fleet-load.py tokens --hosts "$HOSTS" | psql -X -q "$store"
"$datum" server serve --dir "$W/srv" 2>"$W/serve.log" &
server_pid=$!
for _ in $(seq 100); do grep -q listening "$W/serve.log" && break; sleep 0.1; done
url="https://127.0.0.1:$port"
admin=$(sed -n 's/^token: //p' "$W/srv/admin.yaml")
if want ingest; then
# Warm-up (connections, prepared statements), then the measured run.
"$load" ingest "$url" "$W/srv/ca.pem" --hosts "$HOSTS" --count 1000 --concurrency "$CONCURRENCY" --seq-offset 0 >/dev/null
# PostgreSQL's own CPU seconds (the postmaster and its backends; the
# pool's backends live through the run), before and after each series.
pg_cpu() {
  python3 - "$(head -1 "$pg_dir/data/postmaster.pid")" <<'EOF'
import os, sys
pm, t = sys.argv[1], 0
for p in os.listdir("/proc"):
    try:
        f = open("/proc/%s/stat" % p).read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        continue
    if p == pm or f[1] == pm:
        t += int(f[11]) + int(f[12])
print(round(t / os.sysconf("SC_CLK_TCK"), 2))
EOF
}
c0=$(pg_cpu)
r=$("$load" ingest "$url" "$W/srv/ca.pem" --hosts "$HOSTS" --count "$INGEST" --concurrency "$CONCURRENCY" --pid "$server_pid" --seq-offset 1)
note "{\"datum_ingest_postgres\": $r, \"postgres_cpu_s\": $(python3 -c "print(round($(pg_cpu) - $c0, 2))")}"
c0=$(pg_cpu)
r=$("$load" ingest "$url" "$W/srv/ca.pem" --hosts "$HOSTS" --count "$((INGEST / 4))" --concurrency 4 --pid "$server_pid" --seq-offset 100)
note "{\"datum_ingest_postgres_4_hosts_at_once\": $r, \"postgres_cpu_s\": $(python3 -c "print(round($(pg_cpu) - $c0, 2))")}"
fi
kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""

# --- 1b. PuppetDB 7, same machine, same run --------------------------------
if want puppetdb && [ -f "$SB/puppetdb/setup.sh" ]; then
  (cd "$SB/puppetdb" && sh setup.sh install >/dev/null 2>&1 && sh setup.sh reset >/dev/null && sh setup.sh start >/dev/null)
  pdb=$(python3 "$SB/puppetdb/bench.py" --out "$W/pdb" ingest --first 0 --count "$PDB_COUNT" --concurrency 4 2>&1 | tail -1 || true)
  res=$(ls -t "$W"/pdb/ingest-*.json 2>/dev/null | head -1 || true)
  if [ -n "$res" ]; then
    note "{\"puppetdb_ingest\": $(python3 -c "import json,sys; d=json.load(open('$res')); print(json.dumps({k: d.get(k) for k in ('count','processed','processed_per_s','processed_per_s_steady_10_90','accept_per_s','report_bytes_min','resources')}))")}"
  else
    note "{\"puppetdb_ingest\": \"no result: $pdb\"}"
  fi
  (cd "$SB/puppetdb" && sh setup.sh stop >/dev/null 2>&1 || true)
fi

if want queries; then
# --- 2. Queries at 10,000 hosts, 30 days ------------------------------------
psql -X -q "$DATUM_TEST_POSTGRES" -c "CREATE DATABASE fleetq"
qstore="${DATUM_TEST_POSTGRES%/*}/fleetq"
"$datum" server serve --dir "$W/srv" --store "$qstore" 2>"$W/serve2.log" &
server_pid=$!
for _ in $(seq 100); do grep -q listening "$W/serve2.log" && break; sleep 0.1; done
kill "$server_pid"; wait "$server_pid" 2>/dev/null || true
# The schema exists now (the server migrated it); fill it.
python3 bench/fleet-load.py populate --hosts "$HOSTS" --days 30 --reports-per-host "${REPORTS_PER_HOST:-3}" | psql -X -q "$qstore" >/dev/null
# The admin token of this folder, in the new database too.
psql -X -q "$qstore" -c "INSERT INTO identities (token_hash, name, kind, created_at) VALUES ('$(printf %s "$admin" | sha256sum | cut -d' ' -f1)', 'admin', 'admin', 0)"
# The hosts' tokens (for the reports stored between queries below).
python3 bench/fleet-load.py tokens --hosts "$HOSTS" | sed '/^COPY hosts/,$d' | psql -X -q "$qstore"
"$datum" server serve --dir "$W/srv" --store "$qstore" 2>"$W/serve3.log" &
server_pid=$!
for _ in $(seq 100); do grep -q listening "$W/serve3.log" && break; sleep 0.1; done
# Asked again and again with nothing stored in between: the answers each
# server process keeps while the store's generation is unchanged.
q=$("$load" query "$url" "$W/srv/ca.pem" --admin "$admin" --requests 200)
note "{\"datum_queries_10k_hosts_30_days\": $q, \"rss_mib\": $(awk '/VmHWM/ {print $2/1024}' /proc/$server_pid/status)}"
# A report stored (untimed) before every request: each answer computed
# afresh, as while the fleet reports.
q=$("$load" query "$url" "$W/srv/ca.pem" --admin "$admin" --requests 200 --ingest-between)
note "{\"datum_queries_10k_hosts_30_days_report_before_each\": $q, \"rss_mib\": $(awk '/VmHWM/ {print $2/1024}' /proc/$server_pid/status)}"
kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""

fi

want host || exit 0
# --- 3. Host side -------------------------------------------------------------
H=$W/host
python3 - "$H" <<'EOF'
import os, sys
h = sys.argv[1]
for i in range(2000):
    d = os.path.join(h, "repo/base/files/d%02d" % (i % 40))
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, "f%04d.conf" % i), "w").write("value = %d\n" % i)
os.makedirs(os.path.join(h, "repo/base"), exist_ok=True)
with open(os.path.join(h, "repo/datum.yaml"), "w") as f:
    f.write("datum: v1alpha1\nlayers:\n  - {name: base, path: base, match: {}}\n")
with open(os.path.join(h, "repo/base/files.yaml"), "w") as f:
    for i in range(2000):
        f.write("---\ndatum: v1alpha1\ntype: File\nname: f%04d\ndesired: {path: /etc/bench/d%02d/f%04d.conf, source: files/d%02d/f%04d.conf, mode: \"0644\"}\n" % (i, i % 40, i, i % 40, i))
    for d in range(40):
        f.write("---\ndatum: v1alpha1\ntype: Directory\nname: d%02d\ndesired: {path: /etc/bench/d%02d, mode: \"0755\"}\n" % (d, d))
    f.write("---\ndatum: v1alpha1\ntype: Directory\nname: bench\ndesired: {path: /etc/bench, mode: \"0755\"}\n---\ndatum: v1alpha1\ntype: Directory\nname: etc\ndesired: {path: /etc, mode: \"0755\"}\n")
os.makedirs(os.path.join(h, "root/etc/datum"), exist_ok=True)
open(os.path.join(h, "root/etc/datum/host.yaml"), "w").write("name: host-00001\nlabels: {role: web}\n")
EOF
# The SQLite server of a laptop fleet, for the host-side numbers.
lport=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$datum" server init --dir "$W/lite" --listen "127.0.0.1:$lport" >/dev/null
"$datum" server enroll host-00001 --dir "$W/lite" --out "$W/report.yaml" >/dev/null
"$datum" server serve --dir "$W/lite" 2>"$W/serve4.log" &
lite_pid=$!
for _ in $(seq 100); do grep -q listening "$W/serve4.log" && break; sleep 0.1; done
dh=("$datum" --repo "$H/repo" --root "$H/root")
"${dh[@]}" apply >/dev/null || true
"${dh[@]}" apply >/dev/null
sleep 3
"${dh[@]}" apply >/dev/null
# RUNS passes each, GAP seconds apart (not timed: a pass's background
# delivery finishes before the next pass, as with passes minutes apart),
# then RUNS back to back (each delivery overlaps the next pass). The
# outbox is checked empty at the end: every report was delivered.
time_runs() {
  python3 - "$RUNS" "$@" <<'EOF'
import os, re, subprocess, sys, time, statistics, json
n = int(sys.argv[1]); gap = float(sys.argv[2]); cmd = sys.argv[3:]
t = []; cpu = []; own = []; phases = {}
env = dict(os.environ, DATUM_LOG="datum::reporting=debug")
for _ in range(n):
    time.sleep(gap)
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    err = p.stderr.read().decode(errors="replace")
    _, _, ru = os.wait4(p.pid, 0)
    t.append((time.perf_counter() - t0) * 1000)
    # The pass's own CPU (a detached delivery is not waited for, so not in it).
    cpu.append((ru.ru_utime + ru.ru_stime) * 1000)
    # What reporting cost inside the pass, as the pass timed it.
    m = re.search(r"total_ms=([0-9.]+)", err)
    if m:
        own.append(float(m.group(1)))
        for k, v in re.findall(r"(\w+)=([0-9.]+)", err.split("phases=", 1)[1]):
            phases.setdefault(k, []).append(float(v))
def stats(xs):
    xs = sorted(xs)
    return {"median_ms": round(statistics.median(xs), 3), "min_ms": round(xs[0], 3), "max_ms": round(xs[-1], 3)}
out = {"median_ms": round(statistics.median(t), 2), "min_ms": round(min(t), 2), "max_ms": round(max(t), 2),
       "cpu_median_ms": round(statistics.median(cpu), 2), "cpu_min_ms": round(min(cpu), 2), "cpu_max_ms": round(max(cpu), 2),
       "runs": n, "gap_s": gap}
if own:
    out["reporting_in_pass"] = stats(own)
    out["reporting_phases_median_ms"] = {k: round(statistics.median(v), 3) for k, v in phases.items()}
print(json.dumps(out))
EOF
}
GAP=${GAP:-0.5}
without=$(time_runs "$GAP" "${dh[@]}" apply)
without_b2b=$(time_runs 0 "${dh[@]}" apply)
cp "$W/report.yaml" "$H/root/etc/datum/report.yaml"
"${dh[@]}" apply >/dev/null
sleep 1
with=$(time_runs "$GAP" "${dh[@]}" apply)
with_b2b=$(time_runs 0 "${dh[@]}" apply)
sleep 2
depth=$("${dh[@]}" outbox --output json | python3 -c 'import json,sys; print(json.load(sys.stdin)["depth"])')
note "{\"noop_apply_2000_files\": {\"without_reporting\": $without, \"with_reporting\": $with, \"without_reporting_back_to_back\": $without_b2b, \"with_reporting_back_to_back\": $with_b2b, \"outbox_depth_after\": $depth, \"load1\": $(cut -d' ' -f1 /proc/loadavg)}}"

# An hour's outage: 60 checks (an agent checking every minute) while the
# server is down, then the drain.
kill "$lite_pid"; wait "$lite_pid" 2>/dev/null || true
for _ in $(seq 60); do "${dh[@]}" check >/dev/null 2>&1 || true; done
bytes=$(python3 -c "
import sqlite3,sys; c=sqlite3.connect('$H/root/var/lib/datum/state.db'); print(c.execute('select count(*), coalesce(sum(length(body)),0) from outbox').fetchone())" 2>/dev/null || echo '"sqlite3 module missing"')
"$datum" server serve --dir "$W/lite" 2>"$W/serve5.log" &
lite_pid=$!
for _ in $(seq 100); do grep -q listening "$W/serve5.log" && break; sleep 0.1; done
t0=$(date +%s.%N)
"${dh[@]}" outbox --flush >/dev/null
t1=$(date +%s.%N)
note "{\"outbox_one_hour_outage\": {\"queued_count_bytes\": \"$bytes\", \"drain_s\": $(python3 -c "print(round($t1 - $t0, 3))"), \"load1\": $(cut -d' ' -f1 /proc/loadavg)}}"
kill "$lite_pid"; wait "$lite_pid" 2>/dev/null || true
