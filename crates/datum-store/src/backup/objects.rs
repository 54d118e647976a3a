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

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

/// Stores `bytes` under `sha` unless an intact copy is already there. Returns
/// whether a new blob was written. An existing blob whose bytes no longer
/// match its name (bit rot, tampering) is replaced by the good copy.
pub(crate) fn put(objects: &PrivateDir, sha: &str, bytes: &[u8]) -> Result<bool, StoreError> {
    let target = blob_path(objects, sha);
    let fan = objects
        .subdir(fan_of(sha), true)
        .map_err(host(objects.file_path(fan_of(sha))))?
        .ok_or_else(|| StoreError::Io {
            path: objects.file_path(fan_of(sha)),
            action: "cannot create backup folder",
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        })?;
    if let Ok(Some(existing)) = fan.read(sha)
        && sha256_hex(&existing) == sha
    {
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
        return Ok(false);
    }
    fan.write_atomic(sha, bytes).map_err(host(target))?;
    Ok(true)
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
    use std::os::unix::fs::PermissionsExt as _;

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
        assert!(put(&objects, &sha, b"hello").unwrap());
        assert!(!put(&objects, &sha, b"hello").unwrap());
        let path = blob_path(&objects, &sha);
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
    }

    #[test]
    fn damaged_blob_is_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let objects = objects(dir.path());
        let sha = sha256_hex(b"good");
        put(&objects, &sha, b"good").unwrap();
        fs::write(blob_path(&objects, &sha), b"rot!").unwrap();
        assert!(put(&objects, &sha, b"good").unwrap());
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
        assert!(put(&objects, &sha, b"evidence").is_err());
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        // A fan-out folder that is a link is refused too.
        let other = sha256_hex(b"other");
        std::os::unix::fs::symlink(outside.path(), objects.file_path(&other[..2])).unwrap();
        assert!(put(&objects, &other, b"other").is_err());
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
