//! Deployment primitives: folders reached from a directory handle one
//! component at a time, private folders, a tree of files written beneath a
//! handle, the atomic replacement of a symlink, and removal that never
//! follows a link.
//!
//! [`Folder`] is an open directory. Every entry below it is reached with
//! `openat(2)` and friends relative to it, `O_NOFOLLOW` on each component, so
//! a symlink planted anywhere in a path is refused rather than followed, and
//! files are created with `O_EXCL` (never written through something already
//! there). [`TreeWriter`] writes a whole tree (a repository revision) beneath
//! a fresh folder that way, refusing path components such as `..`, `.git`
//! and empty ones. [`Folder::replace_link`] is the atomic switch: a new
//! symlink made under a temporary name and renamed over the old one, so a
//! reader resolving the link sees the old target or the new one, never
//! neither. [`pinned`] resolves such a link once, so a command that reads a
//! whole repository reads one revision of it even while the link moves.
//!
//! This module must not decide what is deployed, where, or when: the pull
//! logic (`datum-pull`) does. It only carries the operations out, and every
//! error names the path it was about.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use crate::{FileKind, HostError};

/// How often a waiting [`Folder::lock`] retries.
const LOCK_POLL: Duration = Duration::from_millis(50);

/// An open directory and the path it was reached by (for messages).
#[derive(Debug)]
pub struct Folder {
    fd: OwnedFd,
    path: PathBuf,
}

fn io(op: &'static str, path: &Path, e: Errno) -> HostError {
    HostError::io(op, path, std::io::Error::from(e))
}

fn refused(op: &'static str, path: &Path, why: String) -> HostError {
    HostError::io(
        op,
        path,
        std::io::Error::new(std::io::ErrorKind::InvalidInput, why),
    )
}

/// `O_DIRECTORY | O_NOFOLLOW` open of `name` below `dir`.
fn open_dir_at(dir: &impl AsFd, name: &OsStr) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// One component of a relative path: a plain name, never `.`, `..`, empty
/// or holding a NUL.
fn check_component(name: &[u8]) -> Result<(), String> {
    match name {
        b"" => Err("an empty path component".to_owned()),
        b"." | b".." => Err(format!(
            "the path component `{}`",
            String::from_utf8_lossy(name)
        )),
        _ if name.contains(&0) => Err("a NUL byte".to_owned()),
        _ => Ok(()),
    }
}

