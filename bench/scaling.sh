#!/usr/bin/env bash
# How Datum's cost grows with the estate (issue 17): every workload at two sizes, side by side
# with a peer where there is one, in one run, so that growth is visible and a regression shows.
# A benchmark, not a timed test: nothing here fails on a slow machine.
#
#   sudo bench/scaling.sh            # build (release), set up once, measure, print the table
#
# Sizes (the issue's: 1x and 10x estates; 20k and 100k resources; 20k and 100k plan pairs):
#   * estates: the standard estate (20,000 files, 282 MB) and 10x (200,000 files in 2,000
#     directories, 2.8 GB), both from make-estate.py: `datum fingerprint` (peer: the Python
#     reference fingerprint) and `datum check` of one Tree owning the estate, on a host
#     that never applied it (no state store: the repository is compiled every time) and
#     on one that did (the catalogue snapshot is reused);
#   * File resources: 20,000 (the standard estate) and 100,000 (make-estate.py --files 100000
#     --dirs 1000), one File per file with a repository source (bench/make-datum-repo.py):
#     `plan --recompile` (the compile from YAML; also with no source-hash cache, every source
#     read and hashed), a no-op `apply` from the catalogue snapshot (also with
#     --trust-metadata, of the ordinary folder and of the pulled checkout below),
#     and the metadata pass (`check --sample 0`; peer: `find -printf`), also of the same
#     repository as `datum pull` deploys it (committed, signed, pulled under --root: a
#     checkout Datum wrote and nobody else can, so the snapshot needs no stamp of its files);
#   * plan pairs: make-plans.py's 20,000 and 100,000-resource refresh-only + normal plans
#     (~127 MB and ~640 MB per plan): `driftwatch report` (peer: jq merely reading both).
# The Tree's declared copy in the repository is a hard-link copy of the live estate at 10x
# (`cp -al`, 2.8 GB not written twice): the same bytes are hashed either way, and the page
# cache holds them once, which is kinder to the 10x row than two copies would be.
#
# Each row: timecmd.py, RUNS counted runs after one warm-up (median [min-max] wall, median
# CPU user+sys, median peak RSS of the largest process). The growth column is the larger
# size's median over the smaller's: linear is the size ratio (10x or 5x), flat memory is
# ~1.0x. The load average is printed with every row. Raw rows: $BENCH_ROOT/scaling.tsv.
#
# Environment (defaults in brackets):
#   BENCH_ROOT [/var/tmp/drift-bench]   estates and repositories (shared with check.sh)
#   DW_BENCH_DIR [/var/tmp/driftwatch-bench]  plan pairs (shared with driftwatch.sh)
#   SHARED_BENCH [<repo>/../shared/bench]  make-estate.py, make-plans.py, fingerprint_ref.py,
#                                       timecmd.py
#   RUNS [3]   DATUM, DRIFTWATCH (prebuilt binaries; default: build release)
#   ONLY       a space-separated subset of: fingerprint tree files driftwatch
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
SB=${SHARED_BENCH:-$REPO/../shared/bench}
D=${BENCH_ROOT:-/var/tmp/drift-bench}
DW=${DW_BENCH_DIR:-/var/tmp/driftwatch-bench}
S=$D/scaling
RUNS=${RUNS:-3}
ONLY=${ONLY:-fingerprint tree files driftwatch}
PY=/usr/bin/python3
TSV=$D/scaling.tsv

[[ $(id -u) == 0 ]] || { echo "run as root" >&2; exit 1; }
for f in make-estate.py make-plans.py fingerprint_ref.py timecmd.py; do
  [[ -f $SB/$f ]] || { echo "missing $SB/$f (set SHARED_BENCH)" >&2; exit 1; }
done
if [[ -z ${DATUM:-} || -z ${DRIFTWATCH:-} ]]; then
  (cd "$REPO" && cargo build --release -q -p datum -p driftwatch)
fi
DATUM=${DATUM:-$REPO/target/release/datum}
DRIFTWATCH=${DRIFTWATCH:-$REPO/target/release/driftwatch}
on() { [[ " $ONLY " == *" $1 "* ]]; }

# ---------------------------------------------------------------- setup (idempotent)
mkdir -p "$D" "$S" "$DW"
printf 'name: bench\nlabels: {}\n' > "$S/host.yaml"
estate() { # estate DIR ARGS...: a make-estate.py estate, built once
  local dir=$1; shift
  [[ -d $dir ]] || { echo "# building estate $dir ($*)" >&2; "$PY" "$SB/make-estate.py" "$@" "$dir" >/dev/null; }
}
estate "$D/standard"
on fingerprint || on tree && estate "$D/x10" --files 200000 --dirs 2000
on files && estate "$D/files100k" --files 100000 --dirs 1000

