//! Safe activation end to end, on a real systemd: the `datum` binary runs
//! inside the test bed (`scripts/testbed`, a Debian root booted with
//! systemd-nspawn) with `--root /`, so the paths below are the container's
//! real `/etc` paths and its real nginx and systemd do the work.
//!
//! Each test body re-runs inside the container (`testbed_test!`); the binary
//! Cargo built here is reachable there because the test bed binds `target/`
//! at the same path. Without a test bed every test prints
//! "skipped: no testbed (run scripts/testbed)" (a failure when
//! `DATUM_TESTBED_REQUIRED=1`).
//!
//! Tests that reconfigure nginx take the shared `nginx` lock (other test
//! binaries use the same container's nginx) and put the stock configuration
//! back when they end, pass or fail.

#![allow(
    clippy::disallowed_methods,
    reason = "integration tests build fixtures and inspect results on disk directly, and start real programs; the code under test goes through datum-host"
)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a failed step must stop the test"
)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use datum_testkit::run::Run;
use datum_testkit::testbed::within::{self, SharedLock, TestUnit};
use datum_testkit::testbed_test;
use tempfile::TempDir;

/// A repository with one layer (`base/main.yaml`), a host file naming the
/// host `testbed`, and a private state database, all in a temporary folder
/// inside the container.
struct Repo {
    dir: TempDir,
}

impl Repo {
    fn new(manifest: &str) -> Self {
        let repo = Repo {
            dir: tempfile::tempdir().unwrap(),
        };
        repo.write(
            "repo/datum.yaml",
            "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n",
        );
        repo.write("host.yaml", "name: testbed\nlabels: {role: web}\n");
        repo.write("repo/base/main.yaml", manifest);
        repo
    }

    fn write(&self, rel: &str, text: &str) {
        let path = self.dir.path().join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state.db")
    }

    /// `datum --root / ... <args>`, the binary Cargo built for this test.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_datum"));
        cmd.arg("--repo")
            .arg(self.dir.path().join("repo"))
            .arg("--root")
            .arg("/")
            .arg("--host-file")
            .arg(self.dir.path().join("host.yaml"))
            .arg("--state")
            .arg(self.state())
            .args(["--color", "never"])
            .args(args);
        cmd
    }

    fn datum(&self, args: &[&str]) -> Run {
        let out = self.command(args).output().unwrap();
        let run = Run(out);
        println!(
            "--- datum {} (exit {})\n{}{}",
            args.join(" "),
            run.code(),
            run.stdout(),
            run.stderr()
        );
        run
    }
}

/// What only this file asks of a run.
trait RunExt {
    fn line(&self, id: &str) -> String;
    fn block(&self, id: &str) -> String;
}

impl RunExt for Run {
    /// The report line of one resource (`! ValidationGroup[nginx]  failed ...`).
    #[track_caller]
    fn line(&self, id: &str) -> String {
        let text = self.stdout();
        text.lines()
            .find(|l| {
                l.get(2..)
                    .is_some_and(|rest| rest.starts_with(&format!("{id} ")))
            })
            .unwrap_or_else(|| panic!("no line for {id} in:\n{text}"))
            .to_owned()
    }

    /// The report line of one resource and the indented lines under it (its
    /// field changes and validator output).
    #[track_caller]
    fn block(&self, id: &str) -> String {
        let head = self.line(id);
        let text = self.stdout();
        let mut lines = text.lines().skip_while(|l| *l != head);
        let mut block = lines.next().unwrap_or_default().to_owned();
        for l in lines.take_while(|l| l.starts_with(' ')) {
            block.push('\n');
            block.push_str(l);
        }
        block
    }
}

#[track_caller]
fn assert_contains(haystack: &str, needle: &str) {
    assert!(
        haystack.contains(needle),
        "`{needle}` missing from:\n{haystack}"
    );
}

// ---------------------------------------------------------------------------
// nginx, shared with other tests in the container

const NGINX_CONF: &str = "/etc/nginx/nginx.conf";
const SITE: &str = "/etc/nginx/sites-enabled/x.conf";
const RELOAD_LOG: &str = "/run/datum-it-nginx-reloads";
const DROP_IN: &str = "/etc/systemd/system/nginx.service.d/datum-it-count-reloads.conf";
/// The port the test site listens on (the stock default site has 80).
const PORT: u16 = 8081;

/// The container's nginx, reconfigured for one test: its reloads counted
/// (a drop-in wraps `ExecReload=`), and everything put back on drop.
///
/// The count is what proves "not reloaded": Debian's `ExecReload=` is
/// `nginx -s reload`, which succeeds even for a broken configuration (the
/// master keeps its old one), so the served page alone could not tell a
/// withheld reload from a failed one.
struct Nginx {
    _lock: SharedLock,
    stock_conf: Vec<u8>,
}

