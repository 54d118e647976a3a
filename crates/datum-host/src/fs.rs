//! File-system operations on real (already resolved) paths.
//!
//! Every error carries the path and the operation, so a caller can report it
//! as one line. Nothing here follows a symlink at the final component:
//! observing uses `lstat`, reading and changing metadata open with
//! `O_NOFOLLOW`, so a link swapped in between observe and apply is never
//! written through. Parent components are followed as the kernel does (a
//! `/var/run -> /run` link is a normal sight). This module must not decide
//! what a change should be; it only carries one out.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use datum_core::FileMeta;
use rustix::fs::OFlags;
use sha2::{Digest, Sha256};

use crate::HostError;

/// What an entry in the file system is, without following links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    File,
    Directory,
    Symlink,
    Fifo,
    Socket,
    BlockDevice,
    CharDevice,
}

impl FileKind {
    /// The word used in `Presence::OtherType` and in messages.
    pub fn word(self) -> &'static str {
        match self {
            FileKind::File => "file",
            FileKind::Directory => "directory",
            FileKind::Symlink => "symlink",
            FileKind::Fifo => "fifo",
            FileKind::Socket => "socket",
            FileKind::BlockDevice => "block device",
            FileKind::CharDevice => "character device",
        }
    }

    fn of(file_type: std::fs::FileType) -> Self {
        if file_type.is_symlink() {
            FileKind::Symlink
        } else if file_type.is_dir() {
            FileKind::Directory
        } else if file_type.is_fifo() {
            FileKind::Fifo
        } else if file_type.is_socket() {
            FileKind::Socket
        } else if file_type.is_block_device() {
            FileKind::BlockDevice
        } else if file_type.is_char_device() {
            FileKind::CharDevice
        } else {
            FileKind::File
        }
    }
}

/// The result of an `lstat`: the kind of entry and its metadata (without a
/// content hash; see [`hash_file`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub kind: FileKind,
    pub meta: FileMeta,
}

fn meta_of(m: &std::fs::Metadata) -> FileMeta {
    FileMeta {
        size: m.size(),
        mtime_ns: nanos(m.mtime(), m.mtime_nsec()),
        ctime_ns: nanos(m.ctime(), m.ctime_nsec()),
        inode: m.ino(),
        dev: m.dev(),
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
        sha256: None,
    }
}

fn nanos(secs: i64, nsecs: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsecs)
}

/// Whether an error means "nothing is there": the entry is missing, or a
/// parent component is not a directory (then nothing can be there either).
fn is_absent(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
    )
}

/// `lstat`: `None` when nothing is at `path`.
pub fn lstat(path: &Path) -> Result<Option<Stat>, HostError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(Stat {
            kind: FileKind::of(m.file_type()),
            meta: meta_of(&m),
        })),
        Err(e) if is_absent(&e) => Ok(None),
        Err(e) => Err(HostError::io("inspect", path, e)),
    }
}

/// [`lstat`] of many paths, on `threads` threads, each entry looked up
/// relative to its parent directory opened once (`fstatat`): the kernel
/// walks a long absolute path's components once per directory instead of
/// once per file, which is most of the cost of a metadata pass over 20,000
/// files. Same semantics as [`lstat`]: parents are followed as the kernel
/// does, the final component never. Results are in the order of `paths`.
pub fn lstat_many(paths: &[&Path], threads: usize) -> Vec<Result<Option<Stat>, HostError>> {
    // Consecutive runs of one parent: sort the indices by (parent, name) as
    // bytes (`Path`'s own ordering compares component by component, which
    // costs more than the lookups it saves).
    fn split(p: &Path) -> (&[u8], &[u8]) {
        use std::os::unix::ffi::OsStrExt as _;
        let bytes = p.as_os_str().as_bytes();
        let cut = bytes.iter().rposition(|b| *b == b'/').unwrap_or(0);
        bytes.split_at(cut)
    }
    let mut order: Vec<usize> = (0..paths.len()).collect();
    // Declarations are usually written folder by folder already.
    if !order.is_sorted_by(|&a, &b| split(paths[a]) <= split(paths[b])) {
        order.sort_unstable_by(|&a, &b| split(paths[a]).cmp(&split(paths[b])));
    }
    let threads = threads.clamp(1, 64);
    let chunk = order.len().div_ceil(threads).max(512);
    let mut results: Vec<Option<Result<Option<Stat>, HostError>>> = Vec::new();
    results.resize_with(paths.len(), || None);
    let parts: Vec<Vec<Lstated>> = std::thread::scope(|scope| {
        let workers: Vec<_> = order
            .chunks(chunk)
            .map(|part| (part, scope.spawn(move || lstat_sorted(paths, part))))
            .collect();
        workers
            .into_iter()
            .map(|(part, worker)| {
                worker.join().unwrap_or_else(|_| {
                    // A worker cannot panic on input; should it, each of its
                    // paths is asked again the plain way.
                    part.iter().map(|&i| (i, lstat(paths[i]))).collect()
                })
            })
            .collect()
    });
    for (i, result) in parts.into_iter().flatten() {
        results[i] = Some(result);
    }
    results
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.unwrap_or_else(|| lstat(paths[i])))
        .collect()
}

