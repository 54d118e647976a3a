//! Reading the repository: manifests, `source:` and `template:` files, the
//! folders of a `Tree`.
//!
//! The repository's own rule (datum-manifest's `paths`) is that every path it
//! names resolves inside it, links included; the loader checks that once and
//! hands over *canonical* paths, which contain no link at all. Reading one is
//! then an `openat2` with `RESOLVE_NO_SYMLINKS`: a component swapped for a
//! link after the check (by whoever can write to the checkout) fails the
//! read instead of carrying `/etc/shadow` into a managed file. Listing and
//! `lstat` for the repository's change stamps go through here too, so no
//! other crate opens files itself.
//!
//! This module reads; it never writes into a repository.

use std::fs::File;
use std::io::Read as _;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{Mode, OFlags, ResolveFlags};
use sha2::{Digest as _, Sha256};

use crate::HostError;

/// Opens a canonical repository path for reading, refusing any link on the
/// way (and at the end), without blocking on a FIFO.
pub fn open(canonical: &Path) -> std::io::Result<File> {
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    open_without_links(canonical, flags).map(File::from)
}

/// Opens `canonical` with `flags` (which include `NOFOLLOW`), refusing a
/// link anywhere on the way.
fn open_without_links(canonical: &Path, flags: OFlags) -> std::io::Result<OwnedFd> {
    match rustix::fs::openat2(
        rustix::fs::CWD,
        canonical,
        flags,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(fd) => Ok(fd),
        // A kernel without openat2 (before 5.6): the final component is
        // still never followed.
        Err(rustix::io::Errno::NOSYS) => {
            rustix::fs::open(canonical, flags, Mode::empty()).map_err(Into::into)
        }
        Err(e) => Err(e.into()),
    }
}

/// Reads a whole regular file at a canonical repository path.
pub fn read(canonical: &Path) -> std::io::Result<Vec<u8>> {
    let mut file = open(canonical)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0).saturating_add(1));
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// [`read`] as UTF-8 text.
pub fn read_to_string(canonical: &Path) -> std::io::Result<String> {
    String::from_utf8(read(canonical)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// `lstat` of a repository path (for change stamps: metadata, never
/// content).
pub fn symlink_metadata(path: &Path) -> std::io::Result<std::fs::Metadata> {
    std::fs::symlink_metadata(path)
}

/// `stat` of a path (links followed), for change stamps of files Datum
/// itself names (its executable).
pub fn metadata(path: &Path) -> std::io::Result<std::fs::Metadata> {
    std::fs::metadata(path)
}

/// The entries of a repository folder.
pub fn read_dir(path: &Path) -> std::io::Result<std::fs::ReadDir> {
    std::fs::read_dir(path)
}

/// Canonical form of a repository path (links resolved), for the
/// inside-the-repository check.
pub fn canonicalize(path: &Path) -> std::io::Result<std::path::PathBuf> {
    path.canonicalize()
}

/// The bytes of declared content: in memory, or read from the repository
/// file that holds them, refusing a file whose checksum is no longer the one
/// the catalogue recorded.
pub fn content_bytes(
    content: &datum_core::Content,
) -> Result<std::borrow::Cow<'_, [u8]>, HostError> {
    let Some(path) = content.source.as_deref() else {
        return Ok(std::borrow::Cow::Borrowed(&content.bytes[..]));
    };
    let bytes = read(path).map_err(|e| HostError::io("read", path, e))?;
    if hex::encode(Sha256::digest(&bytes)) != content.sha256 {
        return Err(HostError::ContentChanged {
            path: path.to_owned(),
        });
    }
    Ok(std::borrow::Cow::Owned(bytes))
}

/// `path` itself, or, when it is a symlink, the real path of what it points
/// at right now. A command that reads a whole repository through a link
/// that may be switched meanwhile pins it first, so every file comes from
/// the same revision.
pub fn pinned(path: &Path) -> Result<std::path::PathBuf, HostError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::canonicalize(path).map_err(|e| HostError::io("resolve the link", path, e))
        }
        _ => Ok(path.to_path_buf()),
    }
}

/// What a change stamp compares of a repository entry: size, times,
/// identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryKey {
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub inode: u64,
    pub device: u64,
}

impl EntryKey {
    fn of(stat: &rustix::fs::Stat) -> Self {
        // i64 nanoseconds reach the year 2262.
        let ns = |secs: i64, nanos: i64| secs.saturating_mul(1_000_000_000).saturating_add(nanos);
        EntryKey {
            size: stat.st_size as u64,
            mtime_ns: ns(stat.st_mtime, stat.st_mtime_nsec as i64),
            ctime_ns: ns(stat.st_ctime, stat.st_ctime_nsec as i64),
            inode: stat.st_ino,
            device: stat.st_dev,
        }
    }
}

/// What one `lstat` of a repository entry says: its key and what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryStat {
    pub key: EntryKey,
    pub kind: EntryKind,
}

