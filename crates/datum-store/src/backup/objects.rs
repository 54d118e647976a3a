//! Content-addressed blobs: `objects/<sha256[..2]>/<sha256>`, mode 0600, in
//! folders of mode 0700.
//!
//! Every folder is one of Datum's private folders (`datum_host::PrivateDir`)
//! and every blob is written relative to its handle: to a fresh temporary
//! file (`O_EXCL | O_NOFOLLOW`), fsynced, renamed into place and the folder
//! fsynced, so a blob that exists under its name is always complete and a
//! link planted among the blobs is an error, never a target. Equal content
//! is stored once. This module knows nothing of the index: the caller
//! decides which blobs are still referenced.

use std::io::{Read, Seek as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest as _, Sha256};

use datum_host::{FileKind, HostError, PrivateDir};

use crate::error::StoreError;

/// Marks in-progress blob files (`.<sha>.tmp-<random>`); anything with it is
/// debris of a killed save once it is old enough.
pub(crate) const TEMP_MARK: &str = ".tmp-";

pub(crate) use datum_core::sha256_hex;

/// Whether `name` is a blob name this store writes (64 lowercase hex digits).
pub(crate) fn is_blob_name(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether `name` is a temporary file of an interrupted save.
pub(crate) fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.contains(TEMP_MARK)
}

fn fan_of(sha: &str) -> &str {
    sha.get(..2).unwrap_or("00")
}

/// Where a blob is (for messages).
pub(crate) fn blob_path(objects: &PrivateDir, sha: &str) -> PathBuf {
    objects.file_path(fan_of(sha)).join(sha)
}

fn host(path: PathBuf) -> impl FnOnce(HostError) -> StoreError {
    move |source| StoreError::Host {
        path,
        cause: Box::new(source),
    }
}

/// The buffer a save reads its source through: memory stays bounded
/// whatever the size of the file being saved.
const BUFFER: usize = 128 * 1024;

/// The name the temporary files of saves in progress are made under, in
/// `objects/` itself (`.incoming.tmp-<random>`): a blob's name is its
/// digest, known only once the whole content has been read. A killed
/// save's leftover is swept by a later save once an hour old.
const INCOMING: &str = "incoming";

/// What [`put_from`] read and stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stored {
    /// SHA-256 of every byte read (lowercase hex).
    pub sha: String,
    pub size: u64,
    /// The content is in the store under `sha`. False when it was larger
    /// than the limit: nothing of it was kept.
    pub kept: bool,
}

/// Why [`put_from`] failed: the source could not be read, or the store
/// could not keep it.
#[derive(Debug)]
pub(crate) enum PutError {
    Source(std::io::Error),
    Store(StoreError),
}

impl From<StoreError> for PutError {
    fn from(e: StoreError) -> Self {
        PutError::Store(e)
    }
}

/// Reads `source` to its end through a fixed buffer, hashing as it goes,
/// and keeps the bytes as blob `<sha>` unless there are more than `limit`
/// of them (`len`, the source's length from `fstat`, says so up front; a
/// source that grows past it while being read is dropped then). The copy
/// goes to a fresh temporary file (`O_EXCL`, 0600) in `objects/`, is read
/// back and hashed again (a blob under its name always holds that name's
/// content), fsynced and renamed into its fan-out folder; an intact blob
/// already there is kept (its time refreshed) and the copy dropped, a
/// damaged one is replaced. A failure at any point leaves no temporary
/// file and no blob.
pub(crate) fn put_from(
    objects: &PrivateDir,
    source: &mut dyn Read,
    len: u64,
    limit: u64,
) -> Result<Stored, PutError> {
    let mut pump = Pump {
        hasher: Sha256::new(),
        size: 0,
        limit,
        source_error: None,
        buf: vec![0u8; BUFFER],
    };
    if len > limit {
        let kept = pump.run(source, None);
        return pump.finish(kept.map(|_| false));
    }
    let mut kept = false;
    let incoming = objects.write_unsynced(INCOMING, |file| {
        kept = pump.run(source, Some(file))?;
        if kept {
            // Read back: the blob must hold what was hashed.
            file.seek(std::io::SeekFrom::Start(0))?;
            let copied =
                sha256_of_file(file, Path::new(INCOMING)).map_err(std::io::Error::other)?;
            if copied != hex::encode(pump.hasher.clone().finalize()) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "the copy does not match what was read",
                ));
            }
        }
        Ok(())
    });
    if let Some(e) = pump.source_error.take() {
        return Err(PutError::Source(e));
    }
    let incoming = incoming.map_err(host(objects.file_path(INCOMING)))?;
    let stored = pump.finish(Ok(kept))?;
    if !stored.kept {
        // Grew past the limit while being read: the copy goes (dropped).
        return Ok(stored);
    }
    let sha = &stored.sha;
    let target = blob_path(objects, sha);
    let fan = fan_dir(objects, sha)?;
    if is_intact(&fan, sha, stored.size) {
        drop(incoming);
        // Refresh the time so an orphan sweep running with a grace period
        // never takes a blob that a save has just decided to reuse.
        let touched = fan
            .open_or_create(sha, 0o600)
            .map_err(host(target.clone()))?
            .set_modified(SystemTime::now());
        touched.map_err(|source| StoreError::Io {
            path: target,
            action: "cannot refresh backup blob",
            source,
        })?;
    } else {
        incoming.commit_into(&fan, sha).map_err(host(target))?;
    }
    Ok(stored)
}

