#!/usr/bin/env python3
"""fleet-load.py - load generator and query timer for `datum server` (stdlib only).

  fleet-load.py tokens --hosts N                 SQL (COPY) for N enrolled bench hosts
  fleet-load.py ingest --url U --ca CA --hosts N --count C [--concurrency 4] [--pid P]
  fleet-load.py populate --hosts N --days D      SQL filling 30 days of history for N hosts
  fleet-load.py query --url U --ca CA --admin TOKEN [--requests 200]

Reports are realistic for a drifted host: 500 resources (counts), 20 findings,
5 Trees (declared and observed roots), 8 classes, labels; about 9 KB of JSON.
Per-host fields (key, seq, host, times) are substituted into a pre-serialised
template, so the client spends little per report (it shares the 2 cores).
Every loop is bounded by count and time; targets must be loopback.
"""
import argparse
import hashlib
import http.client
import json
import os
import ssl
import statistics
import sys
import threading
import time
import urllib.parse

FINDINGS = 20
TREES = 5
RESOURCES = 500


def token(name):
    return "dtm_h_" + hashlib.sha256(("bench-" + name).encode()).hexdigest()


def host_name(i):
    return "host-%05d" % i


def loopback(url):
    u = urllib.parse.urlparse(url)
    if u.hostname not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("fleet-load.py: refusing a non-loopback target %s" % url)
    return u.hostname, u.port


def report_template():
    findings = []
    for n in range(FINDINGS):
        subject = "File[conf-%03d]" % n
        findings.append({
            "subject": subject, "category": "changed_outside", "class": "normal",
            "paths": ["content", "mode"], "signature": hashlib.sha256(subject.encode()).hexdigest()[:16],
            "observed": hashlib.sha256(("obs%d" % (n % 7)).encode()).hexdigest()[:16],
            "first_seen": 1764000000,
        })
    trees = [{"resource": "Tree[t%d]" % t, "declared": "b3" * 32, "observed": "b3" * 32 if t else "c4" * 32}
             for t in range(TREES)]
    classes = [{"class": "c%d" % c, "interval_s": 1800, "bound_ms": 1800400, "resources": 62}
               for c in range(8)]
    return {
        "format_version": 1, "key": "@KEY@", "seq": 0, "kind": "check", "host": "@HOST@",
        "labels": {"role": "web", "env": "prod", "nginx_version": "1.24", "dc": "fra1"},
        "datum_version": "0.1.0", "revision": "git:" + "ab" * 20, "catalogue": "cd" * 16,
        "started_at": 0, "finished_at": 0, "duration_ms": 412, "exit_code": 2,
        "classes_checked": [], "resources": RESOURCES,
        "counts": {"converged": 480, "drifted": 20, "failed": 0, "quarantined": 0, "metadata_only": 0},
        "classes": classes, "expected_interval_s": 1800,
        "validators": {}, "trees": trees, "failures": [], "findings": findings,
        "changed": [], "changed_total": 0, "quarantined": [], "sampling": None,
    }


def cmd_tokens(a):
    now = int(time.time())
    out = sys.stdout
    out.write("COPY identities (token_hash, name, kind, created_at) FROM stdin;\n")
    for i in range(a.hosts):
        n = host_name(i)
        out.write("%s\t%s\thost\t%d\n" % (hashlib.sha256(token(n).encode()).hexdigest(), n, now))
    out.write("\\.\n")
    out.write("COPY hosts (name, kind, enrolled_at) FROM stdin;\n")
    for i in range(a.hosts):
        out.write("%s\thost\t%d\n" % (host_name(i), now))
    out.write("\\.\n")