impl Folder {
    /// Opens `path` as given (the root of everything below: `--root`, whose
    /// own components are the operator's to choose).
    pub fn open(path: &Path) -> Result<Folder, HostError> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io("open directory", path, e))?;
        Ok(Folder {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The folder at `rel` below this one, reached one component at a time
    /// without following a symlink. With `create`, missing components are
    /// made with that mode (exactly, whatever the umask); without it, a
    /// missing component is `Ok(None)`.
    pub fn descend(&self, rel: &Path, create: Option<u32>) -> Result<Option<Folder>, HostError> {
        let mut here = self.try_clone()?;
        for component in rel.components() {
            let std::path::Component::Normal(name) = component else {
                return Err(refused(
                    "open directory",
                    &self.path.join(rel),
                    "only plain names may follow the folder".to_owned(),
                ));
            };
            here = match here.open_dir(name)? {
                Some(next) => next,
                None => match create {
                    Some(mode) => here.create_dir(name, mode)?,
                    None => return Ok(None),
                },
            };
        }
        Ok(Some(here))
    }

    /// [`Folder::descend`], creating what is missing with mode 0700, and then
    /// making sure the folder is private: owned by this process's user and
    /// closed to everyone else. An existing folder with a wider mode is
    /// narrowed; one owned by someone else is refused (it was not made by
    /// us, and whoever owns it could change what we later read from it).
    pub fn private(&self, rel: &Path) -> Result<Folder, HostError> {
        let folder = self
            .descend(rel, Some(0o700))?
            .ok_or_else(|| io("create directory", &self.path.join(rel), Errno::NOENT))?;
        let st = rustix::fs::fstat(&folder.fd).map_err(|e| io("inspect", &folder.path, e))?;
        let me = rustix::process::geteuid().as_raw();
        if st.st_uid != me {
            return Err(refused(
                "use as a private folder",
                &folder.path,
                format!("it is owned by uid {}, not by uid {me}", st.st_uid),
            ));
        }
        if st.st_mode & 0o077 != 0 {
            rustix::fs::fchmod(&folder.fd, Mode::from_raw_mode(st.st_mode & 0o700))
                .map_err(|e| io("set the mode of", &folder.path, e))?;
        }
        Ok(folder)
    }

    fn try_clone(&self) -> Result<Folder, HostError> {
        Ok(Folder {
            fd: self
                .fd
                .try_clone()
                .map_err(|e| HostError::io("open directory", &self.path, e))?,
            path: self.path.clone(),
        })
    }

    /// The path this folder was reached by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The folder `name` directly below this one (not through a link);
    /// `None` when nothing is there. Anything else than a directory is an
    /// error naming it.
    pub fn open_dir(&self, name: &OsStr) -> Result<Option<Folder>, HostError> {
        let path = self.path.join(name);
        match open_dir_at(&self.fd, name) {
            Ok(fd) => Ok(Some(Folder { fd, path })),
            Err(Errno::NOENT) => Ok(None),
            Err(Errno::LOOP | Errno::NOTDIR) => {
                let found = self.kind_of(name)?.map_or("nothing", FileKind::word);
                Err(HostError::InTheWay {
                    path,
                    found: found.to_owned(),
                })
            }
            Err(e) => Err(io("open directory", &path, e)),
        }
    }

    /// Creates the directory `name` with `mode` (exactly) and opens it.
    pub fn create_dir(&self, name: &OsStr, mode: u32) -> Result<Folder, HostError> {
        let path = self.path.join(name);
        rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode))
            .map_err(|e| io("create directory", &path, e))?;
        let fd = open_dir_at(&self.fd, name).map_err(|e| io("open directory", &path, e))?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))
            .map_err(|e| io("set the mode of", &path, e))?;
        Ok(Folder { fd, path })
    }

    /// What `name` is (without following a link); `None` when absent.
    pub fn kind_of(&self, name: &OsStr) -> Result<Option<FileKind>, HostError> {
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(crate::fs::kind_of_mode(st.st_mode))),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(io("inspect", &self.path.join(name), e)),
        }
    }

    /// When `name` was last modified (without following a link).
    pub fn modified(&self, name: &OsStr) -> Result<SystemTime, HostError> {
        let st = rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| io("inspect", &self.path.join(name), e))?;
        let nanos = u32::try_from(st.st_mtime_nsec).unwrap_or(0);
        let since = Duration::new(u64::try_from(st.st_mtime).unwrap_or(0), nanos);
        Ok(SystemTime::UNIX_EPOCH + since)
    }

    /// Sets this folder's modification time to now.
    pub fn touch(&self) -> Result<(), HostError> {
        let now = rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        };
        rustix::fs::futimens(
            &self.fd,
            &rustix::fs::Timestamps {
                last_access: now,
                last_modification: now,
            },
        )
        .map_err(|e| io("touch", &self.path, e))
    }

    /// Creates the regular file `name` (never through anything already
    /// there) with `mode` exactly, and fills it from `content`. Returns the
    /// bytes written.
    pub fn write_file(
        &self,
        name: &OsStr,
        mode: u32,
        content: &mut dyn Read,
    ) -> Result<u64, HostError> {
        let path = self.path.join(name);
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        )
        .map_err(|e| io("create", &path, e))?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))
            .map_err(|e| io("set the mode of", &path, e))?;
        let mut file = File::from(fd);
        let written =
            std::io::copy(content, &mut file).map_err(|e| HostError::io("write", &path, e))?;
        file.flush().map_err(|e| HostError::io("write", &path, e))?;
        Ok(written)
    }

    /// Reads the regular file `name` (not through a link), refusing one
    /// larger than `limit` bytes; `None` when absent.
    pub fn read_file(&self, name: &OsStr, limit: u64) -> Result<Option<Vec<u8>>, HostError> {
        let path = self.path.join(name);
        let fd = match rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(io("read", &path, e)),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| io("read", &path, e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(refused("read", &path, "not a regular file".to_owned()));
        }
        let mut bytes = Vec::new();
        File::from(fd)
            .take(limit + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| HostError::io("read", &path, e))?;
        if bytes.len() as u64 > limit {
            return Err(refused("read", &path, format!("larger than {limit} bytes")));
        }
        Ok(Some(bytes))
    }

    /// Creates the symlink `name` pointing at `target` (stored as written).
    pub fn symlink(&self, name: &OsStr, target: &OsStr) -> Result<(), HostError> {
        rustix::fs::symlinkat(target, &self.fd, name)
            .map_err(|e| io("create symlink", &self.path.join(name), e))
    }

    /// What the symlink `name` points at; `None` when nothing is there. Any
    /// other kind of entry is an error naming it.
    pub fn read_link(&self, name: &OsStr) -> Result<Option<PathBuf>, HostError> {
        match rustix::fs::readlinkat(&self.fd, name, Vec::new()) {
            Ok(target) => Ok(Some(PathBuf::from(OsString::from_vec(target.into_bytes())))),
            Err(Errno::NOENT) => Ok(None),
            Err(Errno::INVAL) => {
                let found = self.kind_of(name)?.map_or("nothing", FileKind::word);
                Err(HostError::InTheWay {
                    path: self.path.join(name),
                    found: found.to_owned(),
                })
            }
            Err(e) => Err(io("read symlink", &self.path.join(name), e)),
        }
    }

    /// The names in this folder (`.` and `..` left out), sorted.
    pub fn entries(&self) -> Result<Vec<OsString>, HostError> {
        let mut dir =
            rustix::fs::Dir::read_from(&self.fd).map_err(|e| io("list", &self.path, e))?;
        let mut names = Vec::new();
        for entry in &mut dir {
            let entry = entry.map_err(|e| io("list", &self.path, e))?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(OsString::from_vec(name.to_vec()));
            }
        }
        names.sort();
        Ok(names)
    }

    /// Removes `name` and, when it is a directory, everything below it. A
    /// symlink is removed itself, never what it points at, at any depth.
    /// Nothing there is not an error.
    pub fn remove_all(&self, name: &OsStr) -> Result<(), HostError> {
        let path = self.path.join(name);
        match self.kind_of(name)? {
            None => Ok(()),
            Some(FileKind::Directory) => {
                // Opened without following: a directory swapped for a link
                // meanwhile is refused, not descended into.
                if let Some(sub) = self.open_dir(name)? {
                    for entry in sub.entries()? {
                        sub.remove_all(&entry)?;
                    }
                }
                match rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR) {
                    Ok(()) | Err(Errno::NOENT) => Ok(()),
                    Err(e) => Err(io("remove directory", &path, e)),
                }
            }
            Some(_) => match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => Ok(()),
                Err(e) => Err(io("remove", &path, e)),
            },
        }
    }

    /// Renames `from` to `to` within this folder, refusing to replace
    /// anything at `to`.
    pub fn rename_new(&self, from: &OsStr, to: &OsStr) -> Result<(), HostError> {
        rustix::fs::renameat_with(&self.fd, from, &self.fd, to, RenameFlags::NOREPLACE)
            .map_err(|e| io("rename into", &self.path.join(to), e))
    }

    /// Points the symlink `name` at `target`, atomically: a new link is made
    /// under a temporary name (`.NAME.datum-new.RANDOM`) and renamed over the
    /// old one, then this folder is fsynced. Anyone resolving `name` sees the
    /// old target or the new one. Anything at `name` other than a symlink is
    /// left alone and refused. Returns the previous target.
    pub fn replace_link(&self, name: &OsStr, target: &Path) -> Result<Option<PathBuf>, HostError> {
        let previous = self.read_link(name)?;
        let mut temp = OsString::from(".");
        temp.push(name);
        temp.push(LINK_TEMP_INFIX);
        temp.push(crate::staging::random_suffix());
        self.symlink(&temp, target.as_os_str())?;
        if let Err(e) = rustix::fs::renameat(&self.fd, &temp, &self.fd, name) {
            let _ = rustix::fs::unlinkat(&self.fd, &temp, AtFlags::empty());
            return Err(io("replace the symlink", &self.path.join(name), e));
        }
        self.sync()?;
        Ok(previous)
    }

    /// Removes temporary links a [`Folder::replace_link`] of `name` that was
    /// killed left behind; returns how many.
    pub fn sweep_link_temporaries(&self, name: &OsStr) -> Result<usize, HostError> {
        let mut prefix = b".".to_vec();
        prefix.extend_from_slice(name.as_bytes());
        prefix.extend_from_slice(LINK_TEMP_INFIX.as_bytes());
        let mut removed = 0;
        for entry in self.entries()? {
            if entry.as_bytes().starts_with(&prefix)
                && self.kind_of(&entry)? == Some(FileKind::Symlink)
            {
                self.remove_all(&entry)?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// fsyncs this folder, so renames and removals in it are durable.
    pub fn sync(&self) -> Result<(), HostError> {
        rustix::fs::fsync(&self.fd).map_err(|e| io("sync directory", &self.path, e))
    }

    /// Flushes everything written to this folder's file system (`syncfs`):
    /// one call for a whole tree, instead of one fsync per file.
    pub fn sync_filesystem(&self) -> Result<(), HostError> {
        rustix::fs::syncfs(&self.fd).map_err(|e| io("sync the file system of", &self.path, e))
    }

    /// Takes an exclusive `flock` on the file `name` in this folder (created
    /// 0600 if missing, never through a link), waiting up to `timeout`. The
    /// lock dies with the process.
    pub fn lock(&self, name: &OsStr, timeout: Duration) -> Result<FolderLock, HostError> {
        let path = self.path.join(name);
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| io("open lock file", &path, e))?;
        let started = Instant::now();
        loop {
            match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(FolderLock { _fd: fd, path }),
                Err(Errno::WOULDBLOCK | Errno::INTR) => {
                    let waited = started.elapsed();
                    if waited >= timeout {
                        return Err(HostError::LockTimeout { path, waited });
                    }
                    std::thread::sleep(LOCK_POLL.min(timeout - waited));
                }
                Err(e) => return Err(io("lock", &path, e)),
            }
        }
    }
}

