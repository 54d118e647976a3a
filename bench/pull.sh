#!/usr/bin/env bash
# Benchmark: `datum pull` (issue 16), side by side with plain git. Not a test:
# prints figures.
#
#   bench/pull.sh                 (FILES=5000 RUNS=5 by default)
#
# A Datum repository of FILES files (datum.yaml, 50 manifests declaring one
# File per content file, FILES-51 content files of 0.2-8 KiB), two signed
# commits (the second changes 10 files), served from a local bare repository
# over file://. Measured, RUNS times each, median and min-max, wall time and
# peak RSS (of the process and the children it waited for, from GNU time):
#   1. first pull on a fresh host  vs  `git clone`  (fetch + checkout)
#   2. the next revision           vs  `git pull --ff-only` in that clone
#   3. nothing new                 vs  `git fetch` with nothing new
# datum pull also verifies the signature (ssh-keygen), lints the revision
# and switches a link; git does neither. Then the agent's memory: RSS of
# `datum agent` on the deployed repository without pulling, and with
# `--pull-interval 1s` after its first pull and after it pulled and
# reloaded 10 and REVISIONS (default 30) new revisions.
#
# Environment: FILES, RUNS, DATUM_BIN (another build), BENCH_TMP (parent of
# the scratch folder, default /var/tmp). The load average is printed first
# and last: the machine may be shared.
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${FILES:-5000}
RUNS=${RUNS:-5}
REVISIONS=${REVISIONS:-30}
command -v /usr/bin/time >/dev/null || { echo "bench/pull.sh needs GNU time (Debian package time)" >&2; exit 1; }
W=$(mktemp -d "${BENCH_TMP:-/var/tmp}/datum-bench-pull.XXXXXX")
trap 'rm -rf "$W"' EXIT

if [ -n "${DATUM_BIN:-}" ]; then
  DATUM=$(realpath "$DATUM_BIN")
else
  cargo build --release --quiet -p datum
  DATUM=$(realpath target/release/datum)
fi

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
echo "git: $(git --version); datum: $DATUM"

export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
export GIT_AUTHOR_NAME=Bench GIT_AUTHOR_EMAIL=bench@example.com
export GIT_COMMITTER_NAME=Bench GIT_COMMITTER_EMAIL=bench@example.com
ssh-keygen -q -t ed25519 -N '' -C bench -f "$W/key"
echo "bench@example.com $(cut -d' ' -f1,2 "$W/key.pub")" >"$W/allowed_signers"

python3 - "$W/work" "$FILES" <<'EOF'
import os, random, sys
work, files = sys.argv[1], int(sys.argv[2])
rng = random.Random(16)
content = files - 51
os.makedirs(f"{work}/base/files")
with open(f"{work}/datum.yaml", "w") as f:
    f.write("datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n")
