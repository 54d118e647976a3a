//! The test bed: a Debian root booted with systemd-nspawn by `scripts/testbed`.
//!
//! From the outside a test finds it through two variables the script prints:
//! `DATUM_TESTBED_PID` (the container's PID 1, which `nsenter -t PID -a`
//! enters) and `DATUM_TESTBED_ROOT` (the container's root directory as seen
//! from this machine, `/proc/PID/root`). [`Testbed`] wraps both. The container
//! boots from a pristine image every time the script starts it: whatever tests
//! change inside is gone at the next start.
//!
//! A test that needs systemd runs its body inside with [`run_inside`] (or the
//! [`testbed_test!`](crate::testbed_test) macro): the test executable runs
//! itself again under `nsenter`, filtered to that one test, with
//! `DATUM_TESTBED_INSIDE=1`. The executable is reachable there because the
//! script binds the workspace's `target/` read-only at the same path. Inside,
//! `/` is the container's root, so the body calls `systemctl` and writes
//! `/etc/systemd/system` like Datum would on a real machine.
//!
//! Writing to `/etc` from a test is only safe inside the container, so
//! [`inside`] checks three things before it says yes (the variable, the marker
//! file the script leaves in the container's `/etc`, and nspawn's own
//! `/run/systemd/container`), and the helpers in [`within`] refuse to run
//! anywhere else. Without the variables a test prints
//! `skipped: no testbed (run scripts/testbed)` and returns (or fails, when
//! `DATUM_TESTBED_REQUIRED=1`: CI must not pass by skipping).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The container's PID 1, as seen from this machine.
pub const PID_VAR: &str = "DATUM_TESTBED_PID";
/// The container's root directory as seen from this machine
/// (`/proc/PID/root`, so writes land in the container's volatile overlay).
pub const ROOT_VAR: &str = "DATUM_TESTBED_ROOT";
/// Set to `1` where a test bed must exist (CI as root): a missing one is then
/// a failure instead of a skip.
pub const REQUIRED_VAR: &str = "DATUM_TESTBED_REQUIRED";
/// Set on the test executable re-run inside the container.
pub const INSIDE_VAR: &str = "DATUM_TESTBED_INSIDE";
/// Left in the container's `/etc` by `scripts/testbed`, and nowhere else.
pub const MARKER: &str = "/etc/datum-testbed";

/// What a test prints when there is no test bed.
pub const SKIP_MESSAGE: &str = "skipped: no testbed (run scripts/testbed)";

/// A running test bed, seen from this machine.
#[derive(Debug, Clone)]
pub struct Testbed {
    pid: u32,
    root: PathBuf,
}

