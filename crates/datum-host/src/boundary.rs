//! The file-system boundary: how a declared path is reached on the host.
//!
//! Every managed path is reached from a handle on the root, one component at
//! a time (`openat(O_PATH | O_NOFOLLOW)` per component, then `fstat`), never
//! through a textual path the kernel would walk again:
//!
//! - a component that is a symbolic link is refused ([`HostError::ParentLink`])
//!   unless the repository names it in `boundary.follow_links`; such a link is
//!   then read once and resolved *inside the root* (an absolute target is
//!   taken relative to the root, `..` never climbs above it), by the same walk;
//!   a link an unprivileged user can change (it is in their folder, or is
//!   theirs) may only lead into a directory of theirs
//!   ([`HostError::UnsafeLink`]), unless `boundary.owner_transitions` names it;
//! - entering a directory owned by someone else from a directory owned by an
//!   unprivileged user is refused ([`HostError::UnsafeTransition`], systemd's
//!   `CHASE_SAFE`: that user could swap the child for another at any moment)
//!   unless the repository names the child in `boundary.owner_transitions`;
//! - what is reached is an open directory ([`Dir`]) and every operation on
//!   the final entry is relative to it ([`crate::Located`]): a directory
//!   swapped for a link after it was opened cannot redirect anything.
//!
//! Why handles and not cap-std: cap-std gives the same walk (`openat2` with
//! `RESOLVE_BENEATH` where the kernel has it), but it makes every path
//! relative to its directory and hides the descriptors behind its own types,
//! while Datum needs three things it does not offer: the owner check at each
//! step (`CHASE_SAFE`), repository-approved links resolved inside the root,
//! and the staged copy's rename relative to the very handle it was created
//! in. rustix (already a dependency, no `unsafe` needed) gives exactly the
//! system calls, so the walk is about a hundred lines here instead.
//!
//! Directories opened by a pass are remembered by their declared path (the
//! [`crate::Host`] is per pass), so a path is resolved once, and a File next
//! to 19,999 others costs one `fstatat`; a bounded number stay open, and one
//! let go is walked to again, from the deepest folder still remembered on
//! its way, with every check of the first walk.
//! This module must not decide what a change is: it only reaches paths.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::HostError;
use crate::fs::FileKind;

/// How many repository-approved links one lookup may follow (the kernel's
/// limit, as `ELOOP` would say).
const MAX_LINKS: usize = 40;

pub use datum_core::Boundary;

/// An open directory on the host, reached without following links.
///
/// The descriptor is `O_PATH` (no read permission needed to walk through);
/// [`Dir::list`] and [`Dir::sync`] open `.` for real when they need to.
/// Clones share the descriptor.
#[derive(Debug, Clone)]
pub struct Dir {
    fd: Arc<OwnedFd>,
    /// The real path it was reached by: for messages and for programs
    /// (validators) that take paths. (Shared, so a clone allocates nothing:
    /// a pass clones the directory of every file it looks at.)
    path: Arc<Path>,
    /// The declared path (as on the managed machine), `/` for the root.
    declared: Arc<Path>,
    /// Owner when it was opened (for the next step's `CHASE_SAFE` check).
    uid: u32,
    /// Where what Datum must tell the operator about this pass's work in
    /// it is kept (shared with the [`crate::Host`] it was reached from).
    notices: Notices,
}

/// What a pass must tell the operator without it being any resource's
/// failure (a staging folder a local user moved away, left where they put
/// it): collected by the [`crate::Host`], shown under the pass's summary.
/// Clones share the list.
#[derive(Debug, Clone, Default)]
pub struct Notices(Arc<std::sync::Mutex<Vec<String>>>);

impl Notices {
    pub fn push(&self, notice: String) {
        if let Ok(mut list) = self.0.lock() {
            list.push(notice);
        }
    }

    /// Everything noted so far, in the order noted; the list is emptied.
    pub fn take(&self) -> Vec<String> {
        self.0
            .lock()
            .map(|mut list| std::mem::take(&mut *list))
            .unwrap_or_default()
    }
}