/// A source read through one buffer and hashed as it goes.
struct Pump {
    hasher: Sha256,
    size: u64,
    limit: u64,
    /// What went wrong reading the source (told apart from the sink's
    /// errors).
    source_error: Option<std::io::Error>,
    buf: Vec<u8>,
}

impl Pump {
    /// Reads `source` to its end, writing every chunk to `sink` while the
    /// total stays within the limit. Whether all of it was written.
    fn run(
        &mut self,
        source: &mut dyn Read,
        mut sink: Option<&mut std::fs::File>,
    ) -> std::io::Result<bool> {
        let mut whole = sink.is_some();
        loop {
            let n = match source.read(&mut self.buf) {
                Ok(0) => return Ok(whole),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.source_error = Some(e);
                    return Err(std::io::Error::other("the source could not be read"));
                }
            };
            let chunk = self.buf.get(..n).unwrap_or_default();
            self.hasher.update(chunk);
            self.size = self.size.saturating_add(n as u64);
            if self.size > self.limit {
                whole = false;
                sink = None;
            }
            if let Some(file) = sink.as_deref_mut() {
                file.write_all(chunk)?;
            }
        }
    }

    fn finish(&mut self, kept: std::io::Result<bool>) -> Result<Stored, PutError> {
        if let Some(e) = self.source_error.take() {
            return Err(PutError::Source(e));
        }
        let kept = kept.map_err(PutError::Source)?;
        Ok(Stored {
            sha: hex::encode(self.hasher.clone().finalize()),
            size: self.size,
            kept,
        })
    }
}

/// Stores `bytes` (see [`put_from`], without a limit). Returns the digest.
#[cfg(test)]
pub(crate) fn put(objects: &PrivateDir, bytes: &[u8]) -> Result<String, StoreError> {
    let mut source = bytes;
    match put_from(objects, &mut source, bytes.len() as u64, u64::MAX) {
        Ok(stored) => Ok(stored.sha),
        Err(PutError::Store(e)) => Err(e),
        Err(PutError::Source(source)) => Err(StoreError::Io {
            path: objects.path().to_path_buf(),
            action: "cannot read",
            source,
        }),
    }
}

/// The fan-out folder of `sha`, created when missing.
fn fan_dir(objects: &PrivateDir, sha: &str) -> Result<PrivateDir, StoreError> {
    objects
        .subdir(fan_of(sha), true)
        .map_err(host(objects.file_path(fan_of(sha))))?
        .ok_or_else(|| StoreError::Io {
            path: objects.file_path(fan_of(sha)),
            action: "cannot create backup folder",
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        })
}

