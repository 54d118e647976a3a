#!/usr/bin/env bash
# A local user's chain of folders in a purged Tree: how long `datum apply` takes
# to save it as evidence and purge it, for one or two builds side by side (a
# benchmark, not a timed test; issue 17's "cost that does not grow" for the walks
# a local user's depth reaches, and the descriptor share past which folders on
# the way are let go and opened again).
#
#   bench/deep-chain.sh DEPTH NOFILE BIN [BIN2]
#
# For each build: a repository with one Tree (`purge: true`) at /etc/t under a
# fresh --root, a first apply, then a chain DEPTH folders deep made below /etc/t
# with mkdirat/openat (no path is ever longer than one name), then `datum apply`
# under `ulimit -n NOFILE` (the walk's share is an eighth of the limit less 64:
# 120 at 1,024, 8 at 128). Prints the wall time, the exit code (2: changed) and
# whether the chain is gone. Each run is bounded by TIMEOUT seconds (default 400).
set -u
if [ $# -lt 3 ]; then
  echo "usage: $0 DEPTH NOFILE BIN [BIN2]" >&2
  exit 1
fi
depth=$1 nofile=$2
shift 2
work=$(mktemp -d "${TMPDIR:-/var/tmp}/datum-deep-chain.XXXXXX")
trap 'rm -rf "$work"' EXIT
for bin in "$@"; do
  b="$work/run"
  rm -rf "$b"
  mkdir -p "$b/repo/base/tree" "$b/root/etc"
  printf 'datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n' > "$b/repo/datum.yaml"
  printf 'datum: v1alpha1\ntype: Tree\nname: t\ndesired:\n  path: /etc/t\n  source: tree\n  purge: true\n' > "$b/repo/base/main.yaml"
  printf 'name: bench-host\nlabels: {}\n' > "$b/host.yaml"
  echo conf > "$b/repo/base/tree/a.conf"
  datum() { "$bin" --repo "$b/repo" --root "$b/root" --host-file "$b/host.yaml" --color never "$@"; }
  datum apply > "$b/first.txt" 2>&1
  rc=$?
  if [ $rc -gt 2 ]; then
    echo "$bin: first apply exit $rc" >&2
    cat "$b/first.txt" >&2
    exit 1
  fi
  python3 - "$b/root/etc/t" "$depth" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_DIRECTORY)
for _ in range(int(sys.argv[2])):
    os.mkdir("d", dir_fd=fd)
    below = os.open("d", os.O_DIRECTORY, dir_fd=fd)
    os.close(fd)
    fd = below
os.close(fd)
PY
  start=$(date +%s.%N)
  ( ulimit -n "$nofile" && timeout "${TIMEOUT:-400}" "$bin" --repo "$b/repo" --root "$b/root" \
      --host-file "$b/host.yaml" --color never apply > "$b/out.txt" 2>&1 )
  rc=$?
  end=$(date +%s.%N)
  if [ -e "$b/root/etc/t/d" ]; then left="chain left"; else left="chain gone"; fi
  [ $rc -eq 124 ] && left="killed after ${TIMEOUT:-400} s"
  printf '%s: depth %s, ulimit -n %s: exit %s, %s, %.2f s\n' "$bin" "$depth" "$nofile" "$rc" "$left" \
    "$(echo "$end - $start" | bc)"
done
