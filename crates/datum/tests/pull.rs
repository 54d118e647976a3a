//! `datum pull` end to end: the built binary, real git (a bare repository
//! over `file://`, and `git daemon` on 127.0.0.1), commits signed with SSH
//! keys made by the real `ssh-keygen` in each test, a temporary root.
//!
//! Every refusal is checked for what it must leave alone: the link, the
//! checkouts and the state store's record are the same before and after.
//! Tests that need `git` or `ssh-keygen` print "skipped" when they are
//! missing and fail instead under `DATUM_VALIDATORS_REQUIRED` (CI sets it;
//! `scripts/deps` installs `git` and `openssh-client`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a panic is the test failing, with its message"
)]
#![allow(
    clippy::disallowed_methods,
    reason = "integration tests build fixtures and inspect results on disk directly, and start real programs; the code under test goes through datum-host"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use datum_testkit::run::Run;
use datum_testkit::tools::have;
use tempfile::TempDir;

const DATUM: &str = env!("CARGO_BIN_EXE_datum");

fn tools() -> bool {
    have("git", "git") && have("ssh-keygen", "openssh-client")
}

/// A datum.yaml with one layer.
const SETTINGS: &str = "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n";

fn motd(content: &str) -> String {
    format!(
        "datum: v1alpha1\ntype: File\nname: motd\ndesired:\n  path: /etc/motd\n  content: \"{content}\\n\"\n"
    )
}

/// A work repository whose commits are signed with test keys, the bare
/// repository it pushes to (the "remote"), the keys and `allowed_signers`,
/// and a root to pull into.
struct Bed {
    dir: TempDir,
}

impl Bed {
    fn new() -> Bed {
        Bed::new_in(&std::env::temp_dir())
    }

