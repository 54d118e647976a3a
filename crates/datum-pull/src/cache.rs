//! The private cache: a bare git repository of what was deployed, and the
//! quarantine the remote is fetched into.
//!
//! `ROOT/var/lib/datum/pull/cache.git`, inside a folder that is 0700 and
//! owned by the user running Datum (created without following links). It
//! holds `refs/datum/deployed` (the revision deployed, so its history stays
//! for the ancestry check and garbage collection keeps it) and only objects
//! of revisions that were verified and passed lint.
//!
//! A fetch goes into `ROOT/var/lib/datum/pull/incoming.git`, a bare
//! repository made fresh for each pull whose `objects/info/alternates`
//! names the cache's objects: git negotiates with what the cache holds,
//! writes only what the remote sent there (as `refs/datum/incoming`), and
//! every read of the revision (its commit, its tree, the ancestry question)
//! goes through it. A revision deployed has its objects fetched from the
//! quarantine into the cache ([`Cache::accept`], before the switch); a
//! refused one is dropped with the quarantine ([`Cache::forget_incoming`]),
//! so a remote pushing big revisions that are refused (unsigned, or failing
//! lint) never grows the cache: nothing waits two weeks for git's garbage
//! collection. A pull that fails otherwise (a fetch cut short, a commit too
//! large to read) drops it too, when its `Cache` is dropped. A pull killed
//! at any moment leaves a quarantine the next one removes before fetching.
//!
//! Nothing in either is ever checked out: `checkout` reads objects out of
//! them. Owns fetching, reading commits and trees, the ancestry question,
//! and sweeping what a killed git leaves (lock files, temporary packs),
//! which would otherwise make every later fetch fail. Must not decide
//! whether a revision is trusted.

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::time::Duration;

use datum_host::{Dir, FileKind, PrivateDir};

use crate::git::{Git, GitError};

use crate::commit;
use crate::config::PullConfig;
use crate::error::{ConfigError, PullError};

/// The cache's folder name inside the pull folder.
pub const CACHE_DIR: &str = "cache.git";
/// The quarantine's folder name inside the pull folder.
pub const QUARANTINE_DIR: &str = "incoming.git";
/// The cache's objects, as the quarantine's `objects/info/alternates` names
/// them (relative to the quarantine's objects folder).
const ALTERNATES: &str = "../../cache.git/objects\n";
/// Where a fetch puts what it brought (in the quarantine; in the cache
/// between [`Cache::accept`] and [`Cache::deployed`]).
const INCOMING: &str = "refs/datum/incoming";
/// The deployed revision, kept reachable.
const DEPLOYED: &str = "refs/datum/deployed";
/// The largest commit object read (a commit is a few hundred bytes; a
/// signature a few more).
const COMMIT_LIMIT: usize = 1 << 20;
/// The largest tree listing read (about 100 bytes a file: half a million
/// files).
const LISTING_LIMIT: usize = 64 << 20;

/// Every fetch's options, before its source and refspec: nothing but the
/// one ref asked for, and nothing run afterwards (no gc, no maintenance,
/// no FETCH_HEAD written).
const FETCH: [&str; 8] = [
    "fetch",
    "--quiet",
    "--no-tags",
    "--no-recurse-submodules",
    "--no-write-fetch-head",
    "--no-auto-gc",
    "--no-auto-maintenance",
    "--",
];

/// The cache of one host.
#[derive(Debug)]
pub struct Cache {
    git: Git,
    /// The quarantine: what the last fetch brought, the cache's objects
    /// seen through it.
    incoming: Git,
    pull_dir: PrivateDir,
}

impl Cache {
    /// Opens the cache in `pull_dir` (creating it when missing or when a
    /// killed `git init` left it without a `HEAD`), after sweeping the debris
    /// of killed commands. The caller holds the pull lock, so every lock
    /// file in it is stale.
    pub fn open(pull_dir: &PrivateDir, timeout: Duration) -> Result<(Cache, usize), PullError> {
        let name = OsStr::new(CACHE_DIR);
        let git = Git::new(pull_dir.file_path(CACHE_DIR)).timeout(timeout);
        let incoming = Git::new(pull_dir.file_path(QUARANTINE_DIR)).timeout(timeout);
        let existing = pull_dir.dir().open_child_dir(name);
        let usable = match &existing {
            Ok(Some(dir)) => dir.lstat_entry(OsStr::new("HEAD"))?.is_some(),
            _ => false,
        };
        let mut swept = 0;
        match existing {
            Ok(Some(dir)) if usable => swept = sweep(&dir)?,
            _ => {
                // Missing, half made, or something else in its place (a
                // link is removed, never followed).
                pull_dir.dir().entry(name).remove_all()?;
                git.init_bare()?;
            }
        }
        let cache = Cache {
            git,
            incoming,
            pull_dir: pull_dir.clone(),
        };
        Ok((cache, swept))
    }

