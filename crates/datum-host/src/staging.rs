//! Atomic replacement through a staged copy beside the target.
//!
//! A change to a file is written into a hidden directory next to the target,
//! `.datum.stage.<random>/<exact target name>`: on the target's own file
//! system, so the final rename is atomic, and under the target's own name,
//! because validators such as sshd or nginx care about names and suffixes.
//! Owner, group and mode are set on the staged copy, a validator may look at
//! it ([`StagedFile::path`]), and only [`StagedFile::commit`] makes it live.
//!
//! The guarantee: until `commit` renames, the live file is untouched, and
//! whatever fails (or is dropped) removes the staging directory. A pass that
//! was killed leaves a staging directory behind and never a partial target;
//! [`cleanup_stale`] removes such leftovers. This module must not decide
//! whether a change is wanted or valid: callers (the providers, the engine's
//! gate) do.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::{HostError, fs};

/// Name prefix of staging directories. Datum owns every entry with this
/// prefix: [`cleanup_stale`] removes them.
pub const STAGE_PREFIX: &str = ".datum.stage.";

/// A staging directory and the one entry inside it; removed on drop unless
/// its entry was renamed away.
#[derive(Debug)]
struct StageDir {
    dir: PathBuf,
    entry: PathBuf,
    target: PathBuf,
    finished: bool,
}

impl StageDir {
    fn create(target: &Path) -> Result<Self, HostError> {
        let (Some(parent), Some(name)) = (target.parent(), target.file_name()) else {
            return Err(HostError::io(
                "stage a change for",
                target,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the path has no file name",
                ),
            ));
        };
        fs::require_parent_dir(target)?;
        // A random suffix, so a leftover from a killed pass never collides
        // with the new one; retried in the (theoretical) case it does.
        let mut last_error = None;
        for _ in 0..8 {
            let mut dir_name = OsString::from(STAGE_PREFIX);
            dir_name.push(random_suffix());
            let dir = parent.join(dir_name);
            // 0700: the staged copy may hold secrets before its mode is set.
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {
                    return Ok(StageDir {
                        entry: dir.join(name),
                        dir,
                        target: target.to_path_buf(),
                        finished: false,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last_error = Some(e),
                Err(e) => return Err(HostError::io("create staging directory in", parent, e)),
            }
        }
        Err(HostError::io(
            "create staging directory in",
            parent,
            last_error.unwrap_or_else(|| std::io::Error::from(std::io::ErrorKind::AlreadyExists)),
        ))
    }

    /// Renames the entry over the target and makes the rename durable.
    fn commit(&mut self) -> Result<(), HostError> {
        fs::rename(&self.entry, &self.target)?;
        self.finished = true;
        let removed = std::fs::remove_dir(&self.dir);
        if let Some(parent) = self.target.parent() {
            fs::sync_dir(parent)?;
        }
        removed.map_err(|e| HostError::io("remove staging directory", &self.dir, e))
    }

    /// Removes the entry and the directory; the first error is reported.
    fn remove(&mut self) -> Result<(), HostError> {
        self.finished = true;
        let entry = match std::fs::remove_file(&self.entry) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(HostError::io("remove staged copy", &self.entry, e))
            }
            _ => Ok(()),
        };
        let dir = std::fs::remove_dir(&self.dir)
            .map_err(|e| HostError::io("remove staging directory", &self.dir, e));
        entry.and(dir)
    }
}

impl Drop for StageDir {
    fn drop(&mut self) {
        if !self.finished {
            // Best effort: a leftover is cleaned by the next pass.
            let _ = self.remove();
        }
    }
}

pub(crate) fn random_suffix() -> String {
    let mut bytes = [0u8; 8];
    match rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty()) {
        Ok(8) => hex::encode(bytes),
        // No randomness: pid and clock are unique enough for one directory.
        _ => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            format!("{:x}{:x}", std::process::id(), nanos)
        }
    }
}

/// A new version of a file, complete and private until committed.
#[derive(Debug)]
pub struct StagedFile {
    stage: StageDir,
    file: File,
    /// Nothing changed since the last fsync (so `commit` need not repeat it).
    synced: bool,
}

