//! Datum's own folders: the state store's, the backup store's, the accepted
//! patches'. Opened once, private to the user running Datum, and written
//! without ever following a link.
//!
//! A private folder is reached through the boundary (or, when the operator
//! names it on the command line, opened as given), created mode 0700 when
//! missing, and refused unless it belongs to the effective user and nobody
//! else may write to it: otherwise another user could plant a link where a
//! Datum file belongs between two of its writes. Every file in it is opened
//! relative to the folder's handle with `O_NOFOLLOW` (new ones with
//! `O_EXCL`); a link found where a Datum file belongs is an error naming it,
//! never a target; replacing a file goes through a fresh temporary name and
//! `renameat`, which replaces a planted link itself rather than what it
//! points at.
//!
//! This module must not decide what the files hold.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::boundary::{Dir, errno};
use crate::fs::{FileKind, Stat};
use crate::{Host, HostError};

/// Mode of the intermediate folders Datum creates on the way to its own
/// (`var`, `var/lib` in a fresh root): ordinary system folders.
const PARENT_MODE: u32 = 0o755;

/// Mode of Datum's own folders.
pub const PRIVATE_MODE: u32 = 0o700;

/// How long a temporary file of Datum's own is left alone before a later
/// write of the same file takes it for a killed process's leftover.
pub const LEFTOVER_AGE_S: i64 = 3600;

/// One of Datum's own folders, open.
#[derive(Debug, Clone)]
pub struct PrivateDir {
    dir: Dir,
}

/// A file written in full under a temporary name in a private folder
/// ([`PrivateDir::write_unsynced`]), not yet durable nor in place.
#[must_use = "an Unsynced dropped without its commit is removed"]
#[derive(Debug)]
pub struct Unsynced {
    dir: PrivateDir,
    file: File,
    tmp_name: OsString,
    name: OsString,
    /// Committed, or removed after a failed commit: nothing left to undo.
    settled: bool,
}

impl Unsynced {
    /// Makes the file durable and puts it in place: fsynced, renamed over
    /// its name (a reader sees the old file or the whole new one), the
    /// folder fsynced. On failure the temporary file is removed and the
    /// name keeps what it had.
    pub fn commit(mut self) -> Result<(), HostError> {
        let put = self
            .file
            .sync_all()
            .map_err(|e| HostError::io("write", self.dir.file_path(&self.tmp_name), e))
            .and_then(|()| self.dir.rename(&self.tmp_name, &self.name));
        if put.is_err() {
            let _ = self.dir.remove(&self.tmp_name);
        }
        self.settled = true;
        put?;
        self.dir.sync()
    }
}

impl Unsynced {
    /// [`Unsynced::commit`] under another name, in another of Datum's
    /// folders on the same file system (`renameat` from this folder's
    /// handle to `dir`'s): a file whose name is known only once it is
    /// written (a backup blob, named by its digest). A link already at
    /// `name` is refused, as by [`PrivateDir::write_atomic`]; on failure the
    /// temporary file is removed and `name` keeps what it had.
    pub fn commit_into(
        mut self,
        dir: &PrivateDir,
        name: impl AsRef<OsStr>,
    ) -> Result<(), HostError> {
        let name = name.as_ref();
        let put = dir
            .require_regular_or_absent(name)
            .and_then(|()| {
                self.file
                    .sync_all()
                    .map_err(|e| HostError::io("write", self.dir.file_path(&self.tmp_name), e))
            })
            .and_then(|()| {
                rustix::fs::renameat(self.dir.dir.fd(), &self.tmp_name, dir.dir.fd(), name)
                    .map_err(|e| HostError::io("rename into", dir.file_path(name), errno(e)))
            });
        if put.is_err() {
            let _ = self.dir.remove(&self.tmp_name);
        }
        self.settled = true;
        put?;
        dir.sync()?;
        self.dir.sync()
    }
}

impl Drop for Unsynced {
    fn drop(&mut self) {
        // Never committed (a failed write, or given up): nothing of it stays.
        if !self.settled {
            let _ = self.dir.remove(&self.tmp_name);
        }
    }
}

