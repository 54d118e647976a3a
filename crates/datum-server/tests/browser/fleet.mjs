// A seeded fleet for the web view's browser tests: a real `datum server`
// (its own process, HTTPS on a free loopback port, SQLite or PostgreSQL)
// and hosts simulated as separate roots with their own state stores, each
// enrolled with its own token and running the real `datum apply` / `check`
// (so the reports, diffs, validator output and quarantines on the pages
// are what hosts really send).
//
// The fleet: four web hosts on nginx 1.24 and 1.26 (the 1.26 layer
// declares `http3 on;`, which the installed nginx rejects: a partial
// rollout that fails on real `nginx -t`), three database hosts, the same
// change on four hosts (a package rewrote app.conf) apart from a person's
// edit of the motd on one, a sensitive file holding a canary secret
// (changed on one host, so its finding is on a page), a host enrolled that
// never reported (stale), three hosts that converged, and a driftwatch stack.

import { execFileSync, spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

export const datumBin = process.env.DATUM_BIN || path.resolve('target/debug/datum');

export function run(args, opts = {}) {
  return execFileSync(datumBin, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], ...opts });
}

/// Runs datum and returns its exit code (the pass's exit codes say what it found).
export function runCode(args) {
  try {
    execFileSync(datumBin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    return 0;
  } catch (e) {
    if (typeof e.status === 'number') return e.status;
    throw e;
  }
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function write(file, text) {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, text);
}

export const nginxConf = (directive) =>
  `datum: v1alpha1\ntype: File\nname: nginx-conf\ndesired:\n  path: /etc/nginx/nginx.conf\n  content: "events {}\\nhttp { ${directive} }\\n"\n  validate: nginx\n`;

/// The repository every host applies.
export function repository(dir, canary) {
  const repo = path.join(dir, 'repo');
  write(path.join(repo, 'datum.yaml'), `datum: v1alpha1
layers:
  - {name: base, path: base, match: {}}
  - {name: web, path: web, match: {role: web}}
  - {name: nginx-1.26, path: v126, match: {role: web, nginx_version: "1.26"}}
classes:
  normal: {interval: 10m}
  critical: {interval: 60s, content: full}
`);
  write(path.join(repo, 'base/main.yaml'), `datum: v1alpha1
type: Directory
name: etc
desired: {path: /etc, mode: "0755"}
---
datum: v1alpha1
type: File
name: motd
desired: {path: /etc/motd, content: "welcome to the fleet\\nmaintenance: sundays 02:00 UTC\\n", mode: "0644"}
---
datum: v1alpha1
type: File
name: app-conf
class: critical
desired: {path: /etc/app.conf, content: "workers = 4\\nlisten = 127.0.0.1:9000\\n", mode: "0644"}
---
datum: v1alpha1
type: File
name: db-password
sensitive: true
desired: {path: /etc/db-password, content: "password = ${canary}\\n", mode: "0600"}
---
datum: v1alpha1
type: Tree
name: limits
desired: {path: /etc/limits.d, source: trees/limits, mode: "0644", dir_mode: "0755"}
`);
  write(path.join(repo, 'base/trees/limits/10-nofile.conf'), '* soft nofile 4096\n');
  write(path.join(repo, 'web/nginx.yaml'), nginxConf('server_tokens off;'));
  write(path.join(repo, 'v126/nginx.yaml'), nginxConf('http3 on;'));
  return repo;
}

export class Server {
  constructor(dir, store) {
    this.parent = dir;
    this.dir = path.join(dir, 'srv');
    this.store = store;
  }

  async init() {
    this.port = await freePort();
    run(['server', 'init', '--dir', this.dir, '--listen', `127.0.0.1:${this.port}`, '--store', this.store]);
    // A host that never reports is stale after a few seconds, not an hour.
    const config = path.join(this.dir, 'server.yaml');
    fs.writeFileSync(config, fs.readFileSync(config, 'utf8').replace(/first_report_within: .*/, 'first_report_within: 3s'));
    this.url = `https://127.0.0.1:${this.port}`;
    this.token = /^token: (.*)$/m.exec(fs.readFileSync(path.join(this.dir, 'admin.yaml'), 'utf8'))[1].trim();
    this.ca = fs.readFileSync(path.join(this.dir, 'ca.pem'), 'utf8');
    return this;
  }

  start() {
    return new Promise((resolve, reject) => {
      this.child = spawn(datumBin, ['server', 'serve', '--dir', this.dir], { stdio: ['ignore', 'ignore', 'pipe'] });
      this.log = '';
      const timer = setTimeout(() => reject(new Error(`server did not start: ${this.log}`)), 30000);
      this.child.stderr.on('data', (d) => {
        this.log += d;
        if (this.log.includes('listening on')) { clearTimeout(timer); resolve(this); }
      });
      this.child.on('exit', (code, signal) => {
        clearTimeout(timer);
        this.log += `\n[the server exited: code ${code}, signal ${signal}]\n`;
        reject(new Error(`server exited ${code}: ${this.log}`));
      });
    });
  }

  stop() {
    if (this.child && this.child.exitCode === null) {
      this.child.removeAllListeners('exit');
      this.stopped = true;
      this.child.kill('SIGTERM');
    }
  }

  /// The SHA-256 of the server certificate's public key, base64: what
  /// Chromium's --ignore-certificate-errors-spki-list takes, so the browser
  /// trusts this one certificate and nothing else.
  spki() {
    const cert = new crypto.X509Certificate(fs.readFileSync(path.join(this.dir, 'server.pem')));
    const der = cert.publicKey.export({ type: 'spki', format: 'der' });
    return crypto.createHash('sha256').update(der).digest('base64');
  }

  enroll(name, labels, extra = []) {
    const root = path.join(this.parent, 'hosts', name);
    let yaml = `name: ${name}\nlabels:\n`;
    for (const [k, v] of Object.entries(labels)) yaml += `  ${k}: "${v}"\n`;
    write(path.join(root, 'etc/datum/host.yaml'), yaml);
    run(['server', 'enroll', name, '--dir', this.dir, '--out', path.join(root, 'etc/datum/report.yaml'), ...extra]);
    return new Host(name, root);
  }
}

export class Host {
  constructor(name, root) {
    this.name = name;
    this.root = root;
  }
  live(p) { return path.join(this.root, p.replace(/^\//, '')); }
  /// A pass, then its report delivered: `datum apply` / `check` queue the
  /// report and deliver it from a detached `datum outbox --background`, so
  /// `datum outbox --flush` (which waits for that delivery) makes the
  /// report, and what the server's reply asked, done before the next step.
  run(repo, args) {
    const code = runCode(['--repo', repo, '--root', this.root, '--color', 'never', ...args]);
    const doc = JSON.parse(run(['--root', this.root, '--output', 'json', 'outbox', '--flush']));
    if (doc.depth !== 0) throw new Error(`${this.name}: ${doc.depth} report(s) still queued: ${JSON.stringify(doc)}`);
    return code;
  }
}

/// A driftwatch stack's report, as `driftwatch --report-to` sends it (the
/// stack is enrolled with its own token): posted with that token.
async function postStack(server, name, tokenFile) {
  const token = /^token: (.*)$/m.exec(fs.readFileSync(tokenFile, 'utf8'))[1].trim();
  const now = Math.floor(Date.now() / 1000);
  const report = {
    format_version: 1, key: crypto.randomBytes(16).toString('hex'), seq: 1, kind: 'stack', host: name,
    labels: { env: 'prod', tool: 'terraform' }, datum_version: 'driftwatch', revision: 'git:4f2a9c1e7b',
    catalogue: 'stack', started_at: now - 40, finished_at: now, duration_ms: 40000, exit_code: 2,
    counts: { changed_outside: 1, deleted_outside: 1, replaced: 0, ignored: 0, pending: 2 }, resources: 2,
    expected_interval_s: 3600,
    findings: [
      {
        signature: 'sig-sg', subject: 'aws_security_group.web', category: 'changed_outside', class: 'stack',
        paths: ['ingress'], observed: 'obs-sg', first_seen: now - 7200,
        changes: [{ path: 'ingress[0].cidr_blocks[0]', observed: '0.0.0.0/0', declared: '10.0.0.0/8', sensitive: false }],
      },
      {
        signature: 'sig-db', subject: 'aws_db_instance.main', category: 'deleted_outside', class: 'stack',
        paths: ['password'], first_seen: now - 600,
        changes: [{ path: 'password', sensitive: true }],
      },
    ],
    pending: [
      { address: 'aws_db_instance.main', action: 'create' },
      { address: 'aws_security_group.web', action: 'update' },
    ],
  };
  const res = await fetchWithCa(server, '/v1/reports', {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify(report),
  });
  if (res.status !== 200) throw new Error(`stack report refused: ${res.status} ${await res.text()}`);
}

/// `fetch` against the server, trusting its CA (Node's fetch has no CA
/// option: https.request does).
export function fetchWithCa(server, route, { method = 'GET', headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    import('node:https').then(({ default: https }) => {
      const req = https.request(server.url + route, { method, headers, ca: server.ca }, (res) => {
        let data = '';
        res.setEncoding('utf8');
        res.on('data', (d) => { data += d; });
        res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text: async () => data }));
      });
      req.on('error', reject);
      if (body) req.write(body);
      req.end();
    }, reject);
  });
}