fn open_flags() -> OFlags {
    OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

pub(crate) fn errno(e: Errno) -> std::io::Error {
    std::io::Error::from(e)
}

/// Removes `name` from `dir` (`unlinkat` with `flags`) only while it is the
/// very entry `ours` is open on (same device and inode, looked at through
/// `dir` without following a link). Whoever owns `dir` may move Datum's
/// temporary entry away or put their own at its name at any moment: then
/// nothing is removed, and that is no error (`Ok(false)`, as when nothing
/// is there). Between the look and the removal the name can still be
/// swapped; an `unlinkat` then takes only what the flags allow (with
/// `REMOVEDIR`, an empty folder), under a name Datum made.
pub(crate) fn remove_if_ours(
    dir: impl AsFd,
    name: &OsStr,
    ours: impl AsFd,
    flags: rustix::fs::AtFlags,
) -> Result<bool, Errno> {
    remove_if_same(dir, name, &rustix::fs::fstat(ours)?, flags)
}

/// [`remove_if_ours`] for an entry known by the `fstat` of a handle since
/// closed.
pub(crate) fn remove_if_same(
    dir: impl AsFd,
    name: &OsStr,
    ours: &rustix::fs::Stat,
    flags: rustix::fs::AtFlags,
) -> Result<bool, Errno> {
    match rustix::fs::statat(&dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(there) if there.st_dev == ours.st_dev && there.st_ino == ours.st_ino => {}
        Ok(_) | Err(Errno::NOENT) => return Ok(false),
        Err(e) => return Err(e),
    }
    match rustix::fs::unlinkat(&dir, name, flags) {
        Ok(()) => Ok(true),
        Err(Errno::NOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Opens the folder `name` that Datum has just made in `dir`
/// (`mkdirat(dir, name, 0700)`), for reading, and makes sure it is that
/// folder: the kernel gives no handle on what `mkdirat` made, and whoever
/// can write to `dir` may swap the new folder for a link, or a folder of
/// their own, before it is opened. What is opened must be a directory
/// (never through a link), owned by this process's user, that nobody else
/// may write to (no group or other write bits) and empty: no one but this
/// user can have made such a folder or put anything in it, so it is as
/// good as the one just made (at worst, another Datum made and emptied,
/// which a user moved). Anything else is refused ([`HostError::NotMade`]),
/// and left as it is.
pub(crate) fn open_made_dir(
    dir: impl AsFd,
    name: &OsStr,
    path: &Path,
) -> Result<OwnedFd, HostError> {
    let not_made = |found: String| HostError::NotMade {
        path: path.to_path_buf(),
        found,
    };
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(&dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Err(not_made("nothing (it was moved away)".to_owned())),
        Err(e @ (Errno::LOOP | Errno::NOTDIR)) => {
            return Err(
                match rustix::fs::statat(&dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => not_made(format!(
                        "a {}",
                        kind_of(FileType::from_raw_mode(st.st_mode)).word()
                    )),
                    Err(_) => HostError::io("open directory", path, errno(e)),
                },
            );
        }
        Err(e) => return Err(HostError::io("open directory", path, errno(e))),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| HostError::io("inspect", path, errno(e)))?;
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != me {
        return Err(not_made(format!("a folder owned by uid {}", st.st_uid)));
    }
    // Group and other read and search bits are not refused: a file system
    // that ignores modes (vfat mounted with `umask=022`) shows every folder
    // 0755, and nobody but its owner can put anything in such a folder.
    if st.st_mode & 0o022 != 0 {
        return Err(not_made(format!(
            "a folder others may write to (mode {:04o})",
            st.st_mode & 0o7777
        )));
    }
    let mut listing =
        rustix::fs::Dir::read_from(&fd).map_err(|e| HostError::io("list", path, errno(e)))?;
    while let Some(item) = listing.read() {
        let item = item.map_err(|e| HostError::io("list", path, errno(e)))?;
        let entry = item.file_name().to_bytes();
        if entry != b"." && entry != b".." {
            return Err(not_made("a folder that is not empty".to_owned()));
        }
    }
    Ok(fd)
}

impl Dir {
    /// Opens a directory named by the operator (the root, `--state`'s
    /// folder, `--patch-dir`): links in *that* path are followed as the
    /// kernel does, since the operator chose it; it must be a directory.
    pub fn open_path(path: &Path) -> Result<Dir, HostError> {
        let fd = rustix::fs::open(
            path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| HostError::io("open directory", path, errno(e)))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| HostError::io("inspect", path, errno(e)))?;
        Ok(Dir {
            fd: Arc::new(fd),
            path: Arc::from(path),
            declared: Arc::from(Path::new("/")),
            uid: st.st_uid,
            notices: Notices::default(),
        })
    }

    /// The same directory, its notices kept in `notices` (the host's).
    pub(crate) fn with_notices(self, notices: Notices) -> Dir {
        Dir { notices, ..self }
    }

    /// Where notices about work in this directory go.
    pub(crate) fn notices(&self) -> &Notices {
        &self.notices
    }

    /// The real path this directory was reached by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The declared path (as on the managed machine).
    pub fn declared(&self) -> &Path {
        &self.declared
    }

    /// The owner when it was opened.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The entry `name` (one component) inside this directory.
    pub fn entry(&self, name: &OsStr) -> crate::Located {
        crate::Located::new(self.clone(), name.to_owned())
    }

    /// `lstat` of the entry `name` (`None` when nothing is there): one
    /// `fstatat`, nothing allocated unless it fails.
    pub fn lstat_entry(&self, name: &OsStr) -> Result<Option<crate::Stat>, HostError> {
        match rustix::fs::statat(self.fd(), name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(crate::fs::stat_of_raw(&st))),
            Err(e) => {
                let e = errno(e);
                if crate::fs::is_absent(&e) {
                    Ok(None)
                } else {
                    Err(HostError::io("inspect", self.path.join(name), e))
                }
            }
        }
    }

    /// This directory opened for reading (listing, fsync).
    pub(crate) fn reopen(&self) -> Result<OwnedFd, HostError> {
        rustix::fs::openat(
            self.fd(),
            c".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| HostError::io("open directory", &*self.path, errno(e)))
    }

    /// The entries of this directory (`.` and `..` left out), with their
    /// kind from `readdir` (an `lstat` where the file system does not say).
    pub fn list(&self) -> Result<Vec<(OsString, FileKind)>, HostError> {
        let fd = self.reopen()?;
        let mut listing =
            rustix::fs::Dir::new(fd).map_err(|e| HostError::io("list", &*self.path, errno(e)))?;
        let mut out = Vec::new();
        while let Some(item) = listing.read() {
            let item = item.map_err(|e| HostError::io("list", &*self.path, errno(e)))?;
            let name = item.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let name = OsStr::from_bytes(name).to_owned();
            let kind = match item.file_type() {
                FileType::Unknown => match self.entry(&name).lstat()? {
                    Some(stat) => stat.kind,
                    None => continue,
                },
                other => kind_of(other),
            };
            out.push((name, kind));
        }
        Ok(out)
    }

    /// fsyncs the directory, so a rename or removal in it is durable.
    pub fn sync(&self) -> Result<(), HostError> {
        let fd = self.reopen()?;
        rustix::fs::fsync(&fd).map_err(|e| HostError::io("sync directory", &*self.path, errno(e)))
    }

    /// Flushes everything written to this directory's file system
    /// (`syncfs`): one call for a whole tree written beneath it, instead of
    /// an fsync per file.
    pub fn sync_filesystem(&self) -> Result<(), HostError> {
        let fd = self.reopen()?;
        rustix::fs::syncfs(&fd)
            .map_err(|e| HostError::io("sync the file system of", &*self.path, errno(e)))
    }

    /// Sets this directory's modification time to now (through the open
    /// directory, never by path).
    pub fn touch(&self) -> Result<(), HostError> {
        let fd = self.reopen()?;
        let now = rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        };
        rustix::fs::futimens(
            &fd,
            &rustix::fs::Timestamps {
                last_access: now,
                last_modification: now,
            },
        )
        .map_err(|e| HostError::io("touch", &*self.path, errno(e)))
    }

    /// The folder `name` Datum has just made in this one (`mkdirat`),
    /// opened and checked by [`open_made_dir`]: the folder's owner may have
    /// swapped it for one of theirs ([`HostError::NotMade`]).
    pub(crate) fn open_made_child(&self, name: &OsStr) -> Result<Dir, HostError> {
        let path = self.path.join(name);
        let fd = open_made_dir(self.fd(), name, &path)?;
        let st = rustix::fs::fstat(&fd).map_err(|e| HostError::io("inspect", &path, errno(e)))?;
        Ok(Dir {
            fd: Arc::new(fd),
            declared: Arc::from(self.declared.join(name)),
            path: Arc::from(path),
            uid: st.st_uid,
            notices: self.notices.clone(),
        })
    }

    /// Opens the child directory `name` without following a link, or
    /// `None` when nothing is there. A link or another kind of entry is an
    /// error naming it; the ownership rule is not applied (see
    /// `Walker::step` for the walk that applies it).
    pub fn open_child_dir(&self, name: &OsStr) -> Result<Option<Dir>, HostError> {
        let path = self.path.join(name);
        let fd = match rustix::fs::openat(self.fd(), name, open_flags(), Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(HostError::io("open directory", &path, errno(e))),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| HostError::io("inspect", &path, errno(e)))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            return Err(HostError::NotADirectory {
                parent: path.clone(),
                path,
            });
        }
        Ok(Some(Dir {
            fd: Arc::new(fd),
            declared: Arc::from(self.declared.join(name)),
            path: Arc::from(path),
            uid: st.st_uid,
            notices: self.notices.clone(),
        }))
    }
}

pub(crate) fn kind_of(file_type: FileType) -> FileKind {
    match file_type {
        FileType::Symlink => FileKind::Symlink,
        FileType::Directory => FileKind::Directory,
        FileType::Fifo => FileKind::Fifo,
        FileType::Socket => FileKind::Socket,
        FileType::BlockDevice => FileKind::BlockDevice,
        FileType::CharacterDevice => FileKind::CharDevice,
        _ => FileKind::File,
    }
}

/// The normal components of a declared absolute path (already checked by
/// `paths::check_declared`).
pub(crate) fn components(declared: &Path) -> Vec<&OsStr> {
    declared
        .components()
        .filter_map(|c| match c {
            Component::Normal(part) => Some(part),
            _ => None,
        })
        .collect()
}

/// `base` joined with a link's target, folded lexically inside the root:
/// an absolute target starts at the root, `..` never climbs above it.
fn resolve_in_root(base: &Path, target: &Path) -> PathBuf {
    crate::paths::lexical_normal(&Path::new("/").join(base).join(target))
}

/// One walk from the root to a declared directory, with the pass's cache of
/// directories already opened.
pub(crate) struct Walker<'a> {
    pub root: &'a Dir,
    pub boundary: &'a Boundary,
    /// Finds an already opened directory by its declared path.
    pub cached: &'a dyn Fn(&Path) -> Option<Dir>,
    /// Remembers a directory opened on the way.
    pub remember: &'a dyn Fn(&Path, &Dir),
}

