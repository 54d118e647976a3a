//! One entry on the host, reached through the boundary: its parent directory
//! open, and its name. Every operation is relative to that parent
//! (`fstatat`, `openat(O_NOFOLLOW)`, `unlinkat`, `mkdirat`, `symlinkat`),
//! so nothing here follows a link, neither in the parents (the walk opened
//! them without following any) nor at the final component.
//!
//! This module carries a change out; it must not decide what it should be.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::HostError;
use crate::boundary::{Dir, errno};
use crate::fs::{self, Expected, Hashed, Stat};
use crate::staging::{StagedFile, StagedSymlink};

/// The bytes a file must hold for [`Located::set_metadata_holding`] to
/// change it: their size, SHA-256 and, when known, BLAKE3 (hex; compared
/// first, as an observation does).
#[derive(Debug, Clone, Copy)]
pub struct Holding<'a> {
    pub size: u64,
    pub sha256: &'a str,
    pub blake3: Option<&'a str>,
}

/// An entry at a declared path: its parent open, its name, and the real path
/// (root + declared) for messages and for validators.
#[derive(Debug, Clone)]
pub struct Located {
    parent: Dir,
    name: OsString,
    path: PathBuf,
}

/// Removes everything in the folder `dir` (see [`Located::remove_all`]),
/// holding at most `most` folders open.
fn remove_below(dir: Dir, most: usize) -> Result<(), HostError> {
    let mut way = crate::way::Way::new(dir, most)?;
    // The entries still to remove of each folder on the way.
    let mut lists = vec![way.here()?.list()?.into_iter()];
    while let Some(list) = lists.last_mut() {
        let Some((name, _)) = list.next() else {
            // This folder is empty now: removed from the one above.
            lists.pop();
            let Some(name) = way.leave() else {
                break;
            };
            way.here()?.entry(&name).remove_dir()?;
            continue;
        };
        let here = way.here()?;
        let entry = here.entry(&name);
        match entry.lstat()? {
            None => {}
            Some(stat) if stat.kind == fs::FileKind::Directory => {
                match here.open_child_dir(&name)? {
                    Some(sub) => {
                        lists.push(sub.list()?.into_iter());
                        way.enter(&name, sub)?;
                    }
                    None => entry.remove_dir()?,
                }
            }
            Some(_) => entry.remove_file()?,
        }
    }
    Ok(())
}

fn uid(raw: Option<u32>) -> Option<rustix::fs::Uid> {
    raw.map(rustix::fs::Uid::from_raw)
}

fn gid(raw: Option<u32>) -> Option<rustix::fs::Gid> {
    raw.map(rustix::fs::Gid::from_raw)
}

impl Located {
    pub(crate) fn new(parent: Dir, name: OsString) -> Self {
        let path = parent.path().join(&name);
        Located { parent, name, path }
    }

    /// The real path (root + declared): for messages, and what a validator
    /// is pointed at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The declared path (as on the managed machine).
    pub fn declared(&self) -> PathBuf {
        self.parent.declared().join(&self.name)
    }

    /// The open parent directory.
    pub fn parent(&self) -> &Dir {
        &self.parent
    }

    pub fn name(&self) -> &OsStr {
        &self.name
    }

    /// `lstat`: `None` when nothing is there.
    pub fn lstat(&self) -> Result<Option<Stat>, HostError> {
        self.parent.lstat_entry(&self.name)
    }

    /// Opens the entry for reading: never through a final link, never
    /// blocking on a FIFO, never as a controlling terminal.
    fn open_read(&self, op: &'static str) -> Result<File, HostError> {
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        rustix::fs::openat(self.parent.fd(), &self.name, flags, Mode::empty())
            .map(File::from)
            .map_err(|e| HostError::io(op, &self.path, errno(e)))
    }

    /// A regular file opened for reading, and its length.
    fn open_regular(&self, op: &'static str) -> Result<(File, u64), HostError> {
        let file = self.open_read(op)?;
        let len = fs::regular_len(&file, &self.path, op)?;
        Ok((file, len))
    }