    /// A bed in a fresh folder under `parent`.
    fn new_in(parent: &Path) -> Bed {
        let bed = Bed {
            dir: tempfile::tempdir_in(parent).unwrap(),
        };
        std::fs::create_dir_all(bed.p("keys")).unwrap();
        for who in ["alice", "mallory", "old"] {
            let out = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-C", who, "-f"])
                .arg(bed.p(&format!("keys/{who}")))
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
        }
        // alice may sign; old's key expired in 2020; mallory is unknown.
        let signers = format!(
            "alice@example.com {}\nold@example.com valid-before=\"20200101\" {}\n",
            bed.public("alice"),
            bed.public("old")
        );
        bed.write("allowed_signers", &signers);
        std::fs::create_dir_all(bed.p("work")).unwrap();
        bed.git("work", &["init", "-q", "-b", "main"]);
        bed.git(".", &["init", "-q", "--bare", "remote.git"]);
        bed.write("root/etc/datum/host.yaml", "name: pulled\nlabels: {}\n");
        bed
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn public(&self, who: &str) -> String {
        let text = std::fs::read_to_string(self.p(&format!("keys/{who}.pub"))).unwrap();
        text.split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn write(&self, rel: &str, text: &str) {
        let p = self.p(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// git as a developer runs it (no global configuration), in `dir`.
    fn git_output(&self, dir: &str, args: &[&str]) -> Output {
        Command::new("git")
            .args(args)
            .current_dir(self.p(dir))
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "Alice")
            .env("GIT_AUTHOR_EMAIL", "alice@example.com")
            .env("GIT_COMMITTER_NAME", "Alice")
            .env("GIT_COMMITTER_EMAIL", "alice@example.com")
            .output()
            .unwrap()
    }

    fn git(&self, dir: &str, args: &[&str]) -> String {
        let out = self.git_output(dir, args);
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// git in the work tree with `input` on its standard input; its output.
    fn git_input(&self, args: &[&str], input: &[u8]) -> String {
        let mut child = Command::new("git")
            .args(args)
            .current_dir(self.p("work"))
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// Commits everything in the work tree, signed by `signer`'s key (or
    /// not at all); returns the commit.
    fn commit(&self, message: &str, signer: Option<&str>) -> String {
        self.git("work", &["add", "-A"]);
        let key = signer.map(|s| self.p(&format!("keys/{s}")).display().to_string());
        let mut args = vec!["-c", "gpg.format=ssh"];
        let signing = key.as_ref().map(|k| format!("user.signingkey={k}"));
        if let Some(s) = &signing {
            args.extend([
                "-c",
                s.as_str(),
                "commit",
                "-q",
                "-S",
                "--allow-empty",
                "-m",
                message,
            ]);
        } else {
            args.extend(["commit", "-q", "--allow-empty", "-m", message]);
        }
        self.git("work", &args);
        self.git("work", &["rev-parse", "HEAD"])
    }

    /// A repository revision with `/etc/motd` declared as `content`.
    fn revision(&self, content: &str, signer: Option<&str>) -> String {
        self.write("work/datum.yaml", SETTINGS);
        self.write("work/base/motd.yaml", &motd(content));
        self.commit(content, signer)
    }

    /// A commit on `parent` signed by alice, made HEAD, whose tree is built
    /// by hand (what `git add` would never make): HEAD's `base` and
    /// `datum.yaml` and the entries `extra` (lines of `git mktree`'s input).
    fn signed_tree(&self, parent: &str, extra: &str, message: &str) -> String {
        let base = self.git("work", &["rev-parse", "HEAD:base"]);
        let settings = self.git("work", &["rev-parse", "HEAD:datum.yaml"]);
        let root = self.git_input(
            &["mktree"],
            format!("040000 tree {base}\tbase\n100644 blob {settings}\tdatum.yaml\n{extra}")
                .as_bytes(),
        );
        let signing = format!("user.signingkey={}", self.p("keys/alice").display());
        let commit = self.git(
            "work",
            &[
                "-c",
                "gpg.format=ssh",
                "-c",
                &signing,
                "commit-tree",
                "-S",
                "-p",
                parent,
                "-m",
                message,
                &root,
            ],
        );
        self.git("work", &["reset", "-q", "--soft", &commit]);
        commit
    }

    /// Makes the remote's main the work tree's HEAD (forced).
    fn push(&self) {
        self.git(
            "work",
            &[
                "push",
                "-q",
                "--force",
                "../remote.git",
                "HEAD:refs/heads/main",
            ],
        );
    }

    fn datum(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(DATUM);
        cmd.arg("--root")
            .arg(self.p("root"))
            .arg("--color")
            .arg("never")
            .args(args)
            .env_remove("DATUM_REPO")
            .env_remove("DATUM_ROOT");
        cmd
    }

    fn url(&self) -> String {
        format!("file://{}", self.p("remote.git").display())
    }

    /// `datum pull` from the remote with `allowed_signers`.
    fn pull(&self, extra: &[&str]) -> Run {
        self.pull_with(&[], &self.url(), extra)
    }

    /// `datum GLOBAL... pull --url URL --allowed-signers ... EXTRA...`.
    fn pull_with(&self, global: &[&str], url: &str, extra: &[&str]) -> Run {
        let signers = self.p("allowed_signers").display().to_string();
        let mut args = global.to_vec();
        args.extend(["pull", "--url", url, "--allowed-signers", &signers]);
        args.extend_from_slice(extra);
        Run(self.datum(&args).output().unwrap())
    }

    fn link(&self) -> PathBuf {
        self.p("root/etc/datum/repository")
    }

    /// The commit the link's checkout says it is.
    fn deployed(&self) -> Option<String> {
        datum_pull::deployed_revision(&self.link()).map(|d| d.commit)
    }

    fn checkouts(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.p("root/var/lib/datum/pull/checkouts"))
            .map(|rd| {
                rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// What `datum pull --status --output json` says.
    fn status(&self) -> serde_json::Value {
        let out = Run(self
            .datum(&["--output", "json", "pull", "--status"])
            .output()
            .unwrap());
        out.assert_exit(0);
        serde_json::from_str(&out.stdout()).unwrap()
    }

    /// Everything a refusal must leave alone.
    fn snapshot(&self) -> (Option<PathBuf>, Vec<String>, serde_json::Value) {
        (
            std::fs::read_link(self.link()).ok(),
            self.checkouts(),
            self.status()["history"].clone(),
        )
    }
}

#[test]
fn a_signed_revision_is_deployed_whole_without_git_metadata_and_a_second_pull_changes_nothing() {
    if !tools() {
        return;
    }
    let bed = Bed::new();
    bed.write("work/base/files/run.sh", "#!/bin/sh\necho hi\n");
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(
        bed.p("work/base/files/run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    // Attributes that would make git's own checkout rewrite the bytes.
    bed.write("work/.gitattributes", "* text eol=crlf\n*.sh filter=evil\n");
    let c1 = bed.revision("one", Some("alice"));
    bed.push();

    let out = bed.pull(&[]);
    out.assert_exit(2);
    assert!(
        out.stdout().contains(&format!("deployed {}", &c1[..12])),
        "{}",
        out.stdout()
    );
    assert!(
        out.stdout()
            .contains("signed by alice@example.com (ED25519 SHA256:"),
        "{}",
        out.stdout()
    );

    // A relative link into a checkout named after the commit.
    let target = std::fs::read_link(bed.link()).unwrap();
    assert_eq!(
        target,
        PathBuf::from(format!("../../var/lib/datum/pull/checkouts/{c1}"))
    );
    assert_eq!(bed.deployed().as_deref(), Some(c1.as_str()));
    let checkout = bed.p(&format!("root/var/lib/datum/pull/checkouts/{c1}"));
    // No .git anywhere, and every file byte for byte what git holds (no
    // eol conversion, no filter), with git's modes.
    assert!(!checkout.join(".git").exists());
    for (path, mode) in [
        ("datum.yaml", 0o644),
        ("base/motd.yaml", 0o644),
        ("base/files/run.sh", 0o755),
        (".gitattributes", 0o644),
    ] {
        let blob = bed
            .git_output("work", &["cat-file", "blob", &format!("HEAD:{path}")])
            .stdout;
        assert_eq!(std::fs::read(checkout.join(path)).unwrap(), blob, "{path}");
        use std::os::unix::fs::MetadataExt as _;
        assert_eq!(
            std::fs::metadata(checkout.join(path)).unwrap().mode() & 0o777,
            mode,
            "{path}"
        );
    }
    // The cache and the pull folder are private.
    use std::os::unix::fs::MetadataExt as _;
    let pull_dir = std::fs::metadata(bed.p("root/var/lib/datum/pull")).unwrap();
    assert_eq!(pull_dir.mode() & 0o777, 0o700);

    // The state store has it; the agent's commands read it through the link.
    let status = bed.status();
    assert_eq!(status["deployed"]["commit"], c1.as_str());
    assert_eq!(status["history"][0]["revision"], c1.as_str());
    assert_eq!(status["history"][0]["rollback"], false);
    assert_eq!(status["history"][0]["signer"], "alice@example.com");
    let link = bed.link().display().to_string();
    let plan = Run(bed.datum(&["--repo", &link, "plan"]).output().unwrap());
    plan.assert_exit(2);
    assert!(plan.stdout().contains("File[motd]"), "{}", plan.stdout());

    let again = bed.pull(&[]);
    again.assert_exit(0);
    assert!(
        again
            .stdout()
            .contains("is deployed already; nothing changed"),
        "{}",
        again.stdout()
    );
    assert_eq!(bed.status()["history"].as_array().unwrap().len(), 1);
}

#[test]
fn a_tag_is_deployed_as_its_commit_and_two_pulls_at_once_deploy_it_once() {
    let Some((bed, c1)) = deployed_bed() else {
        return;
    };
    let c2 = bed.revision("two", Some("alice"));
    bed.git("work", &["tag", "-a", "-m", "release 2", "v2"]);
    bed.git("work", &["push", "-q", "../remote.git", "v2"]);
    let pulls: Vec<_> = (0..2)
        .map(|_| {
            let url = bed.url();
            let signers = bed.p("allowed_signers").display().to_string();
            bed.datum(&[
                "pull",
                "--url",
                &url,
                "--ref",
                "v2",
                "--allowed-signers",
                &signers,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    let mut codes: Vec<i32> = pulls
        .into_iter()
        .map(|p| p.wait_with_output().unwrap().status.code().unwrap())
        .collect();
    codes.sort();
    // One deployed it; the other waited for the lock and found it deployed.
    assert_eq!(codes, [0, 2]);
    assert_eq!(bed.deployed().as_deref(), Some(c2.as_str()));
    let history = bed.status()["history"].clone();
    assert_eq!(history.as_array().unwrap().len(), 2, "{history}");
    assert_eq!(history[0]["ref"], "v2");
    assert_eq!(history[0]["previous"], c1.as_str());
}

#[test]
fn a_shallow_remote_is_refused_as_shallow_and_changes_nothing() {
    // git fetches from a shallow clone but will not take its ref (exit 0,
    // only a warning), which read as "main is not a commit".
    let Some((bed, c1)) = deployed_bed() else {
        return;
    };
    bed.revision("two", Some("alice"));
    bed.push();
    let remote = format!("file://{}", bed.p("remote.git").display());
    bed.git(
        ".",
        &[
            "clone",
            "-q",
            "--bare",
            "--depth",
            "1",
            "--branch",
            "main",
            &remote,
            "shallow.git",
        ],
    );
    assert!(
        bed.p("shallow.git/shallow").exists(),
        "the clone is not shallow"
    );
    let before = bed.snapshot();
    let url = format!("file://{}", bed.p("shallow.git").display());
    let out = bed.pull_with(&[], &url, &[]);
    out.assert_exit(1);
    let says = out.stderr();
    assert!(says.contains("the remote is a shallow clone"), "{says}");
    assert!(!says.contains("is not a commit"), "{says}");
    // Nor is what git fetched kept until the next pull.
    assert!(!bed.p("root/var/lib/datum/pull/incoming.git").exists());
    assert_eq!(bed.snapshot(), before);
    assert_eq!(bed.deployed().as_deref(), Some(c1.as_str()));
}

#[test]
fn a_repository_served_by_git_daemon_on_loopback_is_pulled() {
    if !tools() {
        return;
    }
    let bed = Bed::new();
    let c1 = bed.revision("daemon", Some("alice"));
    bed.push();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let base = bed.dir.path().display().to_string();
    let mut daemon = Killed(
        Command::new("git")
            .args([
                "daemon",
                "--reuseaddr",
                "--listen=127.0.0.1",
                "--export-all",
                "--informative-errors",
            ])
            .arg(format!("--port={port}"))
            .arg(format!("--base-path={base}"))
            .arg(&base)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let up = wait(Duration::from_secs(10), || TcpStream::connect(addr).ok());
    assert!(up.is_some(), "git daemon did not listen on {addr}");
    let url = format!("git://127.0.0.1:{port}/remote.git");
    let out = bed.pull_with(&[], &url, &[]);
    out.assert_exit(2);
    assert_eq!(bed.deployed().as_deref(), Some(c1.as_str()));
    assert_eq!(bed.status()["history"][0]["source"], url.as_str());
    daemon.0.kill().unwrap();
}

/// A git:// server on loopback that advertises `main`, then answers the
/// fetch with `remote:` lines holding escape sequences and no pack; serves
/// `times` connections.
fn hostile_git_server(times: usize) -> u16 {
    fn pkt(body: &[u8]) -> Vec<u8> {
        let mut p = format!("{:04x}", body.len() + 4).into_bytes();
        p.extend_from_slice(body);
        p
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for _ in 0..times {
            let Ok((mut c, _)) = listener.accept() else {
                return;
            };
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = [0u8; 65536];
            let _ = c.read(&mut buf);
            let mut answer = pkt(b"1111111111111111111111111111111111111111 refs/heads/main\0side-band-64k ofs-delta\n");
            answer.extend_from_slice(b"0000");
            let _ = c.write_all(&answer);
            let mut got = Vec::new();
            while !got.windows(4).any(|w| w == b"done") {
                match c.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            let mut reply = pkt(b"NAK\n");
            reply.extend(pkt(
                b"\x02\x1b]0;PWNED-TITLE\x07\x1b]52;c;Y2htb2QgNzc3IC8K\x07\x1b[31mremote text\x1b[0m\n",
            ));
            reply.extend(pkt(b"\x03\x1b[2Jcleared\n"));
            let _ = c.write_all(&reply);
        }
    });
    port
}

#[test]
fn what_a_hostile_remote_prints_reaches_no_terminal_and_no_log_as_escapes() {
    if !tools() {
        return;
    }
    let bed = Bed::new();
    let port = hostile_git_server(2);
    let url = format!("git://127.0.0.1:{port}/x.git");
    let out = bed.pull_with(&["--output", "json"], &url, &[]);
    out.assert_exit(1);
    let json: serde_json::Value = serde_json::from_str(&out.stdout()).unwrap();
    assert_eq!(json["reason"], "fetch", "{json}");
    let message = json["message"].as_str().unwrap();
    // What the remote said is there, shown, not obeyed.
    assert!(message.contains("PWNED-TITLE"), "{message}");
    assert!(message.contains("\\u{1b}]52;c;"), "{message}");
    assert!(
        !message.chars().any(char::is_control),
        "control characters from the remote in the error: {message:?}"
    );
    let out = bed.pull_with(&[], &url, &[]);
    out.assert_exit(1);
    assert!(out.stderr().contains("cleared"), "{}", out.stderr());
    assert!(
        !out.stderr().contains('\u{1b}') && !out.stderr().contains('\u{7}'),
        "{:?}",
        out.stderr()
    );
}

/// Kills a child when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait<T>(within: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
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

/// A bed whose first revision (`/etc/motd` declared as "one", signed by
/// alice) is deployed; `None` (skipped) without git and ssh-keygen.
fn deployed_bed() -> Option<(Bed, String)> {
    if !tools() {
        return None;
    }
    let bed = Bed::new();
    let c1 = bed.revision("one", Some("alice"));
    bed.push();
    bed.pull(&[]).assert_exit(2);
    Some((bed, c1))
}

/// Pushes `head`, pulls, and checks the pull was refused with `says` and
/// changed nothing.
#[track_caller]
fn refused(bed: &Bed, says: &str) -> Run {
    bed.push();
    let before = bed.snapshot();
    let out = bed.pull(&[]);
    out.assert_exit(1);
    assert!(
        out.stderr().contains(says),
        "`{says}` not in:\n{}",
        out.stderr()
    );
    assert!(
        out.stderr().contains("nothing was changed"),
        "{}",
        out.stderr()
    );
    assert_eq!(bed.snapshot(), before, "a refused pull changed something");
    out
}

/// [`refused`], as `revision`'s fault: the pull names it and says
/// `deployed` stays deployed, and its JSON document says `reason`.
#[track_caller]
fn refused_as_the_revisions_fault(
    bed: &Bed,
    says: &str,
    revision: &str,
    deployed: &str,
    reason: &str,
) -> Run {
    let out = refused(bed, says);
    assert!(
        out.stderr()
            .contains(&format!("refusing {}", &revision[..12]))
            && out
                .stderr()
                .contains(&format!("{} stays deployed", &deployed[..12])),
        "{}",
        out.stderr()
    );
    let json = bed.pull(&["--output", "json"]);
    json.assert_exit(1);
    let json: serde_json::Value = serde_json::from_str(&json.stdout()).unwrap();
    assert_eq!(json["outcome"], "refused", "{json}");
    assert_eq!(json["reason"], reason, "{json}");
    assert_eq!(json["revision"], revision, "{json}");
    out
}

#[test]
fn unsigned_unknown_expired_and_tampered_revisions_are_refused_and_change_nothing() {
    if !tools() {
        return;
    }
    let bed = Bed::new();
    // Refused before anything is deployed: no link appears.
    bed.revision("unsigned first", None);
    let out = refused(&bed, "the commit is not signed");
    assert!(
        out.stderr().contains("nothing is deployed"),
        "{}",
        out.stderr()
    );
    assert!(std::fs::symlink_metadata(bed.link()).is_err());

    let good = bed.revision("good", Some("alice"));
    bed.push();
    bed.pull(&[]).assert_exit(2);
    let stays = format!("{} stays deployed", &good[..12]);

    bed.revision("unsigned", None);
    let out = refused(&bed, "the commit is not signed");
    assert!(out.stderr().contains(&stays), "{}", out.stderr());

    bed.revision("by mallory", Some("mallory"));
    let out = refused(&bed, "it is signed with a key that is not in");
    assert!(
        out.stderr().contains("allowed_signers (ED25519 SHA256:"),
        "{}",
        out.stderr()
    );

    bed.revision("by old", Some("old"));
    refused(&bed, "it is signed with a key that has expired");

    // Tampered: a commit alice signed, with its tree swapped for another
    // (the signature header kept as it was).
    let signed = bed.revision("alice signs this", Some("alice"));
    bed.write("work/base/motd.yaml", &motd("the attacker's"));
    let evil = bed.commit("evil", None);
    let evil_tree = bed.git("work", &["rev-parse", &format!("{evil}^{{tree}}")]);
    let raw = bed
        .git_output("work", &["cat-file", "commit", &signed])
        .stdout;
    let raw = String::from_utf8(raw).unwrap();
    let tree_line = raw.lines().next().unwrap().to_owned();
    let forged = raw.replacen(&tree_line, &format!("tree {evil_tree}"), 1);
    let forged_id = bed.git_input(
        &["hash-object", "-t", "commit", "-w", "--stdin"],
        forged.as_bytes(),
    );
    bed.git("work", &["reset", "-q", "--hard", &forged_id]);
    // git itself agrees it is bad.
    let verify = bed.git_output(
        "work",
        &[
            "-c",
            &format!(
                "gpg.ssh.allowedSignersFile={}",
                bed.p("allowed_signers").display()
            ),
            "verify-commit",
            &forged_id,
        ],
    );
    assert!(
        !verify.status.success(),
        "git verify-commit accepted the forgery"
    );
    refused(&bed, "its signature does not match its content");

    // After all that, the good revision is still what the link shows, and
    // a properly signed one goes through.
    assert_eq!(bed.deployed().as_deref(), Some(good.as_str()));
    bed.git("work", &["reset", "-q", "--hard", &good]);
    let next = bed.revision("next", Some("alice"));
    bed.push();
    bed.pull(&[]).assert_exit(2);
    assert_eq!(bed.deployed().as_deref(), Some(next.as_str()));

    // JSON says why, with the fixed word.
    bed.revision("unsigned again", None);
    bed.push();
    let out = bed.pull(&["--output", "json"]);
    out.assert_exit(1);
    let json: serde_json::Value = serde_json::from_str(&out.stdout()).unwrap();
    assert_eq!(json["outcome"], "refused");
    assert_eq!(json["reason"], "unsigned");
    assert_eq!(json["deployed"], next.as_str());
}

// A repository that also keeps the SHA-256 form of its objects
// (extensions.compatObjectFormat) signs each commit twice: `gpgsig` over
// its SHA-1 form, `gpgsig-sha256` over the other. git verify-commit takes
// the first; so does datum pull, and a commit signed over the SHA-256 form
// alone is refused for what it is, not as altered.
#[test]
fn a_commit_signed_in_both_object_formats_is_verified_by_its_sha1_signature() {
    if !tools() {
        return;
    }
    let bed = Bed::new();
    bed.git("work", &["config", "core.repositoryformatversion", "1"]);
    bed.git(
        "work",
        &["config", "extensions.compatObjectFormat", "sha256"],
    );
    let c1 = bed.revision("one", Some("alice"));
    let raw = bed.git("work", &["cat-file", "commit", &c1]);
    assert!(
        raw.contains("\ngpgsig ") && raw.contains("\ngpgsig-sha256 "),
        "git did not sign in both formats:\n{raw}"
    );
    bed.push();
    let out = bed.pull(&[]);
    out.assert_exit(2);
    assert_eq!(bed.deployed().as_deref(), Some(c1.as_str()));
    assert_eq!(bed.status()["history"][0]["signer"], "alice@example.com");

    // The same commit with its SHA-1 signature taken away.
    let c2 = bed.revision("two", Some("alice"));
    let raw = bed.git_output("work", &["cat-file", "commit", &c2]).stdout;
    let raw = String::from_utf8(raw).unwrap();
    let mut stripped = String::new();
    let mut in_sha1 = false;
    for line in raw.split_inclusive('\n') {
        if line.starts_with("gpgsig ") {
            in_sha1 = true;
            continue;
        }
        if in_sha1 && line.starts_with(' ') {
            continue;
        }
        in_sha1 = false;
        stripped.push_str(line);
    }
    assert!(stripped.contains("gpgsig-sha256") && !stripped.contains("\ngpgsig "));
    let id = bed.git_input(
        &[
            "hash-object",
            "-t",
            "commit",
            "-w",
            "--stdin",
            "--literally",
        ],
        stripped.as_bytes(),
    );
    bed.git("work", &["reset", "-q", "--hard", &id]);
    let out = refused(&bed, "gpgsig-sha256");
    assert!(
        !out.stderr().contains("altered"),
        "taken for an altered commit:\n{}",
        out.stderr()
    );
    assert_eq!(bed.deployed().as_deref(), Some(c1.as_str()));
}

// A commit whose signature headers git never writes (two `gpgsig`, a
// signature cut short, two `gpgsig-sha256`) cannot be verified, and is
// refused as malformed: not as a commit altered after it was signed.
#[test]
fn a_commit_with_malformed_signature_headers_is_refused_as_such() {
    let Some((bed, c1)) = deployed_bed() else {
        return;
    };
    let c2 = bed.revision("two", Some("alice"));
    let raw = bed.git_output("work", &["cat-file", "commit", &c2]).stdout;
    let raw = String::from_utf8(raw).unwrap();
    // The gpgsig header, its continuation lines included.
    let mut header = String::new();
    for line in raw.split_inclusive('\n') {
        if line.starts_with("gpgsig ") || (!header.is_empty() && line.starts_with(' ')) {
            header.push_str(line);
        } else if !header.is_empty() {
            break;
        }
    }
    assert!(header.contains("-----END SSH SIGNATURE-----"), "{raw}");
    let end = header.lines().last().map(|l| format!("{l}\n")).unwrap();
    let sha256 = header.replacen("gpgsig ", "gpgsig-sha256 ", 1);
    for (malformed, says) in [
        (
            raw.replacen(&header, &format!("{header}{header}"), 1),
            "it has two gpgsig headers",
        ),
        (
            raw.replacen(&end, "", 1),
            "its gpgsig header ends before its -----END SSH SIGNATURE----- line",
        ),
        (
            raw.replacen(&header, &format!("{header}{sha256}{sha256}"), 1),
            "it has two gpgsig-sha256 headers",
        ),
    ] {
        let id = bed.git_input(
            &[
                "hash-object",
                "-t",
                "commit",
                "-w",
                "--stdin",
                "--literally",
            ],
            malformed.as_bytes(),
        );
        bed.git("work", &["reset", "-q", "--hard", &id]);
        let out = refused_as_the_revisions_fault(&bed, says, &id, &c1, "bad_signature");
        assert!(
            out.stderr().contains("the commit object is malformed")
                && !out.stderr().contains("altered"),
            "{}",
            out.stderr()
        );
    }
    // The commit as alice signed it goes through.
    bed.git("work", &["reset", "-q", "--hard", &c2]);
    bed.push();
    bed.pull(&[]).assert_exit(2);
    assert_eq!(bed.deployed().as_deref(), Some(c2.as_str()));
}

/// `n` bytes no compression shrinks (xorshift, seeded by `seed`).
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// The bytes of every file under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() {
            bytes_under(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

#[test]
fn a_refused_revision_leaves_none_of_its_objects_in_the_cache() {
    let Some((bed, c1)) = deployed_bed() else {
        return;
    };
    let cache = bed.p("root/var/lib/datum/pull/cache.git");
    let pull_dir = bed.p("root/var/lib/datum/pull");
    let held = |blob: &str| {
        Command::new("git")
            .arg(format!("--git-dir={}", cache.display()))
            .args(["cat-file", "-e", blob])
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .status()
            .unwrap()
            .success()
    };
    let baseline = bytes_under(&pull_dir);
    // A hostile remote pushes big revisions that are refused: unsigned (a
    // blob git keeps loose), unsigned with many objects (a pack git
    // keeps), signed but failing lint (refused for its content), and
    // signed but going backwards.
    let mut blobs = Vec::new();
    let mut big = |name: &str, seed: u64, size: usize| {
        bed.write(&format!("work/base/files/{name}"), "");
        std::fs::write(bed.p(&format!("work/base/files/{name}")), noise(size, seed)).unwrap();
        let path = format!("base/files/{name}");
        blobs.push(bed.git("work", &["hash-object", &path]));
    };
    big("big.bin", 1, 4 << 20);
    bed.commit("unsigned and big", None);
    refused(&bed, "the commit is not signed");

    bed.git("work", &["reset", "-q", "--hard", &c1]);
    for i in 0..150 {
        big(&format!("many-{i}.bin"), 100 + i, 20_000);
    }
    big("big2.bin", 2, 4 << 20);
    bed.commit("unsigned, many objects", None);
    refused(&bed, "the commit is not signed");

    bed.git("work", &["reset", "-q", "--hard", &c1]);
    big("big3.bin", 3, 4 << 20);
    bed.write(
        "work/base/bad.yaml",
        "datum: v1alpha1\ntype: File\nname: bad\ndesired:\n  path: /etc/bad\n  colour: red\n",
    );
    bed.commit("signed, fails lint", Some("alice"));
    refused(&bed, "`datum lint` finds 1 error(s) in it");
    std::fs::remove_file(bed.p("work/base/bad.yaml")).unwrap();

    bed.git("work", &["reset", "-q", "--hard", &c1]);
    let c2 = bed.revision("two", Some("alice"));
    bed.push();
    bed.pull(&[]).assert_exit(2);
    bed.git("work", &["reset", "-q", "--hard", &c1]);
    big("big4.bin", 4, 4 << 20);
    bed.commit("signed, backwards", Some("alice"));
    refused(&bed, "does not descend from the deployed revision");

    for blob in &blobs {
        assert!(!held(blob), "the cache keeps {blob} of a refused revision");
    }
    // Nothing else keeps them either (a quarantine, a pack on the side).
    let now = bytes_under(&pull_dir);
    assert!(
        now < baseline + (1 << 20),
        "the pull folder grew from {baseline} to {now} bytes"
    );
    // The deployed revision's history is all there: the next one goes on,
    // and the quarantine a killed pull left is swept.
    assert!(held(&c2) && held(&c1));
    let left = bed.p("root/var/lib/datum/pull/incoming.git/objects/pack/tmp_pack_dead");
    std::fs::create_dir_all(left.parent().unwrap()).unwrap();
    std::fs::write(&left, noise(2 << 20, 5)).unwrap();
    bed.git("work", &["reset", "-q", "--hard", &c2]);
    let c3 = bed.revision("three", Some("alice"));
    bed.push();
    bed.pull(&[]).assert_exit(2);
    assert_eq!(bed.deployed().as_deref(), Some(c3.as_str()));
    assert!(held(&c3));
    assert!(std::fs::symlink_metadata(bed.p("root/var/lib/datum/pull/incoming.git")).is_err());
}

/// A git:// server on loopback that advertises `main` at `head` and
/// answers one fetch with the first `sent` bytes of `pack`, then hangs up:
/// a network path or server that cuts a transfer short.
fn cut_short_git_server(head: &str, pack: Vec<u8>, sent: usize) -> u16 {
    fn pkt(body: &[u8]) -> Vec<u8> {
        let mut p = format!("{:04x}", body.len() + 4).into_bytes();
        p.extend_from_slice(body);
        p
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let advert = format!("{head} refs/heads/main\0side-band-64k ofs-delta\n");
    std::thread::spawn(move || {
        let Ok((mut c, _)) = listener.accept() else {
            return;
        };
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 65536];
        let _ = c.read(&mut buf);
        let mut answer = pkt(advert.as_bytes());
        answer.extend_from_slice(b"0000");
        let _ = c.write_all(&answer);
        let mut got = Vec::new();
        while !got.windows(4).any(|w| w == b"done") {
            match c.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let _ = c.write_all(&pkt(b"NAK\n"));
        for chunk in pack[..sent].chunks(65_000) {
            let mut band = vec![1u8];
            band.extend_from_slice(chunk);
            if c.write_all(&pkt(&band)).is_err() {
                return;
            }
        }
        let _ = c.shutdown(std::net::Shutdown::Both);
    });
    port
}

#[test]
fn a_pull_that_fails_after_the_remote_sent_data_leaves_none_of_it_behind() {
    let Some((bed, c1)) = deployed_bed() else {
        return;
    };
    let quarantine = bed.p("root/var/lib/datum/pull/incoming.git");
    let pull_dir = bed.p("root/var/lib/datum/pull");
    let baseline = bytes_under(&pull_dir);
    let left_alone = |out: &Run, before: &(Option<PathBuf>, Vec<String>, serde_json::Value)| {
        out.assert_exit(1);
        assert_eq!(&bed.snapshot(), before, "a failed pull changed something");
        let now = bytes_under(&pull_dir);
        assert!(
            std::fs::symlink_metadata(&quarantine).is_err() && now < baseline + (1 << 20),
            "what the remote sent stays after the pull failed: the pull folder grew from {baseline} to {now} bytes\n{}",
            out.stderr()
        );
    };

    // The connection is cut after 6 MiB of an 8 MiB pack (a server or a
    // network path that hangs up, a fetch that ran out of time or disk).
    bed.write("work/base/files/big.bin", "");
    std::fs::write(bed.p("work/base/files/big.bin"), noise(8 << 20, 7)).unwrap();
    let big = bed.commit("big", Some("alice"));
    let pack = {
        let mut child = Command::new("git")
            .args(["pack-objects", "--stdout", "--revs", "-q"])
            .current_dir(bed.p("work"))
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(format!("{big}\n^{c1}\n").as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        out.stdout
    };
    assert!(pack.len() > 7 << 20, "{}", pack.len());
    let port = cut_short_git_server(&big, pack, 6 << 20);
    let url = format!("git://127.0.0.1:{port}/remote.git");
    let before = bed.snapshot();
    let out = bed.pull_with(&[], &url, &[]);
    assert!(
        out.stderr().contains("cannot fetch main"),
        "{}",
        out.stderr()
    );
    left_alone(&out, &before);

    // A commit object larger than Datum reads (a 2 MiB message), sent
    // with a big file: the fetch goes through, the commit is not read.
    bed.git("work", &["reset", "-q", "--hard", &c1]);
    bed.write("work/base/files/big.bin", "");
    std::fs::write(bed.p("work/base/files/big.bin"), noise(8 << 20, 8)).unwrap();
    bed.git("work", &["add", "-A"]);
    let message = bed.p("message");
    std::fs::write(&message, "x".repeat(2 << 20)).unwrap();
    bed.git("work", &["commit", "-q", "-F", message.to_str().unwrap()]);
    bed.push();
    let before = bed.snapshot();
    let out = bed.pull(&[]);
    left_alone(&out, &before);
}

#[test]
fn a_force_push_backwards_is_refused_until_a_person_allows_it_and_the_rollback_is_recorded() {
    let Some((bed, c1)) = deployed_bed() else {
        return;
    };
    let c2 = bed.revision("two", Some("alice"));
    bed.push();
    bed.pull(&[]).assert_exit(2);

    bed.git("work", &["reset", "-q", "--hard", &c1]);
    let out = refused(
        &bed,
        &format!(
            "it does not descend from the deployed revision {}",
            &c2[..12]
        ),
    );
    assert!(
        out.stderr().contains("--allow-rollback"),
        "{}",
        out.stderr()
    );

    // An unrelated history, signed by alice, is refused the same way.
    bed.git("work", &["checkout", "-q", "--orphan", "other"]);
    let orphan = bed.revision("unrelated", Some("alice"));
    refused(&bed, "does not descend from the deployed revision");
    bed.git("work", &["checkout", "-q", "-f", "main"]);
    bed.git("work", &["reset", "-q", "--hard", &c1]);
    bed.push();

    // Configuration cannot allow it; a person can.
    bed.write("root/etc/datum/pull.yaml", "allow_rollback: true\n");
    let out = bed.pull(&[]);
    out.assert_exit(1);
    assert!(
        out.stderr()
            .contains("pull.yaml:1:1: going backwards cannot be configured"),
        "{}",
        out.stderr()
    );
    std::fs::remove_file(bed.p("root/etc/datum/pull.yaml")).unwrap();
    let out = Run(bed
        .datum(&[
            "pull",
            "--url",
            &bed.url(),
            "--allowed-signers",
            &bed.p("allowed_signers").display().to_string(),
            "--allow-rollback",
        ])
        .env("SUDO_USER", "carol")
        .output()
        .unwrap());
    out.assert_exit(2);
    assert!(
        out.stdout()
            .contains("a rollback, allowed with --allow-rollback and recorded"),
        "{}",
        out.stdout()
    );
    assert_eq!(bed.deployed().as_deref(), Some(c1.as_str()));
    let history = bed.status()["history"].clone();
    assert_eq!(history[0]["revision"], c1.as_str());
    assert_eq!(history[0]["previous"], c2.as_str());
    assert_eq!(history[0]["rollback"], true);
    assert!(
        history[0]["allowed_by"]
            .as_str()
            .unwrap()
            .starts_with("carol (uid "),
        "{history}"
    );
    assert_eq!(history[1]["rollback"], false);
    // The flag is not needed for going forward again, nor does it make an
    // unrelated history descend: forward from c1 is fine.
    let c3 = bed.revision("three", Some("alice"));
    bed.push();
    bed.pull(&[]).assert_exit(2);
    assert_eq!(bed.deployed().as_deref(), Some(c3.as_str()));
    assert_eq!(bed.status()["history"][0]["rollback"], false);
    let _ = orphan;
}

#[test]
fn a_revision_a_person_rolled_back_from_is_not_deployed_again_unasked() {
    let Some((bed, c1)) = deployed_bed() else {
        return;
    };
    let bad = bed.revision("known bad", Some("alice"));
    let worse = bed.revision("built on it", Some("alice"));
    bed.push();
    bed.pull(&[]).assert_exit(2);
    // A person rolls back to c1 (main force-pushed back, --allow-rollback).
    bed.git("work", &["reset", "-q", "--hard", &c1]);
    bed.push();
    bed.pull(&["--allow-rollback"]).assert_exit(2);
    assert_eq!(bed.deployed().as_deref(), Some(c1.as_str()));

    // Whoever controls the server or the path serves the revision rolled
    // back from again, or an older signed one built on the same mistake:
    // in ancestry terms forward from c1, but a person took it away.
    for replayed in [&worse, &bad] {
        bed.git("work", &["reset", "-q", "--hard", replayed]);
        let out = refused(&bed, &format!("a person rolled back from {}", &worse[..12]));
        assert!(
            out.stderr().contains("--allow-rollback"),
            "{}",
            out.stderr()
        );
        let out = bed.pull(&["--output", "json"]);
        let json: serde_json::Value = serde_json::from_str(&out.stdout()).unwrap();
        assert_eq!(json["reason"], "backwards", "{json}");
    }
    // Forward from c1 without it: deployed as usual.
    bed.git("work", &["reset", "-q", "--hard", &c1]);
    let fixed = bed.revision("fixed", Some("alice"));
    bed.push();
    bed.pull(&[]).assert_exit(2);
    assert_eq!(bed.deployed().as_deref(), Some(fixed.as_str()));
    // A person may bring it back (merged in): recorded, and from then on
    // what builds on it goes forward unasked.
    bed.git("work", &["merge", "-q", "--no-edit", "-s", "ours", &worse]);
    let merged = bed.revision("merged back", Some("alice"));
    refused(&bed, "a person rolled back from");
    bed.pull(&["--allow-rollback"]).assert_exit(2);
    assert_eq!(bed.deployed().as_deref(), Some(merged.as_str()));
    assert_eq!(bed.status()["history"][0]["rollback"], true);
    let next = bed.revision("next", Some("alice"));
    bed.push();
    bed.pull(&[]).assert_exit(2);
    assert_eq!(bed.deployed().as_deref(), Some(next.as_str()));
}

#[test]
fn a_rollback_the_state_store_missed_is_not_undone_by_the_next_pull() {
    let Some((bed, c1)) = deployed_bed() else {
        return;
    };
    let bad = bed.revision("known bad", Some("alice"));
    bed.push();
    bed.pull(&[]).assert_exit(2);
    // A person rolls back to c1, and the pull is killed after the switch,
    // before recording it: the store still says `bad` is deployed.
    let state = bed.p("root/var/lib/datum/state.db");
    let aside = bed.p("state.db.before");
    std::fs::copy(&state, &aside).unwrap();
    bed.git("work", &["reset", "-q", "--hard", &c1]);
    bed.push();
    bed.pull(&["--allow-rollback"]).assert_exit(2);
    std::fs::copy(&aside, &state).unwrap();
    assert_eq!(bed.deployed().as_deref(), Some(c1.as_str()));
    // `bad` served again: the link's rollback is seen, and not undone.
    bed.git("work", &["reset", "-q", "--hard", &bad]);
    refused(&bed, &format!("a person rolled back from {}", &bad[..12]));
    assert_eq!(bed.deployed().as_deref(), Some(c1.as_str()));
}

#[test]
fn a_revision_the_cache_no_longer_holds_is_no_ancestor_and_stops_no_pull() {
    let Some((bed, c1)) = deployed_bed() else {
        return;
    };
    let bad = bed.revision("known bad", Some("alice"));
    bed.push();
    bed.pull(&[]).assert_exit(2);
    bed.git("work", &["reset", "-q", "--hard", &c1]);
    bed.push();
    bed.pull(&["--allow-rollback"]).assert_exit(2);
    // Weeks later git's garbage collection in the cache has dropped what
    // only the revision rolled back from held (made to happen now).
    let cache = bed.p("root/var/lib/datum/pull/cache.git");
    for args in [
        vec!["reflog", "expire", "--expire=now", "--all"],
        vec!["gc", "-q", "--prune=now"],
    ] {
        let out = Command::new("git")
            .arg(format!("--git-dir={}", cache.display()))
            .args(&args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    let held = Command::new("git")
        .arg(format!("--git-dir={}", cache.display()))
        .args(["cat-file", "-e", &bad])
        .status()
        .unwrap();
    assert!(!held.success(), "gc kept {bad}");
    // Going forward from c1 still works.
    let next = bed.revision("next", Some("alice"));
    bed.push();
    let out = bed.pull(&[]);
    out.assert_exit(2);
    assert_eq!(bed.deployed().as_deref(), Some(next.as_str()));
    // A revision built on the one rolled back from is still refused (it
    // brings that one along).
    bed.git("work", &["merge", "-q", "--no-edit", "-s", "ours", &bad]);
    bed.revision("merged", Some("alice"));
    refused(&bed, "a person rolled back from");

    // A cache made anew (removed by hand, or found unusable) holds nothing
    // deployed: an older revision is refused as going backwards, and a
    // person can still allow it.
    std::fs::remove_dir_all(&cache).unwrap();
    bed.git("work", &["reset", "-q", "--hard", &c1]);
    refused(
        &bed,
        &format!(
            "it does not descend from the deployed revision {}",
            &next[..12]
        ),
    );
    bed.pull(&["--allow-rollback"]).assert_exit(2);
    assert_eq!(bed.deployed().as_deref(), Some(c1.as_str()));
}

#[test]
fn a_revision_that_fails_lint_is_not_switched_in_and_the_old_one_stays() {
    let Some((bed, c1)) = deployed_bed() else {
        return;
    };
    bed.write(
        "work/base/bad.yaml",
        "datum: v1alpha1\ntype: File\nname: bad\ndesired:\n  path: /etc/bad\n  colour: red\n",
    );
    let bad = bed.commit("a typo", Some("alice"));
    let out = refused(&bed, "`datum lint` finds 1 error(s) in it");
    // The diagnostics, with file and line, come first.
    assert!(
        out.stderr().contains("base/bad.yaml:6:3"),
        "{}",
        out.stderr()
    );
    assert!(
        out.stderr()
            .contains(&format!("{} stays deployed", &c1[..12])),
        "{}",
        out.stderr()
    );
    assert!(
        !bed.checkouts().contains(&bad),
        "the refused checkout is left: {:?}",
        bed.checkouts()
    );
    assert_eq!(bed.deployed().as_deref(), Some(c1.as_str()));
}

/// `deploy` moved between pulls: the pull makes the new link, and says the
/// link made before is left behind, still pointing at the revision deployed
/// then (a reader of it would run that revision for good).
// The state store records where each pull's link is; a pull told another
// deploy would leave that link behind (a reader of it runs the old
// revision for good, then nothing once its checkout is pruned), so it is
// refused until a person moves the link with --move-deploy, which removes
// the old link only while it is still the one datum pull made.
#[test]
fn a_change_of_deploy_is_refused_until_a_person_moves_the_link() {
    let Some((bed, c1)) = deployed_bed() else {
        return;
    };
    let old = bed.link();
    let moved = bed.p("root/srv/repository");
    let before = bed.snapshot();
    let out = bed.pull(&["--deploy", "/srv/repository"]);
    out.assert_exit(1);
    for says in [
        format!(
            "deploy (--deploy) is {}, but the state store records the link the last pull made at {}, pointing at {}",
            moved.display(),
            old.display(),
            &c1[..12]
        ),
        "Run `datum pull --move-deploy` once".to_owned(),
        "; nothing was changed".to_owned(),
    ] {
        assert!(
            out.stderr().contains(&says),
            "`{says}` not in\n{}",
            out.stderr()
        );
    }
    assert_eq!(bed.snapshot(), before);
    // Refused before anything was made: not even the folder on the way.
    assert!(
        std::fs::symlink_metadata(bed.p("root/srv")).is_err(),
        "the refused pull made {}",
        bed.p("root/srv").display()
    );
    let out = bed.pull(&["--deploy", "/srv/repository", "--output", "json"]);
    out.assert_exit(1);
    let json: serde_json::Value = serde_json::from_str(&out.stdout()).unwrap();
    assert_eq!(json["reason"], "config", "{json}");
    assert_eq!(json["deployed"], c1.as_str(), "{json}");

    // A person moves it: the new link, and the old one gone.
    let out = bed.pull(&["--deploy", "/srv/repository", "--move-deploy"]);
    out.assert_exit(2);
    assert!(
        out.stderr().contains(&format!(
            "deploy moved to {}: the link made before at {} was removed",
            moved.display(),
            old.display()
        )),
        "{}",
        out.stderr()
    );
    assert!(
        out.stdout()
            .contains("the state store had it deployed already, its link is new"),
        "{}",
        out.stdout()
    );
    assert!(
        std::fs::symlink_metadata(&old).is_err(),
        "the old link is left"
    );
    assert_eq!(
        datum_pull::deployed_revision(&moved).map(|d| d.commit),
        Some(c1.clone())
    );
    assert_eq!(bed.status()["history"][0]["link"], "/srv/repository");
    // From then on the new link is the one followed: nothing more to say.
    let out = bed.pull(&["--deploy", "/srv/repository"]);
    out.assert_exit(0);
    assert!(!out.stderr().contains("warning"), "{}", out.stderr());
    let c2 = bed.revision("two", Some("alice"));
    bed.push();
    let out = bed.pull(&["--deploy", "/srv/repository"]);
    out.assert_exit(2);
    assert!(!out.stderr().contains("warning"), "{}", out.stderr());
    assert!(
        out.stdout().contains(&format!("it replaces {}", &c1[..12])),
        "{}",
        out.stdout()
    );

    // A link that is no longer Datum's is left as it is.
    std::fs::remove_file(&moved).unwrap();
    std::os::unix::fs::symlink("/srv/elsewhere", &moved).unwrap();
    let out = bed.pull(&["--move-deploy"]);
    out.assert_exit(2);
    assert!(
        out.stderr().contains(&format!(
            "the link made before at {} is left as it is: it points at /srv/elsewhere, not at a checkout of datum pull's",
            moved.display()
        )),
        "{}",
        out.stderr()
    );
    assert_eq!(
        std::fs::read_link(&moved).unwrap(),
        PathBuf::from("/srv/elsewhere")
    );
    assert_eq!(bed.deployed(), Some(c2.clone()));

    // Nor is one in a folder others may write to (they could have put it
    // there), nor one whose folder is gone.
    use std::os::unix::fs::PermissionsExt as _;
    bed.pull(&["--deploy", "/srv/a/repository", "--move-deploy"])
        .assert_exit(2);
    let folder = bed.p("root/srv/a");
    std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = bed.pull(&["--deploy", "/srv/b/repository", "--move-deploy"]);
    std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o755)).unwrap();
    out.assert_exit(2);
    assert!(
        out.stderr().contains(&format!(
            "the link made before at {} is left as it is: ",
            folder.join("repository").display()
        )) && out
            .stderr()
            .contains("its mode 0777 lets others write to it"),
        "{}",
        out.stderr()
    );
    assert!(
        std::fs::symlink_metadata(folder.join("repository")).is_ok(),
        "the old link went"
    );
    std::fs::remove_dir_all(bed.p("root/srv/b")).unwrap();
    let out = bed.pull(&["--move-deploy"]);
    out.assert_exit(2);
    assert!(
        out.stderr().contains(&format!(
            "the link made before at {} is left as it is: it is not there",
            bed.p("root/srv/b/repository").display()
        )),
        "{}",
        out.stderr()
    );
    assert_eq!(bed.deployed(), Some(c2.clone()));

    // A deployment recorded before the store kept the link (schema 10):
    // where the old link is is not known, and the pull says so.
    if have("sqlite3", "sqlite3") {
        let db = bed.p("root/var/lib/datum/state.db");
        let out = Command::new("sqlite3")
            .arg(&db)
            .arg("UPDATE deployments SET link = NULL")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let out = bed.pull(&["--deploy", "/srv/repository2"]);
        out.assert_exit(2);
        assert!(
            out.stderr()
                .contains("the link made before is left where it was"),
            "{}",
            out.stderr()
        );
    }
}

#[test]
fn a_switch_the_state_store_missed_is_recorded_by_the_next_pull() {
    let Some((bed, c1)) = deployed_bed() else {
        return;
    };
    // The store as it is before the next switch: what a pull killed after
    // renaming the link and before recording it leaves (seen with SIGKILL
    // at random moments of real pulls).
    let state = bed.p("root/var/lib/datum/state.db");
    let aside = bed.p("state.db.before");
    std::fs::copy(&state, &aside).unwrap();
    let c2 = bed.revision("two", Some("alice"));
    bed.push();
    bed.pull(&[]).assert_exit(2);
    std::fs::copy(&aside, &state).unwrap();
    assert_eq!(bed.status()["history"][0]["revision"], c1.as_str());

    // The next pull has nothing to switch, and records what the link says.
    let out = bed.pull(&[]);
    out.assert_exit(0);
    assert!(out.stderr().contains("recorded now"), "{}", out.stderr());
    let history = bed.status()["history"].clone();
    assert_eq!(history[0]["revision"], c2.as_str(), "{history}");
    assert_eq!(history[0]["previous"], c1.as_str(), "{history}");
    assert_eq!(history[0]["signer"], "alice@example.com", "{history}");
    assert_eq!(history[0]["rollback"], false, "{history}");
    assert_eq!(history.as_array().unwrap().len(), 2, "{history}");
    // Once: the pull after it is quiet.
    let out = bed.pull(&[]);
    out.assert_exit(0);
    assert!(!out.stderr().contains("warning"), "{}", out.stderr());
    assert_eq!(bed.status()["history"].as_array().unwrap().len(), 2);
}

#[test]
fn a_switch_the_state_store_missed_is_recorded_first_when_the_remote_has_moved_since() {
    let Some((bed, c1)) = deployed_bed() else {
        return;
    };
    // A pull killed after switching the link to c2 and before recording it.
    let state = bed.p("root/var/lib/datum/state.db");
    let aside = bed.p("state.db.before");
    std::fs::copy(&state, &aside).unwrap();
    let c2 = bed.revision("two", Some("alice"));
    bed.push();
    bed.pull(&[]).assert_exit(2);
    std::fs::copy(&aside, &state).unwrap();
    // Switched at a time of its own, well before the next pull.
    let switched = 1_700_000_000;
    let touched = Command::new("touch")
        .args(["-h", "-d", &format!("@{switched}")])
        .arg(bed.link())
        .status()
        .unwrap();
    assert!(touched.success());
    // The remote moves on before the next pull.
    let c3 = bed.revision("three", Some("alice"));
    bed.push();
    let out = bed.pull(&[]);
    out.assert_exit(2);
    assert!(out.stderr().contains("recorded now"), "{}", out.stderr());
    assert_eq!(bed.deployed().as_deref(), Some(c3.as_str()));
    let history = bed.status()["history"].clone();
    assert_eq!(history.as_array().unwrap().len(), 3, "{history}");
    assert_eq!(history[0]["revision"], c3.as_str(), "{history}");
    assert_eq!(history[0]["previous"], c2.as_str(), "{history}");
    assert_eq!(history[1]["revision"], c2.as_str(), "{history}");
    assert_eq!(history[1]["previous"], c1.as_str(), "{history}");
    assert_eq!(
        history[1]["deployed_at"], "2023-11-14T22:13:20Z",
        "{history}"
    );
    assert_eq!(history[1]["signer"], "alice@example.com", "{history}");
    assert_eq!(history[1]["rollback"], false, "{history}");
    assert_eq!(history[2]["revision"], c1.as_str(), "{history}");
    // Once: the pull after it is quiet.
    let out = bed.pull(&[]);
    out.assert_exit(0);
    assert!(!out.stderr().contains("warning"), "{}", out.stderr());
    assert_eq!(bed.status()["history"].as_array().unwrap().len(), 3);

    // A refused revision changes nothing, a missed switch's record
    // included: the pull that next goes well records it.
    std::fs::copy(&state, &aside).unwrap();
    let c4 = bed.revision("four", Some("alice"));
    bed.push();
    bed.pull(&[]).assert_exit(2);
    std::fs::copy(&aside, &state).unwrap();
    bed.revision("unsigned", None);
    refused(&bed, "the commit is not signed");
    let c5 = bed.revision("five", Some("alice"));
    bed.push();
    bed.pull(&[]).assert_exit(2);
    let history = bed.status()["history"].clone();
    assert_eq!(history[0]["revision"], c5.as_str(), "{history}");
    assert_eq!(history[0]["previous"], c4.as_str(), "{history}");
    assert_eq!(history[1]["revision"], c4.as_str(), "{history}");
    assert_eq!(history[1]["previous"], c3.as_str(), "{history}");
}

#[test]
fn a_pull_killed_mid_checkout_leaves_the_deployed_revision_whole_and_the_next_pull_completes() {
    let Some((bed, c1)) = deployed_bed() else {
        return;
    };
    // A revision big enough for a checkout to take a while.
    let block: String = (0..1024).map(|i| format!("{i:031}\n")).collect();
    for i in 0..2000 {
        bed.write(
            &format!("work/base/files/f{i:04}.txt"),
            &format!("{i}\n{block}"),
        );
    }
    let big = bed.revision("big", Some("alice"));
    bed.push();

    let url = bed.url();
    let signers = bed.p("allowed_signers").display().to_string();
    let mut child = Killed(
        bed.datum(&["pull", "--url", &url, "--allowed-signers", &signers])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let checkouts = bed.p("root/var/lib/datum/pull/checkouts");
    let partial = wait(Duration::from_secs(60), || {
        std::fs::read_dir(&checkouts)
            .ok()?
            .filter_map(Result::ok)
            .find_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                (name.starts_with(".partial-") && e.path().join("base/files").exists())
                    .then_some(e.path())
            })
    })
    .expect("the pull never started writing its checkout");
    let pid = child.0.id().to_string();
    // Frozen mid-checkout, then killed: no chance to clean up.
    assert!(
        Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success()
    );
    let written = std::fs::read_dir(partial.join("base/files"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert!(
        written < 2000,
        "the checkout was complete before the kill ({written} files)"
    );
    assert!(
        Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .unwrap()
            .success()
    );
    let _ = child.0.wait();
    assert!(
        partial.exists(),
        "the killed pull's partial checkout is there"
    );

    // The deployed revision is whole and still the one the link shows.
    assert_eq!(bed.deployed().as_deref(), Some(c1.as_str()));
    let link = bed.link().display().to_string();
    Run(bed.datum(&["--repo", &link, "lint"]).output().unwrap()).assert_exit(0);

    // The next pull completes and leaves no debris behind.
    let out = bed.pull(&[]);
    out.assert_exit(2);
    assert_eq!(bed.deployed().as_deref(), Some(big.as_str()));
    assert!(!partial.exists());
    let names = bed.checkouts();
    assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
    let files = std::fs::read_dir(bed.link().join("base/files"))
        .unwrap()
        .count();
    assert_eq!(files, 2000);
    let leftovers: Vec<_> = std::fs::read_dir(bed.p("root/etc/datum"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 2, "{leftovers:?}"); // host.yaml and the link
}

#[test]
fn the_debris_of_killed_git_commands_and_switches_is_swept_by_the_next_pull() {
    if !tools() {
        return;
    }
    let bed = Bed::new();
    bed.revision("one", Some("alice"));
    bed.push();
    bed.pull(&[]).assert_exit(2);
    let cache = bed.p("root/var/lib/datum/pull/cache.git");
    // What a git killed by SIGKILL (or a power cut) leaves: lock files that
    // would make every later fetch fail, and temporary packs.
    for f in [
        "packed-refs.lock",
        "refs/datum/incoming.lock",
        "objects/pack/tmp_pack_dead",
    ] {
        bed.write(&format!("root/var/lib/datum/pull/cache.git/{f}"), "x");
    }
    // A switch killed between staging the new link and renaming it, and
    // something else staged in the same folder (another file's apply),
    // which is not the pull's to sweep.
    std::fs::create_dir(bed.p("root/etc/datum/.datum.stage.dead")).unwrap();
    std::os::unix::fs::symlink(
        "nowhere",
        bed.p("root/etc/datum/.datum.stage.dead/repository"),
    )
    .unwrap();
    bed.write("root/etc/datum/.datum.stage.other/pull.yaml", "x");
    bed.write(
        "root/var/lib/datum/pull/checkouts/.partial-dead-1/half",
        "x",
    );
    let c2 = bed.revision("two", Some("alice"));
    bed.push();
    bed.pull(&[]).assert_exit(2);
    assert_eq!(bed.deployed().as_deref(), Some(c2.as_str()));
    for f in [
        "packed-refs.lock",
        "refs/datum/incoming.lock",
        "objects/pack/tmp_pack_dead",
    ] {
        assert!(!cache.join(f).exists(), "{f} left");
    }
    assert!(std::fs::symlink_metadata(bed.p("root/etc/datum/.datum.stage.dead")).is_err());
    assert!(
        bed.p("root/etc/datum/.datum.stage.other/pull.yaml")
            .exists()
    );
    assert!(
        !bed.p("root/var/lib/datum/pull/checkouts/.partial-dead-1")
            .exists()
    );

    // Old checkouts are pruned: the deployed one and two others are kept.
    for i in 3..7 {
        bed.revision(&format!("r{i}"), Some("alice"));
        bed.push();
        bed.pull(&[]).assert_exit(2);
    }
    assert_eq!(bed.checkouts().len(), 3, "{:?}", bed.checkouts());
    assert!(bed.checkouts().contains(&bed.deployed().unwrap()));
}

/// A repository of `n` File resources in one manifest each, all declaring
/// `value` as their content.
/// The link and the checkouts, which a refused pull must leave alone.
fn deployed_state(bed: &Bed) -> (Option<PathBuf>, Vec<String>) {
    (std::fs::read_link(bed.link()).ok(), bed.checkouts())
}

#[test]
fn the_boundary_holds_for_pull_links_on_its_way_are_refused_and_an_unusable_state_store_stops_it() {
    let Some((bed, c1)) = deployed_bed() else {
        return;
    };
    let outside = tempfile::tempdir().unwrap();
    let canary = outside.path().join("canary.db");
    std::fs::write(&canary, b"outside, must stay").unwrap();
    bed.revision("two", Some("alice"));
    bed.push();
    let state = bed.p("root/var/lib/datum/state.db");
    let before = deployed_state(&bed);

    // A damaged state store: refused, left byte for byte, nothing switched.
    let good = std::fs::read(&state).unwrap();
    std::fs::write(&state, b"not a database at all, but someone's data").unwrap();
    let out = bed.pull(&[]);
    out.assert_exit(1);
    assert!(
        out.stderr().contains("state.db: unusable"),
        "{}",
        out.stderr()
    );
    assert_eq!(
        std::fs::read(&state).unwrap(),
        b"not a database at all, but someone's data"
    );
    assert_eq!(deployed_state(&bed), before);
    assert_eq!(bed.deployed().as_deref(), Some(c1.as_str()));

    // The state store replaced by a link to a file elsewhere: refused, and
    // the file it points at is never opened for writing.
    std::fs::remove_file(&state).unwrap();
    std::os::unix::fs::symlink(&canary, &state).unwrap();
    let out = bed.pull(&[]);
    out.assert_exit(1);
    assert!(
        out.stderr().contains("state.db: a symlink"),
        "{}",
        out.stderr()
    );
    assert_eq!(std::fs::read(&canary).unwrap(), b"outside, must stay");
    assert_eq!(deployed_state(&bed), before);
    std::fs::remove_file(&state).unwrap();
    std::fs::write(&state, &good).unwrap();

    // The link's folder swapped for a link to a folder elsewhere: refused by
    // the walk, and nothing is written where it points.
    let etc_datum = bed.p("root/etc/datum");
    let moved = outside.path().join("etc-datum");
    std::fs::rename(&etc_datum, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &etc_datum).unwrap();
    let listing = |p: &Path| {
        let mut names: Vec<_> = std::fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    };
    let moved_before = listing(&moved);
    let out = bed.pull(&[]);
    out.assert_exit(1);
    assert!(
        out.stderr()
            .contains("etc/datum on its way is a symbolic link"),
        "{}",
        out.stderr()
    );
    assert_eq!(listing(&moved), moved_before);
    assert_eq!(
        std::fs::read_link(moved.join("repository")).ok(),
        before.0,
        "the link behind the folder link was switched"
    );
    std::fs::remove_file(&etc_datum).unwrap();
    std::fs::rename(&moved, &etc_datum).unwrap();

    // The pull folder swapped for a link: Datum's own folder is refused,
    // never written through.
    let pull_dir = bed.p("root/var/lib/datum/pull");
    let pull_moved = outside.path().join("pull");
    std::fs::rename(&pull_dir, &pull_moved).unwrap();
    std::os::unix::fs::symlink(&pull_moved, &pull_dir).unwrap();
    let pull_before = listing(&pull_moved);
    let checkouts_before = listing(&pull_moved.join("checkouts"));
    let out = bed.pull(&[]);
    out.assert_exit(1);
    assert!(
        out.stderr().contains("pull: it is not a directory"),
        "{}",
        out.stderr()
    );
    assert_eq!(listing(&pull_moved), pull_before);
    assert_eq!(listing(&pull_moved.join("checkouts")), checkouts_before);
    std::fs::remove_file(&pull_dir).unwrap();
    std::fs::rename(&pull_moved, &pull_dir).unwrap();

    // Everything back in place: the next pull goes forward.
    bed.pull(&[]).assert_exit(2);
    assert_ne!(bed.deployed().as_deref(), Some(c1.as_str()));
}

#[test]
fn a_link_folder_someone_else_may_write_or_owns_is_refused_and_nothing_is_switched() {
    use std::os::unix::fs::PermissionsExt as _;
    let Some((bed, c1)) = deployed_bed() else {
        return;
    };
    bed.revision("two", Some("alice"));
    bed.push();
    let mode = |rel: &str, m: u32| {
        std::fs::set_permissions(bed.p(rel), std::fs::Permissions::from_mode(m)).unwrap();
    };
    // Anyone could replace the link (or the folder holding it) and point
    // the agent at a repository of their own: refused, nothing switched.
    for (rel, m, says) in [
        (
            "root/etc/datum",
            0o777,
            "its mode 0777 lets others write to it",
        ),
        (
            "root/etc/datum",
            0o1777,
            "its mode 1777 lets others write to it",
        ),
        (
            "root/etc/datum",
            0o775,
            "its mode 0775 lets others write to it",
        ),
        (
            "root/etc",
            0o777,
            "etc: its mode 0777 lets others write to it",
        ),
    ] {
        mode(rel, m);
        let before = bed.snapshot();
        let out = bed.pull(&[]);
        out.assert_exit(1);
        assert!(out.stderr().contains(says), "{rel}: {}", out.stderr());
        assert!(
            out.stderr().contains("nothing was changed"),
            "{}",
            out.stderr()
        );
        assert_eq!(bed.snapshot(), before, "{rel} {m:o}: something changed");
        assert_eq!(bed.deployed().as_deref(), Some(c1.as_str()));
        mode(rel, 0o755);
    }
    // A folder another user owns (they may chmod it at will).
    let nobody = std::os::unix::fs::chown(bed.p("root/etc/datum"), Some(65534), None);
    if nobody.is_ok() {
        let before = bed.snapshot();
        let out = bed.pull(&[]);
        out.assert_exit(1);
        assert!(
            out.stderr().contains("it belongs to uid 65534"),
            "{}",
            out.stderr()
        );
        assert_eq!(bed.snapshot(), before);
        std::os::unix::fs::chown(bed.p("root/etc/datum"), Some(0), None).unwrap();
    }
    // Owned by root and writable by it only: the pull goes forward.
    bed.pull(&[]).assert_exit(2);
    assert_ne!(bed.deployed().as_deref(), Some(c1.as_str()));
}

#[test]
fn a_link_folder_refused_on_a_first_pull_leaves_no_folder_of_datums_behind() {
    use std::os::unix::fs::PermissionsExt as _;
    if !tools() {
        return;
    }
    let bed = Bed::new();
    bed.revision("one", Some("alice"));
    bed.push();
    // Before anything was ever pulled here: the refusal says nothing was
    // changed, and nothing was (no pull folder, no lock, no checkouts).
    for (rel, m) in [("root/etc/datum", 0o777), ("root/etc", 0o777)] {
        std::fs::set_permissions(bed.p(rel), std::fs::Permissions::from_mode(m)).unwrap();
        let out = bed.pull(&[]);
        out.assert_exit(1);
        assert!(
            out.stderr().contains("lets others write to it"),
            "{}",
            out.stderr()
        );
        assert!(
            out.stderr().contains("nothing was changed"),
            "{}",
            out.stderr()
        );
        assert!(
            std::fs::symlink_metadata(bed.p("root/var/lib/datum")).is_err(),
            "{rel}: the refused pull made var/lib/datum"
        );
        std::fs::set_permissions(bed.p(rel), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // Nor does a folder where the link goes (a repository put there by
    // hand), which is never replaced.
    std::fs::create_dir(bed.link()).unwrap();
    let out = bed.pull(&[]);
    out.assert_exit(1);
    assert!(
        out.stderr()
            .contains("is a directory, not a link datum pull manages")
            && out.stderr().contains("nothing was changed"),
        "{}",
        out.stderr()
    );
    assert!(
        std::fs::symlink_metadata(bed.p("root/var/lib/datum")).is_err(),
        "the refused pull made var/lib/datum"
    );
    std::fs::remove_dir(bed.link()).unwrap();
    // Nor does an option naming a file that is not there (a bundle, the
    // trust root): nothing of the host is needed to say so.
    let signers = bed.p("allowed_signers").display().to_string();
    let gone = bed.p("gone").display().to_string();
    let url = bed.url();
    for (args, says) in [
        (
            [
                "--bundle",
                gone.as_str(),
                "--allowed-signers",
                signers.as_str(),
            ],
            "--bundle",
        ),
        (
            ["--url", url.as_str(), "--allowed-signers", gone.as_str()],
            "allowed",
        ),
    ] {
        let mut all = vec!["pull"];
        all.extend(args);
        let out = Run(bed.datum(&all).output().unwrap());
        out.assert_exit(1);
        assert!(
            out.stderr().contains(says) && out.stderr().contains(&gone),
            "{}",
            out.stderr()
        );
        assert!(
            std::fs::symlink_metadata(bed.p("root/var/lib/datum")).is_err(),
            "{says}: the refused pull made var/lib/datum"
        );
    }
    // A link folder missing on the way is made only when a revision is
    // switched in: a pull refused makes none.
    std::fs::remove_dir_all(bed.p("root/etc")).unwrap();
    bed.revision("by mallory", Some("mallory"));
    refused(&bed, "it is signed with a key that is not in");
    assert!(
        std::fs::symlink_metadata(bed.p("root/etc")).is_err(),
        "the refused pull made root/etc"
    );
    bed.git("work", &["reset", "-q", "--hard", "HEAD~1"]);
    bed.push();
    bed.pull(&[]).assert_exit(2);
    assert!(bed.deployed().is_some());
}

fn many_files(bed: &Bed, n: usize, value: &str) {
    bed.write("work/datum.yaml", SETTINGS);
    for i in 0..n {
        bed.write(
            &format!("work/base/f{i:03}.yaml"),
            &format!("datum: v1alpha1\ntype: File\nname: f{i}\ndesired:\n  path: /srv/f{i}\n  content: \"{value}\\n\"\n"),
        );
    }
}

#[test]
fn a_reader_during_switches_sees_one_whole_revision_every_time() {
    if !tools() {
        return;
    }
    let bed = Arc::new(Bed::new());
    many_files(&bed, 150, "rev 0");
    bed.commit("rev 0", Some("alice"));
    bed.push();
    bed.pull(&[]).assert_exit(2);

    // Readers compile the repository through the link, back to back, the
    // way every command and every agent load does.
    let stop = Arc::new(AtomicBool::new(false));
    let seen: Arc<Mutex<Vec<usize>>> = Arc::default();
    let mixed: Arc<Mutex<Vec<String>>> = Arc::default();
    let link = bed.link().display().to_string();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (bed, stop, seen, mixed, link) = (
                Arc::clone(&bed),
                Arc::clone(&stop),
                Arc::clone(&seen),
                Arc::clone(&mixed),
                link.clone(),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let out = bed
                        .datum(&["--repo", &link, "--recompile", "catalogue"])
                        .output()
                        .unwrap();
                    if !out.status.success() {
                        mixed
                            .lock()
                            .unwrap()
                            .push(String::from_utf8_lossy(&out.stderr).into_owned());
                        continue;
                    }
                    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                    let mut sums: Vec<&str> = json["resources"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|r| r["content_sha256"].as_str().unwrap())
                        .collect();
                    sums.sort();
                    sums.dedup();
                    if sums.len() != 1 {
                        mixed
                            .lock()
                            .unwrap()
                            .push(format!("{} contents in one catalogue", sums.len()));
                    }
                    seen.lock().unwrap().push(sums.len());
                }
            })
        })
        .collect();
    for k in 1..=6 {
        many_files(&bed, 150, &format!("rev {k}"));
        bed.commit(&format!("rev {k}"), Some("alice"));
        bed.push();
        bed.pull(&[]).assert_exit(2);
    }
    stop.store(true, Ordering::SeqCst);
    for r in readers {
        r.join().unwrap();
    }
    let mixed = mixed.lock().unwrap();
    assert!(mixed.is_empty(), "a reader saw half a revision: {mixed:?}");
    assert!(seen.lock().unwrap().len() >= 6, "the readers hardly ran");
}

/// The agent with `pull.yaml` under the root.
struct Agent {
    child: Killed,
    log: Arc<Mutex<Vec<String>>>,
    addr: SocketAddr,
}

impl Agent {
    fn start(bed: &Bed, interval: &str) -> Agent {
        let mut child = bed
            .datum(&[
                "agent",
                "--listen",
                "127.0.0.1:0",
                "--pull-interval",
                interval,
            ])
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
        let child = Killed(child);
        let line = wait(Duration::from_secs(30), || {
            log.lock()
                .unwrap()
                .iter()
                .find(|l| l.contains("serving /metrics"))
                .cloned()
        })
        .unwrap_or_else(|| {
            panic!(
                "the agent did not start:\n{}",
                log.lock().unwrap().join("\n")
            )
        });
        let addr = line
            .rsplit("http://")
            .next()
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        Agent { child, log, addr }
    }

    fn metrics(&self) -> String {
        let mut s = TcpStream::connect_timeout(&self.addr, Duration::from_secs(5)).unwrap();
        write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    }

    #[track_caller]
    fn wait_metric(&self, line: &str) {
        let seen = wait(Duration::from_secs(30), || {
            self.metrics().contains(line).then_some(())
        });
        assert!(
            seen.is_some(),
            "`{line}` not in /metrics:\n{}\nlog:\n{}",
            self.metrics(),
            self.log.lock().unwrap().join("\n")
        );
    }
}

#[test]
fn the_agent_pulls_on_its_interval_and_reloads_a_new_revision_in_process() {
    if !tools() {
        return;
    }
    let bed = Bed::new();
    bed.write(
        "root/etc/datum/pull.yaml",
        &format!(
            "url: {}\nref: main\nallowed_signers: /etc/datum/allowed_signers\n",
            bed.url()
        ),
    );
    std::fs::copy(
        bed.p("allowed_signers"),
        bed.p("root/etc/datum/allowed_signers"),
    )
    .unwrap();
    let c1 = bed.revision("one", Some("alice"));
    bed.push();
    // Nothing deployed yet: the agent pulls before its first load.
    let agent = Agent::start(&bed, "1s");
    agent.wait_metric(&format!(
        "datum_repository_revision_info{{revision=\"{c1}\"}} 1"
    ));
    // That first pull is counted, and its time is the last success (the
    // interval's pulls find c1 deployed already).
    agent.wait_metric("datum_pulls_total{outcome=\"deployed\"} 1");
    let last = agent
        .metrics()
        .lines()
        .find_map(|l| {
            l.strip_prefix("datum_pull_last_success_timestamp_seconds ")
                .map(|v| v.parse::<f64>().unwrap())
        })
        .unwrap();
    assert!(last > 1.0e9, "last pull at {last}");
    let pid = agent.child.0.id();

    let c2 = bed.revision("two", Some("alice"));
    bed.push();
    agent.wait_metric(&format!(
        "datum_repository_revision_info{{revision=\"{c2}\"}} 1"
    ));
    agent.wait_metric("datum_pulls_total{outcome=\"deployed\"}");
    assert!(
        !agent.metrics().contains(&c1),
        "the old revision still has a series"
    );
    let log = agent.log.lock().unwrap().join("\n");
    assert!(log.contains("reloaded:"), "{log}");

    // A refused revision is counted; the running one stays.
    bed.revision("unsigned", None);
    bed.push();
    agent.wait_metric("datum_pull_failures_total{reason=\"unsigned\"}");
    assert!(agent.metrics().contains(&format!(
        "datum_repository_revision_info{{revision=\"{c2}\"}} 1"
    )));
    assert_eq!(bed.deployed().as_deref(), Some(c2.as_str()));
    // Still the same process: reloaded in place, not restarted.
    assert_eq!(agent.child.0.id(), pid);
}

#[test]
fn a_bundle_carries_a_revision_to_a_host_without_git_access_and_is_verified_the_same_way() {
    if !tools() {
        return;
    }
    let bed = Bed::new();
    let c1 = bed.revision("one", Some("alice"));
    let work = bed.p("work").display().to_string();
    let bundle = bed.p("one.bundle").display().to_string();
    let made = Run(Command::new(DATUM)
        .args(["bundle", "--from", &work, "--ref", "main", &bundle])
        .output()
        .unwrap());
    made.assert_exit(0);
    assert!(made.stdout().contains(&c1[..12]), "{}", made.stdout());
    let signers = bed.p("allowed_signers").display().to_string();
    let pull = |bundle: &str| {
        Run(bed
            .datum(&[
                "pull",
                "--bundle",
                bundle,
                "--ref",
                "main",
                "--allowed-signers",
                &signers,
            ])
            .output()
            .unwrap())
    };
    let out = pull(&bundle);
    out.assert_exit(2);
    assert_eq!(bed.deployed().as_deref(), Some(c1.as_str()));
    assert_eq!(
        bed.status()["history"][0]["source"],
        format!("bundle:{bundle}").as_str()
    );

    // An incremental bundle on top of what the host has.
    let c2 = bed.revision("two", Some("alice"));
    let inc = bed.p("two.bundle").display().to_string();
    Run(Command::new(DATUM)
        .args(["bundle", "--from", &work, "--since", &c1, &inc])
        .output()
        .unwrap())
    .assert_exit(0);
    pull(&inc).assert_exit(2);
    assert_eq!(bed.deployed().as_deref(), Some(c2.as_str()));

    // An unsigned revision in a bundle is refused like a fetched one.
    bed.revision("unsigned", None);
    let bad = bed.p("bad.bundle").display().to_string();
    Run(Command::new(DATUM)
        .args(["bundle", "--from", &work, "--since", &c2, &bad])
        .output()
        .unwrap())
    .assert_exit(0);
    let out = pull(&bad);
    out.assert_exit(1);
    assert!(
        out.stderr().contains("the commit is not signed"),
        "{}",
        out.stderr()
    );
    assert_eq!(bed.deployed().as_deref(), Some(c2.as_str()));

    // A bundle that is not there (a typo, a medium not mounted) or is a
    // folder is said to be so, not as git says of a path it cannot use
    // ('does not appear to be a git repository ... access rights').
    let before = bed.snapshot();
    for (path, says) in [
        (bed.p("typo.bundle"), "no such file"),
        (bed.p("keys"), "not a file"),
    ] {
        let out = pull(&path.display().to_string());
        out.assert_exit(1);
        let want = format!("--bundle {}: {says}", path.display());
        assert!(
            out.stderr().contains(&want) && out.stderr().contains("nothing was changed"),
            "`{want}` not in\n{}",
            out.stderr()
        );
        assert!(!out.stderr().contains("git repository"), "{}", out.stderr());
    }
    assert_eq!(bed.snapshot(), before);
}

#[test]
fn datum_bundle_takes_a_linked_work_tree_and_says_plainly_what_it_cannot_bundle() {
    if !tools() {
        return;
    }
    let bed = Bed::new();
    let c1 = bed.revision("one", Some("alice"));
    let bundle = |from: &Path, extra: &[&str], file: &str| {
        let file = bed.p(file).display().to_string();
        let mut args = vec!["bundle", "--from"];
        let from = from.display().to_string();
        args.push(&from);
        args.extend_from_slice(extra);
        args.push(&file);
        Run(Command::new(DATUM).args(&args).output().unwrap())
    };
    // A linked work tree (its .git is a file naming the git folder).
    bed.git(
        "work",
        &["worktree", "add", "-q", "-b", "side", "../linked"],
    );
    let made = bundle(&bed.p("linked"), &["--ref", "main"], "linked.bundle");
    made.assert_exit(0);
    assert!(made.stdout().contains(&c1[..12]), "{}", made.stdout());
    let signers = bed.p("allowed_signers").display().to_string();
    let file = bed.p("linked.bundle").display().to_string();
    Run(bed
        .datum(&[
            "pull",
            "--bundle",
            &file,
            "--ref",
            "main",
            "--allowed-signers",
            &signers,
        ])
        .output()
        .unwrap())
    .assert_exit(2);
    assert_eq!(bed.deployed().as_deref(), Some(c1.as_str()));

    // The repository named through `..` or a link, as an operator names
    // it from inside (`--from ..`): git runs in its git folder, which holds
    // the branch's loose ref file `refs/heads/main`, and must know it is
    // there and not in a work tree, or it takes the name for a file too.
    std::os::unix::fs::symlink(bed.p("work"), bed.p("work-link")).unwrap();
    for from in [bed.p("work/base/.."), bed.p("work-link")] {
        assert!(from.join(".git/refs/heads/main").is_file());
        let made = bundle(&from, &["--ref", "main"], "spelled.bundle");
        made.assert_exit(0);
        assert!(made.stdout().contains(&c1[..12]), "{}", made.stdout());
        std::fs::remove_file(bed.p("spelled.bundle")).unwrap();
    }

    // HEAD is bundled as the branch it is on, and the host told that name.
    let made = bundle(&bed.p("work"), &["--ref", "HEAD"], "head.bundle");
    made.assert_exit(0);
    assert!(
        made.stdout()
            .contains("datum pull --bundle FILE --ref main"),
        "{}",
        made.stdout()
    );

    // What cannot be bundled is said as it is, without git's hints.
    let work = bed.p("work");
    for (from, extra, says) in [
        (bed.p("keys"), vec!["--ref", "main"], "not a git repository"),
        (
            work.clone(),
            vec!["--ref", c1.as_str()],
            "name a branch or a tag",
        ),
        (
            work.clone(),
            vec!["--ref", "main", "--since", "main"],
            "there is nothing to bundle",
        ),
    ] {
        let out = bundle(&from, &extra, "bad.bundle");
        out.assert_exit(1);
        assert!(out.stderr().contains(says), "{extra:?}: {}", out.stderr());
        assert!(!out.stderr().contains("hint"), "{}", out.stderr());
        assert!(!bed.p("bad.bundle").exists());
    }
}

#[test]
fn datum_bundle_names_a_from_folder_that_is_missing_or_not_a_folder_not_git() {
    if !tools() {
        return;
    }
    let bed = Bed::new();
    bed.revision("one", Some("alice"));
    // A linked work tree whose git folder was removed (git worktree prune).
    bed.git(
        "work",
        &["worktree", "add", "-q", "-b", "side", "../linked"],
    );
    let stale = bed.p("work/.git/worktrees/linked");
    std::fs::remove_dir_all(&stale).unwrap();
    for (from, says) in [
        (bed.p("missing"), "no such folder".to_owned()),
        (bed.p("allowed_signers"), "not a folder".to_owned()),
        (
            bed.p("linked"),
            format!("{}, which is not a folder", stale.display()),
        ),
    ] {
        let file = bed.p("x.bundle");
        let out = Run(Command::new(DATUM)
            .arg("bundle")
            .arg("--from")
            .arg(&from)
            .arg(&file)
            .output()
            .unwrap());
        out.assert_exit(1);
        assert!(
            out.stderr().contains(&format!("--from {}", from.display()))
                && out.stderr().contains(&says)
                && !out.stderr().contains("cannot run"),
            "{}",
            out.stderr()
        );
        assert!(!file.exists());
    }
}

#[test]
fn a_tree_holding_a_git_folder_is_refused_at_fetch() {
    let Some((bed, c1)) = deployed_bed() else {
        return;
    };
    // A tree with `.git/config` in it, which `git add` would never make:
    // built by hand, and signed by alice (the signature is not the point).
    let config_blob = bed.git_input(
        &["hash-object", "-w", "--stdin"],
        b"[core]\n\tfsmonitor = touch /tmp/datum-pwned\n",
    );
    let dot_git = bed.git_input(
        &["mktree"],
        format!("100644 blob {config_blob}\tconfig\n").as_bytes(),
    );
    bed.signed_tree(&c1, &format!("040000 tree {dot_git}\t.git\n"), "hostile");
    bed.push();
    let before = bed.snapshot();
    let out = bed.pull(&[]);
    out.assert_exit(1);
    assert!(
        out.stderr().contains("cannot fetch main"),
        "{}",
        out.stderr()
    );
    assert!(
        out.stderr().contains("nothing was changed"),
        "{}",
        out.stderr()
    );
    assert_eq!(bed.snapshot(), before);
    assert!(!Path::new("/tmp/datum-pwned").exists());
}

#[test]
fn a_revoked_key_is_refused_and_a_revocation_list_ssh_keygen_cannot_read_is_not_taken_for_one() {
    let Some((bed, c1)) = deployed_bed() else {
        return;
    };
    let revoked = bed.p("revoked_keys");
    let pull_with = |extra: &[&str]| {
        let path = revoked.display().to_string();
        let mut args = vec!["--revoked-keys", path.as_str()];
        args.extend_from_slice(extra);
        bed.pull(&args)
    };
    let c2 = bed.revision("two", Some("alice"));
    bed.push();
    let before = bed.snapshot();

    // alice's key in the list (a public key per line, or a KRL): refused.
    std::fs::write(&revoked, format!("{}\n", bed.public("alice"))).unwrap();
    let out = pull_with(&[]);
    out.assert_exit(1);
    assert!(
        out.stderr().contains("with a revoked key"),
        "{}",
        out.stderr()
    );
    assert_eq!(bed.snapshot(), before);
    let krl = Command::new("ssh-keygen")
        .args(["-q", "-k", "-f"])
        .arg(&revoked)
        .arg(bed.p("keys/alice.pub"))
        .output()
        .unwrap();
    assert!(krl.status.success(), "{krl:?}");
    let out = pull_with(&["--output", "json"]);
    out.assert_exit(1);
    let json: serde_json::Value = serde_json::from_str(&out.stdout()).unwrap();
    assert_eq!(json["reason"], "revoked_key", "{json}");

    // A list ssh-keygen cannot read (written in allowed_signers' format,
    // naming mallory only): every signature fails with it, alice's too,
    // but her key is not revoked: the list is named as unusable.
    std::fs::write(
        &revoked,
        format!("mallory@example.com {}\n", bed.public("mallory")),
    )
    .unwrap();
    let out = pull_with(&["--output", "json"]);
    out.assert_exit(1);
    let json: serde_json::Value = serde_json::from_str(&out.stdout()).unwrap();
    let message = json["message"].as_str().unwrap();
    assert_ne!(json["reason"], "revoked_key", "{json}");
    assert!(
        !message.contains("revoked key")
            && message.contains(&revoked.display().to_string())
            && message.contains("cannot be used")
            && message.contains("nothing was changed"),
        "{message}"
    );
    assert_eq!(json["reason"], "config", "{json}");
    assert_eq!(bed.snapshot(), before);

    // mallory's key in a list it reads: alice's revision goes through.
    std::fs::write(&revoked, format!("{}\n", bed.public("mallory"))).unwrap();
    pull_with(&[]).assert_exit(2);
    assert_eq!(bed.deployed().as_deref(), Some(c2.as_str()));
    assert_ne!(c1, c2);
}

#[test]
fn a_commit_object_too_large_to_read_is_refused_as_the_revisions_fault() {
    let Some((bed, c1)) = deployed_bed() else {
        return;
    };
    // A commit is a few hundred bytes; this one has a 2 MiB message, more
    // than datum pull reads of a commit before its signature is checked.
    let message = bed.p("message");
    std::fs::write(&message, "x".repeat(2 << 20)).unwrap();
    bed.git(
        "work",
        &[
            "commit",
            "-q",
            "--allow-empty",
            "-F",
            message.to_str().unwrap(),
        ],
    );
    let big = bed.git("work", &["rev-parse", "HEAD"]);
    refused_as_the_revisions_fault(
        &bed,
        "the commit object is larger than",
        &big,
        &c1,
        "bad_signature",
    );
}

#[test]
fn a_name_the_file_system_cannot_hold_is_refused_as_the_revisions_fault() {
    let Some((bed, c1)) = deployed_bed() else {
        return;
    };
    // A signed tree with a 300-byte file name (git takes it; no Linux file
    // system holds a name over 255 bytes).
    let blob = bed.git_input(&["hash-object", "-w", "--stdin"], b"x\n");
    let long = "n".repeat(300);
    let named = bed.signed_tree(&c1, &format!("100644 blob {blob}\t{long}\n"), "long name");
    let out = refused_as_the_revisions_fault(
        &bed,
        "its files cannot be checked out",
        &named,
        &c1,
        "bad_tree",
    );
    assert!(
        out.stderr().contains("File name too long"),
        "{}",
        out.stderr()
    );
    assert_eq!(bed.checkouts(), vec![c1.clone()]);
}

#[test]
fn a_tree_listing_past_the_bound_is_refused_as_the_revisions_fault() {
    let Some((bed, c1)) = deployed_bed() else {
        return;
    };
    // A signed tree whose `git ls-tree -r` is over 64 MiB from three small
    // tree objects: a folder of 1,100 files, named 1,100 times (1.2 million
    // paths, some 80 MB listed).
    let blob = bed.git_input(&["hash-object", "-w", "--stdin"], b"x\n");
    let lines = |kind: &str, id: &str, prefix: &str| -> String {
        (0..1100)
            .map(|i| format!("{kind} {id}\t{prefix}{i:04}\n"))
            .collect()
    };
    let inner = bed.git_input(&["mktree"], lines("100644 blob", &blob, "f").as_bytes());
    let outer = bed.git_input(&["mktree"], lines("040000 tree", &inner, "d").as_bytes());
    let big = bed.signed_tree(
        &c1,
        &format!("040000 tree {outer}\tbig\n"),
        "a million paths",
    );
    refused_as_the_revisions_fault(
        &bed,
        "its tree lists more than 64 MiB of paths",
        &big,
        &c1,
        "bad_tree",
    );
    assert_eq!(bed.checkouts(), vec![c1.clone()]);
    assert!(!bed.p("root/var/lib/datum/pull/incoming.git").exists());
}

/// A pull that fails (not the revision's fault) says in JSON what stays
/// deployed, as a refusal does, not `null` as if nothing were.
#[test]
fn a_failed_pull_names_what_stays_deployed_in_json() {
    let Some((bed, c1)) = deployed_bed() else {
        return;
    };
    let url = format!("file://{}", bed.p("no-such-remote.git").display());
    let out = bed.pull_with(&["--output", "json"], &url, &[]);
    out.assert_exit(1);
    let json: serde_json::Value = serde_json::from_str(&out.stdout()).unwrap();
    assert_eq!(json["outcome"], "failed", "{json}");
    assert_eq!(json["reason"], "fetch", "{json}");
    assert_eq!(json["revision"], serde_json::Value::Null, "{json}");
    assert_eq!(json["deployed"], c1.as_str(), "{json}");
}

#[test]
fn settings_a_pull_cannot_use_are_a_json_refusal_with_the_word_config() {
    if !tools() {
        return;
    }
    let bed = Bed::new();
    let yaml = bed.p("pull.yaml");
    std::fs::write(
        &yaml,
        "url: file:///srv/x.git\nallowed_signers: /a\nkepe: 3\n",
    )
    .unwrap();
    let url = bed.url();
    for args in [
        vec![
            "--output",
            "json",
            "pull",
            "--config",
            yaml.to_str().unwrap(),
        ],
        vec!["--output", "json", "pull", "--url", &url],
        vec![
            "--output",
            "json",
            "pull",
            "--url",
            &url,
            "--allowed-signers",
            "/a",
            "--ref",
            "a..b",
        ],
    ] {
        let out = Run(bed.datum(&args).output().unwrap());
        out.assert_exit(1);
        let json: serde_json::Value = serde_json::from_str(&out.stdout()).unwrap();
        assert_eq!(json["format_version"], "1", "{json}");
        assert_eq!(json["outcome"], "failed", "{args:?}: {json}");
        assert_eq!(json["reason"], "config", "{args:?}: {json}");
        let message = json["message"].as_str().unwrap();
        assert_eq!(
            message,
            out.stderr().trim().trim_start_matches("error: "),
            "{json}"
        );
    }
    let out = Run(bed
        .datum(&[
            "--output",
            "json",
            "pull",
            "--config",
            yaml.to_str().unwrap(),
        ])
        .output()
        .unwrap());
    let json: serde_json::Value = serde_json::from_str(&out.stdout()).unwrap();
    assert!(
        json["message"].as_str().unwrap().contains("pull.yaml:3:1"),
        "{json}"
    );
}

#[test]
fn a_refused_signature_leaves_nothing_in_the_pull_folder() {
    let Some((bed, _c1)) = deployed_bed() else {
        return;
    };
    let listing = || {
        let mut names: Vec<String> = std::fs::read_dir(bed.p("root/var/lib/datum/pull"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = listing();
    assert_eq!(before, ["cache.git", "checkouts", "lock"]);
    bed.revision("unsigned", None);
    refused(&bed, "the commit is not signed");
    assert_eq!(listing(), before);
    bed.revision("by mallory", Some("mallory"));
    refused(&bed, "not in");
    assert_eq!(listing(), before);
}

// ssh_key and known_hosts are for ssh:// remotes: a path ssh could not be
// told literally (930e72f refuses one holding `${`) stops an ssh pull
// before anything is fetched, and is no concern of a pull over another
// protocol, which never runs ssh.
#[test]
fn ssh_paths_ssh_cannot_read_stop_only_an_ssh_pull() {
    if !tools() {
        return;
    }
    let bed = Bed::new();
    bed.write(
        "root/etc/datum/pull.yaml",
        "known_hosts: /etc/datum/${HOME}/known_hosts\n",
    );
    bed.write("root/etc/datum/${HOME}/known_hosts", "");
    let c1 = bed.revision("one", Some("alice"));
    bed.push();
    bed.pull(&[]).assert_exit(2);
    assert_eq!(bed.deployed(), Some(c1));

    bed.revision("two", Some("alice"));
    let before = bed.snapshot();
    let out = bed.pull_with(&[], "ssh://git@127.0.0.1:9/x.git", &[]);
    out.assert_exit(1);
    assert!(
        out.stderr().contains("the path holds `${`")
            && out.stderr().contains("nothing was changed"),
        "{}",
        out.stderr()
    );
    assert_eq!(bed.snapshot(), before);
}

#[test]
fn a_trust_file_that_is_configured_but_missing_is_named_as_such() {
    let Some((bed, _c1)) = deployed_bed() else {
        return;
    };
    let missing = bed.p("keys/gone");
    let before = bed.snapshot();
    for option in ["--allowed-signers", "--revoked-keys", "--openpgp-keyring"] {
        let url = bed.url();
        let signers = bed.p("allowed_signers").display().to_string();
        let gone = missing.display().to_string();
        let mut args = vec!["--output", "json", "pull", "--url", &url];
        if option != "--allowed-signers" {
            args.extend(["--allowed-signers", &signers]);
        }
        args.extend([option, &gone]);
        let out = Run(bed.datum(&args).output().unwrap());
        out.assert_exit(1);
        let json: serde_json::Value = serde_json::from_str(&out.stdout()).unwrap();
        let message = json["message"].as_str().unwrap();
        let key = option.trim_start_matches("--").replace('-', "_");
        assert!(
            message.contains(&format!("{key} {gone}: no such file"))
                && message.contains("nothing was changed")
                && !message.contains("entity not found"),
            "{message}"
        );
        assert_eq!(json["reason"], "config", "{json}");
        assert_eq!(bed.snapshot(), before);
    }
}

#[test]
fn a_trust_file_reached_through_a_folder_others_may_write_is_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    let Some((bed, c1)) = deployed_bed() else {
        return;
    };
    let signers = bed.p("allowed_signers");
    let shared = bed.p("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::copy(&signers, shared.join("allowed_signers")).unwrap();
    let mode = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    mode(&shared, 0o777);
    // mallory can write `shared`: she can put a link there to a root-owned
    // file whose text she chose (the environment of a set-uid program she
    // started, /proc/PID/environ, is one), naming her key.
    bed.revision("by mallory", Some("mallory"));
    bed.push();
    let before = bed.snapshot();
    let pull_with = |file: &Path, extra: &[&str]| {
        let url = bed.url();
        let file = file.display().to_string();
        let mut args = vec!["pull", "--url", &url, "--allowed-signers", &file];
        args.extend_from_slice(extra);
        Run(bed.datum(&args).output().unwrap())
    };
    // The file in that folder, and a link elsewhere leading to it.
    let link = bed.p("keys/signers-link");
    std::os::unix::fs::symlink(shared.join("allowed_signers"), &link).unwrap();
    for file in [shared.join("allowed_signers"), link.clone()] {
        let out = pull_with(&file, &["--output", "json"]);
        out.assert_exit(1);
        let json: serde_json::Value = serde_json::from_str(&out.stdout()).unwrap();
        let message = json["message"].as_str().unwrap();
        assert!(
            message.contains(&shared.display().to_string())
                && message.contains("mode 0777")
                && message.contains("nothing was changed"),
            "{message}"
        );
        assert_eq!(bed.snapshot(), before);
    }
    // pull.yaml in such a folder decides as much.
    let yaml = shared.join("pull.yaml");
    std::fs::write(
        &yaml,
        format!(
            "url: {}\nallowed_signers: {}\n",
            bed.url(),
            signers.display()
        ),
    )
    .unwrap();
    let out = Run(bed
        .datum(&["pull", "--config", yaml.to_str().unwrap()])
        .output()
        .unwrap());
    out.assert_exit(1);
    assert!(
        out.stderr().contains(&shared.display().to_string()) && out.stderr().contains("mode 0777"),
        "{}",
        out.stderr()
    );
    assert_eq!(bed.snapshot(), before);
    // With the sticky bit (as /tmp has it) others cannot replace what root
    // put there: taken, and mallory's revision is refused for its signer.
    mode(&shared, 0o1777);
    let out = pull_with(&link, &[]);
    out.assert_exit(1);
    assert!(
        out.stderr().contains("signed with a key that is not in"),
        "{}",
        out.stderr()
    );
    assert_eq!(bed.deployed().as_deref(), Some(c1.as_str()));
}

#[test]
fn credentials_in_a_url_and_trust_files_anyone_may_write_are_handled_as_they_must_be() {
    if !tools() {
        return;
    }
    let bed = Bed::new();
    for output in ["human", "json"] {
        let out = bed.pull_with(
            &["--output", output],
            "http://deploy:canary-s3cret@127.0.0.1:9/x.git",
            &[],
        );
        out.assert_exit(1);
        let all = format!("{}{}", out.stdout(), out.stderr());
        assert!(!all.contains("canary-s3cret"), "{all}");
        assert!(
            all.contains("http://(sensitive)@127.0.0.1:9/x.git"),
            "{all}"
        );
    }

    // An allowed_signers anyone may write decides nothing.
    bed.revision("one", Some("alice"));
    bed.push();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(
        bed.p("allowed_signers"),
        std::fs::Permissions::from_mode(0o666),
    )
    .unwrap();
    let out = bed.pull(&[]);
    out.assert_exit(1);
    assert!(
        out.stderr()
            .contains("writable by group or others (mode 0666)"),
        "{}",
        out.stderr()
    );
    assert!(std::fs::symlink_metadata(bed.link()).is_err());

    // A link made by hand to a folder is replaced; the folder stays.
    std::fs::set_permissions(
        bed.p("allowed_signers"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    bed.write("by-hand/datum.yaml", SETTINGS);
    std::fs::create_dir_all(bed.p("root/etc/datum")).unwrap();
    std::os::unix::fs::symlink(bed.p("by-hand"), bed.link()).unwrap();
    bed.pull(&[]).assert_exit(2);
    assert!(bed.deployed().is_some());
    assert!(bed.p("by-hand/datum.yaml").exists());
    std::fs::remove_file(bed.link()).unwrap();

    // A folder in place of the link is not replaced.
    std::fs::set_permissions(
        bed.p("allowed_signers"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    bed.write("root/etc/datum/repository/datum.yaml", SETTINGS);
    let out = bed.pull(&[]);
    out.assert_exit(1);
    assert!(
        out.stderr()
            .contains("is a directory, not a link datum pull manages"),
        "{}",
        out.stderr()
    );
    assert!(bed.p("root/etc/datum/repository/datum.yaml").exists());
}

#[test]
fn an_ssh_key_others_may_read_and_a_known_hosts_others_may_write_are_refused_before_ssh_runs() {
    use std::os::unix::fs::PermissionsExt as _;
    if !tools() {
        return;
    }
    let bed = Bed::new();
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "deploy", "-f"])
        .arg(bed.p("root/etc/datum/deploy_key"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // pull.yaml's paths are host paths, under --root.
    std::fs::copy(
        bed.p("allowed_signers"),
        bed.p("root/etc/datum/allowed_signers"),
    )
    .unwrap();
    bed.write(
        "root/etc/datum/known_hosts",
        "[127.0.0.1]:9 ssh-ed25519 AAAA\n",
    );
    let mode = |rel: &str, mode: u32| {
        std::fs::set_permissions(bed.p(rel), std::fs::Permissions::from_mode(mode)).unwrap();
    };
    let yaml = |key: &str| {
        bed.write(
            "pull.yaml",
            &format!(
                "url: ssh://git@127.0.0.1:9/x.git\nallowed_signers: /etc/datum/allowed_signers\nssh_key: /etc/datum/{key}\nknown_hosts: /etc/datum/known_hosts\n"
            ),
        );
    };
    let pull = || {
        let config = bed.p("pull.yaml").display().to_string();
        Run(bed.datum(&["pull", "--config", &config]).output().unwrap())
    };
    let refused = |says: &[&str]| {
        let out = pull();
        out.assert_exit(1);
        for s in says {
            assert!(out.stderr().contains(s), "`{s}` not in:\n{}", out.stderr());
        }
        // Refused before anything was fetched, and nothing was changed.
        assert!(!out.stderr().contains("cannot fetch"), "{}", out.stderr());
        assert!(std::fs::symlink_metadata(bed.link()).is_err());
        assert!(!bed.p("root/var/lib/datum/pull/incoming.git").exists());
    };
    yaml("deploy_key");
    // A private key others may read: ssh would leave it out (UNPROTECTED
    // PRIVATE KEY FILE) and the server refuse the connection.
    mode("root/etc/datum/deploy_key", 0o644);
    let key = bed.p("root/etc/datum/deploy_key").display().to_string();
    refused(&[&key, "mode 0644", "readable by its owner only"]);
    mode("root/etc/datum/deploy_key", 0o640);
    refused(&[&key, "mode 0640"]);
    // A known_hosts others may write decides which server is trusted.
    mode("root/etc/datum/deploy_key", 0o600);
    mode("root/etc/datum/known_hosts", 0o666);
    let known = bed.p("root/etc/datum/known_hosts").display().to_string();
    refused(&[&known, "writable by group or others (mode 0666)"]);
    mode("root/etc/datum/known_hosts", 0o644);
    // A key that is configured but missing is never done without.
    yaml("nobody");
    refused(&["ssh_key", "etc/datum/nobody", "no such file"]);
    // Both as they must be: ssh runs (and finds no server on port 9).
    yaml("deploy_key");
    let out = pull();
    out.assert_exit(1);
    assert!(out.stderr().contains("cannot fetch"), "{}", out.stderr());
}

#[test]
fn a_password_holding_a_slash_is_hidden_in_every_form_of_url() {
    if !tools() {
        return;
    }
    let bed = Bed::new();
    let signers = bed.p("allowed_signers").display().to_string();
    // The canary password `can/ary-s3cret`, percent-encoded as a URL must
    // write it, or raw (which git would read as a host and a path).
    for url in [
        "https://deploy:can%2Fary-s3cret@127.0.0.1:9/x.git",
        "https://deploy:can%2fary-s3cret@127.0.0.1:9/x.git",
        "https://deploy:can/ary-s3cret@127.0.0.1:9/x.git",
        "https://can/ary-s3cret@127.0.0.1:9/x.git",
        "ssh://git:can/ary-s3cret@127.0.0.1:9/x.git",
        "ssh://git:can%2Fary-s3cret@127.0.0.1:9/x.git",
        "git://u:can/ary-s3cret@127.0.0.1:9/x.git",
        "git:can/ary-s3cret@127.0.0.1:x.git",
    ] {
        // On the command line and in pull.yaml, in each output format.
        bed.write("pull.yaml", &format!("url: {url}\n"));
        let config = bed.p("pull.yaml").display().to_string();
        for output in ["human", "json"] {
            for given in [["--url", url], ["--config", config.as_str()]] {
                let out = Run(bed
                    .datum(&["--output", output, "pull"])
                    .args(given)
                    .args(["--allowed-signers", &signers])
                    .output()
                    .unwrap());
                out.assert_exit(1);
                let all = format!("{}{}", out.stdout(), out.stderr());
                for secret in ["ary-s3cret", "can/", "can%2", "can%252"] {
                    assert!(!all.contains(secret), "{url} ({output}): {all}");
                }
                assert!(all.contains("(sensitive)@127.0.0.1"), "{url}: {all}");
            }
        }
    }
}

/// Whether some process's command line holds `needle` now.
fn on_a_command_line(needle: &[u8]) -> Option<String> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if cmdline.windows(needle.len()).any(|w| w == needle) {
            return Some(String::from_utf8_lossy(&cmdline).replace('\0', " "));
        }
    }
    None
}

#[test]
fn credentials_in_a_url_reach_the_server_and_never_a_command_line() {
    if !tools() {
        return;
    }
    let bed = Bed::new();
    // An http server on loopback that asks for Basic credentials and, at
    // every request (git waiting for the answer), looks at every process's
    // command line.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Per request: its Authorization header, and a command line holding the
    // password at that moment.
    type Seen = Vec<(Option<String>, Option<String>)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        for conn in listener.incoming().take(8) {
            let Ok(mut c) = conn else { return };
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && c.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let text = String::from_utf8_lossy(&head).into_owned();
            let auth = text
                .lines()
                .find_map(|l| l.strip_prefix("Authorization: "))
                .map(str::to_owned);
            log.lock()
                .unwrap()
                .push((auth, on_a_command_line(b"hunter2-c")));
            let _ = c.write_all(
                b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"x\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    // In pull.yaml, as a host keeps it: not on datum's own command line.
    let config = bed.p("pull.yaml");
    std::fs::write(
        &config,
        format!("url: http://deploy:hunter2-c%40nary@127.0.0.1:{port}/x.git\n"),
    )
    .unwrap();
    let out = Run(bed
        .datum(&[
            "pull",
            "--config",
            &config.display().to_string(),
            "--allowed-signers",
            &bed.p("allowed_signers").display().to_string(),
        ])
        .output()
        .unwrap());
    out.assert_exit(1);
    let all = format!("{}{}", out.stdout(), out.stderr());
    assert!(!all.contains("hunter2"), "{all}");
    let seen = seen.lock().unwrap().clone();
    // git asked for them and sent them, decoded as git decodes a URL ...
    assert!(
        seen.iter()
            .any(|(auth, _)| auth.as_deref() == Some("Basic ZGVwbG95Omh1bnRlcjItY0BuYXJ5")),
        "{seen:?}\n{all}"
    );
    // ... and no process had them on its command line meanwhile.
    for (_, cmdline) in &seen {
        assert_eq!(cmdline, &None, "{seen:?}");
    }
}

#[test]
fn the_systemd_timer_and_its_service_verify() {
    if !have("systemd-analyze", "systemd") {
        return;
    }
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/systemd");
    let dir = tempfile::tempdir().unwrap();
    for unit in ["datum-pull.service", "datum-pull.timer"] {
        let text = std::fs::read_to_string(deploy.join(unit)).unwrap();
        std::fs::write(
            dir.path().join(unit),
            text.replace("/usr/local/bin/datum", DATUM),
        )
        .unwrap();
    }
    let service = std::fs::read_to_string(dir.path().join("datum-pull.service")).unwrap();
    for option in [
        "ProtectSystem=strict",
        "ReadWritePaths=/etc/datum /var/lib/datum",
        "NoNewPrivileges=true",
    ] {
        assert!(service.contains(option), "the unit lost {option}");
    }
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(dir.path().join("datum-pull.timer"))
        .arg(dir.path().join("datum-pull.service"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("datum-pull."), "warnings: {stderr}");
}

/// Stops the gpg-agent of a test's GnuPG home when dropped.
struct GpgHome(PathBuf);

impl Drop for GpgHome {
    fn drop(&mut self) {
        let _ = Command::new("gpgconf")
            .args(["--kill", "gpg-agent"])
            .env("GNUPGHOME", &self.0)
            .status();
    }
}

#[test]
fn openpgp_signatures_are_checked_against_a_keyring_when_one_is_configured() {
    if !tools() || !have("gpg", "gnupg") || !have("gpgv", "gpgv") {
        return;
    }
    let bed = Bed::new();
    let home = GpgHome(bed.p("gnupg"));
    std::fs::create_dir(&home.0).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&home.0, std::fs::Permissions::from_mode(0o700)).unwrap();
    let gpg = |args: &[&str]| {
        let out = Command::new("gpg")
            .args(["--batch", "--passphrase", ""])
            .args(args)
            .env("GNUPGHOME", &home.0)
            .output()
            .unwrap();
        assert!(out.status.success(), "gpg {args:?}: {out:?}");
        out.stdout
    };
    // Made with a creation time in the past: a key made "now" is not valid
    // yet to a gpg whose clock has since stepped back (a fresh CI machine's
    // clock being set), and gpg then calls it unusable.
    for who in ["Alice <alice@example.com>", "Bob <bob@example.com>"] {
        gpg(&[
            "--faked-system-time",
            "20250101T000000!",
            "--quick-gen-key",
            who,
            "ed25519",
            "sign",
            "never",
        ]);
    }
    // A key that expired on 2020-01-02, and a gpg that signs as if it were
    // 2020-01-01 so it can still use it.
    gpg(&[
        "--faked-system-time",
        "20200101T000000!",
        "--quick-gen-key",
        "Old <old@example.com>",
        "ed25519",
        "sign",
        "1d",
    ]);
    let keyring = gpg(&["--export", "alice@example.com", "old@example.com"]);
    std::fs::write(bed.p("trusted.gpg"), keyring).unwrap();
    bed.write(
        "gpg-2020",
        "#!/bin/sh\nexec gpg --faked-system-time '20200101T120000!' \"$@\"\n",
    );
    std::fs::set_permissions(bed.p("gpg-2020"), std::fs::Permissions::from_mode(0o755)).unwrap();

    let commit = |content: &str, who: &str, program: &str| {
        bed.write("work/datum.yaml", SETTINGS);
        bed.write("work/base/motd.yaml", &motd(content));
        let key = format!("user.signingkey={who}");
        let program = format!("gpg.program={program}");
        let mut cmd = Command::new("git");
        cmd.current_dir(bed.p("work"))
            .env("GNUPGHOME", &home.0)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "A")
            .env("GIT_AUTHOR_EMAIL", "a@example.com")
            .env("GIT_COMMITTER_NAME", "A")
            .env("GIT_COMMITTER_EMAIL", "a@example.com");
        bed.git("work", &["add", "-A"]);
        let out = cmd
            .args([
                "-c",
                "gpg.format=openpgp",
                "-c",
                &key,
                "-c",
                &program,
                "commit",
                "-q",
                "-S",
                "-m",
                content,
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        bed.push();
        bed.git("work", &["rev-parse", "HEAD"])
    };
    let keyring = bed.p("trusted.gpg").display().to_string();
    let pgp = |bed: &Bed| bed.pull(&["--openpgp-keyring", &keyring]);

    // Without a keyring, an OpenPGP signature cannot be trusted.
    let c1 = commit("one", "alice@example.com", "gpg");
    let out = bed.pull(&[]);
    out.assert_exit(1);
    assert!(
        out.stderr()
            .contains("an OpenPGP signature, which needs openpgp_keyring"),
        "{}",
        out.stderr()
    );

    let out = pgp(&bed);
    out.assert_exit(2);
    assert!(
        out.stdout().contains("signed by Alice <alice@example.com>"),
        "{}",
        out.stdout()
    );
    assert_eq!(bed.deployed().as_deref(), Some(c1.as_str()));

    commit("by bob", "bob@example.com", "gpg");
    let before = bed.snapshot();
    let out = pgp(&bed);
    out.assert_exit(1);
    assert!(out.stderr().contains("trusted.gpg"), "{}", out.stderr());
    assert!(
        out.stderr()
            .contains("it is signed with a key that is not in"),
        "{}",
        out.stderr()
    );
    assert_eq!(bed.snapshot(), before);

    let old = bed.p("gpg-2020").display().to_string();
    commit("by old", "old@example.com", &old);
    let out = pgp(&bed);
    out.assert_exit(1);
    assert!(
        out.stderr()
            .contains("it is signed with a key that has expired"),
        "{}",
        out.stderr()
    );
    assert_eq!(bed.snapshot(), before);
}

/// Removes what a test bed test wrote under the container's /etc and
/// /var/lib, pass or fail.
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_dir_all(p).or_else(|_| std::fs::remove_file(p));
        }
    }
}

// The shipped timer's service as systemd runs it: under its sandbox (no
// capabilities, the system read-only but /etc/datum and /var/lib/datum) it
// deploys a signed revision from a remote, tells the running agent to reload
// (the agent then reports the new revision), and a refused revision fails
// the unit and changes nothing.
datum_testkit::testbed_test!(
    the_pull_service_deploys_under_real_systemd_and_the_agent_reloads,
    {
        use datum_testkit::testbed::within::{self, TestUnit};

        // The agent unit's test uses the same /etc/datum and port.
        let _lock = within::lock("datum-agent-unit");
        let _cleanup = Cleanup(
            [
                "/etc/datum/repository",
                "/etc/datum/pull.yaml",
                "/etc/datum/allowed_signers",
                "/etc/datum/host.yaml",
                "/var/lib/datum",
            ]
            .map(PathBuf::from)
            .to_vec(),
        );
        // Outside /tmp: the service has a private one.
        std::fs::create_dir_all("/srv").unwrap();
        let bed = Bed::new_in(Path::new("/srv"));
        within::write("/etc/datum/host.yaml", "name: testbed-pull\nlabels: {}\n");
        within::write(
            "/etc/datum/allowed_signers",
            std::fs::read(bed.p("allowed_signers")).unwrap(),
        );
        within::write(
            "/etc/datum/pull.yaml",
            format!(
                "url: {}\nref: main\nallowed_signers: /etc/datum/allowed_signers\n",
                bed.url()
            ),
        );
        let c1 = bed.revision("one", Some("alice"));
        bed.push();

        // The binary where the shipped units run it from (a checkout under
        // /tmp or /home is hidden from them by PrivateTmp and ProtectHome).
        let installed = Path::new("/usr/local/bin/datum");
        std::fs::copy(DATUM, installed).unwrap();
        let _binary = Cleanup(vec![installed.to_path_buf()]);
        let pull = TestUnit::install(
            "datum-pull.service",
            include_str!("../../../deploy/systemd/datum-pull.service"),
        );
        let agent = TestUnit::install(
            "datum-agent.service",
            include_str!("../../../deploy/systemd/datum-agent.service"),
        );
        let journal = |unit: &str| {
            Command::new("journalctl")
                .args(["--no-pager", "-u", unit, "-n", "30"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
        };
        let deployed =
            || datum_pull::deployed_revision(Path::new("/etc/datum/repository")).map(|d| d.commit);

        // A oneshot: `start` returns when it is done.
        within::systemctl_ok(&["start", pull.name()]);
        assert_eq!(
            within::property(pull.name(), "Result"),
            "success",
            "{}",
            journal(pull.name())
        );
        assert_eq!(
            deployed().as_deref(),
            Some(c1.as_str()),
            "{}",
            journal(pull.name())
        );

        within::systemctl_ok(&["start", agent.name()]);
        let revision = |c: &str| format!("datum_repository_revision_info{{revision=\"{c}\"}} 1");
        let metrics = || {
            TcpStream::connect_timeout(&"127.0.0.1:9477".parse().unwrap(), Duration::from_secs(1))
                .ok()
                .map(|_| within::http_get(9477, "/metrics"))
        };
        let up = wait(Duration::from_secs(20), || {
            metrics().filter(|m| m.contains(&revision(&c1)))
        });
        assert!(
            up.is_some(),
            "the agent does not report {c1}:\n{}",
            journal(agent.name())
        );

        // A new revision: the service deploys it and the agent reloads it.
        let c2 = bed.revision("two", Some("alice"));
        bed.push();
        within::systemctl_ok(&["start", pull.name()]);
        assert_eq!(
            within::property(pull.name(), "Result"),
            "success",
            "{}",
            journal(pull.name())
        );
        let reloaded = wait(Duration::from_secs(20), || {
            metrics().filter(|m| m.contains(&revision(&c2)))
        });
        assert!(
            reloaded.is_some(),
            "the agent did not reload {c2}:\n{}",
            journal(agent.name())
        );

        // A refused revision fails the unit and changes nothing.
        bed.revision("unsigned", None);
        bed.push();
        let out = within::systemctl(&["start", pull.name()]);
        assert!(
            !out.status.success(),
            "an unsigned revision did not fail the unit"
        );
        assert!(
            journal(pull.name()).contains("the commit is not signed"),
            "{}",
            journal(pull.name())
        );
        assert_eq!(deployed().as_deref(), Some(c2.as_str()));
        within::systemctl_ok(&["stop", agent.name()]);
    }
);