impl Nginx {
    fn take() -> Self {
        let lock = within::lock("nginx");
        let stock_conf = fs::read(NGINX_CONF).unwrap();
        within::write(
            DROP_IN,
            format!(
                "[Service]\nExecReload=\nExecReload=/bin/sh -c 'echo reload >> {RELOAD_LOG}; exec /usr/sbin/nginx -g \"daemon on; master_process on;\" -s reload'\n"
            ),
        );
        let _ = fs::remove_file(RELOAD_LOG);
        let _ = fs::remove_file(SITE);
        within::systemctl_ok(&["daemon-reload"]);
        within::systemctl_ok(&["restart", "nginx.service"]);
        Nginx {
            _lock: lock,
            stock_conf,
        }
    }

    /// How many times systemd ran nginx's `ExecReload=` since [`Nginx::take`].
    fn reloads(&self) -> usize {
        fs::read_to_string(RELOAD_LOG)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    fn main_pid(&self) -> String {
        within::property("nginx.service", "MainPID")
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // Best effort: the test's own assertions are what matter.
        let _ = fs::write(NGINX_CONF, &self.stock_conf);
        let _ = fs::remove_file(SITE);
        let _ = fs::remove_file(DROP_IN);
        let _ = fs::remove_file(RELOAD_LOG);
        let _ = within::systemctl(&["daemon-reload"]);
        let _ = within::systemctl(&["restart", "nginx.service"]);
    }
}

/// The body nginx serves on the test site (after the status line and headers).
fn served_body() -> String {
    let response = within::http_get(PORT, "/");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}

/// A main configuration that serves only the `*.conf` sites (the stock
/// default site has no suffix), `marker` making each version distinct.
fn nginx_conf(marker: &str) -> String {
    format!(
        "# {marker}\nuser www-data;\nworker_processes 1;\npid /run/nginx.pid;\nevents {{ worker_connections 64; }}\nhttp {{\n    access_log off;\n    include /etc/nginx/sites-enabled/*.conf;\n}}\n"
    )
}

fn site(body: &str, extra: &str) -> String {
    format!(
        "server {{\n    listen 127.0.0.1:{PORT};\n    location / {{ return 200 \"{body}\\n\"; }}\n{extra}}}\n"
    )
}

/// The two-file nginx group and the service it notifies. `middle` goes
/// between the files and the service.
fn nginx_manifest(middle: &str) -> String {
    format!(
        "datum: v1alpha1\ntype: File\nname: nginx-conf\ndesired:\n  path: {NGINX_CONF}\n  mode: \"0644\"\n  source: files/nginx.conf\n  validate: nginx\n\
---\ndatum: v1alpha1\ntype: File\nname: site\ndesired:\n  path: {SITE}\n  mode: \"0644\"\n  source: files/x.conf\n  validate: nginx\n\
{middle}\
---\ndatum: v1alpha1\ntype: Service\nname: nginx\n\
requires: [File/nginx-conf, File/site]\n\
desired:\n  state: running\n  reload_on: [File/nginx-conf, File/site]\n  settle: 1s\n"
    )
}

testbed_test!(
    a_broken_site_in_the_nginx_group_changes_no_file_and_reloads_nothing,
    {
        let nginx = Nginx::take();
        let repo = Repo::new(&nginx_manifest(""));
        repo.write("repo/base/files/nginx.conf", &nginx_conf("v1"));
        repo.write("repo/base/files/x.conf", &site("old", ""));

        // 1. The group validates and the service serves it.
        repo.datum(&["apply"]).assert_exit(2);
        assert_eq!(served_body(), "old\n");
        let reloads = nginx.reloads();
        assert_eq!(reloads, 1, "the first apply reloads once");
        let pid = nginx.main_pid();
        let live_conf = fs::read(NGINX_CONF).unwrap();
        let live_site = fs::read(SITE).unwrap();

        // 2. Both files change; the site now holds a directive nginx rejects.
        repo.write("repo/base/files/nginx.conf", &nginx_conf("v2"));
        repo.write(
            "repo/base/files/x.conf",
            &site("new", "    datum_no_such_directive on;\n"),
        );
        // The plan validates the group as it would be: it would fail (4).
        let plan = repo.datum(&["plan"]);
        plan.assert_exit(4);
        assert_contains(&plan.line("File[site]"), "would fail validation (nginx)");
        let broken = repo.datum(&["apply"]);
        broken.assert_exit(4);
        // The group was validated with both files laid over their live
        // paths, before any was written: neither file changed...
        assert_eq!(fs::read(NGINX_CONF).unwrap(), live_conf);
        assert_eq!(fs::read(SITE).unwrap(), live_site);
        // ...and nginx was not reloaded: it serves what it loaded before.
        assert_eq!(nginx.reloads(), reloads, "a reload was attempted");
        assert_eq!(served_body(), "old\n");
        assert_eq!(nginx.main_pid(), pid);
        assert_eq!(within::property("nginx.service", "ActiveState"), "active");
        // The report says exactly that.
        let group = broken.line("ValidationGroup[nginx]");
        for needle in [
            "failed",
            "validation failed (nginx on testbed",
            "no file written (nginx): validated with File[nginx-conf], File[site]",
            "Service[nginx] not reloaded",
        ] {
            assert_contains(&group, needle);
        }
        assert_contains(&broken.stdout(), "datum_no_such_directive");
        assert_contains(
            &broken.line("File[site]"),
            "not written: ValidationGroup[nginx] failed validation",
        );
        assert_contains(&broken.line("Service[nginx]"), "blocked");

        // 3. Nothing fixed yet: refused again, still nothing reloaded.
        let again = repo.datum(&["apply"]);
        again.assert_exit(4);
        assert_contains(&again.line("ValidationGroup[nginx]"), "no file written");
        assert_eq!(nginx.reloads(), reloads);
        assert_eq!(served_body(), "old\n");

        // 4. Fixed: validated, reloaded once, the new configuration is served.
        repo.write("repo/base/files/x.conf", &site("new", ""));
        let fixed = repo.datum(&["apply"]);
        fixed.assert_exit(2);
        assert_contains(&fixed.line("Service[nginx]"), "done");
        assert_eq!(nginx.reloads(), reloads + 1);
        assert_eq!(served_body(), "new\n");
        assert!(
            !fixed.stdout().contains("ValidationGroup[nginx]"),
            "{}",
            fixed.stdout()
        );

        // 5. Nothing is owed any more.
        repo.datum(&["apply"]).assert_exit(0);
        assert_eq!(nginx.reloads(), reloads + 1);
    }
);

/// A unit that starts cleanly and runs; `settle` makes its verification
/// watch it for a while, which is the window the next test kills in.
const SLEEPER: &str = "[Service]\nExecStart=/bin/sleep infinity\n";

testbed_test!(
    a_reload_owed_by_a_killed_pass_is_validated_and_performed_next,
    {
        let nginx = Nginx::take();
        let slow = TestUnit::install("datum-it-slow.service", SLEEPER);
        // Between the files and nginx: a service whose verification watches it
        // for 30 s, so the pass is certainly past the write and before the
        // reload when it is killed.
        let middle = "---\ndatum: v1alpha1\ntype: Service\nname: datum-it-slow\nrequires: [File/site]\ndesired:\n  state: running\n  settle: 30s\n";
        let repo = Repo::new(&nginx_manifest(middle));
        repo.write("repo/base/files/nginx.conf", &nginx_conf("v1"));
        repo.write("repo/base/files/x.conf", &site("old", ""));
        within::systemctl_ok(&["start", slow.name()]);
        repo.datum(&["apply"]).assert_exit(2);
        assert_eq!(served_body(), "old\n");
        within::systemctl_ok(&["stop", slow.name()]);
        let reloads = nginx.reloads();

        // A valid change; the pass is killed once the new site is on disk.
        repo.write("repo/base/files/x.conf", &site("new", ""));
        let mut child = repo.command(&["apply"]).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(25);
        while !fs::read_to_string(SITE).unwrap().contains("new") {
            assert!(Instant::now() < deadline, "the site was never written");
            assert!(child.try_wait().unwrap().is_none(), "apply ended early");
            std::thread::sleep(Duration::from_millis(50));
        }
        // The Service in the middle is starting or settling now.
        std::thread::sleep(Duration::from_millis(500));
        child.kill().unwrap(); // SIGKILL: no chance to clean up
        let status = child.wait().unwrap();
        assert!(!status.success(), "{status}");
        assert_eq!(nginx.reloads(), reloads, "killed before the reload");
        assert_eq!(served_body(), "old\n", "still the configuration it loaded");

        // While it is owed, check says so (exit 2): nginx serves the old site.
        let check = repo.datum(&["check"]);
        check.assert_exit(2);
        assert_contains(&check.stdout(), "activation_owed (1)");
        assert_contains(&check.stdout(), "Service[nginx]");
        assert_contains(&check.stdout(), "reload owed since");

        // The next pass has no file to change: the reload it performs is the one
        // the killed pass recorded, validated first.
        let plan = repo.datum(&["plan"]);
        assert_contains(
            &plan.block("Service[nginx]"),
            "reload (after File[site] changed)",
        );
        let next = repo.datum(&["--verbose", "apply"]);
        next.assert_exit(2);
        assert_contains(&next.line("File[site]"), "unchanged");
        assert_contains(&next.line("Service[nginx]"), "done");
        assert_eq!(nginx.reloads(), reloads + 1);
        assert_eq!(served_body(), "new\n");
        // Performed means no longer owed.
        repo.datum(&["apply"]).assert_exit(0);
        assert_eq!(nginx.reloads(), reloads + 1);
        let check = repo.datum(&["check"]);
        check.assert_exit(0);
    }
);

testbed_test!(
    a_validator_missing_from_the_host_fails_and_changes_nothing,
    {
        // The test bed has no haproxy: `validate: haproxy` must fail, not skip.
        assert!(
            !Path::new("/usr/sbin/haproxy").exists(),
            "this test needs a test bed without haproxy"
        );
        let live = "/etc/datum-it-haproxy.cfg";
        within::write(live, "# the live configuration\n");
        let before = fs::metadata(live).unwrap();
        let repo = Repo::new(&format!(
            "datum: v1alpha1\ntype: File\nname: haproxy-cfg\ndesired:\n  path: {live}\n  content: \"global\\n  maxconn 100\\n\"\n  validate: haproxy\n\
---\ndatum: v1alpha1\ntype: File\nname: after\nrequires: [File/haproxy-cfg]\ndesired:\n  path: /etc/datum-it-after\n  content: \"x\\n\"\n"
        ));

        let plan = repo.datum(&["plan"]);
        // It would fail, and File[after] with it: 4.
        plan.assert_exit(4);
        assert_contains(&plan.line("File[haproxy-cfg]"), "would fail");

        let out = repo.datum(&["apply"]);
        out.assert_exit(4);
        let line = out.line("File[haproxy-cfg]");
        for needle in [
            "failed",
            "validator haproxy",
            "`haproxy`",
            "not installed on testbed",
            "Package/haproxy",
        ] {
            assert_contains(&line, needle);
        }
        assert_contains(&out.line("File[after]"), "blocked (by File[haproxy-cfg])");
        assert!(!Path::new("/etc/datum-it-after").exists());
        let after = fs::metadata(live).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            (before.ino(), before.mtime(), before.mtime_nsec()),
            (after.ino(), after.mtime(), after.mtime_nsec())
        );
        assert_eq!(
            fs::read_to_string(live).unwrap(),
            "# the live configuration\n"
        );
        fs::remove_file(live).unwrap();
    }
);