tree_repo() { # tree_repo NAME LIVE: a repository with one Tree owning /NAME under --root $D
  local name=$1 live=$2 r=$S/tree-$1
  if [[ ! -d $r/base/trees/estate ]]; then
    mkdir -p "$r/base/trees"
    cp -al "$live" "$r/base/trees/estate"
  fi
  printf 'datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n' > "$r/datum.yaml"
  printf 'datum: v1alpha1\ntype: Tree\nname: estate\ndesired: {path: /%s, source: trees/estate, owner: root, group: root}\n' \
    "$name" > "$r/base/tree.yaml"
}
files_repo() { # files_repo NAME LIVE: one File per file of LIVE (at /NAME under --root $D)
  local name=$1 live=$2 r=$S/files-$1
  [[ -f $r/base/estate.yaml ]] || "$PY" "$REPO/bench/make-datum-repo.py" "$live" "$r" "/$name" >/dev/null
}
on tree && { tree_repo standard "$D/standard"; tree_repo x10 "$D/x10"; }
on files && { files_repo standard "$D/standard"; files_repo files100k "$D/files100k"; }
pull_repo() { # pull_repo NAME: files-NAME committed, signed and deployed by `datum pull` at
  # /etc/datum/repo-NAME under --root $D (once; the git work folder is removed afterwards)
  local name=$1 w=$S/pull-$1 link=/etc/datum/repo-$1
  [[ -L $D$link ]] && return 0
  echo "# deploying files-$name with datum pull" >&2
  rm -rf "$w"; mkdir -p "$w"
  cp -al "$S/files-$name" "$w/work"
  (
    export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
    export GIT_AUTHOR_NAME=Bench GIT_AUTHOR_EMAIL=bench@example.com
    export GIT_COMMITTER_NAME=Bench GIT_COMMITTER_EMAIL=bench@example.com
    ssh-keygen -q -t ed25519 -N '' -C bench -f "$w/key"
    echo "bench@example.com $(cut -d' ' -f1,2 "$w/key.pub")" >"$w/allowed_signers"
    git -C "$w/work" init -q -b main
    git -C "$w/work" add -A
    git -C "$w/work" -c gpg.format=ssh -c "user.signingkey=$w/key" commit -q -S -m bench
    git clone -q --bare "$w/work" "$w/remote.git"
  )
  mkdir -p -m 700 "$S/state-pull-$name"
  local rc=0 # 2: deployed
  "$DATUM" --root "$D" --state "$S/state-pull-$name/state.db" --host-file "$S/host.yaml" pull \
    --url "file://$w/remote.git" --allowed-signers "$w/allowed_signers" --deploy "$link" \
    >/dev/null || rc=$?
  [[ $rc == 0 || $rc == 2 ]] || { echo "datum pull of files-$name failed (exit $rc)" >&2; exit 1; }
  rm -rf "$w"
}
on files && { pull_repo standard; pull_repo files100k; }
if on driftwatch; then
  for n in 20000 100000; do
    data=$DW/$n
    [[ $n == 20000 && ! -s $data/plan.json && -s $DW/plan.json ]] && data=$DW
    [[ -s $data/plan.json && -s $data/refresh_only.json ]] || "$PY" "$SB/make-plans.py" "$data" --resources "$n" >&2
  done
fi

datum_in() { # datum_in KIND NAME ARGS...: the datum command line for one repository
  # Each workload keeps its state (store, snapshot, source hashes) in a folder of its
  # own, as a host does: in a shared folder every repository's compile read one cache of
  # all their source hashes (34 MB with both File repositories, before 4fb571e made the
  # cache lazy, in the Tree rows too).
  # STATE_TAG names a second state for the same repository (the Tree's snapshot rows).
  local kind=$1 name=$2; shift 2
  local state=$S/state-$kind-$name${STATE_TAG:-}
  mkdir -p -m 700 "$state"
  CMD=("$DATUM" --repo "$S/$kind-$name" --root "$D" --host-file "$S/host.yaml"
       --state "$state/state.db" "$@")
}
# Converge first (a verified apply), and show each workload is clean: a row of a failing
# command measures nothing.
pulled() { # pulled NAME ARGS...: the datum command line for the pulled files-NAME
  local name=$1; shift
  CMD=("$DATUM" --repo "$D/etc/datum/repo-$name" --root "$D" --host-file "$S/host.yaml"
       --state "$S/state-pull-$name/state.db" "$@")
}
for name in standard files100k; do
  on files || break
  datum_in files "$name" apply; "${CMD[@]}" >/dev/null || true
  datum_in files "$name" check; "${CMD[@]}" >/dev/null || { echo "check of files-$name is not clean" >&2; exit 1; }
  pulled "$name" apply; "${CMD[@]}" >/dev/null || true
  pulled "$name" check; "${CMD[@]}" >/dev/null || { echo "check of the pulled files-$name is not clean" >&2; exit 1; }
done
for name in standard x10; do
  on tree || break
  datum_in tree "$name" check; "${CMD[@]}" >/dev/null || { echo "check of tree-$name is not clean" >&2; exit 1; }
  # A host that applied the Tree once: its checks start from the catalogue snapshot.
  STATE_TAG=-applied datum_in tree "$name" apply
  rc=0; "${CMD[@]}" >/dev/null || rc=$?
  [[ $rc == 0 || $rc == 2 ]] || { echo "apply of tree-$name failed (exit $rc)" >&2; exit 1; }
done
# A repository changed less than 2 s ago is compiled on every run (the snapshot's racy window).
sleep 3

