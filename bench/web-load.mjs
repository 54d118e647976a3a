// The web view's page load at fleet scale (bench/web.sh runs it; not a
// test): for the overview and the hosts table, N loads each in headless
// Chromium (Debian's, through playwright-core), signed in as an operator.
// Per load: the server's own time (its Server-Timing header: reading the
// store and rendering), the time to the last byte of the HTML (Navigation
// Timing responseEnd - requestStart), and first contentful paint from
// navigation start. Also: the same pages fetched without a browser
// (Node's https, keep-alive, bearer token), N times, for the server time
// as a client sees it. Prints one JSON line.
//
//   node bench/web-load.mjs URL ADMIN_TOKEN SERVER_PEM CA_PEM [LOADS]
import crypto from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';

const [url, token, serverPem, caPem, loadsArg] = process.argv.slice(2);
const loads = Number(loadsArg || 20);
if (!/^https:\/\/127\.0\.0\.1:\d+$/.test(url)) throw new Error(`a loopback URL only: ${url}`);
const require = createRequire(path.join(path.resolve(process.env.PLAYWRIGHT_DIR || 'target/playwright'), 'node_modules', '/'));
const { chromium } = require('playwright-core');

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return Math.round(s[Math.min(s.length - 1, Math.floor(s.length * p))] * 10) / 10;
};
const summary = (all) => {
  const xs = all.filter((x) => Number.isFinite(x));
  return { p50: pct(xs, 0.5), p99: pct(xs, 0.99), min: pct(xs, 0), max: pct(xs, 1), n: xs.length, missing: all.length - xs.length };
};

// Without a browser: keep-alive HTTPS, bearer token.
const agent = new https.Agent({ keepAlive: true, ca: fs.readFileSync(caPem) });
function get(route) {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    https.get(url + route, { agent, headers: { authorization: `Bearer ${token}` } }, (res) => {
      let bytes = 0;
      res.on('data', (d) => { bytes += d.length; });
      res.on('end', () => {
        if (res.statusCode !== 200) reject(new Error(`${route}: ${res.statusCode}`));
        const server = Number(/dur=([\d.]+)/.exec(res.headers['server-timing'] || '')?.[1]);
        resolve({ total: Number(process.hrtime.bigint() - t0) / 1e6, server, bytes });
      });
    }).on('error', reject);
  });
}

const out = { loads, load1_start: os.loadavg()[0] };
const routes = { overview: '/', hosts: '/hosts', hosts_filtered: '/hosts?labels=role%3Dweb+nginx_version%3D1.26&sort=age' };
for (const [name, route] of Object.entries(routes)) {
  for (let i = 0; i < 3; i++) await get(route); // warm-up
  const runs = [];
  for (let i = 0; i < loads; i++) runs.push(await get(route));
  out[`${name}_http`] = { server_ms: summary(runs.map((r) => r.server)), total_ms: summary(runs.map((r) => r.total)), bytes: runs[0].bytes };
}

const spki = crypto.createHash('sha256')
  .update(new crypto.X509Certificate(fs.readFileSync(serverPem)).publicKey.export({ type: 'spki', format: 'der' }))
  .digest('base64');
const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'datum-bench-chromium-'));
const ctx = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  viewport: { width: 1280, height: 860 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--no-first-run', `--ignore-certificate-errors-spki-list=${spki}`],
});
try {
  const page = await ctx.newPage();
  await page.goto(`${url}/login`);
  await page.fill('#name', 'bench');
  await page.fill('#credential', token);
  await Promise.all([page.waitForURL(`${url}/`), page.click('button[type=submit]')]);
  for (const [name, route] of Object.entries(routes)) {
    const runs = [];
    for (let i = 0; i < loads + 2; i++) {
      // A fresh navigation of the same tab each time (first paint is per
      // navigation), the stylesheet and script cached as a returning
      // operator has them.
      await page.bringToFront();
      await page.goto(url + route, { waitUntil: 'load' });
      const m = await page.evaluate(() => new Promise((resolve) => {
        const nav = performance.getEntriesByType('navigation')[0];
        const app = nav.serverTiming.find((s) => s.name === 'app');
        const done = (fcp) => resolve({ server: app ? app.duration : NaN, html: nav.responseEnd - nav.requestStart, fcp, load: nav.loadEventEnd });
        new PerformanceObserver((list) => {
          const e = list.getEntriesByName('first-contentful-paint')[0];
          if (e) done(e.startTime);
        }).observe({ type: 'paint', buffered: true });
        setTimeout(() => done(NaN), 5000);
      }));
      if (i >= 2) runs.push(m);
    }
    out[`${name}_chromium`] = {
      server_ms: summary(runs.map((r) => r.server)),
      html_ms: summary(runs.map((r) => r.html)),
      first_paint_ms: summary(runs.map((r) => r.fcp)),
      load_ms: summary(runs.map((r) => r.load)),
    };
  }
} finally {
  await ctx.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
out.load1_end = os.loadavg()[0];
console.log(JSON.stringify(out));
