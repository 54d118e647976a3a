//! Files the operator names on the command line: `--host-file`, the report
//! of `--markdown FILE`, the folder `datum init DIR` fills, and the files
//! `datum pull` trusts (its `allowed_signers`, its own `pull.yaml`:
//! [`read_trusted`]).
//!
//! Their path is the operator's choice, so links in it are followed as
//! given; but a report is written without ever following a link at the
//! file itself (a link found there is an error, never a target): to a fresh
//! temporary file beside it (`O_EXCL | O_NOFOLLOW`, mode 0600), renamed over
//! the name relative to the folder's handle, which replaces a file and never
//! writes into what a link points at.
//!
//! This module must not be used for managed paths (see [`crate::Host`]) or
//! for Datum's own folders (see [`crate::PrivateDir`]).

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write as _};
use std::path::{Component, Path};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::boundary::{Dir, errno, remove_if_ours, remove_if_same};
use crate::{FileKind, HostError};

/// Reads a file the operator named, links followed as given.
pub fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut file = std::fs::File::from(fd);
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Opens the folder the operator named (links followed as given, as the
/// shell and `ls` would), to be read relative to its handle: `datum
/// fingerprint PATH` fingerprints the tree the path names. A path that is
/// not a folder is an error (`ENOTDIR`).
pub fn open_dir(path: &Path) -> std::io::Result<std::os::fd::OwnedFd> {
    Ok(rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// The size of the file the operator named (links followed as given).
pub fn size(path: &Path) -> std::io::Result<u64> {
    std::fs::metadata(path).map(|m| m.len())
}

/// [`read`] as text (invalid UTF-8 is an error).
pub fn read_to_string(path: &Path) -> std::io::Result<String> {
    String::from_utf8(read(path)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Writes `bytes` to the report file `path` (see the module header).
pub fn write_report(path: &Path, bytes: &[u8]) -> Result<(), HostError> {
    write_named(path, bytes, 0o644)
}

/// [`write_report`] for a file holding a secret (the credentials `datum
/// server enroll --out FILE` writes): mode 0600 from the first byte.
pub fn write_secret(path: &Path, bytes: &[u8]) -> Result<(), HostError> {
    write_named(path, bytes, 0o600)
}

/// Reads the file [`write_report`] or [`write_secret`] would replace at
/// `path` (`datum server enroll --out FILE` keeps what it does not write of
/// an existing one): `None` when nothing is there. A link or anything but a
/// file there is refused as those writes refuse it, and never read through.
pub fn read_replaced(path: &Path) -> Result<Option<Vec<u8>>, HostError> {
    let (dir, name, found) = replaced(path, "read")?;
    if found.is_none() {
        return Ok(None);
    }
    let fd = rustix::fs::openat(
        dir.fd(),
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| HostError::io("read", path, errno(e)))?;
    let mut file = std::fs::File::from(fd);
    let meta = file
        .metadata()
        .map_err(|e| HostError::io("read", path, e))?;
    if !meta.is_file() {
        return Err(refused("read", path, "not a regular file".to_owned()));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| HostError::io("read", path, e))?;
    Ok(Some(bytes))
}

/// The folder of `path` and its last component, and what is there now
/// (refused unless nothing or a file).
fn replaced<'p>(
    path: &'p Path,
    op: &'static str,
) -> Result<(Dir, &'p OsStr, Option<crate::Stat>), HostError> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(HostError::io(
            op,
            path,
            std::io::Error::from(std::io::ErrorKind::InvalidInput),
        ));
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let dir = Dir::open_path(parent)?;
    let found = dir.entry(name).lstat()?;
    if let Some(stat) = &found
        && stat.kind != FileKind::File
    {
        return Err(not_a_file(path, stat.kind));
    }
    Ok((dir, name, found))
}

fn not_a_file(path: &Path, kind: FileKind) -> HostError {
    HostError::NotPrivate {
        path: path.to_path_buf(),
        problem: format!(
            "a {} is where the report goes; Datum never writes through one (remove it, or name another file)",
            kind.word()
        ),
    }
}

fn write_named(path: &Path, bytes: &[u8], mode: u32) -> Result<(), HostError> {
    let (dir, name, _) = replaced(path, "write")?;
    let mut tmp = OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".tmp-{}", crate::random_suffix()));
    let tmp_path = dir.path().join(&tmp);
    let fd = rustix::fs::openat(
        dir.fd(),
        &tmp,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )
    .map_err(|e| HostError::io("create", &tmp_path, errno(e)))?;
    let mut file = std::fs::File::from(fd);
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| HostError::io("write", &tmp_path, e))
        .and_then(|()| {
            #[cfg(test)]
            BEFORE_RENAME.with_borrow(|hook| hook.as_ref().map(|h| h(&tmp_path, path)));
            rustix::fs::renameat(dir.fd(), &tmp, dir.fd(), name)
                .map_err(|e| HostError::io("write", path, errno(e)))
        });
    if written.is_err() {
        // Only the file this call made: whoever may write the folder may
        // have put their own at the temporary name.
        let _ = remove_if_ours(dir.fd(), &tmp, &file, AtFlags::empty());
    }
    written
}