/// Seeds the fleet; returns what the tests need.
export async function seed(dir, store, canary) {
  const repo = repository(dir, canary);
  const server = await new Server(dir, store).init();
  await server.start();
  const hosts = {};
  const add = (name, labels) => {
    const h = server.enroll(name, labels);
    fs.mkdirSync(h.live('/etc/nginx'), { recursive: true });
    hosts[name] = h;
    return h;
  };
  const web = [
    ['web-001', '1.24', 'fra'], ['web-002', '1.24', 'fra'],
    ['web-003', '1.26', 'ams'], ['web-004', '1.26', 'ams'],
  ];
  for (const [name, v, dc] of web) add(name, { role: 'web', nginx_version: v, dc });
  for (const [i, dc] of [[1, 'fra'], [2, 'fra'], [3, 'ams']]) add(`db-${i}`, { role: 'db', dc });
  for (const [i, dc] of [[1, 'fra'], [2, 'ams'], [3, 'ams']]) add(`app-${i}`, { role: 'app', dc });
  const expect = (h, args, codes) => {
    const code = h.run(repo, args);
    if (!codes.includes(code)) throw new Error(`${h.name}: datum ${args.join(' ')} exited ${code}, expected ${codes}`);
  };
  for (const h of Object.values(hosts)) {
    const failing = h.name === 'web-003' || h.name === 'web-004';
    expect(h, ['apply'], failing ? [6] : [2]);
  }
  // A package upgrade rewrote app.conf the same way on four hosts.
  for (const n of ['db-1', 'db-2', 'db-3', 'web-001']) {
    fs.writeFileSync(hosts[n].live('/etc/app.conf'), 'workers = auto\nlisten = 127.0.0.1:9000\n');
  }
  // A person edited the motd on one host.
  fs.writeFileSync(hosts['web-002'].live('/etc/motd'), 'welcome to the fleet\nBACK AT 5 -- bob\n');
  // Someone changed the secret on one host (its value must never show).
  fs.writeFileSync(hosts['db-2'].live('/etc/db-password'), `password = ${canary}-rotated\n`);
  for (const h of Object.values(hosts)) expect(h, ['check'], [0, 2]);
  // Enrolled, never reported: stale once first_report_within (3 s) passed.
  server.enroll('web-005', { role: 'web', nginx_version: '1.24', dc: 'ams' });
  const stackFile = path.join(dir, 'stack.yaml');
  run(['server', 'enroll', 'prod-network', '--stack', '--dir', server.dir, '--out', stackFile]);
  await postStack(server, 'prod-network', stackFile);
  return { server, hosts, repo };
}
