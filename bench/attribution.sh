#!/usr/bin/env bash
# Benchmark: attribution (issue 20). Not a test: prints figures.
#
#   bench/attribution.sh
#
# A watched class of FILES (default 200) files, checked by `datum agent`
# twice, side by side in one run: `attribute: false` and `attribute: true`.
# For each:
#   1. a burst of BURST (default 10,000) appends spread over the files, as
#      fast as one process writes them: the writer's time (attribution never
#      blocks a writer: fanotify notification marks only queue an event), the
#      agent's CPU (user+sys from the burst's start until every file shows as
#      drifted on /metrics and the agent has gone quiet), and the time until
#      /metrics shows them all;
#   2. detection latency: EDITS (default 200) single edits, one at a time,
#      each timed from the write to /metrics showing one more open finding
#      (polled every 2 ms): p50/p99/max.
# ROUNDS (default 3) rounds, each running both modes one after the other
# (off, then on) with a fresh agent, so a change in the machine's load hits
# both; the burst figures are the median and min-max over the rounds, the
# latency percentiles are over all rounds' edits.
# The load average is printed before, between the rounds and after: the
# machine may be shared.
# Environment: FILES, BURST, EDITS, ROUNDS, BENCH_ROOT (default a fresh
# mktemp -d), DATUM_BIN (default: cargo build --release). Needs root
# (fanotify).
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${FILES:-200}
BURST=${BURST:-10000}
EDITS=${EDITS:-200}
ROUNDS=${ROUNDS:-3}
W=${BENCH_ROOT:-$(mktemp -d)}
if [ -n "${DATUM_BIN:-}" ]; then
  DATUM=$(realpath "$DATUM_BIN")
else
  cargo build --release --quiet -p datum
  DATUM=$(realpath target/release/datum)
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"

python3 - "$W" "$FILES" "$BURST" "$EDITS" "$DATUM" "$ROUNDS" <<'EOF'
import os, shutil, signal, socket, statistics, subprocess, sys, time, urllib.request

W, FILES, BURST, EDITS, DATUM = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
ROUNDS = int(sys.argv[6])
TICK = os.sysconf("SC_CLK_TCK")
DRIFT = 'datum_drift_findings{class="watched",kind="changed_outside"}'

def setup(attribute):
    d = f"{W}/{'on' if attribute else 'off'}"
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(f"{d}/repo/base"); os.makedirs(f"{d}/root/etc/app")
    with open(f"{d}/repo/datum.yaml", "w") as f:
        f.write("datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n"
                f"classes:\n  watched: {{interval: 1h, watch: true, attribute: {str(attribute).lower()}}}\n")
    with open(f"{d}/repo/base/files.yaml", "w") as f:
        f.write("---\n".join(
            f"datum: v1alpha1\ntype: File\nname: f{i}\nclass: watched\ndesired:\n"
            f"  path: /etc/app/f{i}.conf\n  content: \"line {i}\\n\"\n" for i in range(FILES)))
    with open(f"{d}/host.yaml", "w") as f:
        f.write("name: bench\nlabels: {}\n")
    cmd = [DATUM, "--repo", f"{d}/repo", "--root", f"{d}/root", "--host-file", f"{d}/host.yaml"]
    subprocess.run(cmd + ["apply"], stdout=subprocess.DEVNULL, check=False)
    return d, cmd

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def metric(url, name):
    try:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None

def wait_for(url, pred, timeout):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = metric(url, DRIFT)
        if v is not None and pred(v):
            return
        time.sleep(0.002)
    raise SystemExit("timeout waiting for the agent")

def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK

def restore(d):
    for i in range(FILES):
        with open(f"{d}/root/etc/app/f{i}.conf", "w") as f:
            f.write(f"line {i}\n")

def run(attribute):
    d, cmd = setup(attribute)
    port = free_port()
    log = open(f"{d}/agent.log", "w")
    p = subprocess.Popen(cmd + ["agent", "--listen", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}/metrics"
    wait_for(url, lambda v: v == 0, 120)
    time.sleep(1)
    # 1. The burst.
    c0, t0 = cpu(p.pid), time.monotonic()
    for n in range(BURST):
        with open(f"{d}/root/etc/app/f{n % FILES}.conf", "a") as f:
            f.write("x\n")
    t_write = time.monotonic() - t0
    wait_for(url, lambda v: v >= min(FILES, BURST), 300)
    t_seen = time.monotonic() - t0
    # Quiet: no CPU for 0.5 s.
    last = cpu(p.pid)
    while True:
        time.sleep(0.5)
        now = cpu(p.pid)
        if now == last:
            break
        last = now
    burst_cpu = last - c0
    restore(d)
    wait_for(url, lambda v: v == 0, 60)
    time.sleep(0.5)
    # 2. Detection latency, one edit at a time.
    lat = []
    for i in range(EDITS):
        path = f"{d}/root/etc/app/f{i % FILES}.conf"
        t = time.monotonic()
        with open(path, "a") as f:
            f.write("# edited\n")
        wait_for(url, lambda v: v >= 1, 10)
        lat.append((time.monotonic() - t) * 1000)
        with open(path, "w") as f:
            f.write(f"line {i % FILES}\n")
        wait_for(url, lambda v: v == 0, 10)
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    return (t_write, t_seen, burst_cpu), lat

def load():
    return " ".join(open("/proc/loadavg").read().split()[:3])

results = {"off": ([], []), "on": ([], [])}
for r in range(ROUNDS):
    for name in ("off", "on"):
        burst, lat = run(name == "on")
        results[name][0].append(burst)
        results[name][1].extend(lat)
    print(f"round {r + 1}/{ROUNDS} done, load average {load()}", flush=True)

def med(xs):
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"

print(f"{FILES} watched files; {ROUNDS} rounds; per round and mode a burst of {BURST} appends and {EDITS} single edits")
print("burst figures: median (min-max) over the rounds, seconds")
print(f"{'attribute':<10} {'burst write s':>22} {'all seen s':>22} {'agent CPU s':>22} {'p50 ms':>7} {'p99 ms':>7} {'min-max ms':>14}")
for name, (bursts, lat) in results.items():
    lat.sort()
    q = lambda x: lat[min(len(lat) - 1, int(round(x * (len(lat) - 1))))]
    tw, ts, c = ([b[i] for b in bursts] for i in range(3))
    print(f"{name:<10} {med(tw):>22} {med(ts):>22} {med(c):>22} {q(0.5):>7.1f} {q(0.99):>7.1f} {lat[0]:>6.1f}-{lat[-1]:<7.1f}")
EOF
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