/// The type of a repository entry (a link is never followed here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Folder,
    Link,
    Other,
}

impl EntryStat {
    fn of(stat: &rustix::fs::Stat) -> Self {
        use rustix::fs::FileType;
        let kind = match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => EntryKind::File,
            FileType::Directory => EntryKind::Folder,
            FileType::Symlink => EntryKind::Link,
            _ => EntryKind::Other,
        };
        EntryStat {
            key: EntryKey::of(stat),
            kind,
        }
    }
}

/// `stat` of a repository path, links followed (what a link inside the
/// repository names, once its target is known to be inside too).
pub fn stat_following(path: &Path) -> std::io::Result<EntryStat> {
    Ok(EntryStat::of(&rustix::fs::stat(path)?))
}

/// A repository folder, opened by its canonical path (no link is followed
/// on the way: a canonical path has none, and one swapped in since is
/// refused), to look at its entries relative to it: one `lstat` by name
/// walks one component instead of the whole path (a compile of 20,000
/// `source:` files spent most of its path checks walking the repository's
/// own location again for every file), and a change stamp reads every
/// entry's name and key, never following a link.
#[derive(Debug)]
pub struct Folder(OwnedFd);

impl Folder {
    /// Opens the folder at the canonical path `canonical`.
    pub fn open(canonical: &Path) -> std::io::Result<Folder> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        open_without_links(canonical, flags).map(Folder)
    }

    /// The folder's own key.
    pub fn key(&self) -> std::io::Result<EntryKey> {
        Ok(EntryKey::of(&rustix::fs::fstat(&self.0)?))
    }

    /// `lstat` of the entry `name` (one component) of this folder.
    pub fn lstat(&self, name: &std::ffi::OsStr) -> std::io::Result<EntryStat> {
        let stat = rustix::fs::statat(&self.0, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)?;
        Ok(EntryStat::of(&stat))
    }

    /// Calls `each` with every entry (`.` and `..` aside) as the folder
    /// lists them: its name and what its `lstat` says (a link's own key, not
    /// its target's). The folder is read through one buffer on the stack,
    /// with no allocation per entry; call it once per opening.
    pub fn each_entry(&self, mut each: impl FnMut(&[u8], EntryStat)) -> std::io::Result<()> {
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 8192];
        let mut dir = rustix::fs::RawDir::new(&self.0, &mut buf);
        while let Some(entry) = dir.next() {
            let entry = entry?;
            let name = entry.file_name();
            if matches!(name.to_bytes(), b"." | b"..") {
                continue;
            }
            let stat = rustix::fs::statat(&self.0, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)?;
            each(name.to_bytes(), EntryStat::of(&stat));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_changed_since_the_compile_is_refused_without_its_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, b"CANARY-secret\n").unwrap();
        let sha256 = datum_core::sha256_hex(b"CANARY-secret\n");
        let content = datum_core::Content::from_source(path.as_path(), sha256.clone(), None, 14);
        assert_eq!(&content_bytes(&content).unwrap()[..], b"CANARY-secret\n");
        std::fs::write(&path, b"edited since\n").unwrap();
        let err = content_bytes(&content).unwrap_err().to_string();
        assert!(
            err.contains("changed since the catalogue was compiled"),
            "{err}"
        );
        assert!(
            !err.contains(&sha256),
            "the compiled checksum is shown: {err}"
        );
    }

    #[test]
    fn a_link_is_pinned_to_what_it_points_at_now() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("a")).unwrap();
        std::os::unix::fs::symlink("a", dir.path().join("cur")).unwrap();
        assert_eq!(
            pinned(&dir.path().join("cur")).unwrap(),
            dir.path().canonicalize().unwrap().join("a")
        );
        assert_eq!(pinned(&dir.path().join("a")).unwrap(), dir.path().join("a"));
    }

    #[test]
    fn a_link_anywhere_on_a_canonical_path_fails_the_read() {
        let repo = tempfile::tempdir().unwrap();
        let secret = tempfile::tempdir().unwrap();
        std::fs::write(secret.path().join("shadow"), b"root:x").unwrap();
        std::fs::create_dir(repo.path().join("files")).unwrap();
        std::fs::write(repo.path().join("files/motd"), b"hi").unwrap();
        let canonical = repo.path().canonicalize().unwrap();
        assert_eq!(read(&canonical.join("files/motd")).unwrap(), b"hi");
        // The folder swapped for a link after the loader's check.
        std::fs::rename(canonical.join("files"), canonical.join("old")).unwrap();
        std::os::unix::fs::symlink(secret.path(), canonical.join("files")).unwrap();
        assert!(read(&canonical.join("files/shadow")).is_err());
        std::os::unix::fs::symlink(secret.path().join("shadow"), canonical.join("direct")).unwrap();
        assert!(read(&canonical.join("direct")).is_err());
    }
}