/// Whether blob `sha` is there, `size` bytes long and hashing to its name
/// (read through a fixed buffer). Anything unreadable is not intact.
fn is_intact(fan: &PrivateDir, sha: &str, size: u64) -> bool {
    let Ok(Some(stat)) = fan.lstat(sha) else {
        return false;
    };
    if stat.meta.size != size {
        return false;
    }
    match fan.open_read(sha) {
        Ok(Some(mut file)) => sha256_of_file(&mut file, Path::new(sha)).is_ok_and(|got| got == sha),
        _ => false,
    }
}

/// Whether blob `sha` is there and hashes to its name (streamed).
pub(crate) fn verify(objects: &PrivateDir, sha: &str) -> bool {
    match objects.subdir(fan_of(sha), false) {
        Ok(Some(fan)) => match fan.open_read(sha) {
            Ok(Some(mut file)) => {
                sha256_of_file(&mut file, Path::new(sha)).is_ok_and(|got| got == sha)
            }
            _ => false,
        },
        _ => false,
    }
}

/// SHA-256 (hex) of the rest of `file` (at `path`, for errors), read
/// through datum-host's buffer.
fn sha256_of_file(file: &mut std::fs::File, path: &Path) -> Result<String, HostError> {
    let mut hasher = Sha256::new();
    datum_host::fs::read_through(file, path, |chunk| hasher.update(chunk))?;
    Ok(hex::encode(hasher.finalize()))
}

/// The length of blob `sha` on disk (`lstat`), 0 when it cannot be read.
pub(crate) fn len(objects: &PrivateDir, sha: &str) -> u64 {
    match objects.subdir(fan_of(sha), false) {
        Ok(Some(fan)) => fan
            .lstat(sha)
            .ok()
            .flatten()
            .map_or(0, |stat| stat.meta.size),
        _ => 0,
    }
}

/// The bytes of blob `sha`.
pub(crate) fn read(objects: &PrivateDir, sha: &str) -> Result<Vec<u8>, StoreError> {
    let path = blob_path(objects, sha);
    let fan = objects
        .subdir(fan_of(sha), false)
        .map_err(host(path.clone()))?;
    match fan
        .map(|f| f.read(sha))
        .transpose()
        .map_err(host(path.clone()))?
    {
        Some(Some(bytes)) => Ok(bytes),
        _ => Err(StoreError::Io {
            path,
            action: "cannot read backup blob",
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        }),
    }
}

/// Removes a file from a fan-out folder; one that is already gone is not an
/// error.
pub(crate) fn remove(objects: &PrivateDir, fan: &str, name: &str) -> Result<bool, StoreError> {
    let path = objects.file_path(fan).join(name);
    match objects.subdir(fan, false).map_err(host(path.clone()))? {
        Some(dir) => dir.remove(name).map_err(host(path)),
        None => Ok(false),
    }
}

/// A file found under `objects/`.
pub(crate) struct Found {
    pub fan: String,
    pub name: String,
    pub modified: Option<SystemTime>,
    pub len: u64,
}

