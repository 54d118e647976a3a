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
# The load average is printed first: the machine may be shared.
# Environment: FILES, BURST, EDITS, BENCH_ROOT (default a fresh mktemp -d),
# DATUM_BIN (default: cargo build --release). Needs root (fanotify).
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${FILES:-200}
BURST=${BURST:-10000}
EDITS=${EDITS:-200}
W=${BENCH_ROOT:-$(mktemp -d)}
if [ -n "${DATUM_BIN:-}" ]; then
  DATUM=$(realpath "$DATUM_BIN")
else
  cargo build --release --quiet -p datum
  DATUM=$(realpath target/release/datum)
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"

python3 - "$W" "$FILES" "$BURST" "$EDITS" "$DATUM" <<'EOF'
import os, shutil, signal, socket, subprocess, sys, time, urllib.request

W, FILES, BURST, EDITS, DATUM = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
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
    lat.sort()
    q = lambda x: lat[min(len(lat) - 1, int(round(x * (len(lat) - 1))))]
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    return t_write, t_seen, burst_cpu, q(0.5), q(0.99), lat[0], lat[-1]

rows = [("off", run(False)), ("on", run(True))]
print(f"{FILES} watched files; burst of {BURST} appends; {EDITS} single edits")
print(f"{'attribute':<10} {'burst write s':>13} {'all seen s':>10} {'agent CPU s':>11} {'p50 ms':>8} {'p99 ms':>8} {'min-max ms':>16}")
for name, (tw, ts, c, p50, p99, lo, hi) in rows:
    print(f"{name:<10} {tw:>13.3f} {ts:>10.3f} {c:>11.2f} {p50:>8.1f} {p99:>8.1f} {lo:>7.1f}-{hi:<8.1f}")
EOF
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