fn not_private(path: &Path, problem: impl Into<String>) -> HostError {
    HostError::NotPrivate {
        path: path.to_path_buf(),
        problem: problem.into(),
    }
}

impl PrivateDir {
    /// The folder at `declared` under the host's root (`/var/lib/datum`),
    /// reached through the boundary. Missing folders are created when
    /// `create` (the last one 0700, those on the way 0755); `None` when it
    /// is missing and `create` is false.
    pub fn open_in(
        host: &Host,
        declared: &Path,
        create: bool,
    ) -> Result<Option<PrivateDir>, HostError> {
        let mut current = match host.root_dir() {
            Ok(root) => root,
            // A root that does not exist yet (a fresh image): nothing of
            // Datum's is there; it is created (the operator named it) when
            // Datum's folder is to be.
            Err(HostError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                if !create {
                    return Ok(None);
                }
                use std::os::unix::fs::DirBuilderExt as _;
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(PARENT_MODE)
                    .create(host.root())
                    .map_err(|e| HostError::io("create the root", host.root(), e))?;
                host.root_dir()?
            }
            Err(e) => return Err(e),
        };
        let parts = crate::boundary::components(declared);
        for (i, name) in parts.iter().enumerate() {
            let mut here = PathBuf::from("/");
            here.extend(&parts[..=i]);
            current = match host.dir(&here) {
                Ok(dir) => dir,
                Err(e) if e.is_missing_parent() && create => {
                    let mode = if i + 1 == parts.len() {
                        PRIVATE_MODE
                    } else {
                        PARENT_MODE
                    };
                    match current.entry(name).create_dir(mode, None, None) {
                        Ok(()) => {}
                        // Created meanwhile by another Datum process.
                        Err(HostError::Io { source, .. })
                            if source.kind() == std::io::ErrorKind::AlreadyExists => {}
                        Err(e) => return Err(e),
                    }
                    host.dir(&here)?
                }
                Err(e) if e.is_missing_parent() => return Ok(None),
                Err(e) => return Err(e),
            };
        }
        Self::check(current).map(Some)
    }