# ---------------------------------------------------------------- measurements
: > "$TSV"
T() { # T LABEL CMD...
  local label=$1; shift
  printf '# %s (load %s)\n' "$label" "$(cut -d' ' -f1-3 /proc/loadavg)"
  "$PY" "$SB/timecmd.py" -n "$RUNS" --warmup 1 --label "$label" --tsv "$TSV" -- "$@" >/dev/null
}
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# datum: $DATUM"
if on fingerprint; then
  for e in standard x10; do
    T "fingerprint|datum fingerprint|$e" "$DATUM" fingerprint "$D/$e"
    T "fingerprint|python fingerprint_ref.py|$e" "$PY" "$SB/fingerprint_ref.py" "$D/$e"
  done
fi
if on tree; then
  for e in standard x10; do
    datum_in tree "$e" check; T "tree|datum check, one Tree (full)|$e" "${CMD[@]}"
    STATE_TAG=-applied datum_in tree "$e" check
    T "tree|datum check, one Tree (full), from the snapshot|$e" "${CMD[@]}"
  done
fi
if on files; then
  for e in standard files100k; do
    datum_in files "$e" plan --recompile; T "files|datum plan --recompile|$e" "${CMD[@]}"
    # The same with no source-hash cache (removed before every run): every `source:` file
    # read and hashed, as the first plan after a first apply into a new state folder does,
    # or one after most of the repository changed.
    T "files|datum plan --recompile, no source-hash cache|$e" \
      sh -c 'rm -f "$0"; exec "$@"' "$S/state-files-$e/source-hashes" "${CMD[@]}"
    datum_in files "$e" apply; T "files|datum apply, no-op from the snapshot|$e" "${CMD[@]}"
    # The same, asked to trust metadata (a file its quiet verified record vouches for is not
    # read: the trade a `content: metadata` class makes, here made explicitly), of the
    # ordinary folder and of the pulled checkout (no stamp of its sources).
    datum_in files "$e" apply --trust-metadata
    T "files|datum apply --trust-metadata, no-op from the snapshot|$e" "${CMD[@]}"
    pulled "$e" apply --trust-metadata
    T "files|datum apply --trust-metadata, no-op, a datum pull checkout|$e" "${CMD[@]}"
    datum_in files "$e" check --sample 0; T "files|datum check --sample 0 (metadata pass)|$e" "${CMD[@]}"
    pulled "$e" check --sample 0; T "files|datum check --sample 0 (metadata pass), a datum pull checkout|$e" "${CMD[@]}"
    T "files|find -printf (metadata only)|$e" sh -c "exec find '$D/$e' -printf '%s %T@ %m %U %G\n' >/dev/null"
  done
fi
if on driftwatch; then
  for n in 20000 100000; do
    data=$DW/$n
    [[ $n == 20000 && ! -s $data/plan.json && -s $DW/plan.json ]] && data=$DW
    T "driftwatch|driftwatch report (text)|$n" "$DRIFTWATCH" report --refresh-plan "$data/refresh_only.json" \
      --plan "$data/plan.json" --config "$data/main.tf.json" --stack bench
    T "driftwatch|jq reading both files|$n" sh -c "jq '[.resource_drift[]|.address]|length' '$data/refresh_only.json' >/dev/null && jq '[.resource_changes[]|.change.actions]|length' '$data/plan.json' >/dev/null"
  done
fi
echo "# load after $(cut -d' ' -f1-3 /proc/loadavg)"

# ---------------------------------------------------------------- the table
echo
"$PY" - "$TSV" <<'EOF'
import sys
rows = {}
order = []
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    group, work, size = f[0].split("|")
    key = (group, work)
    if key not in rows:
        rows[key] = {}
        order.append(key)
    rows[key][size] = dict(wall=float(f[3]), lo=float(f[2]), hi=float(f[4]),
                           cpu=float(f[7]), peak=float(f[8]))
sizes = {"fingerprint": ("standard", "x10", "20,000 files", "200,000 files", 10),
         "tree": ("standard", "x10", "20,000 files", "200,000 files", 10),
         "files": ("standard", "files100k", "20,000 Files", "100,000 Files", 5),
         "driftwatch": ("20000", "100000", "20,000 pair", "100,000 pair", 5)}
print("| workload | small | wall s [min-max] | cpu s | peak MiB | large | wall s [min-max] | cpu s | peak MiB | growth: wall / memory (size ratio) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for group, work in order:
    a, b, an, bn, ratio = sizes[group]
    r = rows[(group, work)]
    def cell(s):
        if s not in r:
            return "- | - | -"
        x = r[s]
        return f"{x['wall']:.3f} [{x['lo']:.3f}-{x['hi']:.3f}] | {x['cpu']:.3f} | {x['peak']:.1f}"
    growth = "-"
    if a in r and b in r:
        growth = f"{r[b]['wall'] / r[a]['wall']:.1f}x / {r[b]['peak'] / r[a]['peak']:.1f}x ({ratio}x)"
    print(f"| {work} | {an} | {cell(a)} | {bn} | {cell(b)} | {growth} |")
EOF