/// One result of [`lstat_many`] with the index of its path.
type Lstated = (usize, Result<Option<Stat>, HostError>);

/// The entries `indices` of `paths` (sorted, so one parent's run together).
fn lstat_sorted(paths: &[&Path], indices: &[usize]) -> Vec<Lstated> {
    use rustix::fs::{AtFlags, Mode};
    let mut out = Vec::with_capacity(indices.len());
    let mut open: Option<(&Path, Option<rustix::fd::OwnedFd>)> = None;
    for &i in indices {
        let path = paths[i];
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            out.push((i, lstat(path)));
            continue;
        };
        if open.as_ref().is_none_or(|(p, _)| *p != parent) {
            // O_PATH: no read permission needed, nothing opened but the
            // directory's place; the parent itself may be a link, followed.
            let fd = rustix::fs::open(
                parent,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .ok();
            open = Some((parent, fd));
        }
        let result = match open.as_ref().and_then(|(_, fd)| fd.as_ref()) {
            Some(fd) => match rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => Ok(Some(stat_of_raw(&st))),
                Err(e) => {
                    let e = std::io::Error::from(e);
                    if is_absent(&e) {
                        Ok(None)
                    } else {
                        Err(HostError::io("inspect", path, e))
                    }
                }
            },
            // The parent could not be opened (missing, not a directory,
            // not searchable): the plain lstat says which.
            None => lstat(path),
        };
        out.push((i, result));
    }
    out
}

/// The kind of entry a raw `st_mode` says.
pub(crate) fn kind_of_mode(mode: u32) -> FileKind {
    use rustix::fs::FileType;
    match FileType::from_raw_mode(mode) {
        FileType::Symlink => FileKind::Symlink,
        FileType::Directory => FileKind::Directory,
        FileType::Fifo => FileKind::Fifo,
        FileType::Socket => FileKind::Socket,
        FileType::BlockDevice => FileKind::BlockDevice,
        FileType::CharacterDevice => FileKind::CharDevice,
        _ => FileKind::File,
    }
}

/// [`Stat`] from a raw `stat` (what [`meta_of`] reads from `Metadata`).
fn stat_of_raw(st: &rustix::fs::Stat) -> Stat {
    Stat {
        kind: kind_of_mode(st.st_mode),
        meta: FileMeta {
            size: st.st_size as u64,
            mtime_ns: nanos(st.st_mtime, st.st_mtime_nsec as i64),
            ctime_ns: nanos(st.st_ctime, st.st_ctime_nsec as i64),
            inode: st.st_ino,
            dev: st.st_dev,
            mode: st.st_mode & 0o7777,
            uid: st.st_uid,
            gid: st.st_gid,
            sha256: None,
        },
    }
}

/// Opens an existing entry for reading without following a final symlink and
/// without blocking on a FIFO.
fn open_nofollow(path: &Path, op: &'static str) -> Result<File, HostError> {
    OpenOptions::new()
        .read(true)
        .custom_flags((OFlags::NOFOLLOW | OFlags::NONBLOCK).bits() as i32)
        .open(path)
        .map_err(|e| HostError::io(op, path, e))
}

