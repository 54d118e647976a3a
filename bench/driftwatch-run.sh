#!/usr/bin/env bash
# Benchmark `driftwatch run` on a real 50-resource stack: terraform with the
# hashicorp/aws provider from its filesystem mirror, against moto on loopback,
# with drift made out of band on 10 of the resources.
#
#   bench/driftwatch-run.sh            # RUNS=5 by default
#
# Side by side in one run, alternating, after one warm-up each:
#   - `driftwatch run --binary terraform --timings --output json`: its wall time
#     (whole process), the engine's share (driftwatch times every terraform
#     command it runs) and driftwatch's own time (wall minus engine);
#   - the engine alone: the same four commands driftwatch runs (plan
#     -refresh-only -out, show -json, plan -out, show -json), run by this script.
# Prints medians with min-max and the load average before and after; the goal is
# driftwatch's own time under 2 % of the run. Needs terraform, the mirror and
# python3 (scripts/moto builds moto's venv in its cache folder). Not a test:
# nothing here fails on a slow machine.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
runs="${RUNS:-5}"

command -v terraform >/dev/null || { echo "terraform is not on PATH" >&2; exit 1; }
mirror=$("$here/scripts/moto" find-mirror) || { echo "no hashicorp/aws provider mirror found" >&2; exit 1; }
moto_env=$("$here/scripts/moto" start)
eval "$moto_env"
work=$(mktemp -d "${TMPDIR:-/tmp}/driftwatch-run-bench.XXXXXX")
trap '"$here/scripts/moto" stop; rm -rf "$work"' EXIT

(cd "$here" && cargo build --release -p driftwatch >&2)
dw="$here/target/release/driftwatch"

export TF_CLI_CONFIG_FILE="$work/cli.tfrc" CHECKPOINT_DISABLE=1 TF_IN_AUTOMATION=1
cat >"$TF_CLI_CONFIG_FILE" <<EOF
provider_installation {
  filesystem_mirror {
    path    = "$mirror"
    include = ["registry.terraform.io/hashicorp/*"]
  }
  direct {
    exclude = ["registry.terraform.io/hashicorp/*"]
  }
}
EOF

stack="$work/stack"
prefix="dwbench-$$"
mkdir -p "$stack"
e="$DRIFTWATCH_MOTO_ENDPOINT"
cat >"$stack/provider.tf" <<EOF
provider "aws" {
  region                      = "eu-central-1"
  access_key                  = "test"
  secret_key                  = "test"
  skip_credentials_validation = true
  skip_metadata_api_check     = true
  skip_requesting_account_id  = true
  s3_use_path_style           = true
  endpoints {
    s3  = "$e"
    ssm = "$e"
    sqs = "$e"
    sts = "$e"
    iam = "$e"
    ec2 = "$e"
  }
}
EOF
# 50 resources: 20 queues, 20 parameters (5 of them SecureString), 10 buckets.
{
  for i in $(seq -w 1 20); do
    printf 'resource "aws_sqs_queue" "q%s" {\n  name                       = "%s-q%s"\n  visibility_timeout_seconds = 30\n  tags                       = { Team = "shop" }\n}\n\n' "$i" "$prefix" "$i"
  done
  for i in $(seq -w 1 20); do
    type=String
    [ "${i#0}" -le 5 ] && type=SecureString
    printf 'resource "aws_ssm_parameter" "p%s" {\n  name  = "/%s/p%s"\n  type  = "%s"\n  value = "v%s"\n  tags  = { Team = "shop" }\n}\n\n' "$i" "$prefix" "$i" "$type" "$i"
  done
  for i in $(seq -w 1 10); do
    printf 'resource "aws_s3_bucket" "b%s" {\n  bucket = "%s-b%s"\n  tags   = { Team = "shop" }\n}\n\n' "$i" "$prefix" "$i"
  done
} >"$stack/main.tf"