    /// Fetches `config.git_ref` from the source into `refs/datum/incoming`
    /// of a fresh quarantine and returns the commit it names (a tag is
    /// peeled to its commit).
    pub fn fetch(&self, config: &PullConfig) -> Result<String, PullError> {
        self.quarantine()?;
        let source = &config.source;
        let mut git = self.incoming.clone().allow(source.protocol());
        if let Some(secret) = source.secret() {
            git = git.secret(secret);
        }
        if let Some(credentials) = source.credentials() {
            git = git.credentials(credentials);
        }
        // Only ssh reads it (its paths were checked before anything was
        // fetched, `pull::ssh_files`).
        if source.protocol() == crate::git::Protocol::Ssh
            && let Some(ssh) = ssh_command(config)?
        {
            git = git.ssh_command(ssh);
        }
        let fetch_error = |error: GitError| PullError::Fetch {
            git_ref: config.git_ref.clone(),
            remote: source.display(),
            error,
        };
        let mut args: Vec<OsString> = FETCH.map(OsString::from).to_vec();
        args.push(source.location());
        args.push(format!("+{}:{INCOMING}", config.git_ref).into());
        git.output(args, 1 << 20).map_err(fetch_error)?;
        // A forced refspec git did not write though the fetch went through:
        // it refuses to take a shallow remote's ref (only a warning).
        if !self
            .incoming
            .succeeds(["rev-parse", "--verify", "--quiet", INCOMING])
            .unwrap_or(true)
        {
            // What it brought (all of the remote's objects) goes now.
            let _ = self.forget_incoming();
            return Err(PullError::Shallow {
                git_ref: config.git_ref.clone(),
                remote: source.display(),
            });
        }
        let peeled = format!("{INCOMING}^{{commit}}");
        let out = self
            .incoming
            .output(
                [
                    "rev-parse",
                    "--verify",
                    "--quiet",
                    "--end-of-options",
                    &peeled,
                ],
                4096,
            )
            .map_err(|_| {
                let _ = self.forget_incoming();
                PullError::NotACommit {
                    git_ref: config.git_ref.clone(),
                    remote: source.display(),
                }
            })?;
        let id = String::from_utf8_lossy(&out).trim().to_owned();
        if commit::is_commit_id(&id) {
            Ok(id)
        } else {
            let _ = self.forget_incoming();
            Err(PullError::NotACommit {
                git_ref: config.git_ref.clone(),
                remote: source.display(),
            })
        }
    }

    /// A fresh, empty quarantine whose alternates are the cache's objects
    /// (what a killed pull left of one goes first).
    fn quarantine(&self) -> Result<(), PullError> {
        let name = OsStr::new(QUARANTINE_DIR);
        self.pull_dir.dir().entry(name).remove_all()?;
        self.incoming.init_bare()?;
        // `git init` makes `objects/info` (templates or not).
        let mut info = self.pull_dir.dir().clone();
        for part in [QUARANTINE_DIR, "objects", "info"] {
            let next = info.open_child_dir(OsStr::new(part))?.ok_or_else(|| {
                datum_host::HostError::io(
                    "open",
                    info.path().join(part),
                    std::io::ErrorKind::NotFound.into(),
                )
            })?;
            info = next;
        }
        let alternates = info.entry(OsStr::new("alternates"));
        let mut file = alternates.create_new(0o644)?;
        std::io::Write::write_all(&mut file, ALTERNATES.as_bytes())
            .map_err(|e| datum_host::HostError::io("write", alternates.path(), e))?;
        Ok(())
    }

    /// The raw commit object.
    pub fn commit(&self, id: &str) -> Result<Vec<u8>, GitError> {
        self.incoming
            .output(["cat-file", "commit", id], COMMIT_LIMIT)
    }

    /// Whether the commit `id` is in the cache (or the quarantine). An
    /// object that is not there, or is not a commit, is a plain no
    /// (`rev-parse --verify --quiet` exits 1; `cat-file -e ID^{commit}`
    /// exits 128 for a missing one, which read as a failure of git).
    pub fn has_commit(&self, id: &str) -> Result<bool, GitError> {
        self.incoming.succeeds([
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &format!("{id}^{{commit}}"),
        ])
    }