impl Walker<'_> {
    /// Opens the directory at `declared` (absolute, normalised). `target`
    /// gives the real path of what the caller is reaching, for messages (only
    /// built when there is one to write).
    pub fn dir(&self, declared: &Path, target: &dyn Fn() -> PathBuf) -> Result<Dir, HostError> {
        let mut links = 0;
        self.dir_inner(declared, target, &mut links)
    }

    fn dir_inner(
        &self,
        declared: &Path,
        target: &dyn Fn() -> PathBuf,
        links: &mut usize,
    ) -> Result<Dir, HostError> {
        if declared == Path::new("/") {
            return Ok(self.root.clone());
        }
        if let Some(dir) = (self.cached)(declared) {
            return Ok(dir);
        }
        // Start from the deepest directory already open on the way.
        let parts = components(declared);
        let mut start = 0;
        let mut current = self.root.clone();
        for depth in (1..parts.len()).rev() {
            let mut prefix = PathBuf::from("/");
            prefix.extend(&parts[..depth]);
            if let Some(dir) = (self.cached)(&prefix) {
                current = dir;
                start = depth;
                break;
            }
        }
        for (i, name) in parts.iter().enumerate().skip(start) {
            let mut here = PathBuf::from("/");
            here.extend(&parts[..=i]);
            current = match self.step(&current, name, &here, target)? {
                Step::Dir(dir) => dir,
                Step::Link { to, controllers } => {
                    *links += 1;
                    if *links > MAX_LINKS {
                        return Err(HostError::io(
                            "reach",
                            target(),
                            std::io::Error::other(format!(
                                "following the links `boundary.follow_links` lists took more than {MAX_LINKS} steps, so they form a loop: {} -> {} is one of them",
                                here.display(),
                                to.display()
                            )),
                        ));
                    }
                    // A relative target starts where the link really is
                    // (the folder holding it, reached through any link
                    // before it, however far above), as the kernel reads
                    // it, not where its declared spelling puts it: the
                    // folder's real path under the root, which no link is
                    // in (a folder opened below a followed link keeps the
                    // spelling it was declared by).
                    let base = current
                        .path
                        .strip_prefix(&*self.root.path)
                        .unwrap_or(current.declared());
                    let resolved = resolve_in_root(base, &to);
                    let dir = self.dir_inner(&resolved, target, links)?;
                    // A link an unprivileged user can change (it sits in
                    // their folder, or is theirs) leads where that user
                    // says: only into what they own, as a step from their
                    // folder may (CHASE_SAFE), unless the repository
                    // trusts them with it. Two such users (one's link in
                    // the other's shared folder): into what both own.
                    if let Some(uid) = controllers
                        .into_iter()
                        .find(|&uid| uid != 0 && uid != dir.uid)
                        && !self.boundary.trusts(&here)
                    {
                        return Err(HostError::UnsafeLink(Box::new(crate::error::UnsafeLink {
                            path: target(),
                            link: current.path.join(name),
                            from_uid: uid,
                            into: dir.path.to_path_buf(),
                            into_uid: dir.uid,
                            declared_link: here,
                        })));
                    }
                    // Known by the link's spelling from here on (what is
                    // below it is located, and forgotten when Datum
                    // changes the link, by the declared path), and
                    // remembered under it: the link is read once while that
                    // is kept, and read and judged again like this when the
                    // host's cache let it go.
                    let dir = Dir {
                        declared: Arc::from(here.as_path()),
                        ..dir
                    };
                    (self.remember)(&here, &dir);
                    dir
                }
            };
        }
        Ok(current)
    }

    /// One component: the child directory, or the target of a link the
    /// repository allows.
    fn step(
        &self,
        dir: &Dir,
        name: &OsStr,
        declared: &Path,
        target: &dyn Fn() -> PathBuf,
    ) -> Result<Step, HostError> {
        let real = dir.path.join(name);
        let fd = match rustix::fs::openat(dir.fd(), name, open_flags(), Mode::empty()) {
            Ok(fd) => fd,
            // Named as the folder the target needs, as `mkdir` would say.
            Err(Errno::NOENT) => {
                let target = target();
                return Err(HostError::MissingParent {
                    parent: target.parent().map_or(real, Path::to_path_buf),
                    path: target,
                });
            }
            Err(e) => return Err(HostError::io("open directory", &real, errno(e))),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| HostError::io("inspect", &real, errno(e)))?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => {
                if dir.uid != 0 && dir.uid != st.st_uid && !self.boundary.trusts(declared) {
                    return Err(HostError::UnsafeTransition(Box::new(
                        crate::error::UnsafeTransition {
                            path: target(),
                            from: dir.path.to_path_buf(),
                            from_uid: dir.uid,
                            into: real,
                            into_uid: st.st_uid,
                            declared_into: declared.to_path_buf(),
                        },
                    )));
                }
                let opened = Dir {
                    fd: Arc::new(fd),
                    path: Arc::from(real),
                    declared: Arc::from(declared),
                    uid: st.st_uid,
                    notices: dir.notices.clone(),
                };
                (self.remember)(declared, &opened);
                Ok(Step::Dir(opened))
            }
            FileType::Symlink => {
                // Read from the link just opened and inspected (an empty
                // name reads an O_PATH descriptor's own link), not by its
                // name again: whoever can write to the folder could put
                // their own link there in between, and its target would be
                // followed with this one's owner.
                let to = rustix::fs::readlinkat(&fd, c"", Vec::new())
                    .map_err(|e| HostError::io("read symlink", &real, errno(e)))?;
                let to = PathBuf::from(OsStr::from_bytes(to.as_bytes()));
                if self.boundary.follows(declared) {
                    // Who can point the link elsewhere: the owner of its
                    // folder, or the link's own owner (a sticky folder
                    // such as /tmp lets anyone make links in it).
                    Ok(Step::Link {
                        to,
                        controllers: [dir.uid, st.st_uid],
                    })
                } else {
                    Err(HostError::ParentLink(Box::new(crate::error::ParentLink {
                        path: target(),
                        link: real,
                        target: to,
                        declared_link: declared.to_path_buf(),
                    })))
                }
            }
            _ => Err(HostError::NotADirectory {
                path: target(),
                parent: real,
            }),
        }
    }
}