/// What sets a temporary link of [`Folder::replace_link`] apart.
const LINK_TEMP_INFIX: &str = ".datum-new.";

/// An exclusive lock taken by [`Folder::lock`]; released when dropped.
#[derive(Debug)]
pub struct FolderLock {
    _fd: OwnedFd,
    path: PathBuf,
}

impl FolderLock {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// `path` itself, or, when it is a symlink, the real path of what it points
/// at right now. A command that reads a whole repository through a link
/// that may be switched meanwhile pins it first, so every file comes from
/// the same revision.
pub fn pinned(path: &Path) -> Result<PathBuf, HostError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::canonicalize(path).map_err(|e| HostError::io("resolve the link", path, e))
        }
        _ => Ok(path.to_path_buf()),
    }
}

/// Reads a file a root process trusts (a list of allowed signers, its own
/// configuration naming them), whole, refusing one larger than `limit`
/// bytes; `None` when it does not exist. The file must be owned by root or
/// by this process's user and writable by nobody else, as sshd's
/// `StrictModes` asks of `authorized_keys`: whoever can write it decides
/// what this host trusts. Links are followed (a managed file may be one);
/// the checks apply to the file reached.
pub fn read_trusted(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, HostError> {
    let fd = match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(io("read", path, e)),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| io("read", path, e))?;
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
    let mut bytes = Vec::new();
    File::from(fd)
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| HostError::io("read", path, e))?;
    if bytes.len() as u64 > limit {
        return Err(refused("read", path, format!("larger than {limit} bytes")));
    }
    Ok(Some(bytes))
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