    /// Whether `ancestor` is `descendant` or one of its ancestors. A commit
    /// the cache does not hold is no ancestor (a full fetch of the new head
    /// brings every commit it descends from), and has none that can be
    /// told (a revision git collected since it was deployed, or a cache
    /// made anew).
    pub fn descends(&self, descendant: &str, ancestor: &str) -> Result<bool, GitError> {
        if descendant == ancestor {
            return Ok(true);
        }
        if !self.has_commit(ancestor)? || !self.has_commit(descendant)? {
            return Ok(false);
        }
        self.incoming
            .succeeds(["merge-base", "--is-ancestor", ancestor, descendant])
    }

    /// Every entry of the commit's tree: `git ls-tree -r -z` output.
    pub fn listing(&self, id: &str) -> Result<Vec<u8>, GitError> {
        self.incoming
            .output(["ls-tree", "-r", "-z", "--full-tree", id], LISTING_LIMIT)
    }

    /// git reading what the last fetch brought (and, through it, the
    /// cache).
    pub fn reader(&self) -> &Git {
        &self.incoming
    }

    /// Takes what the last fetch brought into the cache: a verified
    /// revision that passed lint, about to be switched in. Its objects are
    /// fetched from the quarantine (checked again on the way), as
    /// `refs/datum/incoming` of the cache until [`Cache::deployed`].
    pub fn accept(&self) -> Result<(), GitError> {
        let mut args: Vec<OsString> = FETCH.map(OsString::from).to_vec();
        args.push(self.incoming.git_dir().as_os_str().to_owned());
        args.push(format!("+{INCOMING}:{INCOMING}").into());
        self.git
            .clone()
            .allow(crate::git::Protocol::File)
            .output(args, 1 << 20)
            .map(drop)
    }

    /// Marks `id` deployed and forgets what the last fetch brought.
    pub fn deployed(&self, id: &str) -> Result<(), GitError> {
        self.git.output(["update-ref", DEPLOYED, id], 4096)?;
        self.forget_incoming()
    }

    /// Drops the quarantine, with every object of the last fetch that
    /// [`Cache::accept`] did not take into the cache, and the cache's
    /// `refs/datum/incoming`.
    pub fn forget_incoming(&self) -> Result<(), GitError> {
        self.pull_dir
            .dir()
            .entry(OsStr::new(QUARANTINE_DIR))
            .remove_all()?;
        self.git
            .output(["update-ref", "-d", INCOMING], 4096)
            .map(drop)
    }

    /// Lets git pack loose objects and drop unreachable ones when enough
    /// have gathered (never in the background: the pull lock covers it).
    pub fn maintain(&self) -> Result<(), GitError> {
        self.git
            .output(
                [
                    "-c",
                    "gc.auto=6700",
                    "-c",
                    "gc.autoDetach=false",
                    "gc",
                    "--auto",
                    "--quiet",
                ],
                1 << 20,
            )
            .map(drop)
    }
}

/// The quarantine lives no longer than the `Cache` that fetched into it:
/// whatever ends the pull (a refusal, a fetch cut short by the network, a
/// deadline or a full disk, a commit too large to read, any error after
/// the fetch), what the remote sent goes with it, not at the next pull.
/// The cache's own `refs/datum/incoming` is left to [`Cache::deployed`]
/// and [`Cache::forget_incoming`]: after [`Cache::accept`] it may be all
/// that keeps an accepted revision's objects.
impl Drop for Cache {
    fn drop(&mut self) {
        let _ = self
            .pull_dir
            .dir()
            .entry(OsStr::new(QUARANTINE_DIR))
            .remove_all();
    }
}