docs = [[] for _ in range(50)]
for i in range(content):
    d = f"{work}/base/files/d{i % 40:02d}"
    os.makedirs(d, exist_ok=True)
    size = rng.randint(200, 8192)
    with open(f"{d}/f{i:05d}.conf", "w") as f:
        f.write("".join(f"key{j} = {rng.getrandbits(48):012x}\n" for j in range(size // 22)))
    docs[i % 50].append(
        f"datum: v1alpha1\ntype: File\nname: f{i}\ndesired:\n  path: /srv/bench/f{i:05d}.conf\n"
        f"  source: files/d{i % 40:02d}/f{i:05d}.conf\n  mode: \"0644\"\n")
for m, ds in enumerate(docs):
    with open(f"{work}/base/m{m:02d}.yaml", "w") as f:
        f.write("---\n".join(ds))
EOF
sign=(-c gpg.format=ssh -c "user.signingkey=$W/key")
git -C "$W/work" init -q -b main
git -C "$W/work" add -A
git -C "$W/work" "${sign[@]}" commit -q -S -m one
C1=$(git -C "$W/work" rev-parse HEAD)
git clone -q --bare "$W/work" "$W/remote.git"
for i in 0 1 2 3 4 5 6 7 8 9; do
  echo "changed = $RANDOM" >>"$W/work/base/files/d0$i/f0000$i.conf"
done
git -C "$W/work" "${sign[@]}" commit -q -a -S -m two
C2=$(git -C "$W/work" rev-parse HEAD)
echo "repository: $(git -C "$W/work" ls-files | wc -l) files, $(du -sh --exclude=.git "$W/work" | cut -f1) checked out, pack $(du -sh "$W/remote.git" | cut -f1)"

python3 - "$W" "$DATUM" "$RUNS" "$C1" "$C2" "$REVISIONS" <<'EOF'
import os, shutil, socket, statistics, subprocess, sys, time, urllib.request
W, DATUM, RUNS, C1, C2 = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
REVISIONS = int(sys.argv[6])
URL = f"file://{W}/remote.git"

def run(cmd, cwd=None, ok=(0,)):
    """Wall seconds and peak RSS (MiB) of one command and the children it
    waited for, through GNU time (wait4 from this Python process would count
    Python's own RSS, which a child inherits until it execs)."""
    out = f"{W}/time.out"
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", out, *cmd], cwd=cwd,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    took = time.perf_counter() - t0
    if p.returncode not in ok:
        sys.exit(f"{cmd[:3]} exited {p.returncode}: {p.stderr.decode()[-2000:]}")
    kib = int(open(out).read().split()[-1])
    return took, kib / 1024

def git(*args, cwd=None):
    subprocess.run(["git", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

def set_remote(commit):
    git("push", "-q", "--force", URL, f"{commit}:refs/heads/main", cwd=f"{W}/work")

def pull(root, ok=(0, 2)):
    return run([DATUM, "--root", root, "pull", "--url", URL, "--allowed-signers", f"{W}/allowed_signers"], ok=ok)

def fmt(samples):
    times = sorted(s[0] for s in samples)
    rss = max(s[1] for s in samples)
    return f"{statistics.median(times):7.3f} s (min {times[0]:.3f}, max {times[-1]:.3f}), peak {rss:5.1f} MiB"

rows = []
def row(name, datum, peer):
    d, p = statistics.median(s[0] for s in datum), statistics.median(s[0] for s in peer)
    rows.append((name, fmt(datum), fmt(peer), d / p))

# 1. First pull on a fresh host vs git clone.
set_remote(C1)
d, g = [], []
for i in range(RUNS):
    root = f"{W}/root-{i}"
    os.makedirs(root)
    d.append(pull(root, ok=(2,)))
    dest = f"{W}/clone-{i}"
    g.append(run(["git", "clone", "-q", URL, dest]))
row("first pull (fresh host) vs git clone", d, g)

# 2. The next revision (10 files changed): from a copy of a host at C1.
set_remote(C2)
d, g = [], []
for i in range(RUNS):
    root = f"{W}/next-{i}"
    shutil.copytree(f"{W}/root-0", root, symlinks=True)
    d.append(pull(root, ok=(2,)))
    clone = f"{W}/clone-{i}"
    g.append(run(["git", "pull", "-q", "--ff-only"], cwd=clone))
row("next revision (10 files changed) vs git pull --ff-only", d, g)

# 3. Nothing new.
d = [pull(f"{W}/next-0", ok=(0,)) for _ in range(RUNS)]
g = [run(["git", "fetch", "-q"], cwd=f"{W}/clone-0") for _ in range(RUNS)]
row("nothing new vs git fetch", d, g)

print()
print(f"| what | datum pull | git | ratio |")
print(f"| --- | --- | --- | --- |")
for name, dd, gg, ratio in rows:
    print(f"| {name} | {dd} | {gg} | {ratio:.2f}x |")

# 4. The agent's memory, without and with pulling.
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def rss(pid):
    fields = {}
    for line in open(f"/proc/{pid}/status"):
        k, v = line.split(":", 1)
        fields[k] = v.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024

def metrics(port):
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()

def agent(root, extra, wait_for):
    port = free_port()
    p = subprocess.Popen([DATUM, "--root", root, "agent", "--listen", f"127.0.0.1:{port}", *extra],
                         stdout=subprocess.DEVNULL, stderr=open(f"{W}/agent.log", "a"))
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if wait_for(metrics(port)):
                return p, port
        except OSError:
            pass
        time.sleep(0.05)
    p.kill()
    sys.exit("the agent did not come up; see " + f"{W}/agent.log")

root = f"{W}/agent-root"
shutil.copytree(f"{W}/next-0", root, symlinks=True)
os.makedirs(f"{root}/srv/bench", exist_ok=True)
link = f"{root}/etc/datum/repository"
checked = lambda m: 'datum_checks_total{class="normal",trigger="full"} 1' in m
p, port = agent(root, ["--repo", link, "--full-interval", "1h"], checked)
time.sleep(1)
without = rss(p.pid)
p.terminate(); p.wait()

shutil.copy(f"{W}/allowed_signers", f"{root}/etc/datum/allowed_signers")
with open(f"{root}/etc/datum/pull.yaml", "w") as f:
    f.write(f"url: {URL}\nref: main\nallowed_signers: /etc/datum/allowed_signers\n")
p, port = agent(root, ["--full-interval", "1h", "--pull-interval", "1s"], checked)
time.sleep(1)
first = rss(p.pid)
work = f"{W}/work"
readings = {}
for k in range(1, REVISIONS + 1):
    with open(f"{work}/base/files/d01/f00001.conf", "a") as f:
        f.write(f"rev = {k}\n")
    git("-c", "gpg.format=ssh", "-c", f"user.signingkey={W}/key", "commit", "-q", "-a", "-S", "-m", f"rev {k}", cwd=work)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, capture_output=True, text=True, check=True).stdout.strip()
    git("push", "-q", "--force", URL, "HEAD:refs/heads/main", cwd=work)
    deadline = time.time() + 60
    while f'revision="{head}"' not in metrics(port):
        if time.time() > deadline:
            sys.exit(f"the agent did not reload {head}")
        time.sleep(0.05)
    if k in (10, REVISIONS):
        time.sleep(1.5)
        readings[k] = rss(p.pid)
p.terminate(); p.wait()
print()
print(f"agent RSS (MiB): without pulling {without[0]:.1f} (peak {without[1]:.1f}); "
      f"with --pull-interval, after its first pull (nothing new) {first[0]:.1f} (peak {first[1]:.1f})"
      + "".join(f"; after pulling and reloading {k} new revisions {r[0]:.1f} (peak {r[1]:.1f})" for k, r in sorted(readings.items())))
EOF
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