    /// Opens a regular file for reading (never through a final link, never
    /// blocking on a FIFO) and gives its length from `fstat`: for a caller
    /// that streams it through a buffer of its own, whatever its size (the
    /// evidence of a file about to be replaced). Anything else is an error.
    pub fn open_file(&self) -> Result<(File, u64), HostError> {
        self.open_regular("read")
    }

    /// Reads a whole regular file of at most `limit` bytes; `None` when it
    /// is longer (by its `fstat`, or found so while reading: a file that
    /// grew), having read no more than `limit + 1` bytes of it. What a
    /// caller that shows or compares content of a bounded size uses on a
    /// file someone else may have made huge.
    pub fn read_up_to(&self, limit: u64) -> Result<Option<Vec<u8>>, HostError> {
        let (file, len) = self.open_regular("read")?;
        self.read_open_up_to(file, len, limit)
    }

    /// [`Located::read_up_to`] of a file already open (`len` its length by
    /// `fstat`).
    pub fn read_open_up_to(
        &self,
        file: File,
        len: u64,
        limit: u64,
    ) -> Result<Option<Vec<u8>>, HostError> {
        use std::io::Read as _;
        if len > limit {
            return Ok(None);
        }
        let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0).saturating_add(1));
        file.take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| HostError::io("read", &self.path, e))?;
        Ok((bytes.len() as u64 <= limit).then_some(bytes))
    }

    /// Opens a regular file for reading (as [`Located::open_file`]) and
    /// gives its `fstat`: the very file opened, whatever the name holds by
    /// then. What is recorded beside its content (a backup's owner and
    /// mode) or decided before showing it (whether everyone may read it)
    /// is taken from here, never from an earlier `lstat` of the name,
    /// which whoever can write to the folder may have swapped since.
    pub fn open_file_stat(&self) -> Result<(File, Stat), HostError> {
        let file = self.open_read("read")?;
        let st =
            rustix::fs::fstat(&file).map_err(|e| HostError::io("read", &self.path, errno(e)))?;
        let stat = fs::stat_of_raw(&st);
        if stat.kind != fs::FileKind::File {
            return Err(HostError::io(
                "read",
                &self.path,
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"),
            ));
        }
        Ok((file, stat))
    }

    /// Reads a whole regular file.
    pub fn read(&self) -> Result<Vec<u8>, HostError> {
        let (mut file, len) = self.open_regular("read")?;
        fs::read_all(&mut file, &self.path, len)
    }

    /// See `fs::hash_open`.
    pub fn hash(&self) -> Result<Hashed, HostError> {
        let (mut file, len) = self.open_regular("read")?;
        fs::hash_open(&mut file, &self.path, len)
    }

    /// See `fs::hash_open_expecting`.
    pub fn hash_expecting(&self, expected: Expected<'_>) -> Result<Hashed, HostError> {
        let (mut file, len) = self.open_regular("read")?;
        fs::hash_open_expecting(&mut file, &self.path, len, expected)
    }

    /// What a symlink points at, as stored.
    pub fn read_link(&self) -> Result<PathBuf, HostError> {
        rustix::fs::readlinkat(self.parent.fd(), &self.name, Vec::new())
            .map(|t| PathBuf::from(OsString::from_vec(t.into_bytes())))
            .map_err(|e| HostError::io("read symlink", &self.path, errno(e)))
    }

    /// Removes a file, a symlink or a special file (never what a link
    /// points at).
    pub fn remove_file(&self) -> Result<(), HostError> {
        rustix::fs::unlinkat(self.parent.fd(), &self.name, AtFlags::empty())
            .map_err(|e| HostError::io("remove", &self.path, errno(e)))
    }

    /// Removes an empty directory; a non-empty one is an error, never a
    /// recursive delete.
    pub fn remove_dir(&self) -> Result<(), HostError> {
        rustix::fs::unlinkat(self.parent.fd(), &self.name, AtFlags::REMOVEDIR).map_err(|e| {
            if e == Errno::NOTEMPTY || e == Errno::EXIST {
                HostError::DirectoryNotEmpty {
                    path: self.path.clone(),
                }
            } else {
                HostError::io("remove directory", &self.path, errno(e))
            }
        })
    }

    /// Removes the entry and, for a directory, everything in it, relative to
    /// handles all the way down (links are removed, never followed), each
    /// folder's entries before the folder. The folders below are walked
    /// depth first from a stack kept here, not by a call per level (a local
    /// user's chain of folders 3,000 deep in a purged Tree overflowed the
    /// stack and aborted the pass), holding at most a Tree walk's share of
    /// descriptors ([`crate::descriptors::Budget::walk`]): a folder let go
    /// is opened again from the nearest one open above it ([`crate::way`]).
    pub fn remove_all(&self) -> Result<(), HostError> {
        match self.lstat()? {
            None => return Ok(()),
            Some(stat) if stat.kind == fs::FileKind::Directory => {}
            Some(_) => return self.remove_file(),
        }
        if let Some(dir) = self.parent.open_child_dir(&self.name)? {
            let most = crate::descriptors::Budget::of_this_process().walk;
            remove_below(dir, most)?;
        }
        self.remove_dir()
    }

    /// Creates this directory (not its parents: the parent is open already)
    /// with exactly `mode` (set again after `mkdir`, which the umask
    /// narrows) and the given owner, all through the new directory's own
    /// descriptor. It is created 0700 first, so nobody else can use it
    /// before its owner and mode are set, and what is opened by its name
    /// must be that folder ([`HostError::NotMade`] otherwise: the owner of
    /// the parent may swap it in between).
    pub fn create_dir(
        &self,
        mode: u32,
        owner: Option<u32>,
        group: Option<u32>,
    ) -> Result<(), HostError> {
        rustix::fs::mkdirat(self.parent.fd(), &self.name, Mode::from_raw_mode(0o700))
            .map_err(|e| HostError::io("create directory", &self.path, errno(e)))?;
        // Whoever can write to the parent may swap the new folder for one
        // of theirs before it is opened: that one is refused, never given
        // the declared owner and mode.
        let fd = crate::boundary::open_made_dir(self.parent.fd(), &self.name, &self.path)?;
        self.chown_chmod(&fd, 0o700, owner, group, Some(mode))
    }

    /// Owner, then mode (`chown` clears set-id bits the mode may need), on
    /// an entry whose permission bits are `current`. When both change, the
    /// mode is first narrowed to what the old and the new one both allow:
    /// in between, the new owner and group would otherwise hold the old
    /// mode (a group that may read neither before nor after reads the
    /// file: svc:svc 0640 to web:web 0600 passes through web:web 0640),
    /// and a pass killed there, or whose chmod fails, leaves it so.
    fn chown_chmod(
        &self,
        fd: &OwnedFd,
        current: u32,
        owner: Option<u32>,
        group: Option<u32>,
        mode: Option<u32>,
    ) -> Result<(), HostError> {
        if owner.is_some() || group.is_some() {
            let current = current & 0o7777;
            if let Some(mode) = mode
                && current & mode & 0o777 != current
            {
                rustix::fs::fchmod(fd, Mode::from_raw_mode(current & mode & 0o777))
                    .map_err(|e| HostError::io("set the mode of", &self.path, errno(e)))?;
            }
            rustix::fs::fchown(fd, uid(owner), gid(group))
                .map_err(|e| HostError::io("change the owner of", &self.path, errno(e)))?;
        }
        if let Some(mode) = mode {
            rustix::fs::fchmod(fd, Mode::from_raw_mode(mode & 0o7777))
                .map_err(|e| HostError::io("set the mode of", &self.path, errno(e)))?;
        }
        Ok(())
    }

    /// Changes owner and then mode of a regular file or directory in place,
    /// through one descriptor opened without following links (a link
    /// swapped in meanwhile is refused, not written through). The owner
    /// comes first because `chown` clears set-id bits the mode may need.
    /// `seen` is the `lstat` the caller decided on: the opened entry must be
    /// that very one (same kind, device and inode), or nothing is changed
    /// ([`HostError::Replaced`]): whoever can write to the folder could
    /// have put another in its place since (their own program where a
    /// setgid folder was, to be given its mode and group).
    /// A regular file with more than one hard link is refused
    /// ([`HostError::HardLinked`]): the change would reach its other names.
    pub fn set_metadata(
        &self,
        seen: &Stat,
        owner: Option<u32>,
        group: Option<u32>,
        mode: Option<u32>,
    ) -> Result<(), HostError> {
        self.set_metadata_checked(seen, None, owner, group, mode)
    }

    /// [`Located::set_metadata`] of a regular file whose content Datum
    /// declares: the file opened must also hold those bytes, hashed from
    /// the very descriptor the change is then made through, or nothing is
    /// changed ([`HostError::Replaced`]). The content was compared when the
    /// file was observed, and whoever can write to the folder may have put
    /// another file of the same owner at the name since (a root-owned 0600
    /// file they can move, to be opened up to 0644).
    pub fn set_metadata_holding(
        &self,
        seen: &Stat,
        holding: Holding<'_>,
        owner: Option<u32>,
        group: Option<u32>,
        mode: Option<u32>,
    ) -> Result<(), HostError> {
        self.set_metadata_checked(seen, Some(holding), owner, group, mode)
    }

    fn set_metadata_checked(
        &self,
        seen: &Stat,
        holding: Option<Holding<'_>>,
        owner: Option<u32>,
        group: Option<u32>,
        mode: Option<u32>,
    ) -> Result<(), HostError> {
        let mut file = self.open_read("open")?;
        let st =
            rustix::fs::fstat(&file).map_err(|e| HostError::io("inspect", &self.path, errno(e)))?;
        let file_type = FileType::from_raw_mode(st.st_mode);
        if !matches!(file_type, FileType::RegularFile | FileType::Directory) {
            return Err(HostError::io(
                "change the metadata of",
                &self.path,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "not a regular file or directory",
                ),
            ));
        }
        let now = fs::stat_of_raw(&st);
        if now.kind != seen.kind
            || now.meta.dev != seen.meta.dev
            || now.meta.inode != seen.meta.inode
        {
            return Err(HostError::Replaced {
                path: self.path.clone(),
                seen: seen.kind.word(),
                found: if now.kind == seen.kind {
                    format!("another {}", now.kind.word())
                } else {
                    format!("a {}", now.kind.word())
                },
            });
        }
        // A hard link's other names share the inode: a chown or chmod here
        // would reach them too, wherever they are (a local user could link a
        // file they cannot change to a path Datum manages, where
        // `fs.protected_hardlinks` is off). Providers rewrite such a file by
        // rename instead; this refusal is the boundary's own guarantee.
        if file_type == FileType::RegularFile && st.st_nlink > 1 {
            return Err(HostError::HardLinked {
                path: self.path.clone(),
                links: st.st_nlink,
            });
        }
        if let Some(holding) = holding {
            let len = now.meta.size;
            let sha256 = match holding.blake3 {
                Some(blake3) => {
                    let expected = Expected {
                        size: holding.size,
                        sha256: holding.sha256,
                        blake3,
                    };
                    fs::hash_open_expecting(&mut file, &self.path, len, expected)?.sha256
                }
                None => fs::hash_open(&mut file, &self.path, len)?.sha256,
            };
            if file_type != FileType::RegularFile || sha256 != holding.sha256 {
                return Err(HostError::Replaced {
                    path: self.path.clone(),
                    seen: seen.kind.word(),
                    found: format!("a {} holding other bytes", now.kind.word()),
                });
            }
        }
        let fd = OwnedFd::from(file);
        self.chown_chmod(&fd, st.st_mode, owner, group, mode)
    }

    /// Creates this regular file, never through anything already there
    /// (`O_CREAT | O_EXCL | O_NOFOLLOW`), with exactly `mode` (set again
    /// after the umask), opened for writing: for files Datum writes fresh
    /// beneath a folder of its own (a `datum pull` checkout).
    pub fn create_new(&self, mode: u32) -> Result<File, HostError> {
        let fd = rustix::fs::openat(
            self.parent.fd(),
            &self.name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode & 0o7777),
        )
        .map_err(|e| HostError::io("create", &self.path, errno(e)))?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode & 0o7777))
            .map_err(|e| HostError::io("set the mode of", &self.path, errno(e)))?;
        Ok(File::from(fd))
    }

    /// Creates a symlink here pointing at `target` (stored as written).
    pub fn symlink(&self, target: &Path) -> Result<(), HostError> {
        rustix::fs::symlinkat(target, self.parent.fd(), &self.name)
            .map_err(|e| HostError::io("create symlink", &self.path, errno(e)))
    }

    /// This entry as a directory (opened without following a link; `None`
    /// when nothing is there).
    pub fn open_dir(&self) -> Result<Option<Dir>, HostError> {
        self.parent.open_child_dir(&self.name)
    }

    /// Starts a staged copy of this file inside its (already open) parent.
    pub fn stage_file(&self) -> Result<StagedFile, HostError> {
        StagedFile::create(self)
    }

    /// Stages a symlink to replace this entry atomically.
    pub fn stage_symlink(&self, points_to: &Path) -> Result<StagedSymlink, HostError> {
        StagedSymlink::create(self, points_to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chain of `depth` folders `d` under `top`, made one level at a time
    /// from the folder above (a path that long could not be named); at the
    /// bottom a file, and a link to `outside`. Each level also holds a file
    /// `e` and a folder `f` with a file, so a folder is come back to with
    /// entries still to remove.
    fn chain(top: &Dir, depth: usize, outside: &Path) {
        let mut here = top.clone();
        for _ in 0..depth {
            here.entry(OsStr::new("d"))
                .create_dir(0o755, None, None)
                .unwrap();
            here.entry(OsStr::new("f"))
                .create_dir(0o755, None, None)
                .unwrap();
            let f = here.open_child_dir(OsStr::new("f")).unwrap().unwrap();
            rustix::fs::openat(
                f.fd(),
                "x",
                OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o644),
            )
            .unwrap();
            rustix::fs::openat(
                here.fd(),
                "e",
                OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o644),
            )
            .unwrap();
            here = here.open_child_dir(OsStr::new("d")).unwrap().unwrap();
        }
        rustix::fs::symlinkat(outside, here.fd(), "link").unwrap();
    }

    /// A chain of folders far deeper than a thread's stack allows a call per
    /// level (3,000, as a local user may make in a purged Tree) is removed
    /// on a 256 KiB thread, with the walk's share of descriptors and with
    /// only 3 folders held (each folder come back to opened again from the
    /// nearest one held); the link at the bottom is removed, not followed.
    #[test]
    fn a_chain_of_folders_deeper_than_the_stack_allows_calls_is_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("kept"), b"kept").unwrap();
        let top = Dir::open_path(tmp.path()).unwrap();
        for (name, depth, most) in [("deep", 3000, None), ("held", 300, Some(3))] {
            top.entry(OsStr::new(name))
                .create_dir(0o755, None, None)
                .unwrap();
            let sub = top.open_child_dir(OsStr::new(name)).unwrap().unwrap();
            chain(&sub, depth, &outside);
            let entry = top.entry(OsStr::new(name));
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || match most {
                    None => entry.remove_all(),
                    Some(most) => {
                        remove_below(sub, most)?;
                        entry.remove_dir()
                    }
                })
                .unwrap()
                .join()
                .unwrap()
                .unwrap();
            assert!(!tmp.path().join(name).exists(), "{name}");
        }
        assert_eq!(std::fs::read(outside.join("kept")).unwrap(), b"kept");
    }
}
