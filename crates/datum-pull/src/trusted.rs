//! The folders on the way to a file this host trusts (`allowed_signers`,
//! `revoked_keys`, the OpenPGP keyring, `pull.yaml`).
//!
//! `datum_host::named::read_trusted` checks the file it reaches (root's,
//! writable by its owner only) and follows links, since a managed file may
//! be one. That is not enough on its own: whoever can write a folder on the
//! way can put a link of their own in place of the file, to any file root
//! owns whose text they chose. `/proc/PID/environ` of a set-uid program
//! they started is one (owned by root, mode 0400, holding the environment
//! they gave it, a line of which can be an `allowed_signers` line naming
//! their key). So, as sshd's `StrictModes` does for `authorized_keys`,
//! every folder on the way must be owned by root (or the user running
//! Datum) and writable by its owner only, or have the sticky bit (as `/tmp`
//! has it: others cannot rename or replace what root put there). Links are
//! followed one at a time from the folder handles, each in a folder judged
//! first, so the folders of every link on the way and of the file reached
//! are judged. Owns this walk only: reading the file is `read_trusted`'s.

use std::ffi::{OsStr, OsString};
use std::path::{Component, Path};

use datum_host::{Dir, FileKind, HostError};

/// Links followed on the way before the walk gives up (the kernel's limit).
const MAX_LINKS: usize = 40;

/// Refuses `file` when a folder on the way to it (through any link) could
/// be written by someone other than root or the user running Datum. A part
/// of the path that is missing ends the walk: reading the file says so.
pub fn folders_on_the_way(file: &Path) -> Result<(), HostError> {
    let root = Dir::open_path(Path::new("/"))?;
    if let Some(st) = root.lstat_entry(OsStr::new("."))? {
        judge(Path::new("/"), file, st.meta.uid, st.meta.mode)?;
    }
    let mut chain: Vec<Dir> = vec![root];
    let mut pending: Vec<OsString> = Vec::new();
    push(&mut pending, file);
    let mut links = 0;
    while let Some(name) = pending.pop() {
        if name == ".." {
            if chain.len() > 1 {
                chain.pop();
            }
            continue;
        }
        let Some(here) = chain.last() else {
            break;
        };
        let Some(st) = here.lstat_entry(&name)? else {
            return Ok(());
        };
        match st.kind {
            FileKind::Symlink => {
                // A link someone else made (in a sticky folder) is theirs
                // to point anywhere.
                let me = datum_host::accounts::current_ids().0;
                if st.meta.uid != 0 && st.meta.uid != me {
                    return Err(HostError::NotPrivate {
                        path: here.path().join(&name),
                        problem: format!(
                            "it is a link on the way to {}, a file that decides what this host trusts, and it belongs to uid {}: whoever owns it chose where it leads; nothing was changed",
                            file.display(),
                            st.meta.uid
                        ),
                    });
                }
                links += 1;
                if links > MAX_LINKS {
                    return Err(HostError::io(
                        "trust",
                        file,
                        std::io::Error::new(
                            std::io::ErrorKind::InvalidInput,
                            format!("more than {MAX_LINKS} links on the way to it"),
                        ),
                    ));
                }
                let target = here.entry(&name).read_link()?;
                if target.is_absolute() {
                    chain.truncate(1);
                }
                push(&mut pending, &target);
            }
            FileKind::Directory if !pending.is_empty() => {
                let path = here.path().join(&name);
                judge(&path, file, st.meta.uid, st.meta.mode)?;
                let next = here.open_child_dir(&name)?.ok_or_else(|| {
                    HostError::io("open directory", &path, std::io::ErrorKind::NotFound.into())
                })?;
                chain.push(next);
            }
            // The file itself, or what `read_trusted` refuses.
            _ => return Ok(()),
        }
    }
    Ok(())
}

/// Puts `path`'s components on the stack so its first comes off first.
fn push(pending: &mut Vec<OsString>, path: &Path) {
    let parts: Vec<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect();
    pending.extend(parts.into_iter().rev());
}

/// A folder on the way to `file`: root's (or ours), and writable by its
/// owner only unless it has the sticky bit.
fn judge(folder: &Path, file: &Path, uid: u32, mode: u32) -> Result<(), HostError> {
    let me = datum_host::accounts::current_ids().0;
    let why = if uid != 0 && uid != me {
        format!("it belongs to uid {uid}")
    } else if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        format!(
            "its mode {:04o} lets others write to it (and it has no sticky bit)",
            mode & 0o7777
        )
    } else {
        return Ok(());
    };
    Err(HostError::NotPrivate {
        path: folder.to_path_buf(),
        problem: format!(
            "{why}, and it is a folder on the way to {}, a file that decides what this host trusts: whoever can write it can put a file or a link of their own in its place; make it owned by root and writable by its owner only; nothing was changed",
            file.display()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn every_folder_on_the_way_through_links_is_judged() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
        };
        for f in ["safe", "open", "sticky"] {
            std::fs::create_dir(d.join(f)).unwrap();
        }
        mode(&d.join("open"), 0o777);
        mode(&d.join("sticky"), 0o1777);
        for f in ["safe", "open", "sticky"] {
            std::fs::write(d.join(f).join("signers"), b"x").unwrap();
        }
        assert!(folders_on_the_way(&d.join("safe/signers")).is_ok());
        assert!(folders_on_the_way(&d.join("sticky/signers")).is_ok());
        assert!(folders_on_the_way(&d.join("safe/missing")).is_ok());
        let err = folders_on_the_way(&d.join("open/signers")).unwrap_err();
        assert!(err.to_string().contains("mode 0777"), "{err}");
        // A link in a safe folder to a file in an open one; a relative link
        // climbing out of a safe folder into the open one; a folder link.
        std::os::unix::fs::symlink(d.join("open/signers"), d.join("safe/abs")).unwrap();
        std::os::unix::fs::symlink("../open/signers", d.join("safe/rel")).unwrap();
        std::os::unix::fs::symlink("../open", d.join("safe/folder")).unwrap();
        for via in ["safe/abs", "safe/rel", "safe/folder/signers"] {
            let err = folders_on_the_way(&d.join(via)).unwrap_err();
            assert!(
                err.to_string()
                    .contains(&d.join("open").display().to_string()),
                "{via}: {err}"
            );
        }
        // A link someone else owns, in a sticky folder.
        let theirs = d.join("sticky/theirs");
        std::os::unix::fs::symlink("../safe/signers", &theirs).unwrap();
        if std::os::unix::fs::lchown(&theirs, Some(65534), None).is_ok() {
            let err = folders_on_the_way(&theirs).unwrap_err();
            assert!(err.to_string().contains("uid 65534"), "{err}");
        }
        // A link that leads back to a safe place is fine; a loop is an error.
        std::os::unix::fs::symlink("../safe/signers", d.join("sticky/back")).unwrap();
        assert!(folders_on_the_way(&d.join("sticky/back")).is_ok());
        std::os::unix::fs::symlink("loop", d.join("safe/loop")).unwrap();
        assert!(folders_on_the_way(&d.join("safe/loop/x")).is_err());
    }
}