/// The `ssh` command for an `ssh://` remote with a configured key or
/// `known_hosts`: that key only, that `known_hosts` only (either given
/// alone is honoured: a `known_hosts` without a key still pins the
/// server's key), strict host checking, never a prompt, and none of root's
/// own ssh configuration. Quoted for the shell git runs it through.
///
/// Both files are given as `-o Option=VALUE`, read by ssh as a line of
/// `ssh_config`: a value is split into several at blanks (a
/// `UserKnownHostsFile` of `/etc/k h/kh` names `/etc/k` and `h/kh`, and the
/// server's key is then looked up in neither), `%` starts a token and
/// `${NAME}` an environment variable. So each path is written in double
/// quotes, `\`, `"` and `%` escaped; a path ssh cannot be told literally
/// (holding `${`, or a control character) is refused.
pub(crate) fn ssh_command(config: &PullConfig) -> Result<Option<String>, ConfigError> {
    if config.ssh_key.is_none() && config.known_hosts.is_none() {
        return Ok(None);
    }
    let mut cmd = "ssh -F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=yes".to_owned();
    if let Some(key) = &config.ssh_key {
        let option = ssh_option("ssh_key", "IdentityFile", key)?;
        cmd.push_str(&format!(
            " -o IdentitiesOnly=yes -o {}",
            shell_quote(&option)
        ));
    }
    if let Some(known) = &config.known_hosts {
        let option = ssh_option("known_hosts", "UserKnownHostsFile", known)?;
        cmd.push_str(&format!(" -o {}", shell_quote(&option)));
    }
    Ok(Some(cmd))
}

/// `Option="PATH"` as `ssh_config` reads it: the path one value,
/// taken literally. `key` names the setting in `pull.yaml`, for the error.
fn ssh_option(key: &str, option: &str, path: &Path) -> Result<String, ConfigError> {
    let refuse = |why: &str| {
        ConfigError::Missing(format!(
            "{key} {}: {why}, which ssh would not read as part of the file's name; move the file to a path without it; nothing was changed",
            datum_core::text::visible(&path.to_string_lossy(), &[])
        ))
    };
    let Some(text) = path.to_str() else {
        return Err(refuse("the path is not UTF-8"));
    };
    if text.chars().any(char::is_control) {
        return Err(refuse("the path holds a control character"));
    }
    if text.contains("${") {
        return Err(refuse(
            "the path holds `${`, the start of an environment variable to ssh",
        ));
    }
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '\\' | '"' => {
                quoted.push('\\');
                quoted.push(c);
            }
            '%' => quoted.push_str("%%"),
            _ => quoted.push(c),
        }
    }
    quoted.push('"');
    Ok(format!("{option}={quoted}"))
}

/// `word` as one word to the shell, in single quotes.
fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// What a killed git leaves in a repository: `*.lock` files (which make the
/// next command that wants that lock fail), temporary packs and objects,
/// and `.keep` files of a pack being indexed. Returns how many were removed.
fn sweep(cache: &Dir) -> Result<usize, PullError> {
    let mut removed = 0;
    let mut stale = |folder: &Dir, deep: bool| -> Result<(), PullError> {
        removed += sweep_folder(folder, deep)?;
        Ok(())
    };
    stale(cache, false)?;
    if let Some(refs) = cache.open_child_dir(OsStr::new("refs"))? {
        stale(&refs, true)?;
    }
    if let Some(objects) = cache.open_child_dir(OsStr::new("objects"))? {
        stale(&objects, false)?;
        for (entry, kind) in objects.list()? {
            let is_fanout = entry.len() == 2 || entry == "pack";
            if is_fanout
                && kind == FileKind::Directory
                && let Some(sub) = objects.open_child_dir(&entry)?
            {
                stale(&sub, false)?;
            }
        }
    }
    Ok(removed)
}