impl StagedFile {
    /// Creates the staging directory beside `target` and an empty file in it
    /// under the target's exact name. The target's parent must exist.
    pub fn create(target: &Path) -> Result<Self, HostError> {
        let stage = StageDir::create(target)?;
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&stage.entry)
            .map_err(|e| HostError::io("create staged copy", &stage.entry, e))?;
        Ok(StagedFile {
            stage,
            file,
            synced: false,
        })
    }

    /// Where the staged copy is: what a validator is pointed at.
    pub fn path(&self) -> &Path {
        &self.stage.entry
    }

    /// The live file this copy will replace.
    pub fn target(&self) -> &Path {
        &self.stage.target
    }

    pub fn write_all(&mut self, bytes: &[u8]) -> Result<(), HostError> {
        self.synced = false;
        self.file
            .write_all(bytes)
            .map_err(|e| HostError::io("write staged copy", &self.stage.entry, e))
    }

    /// Sets owner and group (either may be left as is). Call before
    /// [`StagedFile::set_mode`]: `chown` clears set-id bits.
    pub fn set_owner(&mut self, uid: Option<u32>, gid: Option<u32>) -> Result<(), HostError> {
        if uid.is_none() && gid.is_none() {
            return Ok(());
        }
        self.synced = false;
        std::os::unix::fs::fchown(&self.file, uid, gid)
            .map_err(|e| HostError::io("change the owner of", &self.stage.entry, e))
    }

    /// Sets the permission bits exactly (no umask).
    pub fn set_mode(&mut self, mode: u32) -> Result<(), HostError> {
        self.synced = false;
        self.file
            .set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))
            .map_err(|e| HostError::io("set the mode of", &self.stage.entry, e))
    }

    /// fsyncs the staged content and metadata.
    pub fn sync(&mut self) -> Result<(), HostError> {
        if self.synced {
            return Ok(());
        }
        self.file
            .sync_all()
            .map_err(|e| HostError::io("sync staged copy", &self.stage.entry, e))?;
        self.synced = true;
        Ok(())
    }

    /// Makes the staged copy live: fsync, rename over the target, fsync the
    /// target's directory, remove the staging directory. If the rename fails
    /// the target is untouched and the staging directory is removed.
    pub fn commit(mut self) -> Result<(), HostError> {
        self.sync()?;
        self.stage.commit()
    }

    /// Throws the staged copy away; the target is untouched.
    pub fn discard(mut self) -> Result<(), HostError> {
        self.stage.remove()
    }
}

/// A new symlink, staged under the link's exact name and renamed over the
/// path, so a link is replaced atomically (never removed then recreated).
#[derive(Debug)]
pub struct StagedSymlink {
    stage: StageDir,
}

impl StagedSymlink {
    /// Stages a symlink that will live at `link` and point at `points_to`.
    pub fn create(link: &Path, points_to: &Path) -> Result<Self, HostError> {
        let stage = StageDir::create(link)?;
        fs::symlink(points_to, &stage.entry)?;
        Ok(StagedSymlink { stage })
    }

    pub fn path(&self) -> &Path {
        &self.stage.entry
    }

    /// Sets the link's own owner (the link, not what it points at).
    pub fn set_owner(&mut self, uid: Option<u32>, gid: Option<u32>) -> Result<(), HostError> {
        if uid.is_none() && gid.is_none() {
            return Ok(());
        }
        fs::lchown(&self.stage.entry, uid, gid)
    }

    /// Renames the link over its path and removes the staging directory.
    pub fn commit(mut self) -> Result<(), HostError> {
        self.stage.commit()
    }

    pub fn discard(mut self) -> Result<(), HostError> {
        self.stage.remove()
    }
}

