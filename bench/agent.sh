#!/usr/bin/env bash
# Benchmark: `datum agent` (issue 6). Not a test: prints figures.
#
#   bench/agent.sh [SHARED_BENCH_DIR]          (default ../shared/bench)
#
# On the standard estate (20,000 files, ~280 MB, from make-estate.py), declared
# as 20,000 File resources by bench/make-datum-repo.py; the first 200 are in a
# watched `critical` class (interval 60s), the rest in `normal` (interval 1h).
#   1. detection latency: 200 edits of watched files, one at a time, each
#      timed from the write to the moment /metrics shows one more open
#      finding (polled every 2 ms), p50/p99/max;
#   2. idle CPU: user+sys of the agent over IDLE_SECONDS (default 600) after
#      its first full pass, with its interval checks running as scheduled;
#   3. memory: RSS after 1, 10, 100, ... PASSES (default 1000) full passes of
#      all 20,000 resources (content read and hashed each time), back to
#      back (--full-interval 1ms).
# Environment: IDLE_SECONDS, PASSES, EDITS, BENCH_ROOT (default
# /var/tmp/datum-bench), ESTATE_ARGS and DATUM_BIN (smoke runs). Needs root
# (the estate is owned by root).
set -euo pipefail
cd "$(dirname "$0")/.."
SB=$(realpath "${1:-../shared/bench}")
W=${BENCH_ROOT:-/var/tmp/datum-bench}/agent
IDLE_SECONDS=${IDLE_SECONDS:-600}
PASSES=${PASSES:-1000}
EDITS=${EDITS:-200}
mkdir -p "$W"

if [ -n "${DATUM_BIN:-}" ]; then
  DATUM=$(realpath "$DATUM_BIN")      # a smoke run with another build
else
  cargo build --release --quiet -p datum
  DATUM=$(realpath target/release/datum)
fi

# Two builds of one deterministic estate: the declared copy and the live one.
# ESTATE_ARGS (e.g. "--preset small") for a quick smoke run in another BENCH_ROOT.
read -r -a estate <<<"${ESTATE_ARGS:---preset standard}"
[ -d "$W/src" ] || python3 "$SB/make-estate.py" "${estate[@]}" "$W/src" >/dev/null
[ -d "$W/root/estate" ] || { mkdir -p "$W/root"; python3 "$SB/make-estate.py" "${estate[@]}" "$W/root/estate" >/dev/null; }
python3 bench/make-datum-repo.py "$W/src" "$W/repo" /estate >/dev/null
printf 'name: bench\nlabels: {}\n' >"$W/host.yaml"

# Classes: the first $EDITS File documents are critical and watched.
python3 - "$W/repo" "$EDITS" <<'EOF'
import sys
repo, n = sys.argv[1], int(sys.argv[2])
with open(f"{repo}/datum.yaml", "a") as f:
    f.write("classes:\n  critical: {interval: 60s, watch: true}\n  normal: {interval: 1h}\n")
path = f"{repo}/base/estate.yaml"
docs = open(path).read().split("---\n")
for i in range(n):
    docs[i] = docs[i].replace("type: File\n", "type: File\nclass: critical\n", 1)
open(path, "w").write("---\n".join(docs))
EOF

datum=("$DATUM" --repo "$W/repo" --root "$W/root" --host-file "$W/host.yaml")
rm -rf "$W/root/var/lib/datum"
"${datum[@]}" apply >/dev/null || true
"${datum[@]}" apply >/dev/null || { echo "datum apply is not a no-op on the bench estate" >&2; exit 1; }

python3 - "$W" "$EDITS" "$IDLE_SECONDS" "$PASSES" "${datum[@]}" <<'EOF'
import os, re, signal, socket, statistics, subprocess, sys, time, urllib.request

W, EDITS, IDLE, PASSES = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
DATUM = sys.argv[5:]
TICK = os.sysconf("SC_CLK_TCK")

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def start(extra):
    port = free_port()
    log = open(f"{W}/agent.log", "a")
    p = subprocess.Popen(DATUM + ["agent", "--listen", f"127.0.0.1:{port}"] + extra,
                         stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}/metrics"
    for _ in range(3000):
        try:
            urllib.request.urlopen(url, timeout=1).read(); break
        except OSError:
            time.sleep(0.01)
    return p, url