impl Testbed {
    /// The test bed named by the environment, or `None` when the variables
    /// are unset. Set but wrong (not a number, the container gone, a root
    /// without the marker) is a panic: CI started a test bed and lost it.
    pub fn from_env() -> Option<Self> {
        let pid = std::env::var(PID_VAR).ok().filter(|v| !v.is_empty())?;
        let root = std::env::var_os(ROOT_VAR).filter(|v| !v.is_empty())?;
        let pid: u32 = pid
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{PID_VAR}={pid} is not a process id"));
        let root = PathBuf::from(root);
        assert!(
            Path::new(&format!("/proc/{pid}")).exists(),
            "{PID_VAR}={pid} is not running: start the test bed again with `eval \"$(scripts/testbed)\"`"
        );
        assert!(
            root.join(MARKER.trim_start_matches('/')).is_file(),
            "{ROOT_VAR}={} is not a Datum test bed root (no {MARKER} in it)",
            root.display()
        );
        Some(Testbed { pid, root })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where a path inside the container is on this machine.
    pub fn host_path(&self, inside: impl AsRef<Path>) -> PathBuf {
        let inside = inside.as_ref();
        self.root.join(inside.strip_prefix("/").unwrap_or(inside))
    }

    /// Writes a file into the container from this machine (parents created).
    pub fn write(&self, inside: impl AsRef<Path>, contents: impl AsRef<[u8]>) {
        let path = self.host_path(inside);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("create {}: {e}", parent.display()));
        }
        std::fs::write(&path, contents).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    /// A command that runs `program` inside the container (all of its
    /// namespaces), with this process's environment.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg("-t")
            .arg(self.pid.to_string())
            .arg("-a")
            .arg("--")
            .arg(program);
        cmd
    }

    /// Runs `program args...` inside and returns what it did.
    pub fn run<I, S>(&self, program: &str, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command(program)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run nsenter for {program}: {e}"))
    }

    /// Runs `systemctl args...` inside; panics with its output unless it
    /// succeeds. Returns stdout.
    pub fn systemctl(&self, args: &[&str]) -> String {
        let out = self.run("systemctl", args);
        assert!(
            out.status.success(),
            "systemctl {} failed in the test bed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs one test of the current test executable inside the container and
    /// returns its output. `name` is the libtest name (`module::test`).
    pub fn run_test(&self, name: &str) -> Output {
        let exe = std::env::current_exe().expect("the test executable's path");
        self.command(&exe)
            .args([name, "--exact", "--nocapture", "--test-threads=1"])
            .env(INSIDE_VAR, "1")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {} in the test bed: {e}", exe.display()))
    }
}

/// Whether this process runs inside the test bed (re-run by [`run_inside`]).
///
/// Panics when `DATUM_TESTBED_INSIDE` is set somewhere that is not the test
/// bed: a test body about to write `/etc` must never run on a real machine.
pub fn inside() -> bool {
    if std::env::var_os(INSIDE_VAR).is_none_or(|v| v != "1") {
        return false;
    }
    let marker = Path::new(MARKER).is_file();
    let nspawn = std::fs::read_to_string("/run/systemd/container")
        .is_ok_and(|s| s.trim() == "systemd-nspawn");
    assert!(
        marker && nspawn,
        "{INSIDE_VAR}=1 but this is not the Datum test bed (marker {MARKER}: {marker}, nspawn: {nspawn}); refusing to run a test that changes /etc"
    );
    true
}

/// The libtest name of a test from `module_path!()` and the function name:
/// the crate name is not part of it.
pub fn test_name(module_path: &str, function: &str) -> String {
    match module_path.split_once("::") {
        Some((_, rest)) => format!("{rest}::{function}"),
        None => function.to_owned(),
    }
}

/// Runs `body` inside the test bed.
///
/// Inside (the re-run): runs `body`. Outside with a test bed: re-runs this
/// one test inside and fails unless exactly that test ran and passed (a
/// filter that matched nothing must not look like a pass). Outside without
/// one: prints [`SKIP_MESSAGE`] and returns, unless `DATUM_TESTBED_REQUIRED=1`
/// says one must exist, which makes it a failure.
pub fn run_inside(name: &str, body: impl FnOnce()) {
    if inside() {
        body();
        return;
    }
    let Some(testbed) = Testbed::from_env() else {
        assert!(
            std::env::var_os(REQUIRED_VAR).is_none_or(|v| v != "1"),
            "{REQUIRED_VAR}=1 but {PID_VAR}/{ROOT_VAR} are unset: start it with scripts/testbed"
        );
        println!("{SKIP_MESSAGE}");
        return;
    };
    let out = testbed.run_test(name);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Shown by the harness when this test fails, and with --nocapture.
    println!(
        "--- {name} inside the test bed (pid {}) ---\n{stdout}{stderr}",
        testbed.pid()
    );
    assert!(
        out.status.success(),
        "{name} failed inside the test bed ({})",
        out.status
    );
    assert!(
        stdout.contains("test result: ok. 1 passed"),
        "{name} did not run inside the test bed (no test matched the name?)"
    );
}

/// Declares a test whose body runs inside the test bed:
///
/// ```ignore
/// datum_testkit::testbed_test!(starts_a_unit, {
///     // runs as root inside the container, where / is the container's root
/// });
/// ```
#[macro_export]
macro_rules! testbed_test {
    ($name:ident, $body:block) => {
        #[test]
        fn $name() {
            $crate::testbed::run_inside(
                &$crate::testbed::test_name(module_path!(), stringify!($name)),
                || $body,
            );
        }
    };
}

/// Helpers for a test body running inside the test bed. Each one checks
/// [`inside`] first, so none of them can touch the real machine.
pub mod within {
    use std::fs::File;
    use std::path::{Path, PathBuf};
    use std::process::{Command, Output};

    fn assert_inside() {
        assert!(
            super::inside(),
            "this helper runs only inside the test bed (see datum_testkit::run_inside)"
        );
    }

    /// Runs `systemctl args...` and returns what it did.
    pub fn systemctl(args: &[&str]) -> Output {
        assert_inside();
        Command::new("systemctl")
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run systemctl: {e}"))
    }

    /// Runs `systemctl args...`; panics with its output unless it succeeds.
    pub fn systemctl_ok(args: &[&str]) -> String {
        let out = systemctl(args);
        assert!(
            out.status.success(),
            "systemctl {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// One property of a unit (`systemctl show -p NAME --value`).
    pub fn property(unit: &str, name: &str) -> String {
        systemctl_ok(&["show", "-p", name, "--value", "--", unit])
            .trim()
            .to_owned()
    }

    /// Writes a file, creating its parents.
    pub fn write(path: impl AsRef<Path>, contents: impl AsRef<[u8]>) {
        assert_inside();
        let path = path.as_ref();
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("create {}: {e}", parent.display()));
        }
        std::fs::write(path, contents).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    /// A unit file a test installed in `/etc/systemd/system`. Dropping it
    /// stops and disables the unit, removes the file and reloads systemd, so
    /// a failed test leaves nothing behind for the next run.
    #[derive(Debug)]
    pub struct TestUnit {
        name: String,
        path: PathBuf,
    }

    impl TestUnit {
        /// Installs `name` (full unit name) with `text` and reloads systemd.
        pub fn install(name: &str, text: &str) -> Self {
            let path = Path::new("/etc/systemd/system").join(name);
            write(&path, text);
            systemctl_ok(&["daemon-reload"]);
            TestUnit {
                name: name.to_owned(),
                path,
            }
        }

        pub fn name(&self) -> &str {
            &self.name
        }
    }

    impl Drop for TestUnit {
        fn drop(&mut self) {
            // Best effort: the test's own assertion is what matters.
            let _ = systemctl(&["disable", "--quiet", "--now", "--", &self.name]);
            let _ = std::fs::remove_file(&self.path);
            let _ = systemctl(&["daemon-reload"]);
            let _ = systemctl(&["reset-failed", "--", &self.name]);
        }
    }

    /// What a service inside answers to `GET path` on `127.0.0.1:port`
    /// (status line, headers and body), for tests that must show which
    /// configuration a server is still serving. A test's observation, never
    /// part of Datum's verification.
    pub fn http_get(port: u16, path: &str) -> String {
        use std::io::{Read, Write};
        assert_inside();
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"));
        let timeout = Some(std::time::Duration::from_secs(5));
        stream
            .set_read_timeout(timeout)
            .expect("set a read timeout");
        write!(
            stream,
            "GET {path} HTTP/1.0\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        )
        .expect("send the request");
        let mut response = Vec::new();
        stream
            .read_to_end(&mut response)
            .unwrap_or_else(|e| panic!("read from 127.0.0.1:{port}: {e}"));
        String::from_utf8_lossy(&response).into_owned()
    }

    /// An exclusive lock on something tests share in the container (nginx,
    /// sshd): tests run in parallel, and two of them reconfiguring the same
    /// service would see each other's changes. Held until dropped.
    #[derive(Debug)]
    pub struct SharedLock {
        _file: File,
    }

    /// Takes the lock named `name`, waiting for whoever holds it.
    pub fn lock(name: &str) -> SharedLock {
        assert_inside();
        let dir = Path::new("/run/datum-testkit");
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let path = dir.join(format!("{name}.lock"));
        let file = File::create(&path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .unwrap_or_else(|e| panic!("lock {}: {e}", path.display()));
        SharedLock { _file: file }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_names_drop_the_crate() {
        assert_eq!(test_name("service", "starts"), "starts");
        assert_eq!(
            test_name("it::service::nginx", "reloads"),
            "service::nginx::reloads"
        );
    }

    #[test]
    fn host_paths_are_under_the_root() {
        let t = Testbed {
            pid: 1,
            root: PathBuf::from("/var/tmp/tb/root"),
        };
        assert_eq!(
            t.host_path("/etc/systemd/system/x.service"),
            Path::new("/var/tmp/tb/root/etc/systemd/system/x.service")
        );
    }

    #[test]
    fn the_inside_check_refuses_a_machine_without_the_marker() {
        // The variable alone is never enough: this machine has no marker, so
        // `inside` must panic rather than say yes. The variable is given to a
        // child run of this executable (set_var would race other tests).
        if Path::new(MARKER).exists() {
            return; // this is the test bed itself
        }
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["testbed::tests::probe_inside", "--exact", "--nocapture"])
            .env(INSIDE_VAR, "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text}");
        assert!(text.contains("refusing"), "{text}");
    }

    /// Only meaningful when run by the test above, with INSIDE_VAR set.
    #[test]
    fn probe_inside() {
        if std::env::var_os(INSIDE_VAR).is_some() {
            inside();
        }
    }
}