/// Removes staging directories a killed pass left in `dir`; returns how many.
/// A missing `dir` has none. Only directories with [`STAGE_PREFIX`] are
/// touched, and links are never followed.
pub fn cleanup_stale(dir: &Path) -> Result<usize, HostError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(0);
        }
        Err(e) => return Err(HostError::io("list", dir, e)),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry.map_err(|e| HostError::io("list", dir, e))?;
        let name = entry.file_name();
        if !name.as_encoded_bytes().starts_with(STAGE_PREFIX.as_bytes()) {
            continue;
        }
        let path = entry.path();
        // file_type() does not follow links: a link with our prefix is left.
        let is_dir = entry
            .file_type()
            .map_err(|e| HostError::io("inspect", &path, e))?
            .is_dir();
        if is_dir {
            std::fs::remove_dir_all(&path)
                .map_err(|e| HostError::io("remove stale staging directory", &path, e))?;
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staging_dirs(dir: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(STAGE_PREFIX)
            })
            .collect()
    }

    #[test]
    fn staged_copy_keeps_the_exact_name_beside_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("sshd_config");
        let staged = StagedFile::create(&target).unwrap();
        assert_eq!(staged.path().file_name().unwrap(), "sshd_config");
        let stage_dir = staged.path().parent().unwrap();
        assert_eq!(stage_dir.parent().unwrap(), dir.path());
        assert!(
            stage_dir
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(STAGE_PREFIX)
        );
        staged.discard().unwrap();
        assert!(staging_dirs(dir.path()).is_empty());
    }

    #[test]
    fn commit_replaces_the_target_with_the_staged_content_and_mode() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("motd");
        std::fs::write(&target, b"old\n").unwrap();
        let mut staged = StagedFile::create(&target).unwrap();
        staged.write_all(b"new\n").unwrap();
        staged.set_mode(0o640).unwrap();
        assert_eq!(
            std::fs::read(&target).unwrap(),
            b"old\n",
            "live until commit"
        );
        staged.commit().unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new\n");
        let mode = crate::fs::lstat(&target).unwrap().unwrap().meta.mode;
        assert_eq!(mode, 0o640);
        assert!(staging_dirs(dir.path()).is_empty());
    }

    #[test]
    fn dropping_without_commit_leaves_the_target_and_no_staging() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("motd");
        std::fs::write(&target, b"old\n").unwrap();
        let before = crate::fs::lstat(&target).unwrap().unwrap().meta;
        {
            let mut staged = StagedFile::create(&target).unwrap();
            staged.write_all(b"half").unwrap();
        }
        assert_eq!(std::fs::read(&target).unwrap(), b"old\n");
        assert_eq!(crate::fs::lstat(&target).unwrap().unwrap().meta, before);
        assert!(staging_dirs(dir.path()).is_empty());
    }

    #[test]
    fn a_failed_rename_leaves_the_target_and_removes_staging() {
        let dir = tempfile::tempdir().unwrap();
        // A non-empty directory at the target: rename of a file over it fails.
        let target = dir.path().join("conf");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("inside"), b"x").unwrap();
        let mut staged = StagedFile::create(&target).unwrap();
        staged.write_all(b"new").unwrap();
        let err = staged.commit().unwrap_err();
        assert_eq!(err.path(), Some(target.as_path()));
        assert!(target.join("inside").exists());
        assert!(staging_dirs(dir.path()).is_empty());
    }

    #[test]
    fn staged_symlinks_replace_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("current");
        std::os::unix::fs::symlink("v1", &link).unwrap();
        StagedSymlink::create(&link, Path::new("v2"))
            .unwrap()
            .commit()
            .unwrap();
        assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("v2"));
        assert!(staging_dirs(dir.path()).is_empty());
    }

    #[test]
    fn stale_staging_is_cleaned_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let stale = dir.path().join(".datum.stage.dead");
        std::fs::create_dir(&stale).unwrap();
        std::fs::write(stale.join("sshd_config"), b"partial").unwrap();
        let keep_file = dir.path().join(".datum.stage.file");
        std::fs::write(&keep_file, b"not ours").unwrap();
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("precious"), b"x").unwrap();
        let link = dir.path().join(".datum.stage.link");
        std::os::unix::fs::symlink(outside.path(), &link).unwrap();

        assert_eq!(cleanup_stale(dir.path()).unwrap(), 1);
        assert!(!stale.exists());
        assert!(keep_file.exists() && other.exists());
        assert!(
            outside.path().join("precious").exists(),
            "links never followed"
        );
        assert_eq!(cleanup_stale(&dir.path().join("missing")).unwrap(), 0);
    }
}