fn open_regular(path: &Path, op: &'static str) -> Result<File, HostError> {
    open_regular_len(path, op).map(|(file, _)| file)
}

/// [`open_regular`] and the file's length (from the same `fstat`).
fn open_regular_len(path: &Path, op: &'static str) -> Result<(File, u64), HostError> {
    let file = open_nofollow(path, op)?;
    let m = file.metadata().map_err(|e| HostError::io(op, path, e))?;
    if !m.is_file() {
        return Err(HostError::io(
            op,
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"),
        ));
    }
    Ok((file, m.len()))
}

/// Reads a whole regular file.
pub fn read(path: &Path) -> Result<Vec<u8>, HostError> {
    let mut file = open_regular(path, "read")?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| HostError::io("read", path, e))?;
    Ok(bytes)
}

/// A regular file's SHA-256, and its bytes when it is small enough to keep.
#[derive(Clone, PartialEq, Eq)]
pub struct Hashed {
    pub sha256: String,
    /// The content, when it was at most the `keep_up_to` limit.
    pub bytes: Option<Vec<u8>>,
    pub size: u64,
}

impl std::fmt::Debug for Hashed {
    // The bytes may be secret; show only their size.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hashed({} bytes, sha256 {})", self.size, self.sha256)
    }
}

/// Hashes a regular file in one streaming read, keeping the bytes when there
/// are at most `keep_up_to` of them (for text diffs) so the file is read once.
pub fn hash_file(path: &Path, keep_up_to: u64) -> Result<Hashed, HostError> {
    let (mut file, expected) = open_regular_len(path, "read")?;
    if expected <= keep_up_to {
        // The common case for configuration files: one read into a buffer of
        // the right size, hashed whole.
        let mut bytes = Vec::with_capacity(usize::try_from(expected).unwrap_or(0) + 1);
        file.read_to_end(&mut bytes)
            .map_err(|e| HostError::io("read", path, e))?;
        let size = bytes.len() as u64;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        return Ok(Hashed {
            sha256,
            // It may have grown while we read.
            bytes: (size <= keep_up_to).then_some(bytes),
            size,
        });
    }
    sha256_of(&mut file, path, expected)
}

/// SHA-256 of the rest of `file` (`len` from its `fstat`), without keeping
/// the bytes.
fn sha256_of(file: &mut File, path: &Path, len: u64) -> Result<Hashed, HostError> {
    let mut hasher = Sha256::new();
    let size = stream(file, path, len, |chunk| hasher.update(chunk))?;
    Ok(Hashed {
        sha256: hex::encode(hasher.finalize()),
        bytes: None,
        size,
    })
}

/// The declared content a live file is compared with: its size and both
/// digests (see [`hash_file_expecting`]).
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    pub size: u64,
    pub sha256: &'a str,
    /// Lowercase hex BLAKE3.
    pub blake3: &'a str,
}

/// [`hash_file`] (without keeping bytes) for a file expected to hold
/// `expected`: a file of the expected size is hashed with BLAKE3 (several
/// times faster than SHA-256 here), and when that matches, its SHA-256 is
/// the expected one (same bytes); only a file that differs is hashed with
/// SHA-256 (read again from the start). The result is the same as
/// [`hash_file`]'s either way.
pub fn hash_file_expecting(path: &Path, expected: Expected<'_>) -> Result<Hashed, HostError> {
    let (mut file, len) = open_regular_len(path, "read")?;
    if len == expected.size {
        let mut hasher = blake3::Hasher::new();
        let size = stream(&mut file, path, len, |chunk| {
            hasher.update(chunk);
        })?;
        if size == expected.size && hasher.finalize().to_hex().as_str() == expected.blake3 {
            return Ok(Hashed {
                sha256: expected.sha256.to_owned(),
                bytes: None,
                size,
            });
        }
        use std::io::Seek as _;
        file.seek(std::io::SeekFrom::Start(0))
            .map_err(|e| HostError::io("read", path, e))?;
    }
    sha256_of(&mut file, path, len)
}

