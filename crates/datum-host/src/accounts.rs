//! Users and groups, read from the passwd and group files.
//!
//! Names resolve against `<root>/etc/passwd` and `<root>/etc/group` (read
//! through the boundary) when the root has them (an image being built has its own accounts), else against the
//! machine's `/etc/passwd` and `/etc/group`. The files are parsed, not asked of
//! NSS: a pass must give the same answer for a root directory as the image it
//! becomes will. This module must not write either file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::{Host, HostError};

/// One parsed account file: names to numbers and back.
#[derive(Debug, Clone, Default)]
pub struct AccountDb {
    /// The file the names came from (named in "unknown user" errors).
    pub path: PathBuf,
    by_name: HashMap<String, u32>,
    by_id: HashMap<u32, String>,
}

impl AccountDb {
    /// Parses `name:password:id:...` lines. Comments, blank lines, NIS
    /// compatibility entries (`+`/`-`) and malformed lines are skipped: they
    /// name nobody we could chown to.
    pub fn parse(path: PathBuf, text: &str) -> Self {
        let mut db = AccountDb {
            path,
            ..AccountDb::default()
        };
        for line in text.lines() {
            let line = line.trim_end_matches('\r');
            if line.is_empty() || line.starts_with('#') || line.starts_with(['+', '-']) {
                continue;
            }
            let mut fields = line.split(':');
            let (Some(name), Some(_), Some(id)) = (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            let Ok(id) = id.parse::<u32>() else { continue };
            if name.is_empty() {
                continue;
            }
            db.by_name.entry(name.to_owned()).or_insert(id);
            // getpwuid returns the first entry for a number; so do we.
            db.by_id.entry(id).or_insert_with(|| name.to_owned());
        }
        db
    }

    /// A number for a name or a decimal number. Numbers need no entry: files
    /// may be owned by ids nobody is named after.
    pub fn lookup(&self, name_or_number: &str) -> Option<u32> {
        if !name_or_number.is_empty() && name_or_number.bytes().all(|b| b.is_ascii_digit()) {
            return name_or_number.parse().ok();
        }
        self.by_name.get(name_or_number).copied()
    }

    pub fn name(&self, id: u32) -> Option<&str> {
        self.by_id.get(&id).map(String::as_str)
    }
}

/// Both account files of a root.
#[derive(Debug, Clone, Default)]
pub struct Accounts {
    pub users: AccountDb,
    pub groups: AccountDb,
}

impl Accounts {
    /// Reads the account files of `host`'s root (through the boundary),
    /// preferring the root's own to the machine's.
    pub fn load(host: &Host) -> Result<Self, HostError> {
        Ok(Accounts {
            users: load_db(host, "/etc/passwd")?,
            groups: load_db(host, "/etc/group")?,
        })
    }
}

fn load_db(host: &Host, declared: &str) -> Result<AccountDb, HostError> {
    let declared = Path::new(declared);
    let in_root = match host.read(declared) {
        Ok(found) => found,
        // A root that does not exist (yet) has no account files.
        Err(HostError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    if let Some(bytes) = in_root {
        let path = host.resolve(declared)?;
        return Ok(AccountDb::parse(path, &String::from_utf8_lossy(&bytes)));
    }
    let machine = Host::with_name("/", "");
    let path = declared.to_path_buf();
    match machine.read(declared)? {
        Some(bytes) => Ok(AccountDb::parse(path, &String::from_utf8_lossy(&bytes))),
        // A root without account files (a bare container) just knows no
        // names; numbers still work.
        None => Ok(AccountDb {
            path,
            ..AccountDb::default()
        }),
    }
}

/// Who is running this process, for a record of a person's decision (such
/// as allowing a rollback): the name they logged in or `sudo`ed as, the
/// uid, and the kernel's login uid (which `sudo` and `su` keep) when it is
/// another: `alice (uid 0, login uid 1000)`.
pub fn invoking_user() -> String {
    let name = ["SUDO_USER", "USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|n| !n.is_empty()))
        .unwrap_or_else(|| "unknown".to_owned());
    let uid = rustix::process::getuid().as_raw();
    let login = std::fs::read_to_string("/proc/self/loginuid")
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok())
        .filter(|l| *l != u32::MAX && *l != uid);
    match login {
        Some(l) => format!("{name} (uid {uid}, login uid {l})"),
        None => format!("{name} (uid {uid})"),
    }
}

/// The user and group this process runs as (what a file it creates is
/// owned by when no owner is set).
pub fn current_ids() -> (u32, u32) {
    (
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "\
root:x:0:0:root:/root:/bin/bash
# a comment

daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
toor:x:0:0:second root:/root:/bin/sh
broken line
nouid:x:abc:1::/:/bin/false
+nisuser
www-data:x:33:33:www-data:/var/www:/usr/sbin/nologin
";

    #[test]
    fn names_and_numbers_resolve_both_ways() {
        let db = AccountDb::parse(PathBuf::from("/r/etc/passwd"), PASSWD);
        let cases = [
            ("root", Some(0)),
            ("toor", Some(0)),
            ("www-data", Some(33)),
            ("33", Some(33)),
            ("4242", Some(4242)),
            ("nouid", None),
            ("broken line", None),
            ("+nisuser", None),
            ("", None),
            ("99999999999", None),
        ];
        for (name, want) in cases {
            assert_eq!(db.lookup(name), want, "{name}");
        }
        assert_eq!(db.name(0), Some("root"), "first entry wins for a number");
        assert_eq!(db.name(33), Some("www-data"));
        assert_eq!(db.name(4242), None);
    }

    #[test]
    fn the_roots_own_files_win_over_the_machines() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("etc")).unwrap();
        std::fs::write(
            dir.path().join("etc/passwd"),
            "alice:x:1234:1234::/:/bin/sh\n",
        )
        .unwrap();
        let accounts = Accounts::load(&Host::new(dir.path())).unwrap();
        assert_eq!(accounts.users.lookup("alice"), Some(1234));
        assert_eq!(accounts.users.path, dir.path().join("etc/passwd"));
        // No group file in the root: the machine's is used.
        assert_eq!(accounts.groups.path, Path::new("/etc/group"));
    }
}
