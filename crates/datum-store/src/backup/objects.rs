//! Content-addressed blobs: `objects/<sha256[..2]>/<sha256>`, mode 0600, in
//! folders of mode 0700.
//!
//! A blob is written to a temporary file in its final folder, fsynced, renamed
//! into place and the folder fsynced, so a blob that exists under its name is
//! always complete. Equal content is stored once. This module knows nothing of
//! the index: the caller decides which blobs are still referenced.

use std::fs;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::db::create_private_dir;
use crate::error::StoreError;

/// Prefix of in-progress blob files; anything with it is debris of a killed
/// save once it is old enough.
pub(crate) const TEMP_PREFIX: &str = ".tmp-";

pub(crate) use datum_core::sha256_hex;

/// Whether `name` is a blob name this store writes (64 lowercase hex digits).
pub(crate) fn is_blob_name(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

pub(crate) fn blob_path(objects: &Path, sha: &str) -> PathBuf {
    let fan = sha.get(..2).unwrap_or("00");
    objects.join(fan).join(sha)
}

fn io(path: &Path, action: &'static str) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.to_owned();
    move |source| StoreError::Io {
        path,
        action,
        source,
    }
}

/// Stores `bytes` under `sha` unless an intact copy is already there. Returns
/// whether a new blob was written. An existing blob whose bytes no longer
/// match its name (bit rot, tampering) is replaced by the good copy.
pub(crate) fn put(objects: &Path, sha: &str, bytes: &[u8]) -> Result<bool, StoreError> {
    let target = blob_path(objects, sha);
    if let Ok(existing) = read(&target)
        && sha256_hex(&existing) == sha
    {
        // Refresh the time so an orphan sweep running with a grace period
        // never takes a blob that a save has just decided to reuse.
        let touched = fs::File::options()
            .write(true)
            .open(&target)
            .and_then(|f| f.set_modified(SystemTime::now()));
        touched.map_err(io(&target, "cannot refresh backup blob"))?;
        return Ok(false);
    }
    let folder = target.parent().unwrap_or(objects);
    create_private_dir(folder)?;
    // tempfile creates the file with mode 0600 and a random name, with
    // O_EXCL, in the blob's final folder so the rename stays on one file
    // system and is atomic.
    let mut tmp = tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
        .tempfile_in(folder)
        .map_err(io(folder, "cannot create backup blob"))?;
    tmp.write_all(bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(io(tmp.path(), "cannot write backup blob"))?;
    tmp.persist(&target).map_err(|e| StoreError::Io {
        path: target.clone(),
        action: "cannot move backup blob into place",
        source: e.error,
    })?;
    sync_dir(folder)?;
    Ok(true)
}

pub(crate) fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut file = fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Removes a blob; one that is already gone is not an error.
pub(crate) fn remove(path: &Path) -> Result<bool, StoreError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(StoreError::Io {
            path: path.to_owned(),
            action: "cannot remove backup blob",
            source,
        }),
    }
}

/// A file found under `objects/`.
pub(crate) struct Found {
    pub path: PathBuf,
    pub name: String,
    pub modified: Option<SystemTime>,
    pub len: u64,
}

/// Every file one level below the fan-out folders (blobs and temporaries).
/// Names that are not UTF-8 are skipped: this store never writes them.
pub(crate) fn walk(objects: &Path) -> Result<Vec<Found>, StoreError> {
    let mut found = Vec::new();
    let fans = match fs::read_dir(objects) {
        Ok(fans) => fans,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(source) => {
            return Err(StoreError::Io {
                path: objects.to_owned(),
                action: "cannot list backup blobs",
                source,
            });
        }
    };
    for fan in fans {
        let fan = fan.map_err(io(objects, "cannot list backup blobs"))?;
        if !fan.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let fan_path = fan.path();
        let entries = fs::read_dir(&fan_path).map_err(io(&fan_path, "cannot list backup blobs"))?;
        for entry in entries {
            let entry = entry.map_err(io(&fan_path, "cannot list backup blobs"))?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            found.push(Found {
                path: entry.path(),
                name,
                modified: meta.modified().ok(),
                len: meta.len(),
            });
        }
    }
    Ok(found)
}

/// Makes a rename in `dir` durable.
fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir, "cannot sync backup folder"))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn put_is_atomic_private_and_deduplicated() {
        let dir = tempfile::tempdir().unwrap();
        let objects = dir.path().join("objects");
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
        let objects = dir.path().join("objects");
        let sha = sha256_hex(b"good");
        put(&objects, &sha, b"good").unwrap();
        fs::write(blob_path(&objects, &sha), b"rot!").unwrap();
        assert!(put(&objects, &sha, b"good").unwrap());
        assert_eq!(fs::read(blob_path(&objects, &sha)).unwrap(), b"good");
    }

    #[test]
    fn blob_names_are_exactly_lowercase_sha256_hex() {
        assert!(is_blob_name(&sha256_hex(b"")));
        assert!(!is_blob_name(&sha256_hex(b"").to_uppercase()));
        assert!(!is_blob_name(".tmp-abc"));
        assert!(!is_blob_name("ab"));
    }
}