def metric(url, name):
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None

def wait_for(url, name, pred, timeout):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = metric(url, name)
        if v is not None and pred(v):
            return v
        time.sleep(0.002)
    raise SystemExit(f"timeout waiting for {name}")

def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK

def rss(pid):
    s = open(f"/proc/{pid}/status").read()
    kb = lambda k: int(re.search(rf"^{k}:\s+(\d+)", s, re.M).group(1))
    return kb("VmRSS") / 1024, kb("VmHWM") / 1024

def stop(p):
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=120) == 0, "agent did not exit 0"

FULL = 'datum_checks_total{class="normal",trigger="full"}'
DRIFT = 'datum_drift_findings{class="critical",kind="changed_outside"}'

# Which files are critical: the first EDITS documents.
docs = open(f"{W}/repo/base/estate.yaml").read().split("---\n")[:EDITS]
paths = [re.search(r"path: (\S+)", d).group(1) for d in docs]

# 1. Detection latency.
p, url = start([])
wait_for(url, FULL, lambda v: v >= 1, 300)
first = rss(p.pid)
lat = []
for i, path in enumerate(paths):
    live = f"{W}/root{path}"
    t0 = time.monotonic()
    with open(live, "a") as f:
        f.write("# edited by the benchmark\n")
    wait_for(url, DRIFT, lambda v: v >= i + 1, 10)
    lat.append((time.monotonic() - t0) * 1000)
    time.sleep(0.15)
lat.sort()
q = lambda x: lat[min(len(lat) - 1, int(round(x * (len(lat) - 1))))]
print(f"detection latency over {len(lat)} edits of watched files (write -> /metrics): "
      f"p50 {q(0.5):.1f} ms, p99 {q(0.99):.1f} ms, max {lat[-1]:.1f} ms, min {lat[0]:.1f} ms")
# Restore (copy the declared content back) and wait for the findings to clear.
for path in paths:
    src = f"{W}/src/{path[len('/estate/'):]}"
    with open(src, "rb") as a, open(f"{W}/root{path}", "wb") as b:
        b.write(a.read())
wait_for(url, DRIFT, lambda v: v == 0, 30)

# 2. Idle CPU, with the scheduled interval checks of `critical` running.
time.sleep(2)
c0, t0 = cpu(p.pid), time.monotonic()
checks0 = metric(url, 'datum_checks_total{class="critical",trigger="interval"}') or 0
time.sleep(IDLE)
c1, t1 = cpu(p.pid), time.monotonic()
checks1 = metric(url, 'datum_checks_total{class="critical",trigger="interval"}') or 0
print(f"idle CPU over {t1 - t0:.0f} s: {c1 - c0:.2f} s user+sys = {100 * (c1 - c0) / (t1 - t0):.3f} % of one core "
      f"({checks1 - checks0:.0f} interval checks of the {EDITS}-file critical class in that time); "
      f"RSS {rss(p.pid)[0]:.1f} MiB (after the first full pass: {first[0]:.1f} MiB)")
stop(p)

# 3. Memory over back-to-back full passes of all 20,000 resources.
p, url = start(["--full-interval", "1ms"])
marks = [m for m in (1, 10, 100, 250, 500, 750, 1000, 2000) if m <= PASSES]
if PASSES not in marks:
    marks.append(PASSES)
t0 = time.monotonic()
rows = []
for m in marks:
    wait_for(url, FULL, lambda v: v >= m, 7200)
    r, hwm = rss(p.pid)
    rows.append((m, r, hwm, time.monotonic() - t0))
for m, r, hwm, el in rows:
    print(f"after {m:5d} full passes: RSS {r:6.1f} MiB, peak {hwm:6.1f} MiB ({el:.0f} s)")
n = metric(url, 'datum_check_duration_seconds_count{class="normal"}')
s = metric(url, 'datum_check_duration_seconds_sum{class="normal"}')
print(f"mean inspection of the normal class ({len(open(f'{W}/repo/base/estate.yaml').read().split(chr(10) + '---' + chr(10))) - EDITS} files): {1000 * s / n:.0f} ms over {n:.0f} checks")
stop(p)
EOF
