//! Datum's own files that live outside any managed root: the fleet
//! server's folder (its configuration, keys, certificates) and the
//! credentials files `datum server enroll` writes for an operator to copy
//! to a host.
//!
//! Every file is written whole through the staging used for managed files
//! ([`crate::staging`]: a private copy beside it, fsynced, renamed into
//! place), so a reader never sees half a key, and with the mode asked for
//! from the first byte. [`write_new`] refuses to replace an existing file
//! (nothing of an existing server is overwritten by a second `init`).
//!
//! Owns: [`write_new`], [`write()`], [`private_dir`]. Must not: be used for a
//! managed path (those go through a provider and the engine's rules).

use std::path::Path;

use crate::error::HostError;
use crate::fs;
use crate::staging::StagedFile;

/// Writes `bytes` to `path` with `mode`, atomically, replacing what is there.
pub fn write(path: &Path, bytes: &[u8], mode: u32) -> Result<(), HostError> {
    let mut staged = StagedFile::create(path)?;
    staged.write_all(bytes)?;
    staged.set_mode(mode)?;
    staged.commit()
}

/// [`write()`], refusing when something already exists at `path`.
pub fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), HostError> {
    if let Some(found) = fs::lstat(path)? {
        return Err(HostError::InTheWay {
            path: path.to_owned(),
            found: found.kind.word().to_owned(),
        });
    }
    write(path, bytes, mode)
}

/// Creates `dir` (mode 0700) unless it is a directory already; its parent
/// must exist.
pub fn private_dir(dir: &Path) -> Result<(), HostError> {
    match fs::lstat(dir)? {
        Some(stat) if stat.kind == fs::FileKind::Directory => Ok(()),
        Some(stat) => Err(HostError::InTheWay {
            path: dir.to_owned(),
            found: stat.kind.word().to_owned(),
        }),
        None => fs::create_dir(dir, 0o700),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn writes_private_files_and_never_replaces_with_write_new() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("srv");
        private_dir(&folder).unwrap();
        private_dir(&folder).unwrap();
        let key = folder.join("server.key");
        write_new(&key, b"secret", 0o600).unwrap();
        let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let err = write_new(&key, b"other", 0o600).unwrap_err();
        assert!(err.to_string().contains("server.key"), "{err}");
        assert_eq!(std::fs::read(&key).unwrap(), b"secret");
        write(&key, b"new", 0o640).unwrap();
        assert_eq!(std::fs::read(&key).unwrap(), b"new");
        // Only the file: no staging folder left behind.
        assert_eq!(std::fs::read_dir(&folder).unwrap().count(), 1);
    }
}