/// Writes a tree of files beneath a fresh folder, as a repository revision
/// lists them: parents are created as needed (0755), files with `O_EXCL`
/// (0644, or 0755 when executable), links as written. Each path is checked
/// component by component: no empty, `.` or `..` component, no NUL, and no
/// `.git` in any letter case (a checkout must never hold something git
/// would take for a repository). Nothing is ever reached through a link,
/// even one written earlier in the same tree.
#[derive(Debug)]
pub struct TreeWriter {
    root: Folder,
    /// The open folders of the current directory, outermost first.
    open: Vec<(Vec<u8>, Folder)>,
    files: u64,
    bytes: u64,
}

/// What a [`TreeWriter`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TreeWritten {
    /// Regular files and links.
    pub files: u64,
    pub bytes: u64,
}

impl TreeWriter {
    pub fn new(root: Folder) -> Self {
        Self {
            root,
            open: Vec::new(),
            files: 0,
            bytes: 0,
        }
    }

    /// Checks a slash-separated relative path; returns its components.
    fn split<'p>(&self, rel: &'p [u8]) -> Result<Vec<&'p [u8]>, HostError> {
        let parts: Vec<&[u8]> = rel.split(|b| *b == b'/').collect();
        for part in &parts {
            let problem = check_component(part).err().or_else(|| {
                part.eq_ignore_ascii_case(b".git")
                    .then(|| "a `.git` component".to_owned())
            });
            if let Some(why) = problem {
                return Err(refused(
                    "write",
                    &self.root.path.join(OsStr::from_bytes(rel)),
                    format!("refusing {why}"),
                ));
            }
        }
        Ok(parts)
    }

    /// The last component and its parents.
    fn leaf<'a, 'p>(
        &self,
        rel: &[u8],
        parts: &'a [&'p [u8]],
    ) -> Result<(&'p [u8], &'a [&'p [u8]]), HostError> {
        match parts.split_last() {
            Some((name, dirs)) => Ok((name, dirs)),
            None => Err(refused(
                "write",
                &self.root.path.join(OsStr::from_bytes(rel)),
                "refusing an empty path".to_owned(),
            )),
        }
    }

    /// The open folder for `dirs` (components below the root), creating
    /// what is missing.
    fn folder(&mut self, dirs: &[&[u8]]) -> Result<&Folder, HostError> {
        let keep = self
            .open
            .iter()
            .zip(dirs)
            .take_while(|((name, _), want)| name.as_slice() == **want)
            .count();
        self.open.truncate(keep);
        for name in &dirs[keep..] {
            let parent = self.open.last().map_or(&self.root, |(_, f)| f);
            let os = OsStr::from_bytes(name);
            let next = match parent.open_dir(os)? {
                Some(f) => f,
                None => parent.create_dir(os, 0o755)?,
            };
            self.open.push((name.to_vec(), next));
        }
        Ok(self.open.last().map_or(&self.root, |(_, f)| f))
    }

    /// Writes the regular file at `rel` from `content`.
    pub fn file(
        &mut self,
        rel: &[u8],
        executable: bool,
        content: &mut dyn Read,
    ) -> Result<(), HostError> {
        let parts = self.split(rel)?;
        let (name, dirs) = self.leaf(rel, &parts)?;
        let mode = if executable { 0o755 } else { 0o644 };
        let written = self
            .folder(dirs)?
            .write_file(OsStr::from_bytes(name), mode, content)?;
        self.files += 1;
        self.bytes += written;
        Ok(())
    }

    /// Writes the symlink at `rel` pointing at `target`.
    pub fn symlink(&mut self, rel: &[u8], target: &[u8]) -> Result<(), HostError> {
        let parts = self.split(rel)?;
        let (name, dirs) = self.leaf(rel, &parts)?;
        if target.is_empty() || target.contains(&0) {
            return Err(refused(
                "create symlink",
                &self.root.path.join(OsStr::from_bytes(rel)),
                "an empty target or one holding a NUL byte".to_owned(),
            ));
        }
        self.folder(dirs)?
            .symlink(OsStr::from_bytes(name), OsStr::from_bytes(target))?;
        self.files += 1;
        Ok(())
    }

    /// Makes sure the directory at `rel` exists (an empty one, such as the
    /// place of a submodule that is not checked out).
    pub fn dir(&mut self, rel: &[u8]) -> Result<(), HostError> {
        let parts = self.split(rel)?;
        self.folder(&parts)?;
        Ok(())
    }

    /// Gives the root folder back with what was written. Nothing is durable
    /// yet: call [`Folder::sync_filesystem`] on it when the tree is complete
    /// (one `syncfs` instead of an fsync per file).
    pub fn finish(self) -> (Folder, TreeWritten) {
        drop(self.open);
        (
            self.root,
            TreeWritten {
                files: self.files,
                bytes: self.bytes,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn temp() -> (tempfile::TempDir, Folder) {
        let dir = tempfile::tempdir().unwrap();
        let folder = Folder::open(dir.path()).unwrap();
        (dir, folder)
    }

    #[test]
    fn descending_never_follows_a_link_and_creates_with_the_mode_asked() {
        let (dir, root) = temp();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("var")).unwrap();
        let err = root
            .descend(Path::new("var/lib/datum"), Some(0o700))
            .unwrap_err();
        assert!(
            matches!(&err, HostError::InTheWay { found, .. } if found == "symlink"),
            "{err}"
        );
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);

        std::fs::remove_file(dir.path().join("var")).unwrap();
        assert!(root.descend(Path::new("var/lib"), None).unwrap().is_none());
        let made = root
            .descend(Path::new("var/lib"), Some(0o750))
            .unwrap()
            .unwrap();
        assert_eq!(made.path(), dir.path().join("var/lib"));
        let mode = std::fs::metadata(dir.path().join("var/lib"))
            .unwrap()
            .mode()
            & 0o7777;
        assert_eq!(mode, 0o750);
        assert!(root.descend(Path::new("../x"), None).is_err());
    }

    #[test]
    fn a_private_folder_is_narrowed_and_must_be_ours() {
        let (dir, root) = temp();
        std::fs::create_dir(dir.path().join("p")).unwrap();
        std::fs::set_permissions(dir.path().join("p"), PermissionsExt::from_mode(0o777)).unwrap();
        root.private(Path::new("p")).unwrap();
        let mode = std::fs::metadata(dir.path().join("p")).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o700);
        root.private(Path::new("q/r")).unwrap();
        assert_eq!(
            std::fs::metadata(dir.path().join("q/r")).unwrap().mode() & 0o7777,
            0o700
        );
        if rustix::process::geteuid().is_root() {
            std::fs::create_dir(dir.path().join("theirs")).unwrap();
            std::os::unix::fs::chown(dir.path().join("theirs"), Some(65534), None).unwrap();
            let err = root.private(Path::new("theirs")).unwrap_err();
            assert!(err.to_string().contains("owned by uid 65534"), "{err}");
        }
    }

    #[test]
    fn a_tree_is_written_beneath_its_folder_and_nowhere_else() {
        let (dir, root) = temp();
        let outside = tempfile::tempdir().unwrap();
        let top = root.create_dir(OsStr::new("tree"), 0o755).unwrap();
        let mut w = TreeWriter::new(top);
        w.file(b"datum.yaml", false, &mut &b"datum: v1alpha1\n"[..])
            .unwrap();
        w.file(b"base/files/run.sh", true, &mut &b"#!/bin/sh\n"[..])
            .unwrap();
        w.file(b"base/x.yaml", false, &mut &b"x"[..]).unwrap();
        w.symlink(b"base/link", b"x.yaml").unwrap();
        // A link written earlier in the same tree is never gone through.
        w.symlink(b"out", outside.path().as_os_str().as_bytes())
            .unwrap();
        let err = w.file(b"out/planted", false, &mut &b"x"[..]).unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
        for bad in [
            &b"a/../b"[..],
            b"./a",
            b"a//b",
            b".git/config",
            b"x/.GIT/hooks/post",
            b"",
        ] {
            let err = w.file(bad, false, &mut &b"x"[..]).unwrap_err();
            assert!(err.to_string().contains("refusing"), "{err}");
        }
        w.dir(b"vendor/module").unwrap();
        let (root, written) = w.finish();
        root.sync_filesystem().unwrap();
        assert_eq!(written.files, 5);
        assert_eq!(written.bytes, 16 + 10 + 1);
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        let t = dir.path().join("tree");
        assert_eq!(
            std::fs::metadata(t.join("base/files/run.sh"))
                .unwrap()
                .mode()
                & 0o777,
            0o755
        );
        assert_eq!(
            std::fs::metadata(t.join("base/x.yaml")).unwrap().mode() & 0o777,
            0o644
        );
        assert_eq!(
            std::fs::read_link(t.join("base/link")).unwrap(),
            Path::new("x.yaml")
        );
        assert!(t.join("vendor/module").is_dir());
        assert!(!t.join("a").exists() && !t.join(".git").exists() && !t.join("x").exists());
    }

    #[test]
    fn files_are_never_written_through_what_is_already_there() {
        let (dir, root) = temp();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join("f")).unwrap();
        assert!(
            root.write_file(OsStr::new("f"), 0o644, &mut &b"x"[..])
                .is_err()
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(
            root.read_file(OsStr::new("f"), 100).is_err(),
            "a link is not read"
        );
        assert_eq!(
            root.read_file(OsStr::new("victim"), 100).unwrap().unwrap(),
            b"keep"
        );
        assert!(
            root.read_file(OsStr::new("victim"), 2).is_err(),
            "over the limit"
        );
        assert_eq!(root.read_file(OsStr::new("none"), 2).unwrap(), None);
    }

    #[test]
    fn removal_takes_links_away_but_never_what_they_point_at() {
        let (dir, root) = temp();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("precious"), b"x").unwrap();
        std::fs::create_dir_all(dir.path().join("d/e")).unwrap();
        std::fs::write(dir.path().join("d/e/f"), b"x").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("d/e/out")).unwrap();
        root.remove_all(OsStr::new("d")).unwrap();
        assert!(!dir.path().join("d").exists());
        assert!(outside.path().join("precious").exists());
        root.remove_all(OsStr::new("d")).unwrap();
    }

    #[test]
    fn a_link_is_replaced_atomically_and_only_a_link() {
        let (dir, root) = temp();
        std::fs::create_dir(dir.path().join("a")).unwrap();
        std::fs::create_dir(dir.path().join("b")).unwrap();
        assert_eq!(
            root.replace_link(OsStr::new("cur"), Path::new("a"))
                .unwrap(),
            None
        );
        assert_eq!(
            root.replace_link(OsStr::new("cur"), Path::new("b"))
                .unwrap(),
            Some(PathBuf::from("a"))
        );
        assert_eq!(
            std::fs::read_link(dir.path().join("cur")).unwrap(),
            Path::new("b")
        );
        assert_eq!(
            pinned(&dir.path().join("cur")).unwrap(),
            dir.path().canonicalize().unwrap().join("b")
        );
        assert_eq!(pinned(&dir.path().join("a")).unwrap(), dir.path().join("a"));

        // A real folder in the way is refused and left alone.
        let err = root
            .replace_link(OsStr::new("a"), Path::new("b"))
            .unwrap_err();
        assert!(matches!(err, HostError::InTheWay { .. }), "{err}");
        assert!(dir.path().join("a").is_dir());

        // Temporaries of a killed switch are swept; nothing else is.
        std::os::unix::fs::symlink("a", dir.path().join(".cur.datum-new.x1")).unwrap();
        assert_eq!(root.sweep_link_temporaries(OsStr::new("cur")).unwrap(), 1);
        let names = root.entries().unwrap();
        assert_eq!(names, ["a", "b", "cur"].map(OsString::from));
    }

    #[test]
    fn a_trusted_file_must_be_writable_by_its_owner_only() {
        let (dir, _) = temp();
        let p = dir.path().join("allowed_signers");
        std::fs::write(&p, b"alice ssh-ed25519 AAAA").unwrap();
        std::fs::set_permissions(&p, PermissionsExt::from_mode(0o644)).unwrap();
        assert_eq!(
            read_trusted(&p, 100).unwrap().unwrap(),
            b"alice ssh-ed25519 AAAA"
        );
        std::fs::set_permissions(&p, PermissionsExt::from_mode(0o664)).unwrap();
        let err = read_trusted(&p, 100).unwrap_err();
        assert!(
            err.to_string()
                .contains("writable by group or others (mode 0664)"),
            "{err}"
        );
        std::fs::set_permissions(&p, PermissionsExt::from_mode(0o600)).unwrap();
        assert!(read_trusted(&p, 3).is_err(), "over the limit");
        assert_eq!(read_trusted(&dir.path().join("none"), 3).unwrap(), None);
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(&p, Some(65534), None).unwrap();
            let err = read_trusted(&p, 100).unwrap_err();
            assert!(err.to_string().contains("owned by uid 65534"), "{err}");
        }
    }

    #[test]
    fn a_second_lock_waits_then_times_out() {
        let (_dir, root) = temp();
        let held = root
            .lock(OsStr::new("lock"), Duration::from_secs(1))
            .unwrap();
        let err = root
            .lock(OsStr::new("lock"), Duration::from_millis(120))
            .unwrap_err();
        assert!(matches!(err, HostError::LockTimeout { .. }), "{err}");
        drop(held);
        root.lock(OsStr::new("lock"), Duration::from_millis(120))
            .unwrap();
    }
}
