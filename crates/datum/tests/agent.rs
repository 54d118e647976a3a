//! `datum agent` end to end: the built binary on a temporary root, its
//! `/metrics` read over HTTP, signals sent to the real process, the shipped
//! alert rules run through the real `promtool`, a real Prometheus scraping a
//! real agent, and the systemd unit checked by `systemd-analyze verify`.
//!
//! Every wait is bounded; every process is killed when its guard drops.
//! Tests that need `promtool`, `prometheus` or `systemd-analyze` print
//! "skipped" when the program is missing, and fail instead when
//! `DATUM_VALIDATORS_REQUIRED` is set (CI sets it; `scripts/deps` installs
//! them).

#![allow(
    clippy::disallowed_methods,
    reason = "integration tests build fixtures and inspect results on disk directly, and start real programs; the code under test goes through datum-host"
)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a panic is the test failing, with its message"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use datum_testkit::tools::have;
use tempfile::TempDir;

const DATUM: &str = env!("CARGO_BIN_EXE_datum");

/// The interval of a class no test may see checked on its interval. A
/// class's slots are fixed Unix times (its phase on the host), so the
/// `critical` class of 60 s came due every minute at :35.978 on host
/// `agent-test`, and a test running across that second (more of them the
/// longer tests take under load) saw an interval check it did not expect:
/// the class's picture changed, a change was reverted by the interval
/// check, not the watch's. The next slot of 100 years is in 2069
/// (`critical`) or 2112 (`normal`).
const NOT_DUE: &str = "100y";

/// A repository with a watched `critical` class and a polled `normal` one,
/// both with one file, and a root to check. `critical` is never due on its
/// interval ([`NOT_DUE`]): what checks it is the first full pass and the
/// watch.
struct Estate {
    dir: TempDir,
}

impl Estate {
    /// The repository and a root Datum has never applied (no
    /// `var/lib/datum`).
    fn unapplied(normal_interval: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let e = Self { dir };
        e.write(
            "repo/datum.yaml",
            &format!(
                "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {{}}\n\
                 classes:\n  critical: {{interval: 100y, watch: true}}\n  normal: {{interval: {normal_interval}}}\n"
            ),
        );
        e.write(
            "repo/base/files.yaml",
            "datum: v1alpha1\ntype: File\nname: sshd\nclass: critical\ndesired:\n  path: /etc/app/sshd.conf\n  content: \"PermitRootLogin no\\n\"\n\
             ---\ndatum: v1alpha1\ntype: File\nname: motd\ndesired:\n  path: /etc/app/motd\n  content: \"hello\\n\"\n",
        );
        e.write("root/etc/datum/host.yaml", "name: agent-test\nlabels: {}\n");
        std::fs::create_dir_all(e.path("root/etc/app")).unwrap();
        e
    }