fn sweep_folder(folder: &Dir, deep: bool) -> Result<usize, PullError> {
    use std::os::unix::ffi::OsStrExt as _;
    let mut removed = 0;
    for (entry, kind) in folder.list()? {
        let bytes = entry.as_bytes();
        let debris = bytes.ends_with(b".lock")
            || bytes.starts_with(b"tmp_")
            || bytes.starts_with(b"incoming-")
            || (bytes.starts_with(b"pack-") && bytes.ends_with(b".keep"));
        if debris {
            folder.entry(&entry).remove_all()?;
            removed += 1;
        } else if deep
            && kind == FileKind::Directory
            && let Some(sub) = folder.open_child_dir(&entry)?
        {
            removed += sweep_folder(&sub, true)?;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_debris_of_killed_git_commands_is_swept_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let c = dir.path();
        for d in ["refs/heads", "refs/datum", "objects/pack", "objects/ab"] {
            std::fs::create_dir_all(c.join(d)).unwrap();
        }
        let debris = [
            "HEAD.lock",
            "packed-refs.lock",
            "shallow.lock",
            "refs/datum/incoming.lock",
            "objects/pack/tmp_pack_Xy12",
            "objects/pack/pack-0123.keep",
            "objects/ab/tmp_obj_q1",
        ];
        let kept = [
            "HEAD",
            "config",
            "refs/heads/main",
            "objects/pack/pack-0123.pack",
            "objects/ab/cdef",
        ];
        for f in debris.iter().chain(&kept) {
            std::fs::write(c.join(f), b"x").unwrap();
        }
        std::fs::create_dir(c.join("objects/incoming-abc")).unwrap();
        let folder = Dir::open_path(c).unwrap();
        assert_eq!(sweep(&folder).unwrap(), debris.len() + 1);
        for f in debris {
            assert!(!c.join(f).exists(), "{f} left");
        }
        for f in kept {
            assert!(c.join(f).exists(), "{f} removed");
        }
    }

    #[test]
    fn an_ssh_key_gets_a_closed_ssh_command() {
        let mut config = crate::config::settle(
            std::path::Path::new("/"),
            None,
            &crate::config::Overrides {
                url: Some("ssh://git@h/r.git".into()),
                allowed_signers: Some("/a".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(ssh_command(&config).unwrap(), None);
        config.ssh_key = Some("/etc/datum/it's key".into());
        config.known_hosts = Some("/etc/datum/known_hosts".into());
        let cmd = ssh_command(&config).unwrap().unwrap();
        assert!(
            cmd.starts_with("ssh -F /dev/null -o BatchMode=yes"),
            "{cmd}"
        );
        assert!(
            cmd.contains(r#"-o IdentitiesOnly=yes -o 'IdentityFile="/etc/datum/it'\''s key"'"#),
            "{cmd}"
        );
        assert!(
            cmd.contains(r#"-o 'UserKnownHostsFile="/etc/datum/known_hosts"'"#),
            "{cmd}"
        );
        // A known_hosts alone still pins the server's key (root's own
        // ~/.ssh/known_hosts is never read instead).
        config.ssh_key = None;
        let cmd = ssh_command(&config).unwrap().unwrap();
        assert!(
            cmd.starts_with("ssh -F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=yes")
                && cmd.contains("UserKnownHostsFile=")
                && !cmd.contains("IdentityFile"),
            "{cmd}"
        );
    }

    /// The words ssh is given when git runs `cmd` through the shell, as
    /// git does (`sh -c 'CMD "$@"'`).
    fn words_ssh_gets(cmd: &str) -> Vec<String> {
        let shown = cmd.replacen("ssh ", "printf '%s\\n' ", 1);
        let out = datum_host::command::run(
            &datum_host::command::CommandSpec::new("sh")
                .arg("-c")
                .arg(format!("{shown} \"$@\""))
                .arg("ssh")
                .arg("git@h"),
        )
        .unwrap();
        assert!(out.success(), "{out:?}");
        out.stdout.text().lines().map(str::to_owned).collect()
    }

    // ssh reads `-o Option=VALUE` as a line of ssh_config: an unquoted
    // UserKnownHostsFile of "/etc/k h/kh" is two files, neither of them
    // the one configured (seen with a loopback sshd: 'No ED25519 host key
    // is known ... Host key verification failed'). Double quotes make it
    // one; `%` is a token to ssh, written `%%`.
    #[test]
    fn a_path_with_a_space_or_a_percent_reaches_ssh_as_one_literal_file() {
        let mut config = crate::config::settle(
            std::path::Path::new("/"),
            None,
            &crate::config::Overrides {
                url: Some("ssh://git@h/r.git".into()),
                allowed_signers: Some("/a".into()),
                ..Default::default()
            },
        )
        .unwrap();
        config.known_hosts = Some("/r/etc/k h/known hosts".into());
        config.ssh_key = Some("/r/etc/k h/it's \"100%\" \\key".into());
        let words = words_ssh_gets(&ssh_command(&config).unwrap().unwrap());
        assert!(
            words.contains(&r#"UserKnownHostsFile="/r/etc/k h/known hosts""#.to_owned()),
            "{words:?}"
        );
        assert!(
            words.contains(&r#"IdentityFile="/r/etc/k h/it's \"100%%\" \\key""#.to_owned()),
            "{words:?}"
        );
        assert_eq!(words.last().map(String::as_str), Some("git@h"));

        // What ssh cannot be told literally is refused, naming the setting.
        for bad in ["/r/etc/${HOME}/kh", "/r/etc/k\nh"] {
            config.known_hosts = Some(bad.into());
            let e = ssh_command(&config).unwrap_err().to_string();
            assert!(
                e.starts_with("known_hosts /r/etc/") && e.contains("nothing was changed"),
                "{e}"
            );
        }
    }
}