/// Every regular file one level below the fan-out folders (blobs and
/// temporaries). Names that are not UTF-8 are skipped: this store never
/// writes them.
pub(crate) fn walk(objects: &PrivateDir) -> Result<Vec<Found>, StoreError> {
    let mut found = Vec::new();
    let listed = objects.list().map_err(host(objects.path().to_path_buf()))?;
    for (fan, kind) in listed {
        let Some(fan) = fan.to_str().filter(|_| kind == FileKind::Directory) else {
            continue;
        };
        let Some(dir) = objects
            .subdir(fan, false)
            .map_err(host(objects.file_path(fan)))?
        else {
            continue;
        };
        for (name, kind) in dir.list().map_err(host(dir.path().to_path_buf()))? {
            let Some(name) = name.to_str().filter(|_| kind == FileKind::File) else {
                continue;
            };
            let Ok(Some(stat)) = dir.lstat(name) else {
                continue;
            };
            let modified = u64::try_from(stat.meta.mtime_ns)
                .ok()
                .map(|ns| UNIX_EPOCH + Duration::from_nanos(ns));
            found.push(Found {
                fan: fan.to_owned(),
                name: name.to_owned(),
                modified,
                len: stat.meta.size,
            });
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

    use super::*;

    fn objects(dir: &std::path::Path) -> PrivateDir {
        PrivateDir::open_path(&dir.join("objects"), true)
            .unwrap()
            .unwrap()
    }

    #[test]
    fn put_is_atomic_private_and_deduplicated() {
        let dir = tempfile::tempdir().unwrap();
        let objects = objects(dir.path());
        let sha = sha256_hex(b"hello");
        assert_eq!(put(&objects, b"hello").unwrap(), sha);
        let path = blob_path(&objects, &sha);
        let first = fs::metadata(&path).unwrap().ino();
        // Stored once: the intact blob is kept, not replaced.
        assert_eq!(put(&objects, b"hello").unwrap(), sha);
        assert_eq!(fs::metadata(&path).unwrap().ino(), first);
        assert_eq!(fs::read(&path).unwrap(), b"hello");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let fan = path.parent().unwrap();
        assert_eq!(
            fs::metadata(fan).unwrap().permissions().mode() & 0o777,
            0o700
        );
        // No temporary left behind.
        assert_eq!(fs::read_dir(fan).unwrap().count(), 1);
        assert_eq!(fs::read_dir(objects.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_source_over_the_limit_is_hashed_and_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let objects = objects(dir.path());
        let bytes = vec![7u8; 3 * BUFFER + 5];
        // Said to be over the limit up front, or found so while reading
        // (a file that grew): hashed whole, nothing stored either way.
        for len in [bytes.len() as u64, 10] {
            let stored = put_from(&objects, &mut bytes.as_slice(), len, 100).unwrap();
            assert_eq!(
                stored,
                Stored {
                    sha: sha256_hex(&bytes),
                    size: bytes.len() as u64,
                    kept: false
                }
            );
            assert_eq!(walk(&objects).unwrap().len(), 0);
            assert_eq!(fs::read_dir(objects.path()).unwrap().count(), 0);
        }
        // At the limit: kept.
        let stored = put_from(&objects, &mut bytes.as_slice(), 10, bytes.len() as u64).unwrap();
        assert!(stored.kept);
        assert_eq!(fs::read(blob_path(&objects, &stored.sha)).unwrap(), bytes);
    }

    #[test]
    fn a_source_that_cannot_be_read_leaves_nothing() {
        struct Failing(usize);
        impl Read for Failing {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                if self.0 == 0 {
                    return Err(std::io::Error::other("gone"));
                }
                self.0 -= 1;
                buf.fill(1);
                Ok(buf.len())
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let objects = objects(dir.path());
        let e = put_from(&objects, &mut Failing(2), 10, u64::MAX).unwrap_err();
        assert!(matches!(e, PutError::Source(_)), "{e:?}");
        assert_eq!(fs::read_dir(objects.path()).unwrap().count(), 0);
    }

    #[test]
    fn damaged_blob_is_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let objects = objects(dir.path());
        let sha = put(&objects, b"good").unwrap();
        fs::write(blob_path(&objects, &sha), b"rot!").unwrap();
        assert_eq!(put(&objects, b"good").unwrap(), sha);
        assert_eq!(fs::read(blob_path(&objects, &sha)).unwrap(), b"good");
    }

    #[test]
    fn a_planted_link_among_the_blobs_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let objects = objects(dir.path());
        let sha = sha256_hex(b"evidence");
        let victim = outside.path().join("victim");
        fs::write(&victim, b"precious").unwrap();
        fs::create_dir(objects.file_path(&sha[..2])).unwrap();
        std::os::unix::fs::symlink(&victim, blob_path(&objects, &sha)).unwrap();
        assert!(put(&objects, b"evidence").is_err());
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        // A fan-out folder that is a link is refused too.
        let other = sha256_hex(b"other");
        std::os::unix::fs::symlink(outside.path(), objects.file_path(&other[..2])).unwrap();
        assert!(put(&objects, b"other").is_err());
        assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 1);
    }

    #[test]
    fn blob_names_are_exactly_lowercase_sha256_hex() {
        assert!(is_blob_name(&sha256_hex(b"")));
        assert!(!is_blob_name(&sha256_hex(b"").to_uppercase()));
        assert!(!is_blob_name(".tmp-abc"));
        assert!(!is_blob_name("ab"));
        assert!(is_temp_name(".abc.tmp-1234"));
    }
}