    /// [`Estate::unapplied`], applied once.
    fn new(normal_interval: &str) -> Self {
        let e = Self::unapplied(normal_interval);
        let out = e.datum(&["apply"]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "apply: {out:?}");
        e
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn write(&self, rel: &str, text: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn datum(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(DATUM);
        cmd.arg("--repo")
            .arg(self.path("repo"))
            .arg("--root")
            .arg(self.path("root"))
            .arg("--color")
            .arg("never")
            .args(args)
            .env_remove("DATUM_REPO")
            .env_remove("DATUM_ROOT");
        cmd
    }

    fn start(&self, extra: &[&str]) -> Agent {
        let mut args = vec!["agent", "--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let mut child = self
            .datum(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(Vec::<String>::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let mut agent = Agent {
            child,
            log,
            addr: None,
        };
        let line = agent.wait_log("the metrics endpoint", |l| l.contains("serving /metrics"));
        let addr = line.rsplit("http://").next().unwrap().trim();
        agent.addr = Some(addr.parse().unwrap());
        agent
    }
}

/// A running agent; killed on drop.
struct Agent {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    addr: Option<SocketAddr>,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    fn addr(&self) -> SocketAddr {
        self.addr.unwrap()
    }

    fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    fn wait_log(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        wait(what, Duration::from_secs(20), || {
            self.log.lock().unwrap().iter().find(|l| pred(l)).cloned()
        })
        .unwrap_or_else(|| panic!("no log line for {what}:\n{}", self.log_text()))
    }

    fn metrics(&self) -> String {
        http_get(self.addr(), "/metrics").1
    }

    /// Waits until `/metrics` has `line`; returns how long that took.
    fn wait_metric(&self, line: &str, within: Duration) -> Duration {
        let t0 = Instant::now();
        let seen = wait(line, within, || self.metrics().contains(line).then_some(()));
        assert!(
            seen.is_some(),
            "`{line}` not in /metrics within {within:?}:\n{}\nlog:\n{}",
            self.metrics(),
            self.log_text()
        );
        t0.elapsed()
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit; its exit code.
    fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let t0 = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                t0.elapsed() < within,
                "agent did not exit within {within:?}:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Polls `f` every 20 ms until it returns something or `within` passes.
fn wait<T>(_what: &str, within: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if t0.elapsed() > within {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A minimal HTTP/1.0 GET: (status code, body).
fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, body.to_owned())
}

/// Whether `program` can run; a missing one skips the test unless CI
/// requires it.
fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

const CRIT_DRIFT: &str = "datum_drift_findings{class=\"critical\",kind=\"changed_outside\"} 1";
const NORMAL_DRIFT: &str = "datum_drift_findings{class=\"normal\",kind=\"changed_outside\"} 1";

#[test]
fn watched_drift_shows_within_a_second_and_polled_within_its_bound() {
    let estate = Estate::new("2s");
    let agent = estate.start(&[]);
    // The first full pass: both classes converged.
    agent.wait_metric(
        "datum_resources{class=\"critical\",state=\"converged\"} 1",
        Duration::from_secs(10),
    );
    agent.wait_metric(
        "datum_resources{class=\"normal\",state=\"converged\"} 1",
        Duration::from_secs(10),
    );
    let metrics = agent.metrics();
    assert!(
        metrics.contains("datum_class_watched{class=\"critical\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("datum_class_watched{class=\"normal\"} 0"),
        "{metrics}"
    );
    assert!(metrics.contains("datum_check_interval_seconds{class=\"normal\"} 2.0"));
    // Labels never carry a path or a resource name (the resource is named
    // `sshd`, as is a validator whose counter is exported at zero).
    assert!(
        !metrics.replace("validator=\"sshd\"", "").contains("sshd"),
        "{metrics}"
    );
    assert!(!metrics.contains("/etc/app"), "{metrics}");
    assert_eq!(http_get(agent.addr(), "/healthz"), (200, "ok\n".to_owned()));

    // The watched file: the finding is in /metrics within a second.
    estate.write("root/etc/app/sshd.conf", "PermitRootLogin yes\n");
    let took = agent.wait_metric(CRIT_DRIFT, Duration::from_secs(1));
    assert!(took < Duration::from_secs(1), "{took:?}");
    // The watch's check found it (its line is logged after it is counted,
    // and reaches this test through a pipe).
    agent.wait_log("the watch's check", |l| {
        l.contains("check (watch) of class critical (1 resource(s))")
    });

    // The polled file: within its stated bound (interval + inspection time;
    // one second of slack for the scrape loop of this test).
    let metrics = agent.metrics();
    let bound: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("datum_detection_bound_seconds{class=\"normal\"} "))
        .unwrap()
        .parse()
        .unwrap();
    assert!((2.0..3.0).contains(&bound), "bound {bound}");
    estate.write("root/etc/app/motd", "edited by hand\n");
    agent.wait_metric(NORMAL_DRIFT, Duration::from_secs_f64(bound + 1.0));
    // Content of the drifted files never reaches the metrics.
    assert!(!agent.metrics().contains("edited by hand"));
}

/// A write through another hard link of a watched file, in a folder no
/// watch covers, is seen at once: the file is watched on its own inode too,
/// not only through its folder (whose watch the kernel tells nothing of it).
#[test]
fn a_write_through_another_hard_link_of_a_watched_file_is_seen_at_once() {
    let estate = Estate::new(NOT_DUE);
    let agent = estate.start(&[]);
    agent.wait_metric(
        "datum_resources{class=\"critical\",state=\"converged\"} 1",
        Duration::from_secs(10),
    );
    std::fs::create_dir_all(estate.path("root/home/alice")).unwrap();
    std::fs::hard_link(
        estate.path("root/etc/app/sshd.conf"),
        estate.path("root/home/alice/sshd-link"),
    )
    .unwrap();
    // Written in place through the link (the same inode).
    std::fs::write(
        estate.path("root/home/alice/sshd-link"),
        "PermitRootLogin yes\n",
    )
    .unwrap();
    // The class is never due on its interval (and the backstop full pass
    // an hour away): what finds the drift is a watch's check. Linking the
    // file is an event of its own (its link count), whose check may come
    // first and find the file converged.
    agent.wait_metric(CRIT_DRIFT, Duration::from_secs(20));
    agent.wait_log("the watch's check", |l| {
        l.contains("check (watch) of class critical (1 resource(s)): 1 open finding(s)")
    });
    let text = agent.metrics();
    assert!(
        text.contains("datum_checks_total{class=\"critical\",trigger=\"full\"} 1")
            && text.contains("datum_checks_total{class=\"critical\",trigger=\"interval\"} 0"),
        "{text}"
    );
}

#[test]
fn a_revert_class_is_reverted_by_the_agent_in_process() {
    let (estate, agent) = reverting_estate();
    estate.write("root/etc/app/sshd.conf", "PermitRootLogin yes\n");
    wait_content(&estate, "PermitRootLogin no\n", &agent);
    // The evidence was kept: the drifted content is in the backup store.
    let out = estate.datum(&["backup", "list"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("sshd.conf"),
        "{out:?}"
    );
    // Reverted drift is not open drift: the resource is counted changed
    // (reverted by the class's last check) until the class's next check.
    agent.wait_metric(
        "datum_resources{class=\"critical\",state=\"changed\"} 1",
        Duration::from_secs(20),
    );
    assert!(
        agent
            .metrics()
            .contains("datum_drift_findings{class=\"critical\",kind=\"changed_outside\"} 0")
    );
    // The watch library's own chatter (at info: 'unable to remove watch
    // descriptor from inotify: Os { code: 22, ... }' when the file it watched
    // on its own inode was replaced, as every revert does) is not the
    // operator's business: only its warnings are logged. It would be logged
    // as the library reads the revert's events, before a later edit's.
    events_handled(&estate, &agent);
    let log = agent.log_text();
    assert!(!log.contains("notify::"), "{log}");
}

/// What a policy did is counted. A revert or an accept leaves no open
/// finding, and `datum_resources{state="changed"}` lasts only until the
/// class's next check (which the revert's own write set off, a few
/// milliseconds later, before that write stopped counting as a change), so
/// a scrape every 15 s or more never saw that the host had drifted and been
/// put back (or that a patch now waits for the repository).
#[test]
fn what_a_policy_did_is_counted_not_only_shown_until_the_next_check() {
    let estate = Estate::new(NOT_DUE);
    let settings = std::fs::read_to_string(estate.path("repo/datum.yaml")).unwrap();
    estate.write(
        "repo/datum.yaml",
        &settings
            .replace(
                "critical: {interval: 100y, watch: true}",
                "critical: {interval: 100y, watch: true, policy: revert}",
            )
            .replace(
                "normal: {interval: 100y}",
                "normal: {interval: 100y, watch: true, policy: accept}",
            ),
    );
    let agent = estate.start(&[]);
    agent.wait_metric(
        "datum_resources{class=\"critical\",state=\"converged\"} 1",
        Duration::from_secs(10),
    );
    let text = agent.metrics();
    for class in ["critical", "normal"] {
        for action in ["reverted", "accepted", "revert_failed"] {
            let zero =
                format!("datum_policy_actions_total{{class=\"{class}\",action=\"{action}\"}} 0");
            assert!(text.contains(&zero), "no `{zero}` from the start:\n{text}");
        }
    }
    estate.write("root/etc/app/motd", "hello from a person\n");
    agent.wait_metric(
        "datum_policy_actions_total{class=\"normal\",action=\"accepted\"} 1",
        Duration::from_secs(20),
    );
    agent.wait_log("the accept in the log", |l| l.contains("1 accepted"));
    estate.write("root/etc/app/sshd.conf", "PermitRootLogin yes\n");
    wait_content(&estate, "PermitRootLogin no\n", &agent);
    agent.wait_metric(
        "datum_policy_actions_total{class=\"critical\",action=\"reverted\"} 1",
        Duration::from_secs(20),
    );
    // The revert's own write sets off no check (its file is as the revert
    // left it): the picture stays the revert's until the class's next check.
    events_handled(&estate, &agent);
    let text = agent.metrics();
    assert!(
        text.contains("datum_policy_actions_total{class=\"critical\",action=\"reverted\"} 1")
            && text.contains("datum_resources{class=\"critical\",state=\"changed\"} 1"),
        "{text}"
    );
}

/// A revert's own write is a file-change event too: it set off a second
/// watch check of the class (the whole class reconciled again, ~100 ms
/// later, counted in `datum_checks_total{trigger="watch"}`). The agent now
/// looks at the files it reverted when their events come and checks again
/// only if one is no longer as declared, so one hand edit gives one watch
/// check, and an edit made right after the revert is still reverted.
#[test]
fn a_reverts_own_write_sets_off_no_second_check() {
    let (estate, agent) = reverting_estate();
    estate.write("root/etc/app/sshd.conf", "PermitRootLogin yes\n");
    wait_content(&estate, "PermitRootLogin no\n", &agent);
    agent.wait_metric(
        "datum_policy_actions_total{class=\"critical\",action=\"reverted\"} 1",
        Duration::from_secs(20),
    );
    // The revert's own events have been handled (and a check they set off
    // counted and logged) once a later edit's check is.
    events_handled(&estate, &agent);
    let text = agent.metrics();
    let log = agent.log_text();
    assert_eq!(
        log.matches("check (watch) of class critical").count(),
        1,
        "{log}"
    );
    assert!(
        text.contains("datum_checks_total{class=\"critical\",trigger=\"watch\"} 1"),
        "{text}\nlog:\n{log}"
    );
    // The class's picture is the revert's until its next check.
    assert!(
        text.contains("datum_resources{class=\"critical\",state=\"changed\"} 1"),
        "{text}"
    );
    // An edit right after a revert is not taken for the revert's write.
    estate.write("root/etc/app/sshd.conf", "PermitRootLogin maybe\n");
    wait_content(&estate, "PermitRootLogin no\n", &agent);
    agent.wait_metric(
        "datum_policy_actions_total{class=\"critical\",action=\"reverted\"} 2",
        Duration::from_secs(20),
    );
    estate.write("root/etc/app/sshd.conf", "PermitRootLogin again\n");
    wait_content(&estate, "PermitRootLogin no\n", &agent);
    agent.wait_metric(
        "datum_policy_actions_total{class=\"critical\",action=\"reverted\"} 3",
        Duration::from_secs(20),
    );
    events_handled(&estate, &agent);
    assert!(
        agent
            .metrics()
            .contains("datum_checks_total{class=\"critical\",trigger=\"watch\"} 3"),
        "{}\nlog:\n{}",
        agent.metrics(),
        agent.log_text()
    );
}

/// A watch names the files that changed, but a policy's check (the
/// in-process reconcile) covers the whole class: the class's picture is of
/// every resource of it. It was of the watched ones only, so after one
/// file of a two-file revert class was reverted, `datum_resources` summed
/// to 1 for the class, and a resource failing or quarantined elsewhere in
/// it dropped out of the metrics (and its alert's `for:` started again)
/// until the next interval check.
#[test]
fn a_watch_check_of_a_policy_class_counts_every_resource_of_the_class() {
    let estate = Estate::unapplied(NOT_DUE);
    estate.write(
        "repo/base/banner.yaml",
        "datum: v1alpha1\ntype: File\nname: banner\nclass: critical\ndesired:\n  path: /etc/app/banner\n  content: \"authorised use only\\n\"\n",
    );
    let out = estate.datum(&["apply"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "apply: {out:?}");
    let settings = std::fs::read_to_string(estate.path("repo/datum.yaml")).unwrap();
    estate.write(
        "repo/datum.yaml",
        &settings
            .replace(
                "critical: {interval: 100y, watch: true}",
                "critical: {interval: 100y, watch: true, policy: revert}",
            )
            .replace(
                "normal: {interval: 100y}",
                "normal: {interval: 100y, watch: true}",
            ),
    );
    let agent = estate.start(&[]);
    agent.wait_metric(
        "datum_resources{class=\"critical\",state=\"converged\"} 2",
        Duration::from_secs(10),
    );
    estate.write("root/etc/app/sshd.conf", "PermitRootLogin yes\n");
    wait_content(&estate, "PermitRootLogin no\n", &agent);
    agent.wait_metric(
        "datum_policy_actions_total{class=\"critical\",action=\"reverted\"} 1",
        Duration::from_secs(20),
    );
    // The revert's picture (its own write sets off no other check): the
    // untouched file converged, the reverted one changed, two in all.
    events_handled(&estate, &agent);
    let text = agent.metrics();
    assert!(
        text.contains("datum_resources{class=\"critical\",state=\"converged\"} 1")
            && text.contains("datum_resources{class=\"critical\",state=\"changed\"} 1"),
        "{text}\nlog:\n{}",
        agent.log_text()
    );
}

/// `datum_last_check_timestamp_seconds` is the last complete check of the
/// class (a full pass or its interval check), what `DatumCheckStale` ages:
/// a watch's check of the files that changed does not move it, so a steady
/// stream of edits cannot hide interval checks that stopped.
#[test]
fn a_watch_check_does_not_move_the_last_complete_check_time() {
    let estate = Estate::new(NOT_DUE);
    let agent = estate.start(&[]);
    agent.wait_metric(
        "datum_checks_total{class=\"critical\",trigger=\"full\"} 1",
        Duration::from_secs(10),
    );
    let last = |text: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix("datum_last_check_timestamp_seconds{class=\"critical\"} "))
            .unwrap_or_else(|| panic!("no last check time in:\n{text}"))
            .to_owned()
    };
    let after_full = last(&agent.metrics());
    std::thread::sleep(Duration::from_millis(50));
    estate.write("root/etc/app/sshd.conf", "PermitRootLogin yes\n");
    agent.wait_metric(
        "datum_checks_total{class=\"critical\",trigger=\"watch\"} 1",
        Duration::from_secs(20),
    );
    let text = agent.metrics();
    assert!(text.contains(CRIT_DRIFT), "{text}");
    assert_eq!(
        last(&text),
        after_full,
        "a watch check moved the last complete check time\nlog:\n{}",
        agent.log_text()
    );
    // A complete check of the class (here the full pass SIGHUP's reload
    // runs) moves it.
    agent.signal("HUP");
    agent.wait_metric(
        "datum_checks_total{class=\"critical\",trigger=\"full\"} 2",
        Duration::from_secs(10),
    );
    assert_ne!(last(&agent.metrics()), after_full);
}

/// An estate whose `critical` class reverts and whose `normal` class is
/// watched too (for [`events_handled`]), with the agent running and its
/// first pass seen converged.
fn reverting_estate() -> (Estate, Agent) {
    let estate = Estate::new(NOT_DUE);
    let settings = std::fs::read_to_string(estate.path("repo/datum.yaml")).unwrap();
    estate.write(
        "repo/datum.yaml",
        &settings
            .replace(
                "critical: {interval: 100y, watch: true}",
                "critical: {interval: 100y, watch: true, policy: revert}",
            )
            .replace(
                "normal: {interval: 100y}",
                "normal: {interval: 100y, watch: true}",
            ),
    );
    let agent = estate.start(&[]);
    agent.wait_metric(
        "datum_resources{class=\"critical\",state=\"converged\"} 1",
        Duration::from_secs(10),
    );
    (estate, agent)
}

/// The watch checks of class `normal` in `/metrics`.
fn normal_watch_checks(text: &str) -> usize {
    text.lines()
        .find_map(|l| l.strip_prefix("datum_checks_total{class=\"normal\",trigger=\"watch\"} "))
        .unwrap_or_else(|| panic!("no watch checks of normal in:\n{text}"))
        .parse()
        .unwrap()
}

/// Returns once every file-change event the kernel queued before this call
/// has been handled by the agent, and each check it set off is counted and
/// in the log: edits the watched `normal` class's file and waits for the
/// watch check of it. One inotify queue carries every watch's events in
/// order, and the daemon checks the classes a window gathered in name
/// order (`critical` before `normal`), so a check of `critical` the
/// earlier events set off is counted and logged before it. What "nothing
/// else happened" is asserted against, instead of a sleep that assumes a
/// fast machine. Call it only once the events of earlier edits of `normal`
/// are handled (a check of `critical` the test waited for came after
/// them).
fn events_handled(estate: &Estate, agent: &Agent) {
    let before = normal_watch_checks(&agent.metrics());
    estate.write(
        "root/etc/app/motd",
        &format!("edited by hand, the {}th time\n", before + 1),
    );
    let line = format!(
        "datum_checks_total{{class=\"normal\",trigger=\"watch\"}} {}",
        before + 1
    );
    let seen = wait("the check of normal", Duration::from_secs(20), || {
        (normal_watch_checks(&agent.metrics()) > before).then_some(())
    });
    assert!(
        seen.is_some(),
        "no `{line}` within 20 s:\n{}\nlog:\n{}",
        agent.metrics(),
        agent.log_text()
    );
    // The log line of each check is written after it is counted.
    let counted = normal_watch_checks(&agent.metrics());
    let logged = wait("its log line", Duration::from_secs(20), || {
        let log = agent.log_text();
        (log.matches("check (watch) of class normal").count() >= counted).then_some(())
    });
    assert!(logged.is_some(), "{}", agent.log_text());
}

/// Waits until the watched file holds `text` again; its content then.
fn wait_content(estate: &Estate, text: &str, agent: &Agent) {
    let restored = wait("the revert", Duration::from_secs(20), || {
        let now = std::fs::read_to_string(estate.path("root/etc/app/sshd.conf")).ok()?;
        (now == text).then_some(())
    });
    let now = std::fs::read_to_string(estate.path("root/etc/app/sshd.conf")).unwrap();
    assert!(
        restored.is_some(),
        "not reverted to {text:?} (now {now:?}):\n{}",
        agent.log_text()
    );
}

#[test]
fn a_revert_with_a_broken_repository_on_disk_applies_the_last_good_catalogue() {
    let (estate, agent) = reverting_estate();
    // The repository on disk stops compiling; the reload is refused (and
    // counted), the last good catalogue keeps running.
    estate.write(
        "repo/base/broken.yaml",
        "datum: v1alpha1\ntype: File\nname: [\n",
    );
    agent.signal("HUP");
    agent.wait_metric("datum_repository_loaded 0", Duration::from_secs(10));
    agent.wait_metric(
        "datum_repository_reload_failures_total 1",
        Duration::from_secs(1),
    );
    // Drift in the revert class is reverted from that catalogue: the check
    // runs in this process on what it loaded, never compiling the broken
    // repository again.
    estate.write("root/etc/app/sshd.conf", "PermitRootLogin yes\n");
    wait_content(&estate, "PermitRootLogin no\n", &agent);
    agent.wait_metric(
        "datum_resources{class=\"critical\",state=\"changed\"} 1",
        Duration::from_secs(20),
    );
    let metrics = agent.metrics();
    // The refusal is what went wrong, and it stays counted; the check
    // itself ran, so no check error is claimed.
    assert!(
        metrics.contains("datum_repository_reload_failures_total 1"),
        "{metrics}"
    );
    assert!(metrics.contains("datum_check_errors_total 0"), "{metrics}");
    assert!(
        !agent.log_text().contains("check of class"),
        "{}",
        agent.log_text()
    );
}

#[test]
fn a_repository_edit_that_was_never_reloaded_does_not_go_live_through_a_revert() {
    let (estate, agent) = reverting_estate();
    // A valid edit of the declaration, with no SIGHUP.
    let files = std::fs::read_to_string(estate.path("repo/base/files.yaml")).unwrap();
    estate.write(
        "repo/base/files.yaml",
        &files.replace("PermitRootLogin no", "PermitRootLogin prohibit-password"),
    );
    estate.write("root/etc/app/sshd.conf", "PermitRootLogin yes\n");
    // Reverted to the declaration the agent loaded, not to the one on disk.
    wait_content(&estate, "PermitRootLogin no\n", &agent);
    // And stays so: whatever the revert's own write set off has run.
    events_handled(&estate, &agent);
    assert_eq!(
        std::fs::read_to_string(estate.path("root/etc/app/sshd.conf")).unwrap(),
        "PermitRootLogin no\n",
        "{}",
        agent.log_text()
    );
}

/// The same for a `source:` file edited with no reload: a revert refuses
/// its bytes (they are not those the loaded catalogue recorded) and leaves
/// the drift as it is, and the agent does not reload by itself. e283852
/// made it forget its compile and reload on such a refusal (through a
/// process-wide flag), which loaded the edit nobody had asked to load.
#[test]
fn a_source_edit_that_was_never_reloaded_does_not_go_live_through_a_revert() {
    let estate = Estate::unapplied(NOT_DUE);
    let settings = std::fs::read_to_string(estate.path("repo/datum.yaml")).unwrap();
    estate.write(
        "repo/datum.yaml",
        &settings.replace(
            "critical: {interval: 100y, watch: true}",
            "critical: {interval: 100y, watch: true, policy: revert}",
        ),
    );
    let files = std::fs::read_to_string(estate.path("repo/base/files.yaml")).unwrap();
    estate.write(
        "repo/base/files.yaml",
        &files.replace(
            "content: \"PermitRootLogin no\\n\"",
            "source: files/sshd.conf",
        ),
    );
    estate.write("repo/base/files/sshd.conf", "PermitRootLogin no\n");
    let out = estate.datum(&["apply"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "apply: {out:?}");
    let agent = estate.start(&[]);
    agent.wait_metric(
        "datum_resources{class=\"critical\",state=\"converged\"} 1",
        Duration::from_secs(10),
    );
    estate.write(
        "repo/base/files/sshd.conf",
        "PermitRootLogin prohibit-password\n",
    );
    estate.write("root/etc/app/sshd.conf", "PermitRootLogin yes\n");
    agent.wait_log("the refused revert", |l| {
        l.contains("of class critical") && l.contains("1 failed")
    });
    // Time for a reload and the pass after it; then drift again, which a
    // revert from a reloaded catalogue would answer with the edit.
    std::thread::sleep(Duration::from_secs(2));
    estate.write(
        "root/etc/app/sshd.conf",
        "PermitRootLogin without-password\n",
    );
    std::thread::sleep(Duration::from_secs(3));
    let log = agent.log_text();
    assert_eq!(
        std::fs::read_to_string(estate.path("root/etc/app/sshd.conf")).unwrap(),
        "PermitRootLogin without-password\n",
        "{log}"
    );
    assert!(!log.contains("reloading the repository"), "{log}");
}

#[test]
fn once_exits_like_check() {
    let estate = Estate::new(NOT_DUE);
    let out = estate.datum(&["agent", "--once"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    estate.write("root/etc/app/motd", "drifted\n");
    let out = estate.datum(&["agent", "--once"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("1 open finding(s), exit 2"), "{stderr}");
    // A quarantine is shown by check (exit 2) with or without drift under
    // it, and so by the agent.
    let quarantine = estate
        .datum(&["quarantine", "File/motd", "--reason", "looking"])
        .output()
        .unwrap();
    assert_eq!(quarantine.status.code(), Some(0), "{quarantine:?}");
    for content in ["drifted\n", "hello\n"] {
        estate.write("root/etc/app/motd", content);
        let check = estate.datum(&["check"]).output().unwrap();
        assert_eq!(check.status.code(), Some(2), "{check:?}");
        let out = estate.datum(&["agent", "--once"]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{content:?}: {out:?}");
    }
    let release = estate.datum(&["release", "File/motd"]).output().unwrap();
    assert_eq!(release.status.code(), Some(0), "{release:?}");
    let out = estate.datum(&["agent", "--once"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // A broken repository: no check, exit 1.
    estate.write(
        "repo/base/broken.yaml",
        "datum: v1alpha1\ntype: File\nname: [\n",
    );
    let out = estate.datum(&["agent", "--once"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}

#[test]
fn a_sensitive_resource_that_cannot_be_observed_is_not_named_in_the_log() {
    let estate = Estate::unapplied(NOT_DUE);
    // A revert class (checked through reconcile) and a report class, each
    // with a sensitive File whose name and path say what it protects.
    estate.write(
        "repo/base/secrets.yaml",
        "datum: v1alpha1\ntype: File\nname: vault-unseal-key\nclass: critical\nsensitive: true\ndesired:\n  path: /etc/app/vault-unseal.key\n  content: \"k\\n\"\n\
         ---\ndatum: v1alpha1\ntype: File\nname: payroll-db-password\nsensitive: true\ndesired:\n  path: /etc/app/payroll-db.pass\n  content: \"p\\n\"\n",
    );
    let datum_yaml = std::fs::read_to_string(estate.path("repo/datum.yaml")).unwrap();
    estate.write(
        "repo/datum.yaml",
        &datum_yaml.replace("watch: true}", "watch: true, policy: revert}"),
    );
    let out = estate.datum(&["apply"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "apply: {out:?}");
    // /etc/app becomes a link: nothing in it can be observed.
    std::fs::rename(
        estate.path("root/etc/app"),
        estate.path("root/etc/app.real"),
    )
    .unwrap();
    std::os::unix::fs::symlink("app.real", estate.path("root/etc/app")).unwrap();
    let out = estate.datum(&["agent", "--once"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    for secret in ["vault-unseal", "payroll-db"] {
        assert!(!stderr.contains(secret), "{secret} in the log:\n{stderr}");
    }
    // What is not sensitive is still named, and the sensitive ones are
    // said to exist.
    assert!(stderr.contains("File[sshd]"), "{stderr}");
    assert!(
        stderr.contains("a sensitive resource could not be checked"),
        "{stderr}"
    );
}

#[test]
fn a_first_agent_pass_on_a_bare_root_remembers_its_compile() {
    let estate = Estate::unapplied(NOT_DUE);
    // Older than the racy window: a snapshot may be kept.
    std::thread::sleep(Duration::from_millis(
        (datum_catalog::hashes::RACY_WINDOW_NS / 1_000_000) as u64 + 200,
    ));
    // The agent makes the state store; its compile is kept beside it
    // (before, only beside a store that existed before the compile, so the
    // agent's next start or reload compiled again).
    let out = estate.datum(&["agent", "--once"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let snapshot = estate.path("root/var/lib/datum/state.catalogue");
    assert!(snapshot.exists(), "{out:?}");
    // The check after it reads the snapshot.
    let out = estate
        .datum(&["check", "--output", "json"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json["catalogue"], "snapshot", "{json:#}");
}

#[test]
fn a_live_configuration_its_group_validator_refuses_is_in_the_metrics() {
    if datum_host::command::which("nginx").is_none() || !rustix::process::geteuid().is_root() {
        assert!(
            std::env::var_os("DATUM_VALIDATORS_REQUIRED").is_none(),
            "nginx and root are required here"
        );
        println!("skipped: needs nginx and root (the validator sandbox)");
        return;
    }
    let estate = Estate::new(NOT_DUE);
    estate.write(
        "repo/base/nginx.yaml",
        "datum: v1alpha1\ntype: File\nname: nginx-conf\ndesired:\n  path: /etc/nginx/nginx.conf\n  content: \"events {}\\nhttp { server_tokens off; }\\n\"\n  validate: nginx\n",
    );
    std::fs::create_dir_all(estate.path("root/etc/nginx")).unwrap();
    let out = estate.datum(&["apply"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = estate.datum(&["agent", "--once"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // Broken by hand: nginx would refuse it at its next restart.
    estate.write(
        "root/etc/nginx/nginx.conf",
        "events {}\nhttp { datum_no_such_directive on; }\n",
    );
    let out = estate.datum(&["agent", "--once"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let agent = estate.start(&[]);
    agent.wait_metric(
        "datum_drift_findings{class=\"normal\",kind=\"invalid_live_config\"} 1",
        Duration::from_secs(15),
    );
    assert!(
        agent
            .metrics()
            .contains("datum_drift_findings{class=\"normal\",kind=\"activation_owed\"} 0")
    );
}

/// A repository big enough that a pass takes a while, so SIGTERM lands
/// inside one.
fn big_estate(files: usize) -> Estate {
    let estate = Estate::new("1s");
    let mut yaml = String::new();
    for i in 0..files {
        yaml.push_str(&format!(
            "---\ndatum: v1alpha1\ntype: File\nname: f{i}\ndesired:\n  path: /etc/many/f{i}.conf\n  content: \"value {i}\\n\"\n"
        ));
    }
    estate.write("repo/base/many.yaml", &yaml);
    std::fs::create_dir_all(estate.path("root/etc/many")).unwrap();
    let out = estate.datum(&["apply"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "apply: {out:?}");
    estate
}

#[test]
fn sigterm_during_a_pass_exits_0_and_the_store_survives() {
    let estate = big_estate(3000);
    estate.write("root/etc/app/motd", "drifted\n");
    let state = estate.path("root/var/lib/datum/state.db");
    // History from an earlier, complete check.
    let out = estate.datum(&["agent", "--once"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let mut early = false;
    for round in 0..3 {
        let mut agent = estate.start(&[]);
        // The first full pass starts right after the "started" line.
        agent.wait_log("start", |l| l.contains("started:"));
        std::thread::sleep(Duration::from_millis(5 * round));
        agent.signal("TERM");
        assert_eq!(
            agent.wait_exit(Duration::from_secs(20)),
            Some(0),
            "{}",
            agent.log_text()
        );
        assert!(agent.log_text().contains("stopped"), "{}", agent.log_text());
        println!("round {round}:\n{}", agent.log_text());
        early |= agent.log_text().contains("stopped early");
        // The state store opens: a killed agent never damages it.
        drop(datum_store::Store::open(&state).unwrap());
    }
    assert!(early, "no SIGTERM landed inside a pass");
    // The next start resumes: it checks, and the finding's history goes on
    // from the earlier runs (first seen before this start).
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    std::thread::sleep(Duration::from_millis(1100));
    let mut agent = estate.start(&[]);
    agent.wait_metric(NORMAL_DRIFT, Duration::from_secs(20));
    agent.signal("INT");
    assert_eq!(agent.wait_exit(Duration::from_secs(20)), Some(0));
    let store = datum_store::Store::open(&state).unwrap();
    let findings = store.current_findings("agent-test").unwrap();
    let motd = findings
        .iter()
        .find(|f| f.signature.subject == "File[motd]")
        .unwrap_or_else(|| panic!("no motd finding in {findings:?}"));
    assert!(motd.first_seen <= before, "{motd:?} vs {before}");
    assert!(motd.passes >= 2, "{motd:?}");
}

/// Holds the root lock as another Datum pass would (an apply), until
/// dropped.
fn hold_root_lock(estate: &Estate) -> std::fs::File {
    let lock = std::fs::File::open(estate.path("root/var/lib/datum/lock")).unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
    lock
}

/// `/readyz` answered `200 ok` as soon as the endpoint was up, while the
/// first check still waited for an apply's root lock: a deploy script or
/// readiness probe waiting for the agent took it for one that had checked
/// the host, its metrics all zero. It answers `503` (`starting: ...`,
/// naming the classes not checked yet) until every class has had a
/// complete check, then `200 ok`; `/healthz` says `ok` throughout.
#[test]
fn readyz_waits_for_the_first_check_of_every_class() {
    let estate = Estate::new(NOT_DUE);
    let lock = hold_root_lock(&estate);
    let agent = estate.start(&[]);
    agent.wait_log("the wait for the lock", |l| {
        l.contains("waiting for the root lock")
    });
    let (code, body) = http_get(agent.addr(), "/readyz");
    assert_eq!(code, 503, "{body}");
    assert_eq!(
        body,
        "starting: the first check of the host has not completed (not checked yet: critical, normal); until it has, the metrics say nothing about drift\n"
    );
    assert_eq!(http_get(agent.addr(), "/healthz"), (200, "ok\n".to_owned()));
    drop(lock);
    let ready = wait("ready", Duration::from_secs(20), || {
        (http_get(agent.addr(), "/readyz").0 == 200).then_some(())
    });
    assert!(ready.is_some(), "{}", agent.log_text());
    assert_eq!(http_get(agent.addr(), "/readyz"), (200, "ok\n".to_owned()));
    assert!(
        agent
            .metrics()
            .contains("datum_checks_total{class=\"normal\",trigger=\"full\"} 1"),
        "{}",
        agent.metrics()
    );
}

#[test]
fn sigterm_while_another_pass_holds_the_lock_stops_at_once() {
    let estate = Estate::new(NOT_DUE);
    // An apply holds the root: the first pass waits for it.
    let lock = hold_root_lock(&estate);
    let mut agent = estate.start(&[]);
    // Signalled once it waits (before, a stop makes it never wait).
    agent.wait_log("the wait for the lock", |l| {
        l.contains("waiting for the root lock")
    });
    // systemd's stop (TimeoutStopSec=90s) must not wait out --lock-timeout
    // (60 s) and the check after it.
    let t0 = Instant::now();
    agent.signal("TERM");
    assert_eq!(
        agent.wait_exit(Duration::from_secs(5)),
        Some(0),
        "{}",
        agent.log_text()
    );
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    // The journal said what it was waiting for.
    let log = agent.log_text();
    assert!(log.contains("waiting for the root lock"), "{log}");
    drop(lock);
    // `--once` stopped while waiting is not a clean result either.
    let lock = hold_root_lock(&estate);
    let mut once = estate
        .datum(&["agent", "--once"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Signalled once it waits: before its handlers are installed, SIGTERM
    // would kill it (no exit code), and a stop before the wait never waits.
    let (said, heard) = std::sync::mpsc::channel();
    let stderr = once.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = said.send(line);
        }
    });
    let waiting = wait(
        "--once to wait for the lock",
        Duration::from_secs(20),
        || {
            heard
                .try_iter()
                .find(|l| l.contains("waiting for the root lock"))
        },
    );
    assert!(waiting.is_some(), "--once never said it waits for the lock");
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(once.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let code = wait("--once to stop", Duration::from_secs(5), || {
        once.try_wait().unwrap()
    });
    let _ = once.kill();
    assert_eq!(code.map(|s| s.code()), Some(Some(1)));
    drop(lock);
}

#[test]
fn sighup_with_a_broken_repository_keeps_the_old_catalogue() {
    let estate = Estate::new(NOT_DUE);
    let agent = estate.start(&[]);
    agent.wait_metric("datum_repository_loaded 1", Duration::from_secs(10));
    agent.wait_metric(
        "datum_resources{class=\"critical\",state=\"converged\"} 1",
        Duration::from_secs(10),
    );
    estate.write(
        "repo/base/broken.yaml",
        "datum: v1alpha1\ntype: File\nname: [\n",
    );
    agent.signal("HUP");
    agent.wait_metric("datum_repository_loaded 0", Duration::from_secs(10));
    agent.wait_metric(
        "datum_repository_reload_failures_total 1",
        Duration::from_secs(1),
    );
    agent.wait_log("the refusal", |l| l.contains("reload refused"));
    // The old catalogue keeps running: a watched edit is still detected.
    estate.write("root/etc/app/sshd.conf", "PermitRootLogin yes\n");
    agent.wait_metric(CRIT_DRIFT, Duration::from_secs(2));
    // Fixed: the reload is taken and the refusal cleared.
    std::fs::remove_file(estate.path("repo/base/broken.yaml")).unwrap();
    agent.signal("HUP");
    agent.wait_metric("datum_repository_loaded 1", Duration::from_secs(10));
    agent.wait_log("the reload", |l| l.contains("reloaded:"));
}

#[test]
fn promtool_checks_and_tests_the_alert_rules() {
    if !have("promtool", "prometheus") {
        return;
    }
    let dir = deploy_dir().join("prometheus");
    let check = Command::new("promtool")
        .args(["check", "rules", "datum.rules.yml"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
    assert!(String::from_utf8_lossy(&check.stdout).contains("SUCCESS: 16 rules found"));
    let test = Command::new("promtool")
        .args(["test", "rules", "datum.rules.test.yml"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(test.status.success(), "{test:?}");
}

#[test]
fn log_lines_are_json_when_asked_and_the_level_filters_them() {
    let estate = Estate::new(NOT_DUE);
    let json = estate
        .datum(&["--log-format", "json", "agent", "--once"])
        .env_remove("JOURNAL_STREAM")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&json.stderr);
    let events: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        events.iter().any(|e| e["level"] == "INFO"
            && e["target"] == "datum::agent"
            && e["message"]
                .as_str()
                .is_some_and(|m| m.contains("check (full)"))),
        "{stderr}"
    );
    assert!(
        events
            .iter()
            .all(|e| e["timestamp"].as_str().is_some_and(|t| t.ends_with('Z'))),
        "{stderr}"
    );
    // --log-level warn: the info lines are gone.
    let quiet = estate
        .datum(&["--log-level", "warn", "agent", "--once"])
        .env_remove("JOURNAL_STREAM")
        .output()
        .unwrap();
    let quiet_err = String::from_utf8_lossy(&quiet.stderr);
    assert!(!quiet_err.contains("check (full)"), "{quiet_err}");
    assert_eq!(quiet.status.code(), json.status.code());
}

/// The metrics table of docs/agent.md: (name, type) per row.
fn documented_metrics() -> Vec<(String, String)> {
    let doc = std::fs::read_to_string(deploy_dir().join("../docs/agent.md")).unwrap();
    doc.lines()
        .filter_map(|l| {
            let mut cells = l.strip_prefix("| `datum_")?.split('|');
            let name = format!("datum_{}", cells.next()?.trim().trim_end_matches('`'));
            Some((name, cells.next()?.trim().to_owned()))
        })
        .collect()
}

#[test]
fn a_scrape_passes_promtool_and_has_every_documented_counter_from_the_start() {
    let estate = Estate::new(NOT_DUE);
    let agent = estate.start(&[]);
    agent.wait_metric("datum_repository_loaded 1", Duration::from_secs(10));
    // What curl, promtool and most scrapers get: the classic text format.
    let text = agent.metrics();
    assert!(!text.contains("# EOF"), "{text}");
    let documented = documented_metrics();
    assert!(documented.len() > 15, "{documented:?}");
    // Before anything happened (or whatever the first check did): every
    // counter has its series.
    // (A pull's failure reasons are counted from when the agent pulls.)
    for (name, _) in documented
        .iter()
        .filter(|(n, kind)| kind == "counter" && n != "datum_pull_failures_total")
    {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{"))),
            "counter {name} has no series at start-up:\n{text}"
        );
    }
    for series in [
        "datum_validation_failures_total{validator=\"nginx\"} 0",
        "datum_watch_errors_total{reason=\"limit\"} 0",
        "datum_fallback_full_passes_total{reason=\"overflow\"} 0",
        "datum_check_errors_total 0",
    ] {
        assert!(text.contains(series), "missing `{series}`:\n{text}");
    }
    assert!(
        text.contains("datum_checks_total{class=\"normal\",trigger=\"watch\"}"),
        "{text}"
    );
    // Once a check completed, every documented family is there.
    agent.wait_metric(
        "datum_last_check_timestamp_seconds{class=\"normal\"}",
        Duration::from_secs(20),
    );
    let text = agent.metrics();
    // (What `datum pull` deployed has a series only once a pull deployed;
    // its failure reasons and the last pull's time once the agent pulls: a
    // 0 here would say this agent last pulled in 1970.)
    assert!(
        !text.contains("datum_pull_last_success"),
        "an agent that does not pull has a last pull time:\n{text}"
    );
    let conditional = |n: &str| {
        n.starts_with("datum_repository_revision")
            || n == "datum_pull_last_success_timestamp_seconds"
            || n == "datum_pull_failures_total"
    };
    for (name, _) in documented.iter().filter(|(n, _)| !conditional(n)) {
        assert!(
            text.contains(&format!("# TYPE {name} ")),
            "{name} is documented but not exported:\n{text}"
        );
    }
    if !have("promtool", "prometheus") {
        return;
    }
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {out:?}\n{}\n{text}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A free loopback port (a race with other processes is possible but
/// unlikely, and fails loudly).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn encode_query(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The value of an instant query's first sample, if any.
fn query(prom: SocketAddr, q: &str) -> Option<f64> {
    let (status, body) = http_get(prom, &format!("/api/v1/query?query={}", encode_query(q)));
    if status != 200 {
        return None;
    }
    let json: serde_json::Value = serde_json::from_str(&body).ok()?;
    json["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_real_prometheus_scrapes_the_agent_and_sees_drift() {
    if !have("prometheus", "prometheus") {
        return;
    }
    let estate = Estate::new(NOT_DUE);
    let agent = estate.start(&[]);
    agent.wait_metric(
        "datum_resources{class=\"critical\",state=\"converged\"} 1",
        Duration::from_secs(10),
    );
    let prom_dir = tempfile::tempdir().unwrap();
    let rules = deploy_dir().join("prometheus/datum.rules.yml");
    let config = prom_dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: datum-agent\n    static_configs:\n      - targets: ['{}']\n",
            rules.display(),
            agent.addr()
        ),
    )
    .unwrap();
    let port = free_port();
    let prom_addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let log = std::fs::File::create(prom_dir.path().join("prometheus.log")).unwrap();
    let _prom = Killed(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                prom_dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={prom_addr}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let prom_log =
        || std::fs::read_to_string(prom_dir.path().join("prometheus.log")).unwrap_or_default();
    let up = wait(
        "prometheus scrapes the agent",
        Duration::from_secs(60),
        || {
            TcpStream::connect(prom_addr).ok()?;
            query(prom_addr, "up{job=\"datum-agent\"}").filter(|v| *v == 1.0)
        },
    );
    assert!(up.is_some(), "no successful scrape:\n{}", prom_log());
    let q = "datum_drift_findings{job=\"datum-agent\",class=\"critical\",kind=\"changed_outside\"}";
    let before = wait("the drift series", Duration::from_secs(30), || {
        query(prom_addr, q)
    });
    assert_eq!(before, Some(0.0), "{}", prom_log());
    estate.write("root/etc/app/sshd.conf", "PermitRootLogin yes\n");
    let after = wait("the drift to be scraped", Duration::from_secs(30), || {
        query(prom_addr, q).filter(|v| *v == 1.0)
    });
    assert_eq!(after, Some(1.0), "{}", prom_log());
    // The rules loaded: Prometheus evaluates them against the agent.
    let stale = query(prom_addr, "count(ALERTS{alertname=\"DatumCheckStale\"})");
    assert_eq!(stale, None, "a fresh agent is not stale");
}

/// The agent's resident memory, from /proc.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

#[test]
fn a_100_mb_header_is_refused_early_and_costs_the_agent_no_memory() {
    let estate = Estate::new("60s");
    let agent = estate.start(&[]);
    agent.wait_metric(
        NORMAL_DRIFT.replace(" 1", " 0").as_str(),
        Duration::from_secs(20),
    );
    let before = rss_kib(agent.child.id());
    let mut refused = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(agent.addr()).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Huge: ")
            .unwrap();
        let chunk = vec![b'a'; 64 * 1024];
        let mut sent: u64 = 0;
        while sent < 100 * 1024 * 1024 {
            match s.write(&chunk) {
                Ok(n) => sent += n as u64,
                // The agent answered and closed: refused.
                Err(_) => break,
            }
        }
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        refused.push((sent, String::from_utf8_lossy(&answer).into_owned()));
    }
    let after = rss_kib(agent.child.id());
    for (sent, answer) in &refused {
        // Early: the connection is shut within the first few MiB (the
        // socket buffers hold some), never after 100 MB were read.
        assert!(
            *sent < 16 * 1024 * 1024,
            "sent {sent} bytes before the agent refused"
        );
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
            "{answer:?}"
        );
    }
    assert!(
        refused.iter().any(|(_, a)| a.starts_with("HTTP/1.1 431")),
        "no 431 seen: {refused:?}"
    );
    assert!(
        after < before + 4 * 1024,
        "the agent grew from {before} KiB to {after} KiB"
    );
    // And it still answers.
    assert_eq!(http_get(agent.addr(), "/healthz").0, 200);
    println!(
        "RSS {before} KiB -> {after} KiB; bytes sent before refusal: {:?}",
        refused.iter().map(|r| r.0).collect::<Vec<_>>()
    );
}

#[test]
fn the_systemd_unit_verifies() {
    if !have("systemd-analyze", "systemd") {
        return;
    }
    let unit = std::fs::read_to_string(deploy_dir().join("systemd/datum-agent.service")).unwrap();
    for option in [
        "ProtectSystem=strict",
        "ReadWritePaths=/etc /var/lib/datum",
        "ProtectHome=true",
        "PrivateTmp=true",
        "NoNewPrivileges=true",
        "SystemCallFilter=@system-service @mount",
        "RestrictNamespaces=mnt net pid ipc uts",
        "MemoryMax=",
        "ExecReload=/bin/kill -HUP $MAINPID",
    ] {
        assert!(unit.contains(option), "the unit lost {option}");
    }
    // `verify` checks that ExecStart's program exists: point it at the
    // binary under test.
    assert!(unit.contains("ExecStart=/usr/local/bin/datum agent"));
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("datum-agent.service");
    std::fs::write(&copy, unit.replace("/usr/local/bin/datum", DATUM)).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("datum-agent.service:"),
        "warnings: {stderr}"
    );
}

/// Removes what a test bed test wrote under the container's /etc, pass or
/// fail.
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_dir_all(p).or_else(|_| std::fs::remove_file(p));
        }
    }
}

/// `/metrics` inside the test bed, or `None` while the agent is not up.
fn metrics_inside(port: u16) -> Option<String> {
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().ok()?;
    TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    Some(http_get(addr, "/metrics").1)
}

// The shipped unit, as systemd runs it: the sandbox must still let the agent
// manage /etc (revert a content edit and an owner change through `datum
// check`, saving a backup under /var/lib/datum), serve metrics, reload on
// `systemctl reload` and stop cleanly on `systemctl stop`.
datum_testkit::testbed_test!(the_hardened_unit_manages_etc_under_real_systemd, {
    use datum_testkit::testbed::within::{self, TestUnit};
    use std::os::unix::fs::MetadataExt;

    let _lock = within::lock("datum-agent-unit");
    let _cleanup = Cleanup(vec![
        PathBuf::from("/etc/datum/repository"),
        PathBuf::from("/etc/datum/host.yaml"),
        PathBuf::from("/etc/datum-agent-test"),
        PathBuf::from("/var/lib/datum"),
    ]);
    let w = |p: &str, text: &str| {
        std::fs::create_dir_all(Path::new(p).parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    w(
        "/etc/datum/repository/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n\
         classes:\n  critical: {interval: 60s, watch: true, policy: revert}\n",
    );
    w(
        "/etc/datum/repository/base/app.yaml",
        "datum: v1alpha1\ntype: File\nname: agent-app\nclass: critical\ndesired:\n  \
         path: /etc/datum-agent-test/app.conf\n  owner: root\n  group: root\n  mode: \"0644\"\n  \
         content: \"declared\\n\"\n",
    );
    w("/etc/datum/host.yaml", "name: testbed-agent\nlabels: {}\n");
    std::fs::create_dir_all("/etc/datum-agent-test").unwrap();
    let apply = Command::new(DATUM)
        .args(["--repo", "/etc/datum/repository", "--root", "/", "apply"])
        .output()
        .unwrap();
    assert_eq!(apply.status.code(), Some(2), "{apply:?}");

    // The binary goes where the shipped unit runs it from: pointing the unit
    // into the checkout would break when the checkout sits under /tmp or
    // /home (PrivateTmp and ProtectHome hide them from the unit).
    let installed = Path::new("/usr/local/bin/datum");
    std::fs::copy(DATUM, installed).unwrap();
    let _binary = Cleanup(vec![installed.to_path_buf()]);
    // The sources are not inside the test bed (only target/ is): the unit
    // is compiled in, unchanged.
    let unit = include_str!("../../../deploy/systemd/datum-agent.service");
    let unit = TestUnit::install("datum-agent.service", unit);
    within::systemctl_ok(&["start", unit.name()]);
    let up = wait("the agent's metrics", Duration::from_secs(20), || {
        metrics_inside(9477)
            .filter(|m| m.contains("datum_resources{class=\"critical\",state=\"converged\"} 1"))
    });
    assert!(
        up.is_some(),
        "agent not up: {}",
        within::systemctl(&["status", "--no-pager", unit.name()])
            .stdout
            .escape_ascii()
    );

    // Drift by hand: new content and a new owner. The agent reverts both.
    let app = Path::new("/etc/datum-agent-test/app.conf");
    std::fs::write(app, "tampered\n").unwrap();
    std::os::unix::fs::chown(app, Some(65534), Some(65534)).unwrap();
    let reverted = wait("the revert", Duration::from_secs(10), || {
        let meta = std::fs::metadata(app).ok()?;
        let text = std::fs::read_to_string(app).ok()?;
        (text == "declared\n" && meta.uid() == 0 && meta.gid() == 0).then_some(())
    });
    let journal = || {
        Command::new("journalctl")
            .args(["--no-pager", "-u", "datum-agent.service", "-n", "40"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    assert!(
        reverted.is_some(),
        "not reverted under the sandbox:\n{}",
        journal()
    );
    // The evidence was saved under /var/lib/datum (writable in the sandbox).
    assert!(Path::new("/var/lib/datum/backups").is_dir());

    // Reload and stop the systemd way.
    within::systemctl_ok(&["reload", unit.name()]);
    let reloaded = wait("the reload", Duration::from_secs(10), || {
        journal().contains("reloaded:").then_some(())
    });
    assert!(reloaded.is_some(), "{}", journal());
    within::systemctl_ok(&["stop", unit.name()]);
    assert_eq!(within::property(unit.name(), "Result"), "success");
    assert_eq!(within::property(unit.name(), "ExecMainStatus"), "0");
});

/// `datum apply --rebuild-state` moves a damaged state store aside and
/// makes a new one, while the agent runs. The agent opened its store once
/// and kept it, so it went on recording its checks (and its quarantines,
/// its reports' outbox) in the file moved aside, which nothing else reads,
/// until it was restarted: `datum schedule` never saw another check. The
/// agent now opens the store again when the file at its path is another
/// one (checked before each check, under the root lock, and at a reload).
#[test]
fn after_an_apply_rebuilt_the_state_store_the_agent_records_into_the_new_one() {
    let estate = Estate::new(NOT_DUE);
    let agent = estate.start(&[]);
    let full_checks =
        |n: u32| format!("datum_checks_total{{class=\"normal\",trigger=\"full\"}} {n}");
    agent.wait_metric(&full_checks(1), Duration::from_secs(20));
    // The store is damaged (its header overwritten); an apply moves it aside.
    let db = estate.path("root/var/lib/datum/state.db");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&db)
        .unwrap()
        .write_all(b"not a database!!")
        .unwrap();
    let out = estate
        .datum(&["apply", "--rebuild-state"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("moved it aside"), "{out:?}");
    // A reload runs a full check; it is recorded where `datum schedule` reads.
    agent.signal("HUP");
    agent.wait_metric(&full_checks(2), Duration::from_secs(20));
    let out = estate
        .datum(&["schedule", "--output", "json"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let normal = json["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["class"] == "normal")
        .cloned()
        .unwrap();
    assert_eq!(
        normal["samples"],
        1,
        "the agent's check after the rebuild is not in the new store: {normal:#}\nlog:\n{}",
        agent.log_text()
    );
}

/// A check the state store would not take (here another connection holding
/// its write lock past the store's busy timeout; a full file system alike)
/// was only logged as a warning: no metric moved, `/healthz` said `ok`, and
/// the check's history and fleet report were lost without anything a
/// monitor could see. It is now counted in `datum_checks_unrecorded_total`
/// and `/healthz` says `degraded: ...` (still 200: a restart frees neither a
/// lock nor a disk) until a check is recorded again; `/readyz` answers 503
/// meanwhile and `datum_agent_degraded` is 1.
#[test]
fn a_check_the_state_store_cannot_record_is_counted_and_said_by_healthz() {
    if !have("sqlite3", "sqlite3") {
        return;
    }
    let estate = Estate::new(NOT_DUE);
    let agent = estate.start(&[]);
    agent.wait_metric(
        "datum_checks_total{class=\"critical\",trigger=\"full\"} 1",
        Duration::from_secs(20),
    );
    assert!(agent.metrics().contains("datum_checks_unrecorded_total 0"));
    assert_eq!(http_get(agent.addr(), "/healthz"), (200, "ok\n".to_owned()));
    assert_eq!(http_get(agent.addr(), "/readyz"), (200, "ok\n".to_owned()));
    let degraded = |agent: &Agent| {
        agent
            .metrics()
            .lines()
            .find_map(|l| l.strip_prefix("datum_agent_degraded ").map(str::to_owned))
    };
    assert_eq!(degraded(&agent).as_deref(), Some("0"));
    let mut holder = Command::new("sqlite3")
        .arg(estate.path("root/var/lib/datum/state.db"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = holder.stdin.take().unwrap();
    writeln!(input, "BEGIN IMMEDIATE;\nSELECT 'locked';").unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "locked");
    estate.write("root/etc/app/sshd.conf", "PermitRootLogin yes\n");
    agent.wait_metric("datum_checks_unrecorded_total 1", Duration::from_secs(40));
    assert!(
        agent
            .log_text()
            .contains("could not record the check in the state store"),
        "{}",
        agent.log_text()
    );
    let (code, body) = http_get(agent.addr(), "/healthz");
    assert_eq!(code, 200, "{body}");
    assert!(
        body.starts_with(
            "degraded: the last check could not be recorded in the state store (1 unrecorded"
        ),
        "{body}"
    );
    // Alive, not ready: a probe of readiness sees it, and so does a scrape.
    assert_eq!(http_get(agent.addr(), "/readyz"), (503, body));
    assert_eq!(degraded(&agent).as_deref(), Some("1"));
    // Released: the next check is recorded, and the agent is healthy again.
    writeln!(input, "COMMIT;").unwrap();
    drop(input);
    holder.wait().unwrap();
    estate.write("root/etc/app/sshd.conf", "PermitRootLogin no\n");
    let healthy = wait("healthy", Duration::from_secs(20), || {
        (http_get(agent.addr(), "/healthz").1 == "ok\n").then_some(())
    });
    assert!(healthy.is_some(), "{}", agent.log_text());
    assert!(agent.metrics().contains("datum_checks_unrecorded_total 1"));
    assert_eq!(http_get(agent.addr(), "/readyz"), (200, "ok\n".to_owned()));
    assert_eq!(degraded(&agent).as_deref(), Some("0"));
}

/// A revert whose flap record the state store then refused (here its write
/// lock held past the busy timeout) was made all the same and its record
/// lost: the agent reverted the file, then failed the check, and a file
/// rewritten again and again while the store refuses was never taken for
/// flapping. The record is written first now: refused, nothing is
/// reverted (counted unrecorded); once the store takes writes, the next
/// check reverts it and counts the revert.
#[test]
fn a_revert_the_state_store_cannot_log_is_not_made() {
    if !have("sqlite3", "sqlite3") {
        return;
    }
    let (estate, agent) = reverting_estate();
    let db = estate.path("root/var/lib/datum/state.db");
    let mut holder = Command::new("sqlite3")
        .arg(&db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = holder.stdin.take().unwrap();
    writeln!(input, "BEGIN IMMEDIATE;\nSELECT 'locked';").unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "locked");
    estate.write("root/etc/app/sshd.conf", "PermitRootLogin yes\n");
    agent.wait_metric("datum_checks_unrecorded_total 1", Duration::from_secs(90));
    let now = std::fs::read_to_string(estate.path("root/etc/app/sshd.conf")).unwrap();
    assert_eq!(
        now,
        "PermitRootLogin yes\n",
        "reverted though its flap record was refused:\n{}",
        agent.log_text()
    );
    assert!(
        agent.log_text().contains("nothing was reverted"),
        "{}",
        agent.log_text()
    );
    writeln!(input, "COMMIT;").unwrap();
    drop(input);
    holder.wait().unwrap();
    // The next check (the file written again) reverts it, counted once.
    estate.write("root/etc/app/sshd.conf", "PermitRootLogin yes\n");
    let restored = wait("the revert", Duration::from_secs(20), || {
        let now = std::fs::read_to_string(estate.path("root/etc/app/sshd.conf")).ok()?;
        (now == "PermitRootLogin no\n").then_some(())
    });
    assert!(restored.is_some(), "not reverted:\n{}", agent.log_text());
    let logged = Command::new("sqlite3")
        .arg(&db)
        .arg("SELECT count(*) FROM reverts")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&logged.stdout).trim(), "1");
}

/// A state store the agent cannot open (here damaged; a full file system,
/// which the store refuses to open on, alike) left every check unrecorded,
/// said only by a warning at each attempt: each check now counts in
/// `datum_checks_unrecorded_total`, and `/healthz` says `degraded`.
#[test]
fn checks_without_a_usable_state_store_are_counted_as_unrecorded() {
    let estate = Estate::new(NOT_DUE);
    std::fs::OpenOptions::new()
        .write(true)
        .open(estate.path("root/var/lib/datum/state.db"))
        .unwrap()
        .write_all(b"not a database!!")
        .unwrap();
    let agent = estate.start(&[]);
    agent.wait_metric("datum_checks_unrecorded_total 1", Duration::from_secs(20));
    assert!(
        agent.log_text().contains("state store unavailable"),
        "{}",
        agent.log_text()
    );
    let (code, body) = http_get(agent.addr(), "/healthz");
    assert_eq!(code, 200, "{body}");
    assert!(body.starts_with("degraded: "), "{body}");
}

/// The agent's reverts are apply passes: what shadow-utils say although
/// they succeed (525b3ea's warnings of the pass) was dropped without a line
/// in the log. Now each is logged, as `datum reconcile` shows it; one of a
/// sensitive resource without its name or words.
#[test]
fn what_a_revert_warns_of_is_logged_and_a_sensitive_ones_words_are_not() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: shadow-utils need root (CAP_SYS_CHROOT) for --root");
        return;
    }
    let estate = Estate::unapplied(NOT_DUE);
    estate.write(
        "repo/base/users.yaml",
        "datum: v1alpha1\ntype: User\nname: w1\nclass: critical\ndesired: {uid: 1500, shell: /bin/nonexistent}\n\
         ---\ndatum: v1alpha1\ntype: User\nname: vault-operator\nclass: critical\nsensitive: true\ndesired: {uid: 1501, shell: /bin/nonexistent}\n",
    );
    let datum_yaml = std::fs::read_to_string(estate.path("repo/datum.yaml")).unwrap();
    estate.write(
        "repo/datum.yaml",
        &datum_yaml.replace("watch: true}", "watch: true, policy: revert}"),
    );
    estate.write(
        "root/etc/passwd",
        "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    );
    estate.write(
        "root/etc/group",
        "root:x:0:\nusers:x:100:\nnogroup:x:65534:\n",
    );
    estate.write(
        "root/etc/shadow",
        "root:*:20000:0:99999:7:::\nnobody:*:20000:0:99999:7:::\n",
    );
    estate.write("root/etc/gshadow", "root:*::\nusers:*::\nnogroup:*::\n");
    let out = estate.datum(&["apply"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "apply: {out:?}");
    // Both accounts' shells changed by hand: the revert's usermod warns.
    let passwd = std::fs::read_to_string(estate.path("root/etc/passwd")).unwrap();
    estate.write(
        "root/etc/passwd",
        &passwd.replace(":/bin/nonexistent\n", ":/bin/sh\n"),
    );
    let out = estate.datum(&["agent", "--once"]).output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    let passwd = std::fs::read_to_string(estate.path("root/etc/passwd")).unwrap();
    assert!(
        !passwd.contains(":/bin/sh\n"),
        "not reverted: {passwd}\n{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("User[w1]: usermod")
                && l.contains("missing or non-executable shell")),
        "{log}"
    );
    assert!(
        log.contains("a revert of a sensitive resource said a warning"),
        "{log}"
    );
    assert!(!log.contains("vault-operator"), "{log}");
}