def status_kib(pid, field):
    """A memory figure of /proc/PID/status (VmRSS, VmHWM) in KiB, 0 if gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return 0
    return 0


def cmd_ingest(a):
    host, port = loopback(a.url)
    ctx = ssl.create_default_context(cafile=a.ca)
    body = json.dumps(report_template(), separators=(",", ":"))
    before, rest = body.split('"@KEY@"', 1)
    mid, after = rest.split('"@HOST@"', 1)
    lock = threading.Lock()
    state = {"next": 0, "ok": 0, "dup": 0, "err": 0, "lat": []}
    deadline = time.time() + a.max_seconds
    peak = [0]

    def sample():
        while not done.is_set():
            if a.pid:
                peak[0] = max(peak[0], status_kib(a.pid, "VmRSS"))
            time.sleep(0.2)

    def worker():
        conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=30)
        while time.time() < deadline:
            with lock:
                i = state["next"]
                if i >= a.count:
                    return
                state["next"] += 1
            h = host_name(i % a.hosts)
            seq = i // a.hosts + 1 + a.seq_offset
            key = hashlib.md5(("%s/%d/%d" % (h, seq, a.seq_offset)).encode()).hexdigest()
            now = int(time.time())
            payload = (before + '"' + key + '"' + mid + '"' + h + '"' + after)
            payload = payload.replace('"seq":0', '"seq":%d' % seq, 1)
            payload = payload.replace('"started_at":0', '"started_at":%d' % (now - 1), 1)
            payload = payload.replace('"finished_at":0', '"finished_at":%d' % now, 1)
            t0 = time.perf_counter()
            try:
                conn.request("POST", "/v1/reports", body=payload.encode(), headers={
                    "Authorization": "Bearer " + token(h), "Content-Type": "application/json",
                    "Idempotency-Key": key})
                r = conn.getresponse()
                data = r.read()
                dt = time.perf_counter() - t0
                with lock:
                    state["lat"].append(dt)
                    if r.status == 200:
                        if b'"duplicate":true' in data:
                            state["dup"] += 1
                        else:
                            state["ok"] += 1
                    else:
                        state["err"] += 1
            except (OSError, http.client.HTTPException):
                with lock:
                    state["err"] += 1
                conn.close()
                conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=30)

    done = threading.Event()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    load0 = os.getloadavg()[0]
    t0 = time.time()
    threads = [threading.Thread(target=worker) for _ in range(a.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - t0
    done.set()
    lat = sorted(state["lat"]) or [0.0]
    result = {
        "reports": state["ok"], "duplicates": state["dup"], "errors": state["err"],
        "seconds": round(elapsed, 2), "reports_per_s": round(state["ok"] / elapsed, 1),
        "post_p50_ms": round(1000 * lat[len(lat) // 2], 2),
        "post_p99_ms": round(1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))], 2),
        "report_bytes": len(body), "concurrency": a.concurrency,
        "server_peak_rss_mib": round(max(peak[0], status_kib(a.pid, "VmHWM") if a.pid else 0) / 1024, 1),
        "load1_start": round(load0, 2), "load1_end": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result))


def labels_of(i):
    version = "1.26" if i % 20 == 3 else "1.24"
    return json.dumps({"dc": "dc%d" % (i % 4), "nginx_version": version, "role": "web" if i % 3 else "db"},
                      separators=(",", ":"))


def cmd_populate(a):
    """SQL for N hosts with D days of history: the latest picture per host,
    the newest 100 reports each (retention), one daily row per day, a revision
    per day in host_revisions, 10% of hosts drifted with 20 findings (the same
    4 clusters plus one per host), 5% failed on the latest revision, 5% stale."""
    now = int(time.time())
    day = 86400
    body = json.dumps(report_template(), separators=(",", ":")).replace("\t", " ")
    w = sys.stdout.write
    w("BEGIN;\n")
    w("COPY hosts (name, kind, enrolled_at, labels, last_report_at, last_report_kind, seq, revision, catalogue, "
      "datum_version, counts, resources, open_findings, quarantined, last_apply_at, last_apply_revision, "
      "last_apply_failed, check_errors, expected_interval_s, outbox_depth, outbox_dropped, classes, trees, "
      "trees_differing, reports_held) FROM stdin;\n")
    latest = "git:rev-%02d" % (a.days - 1)
    classes = json.dumps([{"class": "normal", "interval_s": 1800, "bound_ms": 1800400, "resources": 500}])
    for i in range(a.hosts):
        n = host_name(i)
        labels = labels_of(i)
        stale = i % 20 == 7
        last = now - (4 * 3600 if stale else (i % 1800))
        failed = 1 if i % 20 == 3 else 0
        drifted = i % 10 == 1
        w("\t".join([n, "host", str(now - a.days * day), labels, str(last), "check", str(48 * a.days), latest,
                     "cat", "0.1.0", '{"converged":500}', "500", str(20 if drifted else 0), "0",
                     str(last - 600), latest, str(failed), "0", "1800", "0", "0", classes, "5", "0", "100"]) + "\n")
    w("\\.\n")
    # Day by day, as a month of rollouts writes them.
    w("COPY host_revisions (host, revision, first_at, last_at, outcome, changed, failed, labels) FROM stdin;\n")
    for d in range(a.days):
        at = now - (a.days - d) * day
        for i in range(a.hosts):
            outcome = "failed" if (i % 20 == 3 and d == a.days - 1) else "converged"
            w("%s\tgit:rev-%02d\t%d\t%d\t%s\t3\t%d\t%s\n" % (host_name(i), d, at, at + 60, outcome,
                                                       1 if outcome == "failed" else 0, labels_of(i)))
    w("\\.\n")
    w("COPY failures (host, revision, resource, phase, validator, validator_version, exit_status, signature, message, at) FROM stdin;\n")
    for i in range(a.hosts):
        if i % 20 == 3:
            w("%s\t%s\tValidationGroup[nginx]\tapply\tnginx\tnginx version: nginx/1.22.1\t1\tsig-http3\t"
              "validation failed (nginx, exit 1)\\nnginx: [emerg] unknown directive \"http3\"\t%d\n" % (host_name(i), latest, now))
    w("\\.\n")
    w("COPY findings (host, signature, subject, category, class, paths, observed, first_seen, last_seen) FROM stdin;\n")
    for i in range(a.hosts):
        if i % 10 != 1:
            continue
        for f in range(FINDINGS):
            shared = f < 16
            sig = "sig-%02d" % (f % 4 if shared else f)
            obs = "obs-%d" % (f % 4) if shared else "obs-%s-%d" % (host_name(i), f)
            subject = "File[conf-%02d]" % (f % 4 if shared else f)
            if shared and f >= 4:
                sig = "sig-%02d" % f
                subject = "File[conf-%02d]" % f
            w("%s\t%s\t%s\tchanged_outside\tnormal\t[\"content\"]\t%s\t%d\t%d\n" % (
                host_name(i), sig, subject, obs, now - 3 * day, now))
    w("\\.\n")
    w("COPY daily (host, day, reports, applies, failed, max_findings) FROM stdin;\n")
    for i in range(a.hosts):
        for d in range(a.days):
            w("%s\t%d\t48\t1\t0\t%d\n" % (host_name(i), now // day - d, 20 if i % 10 == 1 else 0))
    w("\\.\n")
    w("COPY reports (host, key, seq, kind, received_at, finished_at, revision, exit_code, body) FROM stdin;\n")
    for i in range(a.hosts):
        n = host_name(i)
        for r in range(a.reports_per_host):
            at = now - r * 1800
            w("%s\t%s\t%d\tcheck\t%d\t%d\t%s\t2\t%s\n" % (
                n, hashlib.md5(("%s%d" % (n, r)).encode()).hexdigest(), 48 * a.days - r, at, at, latest,
                body.replace("\\", "\\\\")))
    w("\\.\n")
    # What ingest keeps beside the history, derived as migration 0002 does
    # for a store of schema 1 (the hosts' pre-rendered pictures are left to
    # the server, which renders them when it opens the store).
    w("INSERT INTO revisions (revision, first_at, last_at) "
      "SELECT revision, min(first_at), max(last_at) FROM host_revisions GROUP BY revision;\n")
    w("INSERT INTO drift_clusters (signature, observed, hosts, subject, category, class, paths, first_seen, last_seen) "
      "SELECT signature, observed, count(*), min(subject), min(category), min(class), min(paths), "
      "min(first_seen), max(last_seen) FROM findings GROUP BY signature, observed;\n")
    w("COMMIT;\n")
    # A month of running includes autovacuum's passes.
    w("VACUUM ANALYZE;\n")


def cmd_query(a):
    host, port = loopback(a.url)
    ctx = ssl.create_default_context(cafile=a.ca)
    out = {}
    for name, path in [("hosts", "/v1/hosts"), ("rollout", "/v1/rollout"), ("drift", "/v1/drift"),
                       ("stale", "/v1/stale")]:
        conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=60)
        times = []
        size = 0
        deadline = time.time() + a.max_seconds
        for i in range(a.requests + 5):
            if time.time() > deadline:
                break
            t0 = time.perf_counter()
            conn.request("GET", path, headers={"Authorization": "Bearer " + a.admin})
            r = conn.getresponse()
            data = r.read()
            dt = time.perf_counter() - t0
            if r.status != 200:
                sys.exit("%s: HTTP %d %s" % (path, r.status, data[:200]))
            size = len(data)
            if i >= 5:
                times.append(dt * 1000)
        times.sort()
        out[name] = {"p50_ms": round(times[len(times) // 2], 2),
                     "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))], 2),
                     "requests": len(times), "bytes": size}
    out["load1_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokens")
    t.add_argument("--hosts", type=int, required=True)
    i = sub.add_parser("ingest")
    i.add_argument("--url", required=True)
    i.add_argument("--ca", required=True)
    i.add_argument("--hosts", type=int, required=True)
    i.add_argument("--count", type=int, required=True)
    i.add_argument("--concurrency", type=int, default=4)
    i.add_argument("--pid", type=int, default=0)
    i.add_argument("--seq-offset", type=int, default=0)
    i.add_argument("--max-seconds", type=int, default=600)
    po = sub.add_parser("populate")
    po.add_argument("--hosts", type=int, required=True)
    po.add_argument("--days", type=int, default=30)
    po.add_argument("--reports-per-host", type=int, default=100)
    q = sub.add_parser("query")
    q.add_argument("--url", required=True)
    q.add_argument("--ca", required=True)
    q.add_argument("--admin", required=True)
    q.add_argument("--requests", type=int, default=200)
    q.add_argument("--max-seconds", type=int, default=180)
    a = p.parse_args()
    {"tokens": cmd_tokens, "ingest": cmd_ingest, "populate": cmd_populate, "query": cmd_query}[a.cmd](a)


if __name__ == "__main__":
    main()
