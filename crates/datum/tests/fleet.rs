//! The fleet, end to end: a real `datum server` (its own process, HTTPS on
//! a free loopback port, SQLite or a real PostgreSQL) and several hosts
//! simulated as separate roots with their own state stores, each enrolled
//! with its own token and running the real `datum apply` / `check`.
//!
//! The scenarios: reports arrive and the fleet shows them; the server
//! killed (SIGKILL) and restarted while hosts deliver, and a host killed in
//! the middle of a delivery: every report arrives exactly once, in order;
//! two server processes on one PostgreSQL; a host's token used for another
//! host's report: refused, nothing stored, nothing lost; a partial rollout
//! with the real `nginx -t` on hosts labelled with two versions; the same
//! drift on many hosts against a change on one; a host that stops
//! reporting, and one that never did.

#![allow(
    clippy::disallowed_methods,
    reason = "integration tests build fixtures and inspect results on disk directly, and start real programs; the code under test goes through datum-host"
)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a panic is the test failing, with its message"
)]

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use datum_testkit::run::{assert_exit, stderr, stdout};
use serde_json::Value;

fn datum() -> Command {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("datum"));
    // A test run inside a systemd unit must not make passes deliver
    // in-line (see `reporting`): the tests choose with `run_as_service`.
    cmd.env_remove("INVOCATION_ID");
    cmd
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Spawns `cmd`, a `datum server serve`, and waits until it says it
/// listens; its standard error is drained from then on, so the server
/// never blocks on a full pipe.
fn listening(mut cmd: Command) -> Child {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let line = lines.next().unwrap().unwrap();
    assert!(line.contains("listening on"), "{line}");
    std::thread::spawn(move || for _ in lines {});
    child
}

/// `datum fleet --credentials CREDENTIALS ARGS...`, whatever its exit.
fn fleet_with(credentials: &Path, args: &[&str]) -> Output {
    datum()
        .arg("fleet")
        .arg("--credentials")
        .arg(credentials)
        .args(args)
        .output()
        .unwrap()
}

/// `n` connections to the server on `port`, held open and idle.
fn idle_connections(port: u16, n: usize) -> Vec<std::net::TcpStream> {
    (0..n)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect()
}

/// A server folder, and the server process when it runs.
struct Server {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl Server {
    /// `datum server init` into `parent/srv` (store: `sqlite` or a URL).
    fn init(parent: &Path, store: &str, extra: &[&str]) -> Server {
        let dir = parent.join("srv");
        let port = free_port();
        let mut cmd = datum();
        cmd.args(["--json", "server", "init", "--dir"])
            .arg(&dir)
            .args(["--listen", &format!("127.0.0.1:{port}"), "--store", store])
            .args(extra);
        let out = cmd.output().unwrap();
        assert_exit(&out, 0);
        let made: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(made["format_version"], "1", "{made}");
        assert_eq!(made["url"], format!("https://127.0.0.1:{port}"), "{made}");
        assert_eq!(
            made["admin_credentials"],
            dir.join("admin.yaml").to_str().unwrap(),
            "{made}"
        );
        Server {
            dir,
            port,
            child: None,
        }
    }

    /// Starts `datum server serve` (on `port`, default its own) and waits
    /// until it listens.
    fn start_on(&mut self, port: u16) {
        let mut cmd = datum();
        cmd.args(["server", "serve", "--dir"])
            .arg(&self.dir)
            .args(["--listen", &format!("127.0.0.1:{port}")]);
        self.child = Some(listening(cmd));
    }

    /// Starts `datum server serve` on its own port under `prlimit
    /// --nofile=LIMITS` (`SOFT:HARD`), waits until it listens, and returns
    /// it to the test, which kills it.
    fn start_with_nofile(&self, limits: &str) -> Child {
        let mut cmd = Command::new("prlimit");
        cmd.arg(format!("--nofile={limits}"))
            .arg("--")
            .arg(assert_cmd::cargo::cargo_bin("datum"))
            .args(["server", "serve", "--dir"])
            .arg(&self.dir);
        listening(cmd)
    }

    fn start(&mut self) {
        self.start_on(self.port);
    }

    /// SIGKILL: no shutdown, requests in flight cut.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    fn admin(&self) -> PathBuf {
        self.dir.join("admin.yaml")
    }