#[cfg(test)]
type BeforeRename = Option<Box<dyn Fn(&Path, &Path)>>;
#[cfg(test)]
type BeforeCleanup = Option<Box<dyn Fn(&Path)>>;

#[cfg(test)]
thread_local! {
    /// Called with the temporary file's path and the report's just before
    /// the rename (tests only): what the folder's owner may do then.
    static BEFORE_RENAME: std::cell::RefCell<BeforeRename> = const { std::cell::RefCell::new(None) };
    /// Called with [`create_new_files`]' folder before a failure is cleaned
    /// up (tests only).
    static BEFORE_CLEANUP: std::cell::RefCell<BeforeCleanup> = const { std::cell::RefCell::new(None) };
}

/// Creates the folder `dir` (and its missing parents, links in the path
/// followed as given) and in it every `(relative path, content)` of `files`,
/// subfolders included: each file new (`O_EXCL | O_NOFOLLOW`, mode 0644),
/// each subfolder entered without following a link. Refuses before writing
/// anything when one of the files exists already; a write that fails removes
/// the files and folders this call created, so nothing is left half-written
/// (each only while its name still holds what was made: whoever may write
/// the folder may have put their own there).
pub fn create_new_files(dir: &Path, files: &[(&str, &str)]) -> Result<(), HostError> {
    std::fs::create_dir_all(dir).map_err(|e| HostError::io("create directory", dir, e))?;
    let top = Dir::open_path(dir)?;
    for (rel, _) in files {
        let path = dir.join(rel);
        if std::fs::symlink_metadata(&path).is_ok() {
            return Err(HostError::io(
                "create",
                &path,
                std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "it exists already; nothing was written",
                ),
            ));
        }
    }
    let mut created: Vec<Created> = Vec::new();
    let result = files.iter().try_for_each(|(rel, text)| {
        let (folder, name) = subfolder(&top, Path::new(rel), &mut created)?;
        let path = dir.join(rel);
        let fd = rustix::fs::openat(
            folder.fd(),
            &name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map_err(|e| HostError::io("create", &path, errno(e)))?;
        let made = rustix::fs::fstat(&fd).map_err(|e| HostError::io("inspect", &path, errno(e)))?;
        created.push((folder.clone(), name, made, AtFlags::empty()));
        let mut file = std::fs::File::from(fd);
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| HostError::io("write", &path, e))
    });
    if result.is_err() {
        #[cfg(test)]
        BEFORE_CLEANUP.with_borrow(|hook| hook.as_ref().map(|h| h(dir)));
        // Files first, then the folders this call made (innermost first).
        // Each only while it is the one this call made (device and inode):
        // whoever may write the folder may have put their own at its name.
        for (folder, name, made, flags) in created.iter().rev() {
            let _ = remove_if_same(folder.fd(), name, made, *flags);
        }
    }
    result
}

/// An entry [`create_new_files`] made: its folder, its name, its `fstat`
/// and how `unlinkat` removes it.
type Created = (Dir, OsString, rustix::fs::Stat, AtFlags);

/// The folder of `rel` under `top` (created where missing, recorded in
/// `created`) and the file's name.
fn subfolder(
    top: &Dir,
    rel: &Path,
    created: &mut Vec<Created>,
) -> Result<(Dir, OsString), HostError> {
    let mut components: Vec<OsString> = rel
        .components()
        .map(|c| match c {
            std::path::Component::Normal(n) => Ok(n.to_os_string()),
            _ => Err(HostError::io(
                "create",
                rel,
                std::io::Error::from(std::io::ErrorKind::InvalidInput),
            )),
        })
        .collect::<Result<_, _>>()?;
    let name = components.pop().ok_or_else(|| {
        HostError::io(
            "create",
            rel,
            std::io::Error::from(std::io::ErrorKind::InvalidInput),
        )
    })?;
    let mut folder = top.clone();
    for part in components {
        let next = match folder.open_child_dir(&part)? {
            Some(d) => d,
            None => {
                rustix::fs::mkdirat(folder.fd(), &part, Mode::from_raw_mode(0o755)).map_err(
                    |e| HostError::io("create directory", folder.path().join(&part), errno(e)),
                )?;
                // Entered only if it is the folder just made: whoever may
                // write the folder may have swapped in one of theirs.
                let made = folder.open_made_child(&part)?;
                let st = rustix::fs::fstat(made.fd())
                    .map_err(|e| HostError::io("inspect", folder.path().join(&part), errno(e)))?;
                created.push((folder.clone(), part.clone(), st, AtFlags::REMOVEDIR));
                made
            }
        };
        folder = next;
    }
    Ok((folder, name))
}