/// Feeds `file` to `f` through one buffer per thread (a fresh zeroed buffer
/// per file costs more than hashing a small file does); returns the bytes
/// read. `len` is the file's length from `fstat`: a short read that brings
/// the total to exactly that is the end of the file (a regular file's read
/// is short only at its end), which saves the final empty read, one system
/// call per file; a file that grew meanwhile is read to its new end.
fn stream(
    file: &mut File,
    path: &Path,
    len: u64,
    mut f: impl FnMut(&[u8]),
) -> Result<u64, HostError> {
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0u8; 128 * 1024]);
    }
    BUF.with(|cell| {
        let mut buf = cell.borrow_mut();
        let mut size: u64 = 0;
        loop {
            let n = match file.read(&mut buf) {
                Ok(0) => return Ok(size),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(HostError::io("read", path, e)),
            };
            f(&buf[..n]);
            size += n as u64;
            if n < buf.len() && size == len {
                return Ok(size);
            }
        }
    })
}

/// Fails unless `path`'s parent exists as a directory (links followed, as the
/// kernel will). Datum creates only what is declared, never missing parents.
pub fn require_parent_dir(path: &Path) -> Result<(), HostError> {
    let Some(parent) = path.parent() else {
        return Ok(());
    };
    match std::fs::metadata(parent) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(HostError::io(
            "use as a parent directory",
            parent,
            std::io::Error::from(std::io::ErrorKind::NotADirectory),
        )),
        Err(e) if is_absent(&e) => Err(HostError::MissingParent {
            path: path.to_path_buf(),
            parent: parent.to_path_buf(),
        }),
        Err(e) => Err(HostError::io("inspect", parent, e)),
    }
}

/// Creates one directory (not its parents) with `mode`, exactly: the mode is
/// set again after creation because the umask narrows what `mkdir` applies.
pub fn create_dir(path: &Path, mode: u32) -> Result<(), HostError> {
    require_parent_dir(path)?;
    std::fs::DirBuilder::new()
        .mode(mode)
        .create(path)
        .map_err(|e| HostError::io("create directory", path, e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| HostError::io("set the mode of", path, e))
}

/// Removes a file or a symlink (never what a link points at).
pub fn remove_file(path: &Path) -> Result<(), HostError> {
    std::fs::remove_file(path).map_err(|e| HostError::io("remove", path, e))
}

/// Removes an empty directory. A non-empty one is an error, never a
/// recursive delete.
pub fn remove_dir(path: &Path) -> Result<(), HostError> {
    std::fs::remove_dir(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::DirectoryNotEmpty {
            HostError::DirectoryNotEmpty {
                path: path.to_path_buf(),
            }
        } else {
            HostError::io("remove directory", path, e)
        }
    })
}

/// Creates a symlink at `link` pointing at `target` (stored as written).
pub fn symlink(target: &Path, link: &Path) -> Result<(), HostError> {
    std::os::unix::fs::symlink(target, link).map_err(|e| HostError::io("create symlink", link, e))
}

/// What a symlink points at, as stored.
pub fn read_link(path: &Path) -> Result<PathBuf, HostError> {
    std::fs::read_link(path).map_err(|e| HostError::io("read symlink", path, e))
}

/// Renames `from` over `to` (atomic within one file system).
pub fn rename(from: &Path, to: &Path) -> Result<(), HostError> {
    std::fs::rename(from, to).map_err(|e| HostError::io("rename into", to, e))
}

/// Changes the owner of an entry without following a final symlink.
pub fn lchown(path: &Path, uid: Option<u32>, gid: Option<u32>) -> Result<(), HostError> {
    std::os::unix::fs::lchown(path, uid, gid)
        .map_err(|e| HostError::io("change the owner of", path, e))
}