echo "applying the 50-resource stack..." >&2
terraform -chdir="$stack" init -input=false -no-color >/dev/null
terraform -chdir="$stack" apply -auto-approve -input=false -no-color >/dev/null
"$DRIFTWATCH_MOTO_PYTHON" - "$prefix" "$e" <<'EOF'
import sys, boto3
p, e = sys.argv[1], sys.argv[2]
kw = dict(endpoint_url=e, region_name="eu-central-1", aws_access_key_id="test", aws_secret_access_key="test")
sqs, ssm, s3 = (boto3.client(n, **kw) for n in ("sqs", "ssm", "s3"))
for i in range(1, 5):
    u = sqs.get_queue_url(QueueName=f"{p}-q{i:02}")["QueueUrl"]
    sqs.set_queue_attributes(QueueUrl=u, Attributes={"VisibilityTimeout": "45"})
sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName=f"{p}-q05")["QueueUrl"])
for i in range(1, 4):
    ssm.put_parameter(Name=f"/{p}/p{i:02}", Value="rotated", Type="SecureString", Overwrite=True)
for i in range(1, 3):
    s3.put_bucket_tagging(Bucket=f"{p}-b{i:02}", Tagging={"TagSet": [{"Key": "Team", "Value": "ops"}]})
EOF

python3 - "$dw" "$stack" "$runs" <<'EOF'
import json, os, statistics, subprocess, sys, tempfile, time

dw, stack, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])

def load():
    return open("/proc/loadavg").read().split()[:3]

def driftwatch():
    t = time.monotonic()
    out = subprocess.run([dw, "run", "--binary", "terraform", "--chdir", stack,
                          "--timings", "--output", "json"], capture_output=True, text=True)
    wall = time.monotonic() - t
    if out.returncode != 2:
        sys.exit(f"driftwatch exited {out.returncode}: {out.stderr}")
    doc = json.loads(out.stdout)
    engine = doc["timings"]["engine_seconds"]
    return wall, engine, doc["timings"]["driftwatch_seconds"], doc["summary"]

def engine_alone():
    with tempfile.TemporaryDirectory() as d:
        t = time.monotonic()
        for refresh, name in ((True, "r"), (False, "p")):
            plan = os.path.join(d, name + ".tfplan")
            argv = ["terraform", f"-chdir={stack}", "plan", "-input=false", "-no-color",
                    "-detailed-exitcode", "-lock-timeout=5m", f"-out={plan}"]
            if refresh:
                argv.insert(3, "-refresh-only")
            rc = subprocess.run(argv, capture_output=True).returncode
            if rc not in (0, 2):
                sys.exit(f"terraform plan exited {rc}")
            subprocess.run(["terraform", f"-chdir={stack}", "show", "-json", plan],
                           capture_output=True, check=True)
        return time.monotonic() - t

before = load()
driftwatch(); engine_alone()  # warm-up
dw_runs, tf_runs = [], []
for _ in range(runs):
    dw_runs.append(driftwatch())
    tf_runs.append(engine_alone())
after = load()

def stat(xs):
    return f"{statistics.median(xs):.3f} [{min(xs):.3f}-{max(xs):.3f}]"

walls = [r[0] for r in dw_runs]
engines = [r[1] for r in dw_runs]
owns_inside = [r[2] for r in dw_runs]
owns = [w - e for w, e, *_ in dw_runs]
shares = [100 * (w - e) / w for w, e, *_ in dw_runs]
print(f"driftwatch run on a real 50-resource stack (terraform + hashicorp/aws + moto), {runs} runs each")
print(f"summary of the report: {dw_runs[0][3]}")
print(f"load average before {' '.join(before)}, after {' '.join(after)}")
print("| what | seconds, median [min-max] |")
print("| --- | --- |")
print(f"| `driftwatch run`, whole process | {stat(walls)} |")
print(f"| of which the engine (4 terraform commands, timed by driftwatch) | {stat(engines)} |")
print(f"| of which driftwatch itself (wall - engine) | {stat(owns)} |")
print(f"| driftwatch's own work as it measures it (parse, classify, render) | {stat(owns_inside)} |")
print(f"| the same 4 terraform commands run alone | {stat(tf_runs)} |")
print(f"driftwatch's own share of the run: median {statistics.median(shares):.3f} % [{min(shares):.3f}-{max(shares):.3f}] (goal < 2 %)")
EOF