testbed_test!(a_service_that_crashes_after_starting_fails_apply, {
    // systemd accepts the start (a simple service counts as started once
    // forked); it exits a second later, and systemd restarts it.
    let unit = TestUnit::install(
        "datum-it-crashes.service",
        "[Service]\nExecStart=/bin/sh -c \"sleep 1; exit 3\"\nRestart=on-failure\nRestartSec=500ms\n",
    );
    let repo = Repo::new(
        "datum: v1alpha1\ntype: Service\nname: datum-it-crashes\ndesired:\n  state: running\n  settle: 3s\n\
---\ndatum: v1alpha1\ntype: File\nname: after\nrequires: [Service/datum-it-crashes]\ndesired:\n  path: /etc/datum-it-after-crash\n  content: \"x\\n\"\n",
    );
    let out = repo.datum(&["apply"]);
    out.assert_exit(4);
    let line = out.line("Service[datum-it-crashes]");
    assert_contains(&line, "failed (verify)");
    assert_contains(&line, "datum-it-crashes.service");
    assert_contains(&line, "did not settle within 3s");
    assert_contains(
        &out.line("File[after]"),
        "blocked (by Service[datum-it-crashes])",
    );
    assert!(!Path::new("/etc/datum-it-after-crash").exists());
    drop(unit);
});