    /// `datum fleet VIEW... --output json`.
    fn fleet(&self, view: &[&str]) -> Value {
        let out = fleet_with(&self.admin(), &[&["--output", "json"], view].concat());
        assert_exit(&out, 0);
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn fleet_text(&self, view: &[&str]) -> String {
        let out = fleet_with(&self.admin(), view);
        assert_exit(&out, 0);
        stdout(&out)
    }

    /// Enrolls `name` and sets up its root: host.yaml with `labels`, the
    /// report.yaml `enroll` wrote.
    fn host(&self, parent: &Path, name: &str, labels: &[(&str, &str)], extra: &[&str]) -> Host {
        let root = parent.join(name);
        std::fs::create_dir_all(root.join("etc/datum")).unwrap();
        let mut yaml = format!("name: {name}\nlabels:\n");
        for (k, v) in labels {
            yaml.push_str(&format!("  {k}: \"{v}\"\n"));
        }
        std::fs::write(root.join("etc/datum/host.yaml"), yaml).unwrap();
        let mut cmd = datum();
        cmd.args(["server", "enroll", name, "--dir"])
            .arg(&self.dir)
            .arg("--out")
            .arg(root.join("etc/datum/report.yaml"))
            .args(extra);
        assert_exit(&cmd.output().unwrap(), 0);
        Host {
            name: name.to_owned(),
            root,
        }
    }

    /// Waits (up to 60 s) until the server holds exactly `expected` of
    /// `host`.
    fn wait_seqs(&self, host: &str, expected: &[u64]) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let seqs = self.seqs(host);
            if seqs == expected {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{host}: {seqs:?}, never {expected:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Every report the server holds for `host`, by sequence number.
    fn seqs(&self, host: &str) -> Vec<u64> {
        let h = self.fleet(&["history", host, "--limit", "1000"]);
        let mut seqs: Vec<u64> = h["reports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["seq"].as_u64().unwrap())
            .collect();
        seqs.sort_unstable();
        seqs
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One simulated host: its own root and state store.
struct Host {
    name: String,
    root: PathBuf,
}

impl Host {
    /// A fleet client with this host's credentials (its report.yaml), to
    /// post reports by hand.
    fn client(&self) -> datum_fleet::client::Client {
        let path = self.root.join("etc/datum/report.yaml");
        let credentials = datum_fleet::credentials::Credentials::parse(
            &path,
            &std::fs::read_to_string(&path).unwrap(),
        )
        .unwrap();
        datum_fleet::client::Client::new(
            &credentials.server,
            &credentials.ca_pem,
            &credentials.token,
            datum_fleet::client::Timeouts::default(),
        )
        .unwrap()
    }

    fn run(&self, repo: &Path, args: &[&str]) -> Output {
        datum()
            .arg("--repo")
            .arg(repo)
            .arg("--root")
            .arg(&self.root)
            .args(["--color", "never"])
            .args(args)
            .output()
            .unwrap()
    }

    /// A pass as a systemd service runs it (`INVOCATION_ID` set): it
    /// delivers before it returns, since the unit's stop would kill a
    /// delivery left in the background.
    fn run_as_service(&self, repo: &Path, args: &[&str]) -> Output {
        datum()
            .env("INVOCATION_ID", "0123456789abcdef0123456789abcdef")
            .arg("--repo")
            .arg(repo)
            .arg("--root")
            .arg(&self.root)
            .args(["--color", "never"])
            .args(args)
            .output()
            .unwrap()
    }

    fn live(&self, declared: &str) -> PathBuf {
        self.root.join(declared.trim_start_matches('/'))
    }

    /// `datum outbox --output json`.
    fn outbox(&self, repo: &Path) -> Value {
        let out = self.run(repo, &["outbox", "--output", "json"]);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{out:?}"))
    }

    /// Waits (up to 60 s) until the outbox satisfies `done`: a pass
    /// delivers in the background, after it returned.
    fn wait_outbox(&self, repo: &Path, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let v = self.outbox(repo);
            if done(&v) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "{}: never {what}: {v}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs a pass and waits until its background delivery emptied the
    /// outbox.
    fn run_delivered(&self, repo: &Path, args: &[&str]) -> Output {
        let out = self.run(repo, args);
        self.wait_outbox(repo, "delivered", |v| v["depth"] == 0);
        out
    }

    /// Points report.yaml at another server address.
    fn report_to(&self, port: u16) {
        let path = self.root.join("etc/datum/report.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        let text: String = text
            .lines()
            .map(|l| {
                if l.starts_with("server:") {
                    format!("server: https://127.0.0.1:{port}\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        std::fs::write(path, text).unwrap();
    }
}

/// Writes `text` to `rel` below `dir`, making its folders.
fn write_in(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A repository: a motd, a config file and a Tree, in one layer.
fn repo(parent: &Path) -> PathBuf {
    let repo = parent.join("repo");
    let w = |rel: &str, text: &str| write_in(&repo, rel, text);
    w(
        "datum.yaml",
        "datum: v1alpha1\nlayers:\n  - {name: base, path: base, match: {}}\nclasses:\n  normal: {interval: 10m}\n",
    );
    w(
        "base/main.yaml",
        "datum: v1alpha1\ntype: Directory\nname: etc\ndesired: {path: /etc, mode: \"0755\"}\n---\n\
datum: v1alpha1\ntype: File\nname: motd\ndesired: {path: /etc/motd, content: \"welcome\\n\", mode: \"0644\"}\n---\n\
datum: v1alpha1\ntype: File\nname: app-conf\ndesired: {path: /etc/app.conf, content: \"workers = 4\\n\", mode: \"0644\"}\n---\n\
datum: v1alpha1\ntype: Tree\nname: limits\ndesired: {path: /etc/limits.d, source: trees/limits, mode: \"0644\", dir_mode: \"0755\"}\n",
    );
    w("base/trees/limits/10-nofile.conf", "* soft nofile 4096\n");
    repo
}

fn host_row<'a>(hosts: &'a Value, name: &str) -> &'a Value {
    hosts["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in {hosts}"))
}

#[test]
fn hosts_report_and_the_fleet_shows_them() {
    let t = tempfile::tempdir().unwrap();
    let repo = repo(t.path());
    let mut server = Server::init(t.path(), "sqlite", &[]);
    server.start();
    let hosts: Vec<Host> = (1..=3)
        .map(|i| server.host(t.path(), &format!("web-{i}"), &[("role", "web")], &[]))
        .collect();
    for h in &hosts {
        assert_exit(&h.run(&repo, &["apply"]), 2);
        let check = h.run(&repo, &["check"]);
        assert_exit(&check, 0);
        assert!(!stderr(&check).contains("warning"), "{}", stderr(&check));
    }
    // Each pass returned before its report left: the delivery runs in the
    // background and empties the outbox.
    for h in &hosts {
        h.wait_outbox(&repo, "delivered", |v| v["depth"] == 0);
    }
    let v = server.fleet(&["hosts"]);
    // format_version "1", the CLI's rule and the HTTP API's.
    assert_eq!(v["format_version"], "1");
    assert_eq!(v["states"]["converged"], 3, "{v}");
    let row = host_row(&v, "web-2");
    assert_eq!(row["labels"]["role"], "web");
    assert_eq!(row["reports"], 2, "one apply and one check");
    assert_eq!(row["trees"], 1);
    assert_eq!(
        row["trees_differing"], 0,
        "the undrifted tree proves itself by its root hash"
    );
    assert!(
        row["revision"].as_str().unwrap().starts_with("stamp:"),
        "{row}"
    );
    assert!(row["last_report"].as_str().unwrap().ends_with('Z'));
    // The catalogue's declared fingerprint of the Tree is the observed root.
    let cat = hosts[0].run(&repo, &["catalogue"]);
    let cat: Value = serde_json::from_slice(&cat.stdout).unwrap();
    let tree = cat["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["type"] == "Tree")
        .unwrap();
    let fp = datum()
        .arg("fingerprint")
        .arg(hosts[0].live("/etc/limits.d"))
        .output()
        .unwrap();
    assert_eq!(tree["fingerprint"].as_str().unwrap(), stdout(&fp).trim());
    let text = server.fleet_text(&["hosts"]);
    assert!(
        text.contains("web-3") && text.contains("3 host(s): 3 converged."),
        "{text}"
    );
    let rollout = server.fleet(&["rollout"]);
    assert_eq!(rollout["converged"].as_array().unwrap().len(), 3);
    // Under systemd the pass delivers before it returns (the unit's stop
    // would kill a delivery left behind): nothing waits once it is done.
    assert_exit(&hosts[0].run_as_service(&repo, &["check"]), 0);
    assert_eq!(hosts[0].outbox(&repo)["depth"], 0, "delivered in-line");
    assert_eq!(server.seqs("web-1"), vec![1, 2, 3]);
    // An apply asked to trust metadata says so in its report, with how many
    // it did not read (none here: the records are younger than the 2 s a
    // record needs to vouch for a file); the others carry no such count.
    let out = hosts[1].run_delivered(&repo, &["apply", "--trust-metadata"]);
    assert_exit(&out, 0);
    let history = server.fleet(&["history", "web-2"]);
    let reports = history["reports"].as_array().unwrap();
    let trusted: Vec<(u64, Option<u64>)> = reports
        .iter()
        .map(|r| {
            let n = r.get("trusted_by_metadata").map(|n| n.as_u64().unwrap());
            (r["seq"].as_u64().unwrap(), n)
        })
        .collect();
    assert_eq!(
        trusted,
        vec![(3, Some(0)), (2, None), (1, None)],
        "{history}"
    );
    let text = server.fleet_text(&["history", "web-2"]);
    assert_eq!(
        text.matches("by their metadata, not read").count(),
        1,
        "{text}"
    );
}

#[test]
fn the_server_killed_and_restarted_while_hosts_deliver_loses_and_duplicates_nothing() {
    let t = tempfile::tempdir().unwrap();
    let repo = repo(t.path());
    let mut server = Server::init(t.path(), "sqlite", &[]);
    server.start();
    let hosts: Vec<Host> = (1..=4)
        .map(|i| server.host(t.path(), &format!("h{i}"), &[], &[]))
        .collect();
    for h in &hosts {
        assert_exit(&h.run(&repo, &["apply"]), 2);
    }
    let mut passes = 1;
    for round in 0..6 {
        // Every host checks at once while the server is killed and
        // restarted under them.
        let killer = {
            let started = Instant::now();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30 + 20 * round));
                started
            })
        };
        std::thread::scope(|s| {
            for h in &hosts {
                let repo = &repo;
                s.spawn(move || h.run(repo, &["check"]));
            }
            let _ = killer.join();
            server.kill();
        });
        passes += 1;
        if round % 2 == 0 {
            // Down for a while: these checks only queue.
            for h in &hosts {
                let out = h.run(&repo, &["check"]);
                assert_exit(&out, 0);
                let depth = h.outbox(&repo)["depth"].as_u64().unwrap();
                assert!(depth >= 1, "{}: the report waits", h.name);
            }
            passes += 1;
        }
        server.start();
    }
    // The server is back: each host's outbox drains (now, not after the
    // backoff), and every report arrives exactly once, in order.
    for h in &hosts {
        let out = h.run(&repo, &["outbox", "--flush"]);
        assert_exit(&out, 0);
    }
    for h in &hosts {
        assert_eq!(
            server.seqs(&h.name),
            (1..=passes as u64).collect::<Vec<u64>>(),
            "{}: every report exactly once, none missing",
            h.name
        );
    }
}

#[test]
fn a_host_killed_mid_delivery_delivers_the_report_later_once() {
    let t = tempfile::tempdir().unwrap();
    let repo = repo(t.path());
    let mut server = Server::init(t.path(), "sqlite", &[]);
    server.start();
    let h = server.host(t.path(), "web-1", &[], &[]);
    assert_exit(&h.run_delivered(&repo, &["apply"]), 2);
    // The server stops answering (SIGSTOP: connections hang), the check's
    // delivery (a process of its own, after the check returned) hangs with
    // it, and is killed in the middle.
    let pid = server.child.as_ref().unwrap().id().to_string();
    let status = Command::new("kill").args(["-STOP", &pid]).status().unwrap();
    assert!(status.success());
    assert_exit(&h.run(&repo, &["check"]), 0);
    let deliverer = wait_for_process(&[h.root.to_str().unwrap(), "--background"]);
    std::thread::sleep(Duration::from_millis(1000));
    let status = Command::new("kill")
        .args(["-KILL", &deliverer.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "the delivery was still hanging");
    assert_eq!(h.outbox(&repo)["depth"], 1, "the report is still queued");
    assert!(
        Command::new("kill")
            .args(["-CONT", &pid])
            .status()
            .unwrap()
            .success()
    );
    assert_exit(&h.run(&repo, &["check"]), 0);
    server.wait_seqs("web-1", &[1, 2, 3]);
    h.wait_outbox(&repo, "delivered", |v| v["depth"] == 0);
    assert_eq!(
        server.seqs("web-1"),
        vec![1, 2, 3],
        "the killed delivery's report arrived once"
    );
}

/// The pid of the process whose command line holds every one of `words`
/// (waiting up to 30 s for it to appear).
fn wait_for_process(words: &[&str]) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            let args: Vec<String> = cmdline
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            if words.iter().all(|w| args.iter().any(|a| a == w)) {
                return pid;
            }
        }
        assert!(Instant::now() < deadline, "no process with {words:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_host_token_cannot_write_another_hosts_reports() {
    let t = tempfile::tempdir().unwrap();
    let repo = repo(t.path());
    let mut server = Server::init(t.path(), "sqlite", &[]);
    server.start();
    let a = server.host(t.path(), "web-a", &[], &[]);
    let b = server.host(t.path(), "web-b", &[], &[]);
    assert_exit(&a.run_delivered(&repo, &["apply"]), 2);
    // web-b carries web-a's credentials (a stolen or copied file).
    std::fs::copy(
        a.root.join("etc/datum/report.yaml"),
        b.root.join("etc/datum/report.yaml"),
    )
    .unwrap();
    assert_exit(&b.run(&repo, &["apply"]), 2);
    let outbox = b.wait_outbox(&repo, "refused", |v| v["failures"].as_u64() > Some(0));
    let why = outbox["last_error"].as_str().unwrap();
    assert!(
        why.contains("refused the credentials (HTTP 403)")
            && why.contains("cannot write reports of `web-b`"),
        "{why}"
    );
    // The next pass says so.
    let out = b.run(&repo, &["check"]);
    assert!(
        stderr(&out).contains("the last delivery failed") && stderr(&out).contains("HTTP 403"),
        "{}",
        stderr(&out)
    );
    b.wait_outbox(&repo, "two queued", |v| v["depth"] == 2);
    let v = server.fleet(&["hosts"]);
    assert_eq!(
        host_row(&v, "web-b")["reports"],
        0,
        "nothing stored for web-b"
    );
    assert_eq!(
        host_row(&v, "web-a")["reports"],
        1,
        "web-a's history untouched"
    );
    // A made-up token is refused too.
    let report = b.root.join("etc/datum/report.yaml");
    let text = std::fs::read_to_string(&report).unwrap();
    let forged: String = text
        .lines()
        .map(|l| {
            if l.starts_with("token:") {
                format!("token: dtm_h_{}\n", "0".repeat(64))
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    std::fs::write(&report, forged).unwrap();
    let out = b.run(&repo, &["outbox", "--flush"]);
    assert_exit(&out, 2);
    assert!(stderr(&out).contains("HTTP 401"), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("2 report(s) queued"),
        "{}",
        stdout(&out)
    );
    // Its own credentials again: the queued reports go out, in order.
    let own = t.path().join("own.yaml");
    let enrolled = datum()
        .args(["--json", "server", "enroll", "web-b", "--dir"])
        .arg(&server.dir)
        .arg("--out")
        .arg(&own)
        .output()
        .unwrap();
    assert_exit(&enrolled, 0);
    let doc: serde_json::Value = serde_json::from_slice(&enrolled.stdout).unwrap();
    assert_eq!(doc["format_version"], "1", "{doc}");
    assert_eq!(doc["name"], "web-b", "{doc}");
    assert_eq!(doc["kind"], "host", "{doc}");
    assert_eq!(doc["credentials"], own.to_str().unwrap(), "{doc}");
    std::fs::copy(&own, &report).unwrap();
    assert_exit(&b.run(&repo, &["outbox", "--flush"]), 0);
    assert_eq!(
        server.seqs("web-b"),
        vec![1, 2],
        "nothing was lost while refused"
    );
}

#[test]
fn the_same_drift_on_many_hosts_is_told_from_a_change_on_one() {
    let t = tempfile::tempdir().unwrap();
    let repo = repo(t.path());
    let mut server = Server::init(t.path(), "sqlite", &[]);
    server.start();
    let hosts: Vec<Host> = (1..=5)
        .map(|i| server.host(t.path(), &format!("app-{i}"), &[], &[]))
        .collect();
    for h in &hosts {
        assert_exit(&h.run(&repo, &["apply"]), 2);
        // A package upgrade rewrote the config the same way everywhere.
        std::fs::write(h.live("/etc/app.conf"), "workers = auto\n").unwrap();
    }
    // A person edited the motd on one host.
    std::fs::write(hosts[2].live("/etc/motd"), "back at 5\n").unwrap();
    for h in &hosts {
        assert_exit(&h.run_delivered(&repo, &["check"]), 2);
    }
    let v = server.fleet(&["drift"]);
    assert_eq!(v["hosts_drifted"], 5);
    let clusters = v["clusters"].as_array().unwrap();
    assert_eq!(clusters.len(), 2, "{v}");
    assert_eq!(clusters[0]["subject"], "File[app-conf]");
    assert_eq!(clusters[0]["hosts"], 5);
    assert_eq!(clusters[0]["spread"], "many hosts");
    assert_eq!(clusters[1]["subject"], "File[motd]");
    assert_eq!(clusters[1]["sample_hosts"], serde_json::json!(["app-3"]));
    assert_eq!(clusters[1]["spread"], "one host");
    let text = server.fleet_text(&["drift"]);
    assert!(
        text.contains("same on 5 hosts") && text.contains("one host (app-3)"),
        "{text}"
    );
}

/// Every file under `dir` (the server's store and its WAL), as text.
fn files_text(dir: &Path) -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            text.push_str(&files_text(&path));
        } else if let Ok(bytes) = std::fs::read(&path) {
            text.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    text
}

/// `datum fingerprint DIR`.
fn fingerprint_of(dir: &Path) -> String {
    let out = datum().arg("fingerprint").arg(dir).output().unwrap();
    assert_exit(&out, 0);
    stdout(&out).trim().to_owned()
}

/// A sensitive Tree's Merkle root is a checksum of its secrets: `datum
/// fingerprint` of a folder holding a guess gives the same root when the
/// guess is right. So the catalogue and the fleet report carry only the
/// host's keyed digests of its roots, and the server still tells a tree as
/// declared from a drifted one.
#[test]
fn a_sensitive_trees_roots_reach_neither_the_catalogue_nor_the_server_plain() {
    use std::os::unix::fs::PermissionsExt as _;
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    let w = |rel: &str, text: &str| write_in(&repo, rel, text);
    w(
        "datum.yaml",
        "datum: v1alpha1\nlayers:\n  - {name: base, path: base, match: {}}\n",
    );
    w(
        "base/main.yaml",
        "datum: v1alpha1\ntype: Tree\nname: secrets\nsensitive: true\ndesired: {path: /etc/secrets, source: trees/sec, mode: \"0600\"}\n",
    );
    w("base/trees/sec/db.conf", "password=hunter2\n");
    let mut server = Server::init(t.path(), "sqlite", &[]);
    server.start();
    let h = server.host(t.path(), "vault-1", &[], &[]);
    assert_exit(&h.run_delivered(&repo, &["apply"]), 2);
    // Someone who guesses the secret builds the folder it would be in.
    let guess = t.path().join("guess");
    std::fs::create_dir(&guess).unwrap();
    std::fs::set_permissions(&guess, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(guess.join("db.conf"), "password=hunter2\n").unwrap();
    std::fs::set_permissions(
        guess.join("db.conf"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let plain = fingerprint_of(&guess);
    assert_eq!(
        plain,
        fingerprint_of(&h.live("/etc/secrets")),
        "the guess is the tree's root: what must not be published"
    );

    let cat = h.run(&repo, &["catalogue"]);
    assert_exit(&cat, 0);
    assert!(!stdout(&cat).contains(&plain), "{}", stdout(&cat));
    let cat: Value = serde_json::from_slice(&cat.stdout).unwrap();
    let tree = &cat["resources"][0];
    assert!(tree["fingerprint"].is_null(), "{tree}");
    let keyed = tree["fingerprint_digest"].as_str().unwrap().to_owned();
    assert!(keyed.starts_with("keyed-blake3:"), "{keyed}");

    // Reports still accepted, and the tree still proves itself.
    assert_exit(&h.run_delivered(&repo, &["check"]), 0);
    let row = host_row(&server.fleet(&["hosts"]), "vault-1").clone();
    assert_eq!(
        (row["trees"].as_u64(), row["trees_differing"].as_u64()),
        (Some(1), Some(0)),
        "{row}"
    );
    // Drifted, the keyed roots differ and the server sees it.
    std::fs::write(h.live("/etc/secrets/db.conf"), "password=changed\n").unwrap();
    let drifted = fingerprint_of(&h.live("/etc/secrets"));
    assert_exit(&h.run_delivered(&repo, &["check"]), 2);
    let row = host_row(&server.fleet(&["hosts"]), "vault-1").clone();
    assert_eq!(row["trees_differing"], 1, "{row}");

    // What the server holds: the keyed digest, never a plain root.
    let stored = files_text(&server.dir);
    assert!(
        !stored.contains(&plain),
        "the declared root reached the server"
    );
    assert!(
        !stored.contains(&drifted),
        "the observed root reached the server"
    );
    assert!(stored.contains(&keyed), "the reports' trees are stored");
}

#[test]
fn a_host_that_stops_reporting_is_stale_from_outside() {
    let t = tempfile::tempdir().unwrap();
    let repo = repo(t.path());
    let mut server = Server::init(t.path(), "sqlite", &[]);
    let config = server.dir.join("server.yaml");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("first_report_within: 1h", "first_report_within: 8s");
    std::fs::write(&config, text).unwrap();
    server.start();
    let quiet = server.host(t.path(), "quiet", &[], &["--interval", "1s"]);
    let busy = server.host(t.path(), "busy", &[], &["--interval", "1s"]);
    let _never = server.host(t.path(), "never", &[], &[]);
    assert_exit(&quiet.run_delivered(&repo, &["apply"]), 2);
    assert_exit(&busy.run_delivered(&repo, &["apply"]), 2);
    assert_eq!(
        server.fleet(&["stale"])["hosts"].as_array().unwrap().len(),
        0
    );
    std::thread::sleep(Duration::from_secs(9));
    assert_exit(&busy.run_delivered(&repo, &["check"]), 0);
    let v = server.fleet(&["stale"]);
    let names: Vec<&str> = v["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{v}");
    assert!(names.contains(&"quiet") && names.contains(&"never"), "{v}");
    let never = v["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == "never")
        .unwrap();
    assert_eq!(never["never_reported"], true);
    let hosts = server.fleet(&["hosts"]);
    assert_eq!(host_row(&hosts, "quiet")["state"], "stale");
    assert_eq!(host_row(&hosts, "busy")["state"], "converged");
}

/// The nginx 1.24 / 1.26 case: the same repository, a layer for the hosts
/// labelled 1.26 declaring a directive the installed nginx rejects, real
/// `nginx -t` on every host. The rollout reads as one converged group and
/// one failed group, each with the label value that separates it.
#[test]
fn a_partial_rollout_across_nginx_versions_reads_as_two_groups() {
    if datum_host::command::which("nginx").is_none() {
        assert!(
            std::env::var_os("DATUM_VALIDATORS_REQUIRED").is_none(),
            "nginx is required here (scripts/deps installs it)"
        );
        eprintln!("skipped: nginx is not installed (run scripts/deps)");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    let w = |rel: &str, text: &str| write_in(&repo, rel, text);
    w(
        "datum.yaml",
        "datum: v1alpha1\nlayers:\n  - {name: base, path: base, match: {}}\n  - {name: nginx-1.26, path: v126, match: {nginx_version: \"1.26\"}}\n",
    );
    let conf = |directive: &str| {
        format!(
            "datum: v1alpha1\ntype: File\nname: nginx-conf\ndesired:\n  path: /etc/nginx/nginx.conf\n  content: \"events {{}}\\nhttp {{ {directive} }}\\n\"\n  validate: nginx\n"
        )
    };
    w("base/nginx.yaml", &conf("server_tokens off;"));
    // What only the newer nginx accepts.
    w("v126/nginx.yaml", &conf("http3 on;"));
    let mut server = Server::init(t.path(), "sqlite", &[]);
    server.start();
    let hosts: Vec<Host> = (1..=4)
        .map(|i| {
            let v = if i <= 2 { "1.24" } else { "1.26" };
            let h = server.host(
                t.path(),
                &format!("web-00{i}"),
                &[("role", "web"), ("nginx_version", v)],
                &[],
            );
            std::fs::create_dir_all(h.live("/etc/nginx")).unwrap();
            h
        })
        .collect();
    for (i, h) in hosts.iter().enumerate() {
        let out = h.run_delivered(&repo, &["apply"]);
        // The newer hosts refuse the group before writing: nothing changes.
        assert_exit(&out, if i < 2 { 2 } else { 4 });
    }
    let v = server.fleet(&["rollout"]);
    assert_eq!(
        v["converged"],
        serde_json::json!(["web-001", "web-002"]),
        "{v}"
    );
    assert_eq!(v["failed"], serde_json::json!(["web-003", "web-004"]));
    let groups = v["groups"].as_array().unwrap();
    // One line per failure, not one per host: the group that failed
    // validation, and its member that was therefore not written.
    assert_eq!(groups.len(), 2, "{v}");
    for g in groups {
        assert_eq!(g["hosts"], serde_json::json!(["web-003", "web-004"]), "{g}");
    }
    let member = groups
        .iter()
        .find(|g| g["resource"] == "File[nginx-conf]")
        .unwrap_or_else(|| panic!("{v}"));
    assert!(
        member["message"]
            .as_str()
            .unwrap()
            .contains("not written: ValidationGroup[nginx] failed validation"),
        "{member}"
    );
    let g = groups
        .iter()
        .find(|g| g["resource"] == "ValidationGroup[nginx]")
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(g["validator"], "nginx");
    assert_eq!(g["labels"], serde_json::json!({"nginx_version": ["1.26"]}));
    assert!(
        g["message"].as_str().unwrap().contains("unknown directive"),
        "{g}"
    );
    assert!(
        g["validator_versions"][0]
            .as_str()
            .unwrap()
            .contains("nginx"),
        "{g}"
    );
    assert_eq!(
        v["converged_labels"],
        serde_json::json!({"nginx_version": ["1.24"]})
    );
    let text = server.fleet_text(&["rollout"]);
    // The two failed hosts once; each failure says how many of them it
    // is on, not "failed  2 host(s)" twice (read as four).
    assert!(
        text.contains("converged  2 host(s) (nginx_version=1.24)")
            && text.contains("failed  2 host(s): web-003, web-004\n")
            && text.contains("2 distinct failure(s) among them")
            && text.contains("- ValidationGroup[nginx] [nginx")
            && text
                .contains("on 2 of the 2 failed host(s) (nginx_version=1.26): validation failed")
            && text.matches("failed  ").count() == 1,
        "{text}"
    );
    let hosts = server.fleet(&["hosts"]);
    assert_eq!(host_row(&hosts, "web-004")["state"], "failed");
    assert_eq!(host_row(&hosts, "web-001")["state"], "converged");
}

/// Two server processes on one PostgreSQL, hosts split between them, one
/// of them killed and its hosts moved to the other: the fleet is whole
/// from either, every report once.
#[test]
fn two_server_processes_on_one_postgres_take_reports_for_one_fleet() {
    let Some(url) = postgres_database() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let repo = repo(t.path());
    let mut a = Server::init(t.path(), &url, &[]);
    a.start();
    let mut b = Server {
        dir: a.dir.clone(),
        port: free_port(),
        child: None,
    };
    b.start();
    let hosts: Vec<Host> = (1..=6)
        .map(|i| {
            let h = a.host(t.path(), &format!("pg-{i}"), &[], &[]);
            if i % 2 == 0 {
                h.report_to(b.port);
            }
            h
        })
        .collect();
    for h in &hosts {
        assert_exit(&h.run_delivered(&repo, &["apply"]), 2);
        assert_exit(&h.run_delivered(&repo, &["check"]), 0);
    }
    b.kill();
    for h in hosts.iter().skip(1).step_by(2) {
        h.report_to(a.port);
        assert_exit(&h.run_delivered(&repo, &["check"]), 0);
    }
    b.start();
    let from_b = b.fleet(&["hosts"]);
    assert_eq!(from_b["states"]["converged"], 6, "{from_b}");
    for h in &hosts {
        let expected: Vec<u64> = if h.name.ends_with(['2', '4', '6']) {
            vec![1, 2, 3]
        } else {
            vec![1, 2]
        };
        assert_eq!(a.seqs(&h.name), expected, "{}", h.name);
    }
}

/// A fresh database on the test PostgreSQL (`DATUM_TEST_POSTGRES`).
fn postgres_database() -> Option<String> {
    let Ok(base) = std::env::var("DATUM_TEST_POSTGRES") else {
        assert!(
            std::env::var("DATUM_POSTGRES_REQUIRED").as_deref() != Ok("1"),
            "DATUM_POSTGRES_REQUIRED=1 but DATUM_TEST_POSTGRES is not set"
        );
        eprintln!("skipped: DATUM_TEST_POSTGRES is not set (scripts/postgres start)");
        return None;
    };
    let name = format!(
        "fleet_cli_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    let out = Command::new("psql")
        .arg(&base)
        .args(["-X", "-q", "-c", &format!("CREATE DATABASE {name}")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (prefix, _) = base.rsplit_once('/').unwrap();
    Some(format!("{prefix}/{name}"))
}

/// The server's alert rules pass promtool's checks and tests, and the
/// metrics they use are the ones a real server serves.
#[test]
fn the_server_alert_rules_and_metrics() {
    let t = tempfile::tempdir().unwrap();
    let repo = repo(t.path());
    let mut server = Server::init(t.path(), "sqlite", &[]);
    server.start();
    let h = server.host(t.path(), "web-1", &[], &[]);
    assert_exit(&h.run_delivered(&repo, &["apply"]), 2);
    let admin = std::fs::read_to_string(server.admin()).unwrap();
    let token = admin
        .lines()
        .find_map(|l| l.strip_prefix("token: "))
        .unwrap()
        .to_owned();
    let curl = |token: &str| {
        Command::new("curl")
            .args(["-sS", "--cacert"])
            .arg(server.dir.join("ca.pem"))
            .args(["-H", &format!("Authorization: Bearer {token}")])
            .arg(format!("https://127.0.0.1:{}/metrics", server.port))
            .output()
    };
    let Ok(out) = curl(&token) else {
        eprintln!("skipped: curl is not installed");
        return;
    };
    let text = stdout(&out);
    for metric in [
        "datum_fleet_hosts{state=\"converged\"} 1",
        "datum_fleet_host_stale{host=\"web-1\"} 0",
        "datum_fleet_host_last_report_timestamp_seconds{host=\"web-1\"}",
        "datum_fleet_host_expected_interval_seconds{host=\"web-1\"} 600",
        "datum_fleet_host_outbox_depth{host=\"web-1\"} 0",
        "datum_fleet_rollout_hosts{state=\"converged\"} 1",
        "datum_fleet_reports_ingested_total{kind=\"apply\"} 1",
    ] {
        assert!(text.contains(metric), "{metric} missing from:\n{text}");
    }
    // Host names are inventory: a host's token does not read them.
    let host_token = std::fs::read_to_string(h.root.join("etc/datum/report.yaml"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("token: ").map(str::to_owned))
        .unwrap();
    let refused = stdout(&curl(&host_token).unwrap());
    assert!(refused.contains("admin credential"), "{refused}");

    if datum_host::command::which("promtool").is_none() {
        assert!(
            std::env::var_os("DATUM_VALIDATORS_REQUIRED").is_none(),
            "promtool is required here (scripts/deps installs prometheus)"
        );
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus");
    let check = Command::new("promtool")
        .args(["check", "rules", "datum-server.rules.yml"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        stdout(&check).contains("SUCCESS: 6 rules found"),
        "{check:?}"
    );
    let test = Command::new("promtool")
        .args(["test", "rules", "datum-server.rules.test.yml"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(test.status.success(), "{test:?}");
}

/// Size and rate are bounded: a report over `report_bytes` is refused for
/// good (set aside, counted, never blocking the queue), an identity over
/// `reports_per_minute` is told when to come back (kept, retried).
/// report.yaml holds the host's token: a pass warns when others may read
/// it (any local user could report as the host, and hide its drift).
#[test]
fn a_report_yaml_others_may_read_is_warned_about() {
    use std::os::unix::fs::PermissionsExt as _;
    let t = tempfile::tempdir().unwrap();
    let repo = repo(t.path());
    let server = Server::init(t.path(), "sqlite", &[]);
    let h = server.host(t.path(), "web-1", &[], &[]);
    let file = h.root.join("etc/datum/report.yaml");
    let out = h.run(&repo, &["apply"]);
    assert!(!stderr(&out).contains("chmod 600"), "{}", stderr(&out));
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = h.run(&repo, &["check"]);
    assert!(
        stderr(&out).contains("is mode 0644") && stderr(&out).contains("chmod 600"),
        "{}",
        stderr(&out)
    );
}

/// `server init` with a PostgreSQL store it cannot reach writes nothing:
/// before, it wrote the folder (certificates, admin.yaml, server.yaml) and
/// then failed to record the admin credential, leaving a folder whose
/// credential no store knew and over which `init` refused to run again.
#[test]
fn a_server_init_whose_store_cannot_be_reached_leaves_no_folder_behind() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("srv");
    let port = free_port();
    let out = datum()
        .args(["server", "init", "--dir"])
        .arg(&dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--store", "postgres://datum@127.0.0.1:1/fleet"])
        .output()
        .unwrap();
    assert_exit(&out, 1);
    assert!(
        !dir.join("server.yaml").exists() && !dir.join("admin.yaml").exists(),
        "{}",
        stderr(&out)
    );
    // Run again with a store that works: a usable server.
    let mut server = Server::init(t.path(), "sqlite", &[]);
    server.start();
    let hosts = server.fleet(&["hosts"]);
    assert_eq!(hosts["hosts"].as_array().unwrap().len(), 0, "{hosts}");
}

/// `retention.daily_days` holds: a daily aggregate older than that is
/// removed when the server starts (and every hour). Before, nothing ever
/// removed one, nor a remembered idempotency key: both tables grew for
/// ever.
#[test]
fn daily_aggregates_older_than_the_retention_are_removed() {
    let t = tempfile::tempdir().unwrap();
    let mut server = Server::init(t.path(), "sqlite", &[]);
    let config = server.dir.join("server.yaml");
    let original = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        original.replace("daily_days: 400", "daily_days: 3"),
    )
    .unwrap();
    server.start();
    let h = server.host(t.path(), "web-1", &[], &[]);
    let client = h.client();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    // One report finished ten days ago (delivered late), one today.
    for (seq, at) in [(1u64, now - 10 * 86_400), (2, now)] {
        let key = format!("{seq:032x}");
        let report = serde_json::json!({
            "format_version": 1, "key": key, "seq": seq, "kind": "check", "host": "web-1",
            "labels": {}, "datum_version": "0.1.0", "revision": "git:aaaa", "catalogue": "c",
            "started_at": at, "finished_at": at, "duration_ms": 1, "exit_code": 0,
            "counts": {}, "resources": 0, "expected_interval_s": 600
        });
        client
            .post_report(&key, report.to_string().as_bytes(), 0, 0)
            .unwrap();
    }
    let days = |server: &Server| -> Vec<String> {
        server.fleet(&["history", "web-1"])["daily"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["day"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(days(&server).len(), 2, "{:?}", days(&server));
    server.kill();
    server.start();
    // The first pruning runs as the server starts accepting.
    let deadline = Instant::now() + Duration::from_secs(10);
    let kept = loop {
        let kept = days(&server);
        if kept.len() < 2 || Instant::now() > deadline {
            break kept;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(kept.len(), 1, "the day ten days ago is gone: {kept:?}");
    assert_eq!(
        server.seqs("web-1"),
        [1, 2],
        "reports have their own retention"
    );
}

/// A check on an enrolled host that has no state store yet (nothing was
/// applied) queues no report, and says so: before, the host stayed "new"
/// and then stale on the server while its checks ran, with no word on it.
#[test]
fn a_check_before_any_apply_says_its_report_is_not_queued() {
    let t = tempfile::tempdir().unwrap();
    let repo = repo(t.path());
    let server = Server::init(t.path(), "sqlite", &[]);
    let h = server.host(t.path(), "web-1", &[], &[]);
    let out = h.run(&repo, &["check"]);
    assert!(
        stderr(&out).contains("report is not queued"),
        "{}",
        stderr(&out)
    );
    assert_exit(&h.run_as_service(&repo, &["apply"]), 2);
    // As a service runs it: its delivery attempt is over when it returns,
    // so nothing writes the store below.
    let out = h.run_as_service(&repo, &["check"]);
    assert!(!stderr(&out).contains("not queued"), "{}", stderr(&out));
    // A store that is there but refused: the warning does not say that
    // nothing was applied here.
    let db = h.root.join("var/lib/datum/state.db");
    for wal in ["state.db-wal", "state.db-shm"] {
        let _ = std::fs::remove_file(h.root.join("var/lib/datum").join(wal));
    }
    std::fs::write(&db, "this is not a database").unwrap();
    let out = h.run(&repo, &["check"]);
    let err = stderr(&out);
    assert!(err.contains("report is not queued"), "{err}");
    assert!(!err.contains("nothing was applied"), "{err}");
    assert!(err.contains("unusable"), "{err}");
}

#[test]
fn reports_are_bounded_in_size_and_rate() {
    let t = tempfile::tempdir().unwrap();
    let repo = repo(t.path());
    let mut server = Server::init(t.path(), "sqlite", &[]);
    let config = server.dir.join("server.yaml");
    let original = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        original.replace("report_bytes: 1048576", "report_bytes: 300"),
    )
    .unwrap();
    server.start();
    let h = server.host(t.path(), "web-1", &[], &[]);
    assert_exit(&h.run_delivered(&repo, &["apply"]), 2);
    let outbox = h.run(&repo, &["outbox"]);
    assert!(
        stdout(&outbox).contains("1 refused by the server") && stdout(&outbox).contains("HTTP 413"),
        "{}",
        stdout(&outbox)
    );
    server.kill();
    std::fs::write(
        &config,
        original.replace("reports_per_minute: 600", "reports_per_minute: 2"),
    )
    .unwrap();
    server.start();
    for _ in 0..2 {
        assert_exit(&h.run_delivered(&repo, &["check"]), 0);
    }
    assert_exit(&h.run(&repo, &["check"]), 0);
    let outbox = h.wait_outbox(&repo, "limited", |v| v["failures"].as_u64() > Some(0));
    assert!(
        outbox["last_error"].as_str().unwrap().contains("HTTP 429"),
        "{outbox}"
    );
    assert_eq!(outbox["depth"], 1, "the third waits in the outbox");
    assert_eq!(server.seqs("web-1"), vec![2, 3]);
}

/// A report larger than the server's limit and than a socket's buffers:
/// the server answered 413 after reading `report_bytes` and closed the
/// connection, so the host, still writing, saw "Broken pipe" (or a reset)
/// instead of the answer and kept the report queued, retried for ever.
/// The server reads (and drops) the rest of an oversized body, within a
/// bound, before it answers, so the host reads the 413 and sets it aside.
#[test]
fn a_report_far_over_the_limit_is_refused_not_retried() {
    let t = tempfile::tempdir().unwrap();
    let mut server = Server::init(t.path(), "sqlite", &[]);
    let config = server.dir.join("server.yaml");
    let original = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        original.replace("report_bytes: 1048576", "report_bytes: 65536"),
    )
    .unwrap();
    server.start();
    let h = server.host(t.path(), "web-1", &[], &[]);
    let client = h.client();
    let body = format!("{{\"padding\":\"{}\"}}", "x".repeat(2 * 1024 * 1024));
    for _ in 0..3 {
        match client.post_report(&format!("{:032x}", 1), body.as_bytes(), 0, 0) {
            Err(datum_fleet::client::SendError::Refused { status, .. }) => assert_eq!(status, 413),
            other => panic!("not refused with 413: {other:?}"),
        }
    }
}

/// The CPU time (user and system, in seconds) process `pid` has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command's closing parenthesis: utime is the
    // 14th field of the line, the 12th after it.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

/// Anyone who can reach the port can open connections until the server has
/// no descriptor left (systemd's default soft limit is 1,024; a connection
/// that never starts its TLS handshake is held 10 s). The server must wait
/// for descriptors to free up, not spin on `accept` failing with EMFILE,
/// and take reports again once they are closed.
#[test]
fn connections_past_the_descriptor_limit_do_not_make_the_server_spin() {
    let t = tempfile::tempdir().unwrap();
    let server = Server::init(t.path(), "sqlite", &[]);
    // Both limits at 64: soft and hard, so nothing raises them.
    let mut child = server.start_with_nofile("64:64");
    let pid = child.id();
    let held = idle_connections(server.port, 100);
    std::thread::sleep(Duration::from_millis(500));
    let before = cpu_seconds(pid);
    std::thread::sleep(Duration::from_secs(3));
    let used = cpu_seconds(pid) - before;
    drop(held);
    let answered = {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = fleet_with(&server.admin(), &["hosts"]);
            if out.status.success() || Instant::now() > deadline {
                break out;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        used < 1.0,
        "the server used {used:.2} s of CPU in 3 s with its descriptors taken"
    );
    assert_exit(&answered, 0);
}

/// The soft and hard limits of open files of process `pid`.
fn open_files_limits(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let numbers: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (numbers[0], numbers[1])
}

/// Under systemd the server starts with a soft limit of 1,024 descriptors
/// (the hard one is 524,288): a thousand idle connections, which anyone who
/// reaches the port can hold, left no room for a host's. The server takes
/// the hard limit, so they must be hundreds of thousands.
#[test]
fn the_server_takes_its_hard_descriptor_limit() {
    let t = tempfile::tempdir().unwrap();
    let server = Server::init(t.path(), "sqlite", &[]);
    let mut child = server.start_with_nofile("64:4096");
    let limits = open_files_limits(child.id());
    // 100 idle connections: more than the soft limit the server started
    // with; an operator is still answered while they are held.
    let held = idle_connections(server.port, 100);
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let answered = fleet_with(&server.admin(), &["hosts"]);
    let took = started.elapsed();
    drop(held);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(limits, (4096, 4096), "the server's open files limits");
    assert_exit(&answered, 0);
    assert!(took < Duration::from_secs(5), "answered in {took:?}");
}

/// A host whose host.yaml names it otherwise than the identity its
/// report.yaml was issued to (renamed, or a typo) makes reports the server
/// refuses with that token (403); they stay queued, since enrolling the new
/// name and installing its report.yaml sends them. But once host.yaml names
/// the host as its credentials do again, those reports can never be sent,
/// and the first of them held every later report back for good (the
/// delivery keeps the queue in order and everything while credentials are
/// refused). They are set aside then, counted as refused, with a warning.
#[test]
fn reports_of_a_name_the_host_no_longer_has_do_not_block_its_outbox() {
    let t = tempfile::tempdir().unwrap();
    let repo = repo(t.path());
    let mut server = Server::init(t.path(), "sqlite", &[]);
    server.start();
    let h = server.host(t.path(), "web-1", &[], &[]);
    assert_exit(&h.run_delivered(&repo, &["apply"]), 2);
    let host_yaml = h.root.join("etc/datum/host.yaml");
    let original = std::fs::read_to_string(&host_yaml).unwrap();
    std::fs::write(&host_yaml, original.replace("name: web-1", "name: web-1b")).unwrap();
    assert_exit(&h.run(&repo, &["check"]), 0);
    let outbox = h.wait_outbox(&repo, "refused", |v| v["failures"].as_u64() > Some(0));
    assert!(
        outbox["last_error"].as_str().unwrap().contains("HTTP 403"),
        "{outbox}"
    );
    std::fs::write(&host_yaml, original).unwrap();
    let mended = h.run(&repo, &["check"]);
    assert_exit(&mended, 0);
    let err = stderr(&mended);
    assert!(
        err.contains("1 queued report(s) of `web-1b`") && err.contains("set aside"),
        "{err}"
    );
    h.run(&repo, &["outbox", "--flush"]);
    let outbox = h.wait_outbox(&repo, "delivered", |v| v["depth"] == 0);
    assert_eq!(outbox["refused_total"], 1, "{outbox}");
    assert_eq!(server.seqs("web-1"), vec![1, 3]);
}

/// A host taken out of service, or renamed and enrolled under its new name,
/// could not be taken out of the fleet: it stayed in every view, stale for
/// ever (DatumHostStale firing), and its token kept working. `datum server
/// remove` ends its token and takes it out of the views.
#[test]
fn a_host_removed_from_the_server_leaves_the_fleet_and_its_token_ends() {
    let t = tempfile::tempdir().unwrap();
    let repo = repo(t.path());
    let mut server = Server::init(t.path(), "sqlite", &[]);
    server.start();
    let gone = server.host(t.path(), "web-1", &[], &[]);
    let kept = server.host(t.path(), "web-2", &[], &[]);
    assert_exit(&gone.run_delivered(&repo, &["apply"]), 2);
    assert_exit(&kept.run_delivered(&repo, &["apply"]), 2);
    let removed = datum()
        .args(["--json", "server", "remove", "web-1", "--dir"])
        .arg(&server.dir)
        .output()
        .unwrap();
    assert_exit(&removed, 0);
    let doc: Value = serde_json::from_slice(&removed.stdout).unwrap();
    assert_eq!(doc["name"], "web-1", "{doc}");
    assert_eq!(doc["removed"], true, "{doc}");
    let names: Vec<String> = server.fleet(&["hosts"])["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["web-2"]);
    assert!(
        server.fleet(&["stale"])["hosts"]
            .as_array()
            .unwrap()
            .is_empty(),
        "nothing stale"
    );
    // Its token no longer works (the server's cache of it lasts 30 s: a
    // fresh server process knows at once).
    server.kill();
    server.start();
    assert_exit(&gone.run(&repo, &["check"]), 0);
    let outbox = gone.wait_outbox(&repo, "refused", |v| v["failures"].as_u64() > Some(0));
    assert!(
        outbox["last_error"].as_str().unwrap().contains("HTTP 401"),
        "{outbox}"
    );
    // A name that is not enrolled is an error.
    let again = datum()
        .args(["server", "remove", "web-1", "--dir"])
        .arg(&server.dir)
        .output()
        .unwrap();
    assert_exit(&again, 1);
    assert!(stderr(&again).contains("web-1"), "{}", stderr(&again));
}

/// The admin credential could not be replaced: `admin.yaml` copied to a
/// laptop that was lost, or an operator who left, kept full access (every
/// view, quarantines through the web view) for as long as the server ran.
/// `datum server rotate-admin` writes a new `admin.yaml`; every other admin
/// credential, and every web session opened with one, ends.
#[test]
fn a_rotated_admin_credential_ends_the_old_one() {
    let t = tempfile::tempdir().unwrap();
    let mut server = Server::init(t.path(), "sqlite", &[]);
    let old = t.path().join("old-admin.yaml");
    std::fs::copy(server.admin(), &old).unwrap();
    let rotated = datum()
        .args(["--json", "server", "rotate-admin", "--dir"])
        .arg(&server.dir)
        .output()
        .unwrap();
    assert_exit(&rotated, 0);
    let doc: Value = serde_json::from_slice(&rotated.stdout).unwrap();
    assert_eq!(
        doc["admin_credentials"],
        server.admin().to_str().unwrap(),
        "{doc}"
    );
    assert_ne!(
        std::fs::read_to_string(&old).unwrap(),
        std::fs::read_to_string(server.admin()).unwrap()
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(server.admin())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    server.start();
    server.fleet(&["hosts"]);
    let refused = fleet_with(&old, &["hosts"]);
    assert_ne!(refused.status.code(), Some(0));
    assert!(stderr(&refused).contains("401"), "{}", stderr(&refused));
}

/// A check that finds many files edited carries a content diff for each
/// (up to 16 KiB apiece): 80 configuration files with a word changed on
/// every line made a report over the server's 1 MiB, refused with 413 and
/// set aside, and so was every later check while the drift lasted. The
/// fleet never saw the drift (the host read as converged, then stale). A
/// report over its budget leaves out diffs, the last findings' first, until
/// it fits, and says so.
#[test]
fn a_check_finding_many_edited_files_still_reaches_the_server() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    write_in(
        &repo,
        "datum.yaml",
        "datum: v1alpha1\nlayers:\n  - {name: base, path: base, match: {}}\nclasses:\n  normal: {interval: 10m}\n",
    );
    let mut docs = vec![
        "datum: v1alpha1\ntype: Directory\nname: etc\ndesired: {path: /etc, mode: \"0755\"}\n"
            .to_owned(),
    ];
    let text: String = (0..400)
        .map(|j| format!("setting_{j} = value {j}\n"))
        .collect();
    for i in 0..80 {
        write_in(&repo, &format!("base/files/f{i}.conf"), &text);
        docs.push(format!(
            "datum: v1alpha1\ntype: File\nname: f{i}\ndesired: {{path: /etc/f{i}.conf, source: files/f{i}.conf, mode: \"0644\"}}\n"
        ));
    }
    write_in(&repo, "base/main.yaml", &docs.join("---\n"));
    let mut server = Server::init(t.path(), "sqlite", &[]);
    server.start();
    let h = server.host(t.path(), "web-1", &[], &[]);
    assert_exit(&h.run_delivered(&repo, &["apply"]), 2);
    let edited = text.replace("value", "changed");
    for i in 0..80 {
        std::fs::write(h.live(&format!("/etc/f{i}.conf")), &edited).unwrap();
    }
    let checked = h.run_delivered(&repo, &["check"]);
    assert_exit(&checked, 2);
    let err = stderr(&checked);
    assert!(
        err.contains("the fleet report was cut to fit 960 KiB: the last")
            && err.contains("content diff(s) left out"),
        "{err}"
    );
    let outbox = h.outbox(&repo);
    assert_eq!(outbox["refused_total"], 0, "{outbox}");
    assert_eq!(host_row(&server.fleet(&["hosts"]), "web-1")["findings"], 80);
}

/// A Tree whose 5,000 entries (of long names) were all edited is one finding naming each
/// changed entry: its report was over the server's 1 MiB, refused with 413
/// and set aside, check after check, and the fleet never saw the drift. A
/// report that would be too large sheds detail (diffs, values, then all but
/// the first paths and changes of a finding) until it fits.
#[test]
fn a_check_finding_a_whole_tree_edited_still_reaches_the_server() {
    const LONG: &str = "a-configuration-file-name-long-enough-that-five-thousand-of-them-pass-a-mebibyte-of-report";
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    write_in(
        &repo,
        "datum.yaml",
        "datum: v1alpha1\nlayers:\n  - {name: base, path: base, match: {}}\nclasses:\n  normal: {interval: 10m}\n",
    );
    write_in(
        &repo,
        "base/main.yaml",
        "datum: v1alpha1\ntype: Directory\nname: etc\ndesired: {path: /etc, mode: \"0755\"}\n---\n\
datum: v1alpha1\ntype: Tree\nname: big\ndesired: {path: /etc/big, source: trees/t, mode: \"0644\", dir_mode: \"0755\"}\n",
    );
    for i in 0..5_000 {
        write_in(
            &repo,
            &format!("base/trees/t/{}-{i:05}.conf", LONG),
            &format!("x {i}\n"),
        );
    }
    let mut server = Server::init(t.path(), "sqlite", &[]);
    server.start();
    let h = server.host(t.path(), "web-1", &[], &[]);
    assert_exit(&h.run_delivered(&repo, &["apply"]), 2);
    for i in 0..5_000 {
        std::fs::write(
            h.live(&format!("/etc/big/{}-{i:05}.conf", LONG)),
            format!("y {i}\n"),
        )
        .unwrap();
    }
    assert_exit(&h.run_delivered(&repo, &["check"]), 2);
    let outbox = h.outbox(&repo);
    assert_eq!(outbox["refused_total"], 0, "{outbox}");
    assert_eq!(host_row(&server.fleet(&["hosts"]), "web-1")["findings"], 1);
}

/// The agent's reports named the revision of the repository read again at
/// each check, from git alone (`repository_revision(live repository,
/// None)`), not the one its catalogue was loaded from: a repository that is
/// no git checkout (a plain folder, or a checkout `datum pull` deployed,
/// which has no `.git`) was reported as `unknown` by every agent check
/// after the apply reported `stamp:…` or `git:…`, and a git working copy
/// moved on without a reload was reported at its new commit while the
/// agent still checked the old catalogue. The agent now reports the
/// revision it loaded, as an apply of that catalogue names it.
#[test]
fn the_agent_reports_the_revision_it_loaded() {
    let t = tempfile::tempdir().unwrap();
    let repo = repo(t.path());
    let mut server = Server::init(t.path(), "sqlite", &[]);
    server.start();
    let h = server.host(t.path(), "web-1", &[("role", "web")], &[]);
    assert_exit(&h.run_delivered(&repo, &["apply"]), 2);
    let applied = host_row(&server.fleet(&["hosts"]), "web-1")["revision"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(applied.starts_with("stamp:"), "{applied}");
    let out = h.run_delivered(&repo, &["agent", "--once"]);
    assert_exit(&out, 0);
    let v = server.fleet(&["hosts"]);
    let row = host_row(&v, "web-1");
    assert_eq!(row["reports"], 2, "{row}");
    assert_eq!(row["revision"], applied.as_str(), "{row}");
}

/// `server enroll` again (a token rotated, a host enrolled anew under its
/// name) wrote its --out file whole, so the keys an operator had set by
/// hand in the report.yaml it replaced (its outbox bounds, an interval)
/// were lost. They are kept (an --interval given wins over the file's); an
/// existing file enroll cannot read refuses the enrolment before the store
/// is touched, so the host's token in it still works.
#[test]
fn enrolling_again_keeps_the_keys_set_by_hand_in_report_yaml() {
    let t = tempfile::tempdir().unwrap();
    let repo = repo(t.path());
    let mut server = Server::init(t.path(), "sqlite", &[]);
    let h = server.host(t.path(), "web-1", &[], &[]);
    let file = h.root.join("etc/datum/report.yaml");
    let token = |text: &str| -> String {
        let line = text.lines().find(|l| l.starts_with("token: "));
        line.expect("a token line").to_owned()
    };
    let first = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        format!("{first}outbox_limit: 50\noutbox_bytes: 4000\ninterval: 10m\n"),
    )
    .unwrap();
    let enroll = |extra: &[&str]| {
        datum()
            .args(extra)
            .args(["server", "enroll", "web-1", "--dir"])
            .arg(&server.dir)
            .arg("--out")
            .arg(&file)
            .output()
            .unwrap()
    };
    let out = enroll(&[]);
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains(&format!(
            "Kept from the {} it replaced: interval, outbox_limit, outbox_bytes.",
            file.display()
        )),
        "{}",
        stdout(&out)
    );
    let again = std::fs::read_to_string(&file).unwrap();
    assert_ne!(token(&again), token(&first), "a new token");
    for key in [
        "outbox_limit: 50\n",
        "outbox_bytes: 4000\n",
        "interval: 10m\n",
    ] {
        assert!(again.contains(key), "{key} lost:\n{again}");
    }
    // An --interval given is enroll's to set.
    let out = datum()
        .args(["--json", "server", "enroll", "web-1", "--dir"])
        .arg(&server.dir)
        .args(["--interval", "5m", "--out"])
        .arg(&file)
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["kept"],
        serde_json::json!(["outbox_limit", "outbox_bytes"])
    );
    let kept = std::fs::read_to_string(&file).unwrap();
    assert!(
        kept.contains("interval: 5m\n") && kept.contains("outbox_limit: 50\n"),
        "{kept}"
    );
    // A file enroll cannot read: refused, naming it, its line and the keys
    // at stake; nothing written, nothing enrolled.
    let damaged = kept.replace("outbox_limit: 50", "outbox_limit: fifty");
    std::fs::write(&file, &damaged).unwrap();
    let out = enroll(&[]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{}:", file.display()))
            && err.contains("outbox_limit")
            && err.contains(
                "keeping the keys it does not set (interval, outbox_limit, outbox_bytes)"
            )
            && err.contains("move it away or name another --out"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), damaged);
    // The token of the last enrolment still reports.
    std::fs::write(&file, &kept).unwrap();
    server.start();
    assert_exit(&h.run(&repo, &["apply"]), 2);
    h.wait_outbox(&repo, "delivered", |v| v["depth"] == 0);
    assert_eq!(server.seqs("web-1"), vec![1]);
}

/// The first value `sql` selects from the SQLite database `db`.
fn sqlite_value(db: &Path, sql: &str) -> String {
    let out = Command::new("sqlite3").arg(db).arg(sql).output().unwrap();
    assert_exit(&out, 0);
    stdout(&out).trim().to_owned()
}

/// Each report says which state store made it (`Datum-Store-Id`), so the
/// server tells a store made anew (`--rebuild-state`), whose reports are
/// numbered from 1 again, from the old one (datum-server it
/// queries::a_report_of_another_store has the rule): the host's row holds
/// the id of the store its last report came from, and once the host's
/// store is made anew the new store's.
#[test]
fn reports_say_which_state_store_made_them() {
    if !datum_testkit::tools::have("sqlite3", "sqlite3") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let repo = repo(t.path());
    let mut server = Server::init(t.path(), "sqlite", &[]);
    server.start();
    let h = server.host(t.path(), "web-1", &[], &[]);
    let state = h.root.join("var/lib/datum/state.db");
    let fleet = server.dir.join("fleet.db");
    let host_store = || sqlite_value(&fleet, "SELECT store_id FROM hosts WHERE name = 'web-1'");
    assert_exit(&h.run(&repo, &["apply"]), 2);
    h.wait_outbox(&repo, "delivered", |v| v["depth"] == 0);
    let old = sqlite_value(&state, "SELECT store_id FROM store_identity");
    assert_eq!(old.len(), 32, "{old}");
    assert_eq!(host_store(), old);
    // The host installed again under its name: a state store made anew.
    for file in ["state.db", "state.db-wal", "state.db-shm"] {
        let _ = std::fs::remove_file(h.root.join("var/lib/datum").join(file));
    }
    let again = h.run(&repo, &["apply"]);
    assert!(
        matches!(again.status.code(), Some(0 | 2)),
        "{}",
        stderr(&again)
    );
    h.wait_outbox(&repo, "delivered", |v| v["depth"] == 0);
    let new = sqlite_value(&state, "SELECT store_id FROM store_identity");
    assert_ne!(new, old, "a store made anew has an id of its own");
    assert_eq!(host_store(), new);
    assert_eq!(server.seqs("web-1"), vec![1, 1], "both stores' first");
}

/// Whether any run of 10 characters of `secret` appears in `text`: a wire
/// dump cuts a token into rows of 16 bytes, so the whole never appears.
fn shows_part_of(text: &str, secret: &str) -> bool {
    let bytes = secret.as_bytes();
    bytes
        .windows(10)
        .any(|w| text.contains(std::str::from_utf8(w).unwrap()))
}

/// The token a credentials file (report.yaml, admin.yaml) holds.
fn token_in(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let line = text.lines().find(|l| l.starts_with("token:")).unwrap();
    line["token:".len()..].trim().to_owned()
}

/// With `--log-level trace` (or `RUST_LOG=trace`), the HTTP client's own
/// trace events dumped every byte it sent, 16 to a line, the
/// `authorization: Bearer` header among them: a host's report token (and
/// with `datum fleet`, the admin credential) went to the log, the journal
/// under systemd. No directive makes them logged now.
#[test]
fn a_trace_log_never_holds_a_credential() {
    let t = tempfile::tempdir().unwrap();
    let repo = repo(t.path());
    let mut server = Server::init(t.path(), "sqlite", &[]);
    server.start();
    let h = server.host(t.path(), "web-1", &[], &[]);
    let host_token = token_in(&h.root.join("etc/datum/report.yaml"));
    let admin_token = token_in(&server.admin());
    for level in ["trace", "ureq_proto=trace,ureq=trace"] {
        let out = datum()
            .env("INVOCATION_ID", "0123456789abcdef0123456789abcdef")
            .arg("--repo")
            .arg(&repo)
            .arg("--root")
            .arg(&h.root)
            .args(["--color", "never", "--log-level", level, "apply"])
            .output()
            .unwrap();
        assert_exit(&out, 2);
        let log = stderr(&out);
        // The report was sent in-line, and the client's events are logged.
        assert!(log.contains("/v1/reports"), "{level}: {log}");
        assert!(!shows_part_of(&log, &host_token), "{level}: {log}");
        std::fs::remove_file(h.live("/etc/motd")).unwrap();
        let out = datum()
            .args(["--log-level", level, "fleet", "--credentials"])
            .arg(server.admin())
            .arg("hosts")
            .output()
            .unwrap();
        assert_exit(&out, 0);
        let log = stderr(&out);
        assert!(log.contains("/v1/hosts"), "{level}: {log}");
        assert!(!shows_part_of(&log, &admin_token), "{level}: {log}");
    }
}

/// A pass's warnings reach the server only once it said it takes them
/// (`takes` in its reply): the host's first report goes without (a server
/// of an older build would refuse a report holding the field, 400), and
/// the next carries them, shown by `datum fleet history`, and so does a
/// reconcile's check report for its reverts' warnings. A warning naming
/// a sensitive resource's path (a User whose shell is a sensitive File)
/// never leaves the host: the server's database holds only that one was
/// left out.
#[test]
fn a_passs_warnings_reach_a_server_that_takes_them_and_no_sensitive_ones() {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !root || !datum_testkit::tools::have("sqlite3", "sqlite3") {
        eprintln!("skipped: shadow-utils need root (CAP_SYS_CHROOT) for --root, and sqlite3");
        return;
    }
    const CANARY: &str = "CNRY-4417-vault";
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    let w = |rel: &str, text: &str| write_in(&repo, rel, text);
    w(
        "datum.yaml",
        "datum: v1alpha1\nlayers:\n  - {name: base, path: base, match: {}}\nclasses:\n  normal: {interval: 10m}\n  critical: {interval: 60s, policy: revert}\n",
    );
    // w2's shell is one of two sensitive Files (not executable: useradd
    // and usermod warn, naming it).
    let users = |shell: &str, vault: u8| {
        format!(
            "datum: v1alpha1\ntype: User\nname: w1\nclass: critical\ndesired: {{uid: 1500, shell: {shell}}}\n---\n\
datum: v1alpha1\ntype: User\nname: w2\nclass: critical\ndesired: {{uid: 1501, shell: /etc/{CANARY}-{vault}.conf}}\n---\n\
datum: v1alpha1\ntype: File\nname: vault1\nsensitive: true\ndesired: {{path: /etc/{CANARY}-1.conf, content: \"k\\n\", mode: \"0600\"}}\n---\n\
datum: v1alpha1\ntype: File\nname: vault2\nsensitive: true\ndesired: {{path: /etc/{CANARY}-2.conf, content: \"k\\n\", mode: \"0600\"}}\n"
        )
    };
    w("base/main.yaml", &users("/bin/nonexistent", 1));
    let mut server = Server::init(t.path(), "sqlite", &[]);
    server.start();
    let h = server.host(t.path(), "web-1", &[], &[]);
    let etc = h.root.join("etc");
    std::fs::write(
        etc.join("passwd"),
        "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    )
    .unwrap();
    std::fs::write(
        etc.join("group"),
        "root:x:0:\nusers:x:100:\nnogroup:x:65534:\n",
    )
    .unwrap();
    std::fs::write(
        etc.join("shadow"),
        "root:*:20000:0:99999:7:::\nnobody:*:20000:0:99999:7:::\n",
    )
    .unwrap();
    std::fs::write(etc.join("gshadow"), "root:*::\nusers:*::\nnogroup:*::\n").unwrap();

    // The first report: the host has not heard the server yet.
    let first = h.run_delivered(&repo, &["apply"]);
    let said = format!("{}{}", stdout(&first), stderr(&first));
    assert!(
        said.contains("missing or non-executable shell '/bin/nonexistent'"),
        "{said}"
    );
    let fleet_db = server.dir.join("fleet.db");
    let body = |seq: u64| {
        sqlite_value(
            &fleet_db,
            &format!("SELECT body FROM reports WHERE host = 'web-1' AND seq = {seq}"),
        )
    };
    assert!(!body(1).is_empty(), "the first report was taken");
    assert!(!body(1).contains("\"warnings\""), "{}", body(1));

    // The reply said the server takes them: the next apply's go along.
    w("base/main.yaml", &users("/bin/nope", 2));
    let second = h.run_delivered(&repo, &["apply"]);
    let said = format!("{}{}", stdout(&second), stderr(&second));
    assert!(said.contains("/bin/nope"), "{said}");
    // The host itself shows w2's warning (the canary's path) ...
    assert!(said.contains(&format!("{CANARY}-2.conf")), "{said}");
    let sent: Value = serde_json::from_str(&body(2)).unwrap();
    let warnings = sent["warnings"].to_string();
    assert!(
        warnings.contains("User[w1]: usermod") && warnings.contains("/bin/nope"),
        "{warnings}"
    );
    // ... which its report counts without its words.
    assert!(
        warnings.contains("naming a sensitive resource left out"),
        "{warnings}"
    );
    let history = server.fleet(&["history", "web-1"]);
    let listed = history["reports"].to_string();
    assert!(listed.contains("/bin/nope"), "{listed}");
    let text = server.fleet_text(&["history", "web-1"]);
    assert!(text.contains("User[w1]: usermod"), "{text}");

    // The sensitive Files' paths, in w2's warnings of both applies, are
    // nowhere in the server's database.
    let dump = Command::new("sqlite3")
        .arg(&fleet_db)
        .arg(".dump")
        .output()
        .unwrap();
    assert_exit(&dump, 0);
    assert!(
        !stdout(&dump).contains("CNRY-4417"),
        "the canary reached the server"
    );

    // A reconcile's reverts say theirs too, in its check report.
    let passwd = std::fs::read_to_string(etc.join("passwd")).unwrap();
    let drifted = passwd
        .replace(":/bin/nope\n", ":/bin/sh\n")
        .replace(&format!(":/etc/{CANARY}-2.conf\n"), ":/bin/sh\n");
    assert_ne!(drifted, passwd);
    std::fs::write(etc.join("passwd"), drifted).unwrap();
    let third = h.run_delivered(&repo, &["reconcile"]);
    let said = format!("{}{}", stdout(&third), stderr(&third));
    assert!(said.contains(&format!("{CANARY}-2.conf")), "{said}");
    let sent: Value = serde_json::from_str(&body(3)).unwrap();
    assert_eq!(sent["kind"], "check", "{sent}");
    let warnings = sent["warnings"].to_string();
    assert!(
        warnings.contains("User[w1]: usermod") && warnings.contains("/bin/nope"),
        "{warnings}"
    );
    assert!(
        warnings.contains("naming a sensitive resource left out") && !warnings.contains(CANARY),
        "{warnings}"
    );
    // (w2's finding itself names its declared shell, the path: a
    // finding's declared value of a resource that is not sensitive.)
}

/// An admin credential whose CA did not sign the server's certificate (the
/// credential of a server initialised again: every `datum server init`
/// names its CA alike, so rustls says BadSignature): the error says so and
/// names the credential file the CA came from, which it did not ("the CA
/// the credentials names").
#[test]
fn a_credential_of_another_ca_is_named_in_the_error() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("a")).unwrap();
    std::fs::create_dir_all(t.path().join("b")).unwrap();
    let mut server = Server::init(&t.path().join("a"), "sqlite", &[]);
    server.start();
    let other = Server::init(&t.path().join("b"), "sqlite", &[]);
    // The server's own credential, with the other server's CA.
    let own = std::fs::read_to_string(server.admin()).unwrap();
    let theirs = std::fs::read_to_string(other.admin()).unwrap();
    let credential = t.path().join("ops-admin.yaml");
    std::fs::write(
        &credential,
        format!(
            "{}{}",
            &own[..own.find("ca: |").unwrap()],
            &theirs[theirs.find("ca: |").unwrap()..]
        ),
    )
    .unwrap();
    let out = fleet_with(&credential, &["hosts"]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "the server's certificate is not signed by the CA {} names",
            credential.display()
        )) && err.contains("BadSignature"),
        "{err}"
    );
    // The server's own credential still reads.
    assert_exit(&fleet_with(&server.admin(), &["hosts"]), 0);
}

/// The subjects of the fleet's drift clusters, sorted.
fn drift_subjects(server: &Server) -> Vec<String> {
    let v = server.fleet(&["drift"]);
    let mut s: Vec<String> = v["clusters"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .map(|c| c["subject"].as_str().unwrap().to_owned())
        .collect();
    s.sort();
    s
}

/// A finding of a resource a person fixed by hand before the next apply:
/// that apply finds nothing to change there, and its report says it
/// verified the whole catalogue but what failed, so the server closes the
/// finding at once (it stayed open until the next check); the finding of
/// the resource the apply failed stays open.
#[test]
fn an_apply_closes_the_findings_of_what_it_found_already_fixed() {
    let t = tempfile::tempdir().unwrap();
    let repo = repo(t.path());
    let mut server = Server::init(t.path(), "sqlite", &[]);
    server.start();
    let h = server.host(t.path(), "fix-1", &[], &[]);
    assert_exit(&h.run_delivered(&repo, &["apply"]), 2);
    std::fs::write(h.live("/etc/motd"), "back at 5\n").unwrap();
    let conf = h.live("/etc/app.conf");
    std::fs::remove_file(&conf).unwrap();
    std::fs::create_dir(&conf).unwrap();
    std::fs::write(
        conf.join("keep"),
        "a directory the apply refuses to replace\n",
    )
    .unwrap();
    assert_exit(&h.run_delivered(&repo, &["check"]), 2);
    assert_eq!(drift_subjects(&server), ["File[app-conf]", "File[motd]"]);
    // Fixed by hand: the apply finds the motd as declared.
    std::fs::write(h.live("/etc/motd"), "welcome\n").unwrap();
    let out = h.run_delivered(&repo, &["apply"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("File[app-conf]  failed (apply)"), "{text}");
    assert!(text.contains("0 changed, 3 unchanged, 1 failed"), "{text}");
    assert_exit(&out, 4);
    assert_eq!(
        drift_subjects(&server),
        ["File[app-conf]"],
        "the motd's finding closed, the failed one's stays"
    );
    let hosts = server.fleet(&["hosts"]);
    assert_eq!(host_row(&hosts, "fix-1")["findings"], 1, "{hosts}");
}
