#!/usr/bin/env python3
"""CPU time of the metadata pass (`datum check --sample 0`) of several builds
side by side, beside `find -printf` over the same files: the measurement behind
issue 17's "CPU <= 1.2x find" row, in more runs than compare.sh makes (each
run takes 0.1 s; the differences looked for are a few milliseconds).

    sudo bench/metadata-cpu.py RUNS BIN...

Uses the 20,000-File workloads bench/scaling.sh sets up (run it once first,
`ONLY=files` is enough): the repository in an ordinary folder and the same
repository as `datum pull` deployed it. SIZE=files100k measures its
100,000-File workloads instead (default: SIZE=standard). Each build gets a private state
folder of its own under $OUT (default /var/tmp/drift-bench/metadata-cpu), is
converged there with one apply and warmed with two checks; then every round
runs each build's two checks and `find` once, alternating. CPU (user + system)
and minor page faults come from wait4(2) of each child, so nothing but the
command itself is counted; wall time is from the fork to the reaping. Prints
medians, minimum and maximum, and the load. To see the pass with the other
core busy, start `while :; do :; done` on it first (issue 17 asks for wall
<= 1.3x find then).
"""
import os
import statistics
import subprocess
import sys
import time

D = os.environ.get("BENCH_ROOT", "/var/tmp/drift-bench")
S = os.path.join(D, "scaling")
SIZE = os.environ.get("SIZE", "standard")
OUT = os.environ.get("OUT", os.path.join(D, "metadata-cpu" + ("" if SIZE == "standard" else "-" + SIZE)))
REPOS = {
    "ordinary": os.path.join(S, f"files-{SIZE}"),
    "pulled": os.path.join(D, f"etc/datum/repo-{SIZE}"),
}


def datum(binary, tag, where, verb=("check", "--sample", "0")):
    state = os.path.join(OUT, f"{tag}-{where}")
    os.makedirs(state, mode=0o700, exist_ok=True)
    return [binary, "--repo", REPOS[where], "--root", D,
            "--host-file", os.path.join(S, "host.yaml"),
            "--state", os.path.join(state, "state.db"), *verb]


def run(cmd):
    start = time.monotonic()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = (time.monotonic() - start) * 1000
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(cmd)}: exit {os.waitstatus_to_exitcode(status)}")
    return (usage.ru_utime + usage.ru_stime) * 1000, usage.ru_minflt, wall


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    runs, binaries = int(sys.argv[1]), sys.argv[2:]
    for where, repo in REPOS.items():
        if not os.path.isdir(repo):
            sys.exit(f"{repo} is missing: run bench/scaling.sh (ONLY=files) first")
    tags = [f"{i}-{os.path.basename(b)}" for i, b in enumerate(binaries)]
    for binary, tag in zip(binaries, tags):
        for where in REPOS:
            subprocess.run(datum(binary, tag, where, ("apply",)),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(2):
                run(datum(binary, tag, where))
    # A repository changed less than 2 s ago is compiled on every run.
    time.sleep(2.5)
    load_before = open("/proc/loadavg").read().split()[:3]
    seen = {}
    find = ["find", os.path.join(D, SIZE), "-printf", "%s %T@ %m %U %G\\n"]
    for _ in range(runs):
        for binary, tag in zip(binaries, tags):
            for where in REPOS:
                seen.setdefault((tag, where), []).append(run(datum(binary, tag, where)))
        seen.setdefault(("find -printf", ""), []).append(run(find))
    print(f"# {runs} runs each, alternating; load before {' '.join(load_before)}, "
          f"after {' '.join(open('/proc/loadavg').read().split()[:3])}")
    print("| command | folder | CPU ms, median [min-max] | wall ms, median [min-max] "
          "| minor faults (median) |")
    print("| --- | --- | --- | --- | --- |")
    for (tag, where), values in seen.items():
        cpu = [v[0] for v in values]
        faults = [v[1] for v in values]
        wall = [v[2] for v in values]
        print(f"| {tag} | {where} | {statistics.median(cpu):.1f} "
              f"[{min(cpu):.1f}-{max(cpu):.1f}] | {statistics.median(wall):.1f} "
              f"[{min(wall):.1f}-{max(wall):.1f}] | {statistics.median(faults):.0f} |")


if __name__ == "__main__":
    main()
