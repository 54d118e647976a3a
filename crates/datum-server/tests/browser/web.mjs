// The web view, end to end in a real headless Chromium (Debian's, driven
// by playwright-core: `npx playwright install` cannot download here), on a
// seeded fleet of real hosts reporting to a real `datum server` (SQLite,
// and PostgreSQL when DATUM_TEST_POSTGRES names one).
//
// Run by scripts/browser-tests (which installs playwright-core and builds
// datum). Environment:
//   PLAYWRIGHT_DIR   the folder playwright-core is installed in (required)
//   DATUM_BIN        the datum binary (default target/debug/datum)
//   CHROMIUM         the browser (default: chromium on PATH)
//   DATUM_TEST_POSTGRES  postgres://… of a server to create a database in
//   SCREENSHOTS      a folder: write the README's pictures there
//
// What it does, as an operator would: sign in (the cookie's attributes
// checked), filter hosts by a label (the filter is in the URL, and the
// pasted URL shows the same table), open a host and read its finding's
// diff, open a rollout failure and read the validator's output,
// quarantine a resource and see the host's next report carry it out and
// confirm it, release it the same way, sign out (the old cookie is dead).
// Throughout: every response the browser got (pages, assets, redirects)
// and the server's store never contain the canary secret of a sensitive
// file; the browser's network log has no request to any host but the
// server; forms without the session cookie or with a forged CSRF token are
// refused and change nothing; pages fit a phone's width; keyboard shortcuts
// and the skip link work; an empty fleet says how to enroll a host.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';

import { Server, fetchWithCa, seed } from './fleet.mjs';

const require = createRequire(path.join(path.resolve(process.env.PLAYWRIGHT_DIR || 'target/playwright'), 'node_modules', '/'));
const { chromium } = require('playwright-core');

const chromiumPath = process.env.CHROMIUM || execFileSync('sh', ['-c', 'command -v chromium'], { encoding: 'utf8' }).trim();
const shots = process.env.SCREENSHOTS ? path.resolve(process.env.SCREENSHOTS) : null;

const canary = `CANARY-${crypto.randomBytes(12).toString('hex')}`;
let failures = 0;

function step(name) {
  console.log(`  - ${name}`);
}

/// A fresh Chromium with the flags the issue names, a fresh profile, and
/// trust in exactly the server's certificate.
async function browser(server, profile) {
  return chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath,
    headless: true,
    viewport: { width: 1280, height: 860 },
    args: [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run',
      `--ignore-certificate-errors-spki-list=${server.spki()}`,
    ],
  });
}

/// Everything the browser asked for and got, to check at the end.
function record(ctx) {
  const log = { requests: [], bodies: [], errors: [] };
  ctx.on('request', (r) => log.requests.push(r.url()));
  // A script error, or anything the Content-Security-Policy blocked (an
  // inline style, a foreign request), is logged as an error.
  ctx.on('console', (m) => { if (m.type() === 'error') log.errors.push(`${m.location().url}: ${m.text()}`); });
  ctx.on('weberror', (e) => log.errors.push(String(e.error())));
  ctx.on('response', (r) => {
    // A body Chromium never hands over (a response of a page already
    // navigated away from) must not hang the run: 10 s each, then skipped.
    const body = r.body().then((b) => ({ url: r.url(), body: b.toString('utf8') }), () => null);
    log.bodies.push(Promise.race([body, new Promise((done) => setTimeout(() => done(null), 10_000))]));
  });
  return log;
}

async function everyBody(log) {
  return (await Promise.all(log.bodies)).filter(Boolean);
}

async function signIn(page, server, name) {
  await page.goto(`${server.url}/`);
  assert.match(page.url(), /\/login/, 'a page without a session sends you to sign in');
  await page.fill('#name', name);
  await page.fill('#credential', server.token);
  await Promise.all([page.waitForURL(`${server.url}/`), page.click('button[type=submit]')]);
}

async function rows(page) {
  return page.$$eval('table.hosts-table tbody tr td:first-child a.host', (as) => as.map((a) => a.textContent.trim()));
}