fn refused(op: &'static str, path: &Path, why: String) -> HostError {
    HostError::io(
        op,
        path,
        std::io::Error::new(std::io::ErrorKind::InvalidInput, why),
    )
}

/// Reads a file a root process trusts (a list of allowed signers, its own
/// configuration naming them), whole, refusing one larger than `limit`
/// bytes; `None` when it does not exist. The file must be owned by root or
/// by this process's user and writable by nobody else, as sshd's
/// `StrictModes` asks of `authorized_keys`: whoever can write it decides
/// what this host trusts. Links are followed (a managed file may be one);
/// the checks apply to the file reached, and to every folder on the way
/// ([`folders_on_the_way`]).
pub fn read_trusted(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, HostError> {
    let Some(fd) = open_trusted(path, false)? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| HostError::io("read", path, e))?;
    if bytes.len() as u64 > limit {
        return Err(refused("read", path, format!("larger than {limit} bytes")));
    }
    Ok(Some(bytes))
}

/// Checks, without reading it, a file a root process hands to a tool that
/// trusts what it holds (ssh's `known_hosts`): as [`read_trusted`], owned
/// by root or this process's user, writable by nobody else, every folder on
/// the way judged. `false` when it does not exist.
pub fn check_trusted(path: &Path) -> Result<bool, HostError> {
    Ok(open_trusted(path, false)?.is_some())
}

/// Checks, without reading it, a private key a root process hands to a
/// tool (`ssh -i`): as [`check_trusted`], and readable by its owner only
/// (no permission bit for group or others), as ssh asks of a key it owns
/// (it leaves out one that is not, and the connection then fails as
/// refused by the server). `false` when it does not exist.
pub fn check_private_key(path: &Path) -> Result<bool, HostError> {
    Ok(open_trusted(path, true)?.is_some())
}

/// The file a trusted read or check is about, open, once it passed: a
/// regular file (links followed), owned by root or this process's user,
/// writable by its owner only (and, for a `secret`, not readable by anyone
/// else either), reached through folders only they can write.
fn open_trusted(path: &Path, secret: bool) -> Result<Option<rustix::fd::OwnedFd>, HostError> {
    let absolute = std::path::absolute(path).map_err(|e| HostError::io("read", path, e))?;
    folders_on_the_way(&absolute)?;
    let fd = match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(HostError::io("read", path, errno(e))),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| HostError::io("read", path, errno(e)))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(refused(
            "trust",
            path,
            "it is not a regular file".to_owned(),
        ));
    }
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != 0 && st.st_uid != me {
        return Err(refused(
            "trust",
            path,
            format!(
                "it is owned by uid {}; a file that decides what this host trusts must be owned by root",
                st.st_uid
            ),
        ));
    }
    if st.st_mode & 0o022 != 0 {
        return Err(refused(
            "trust",
            path,
            format!(
                "it is writable by group or others (mode {:04o}); a file that decides what this host trusts must be writable by its owner only",
                st.st_mode & 0o7777
            ),
        ));
    }
    if secret && st.st_mode & 0o077 != 0 {
        return Err(refused(
            "trust",
            path,
            format!(
                "it is a private key that group or others may read or write (mode {:04o}); it must be readable by its owner only (chmod 600), as ssh itself refuses such a key",
                st.st_mode & 0o7777
            ),
        ));
    }
    Ok(Some(fd))
}

// ---- the folders on the way to a trusted file ------------------------
//
// [`read_trusted`] checks the file it reaches (root's, writable by its
// owner only) and follows links, since a managed file may be one. That is
// not enough on its own: whoever can write a folder on the way can put a
// link of their own in place of the file, to any file root owns whose text
// they chose. `/proc/PID/environ` of a set-uid program they started is one
// (owned by root, mode 0400, holding the environment they gave it, a line
// of which can be an `allowed_signers` line naming their key). So, as
// sshd's `StrictModes` does for `authorized_keys`, every folder on the way
// must be owned by root (or the user running Datum) and writable by its
// owner only, or have the sticky bit (as `/tmp` has it: others cannot
// rename or replace what root put there). Links are followed one at a time
// from the folder handles, each in a folder judged first, so the folders of
// every link on the way and of the file reached are judged.