    /// A folder the operator named (`--state`'s folder, `--patch-dir`):
    /// links in its own path are followed as given; missing folders are
    /// created 0700 when `create`.
    pub fn open_path(path: &Path, create: bool) -> Result<Option<PrivateDir>, HostError> {
        match Dir::open_path(path) {
            Ok(dir) => Self::check(dir).map(Some),
            Err(HostError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound && create =>
            {
                use std::os::unix::fs::DirBuilderExt as _;
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(PRIVATE_MODE)
                    .create(path)
                    .map_err(|e| HostError::io("create directory", path, e))?;
                Self::check(Dir::open_path(path)?).map(Some)
            }
            Err(HostError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The private folder holding the file `path` (a path the operator
    /// named, such as `--state FILE`'s siblings), and the file's name in it;
    /// `None` when the folder is missing and `create` is false.
    pub fn open_parent_of(
        path: &Path,
        create: bool,
    ) -> Result<Option<(PrivateDir, OsString)>, HostError> {
        let Some(name) = path.file_name() else {
            return Ok(None);
        };
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        Ok(Self::open_path(parent, create)?.map(|d| (d, name.to_owned())))
    }

    /// Refuses a folder another user could write to.
    fn check(dir: Dir) -> Result<PrivateDir, HostError> {
        let st = rustix::fs::fstat(dir.fd())
            .map_err(|e| HostError::io("inspect", dir.path(), errno(e)))?;
        let me = rustix::process::geteuid().as_raw();
        if st.st_uid != me {
            return Err(not_private(
                dir.path(),
                format!(
                    "it belongs to uid {}, not to uid {me} running Datum (another user could plant links in it); fix its owner",
                    st.st_uid
                ),
            ));
        }
        if st.st_mode & 0o022 != 0 {
            return Err(not_private(
                dir.path(),
                format!(
                    "its mode {:04o} lets others write to it (another user could plant links in it); make it 0700",
                    st.st_mode & 0o7777
                ),
            ));
        }
        Ok(PrivateDir { dir })
    }

    /// The folder's real path (for messages, and for SQLite, which opens by
    /// path: see `datum-store`).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The folder's path as the kernel sees the open folder right now,
    /// without any link (what `/proc/thread-self/fd/N` says): for SQLite,
    /// which opens by path and, with `SQLITE_OPEN_NOFOLLOW`, refuses one
    /// with a link anywhere in it.
    pub fn real_path(&self) -> Result<PathBuf, HostError> {
        use std::os::fd::AsRawFd as _;
        let proc = format!("/proc/thread-self/fd/{}", self.dir.fd().as_raw_fd());
        match rustix::fs::readlink(proc.as_str(), Vec::new()) {
            Ok(target) => {
                use std::os::unix::ffi::OsStringExt as _;
                let path = PathBuf::from(OsString::from_vec(target.into_bytes()));
                // A folder removed since it was opened reads "... (deleted)".
                if path.is_absolute()
                    && !path.as_os_str().as_encoded_bytes().ends_with(b" (deleted)")
                {
                    return Ok(path);
                }
                Err(not_private(
                    self.path(),
                    "it was removed while Datum had it open",
                ))
            }
            // No /proc: the path it was opened by.
            Err(_) => Ok(self.path().to_path_buf()),
        }
    }

    /// The real path of `name` inside the folder.
    pub fn file_path(&self, name: impl AsRef<OsStr>) -> PathBuf {
        self.dir.path().join(name.as_ref())
    }

    /// The open folder.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// A private folder inside this one (created 0700 when `create`).
    pub fn subdir(
        &self,
        name: impl AsRef<OsStr>,
        create: bool,
    ) -> Result<Option<PrivateDir>, HostError> {
        let name = name.as_ref();
        let found = match self.dir.open_child_dir(name) {
            Ok(found) => found,
            Err(HostError::NotADirectory { path, .. }) => {
                return Err(not_private(
                    &path,
                    "it is not a directory (a link or a file is where Datum keeps a folder)",
                ));
            }
            Err(e) => return Err(e),
        };
        let dir = match found {
            Some(dir) => dir,
            None if create => {
                match self.dir.entry(name).create_dir(PRIVATE_MODE, None, None) {
                    Ok(()) => {}
                    Err(HostError::Io { source, .. })
                        if source.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e),
                }
                match self.dir.open_child_dir(name)? {
                    Some(dir) => dir,
                    None => return Ok(None),
                }
            }
            None => return Ok(None),
        };
        Self::check(dir).map(Some)
    }

    /// `lstat` of `name` in the folder.
    pub fn lstat(&self, name: impl AsRef<OsStr>) -> Result<Option<Stat>, HostError> {
        self.dir.entry(name.as_ref()).lstat()
    }

    /// Fails when `name` exists and is not a regular file (a planted link,
    /// a directory, a FIFO): what SQLite is about to open by path must be
    /// Datum's own file or nothing.
    pub fn require_regular_or_absent(&self, name: impl AsRef<OsStr>) -> Result<(), HostError> {
        let name = name.as_ref();
        match self.lstat(name)? {
            None => Ok(()),
            Some(stat) if stat.kind == FileKind::File => Ok(()),
            Some(stat) => Err(not_private(
                &self.file_path(name),
                format!(
                    "a {} is where Datum keeps a file; Datum never writes through one (remove it)",
                    stat.kind.word()
                ),
            )),
        }
    }

    fn open(
        &self,
        name: &OsStr,
        flags: OFlags,
        mode: u32,
        op: &'static str,
    ) -> Result<File, HostError> {
        let path = self.file_path(name);
        let fd = rustix::fs::openat(
            self.dir.fd(),
            name,
            flags | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::from_raw_mode(mode),
        )
        .map_err(|e| match e {
            Errno::LOOP => not_private(
                &path,
                "a symbolic link is where Datum keeps a file; Datum never writes through one (remove it)",
            ),
            e => HostError::io(op, &path, errno(e)),
        })?;
        let st = rustix::fs::fstat(&fd).map_err(|e| HostError::io("inspect", &path, errno(e)))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(not_private(
                &path,
                "something other than a regular file is where Datum keeps a file",
            ));
        }
        // O_NONBLOCK only kept a FIFO from hanging the open; regular files
        // ignore it.
        Ok(File::from(fd))
    }

    /// Opens `name` for reading; `None` when it does not exist.
    pub fn open_read(&self, name: impl AsRef<OsStr>) -> Result<Option<File>, HostError> {
        match self.open(name.as_ref(), OFlags::RDONLY, 0, "open") {
            Ok(file) => Ok(Some(file)),
            Err(HostError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Reads `name` whole; `None` when it does not exist.
    pub fn read(&self, name: impl AsRef<OsStr>) -> Result<Option<Vec<u8>>, HostError> {
        use std::io::Read as _;
        let name = name.as_ref();
        let Some(mut file) = self.open_read(name)? else {
            return Ok(None);
        };
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| HostError::io("read", self.file_path(name), e))?;
        Ok(Some(bytes))
    }

    /// Creates `name`, which must not exist (`O_CREAT | O_EXCL`).
    pub fn create_new(&self, name: impl AsRef<OsStr>, mode: u32) -> Result<File, HostError> {
        self.open(
            name.as_ref(),
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL,
            mode,
            "create",
        )
    }

    /// Opens `name` for reading and writing, creating it with `mode` when
    /// missing (the lock file, a database file before SQLite opens it).
    pub fn open_or_create(&self, name: impl AsRef<OsStr>, mode: u32) -> Result<File, HostError> {
        self.open(name.as_ref(), OFlags::RDWR | OFlags::CREATE, mode, "open")
    }

    /// Opens `name` for appending (created 0600 when missing).
    pub fn append(&self, name: impl AsRef<OsStr>) -> Result<File, HostError> {
        self.open(
            name.as_ref(),
            OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE,
            0o600,
            "open for appending",
        )
    }

    /// Replaces `name` with `bytes` atomically: a fresh temporary file
    /// (`O_EXCL`, 0600), fsynced, renamed over the name, the folder fsynced.
    /// A link already at `name` is refused.
    pub fn write_atomic(&self, name: impl AsRef<OsStr>, bytes: &[u8]) -> Result<(), HostError> {
        self.write_atomic_with(name, |file| file.write_all(bytes))
    }

    /// [`PrivateDir::write_atomic`] of what `write` writes to the temporary
    /// file (a large file is written as it is made, never held whole). A
    /// `write` that fails leaves `name` as it was.
    pub fn write_atomic_with(
        &self,
        name: impl AsRef<OsStr>,
        write: impl FnOnce(&mut File) -> std::io::Result<()>,
    ) -> Result<(), HostError> {
        self.write_temporary(name.as_ref(), write)?.commit()
    }

    /// The first half of [`PrivateDir::write_atomic_with`]: `write` fills a
    /// fresh temporary file (`O_EXCL`, 0600), which is neither durable nor
    /// in place until [`Unsynced::commit`]. The fsync that makes it durable
    /// waits for the disk (20 ms for a 12 MB catalogue snapshot), and a
    /// cache nothing else in the run reads need not hold the run up: the
    /// commit can be left to another thread. A `write` that fails, or an
    /// [`Unsynced`] dropped without its commit, removes the temporary file
    /// and leaves `name` as it was.
    ///
    /// A file written this way is one a killed process may well leave
    /// behind (its commit waits while the rest of the run goes on): the
    /// temporary files of `name` such a process left are swept first,
    /// once an hour old ([`LEFTOVER_AGE_S`]).
    pub fn write_unsynced(
        &self,
        name: impl AsRef<OsStr>,
        write: impl FnOnce(&mut File) -> std::io::Result<()>,
    ) -> Result<Unsynced, HostError> {
        let name = name.as_ref();
        self.sweep_leftovers_of(name);
        self.write_temporary(name, write)
    }

    /// `write` into a fresh temporary file for `name`, not yet committed.
    fn write_temporary(
        &self,
        name: &OsStr,
        write: impl FnOnce(&mut File) -> std::io::Result<()>,
    ) -> Result<Unsynced, HostError> {
        self.require_regular_or_absent(name)?;
        let mut tmp_name = OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".tmp-{}", crate::random_suffix()));
        let file = self.create_new(&tmp_name, 0o600)?;
        let mut unsynced = Unsynced {
            dir: self.clone(),
            file,
            tmp_name,
            name: name.to_owned(),
            settled: false,
        };
        // Dropped on failure: the temporary file goes with it.
        write(&mut unsynced.file)
            .map_err(|e| HostError::io("write", self.file_path(&unsynced.tmp_name), e))?;
        Ok(unsynced)
    }

    /// Removes the temporary files of `name` (`.NAME.tmp-*`) that a process
    /// killed between writing one and renaming it left behind (a pass
    /// interrupted while its snapshot was being committed leaves 12 MB at
    /// 20,000 Files), once untouched for [`LEFTOVER_AGE_S`]: a younger one
    /// may be another process's, still being written. Best effort: what
    /// cannot be listed or removed stays.
    fn sweep_leftovers_of(&self, name: &OsStr) {
        use std::os::unix::ffi::OsStrExt as _;
        let mut prefix = b".".to_vec();
        prefix.extend_from_slice(name.as_bytes());
        prefix.extend_from_slice(b".tmp-");
        let Ok(entries) = self.list() else { return };
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        for (entry, kind) in entries {
            if kind != FileKind::File || !entry.as_bytes().starts_with(&prefix) {
                continue;
            }
            if let Ok(Some(stat)) = self.lstat(&entry)
                && now_ns.saturating_sub(stat.meta.mtime_ns) > LEFTOVER_AGE_S * 1_000_000_000
            {
                let _ = self.remove(&entry);
            }
        }
    }

    /// Writes the new file `name` with `bytes` and exactly `mode`,
    /// atomically: a fresh temporary file (`O_EXCL`), fsynced, renamed to
    /// `name` only when nothing is there (`RENAME_NOREPLACE`), so a reader
    /// never sees half of it and an existing file (or a planted link) is
    /// refused and left as it is. For files that must never be replaced,
    /// such as a server's keys.
    pub fn write_new(
        &self,
        name: impl AsRef<OsStr>,
        bytes: &[u8],
        mode: u32,
    ) -> Result<(), HostError> {
        let name = name.as_ref();
        if let Some(found) = self.lstat(name)? {
            return Err(HostError::InTheWay {
                path: self.file_path(name),
                found: found.kind.word().to_owned(),
            });
        }
        let mut tmp_name = OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".tmp-{}", crate::random_suffix()));
        let tmp_path = self.file_path(&tmp_name);
        let written = (|| {
            let mut file = self.create_new(&tmp_name, 0o600)?;
            // The mode asked for, whatever the umask.
            rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))
                .map_err(|e| HostError::io("set mode", &tmp_path, errno(e)))?;
            file.write_all(bytes)
                .and_then(|()| file.sync_all())
                .map_err(|e| HostError::io("write", &tmp_path, e))?;
            rustix::fs::renameat_with(
                self.dir.fd(),
                &tmp_name,
                self.dir.fd(),
                name,
                rustix::fs::RenameFlags::NOREPLACE,
            )
            .map_err(|e| match e {
                Errno::EXIST => HostError::InTheWay {
                    path: self.file_path(name),
                    found: "file".to_owned(),
                },
                e => HostError::io("rename", self.file_path(name), errno(e)),
            })
        })();
        if written.is_err() {
            let _ = self.remove(&tmp_name);
        }
        written?;
        self.dir.sync()
    }

    /// Removes `name` (a file or a link, never what a link points at);
    /// whether there was one.
    pub fn remove(&self, name: impl AsRef<OsStr>) -> Result<bool, HostError> {
        let name = name.as_ref();
        match rustix::fs::unlinkat(self.dir.fd(), name, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(HostError::io("remove", self.file_path(name), errno(e))),
        }
    }

    /// Renames `from` to `to`, both in this folder.
    pub fn rename(&self, from: impl AsRef<OsStr>, to: impl AsRef<OsStr>) -> Result<(), HostError> {
        let (from, to) = (from.as_ref(), to.as_ref());
        rustix::fs::renameat(self.dir.fd(), from, self.dir.fd(), to)
            .map_err(|e| HostError::io("rename", self.file_path(from), errno(e)))
    }

    /// Renames `from` to `to`, both in this folder, refusing to replace
    /// anything at `to` (`RENAME_NOREPLACE`): a finished `datum pull`
    /// checkout taking its final name.
    pub fn rename_new(
        &self,
        from: impl AsRef<OsStr>,
        to: impl AsRef<OsStr>,
    ) -> Result<(), HostError> {
        let (from, to) = (from.as_ref(), to.as_ref());
        rustix::fs::renameat_with(
            self.dir.fd(),
            from,
            self.dir.fd(),
            to,
            rustix::fs::RenameFlags::NOREPLACE,
        )
        .map_err(|e| HostError::io("rename into", self.file_path(to), errno(e)))
    }

    /// The folder's entries and their kinds.
    pub fn list(&self) -> Result<Vec<(OsString, FileKind)>, HostError> {
        self.dir.list()
    }

    /// fsyncs the folder.
    pub fn sync(&self) -> Result<(), HostError> {
        self.dir.sync()
    }

    /// Bytes free for this process on the folder's file system (`fstatvfs`
    /// on its handle): the reserved blocks count for root, not for others.
    pub fn available_bytes(&self) -> Result<u64, HostError> {
        let st = rustix::fs::fstatvfs(self.dir.fd())
            .map_err(|e| HostError::io("read the free space of", self.path(), errno(e)))?;
        let blocks = if rustix::process::geteuid().is_root() {
            st.f_bfree
        } else {
            st.f_bavail
        };
        Ok(blocks.saturating_mul(st.f_frsize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn folders_are_created_private_and_files_never_follow_links() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let host = Host::new(root.path());
        assert!(
            PrivateDir::open_in(&host, Path::new("/var/lib/datum"), false)
                .unwrap()
                .is_none()
        );
        let dir = PrivateDir::open_in(&host, Path::new("/var/lib/datum"), true)
            .unwrap()
            .unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&root.path().join("var/lib/datum")), 0o700);
        assert_eq!(mode(&root.path().join("var/lib")), 0o755);

        dir.write_atomic("state.catalogue", b"one").unwrap();
        dir.write_atomic("state.catalogue", b"two").unwrap();
        assert_eq!(dir.read("state.catalogue").unwrap().unwrap(), b"two");
        // Written as it is made; a writer that fails half-way leaves the
        // old file as it was and no temporary file.
        let failed = dir.write_atomic_with("state.catalogue", |file| {
            file.write_all(b"half of a new")?;
            Err(std::io::Error::other("the encoder gave up"))
        });
        assert!(failed.unwrap_err().to_string().contains("gave up"));
        assert_eq!(dir.read("state.catalogue").unwrap().unwrap(), b"two");
        let names: Vec<_> = dir.list().unwrap().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["state.catalogue"], "no temporary file left");
        dir.write_atomic_with("state.catalogue", |file| {
            file.write_all(b"thr")?;
            file.write_all(b"ee")
        })
        .unwrap();
        assert_eq!(dir.read("state.catalogue").unwrap().unwrap(), b"three");

        let canary = outside.path().join("canary");
        std::fs::write(&canary, b"outside").unwrap();
        std::os::unix::fs::symlink(&canary, dir.file_path("planted")).unwrap();
        for result in [
            dir.write_atomic("planted", b"x").map(drop),
            dir.append("planted").map(drop),
            dir.create_new("planted", 0o600).map(drop),
            dir.open_or_create("planted", 0o600).map(drop),
            dir.read("planted").map(drop),
        ] {
            let err = result.unwrap_err();
            assert!(
                matches!(err, HostError::NotPrivate { .. }) || err.to_string().contains("planted"),
                "{err}"
            );
        }
        assert_eq!(std::fs::read(&canary).unwrap(), b"outside");
        std::os::unix::fs::symlink(outside.path(), dir.file_path("objects")).unwrap();
        assert!(dir.subdir("objects", true).is_err());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
    }

    /// Written but not committed, the new file is nowhere a reader looks:
    /// the name keeps the old content; committed (on another thread, as a
    /// cache's is), the name has the new one and no temporary file stays;
    /// given up (dropped), nothing of it stays.
    #[test]
    fn an_unsynced_file_takes_its_name_only_when_committed() {
        let root = tempfile::tempdir().unwrap();
        let host = Host::new(root.path());
        let dir = PrivateDir::open_in(&host, Path::new("/var/lib/datum"), true)
            .unwrap()
            .unwrap();
        let names = |dir: &PrivateDir| -> Vec<OsString> {
            let mut names: Vec<_> = dir.list().unwrap().into_iter().map(|(n, _)| n).collect();
            names.sort();
            names
        };
        dir.write_atomic("state.catalogue", b"old").unwrap();
        let pending = dir
            .write_unsynced("state.catalogue", |file| file.write_all(b"new"))
            .unwrap();
        assert_eq!(dir.read("state.catalogue").unwrap().unwrap(), b"old");
        assert_eq!(
            names(&dir).len(),
            2,
            "the temporary file: {:?}",
            names(&dir)
        );
        std::thread::spawn(move || pending.commit())
            .join()
            .unwrap()
            .unwrap();
        assert_eq!(dir.read("state.catalogue").unwrap().unwrap(), b"new");
        assert_eq!(names(&dir), ["state.catalogue"]);

        let given_up = dir
            .write_unsynced("state.catalogue", |file| file.write_all(b"newer"))
            .unwrap();
        drop(given_up);
        assert_eq!(dir.read("state.catalogue").unwrap().unwrap(), b"new");
        assert_eq!(names(&dir), ["state.catalogue"], "nothing of it stays");

        let failed = dir.write_unsynced("state.catalogue", |file| {
            file.write_all(b"half")?;
            Err(std::io::Error::other("the encoder gave up"))
        });
        assert!(failed.unwrap_err().to_string().contains("gave up"));
        assert_eq!(names(&dir), ["state.catalogue"]);

        // What a killed process left: swept by the next write of the same
        // file once an hour old; a fresh one (perhaps another process's,
        // being written) and another file's stay.
        let aged = |name: &str, age_s: u64| {
            let file = std::fs::File::create(dir.file_path(name)).unwrap();
            let then = std::time::SystemTime::now() - std::time::Duration::from_secs(age_s);
            file.set_modified(then).unwrap();
        };
        aged(".state.catalogue.tmp-killed", 2 * 3600);
        aged(".state.catalogue.tmp-writing", 60);
        aged(".source-hashes.tmp-killed", 2 * 3600);
        dir.write_unsynced("state.catalogue", |file| file.write_all(b"newest"))
            .unwrap()
            .commit()
            .unwrap();
        assert_eq!(
            names(&dir),
            [
                ".source-hashes.tmp-killed",
                ".state.catalogue.tmp-writing",
                "state.catalogue"
            ]
        );
    }

    #[test]
    fn a_folder_others_may_write_to_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let shared = root.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = PrivateDir::open_path(&shared, false).unwrap_err();
        assert!(err.to_string().contains("0777"), "{err}");
        let made = root.path().join("new/patches");
        PrivateDir::open_path(&made, true).unwrap().unwrap();
        assert_eq!(
            std::fs::metadata(&made).unwrap().permissions().mode() & 0o777,
            0o700
        );
    }

    #[test]
    fn a_parent_link_on_the_way_to_the_state_folder_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("var")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("var/lib")).unwrap();
        let host = Host::new(root.path());
        let err = PrivateDir::open_in(&host, Path::new("/var/lib/datum"), true).unwrap_err();
        assert!(matches!(err, HostError::ParentLink { .. }), "{err}");
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }
}