/// Changes owner and then mode of a regular file or directory in place,
/// through one descriptor opened without following links (so a link swapped
/// in meanwhile is refused, not written through). The owner comes first
/// because `chown` clears set-id bits that the mode may need.
pub fn set_metadata(
    path: &Path,
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
) -> Result<(), HostError> {
    let file = open_nofollow(path, "open")?;
    if uid.is_some() || gid.is_some() {
        std::os::unix::fs::fchown(&file, uid, gid)
            .map_err(|e| HostError::io("change the owner of", path, e))?;
    }
    if let Some(mode) = mode {
        file.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))
            .map_err(|e| HostError::io("set the mode of", path, e))?;
    }
    Ok(())
}

/// Changes the mode of a regular file or directory (no links followed).
pub fn chmod(path: &Path, mode: u32) -> Result<(), HostError> {
    set_metadata(path, None, None, Some(mode))
}

/// fsyncs a directory, so a rename or removal inside it is durable.
pub fn sync_dir(path: &Path) -> Result<(), HostError> {
    let dir = File::open(path).map_err(|e| HostError::io("open directory", path, e))?;
    dir.sync_all()
        .map_err(|e| HostError::io("sync directory", path, e))
}

/// The bytes of declared content: in memory, or read from the repository file
/// that holds them, refusing a file whose checksum is no longer the one the
/// catalogue recorded.
pub fn content_bytes(
    content: &datum_core::Content,
) -> Result<std::borrow::Cow<'_, [u8]>, HostError> {
    let Some(path) = &content.source else {
        return Ok(std::borrow::Cow::Borrowed(content.bytes.as_slice()));
    };
    let bytes = read(path)?;
    if hex::encode(Sha256::digest(&bytes)) != content.sha256 {
        return Err(HostError::ContentChanged {
            path: path.clone(),
            expected: content.sha256.clone(),
        });
    }
    Ok(std::borrow::Cow::Owned(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashing_against_an_expectation_reads_blake3_first_and_sha256_on_a_difference() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let bytes = vec![7u8; 300_000];
        std::fs::write(&p, &bytes).unwrap();
        let real_sha = hex::encode(Sha256::digest(&bytes));
        let real_b3 = blake3::hash(&bytes).to_hex().to_string();
        let planted = "00".repeat(32);
        let exp = |size, sha256, blake3| Expected {
            size,
            sha256,
            blake3,
        };
        // BLAKE3 matches: the expected SHA-256 is taken, not computed (the
        // planted value proves which way it went).
        let h = hash_file_expecting(&p, exp(300_000, &planted, &real_b3)).unwrap();
        assert_eq!((h.sha256.as_str(), h.size), (planted.as_str(), 300_000));
        // Same size, other BLAKE3: the real SHA-256, read again.
        let other_b3 = blake3::hash(b"other").to_hex().to_string();
        let h = hash_file_expecting(&p, exp(300_000, &planted, &other_b3)).unwrap();
        assert_eq!(h.sha256, real_sha);
        // Another size: SHA-256 at once.
        let h = hash_file_expecting(&p, exp(5, &planted, &real_b3)).unwrap();
        assert_eq!((h.sha256.as_str(), h.size), (real_sha.as_str(), 300_000));
        assert_eq!(h.sha256, hash_file(&p, 0).unwrap().sha256);
        assert!(hash_file_expecting(dir.path(), exp(0, &planted, &real_b3)).is_err());
    }

    #[test]
    fn lstat_many_agrees_with_lstat_on_every_kind_of_path() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("a/b")).unwrap();
        std::fs::write(d.join("a/f"), b"abc").unwrap();
        std::fs::write(d.join("a/b/g"), b"x").unwrap();
        std::os::unix::fs::symlink("f", d.join("a/l")).unwrap();
        std::os::unix::fs::symlink("a/b", d.join("via")).unwrap();
        let mut paths: Vec<PathBuf> = vec![
            d.join("a/f"),
            d.join("a/l"),
            d.join("a/b"),
            d.join("a/b/g"),
            d.join("via/g"),
            d.join("via"),
            d.join("a/missing"),
            d.join("nowhere/missing"),
            d.join("a/f/under-a-file"),
            PathBuf::from("/"),
        ];
        // Many files in one folder, spread over workers.
        for i in 0..1500 {
            let p = d.join(format!("a/b/n{i}"));
            std::fs::write(&p, i.to_string()).unwrap();
            paths.push(p);
        }
        let refs: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
        for threads in [1, 3] {
            let many = lstat_many(&refs, threads);
            assert_eq!(many.len(), paths.len());
            for (path, got) in paths.iter().zip(&many) {
                let want = lstat(path).unwrap();
                assert_eq!(got.as_ref().unwrap(), &want, "{}", path.display());
            }
        }
        let many = lstat_many(&refs, 2);
        assert_eq!(
            many[1].as_ref().unwrap().as_ref().unwrap().kind,
            FileKind::Symlink
        );
        assert_eq!(many[4].as_ref().unwrap().as_ref().unwrap().meta.size, 1);
        assert!(many[6].as_ref().unwrap().is_none());
        assert!(many[8].as_ref().unwrap().is_none());
    }

    #[test]
    fn lstat_reports_kinds_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"abc").unwrap();
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&file, &link).unwrap();

        let f = lstat(&file).unwrap().unwrap();
        assert_eq!(f.kind, FileKind::File);
        assert_eq!(f.meta.size, 3);
        assert_eq!(lstat(&link).unwrap().unwrap().kind, FileKind::Symlink);
        assert_eq!(
            lstat(dir.path()).unwrap().unwrap().kind,
            FileKind::Directory
        );
        assert_eq!(lstat(&dir.path().join("missing")).unwrap(), None);
        // A file used as a parent component: nothing can be there.
        assert_eq!(lstat(&file.join("below")).unwrap(), None);
    }

    #[test]
    fn hashing_keeps_small_content_and_streams_large() {
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("small");
        std::fs::write(&small, b"hi\n").unwrap();
        let h = hash_file(&small, 1024).unwrap();
        assert_eq!(
            h.sha256,
            "98ea6e4f216f2fb4b69fff9b3a44842c38686ca685f3f55dc48c5d3fb1107be4"
        );
        assert_eq!(h.bytes.as_deref(), Some(&b"hi\n"[..]));

        let big = dir.path().join("big");
        let data = vec![7u8; 200_000];
        std::fs::write(&big, &data).unwrap();
        let h = hash_file(&big, 1024).unwrap();
        assert_eq!(h.bytes, None);
        assert_eq!(h.size, 200_000);
        assert_eq!(h.sha256, datum_core::sha256_hex(&data));
    }

    #[test]
    fn reading_refuses_symlinks_and_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let err = read(&link).unwrap_err();
        assert_eq!(err.path(), Some(link.as_path()));
        assert!(
            hash_file(dir.path(), 10).is_err(),
            "a directory is not hashed"
        );
    }

    #[test]
    fn create_dir_sets_the_exact_mode_and_needs_its_parent() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("d");
        create_dir(&d, 0o2750).unwrap();
        assert_eq!(lstat(&d).unwrap().unwrap().meta.mode, 0o2750);

        let deep = dir.path().join("no/such/d");
        match create_dir(&deep, 0o755).unwrap_err() {
            HostError::MissingParent { path, parent } => {
                assert_eq!(path, deep);
                assert_eq!(parent, dir.path().join("no/such"));
            }
            other => panic!("unexpected {other}"),
        }
    }

    #[test]
    fn non_empty_directories_are_not_removed() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("d");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("keep"), b"x").unwrap();
        assert!(matches!(
            remove_dir(&d).unwrap_err(),
            HostError::DirectoryNotEmpty { .. }
        ));
        assert!(d.join("keep").exists());
        std::fs::remove_file(d.join("keep")).unwrap();
        remove_dir(&d).unwrap();
        assert!(!d.exists());
    }

    #[test]
    fn set_metadata_applies_owner_then_mode_and_refuses_links() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let me = lstat(&file).unwrap().unwrap().meta;
        set_metadata(&file, Some(me.uid), Some(me.gid), Some(0o4750)).unwrap();
        assert_eq!(lstat(&file).unwrap().unwrap().meta.mode, 0o4750);

        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(chmod(&link, 0o600).is_err());
        assert_eq!(
            lstat(&file).unwrap().unwrap().meta.mode,
            0o4750,
            "target untouched"
        );
    }
}