/// The host's `datum check`, as its agent would run it.
function check(fleet, name) {
  const code = fleet.hosts[name].run(fleet.repo, ['check']);
  assert.ok([0, 2].includes(code), `${name}: datum check exited ${code}`);
}

async function shot(page, file) {
  if (!shots) return;
  fs.mkdirSync(shots, { recursive: true });
  await page.screenshot({ path: path.join(shots, file), fullPage: true });
  console.log(`    picture: ${path.join(shots, file)}`);
}

async function scenario(label, store) {
  console.log(`web view in Chromium, store: ${label}`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'datum-web-'));
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'datum-chromium-'));
  let fleet;
  let ctx;
  try {
    step('seed: a real server and 10 hosts running datum apply and check');
    fleet = await seed(dir, store, canary);
    const { server } = fleet;
    // The never-reporting host goes stale after 3 s.
    await new Promise((r) => setTimeout(r, 3500));
    ctx = await browser(server, profile);
    const log = record(ctx);
    const page = await ctx.newPage();

    step('sign in; the session cookie is Secure, HttpOnly, SameSite=Strict');
    await signIn(page, server, 'alice');
    const cookies = await ctx.cookies(server.url);
    const session = cookies.find((c) => c.name === '__Host-datum_session');
    assert.ok(session, `a session cookie: ${JSON.stringify(cookies)}`);
    assert.equal(session.secure, true);
    assert.equal(session.httpOnly, true);
    assert.equal(session.sameSite, 'Strict');
    assert.equal(session.path, '/');

    step('overview: states, the rollout, stale hosts first, drift, failures');
    const overview = await page.textContent('main');
    for (const want of ['web-005', 'nginx_version', 'File[app-conf]', 'File[motd]']) {
      assert.ok(overview.includes(want), `the overview names ${want}: ${overview}`);
    }
    const stalePos = overview.indexOf('web-005');
    assert.ok(stalePos >= 0 && stalePos < overview.indexOf('File[app-conf]'), 'stale hosts come before drift');
    const when = await page.$eval('time[title]', (t) => ({ text: t.textContent, title: t.title }));
    assert.match(when.title, /UTC/, 'the exact UTC time on hover');
    assert.match(when.text, /ago|just now|in /, `a relative time: ${when.text}`);
    const bars = await page.$$eval('svg.bar rect', (rs) => rs.map((r) => r.getBoundingClientRect().width));
    assert.ok(bars.length >= 4 && bars.every((w) => w > 0), `the bars are drawn: ${bars}`);
    await shot(page, 'overview.png');

    step('hosts: filter by labels; the filter is in the URL and a pasted link shows the same');
    await page.goto(`${server.url}/hosts`);
    const all = await rows(page);
    assert.ok(all.includes('db-1') && all.includes('web-004'), `every host listed: ${all}`);
    await page.fill('#labels', 'role=web nginx_version=1.26');
    await Promise.all([page.waitForURL(/labels=/), page.press('#labels', 'Enter')]);
    const filtered = await rows(page);
    assert.deepEqual(filtered.sort(), ['web-003', 'web-004']);
    const pasted = page.url();
    assert.match(pasted, /labels=role%3Dweb(\+|%20)nginx_version%3D1\.26/);
    const other = await ctx.newPage();
    await other.goto(pasted);
    assert.deepEqual((await rows(other)).sort(), ['web-003', 'web-004'], 'a pasted link shows the same table');
    await other.goto(`${server.url}/hosts?state=drifted&kind=host&sort=name`);
    const drifted = await rows(other);
    assert.deepEqual(drifted, ['db-1', 'db-2', 'db-3', 'web-001', 'web-002'], 'state filter, sorted by name');
    await other.close();

    step('host page: labels, classes with bounds, the finding and its diff');
    await page.goto(`${server.url}/hosts?labels=role%3Dweb`);
    await Promise.all([page.waitForURL(/\/hosts\/web-002$/), page.click('a.host:text-is("web-002")')]);
    const diff = await page.textContent('pre.diff');
    // Drift reads declared -> live: the host's line is the `+`.
    assert.ok(diff.includes('+BACK AT 5 -- bob'), `the live line: ${diff}`);
    assert.ok(diff.includes('-maintenance: sundays 02:00 UTC'), `the declared line: ${diff}`);
    const hostText = await page.textContent('main');
    for (const want of ['nginx_version', 'critical', 'normal', 'Tree[limits]']) {
      assert.ok(hostText.includes(want), `the host page shows ${want}`);
    }
    await shot(page, 'host.png');

    step('a sensitive finding says (sensitive), never the value');
    await page.goto(`${server.url}/hosts/db-2`);
    const db2 = await page.textContent('main');
    assert.ok(db2.includes('File[db-password]'), 'the sensitive file drifted');
    assert.ok(db2.includes('(sensitive)'), 'and the page says (sensitive)');

    step('rollout: failures grouped with the label that separates them; a click shows the validator output');
    await page.goto(`${server.url}/rollout`);
    const rollout = await page.textContent('main');
    assert.ok(rollout.includes('nginx_version') && rollout.includes('1.26'), rollout);
    assert.ok(rollout.includes('unknown directive'), 'the group names the message');
    await shot(page, 'rollout.png');
    await Promise.all([
      page.waitForURL(/\/rollout\/failure\?/),
      page.click('p.hosts-line a.host:text-is("web-003")'),
    ]);
    const output = await page.textContent('#validator-output');
    assert.match(output, /unknown directive "http3"/, output);
    assert.ok((await page.textContent('main')).includes('nginx'), 'the validator is named');

    step('drift: the same change on 4 hosts apart from a change on one');
    await page.goto(`${server.url}/drift`);
    const drift = await page.textContent('main');
    assert.ok(drift.includes('File[app-conf]') && drift.includes('File[motd]'), drift);

    step('stacks: the driftwatch stack beside the hosts, four categories, pending changes');
    await page.goto(`${server.url}/stacks`);
    const stacks = await page.textContent('main');
    for (const want of ['prod-network', 'aws_security_group.web', 'aws_db_instance.main', '(sensitive)']) {
      assert.ok(stacks.includes(want), `the stacks page shows ${want}`);
    }
    assert.equal(await page.locator('.tile').count(), 4, 'four categories');

    step('quarantine File[motd] on web-002: the next report carries it out, the one after confirms it');
    await page.goto(`${server.url}/hosts/web-002`);
    await page.fill('#target', 'File[motd]');
    await page.fill('#reason', 'INC-4711 bob is looking into the motd');
    await Promise.all([page.waitForURL(/asked=/), page.click('form.quarantine-form button[type=submit]')]);
    assert.ok((await page.textContent('#instructions')).includes('Waiting for web-002'));
    check(fleet, 'web-002'); // the reply brings the instruction: carried out
    check(fleet, 'web-002'); // this report confirms it and lists the quarantine
    await page.reload();
    const quarantined = await page.textContent('#instructions table');
    assert.ok(quarantined.includes('File[motd]') && quarantined.includes('INC-4711'), quarantined);
    let audit = await page.textContent('section[aria-labelledby=log-h]');
    assert.ok(audit.includes('alice') && audit.includes('quarantine') && !audit.includes('waiting'), audit);

    step('release it the same way');
    await page.fill('#why-1', 'INC-4711 done');
    await Promise.all([page.waitForURL(/asked=/), page.click('#instructions table button[type=submit]')]);
    check(fleet, 'web-002');
    check(fleet, 'web-002');
    await page.reload();
    assert.ok((await page.textContent('#instructions')).includes('Nothing is quarantined on web-002'));
    audit = await page.textContent('section[aria-labelledby=log-h]');
    assert.ok(audit.includes('release') && audit.includes('INC-4711 done') && !audit.includes('waiting'), audit);

    step('a forged CSRF token, or no session cookie: refused, nothing recorded');
    const csrf = await page.getAttribute('form.quarantine-form input[name=csrf]', 'value');
    assert.ok(csrf && csrf.length >= 32, 'the form carries a CSRF token');
    // The form as the page has it, but with its token forged or emptied,
    // submitted by the browser (with the session cookie).
    await page.goto(`${server.url}/hosts/web-001`);
    for (const token of ['0'.repeat(csrf.length), '']) {
      await page.fill('#target', 'File[motd]');
      await page.fill('#reason', 'forged');
      await page.$eval('form.quarantine-form input[name=csrf]', (el, t) => { el.value = t; }, token);
      const [refused] = await Promise.all([
        page.waitForResponse((r) => r.url().endsWith('/hosts/web-001/quarantine')),
        page.click('form.quarantine-form button[type=submit]'),
      ]);
      assert.equal(refused.status(), 403, `a CSRF token ${JSON.stringify(token)} is refused`);
      await page.goto(`${server.url}/hosts/web-001`);
    }
    const bare = await fetchWithCa(server, '/hosts/web-001/quarantine', {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ csrf, target: 'File[motd]', reason: 'no cookie' }).toString(),
    });
    assert.equal(bare.status, 403, 'the right token without the session cookie is refused');
    const anon = await fetchWithCa(server, '/hosts/web-001');
    assert.notEqual(anon.status, 200, 'a page without a session is not shown');
    assert.ok(!(await anon.text()).includes('File[app-conf]'));
    const bearer = await fetchWithCa(server, '/hosts/web-001', { headers: { authorization: `Bearer ${server.token}` } });
    assert.equal(bearer.status, 200, 'the admin credential as a bearer token opens any page');
    const wrong = await fetchWithCa(server, '/hosts', { headers: { authorization: 'Bearer not-the-credential' } });
    assert.equal(wrong.status, 401);
    await page.goto(`${server.url}/hosts/web-001`);
    assert.equal(await page.locator('section[aria-labelledby=log-h]').count(), 0, 'nothing was asked of web-001');

    step('a phone\'s width: no page scrolls sideways');
    const phone = await ctx.newPage();
    await phone.setViewportSize({ width: 390, height: 844 });
    for (const route of ['/', '/hosts', '/hosts/web-002', '/rollout', '/drift', '/stacks']) {
      await phone.goto(server.url + route);
      const width = await phone.evaluate(() => document.documentElement.scrollWidth);
      const wide = await phone.evaluate(() => [...document.querySelectorAll('body *')]
        .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1)
        .slice(0, 5)
        .map((e) => `${e.tagName.toLowerCase()}.${e.className} (${Math.round(e.getBoundingClientRect().right)} px)`));
      assert.ok(width <= 391, `${route} is ${width} px wide on a 390 px phone: ${wide.join(', ')}`);
    }
    await shot(phone, 'overview-phone.png');
    await phone.close();

    step('keyboard: the skip link first, / focuses the filter, g h goes to the hosts');
    await page.goto(`${server.url}/`);
    await page.keyboard.press('Tab');
    assert.equal(await page.evaluate(() => document.activeElement.textContent.trim()), 'Skip to content');
    await page.goto(`${server.url}/hosts`);
    await page.keyboard.press('/');
    assert.equal(await page.evaluate(() => document.activeElement.id), 'labels');
    await page.goto(`${server.url}/drift`);
    await page.keyboard.press('g');
    await Promise.all([page.waitForURL(`${server.url}/hosts`), page.keyboard.press('h')]);

    step('sign out: back to the sign-in page, and the old cookie opens nothing');
    await page.goto(`${server.url}/`);
    await Promise.all([page.waitForURL(/\/login/), page.click('form[action="/logout"] button')]);
    await ctx.addCookies([{ ...session }]);
    await page.goto(`${server.url}/hosts`);
    assert.match(page.url(), /\/login/, 'the ended session is refused');

    step('no script error and nothing the Content-Security-Policy blocked');
    const errors = log.errors.filter((e) => !/status of 40[13]/.test(e));
    assert.deepEqual(errors, [], 'console errors');

    step('no request to any host but the server; the canary in no response');
    const origin = new URL(server.url).origin;
    const elsewhere = log.requests.filter((u) => !u.startsWith('data:') && !u.startsWith('about:') && new URL(u).origin !== origin);
    assert.deepEqual(elsewhere, [], 'requests to other hosts');
    assert.ok(log.requests.length > 30, `the log saw the pages (${log.requests.length} requests)`);
    const bodies = await everyBody(log);
    assert.ok(bodies.length > 20, 'responses were read');
    assert.ok(bodies.some((b) => b.body.includes('BACK AT 5 -- bob')), 'the pages themselves were read');
    for (const { url, body } of bodies) assert.ok(!body.includes(canary), `the canary is in ${url}`);
    // And in the API and in the store.
    for (const route of ['/v1/hosts', '/v1/drift', '/v1/rollout', '/v1/hosts/db-2/reports', '/v1/stale', '/metrics']) {
      const r = await fetchWithCa(server, route, { headers: { authorization: `Bearer ${server.token}` } });
      assert.equal(r.status, 200, route);
      assert.ok(!(await r.text()).includes(canary), `the canary is in ${route}`);
    }
    if (store === 'sqlite') {
      for (const f of fs.readdirSync(server.dir)) {
        const p = path.join(server.dir, f);
        if (fs.statSync(p).isFile()) assert.ok(!fs.readFileSync(p).includes(canary), `the canary is in ${p}`);
      }
    } else {
      const dump = execFileSync('pg_dump', [store], { encoding: 'utf8', maxBuffer: 1 << 28 });
      assert.ok(dump.includes('web-002') && !dump.includes(canary), 'the canary is in the PostgreSQL store');
    }
    // The canary really is on the hosts (the check above could not pass by accident).
    assert.ok(fs.readFileSync(fleet.hosts['db-1'].live('/etc/db-password'), 'utf8').includes(canary));
    console.log(`  ok: ${label}`);
  } catch (e) {
    failures += 1;
    console.error(`  FAILED (${label}): ${e.stack || e}`);
    if (fleet) console.error(`  server log:\n${fleet.server.log}`);
  } finally {
    if (ctx) await ctx.close();
    if (fleet) fleet.server.stop();
    fs.rmSync(profile, { recursive: true, force: true });
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/// A fleet nobody enrolled yet: the overview says how to begin.
async function emptyFleet() {
  console.log('web view in Chromium, an empty fleet');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'datum-web-'));
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'datum-chromium-'));
  const server = await new Server(dir, 'sqlite').init();
  let ctx;
  try {
    await server.start();
    ctx = await browser(server, profile);
    const page = await ctx.newPage();
    await signIn(page, server, 'alice');
    const text = await page.textContent('main');
    assert.ok(text.includes('datum server enroll'), `the empty fleet explains enrolling: ${text}`);
    console.log('  ok: empty fleet');
  } catch (e) {
    failures += 1;
    console.error(`  FAILED (empty fleet): ${e.stack || e}`);
  } finally {
    if (ctx) await ctx.close();
    server.stop();
    fs.rmSync(profile, { recursive: true, force: true });
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

await scenario('SQLite', 'sqlite');
if (!shots) {
  await emptyFleet();
  if (process.env.DATUM_TEST_POSTGRES) {
    const base = process.env.DATUM_TEST_POSTGRES;
    const name = `web_browser_${process.pid}_${Date.now() % 1e6}`;
    execFileSync('psql', [base, '-X', '-q', '-c', `CREATE DATABASE ${name}`]);
    await scenario('PostgreSQL', `${base.slice(0, base.lastIndexOf('/'))}/${name}`);
  } else if (process.env.DATUM_POSTGRES_REQUIRED === '1') {
    console.error('DATUM_POSTGRES_REQUIRED=1 but DATUM_TEST_POSTGRES is not set');
    failures += 1;
  } else {
    console.log('web view in Chromium, store: PostgreSQL: SKIPPED (DATUM_TEST_POSTGRES is not set; scripts/postgres start)');
  }
}
if (failures) {
  console.error(`${failures} browser scenario(s) failed`);
  process.exit(1);
}
console.log('browser tests: all passed');