testbed_test!(a_sensitive_member_hides_the_group_validators_output, {
    // nginx echoes the directive it rejects: for a group with a sensitive
    // member only the validator's name and exit status may be shown.
    const CANARY: &str = "datum_canary_q7x2";
    let _nginx = Nginx::take();
    let manifest = nginx_manifest("").replace("name: site\n", "name: site\nsensitive: true\n");
    let repo = Repo::new(&manifest);
    repo.write("repo/base/files/nginx.conf", &nginx_conf("v1"));
    repo.write(
        "repo/base/files/x.conf",
        &site("secret", &format!("    {CANARY} on;\n")),
    );
    let mut all = String::new();
    let mut group_lines = Vec::new();
    for args in [
        &["plan"][..],
        &["apply"],
        &["--output", "json", "plan"],
        &["--output", "json", "apply"],
        &["apply"],
    ] {
        let run = repo.datum(args);
        all.push_str(&run.stdout());
        all.push_str(&run.stderr());
        if args == ["apply"] {
            group_lines.push(run.line("ValidationGroup[nginx]"));
        }
    }
    assert!(!all.contains(CANARY), "the canary leaked:\n{all}");
    for line in group_lines {
        assert_contains(&line, "validation failed (nginx on testbed");
        assert_contains(&line, "exit 1");
    }
    // The same mistake without `sensitive` shows nginx's output, so the
    // assertion above can fail. (Another body: the file must change for the
    // group to be validated again.)
    let open = Repo::new(&nginx_manifest(""));
    open.write("repo/base/files/nginx.conf", &nginx_conf("v1"));
    open.write(
        "repo/base/files/x.conf",
        &site("not secret", &format!("    {CANARY} on;\n")),
    );
    assert_contains(&open.datum(&["apply"]).stdout(), CANARY);
});