/// Links followed on the way before the walk gives up (the kernel's limit).
const MAX_LINKS: usize = 40;

/// Refuses `file` (an absolute path) when a folder on the way to it (through any link) could
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
                let me = crate::accounts::current_ids().0;
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
    let me = crate::accounts::current_ids().0;
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

    #[test]
    fn every_folder_on_the_way_through_links_is_judged() {
        use std::os::unix::fs::PermissionsExt as _;
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

    #[test]
    fn a_file_to_be_replaced_is_read_never_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("report.yaml");
        assert_eq!(read_replaced(&file).unwrap(), None);
        std::fs::write(&file, "kept").unwrap();
        assert_eq!(read_replaced(&file).unwrap().as_deref(), Some(&b"kept"[..]));
        let link = dir.path().join("link.yaml");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let err = read_replaced(&link).unwrap_err().to_string();
        assert!(err.contains("a symlink is where the report goes"), "{err}");
        std::fs::create_dir(dir.path().join("folder")).unwrap();
        assert!(read_replaced(&dir.path().join("folder")).is_err());
    }

    #[test]
    fn new_files_are_all_written_or_none_is() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("new/repo");
        create_new_files(&repo, &[("a.yaml", "a"), ("sub/deeper/b.yaml", "b")]).unwrap();
        assert_eq!(
            std::fs::read_to_string(repo.join("sub/deeper/b.yaml")).unwrap(),
            "b"
        );
        // An existing file: refused before anything is written.
        let err = create_new_files(&repo, &[("c.yaml", "c"), ("a.yaml", "again")]).unwrap_err();
        assert!(err.to_string().contains("exists already"), "{err}");
        assert!(!repo.join("c.yaml").exists());
        assert_eq!(std::fs::read_to_string(repo.join("a.yaml")).unwrap(), "a");
        // A failure half-way (a file where a folder must go) takes back
        // what this call created, folders included.
        let err = create_new_files(
            &repo,
            &[("d.yaml", "d"), ("e/f.yaml", "f"), ("a.yaml/g.yaml", "g")],
        )
        .unwrap_err();
        assert!(err.to_string().contains("a.yaml"), "{err}");
        assert!(!repo.join("d.yaml").exists());
        assert!(!repo.join("e").exists());
        assert!(repo.join("a.yaml").is_file());
    }

    /// Whoever can write the folder may swap a subfolder `create_new_files`
    /// has just made for one of theirs before it is entered (here with
    /// `RENAME_EXCHANGE` from another thread, as soon as it appears): no
    /// file is ever written into theirs.
    #[test]
    fn a_subfolder_swapped_before_it_is_entered_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let root = base.path().to_path_buf();
        let theirs = crate::race::users_folder(&root);
        let mut race = crate::race::Race::exchanging(&root, "sub");
        let (mut written, mut refused) = (0, 0);
        while race.goes_on() {
            let made = race.armed(|| create_new_files(&root, &[("sub/site.yaml", "x\n")]));
            if made.is_err() {
                refused += 1;
            }
            let (user, ours) = if root.join("sub/marker").exists() {
                (root.join("sub"), root.join("theirs"))
            } else {
                (root.join("theirs"), root.join("sub"))
            };
            if std::fs::read_dir(&user).unwrap().count() != 1 {
                written += 1;
                let _ = std::fs::remove_file(user.join("site.yaml"));
            }
            let _ = std::fs::remove_file(ours.join("site.yaml"));
            let _ = std::fs::remove_dir(&ours);
            if user != theirs {
                std::fs::rename(&user, &theirs).unwrap();
            }
        }
        let (tries, swaps) = race.finish();
        assert_eq!(
            written, 0,
            "{written} of {tries} tries wrote into the user's folder ({swaps} swaps, {refused} refused)"
        );
        eprintln!("{tries} tries, {swaps} swaps, {refused} refused");
    }

    #[test]
    fn a_trusted_file_must_be_writable_by_its_owner_only() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("allowed_signers");
        std::fs::write(&p, b"alice ssh-ed25519 AAAA").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            read_trusted(&p, 100).unwrap().unwrap(),
            b"alice ssh-ed25519 AAAA"
        );
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o664)).unwrap();
        let err = read_trusted(&p, 100).unwrap_err();
        assert!(
            err.to_string()
                .contains("writable by group or others (mode 0664)"),
            "{err}"
        );
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(read_trusted(&p, 3).is_err(), "over the limit");
        assert_eq!(read_trusted(&dir.path().join("none"), 3).unwrap(), None);
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(&p, Some(65534), None).unwrap();
            let err = read_trusted(&p, 100).unwrap_err();
            assert!(err.to_string().contains("owned by uid 65534"), "{err}");
        }
    }

    /// Every file a root process trusts (its configuration, a saved plan,
    /// a pull's allowed signers) is judged with the folders on the way to
    /// it: whoever can write one of them can put a link of their own in the
    /// file's place, to a file root owns whose text they chose. A relative
    /// path (`datum apply web-01.plan`) is walked from the working folder.
    #[test]
    fn a_trusted_file_in_a_folder_others_may_write_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let p = open.join("web-01.plan");
        std::fs::write(&p, b"{}").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let err = read_trusted(&p, 100).unwrap_err();
        assert!(err.to_string().contains("mode 0777"), "{err}");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(read_trusted(&p, 100).unwrap().unwrap(), b"{}");
    }

    #[test]
    fn a_failed_creation_takes_back_only_what_it_created() {
        // Whoever may write the folder replaces a file this call created,
        // or a folder it created, before the failure is cleaned up.
        for folder in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let repo = dir.path().join("repo");
            BEFORE_CLEANUP.set(Some(Box::new(move |repo: &Path| {
                if folder {
                    std::fs::rename(repo.join("sub"), repo.join("moved")).unwrap();
                    std::fs::create_dir(repo.join("sub")).unwrap();
                } else {
                    std::fs::rename(repo.join("sub/a.yaml"), repo.join("moved")).unwrap();
                    std::fs::write(repo.join("sub/a.yaml"), b"theirs").unwrap();
                }
            })));
            // A file where a folder must go: a failure half-way.
            let err =
                create_new_files(&repo, &[("sub/a.yaml", "a"), ("sub/a.yaml/b", "b")]).unwrap_err();
            BEFORE_CLEANUP.set(None);
            assert!(err.to_string().contains("a.yaml"), "{err}");
            if folder {
                assert!(
                    repo.join("sub").is_dir(),
                    "the folder put there was removed"
                );
            } else {
                assert_eq!(
                    std::fs::read(repo.join("sub/a.yaml")).ok().as_deref(),
                    Some(&b"theirs"[..]),
                    "the file put there was removed"
                );
            }
        }
    }

    #[test]
    fn a_failed_report_removes_its_own_temporary_file_and_nothing_else() {
        // The owner of the report's folder moves the temporary file away,
        // puts a file of theirs at its name and a folder at the report's
        // (so the rename fails), between the write and the rename.
        let dir = tempfile::tempdir().unwrap();
        let report = dir.path().join("report.md");
        let tmp_seen = std::rc::Rc::new(std::cell::RefCell::new(None));
        let seen = tmp_seen.clone();
        BEFORE_RENAME.set(Some(Box::new(move |tmp: &Path, path: &Path| {
            std::fs::rename(tmp, tmp.with_file_name("moved")).unwrap();
            std::fs::write(tmp, b"theirs").unwrap();
            std::fs::create_dir(path).unwrap();
            *seen.borrow_mut() = Some(tmp.to_path_buf());
        })));
        let err = write_report(&report, b"report").unwrap_err();
        BEFORE_RENAME.set(None);
        assert_eq!(err.path(), Some(report.as_path()), "{err}");
        let tmp = tmp_seen.borrow().clone().unwrap();
        assert_eq!(
            std::fs::read(&tmp).ok().as_deref(),
            Some(&b"theirs"[..]),
            "the file put at the temporary name was removed"
        );
        assert_eq!(std::fs::read(dir.path().join("moved")).unwrap(), b"report");
        // Left alone, its own temporary file goes when the rename fails.
        let other = dir.path().join("other.md");
        BEFORE_RENAME.set(Some(Box::new(|_: &Path, path: &Path| {
            std::fs::create_dir(path).unwrap();
        })));
        write_report(&other, b"report").unwrap_err();
        BEFORE_RENAME.set(None);
        assert!(
            std::fs::read_dir(dir.path()).unwrap().all(|e| !e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains("other.md.tmp-")),
            "the temporary file stayed"
        );
    }

    #[test]
    fn a_report_replaces_a_file_and_refuses_a_planted_link() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let report = dir.path().join("report.md");
        write_report(&report, b"one").unwrap();
        write_report(&report, b"two").unwrap();
        assert_eq!(std::fs::read(&report).unwrap(), b"two");
        let victim = outside.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let link = dir.path().join("linked.md");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let err = write_report(&link, b"report").unwrap_err();
        assert!(
            err.to_string().contains("symlink is where the report goes"),
            "{err}"
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        // Nothing left behind but the two names.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }
}
