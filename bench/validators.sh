#!/usr/bin/env bash
# Benchmark (not a test): what the validators' throwaway sandbox costs per call
# (issue 11). Every shipped validator that runs a program (sshd, visudo,
# systemd-analyze, nft, haproxy, logrotate, nginx, apache2ctl) validates a
# valid configuration under a temporary root RUNS times in its sandbox and
# RUNS times without it, interleaved, in one process (no `datum` start-up in
# either column): crates/datum-providers/examples/validator_sandbox.rs.
# Prints a Markdown table (median [min-max] per column, and the median of the
# per-pair overhead) with the load average before and after.
#
#   sudo bench/validators.sh            (RUNS=15 by default)
#
# Needs root (the sandbox is a mount namespace) and the validators
# (scripts/deps installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-15}
[[ $(id -u) == 0 ]] || { echo "run as root: the sandbox needs it" >&2; exit 1; }
cargo build --release --quiet -p datum-providers --example validator_sandbox
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; $(uname -r)"
./target/release/examples/validator_sandbox "$RUNS"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