enum Step {
    Dir(Dir),
    /// A link the repository allows: its target, and who can change it
    /// (the owners of its folder and of the link; root is no concern).
    Link {
        to: PathBuf,
        controllers: [u32; 2],
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `mkdirat` made is taken when it is this user's, empty and
    /// writable by nobody else, whatever read bits a file system that
    /// ignores modes shows (vfat with `umask=022`: every folder 0755);
    /// anything else is refused, naming what was found.
    #[test]
    fn a_folder_just_made_is_taken_only_if_nobody_else_can_have_filled_it() {
        use std::os::unix::fs::PermissionsExt as _;
        let base = tempfile::tempdir().unwrap();
        let dir =
            rustix::fs::open(base.path(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let made = |name: &str, mode: u32| {
            let p = base.path().join(name);
            std::fs::create_dir(&p).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            open_made_dir(&dir, OsStr::new(name), &p)
        };
        assert!(made("private", 0o700).is_ok());
        assert!(made("readable", 0o755).is_ok());
        let err = made("writable", 0o775).unwrap_err().to_string();
        assert!(
            err.contains("a folder others may write to (mode 0775)"),
            "{err}"
        );
        std::fs::create_dir(base.path().join("full")).unwrap();
        std::fs::write(base.path().join("full/x"), b"").unwrap();
        let err = open_made_dir(&dir, OsStr::new("full"), &base.path().join("full"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("a folder that is not empty"), "{err}");
        std::os::unix::fs::symlink("private", base.path().join("link")).unwrap();
        let err = open_made_dir(&dir, OsStr::new("link"), &base.path().join("link"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("found a symlink at its name"), "{err}");
    }

    #[test]
    fn link_targets_resolve_inside_the_root() {
        let cases = [
            ("/var", "/run", "/run"),
            ("/var", "../run", "/run"),
            ("/var", "../../../../etc", "/etc"),
            ("/a/b", "c/../d", "/a/b/d"),
            ("/", "/", "/"),
        ];
        for (base, target, want) in cases {
            assert_eq!(
                resolve_in_root(Path::new(base), Path::new(target)),
                PathBuf::from(want),
                "{base} + {target}"
            );
        }
    }
}