/// An alias of a unit, as Debian's `sshd.service` is of `ssh.service`: a
/// link in /etc/systemd/system, removed when dropped.
struct AliasLink(&'static str);

impl Drop for AliasLink {
    fn drop(&mut self) {
        let _ = fs::remove_file(Path::new("/etc/systemd/system").join(self.0));
        let _ = within::systemctl(&["daemon-reload"]);
    }
}

// `Service[ssh]` and `Service[sshd]` pass lint (two names) but are one unit
// to systemd (`Id`), which each pass would start and stop in turn. Plan,
// apply and check refuse them, naming both, and change nothing (exit 1).
testbed_test!(two_services_of_one_unit_under_an_alias_are_refused, {
    let unit = TestUnit::install(
        "datum-it-real.service",
        "[Service]\nExecStart=/bin/sleep infinity\n",
    );
    std::os::unix::fs::symlink(
        "/etc/systemd/system/datum-it-real.service",
        "/etc/systemd/system/datum-it-alias.service",
    )
    .unwrap();
    let alias = AliasLink("datum-it-alias.service");
    within::systemctl_ok(&["daemon-reload"]);
    assert_eq!(
        within::property("datum-it-alias.service", "Id"),
        "datum-it-real.service"
    );
    let repo = Repo::new(
        "datum: v1alpha1\ntype: Service\nname: datum-it-real\ndesired:\n  state: running\n\
---\ndatum: v1alpha1\ntype: Service\nname: datum-it-alias\ndesired:\n  state: stopped\n",
    );
    repo.datum(&["lint"]).assert_exit(0);
    for (command, done) in [
        ("plan", "nothing was planned"),
        ("apply", "nothing was applied"),
    ] {
        let out = repo.datum(&[command]);
        out.assert_exit(1);
        let err = out.stderr();
        assert_contains(
            &err,
            "Service[datum-it-real] (base/main.yaml:1:1) and Service[datum-it-alias] (base/main.yaml:7:1)",
        );
        assert_contains(&err, "unit datum-it-real.service");
        assert_contains(&err, done);
    }
    // datum check observes both and refuses them the same way (it used to
    // report each as a unit of its own, and a revert would act on both).
    let out = repo.datum(&["check"]);
    out.assert_exit(1);
    let err = out.stderr();
    assert_contains(
        &err,
        "Service[datum-it-real] (base/main.yaml:1:1) and Service[datum-it-alias] (base/main.yaml:7:1)",
    );
    assert_contains(&err, "unit datum-it-real.service");
    assert_contains(&err, "nothing was reported, reconciled or recorded");
    assert_eq!(within::property(unit.name(), "ActiveState"), "inactive");
    drop(alias);
    drop(unit);
});

/// The lines of a unit's log once it has `lines` of them (or after 5 s): a
/// simple unit counts as started once forked.
fn log_lines(path: &str, lines: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = fs::read_to_string(path).unwrap_or_default();
        if log.lines().count() >= lines || Instant::now() > deadline {
            return log.lines().map(str::to_owned).collect();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

// A drop-in the pass writes and a restart it owes for it: the restart runs
// what the new drop-in says even when systemd's NeedDaemonReload says no.
// It says no when the new file's mtime is not newer than the loaded one's
// (two writes within one tick of a coarse file-system clock, which made a
// CI test flaky); here the loaded drop-in has a time in the future, so the
// file Datum writes now is older to systemd.
testbed_test!(
    a_drop_in_the_pass_writes_is_loaded_before_the_restart_it_owes,
    {
        const LOG: &str = "/run/datum-it-e2e-dropin.log";
        const DROP_IN: &str = "/etc/systemd/system/datum-it-e2e.service.d/env.conf";
        let _ = fs::remove_file(LOG);
        let unit = TestUnit::install(
            "datum-it-e2e.service",
            &format!(
                "[Service]\nExecStart=/bin/sh -c 'echo \"start $FOO\" >> {LOG}; exec sleep infinity'\n"
            ),
        );
        within::write(DROP_IN, "[Service]\nEnvironment=FOO=v1\n");
        fs::File::options()
            .write(true)
            .open(DROP_IN)
            .unwrap()
            .set_modified(std::time::SystemTime::now() + Duration::from_secs(3600))
            .unwrap();
        within::systemctl_ok(&["daemon-reload"]);
        within::systemctl_ok(&["start", unit.name()]);
        assert_eq!(log_lines(LOG, 1), ["start v1"]);
        let repo = Repo::new(&format!(
            "datum: v1alpha1\ntype: File\nname: dropin\ndesired:\n  path: {DROP_IN}\n  content: \"[Service]\\nEnvironment=FOO=v2\\n\"\n\
---\ndatum: v1alpha1\ntype: Service\nname: datum-it-e2e\ndesired:\n  state: running\n  settle: 500ms\n  restart_on: [File/dropin]\n"
        ));
        let out = repo.datum(&["apply"]);
        let lines = log_lines(LOG, 2);
        let _ = fs::remove_file(LOG);
        let _ = fs::remove_dir_all("/etc/systemd/system/datum-it-e2e.service.d");
        out.assert_exit(2);
        assert_contains(
            &out.block("Service[datum-it-e2e]"),
            "restarted (after File[dropin] changed)",
        );
        assert_eq!(lines, ["start v1", "start v2"]);
        drop(unit);
    }
);

// A reload systemd takes seconds to finish (an `ExecReload=` that drains or
// rebuilds a cache) holds the pass for up to the Service's `timeout:`, and
// verify then watches the unit for its `settle:`: on a terminal, the bar
// says what it waits for, for how long so far and at most how long; piped,
// nothing of it is written. The terminal is a
// pseudo-terminal `script` (util-linux) gives the binary.
testbed_test!(
    a_pass_waiting_for_a_slow_reload_says_so_on_a_terminal_only,
    {
        let unit = TestUnit::install(
            "datum-it-wait.service",
            "[Service]\nExecStart=/bin/sleep infinity\nExecReload=/bin/sleep 3\n",
        );
        within::systemctl_ok(&["start", unit.name()]);
        const CONF: &str = "/run/datum-it-wait.conf";
        // A run that failed may have left it.
        let _ = fs::remove_file(CONF);
        let manifest = |content: &str| {
            format!(
                "datum: v1alpha1\ntype: File\nname: conf\ndesired:\n  path: {CONF}\n  content: \"{content}\\n\"\n\
---\ndatum: v1alpha1\ntype: Service\nname: datum-it-wait\ndesired:\n  state: running\n  settle: 2s\n  timeout: 90s\n  reload_on: [File/conf]\n"
            )
        };
        let repo = Repo::new(&manifest("v1"));
        // `datum ... apply` as a shell word list (temporary paths, no blanks).
        let command = repo.command(&["apply"]);
        let words: Vec<String> = std::iter::once(command.get_program())
            .chain(command.get_args())
            .map(|w| w.to_str().unwrap().to_owned())
            .collect();
        assert!(words.iter().all(|w| !w.contains([' ', '\'', '"'])));
        let out = Command::new("script")
            .args(["--quiet", "--return", "--command"])
            .arg(format!("stty cols 200; {}", words.join(" ")))
            .arg("/dev/null")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let terminal = String::from_utf8_lossy(&out.stdout).into_owned();
        println!(
            "--- on a terminal (exit {:?})\n{terminal}",
            out.status.code()
        );
        assert_eq!(out.status.code(), Some(2), "{terminal}");
        assert_contains(&terminal, "reloaded (after File[conf] changed)");
        assert_contains(
            &terminal,
            "waiting for systemd: reloading datum-it-wait.service (",
        );
        assert_contains(&terminal, "s, up to 1m 30s)");
        // And while verify watches the unit for its `settle:`.
        assert_contains(
            &terminal,
            "verifying datum-it-wait.service stays running (1s, up to 2s)",
        );

        // Piped: the same wait, and not a word of it.
        repo.write("repo/base/main.yaml", &manifest("v2"));
        let piped = repo.datum(&["apply"]);
        let _ = fs::remove_file(CONF);
        piped.assert_exit(2);
        assert_contains(
            &piped.block("Service[datum-it-wait]"),
            "reloaded (after File[conf] changed)",
        );
        assert!(
            ["waiting", "verifying"]
                .iter()
                .all(|w| !piped.stderr().contains(w) && !piped.stdout().contains(w)),
            "{}{}",
            piped.stdout(),
            piped.stderr()
        );
        drop(unit);
    }
);

/// A file removed when dropped (a test's fixture outside its temporary
/// folder), pass or fail.
struct RemovedOnDrop(&'static str);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = fs::remove_file(self.0);
    }
}

// The daemon-reload before a restart owed for a drop-in the pass wrote runs
// every generator and re-reads every unit (seconds on a host with many
// units, up to a minute before Datum gives up): on a terminal the bar says
// so, as it does for the restart itself. A generator that sleeps 3 s makes
// systemd's reload slow here.
testbed_test!(a_slow_daemon_reload_says_so_on_a_terminal, {
    const DROP_IN: &str = "/etc/systemd/system/datum-it-slowdr.service.d/env.conf";
    const GENERATOR: &str = "/etc/systemd/system-generators/datum-it-slow-generator";
    let unit = TestUnit::install(
        "datum-it-slowdr.service",
        "[Service]\nExecStart=/bin/sleep infinity\n",
    );
    within::systemctl_ok(&["start", unit.name()]);
    let _ = fs::remove_dir_all("/etc/systemd/system/datum-it-slowdr.service.d");
    fs::create_dir_all("/etc/systemd/system/datum-it-slowdr.service.d").unwrap();
    within::write(GENERATOR, "#!/bin/sh\nsleep 3\n");
    let generator = RemovedOnDrop(GENERATOR);
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(GENERATOR, fs::Permissions::from_mode(0o755)).unwrap();
    let repo = Repo::new(&format!(
        "datum: v1alpha1\ntype: File\nname: dropin\ndesired:\n  path: {DROP_IN}\n  content: \"[Service]\\nEnvironment=FOO=v2\\n\"\n\
---\ndatum: v1alpha1\ntype: Service\nname: datum-it-slowdr\ndesired:\n  state: running\n  settle: 500ms\n  restart_on: [File/dropin]\n"
    ));
    let command = repo.command(&["apply"]);
    let words: Vec<String> = std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|w| w.to_str().unwrap().to_owned())
        .collect();
    assert!(words.iter().all(|w| !w.contains([' ', '\'', '"'])));
    let out = Command::new("script")
        .args(["--quiet", "--return", "--command"])
        .arg(format!("stty cols 200; {}", words.join(" ")))
        .arg("/dev/null")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let terminal = String::from_utf8_lossy(&out.stdout).into_owned();
    println!(
        "--- on a terminal (exit {:?})\n{terminal}",
        out.status.code()
    );
    drop(generator);
    let _ = fs::remove_dir_all("/etc/systemd/system/datum-it-slowdr.service.d");
    assert_eq!(out.status.code(), Some(2), "{terminal}");
    assert_contains(&terminal, "restarted (after File[dropin] changed)");
    assert_contains(
        &terminal,
        "waiting for systemd: reloading unit files (daemon-reload, for datum-it-slowdr.service) (",
    );
    assert_contains(&terminal, "s, up to 1m)");
    drop(unit);
});

// A restart an earlier pass owes for a drop-in it wrote (b4a25e9's carried
// debt): pass 1 writes the drop-in, but the Service is blocked (what it
// requires fails), so neither the daemon-reload nor the restart happens;
// pass 2 writes nothing in a unit folder and must still have systemd load
// the drop-in before the restart it owes. systemd's NeedDaemonReload says
// no here (the loaded drop-in has a time in the future, as above), so only
// the debt can say it.
testbed_test!(
    a_restart_owed_by_an_earlier_pass_loads_the_drop_in_it_wrote_first,
    {
        const LOG: &str = "/run/datum-it-carried.log";
        const DROP_IN: &str = "/etc/systemd/system/datum-it-carried.service.d/env.conf";
        const GATE: &str = "/run/datum-it-carried.gate";
        let _ = fs::remove_file(LOG);
        let _ = fs::remove_file(GATE);
        let unit = TestUnit::install(
            "datum-it-carried.service",
            &format!(
                "[Service]\nExecStart=/bin/sh -c 'echo \"start $FOO\" >> {LOG}; exec sleep infinity'\n"
            ),
        );
        within::write(DROP_IN, "[Service]\nEnvironment=FOO=v1\n");
        fs::File::options()
            .write(true)
            .open(DROP_IN)
            .unwrap()
            .set_modified(std::time::SystemTime::now() + Duration::from_secs(3600))
            .unwrap();
        within::systemctl_ok(&["daemon-reload"]);
        within::systemctl_ok(&["start", unit.name()]);
        assert_eq!(log_lines(LOG, 1), ["start v1"]);
        let manifest = |gate_owner: &str| {
            format!(
                "datum: v1alpha1\ntype: File\nname: dropin\ndesired:\n  path: {DROP_IN}\n  content: \"[Service]\\nEnvironment=FOO=v2\\n\"\n\
---\ndatum: v1alpha1\ntype: File\nname: gate\ndesired:\n  path: {GATE}\n  owner: {gate_owner}\n  content: \"x\\n\"\n\
---\ndatum: v1alpha1\ntype: Service\nname: datum-it-carried\nrequires: [File/gate]\ndesired:\n  state: running\n  settle: 500ms\n  restart_on: [File/dropin]\n"
            )
        };
        // Pass 1: the drop-in is written, the gate fails (no such owner),
        // the Service is blocked: the restart stays owed.
        let repo = Repo::new(&manifest("datum-it-no-such-user"));
        let first = repo.datum(&["apply"]);
        first.assert_exit(6);
        assert_contains(&first.line("File[dropin]"), "done");
        assert_contains(&first.line("Service[datum-it-carried]"), "blocked");
        assert_eq!(
            within::property(unit.name(), "NeedDaemonReload"),
            "no",
            "systemd must not see the drop-in as changed, or this tests nothing"
        );
        // Pass 2: nothing is written in a unit folder; the owed restart
        // runs the drop-in pass 1 wrote.
        repo.write("repo/base/main.yaml", &manifest("root"));
        let second = repo.datum(&["apply"]);
        let lines = log_lines(LOG, 2);
        let _ = fs::remove_file(LOG);
        let _ = fs::remove_file(GATE);
        let _ = fs::remove_dir_all("/etc/systemd/system/datum-it-carried.service.d");
        second.assert_exit(2);
        assert_contains(
            &second.block("Service[datum-it-carried]"),
            "restarted (after File[dropin] changed)",
        );
        assert_eq!(lines, ["start v1", "start v2"]);
        drop(unit);
    }
);

// A revert of a file nginx reloads on, and a partial apply of it, reload
// nginx as a whole apply would: before, the reload was only owed, so nginx
// kept serving the hand-edited site until the next whole apply. A stopped
// nginx is left stopped by them (not started: neither was asked to), the
// reload owed and said.
testbed_test!(
    a_revert_and_a_partial_apply_reload_the_service_their_file_notifies,
    {
        let nginx = Nginx::take();
        let repo =
            Repo::new(&nginx_manifest("").replace("name: site\n", "name: site\nclass: critical\n"));
        repo.write(
            "repo/datum.yaml",
            "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\nclasses:\n  critical: {interval: 60s, policy: revert}\n",
        );
        repo.write("repo/base/files/nginx.conf", &nginx_conf("v1"));
        repo.write("repo/base/files/x.conf", &site("declared", ""));
        repo.datum(&["apply"]).assert_exit(2);
        assert_eq!(served_body(), "declared\n");
        let by_hand = || {
            fs::write(SITE, site("by hand", "")).unwrap();
            within::systemctl_ok(&["reload", "nginx.service"]);
            // `nginx -s reload` returns before the new workers serve.
            let deadline = Instant::now() + Duration::from_secs(10);
            while served_body() != "by hand\n" {
                assert!(Instant::now() < deadline, "the hand reload never took");
                std::thread::sleep(Duration::from_millis(100));
            }
        };

        // 1. The revert puts the site back and reloads nginx: nothing owed.
        by_hand();
        let reloads = nginx.reloads();
        let pid = nginx.main_pid();
        let reconciled = repo.datum(&["reconcile", "--class", "critical"]);
        reconciled.assert_exit(2);
        assert_contains(&reconciled.stdout(), "reverted");
        assert_eq!(served_body(), "declared\n");
        assert_eq!(nginx.reloads(), reloads + 1);
        assert_eq!(nginx.main_pid(), pid, "reloaded, not restarted");
        repo.datum(&["check"]).assert_exit(0);

        // 2. A partial apply of the site does the same.
        by_hand();
        let reloads = nginx.reloads();
        let partial = repo.datum(&["apply", "--target", "File/site"]);
        partial.assert_exit(2);
        assert_contains(&partial.line("Service[nginx]"), "done");
        assert_eq!(served_body(), "declared\n");
        assert_eq!(nginx.reloads(), reloads + 1);
        repo.datum(&["check"]).assert_exit(0);

        // 3. nginx stopped by hand: the revert leaves it stopped, the
        // reload owed, and says why; the next whole apply starts it.
        fs::write(SITE, site("by hand", "")).unwrap();
        within::systemctl_ok(&["stop", "nginx.service"]);
        let reconciled = repo.datum(&["reconcile", "--class", "critical"]);
        reconciled.assert_exit(2);
        assert_contains(&reconciled.stdout(), "reverted");
        assert_contains(&reconciled.stdout(), "Service[nginx] was not reloaded");
        assert_contains(&reconciled.stdout(), "not as declared (state)");
        assert_eq!(within::property("nginx.service", "ActiveState"), "inactive");
        let check = repo.datum(&["check"]);
        check.assert_exit(2);
        assert_contains(&check.stdout(), "activation_owed (1)");
        repo.datum(&["apply"]).assert_exit(2);
        assert_eq!(served_body(), "declared\n");
        repo.datum(&["check"]).assert_exit(0);

        // 4. The group fails validation (nginx.conf, of another class,
        // broken by hand): the revert is refused before the site is
        // written, and nothing is reloaded or owed.
        let reloads = nginx.reloads();
        let good_conf = fs::read(NGINX_CONF).unwrap();
        fs::write(
            NGINX_CONF,
            nginx_conf("v1") + "datum_no_such_directive on;\n",
        )
        .unwrap();
        fs::write(SITE, site("by hand", "")).unwrap();
        let reconciled = repo.datum(&["reconcile", "--class", "critical"]);
        reconciled.assert_exit(2);
        assert_contains(&reconciled.stdout(), "revert failed");
        assert_eq!(nginx.reloads(), reloads);
        assert_contains(&fs::read_to_string(SITE).unwrap(), "by hand");
        let check = repo.datum(&["check"]);
        assert!(
            !check.stdout().contains("activation_owed"),
            "{}",
            check.stdout()
        );
        fs::write(NGINX_CONF, good_conf).unwrap();
    }
);
