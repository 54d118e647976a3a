//! Atomic replacement through a staged copy beside the target.
//!
//! A change to a file is written into a hidden directory next to the target,
//! `.datum.stage.<random>/<exact target name>`: on the target's own file
//! system, so the final rename is atomic, and under the target's own name,
//! because validators such as sshd or nginx care about names and suffixes.
//! Owner, group and mode are set on the staged copy, a validator may look at
//! it ([`StagedFile::path`]), and only [`StagedFile::commit`] makes it live.
//!
//! Everything is relative to the target's parent directory, opened once by
//! the boundary walk ([`crate::Located`]): the staging directory is created
//! with `mkdirat` inside it, the copy with `openat(O_CREAT | O_EXCL |
//! O_NOFOLLOW)` inside that, owner and mode are set on the open file, and the
//! commit is a `renameat` between the two handles. A parent swapped for a
//! link after it was opened cannot redirect the write: the handle still
//! names the directory that was walked into.
//!
//! Durability: the staged content is fsynced before the rename (always: a
//! rename may reach the disk with any later journal commit, so it must never
//! name content that is not there yet), and the parent directory is fsynced
//! after it, either at once ([`StagedFile::commit`]) or once per directory
//! for a whole batch of renames ([`StagedFile::commit_deferred`] and
//! [`crate::durability`], which says why that keeps every guarantee).
//!
//! The guarantee: until `commit` renames, the live file is untouched, and
//! whatever fails (or is dropped) removes the staging directory: only while
//! the entry at its name is the directory this module made (device and
//! inode), since the owner of a folder such as `~/.ssh` may move it away or
//! put their own at its name; that is left alone, and is no error (after
//! the rename the change is live). A pass that
//! was killed leaves a staging directory behind and never a partial target;
//! [`cleanup_stale`] removes such leftovers. This module must not decide
//! whether a change is wanted or valid: callers (the providers, the engine's
//! gate) do.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

use crate::boundary::{Dir, errno, remove_if_ours};
use crate::durability::Durability;
use crate::fs::FileKind;
use crate::{HostError, Located};

/// Name prefix of staging directories. Datum owns every entry with this
/// prefix: [`cleanup_stale`] removes them.
pub const STAGE_PREFIX: &str = ".datum.stage.";

/// A staging directory and the one entry inside it; removed on drop unless
/// its entry was renamed away.
#[derive(Debug)]
struct StageDir {
    /// The target's parent, as walked.
    parent: Dir,
    /// The staging directory's name inside `parent`, and its descriptor.
    dir_name: OsString,
    dir: OwnedFd,
    /// The target's name (the entry keeps it).
    name: OsString,
    /// Real paths, for messages and validators.
    entry_path: PathBuf,
    target: PathBuf,
    finished: bool,
}

impl StageDir {
    fn create(target: &Located) -> Result<Self, HostError> {
        let parent = target.parent().clone();
        // A random suffix, so a leftover from a killed pass never collides
        // with the new one; retried in the (theoretical) case it does.
        let mut last_error = Errno::EXIST;
        for _ in 0..8 {
            let mut dir_name = OsString::from(STAGE_PREFIX);
            dir_name.push(crate::random_suffix());
            // 0700: the staged copy may hold secrets before its mode is set.
            match rustix::fs::mkdirat(parent.fd(), &dir_name, Mode::from_raw_mode(0o700)) {
                Ok(()) => {}
                Err(Errno::EXIST) => continue,
                Err(e) => {
                    last_error = e;
                    break;
                }
            }
            // Opened by its name, so it must be the folder just made: the
            // owner of the parent (alice, of her `~/.ssh`) may swap it for
            // one of hers in between, into which the copy would be written
            // and from which it would be renamed.
            let stage_path = parent.path().join(&dir_name);
            let dir = crate::boundary::open_made_dir(parent.fd(), &dir_name, &stage_path)?;
            return Ok(StageDir {
                entry_path: stage_path.join(target.name()),
                target: target.path().to_path_buf(),
                name: target.name().to_owned(),
                parent,
                dir_name,
                dir,
                finished: false,
            });
        }
        Err(HostError::io(
            "create staging directory in",
            parent.path(),
            errno(last_error),
        ))
    }

    /// Renames the entry over the target and makes the rename durable: now
    /// (`durability` `None`: the parent is fsynced) or at the next
    /// [`Durability::flush`] (the parent is remembered there).
    fn commit(&mut self, durability: Option<&Durability>) -> Result<(), HostError> {
        rustix::fs::renameat(&self.dir, &self.name, self.parent.fd(), &self.name)
            .map_err(|e| HostError::io("rename into", &self.target, errno(e)))?;
        self.finished = true;
        let removed = self.remove_dir();
        match durability {
            Some(durability) => durability.defer(&self.parent),
            None => self.parent.sync()?,
        }
        removed
    }

    /// Removes the (emptied) staging directory from the parent if it is
    /// still there under its name. The parent may be a local user's
    /// (`~/.ssh`), who can move it away or put a folder of their own at its
    /// name: that is no error (after a commit the change is live), and
    /// nothing but the directory this `StageDir` made is removed
    /// ([`remove_if_ours`]); one moved elsewhere stays there, empty. A
    /// folder of theirs put at the name between the look and the `rmdir`
    /// is not empty (or the `rmdir` would take it, as the sweep of
    /// leftovers would): that is no error either, since this one is empty
    /// by then (its entry renamed away, or removed, or that failure is
    /// the one reported).
    fn remove_dir(&self) -> Result<(), HostError> {
        match remove_if_ours(
            self.parent.fd(),
            &self.dir_name,
            &self.dir,
            AtFlags::REMOVEDIR,
        ) {
            Err(Errno::NOTEMPTY | Errno::EXIST) | Ok(false) => {
                self.note_left_behind();
                Ok(())
            }
            Ok(true) => Ok(()),
            Err(e) => Err(e),
        }
        .map_err(|e| {
            HostError::io(
                "remove staging directory",
                self.parent.path().join(&self.dir_name),
                errno(e),
            )
        })
    }

    /// The staging folder was not at its name to be removed: whoever can
    /// write to the parent moved it. Left where it is now (nothing but
    /// Datum's own name is ever removed), which the pass says, naming the
    /// place, unless it is gone already (they removed it).
    fn note_left_behind(&self) {
        let Ok(st) = rustix::fs::fstat(&self.dir) else {
            return;
        };
        if st.st_nlink == 0 {
            return;
        }
        let fd = format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&self.dir)
        );
        let now = match std::fs::read_link(&fd) {
            Ok(now) => format!("it is now at {}", now.display()),
            Err(_) => "where it is now is unknown".to_owned(),
        };
        self.parent.notices().push(format!(
            "the staging folder {} that Datum made for {} was moved away by whoever can write to {} ({now}); Datum left it there (it removes nothing but its own name): remove it if it is not wanted",
            self.dir_name.to_string_lossy(),
            self.target.display(),
            self.parent.path().display(),
        ));
    }

    /// Removes the entry and the directory; the first error is reported.
    fn remove(&mut self) -> Result<(), HostError> {
        self.finished = true;
        let entry = match rustix::fs::unlinkat(&self.dir, &self.name, AtFlags::empty()) {
            Err(e) if e != Errno::NOENT => Err(HostError::io(
                "remove staged copy",
                &self.entry_path,
                errno(e),
            )),
            _ => Ok(()),
        };
        let dir = self.remove_dir();
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

/// A new version of a file, complete and private until committed.
#[derive(Debug)]
pub struct StagedFile {
    stage: StageDir,
    file: File,
    /// Nothing changed since the last fsync (so `commit` need not repeat it).
    synced: bool,
}

impl StagedFile {
    /// Creates the staging directory inside the target's open parent and an
    /// empty file in it under the target's exact name.
    pub fn create(target: &Located) -> Result<Self, HostError> {
        let stage = StageDir::create(target)?;
        let fd = rustix::fs::openat(
            &stage.dir,
            &stage.name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| HostError::io("create staged copy", &stage.entry_path, errno(e)))?;
        Ok(StagedFile {
            stage,
            file: File::from(fd),
            synced: false,
        })
    }

    /// Where the staged copy is: what a validator is pointed at.
    pub fn path(&self) -> &Path {
        &self.stage.entry_path
    }

    /// The live file this copy will replace.
    pub fn target(&self) -> &Path {
        &self.stage.target
    }

    pub fn write_all(&mut self, bytes: &[u8]) -> Result<(), HostError> {
        self.synced = false;
        self.file
            .write_all(bytes)
            .map_err(|e| HostError::io("write staged copy", &self.stage.entry_path, e))
    }

    /// Sets owner and group (either may be left as is). Call before
    /// [`StagedFile::set_mode`]: `chown` clears set-id bits.
    pub fn set_owner(&mut self, uid: Option<u32>, gid: Option<u32>) -> Result<(), HostError> {
        if uid.is_none() && gid.is_none() {
            return Ok(());
        }
        self.synced = false;
        rustix::fs::fchown(
            self.file.as_fd(),
            uid.map(rustix::fs::Uid::from_raw),
            gid.map(rustix::fs::Gid::from_raw),
        )
        .map_err(|e| HostError::io("change the owner of", &self.stage.entry_path, errno(e)))
    }

    /// Sets the permission bits exactly (no umask).
    pub fn set_mode(&mut self, mode: u32) -> Result<(), HostError> {
        self.synced = false;
        rustix::fs::fchmod(self.file.as_fd(), Mode::from_raw_mode(mode & 0o7777))
            .map_err(|e| HostError::io("set the mode of", &self.stage.entry_path, errno(e)))
    }

    /// fsyncs the staged content and metadata.
    pub fn sync(&mut self) -> Result<(), HostError> {
        if self.synced {
            return Ok(());
        }
        self.file
            .sync_all()
            .map_err(|e| HostError::io("sync staged copy", &self.stage.entry_path, e))?;
        self.synced = true;
        Ok(())
    }

    /// Makes the staged copy live: fsync, rename over the target (relative
    /// to the parent's handle), fsync the parent, remove the staging
    /// directory. If the rename fails the target is untouched and the
    /// staging directory is removed.
    pub fn commit(mut self) -> Result<(), HostError> {
        self.sync()?;
        self.stage.commit(None)
    }

    /// [`StagedFile::commit`], with the parent's fsync owed to `durability`
    /// (see [`crate::durability`]): the content is fsynced before the
    /// rename, as always, and the rename is durable after the next
    /// [`Durability::flush`].
    pub fn commit_deferred(mut self, durability: &Durability) -> Result<(), HostError> {
        self.sync()?;
        self.stage.commit(Some(durability))
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
    pub fn create(link: &Located, points_to: &Path) -> Result<Self, HostError> {
        let stage = StageDir::create(link)?;
        rustix::fs::symlinkat(points_to, &stage.dir, &stage.name)
            .map_err(|e| HostError::io("create symlink", &stage.entry_path, errno(e)))?;
        Ok(StagedSymlink { stage })
    }

    pub fn path(&self) -> &Path {
        &self.stage.entry_path
    }

    /// Sets the link's own owner (the link, not what it points at).
    pub fn set_owner(&mut self, uid: Option<u32>, gid: Option<u32>) -> Result<(), HostError> {
        if uid.is_none() && gid.is_none() {
            return Ok(());
        }
        rustix::fs::chownat(
            &self.stage.dir,
            &self.stage.name,
            uid.map(rustix::fs::Uid::from_raw),
            gid.map(rustix::fs::Gid::from_raw),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(|e| HostError::io("change the owner of", &self.stage.entry_path, errno(e)))
    }

    /// Renames the link over its path and removes the staging directory.
    pub fn commit(mut self) -> Result<(), HostError> {
        self.stage.commit(None)
    }

    /// [`StagedSymlink::commit`], with the parent's fsync owed to
    /// `durability` (see [`crate::durability`]).
    pub fn commit_deferred(mut self, durability: &Durability) -> Result<(), HostError> {
        self.stage.commit(Some(durability))
    }

    pub fn discard(mut self) -> Result<(), HostError> {
        self.stage.remove()
    }
}

fn is_stage_name(name: &OsStr) -> bool {
    name.as_encoded_bytes().starts_with(STAGE_PREFIX.as_bytes())
}

/// Removes staging directories a killed pass left in `dir`; returns how many.
/// Only directories with [`STAGE_PREFIX`] are touched, everything relative
/// to handles, and links are never followed.
pub fn cleanup_stale(dir: &Dir) -> Result<usize, HostError> {
    let mut removed = 0;
    for (name, kind) in dir.list()? {
        if kind == FileKind::Directory && is_stage_name(&name) {
            dir.entry(&name).remove_all().map_err(|e| match e {
                HostError::Io { path, source, .. } => HostError::Io {
                    path,
                    op: "remove stale staging directory",
                    source,
                },
                other => other,
            })?;
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Host;

    fn staging_dirs(dir: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| is_stage_name(p.file_name().unwrap()))
            .collect()
    }

    fn at(host: &Host, declared: &str) -> Located {
        host.locate(Path::new(declared)).unwrap()
    }

    #[test]
    fn staged_copy_keeps_the_exact_name_beside_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new(dir.path());
        let staged = at(&host, "/sshd_config").stage_file().unwrap();
        assert_eq!(staged.path().file_name().unwrap(), "sshd_config");
        let stage_dir = staged.path().parent().unwrap();
        assert_eq!(stage_dir.parent().unwrap(), dir.path());
        assert!(is_stage_name(stage_dir.file_name().unwrap()));
        staged.discard().unwrap();
        assert!(staging_dirs(dir.path()).is_empty());
    }

    #[test]
    fn commit_replaces_the_target_with_the_staged_content_and_mode() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new(dir.path());
        let target = dir.path().join("motd");
        std::fs::write(&target, b"old\n").unwrap();
        let mut staged = at(&host, "/motd").stage_file().unwrap();
        staged.write_all(b"new\n").unwrap();
        staged.set_mode(0o640).unwrap();
        assert_eq!(
            std::fs::read(&target).unwrap(),
            b"old\n",
            "live until commit"
        );
        staged.commit().unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new\n");
        let mode = at(&host, "/motd").lstat().unwrap().unwrap().meta.mode;
        assert_eq!(mode, 0o640);
        assert!(staging_dirs(dir.path()).is_empty());
    }

    #[test]
    fn dropping_without_commit_leaves_the_target_and_no_staging() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new(dir.path());
        let target = dir.path().join("motd");
        std::fs::write(&target, b"old\n").unwrap();
        let before = at(&host, "/motd").lstat().unwrap().unwrap().meta;
        {
            let mut staged = at(&host, "/motd").stage_file().unwrap();
            staged.write_all(b"half").unwrap();
        }
        assert_eq!(std::fs::read(&target).unwrap(), b"old\n");
        assert_eq!(at(&host, "/motd").lstat().unwrap().unwrap().meta, before);
        assert!(staging_dirs(dir.path()).is_empty());
    }

    #[test]
    fn a_failed_rename_leaves_the_target_and_removes_staging() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new(dir.path());
        // A non-empty directory at the target: rename of a file over it fails.
        let target = dir.path().join("conf");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("inside"), b"x").unwrap();
        let mut staged = at(&host, "/conf").stage_file().unwrap();
        staged.write_all(b"new").unwrap();
        let err = staged.commit().unwrap_err();
        assert_eq!(err.path(), Some(target.as_path()));
        assert!(target.join("inside").exists());
        assert!(staging_dirs(dir.path()).is_empty());
    }

    #[test]
    fn a_parent_swapped_for_a_link_after_staging_cannot_redirect_the_commit() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("d")).unwrap();
        let host = Host::new(root.path());
        let mut staged = at(&host, "/d/f").stage_file().unwrap();
        staged.write_all(b"declared").unwrap();
        // The directory moves away and a link to the outside takes its name.
        std::fs::rename(root.path().join("d"), root.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("d")).unwrap();
        staged.commit().unwrap();
        assert_eq!(
            std::fs::read(root.path().join("moved/f")).unwrap(),
            b"declared"
        );
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_staging_folder_moved_away_or_replaced_is_never_removed_by_its_name() {
        // The owner of the target's folder (alice, of her ~/.ssh) may move
        // the staging folder away and put her own at its name at any time;
        // the rename goes through the staging folder's handle, so doing it
        // before the commit is doing it between the rename and the removal.
        for (commit, replace) in [(true, false), (true, true), (false, false), (false, true)] {
            let case = format!("commit {commit}, replaced {replace}");
            let dir = tempfile::tempdir().unwrap();
            let host = Host::new(dir.path());
            let target = dir.path().join("authorized_keys");
            std::fs::write(&target, b"old\n").unwrap();
            let mut staged = at(&host, "/authorized_keys").stage_file().unwrap();
            staged.write_all(b"new\n").unwrap();
            let stage = staged.path().parent().unwrap().to_path_buf();
            let moved = dir.path().join("moved");
            std::fs::rename(&stage, &moved).unwrap();
            if replace {
                std::fs::create_dir(&stage).unwrap();
            }
            if commit {
                staged.commit().unwrap_or_else(|e| {
                    panic!("{case}: the change went live, yet the commit failed: {e}")
                });
                assert_eq!(std::fs::read(&target).unwrap(), b"new\n", "{case}");
            } else {
                staged
                    .discard()
                    .unwrap_or_else(|e| panic!("{case}: the discard failed: {e}"));
                assert_eq!(std::fs::read(&target).unwrap(), b"old\n", "{case}");
            }
            assert_eq!(
                stage.exists(),
                replace,
                "{case}: the folder put at the staging name was removed"
            );
            // Datum's own, emptied, stays where it was moved, and the pass
            // says so, naming where.
            assert_eq!(std::fs::read_dir(&moved).unwrap().count(), 0, "{case}");
            let notices = host.take_notices();
            assert_eq!(notices.len(), 1, "{case}: {notices:?}");
            assert!(
                notices[0].contains(&format!("it is now at {}", moved.display()))
                    && notices[0].contains("authorized_keys"),
                "{case}: {notices:?}"
            );
        }
        // Removed by whoever moved it: nothing to say.
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new(dir.path());
        let staged = at(&host, "/f").stage_file().unwrap();
        std::fs::remove_file(staged.path()).unwrap();
        std::fs::remove_dir(staged.path().parent().unwrap()).unwrap();
        staged.discard().unwrap();
        assert_eq!(host.take_notices(), Vec::<String>::new());
    }

    /// The owner of the target's folder may swap the staging folder for
    /// one of theirs between its `mkdirat` and its open (here with
    /// `RENAME_EXCHANGE` from another thread, as soon as a listing shows
    /// it): the copy is never written into theirs, nor renamed from it.
    /// Swapped later, between the look at the name and the `rmdir` that
    /// removes the emptied folder, theirs is not empty: no failure either.
    #[test]
    fn a_staging_folder_swapped_for_a_users_is_never_used() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let host = Host::new(&root);
        let theirs = crate::race::users_folder(&root);
        std::fs::write(root.join("authorized_keys"), b"old\n").unwrap();
        let long_ago = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        let set_old = |path: &Path| {
            std::fs::File::open(path)
                .unwrap()
                .set_modified(long_ago)
                .unwrap()
        };
        set_old(&theirs);
        let mut race = {
            let root = root.clone();
            crate::race::Race::start(move |armed| {
                let Ok(listing) = std::fs::read_dir(&root) else {
                    return false;
                };
                listing.flatten().any(|entry| {
                    let name = entry.file_name();
                    armed()
                        && is_stage_name(&name)
                        && rustix::fs::renameat_with(
                            rustix::fs::CWD,
                            root.join(&name),
                            rustix::fs::CWD,
                            root.join("theirs"),
                            rustix::fs::RenameFlags::EXCHANGE,
                        )
                        .is_ok()
                })
            })
        };
        let (mut written, mut refused) = (0, 0);
        let mut others = Vec::new();
        while race.goes_on() {
            // Every fourth a commit (its fsyncs are slow), else a discard:
            // both remove the staging folder by its name at the end.
            let commit = race.tries() % 4 == 0;
            let outcome = race.armed(|| {
                at(&host, "/authorized_keys")
                    .stage_file()
                    .and_then(|mut staged| {
                        staged.write_all(b"new\n")?;
                        if commit {
                            staged.commit()
                        } else {
                            staged.discard()
                        }
                    })
            });
            if let Err(e) = outcome {
                let e = e.to_string();
                if e.contains("refusing to use") && e.contains("owned by uid 1000") {
                    refused += 1;
                } else {
                    others.push(e);
                }
            }
            // The user's folder is the one holding the marker: it never
            // held the staged copy (it would still, or the commit renamed
            // the copy from it: then the user's folder was used).
            let user = std::fs::read_dir(&root)
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .find(|p| p.join("marker").exists())
                .unwrap();
            let inside = std::fs::read_dir(&user).unwrap().count();
            // Nothing was ever added to it, nor taken from it (the commit's
            // rename): its modification time is still the one set before.
            let touched = std::fs::metadata(&user).unwrap().modified().unwrap() != long_ago;
            if inside != 1 || touched {
                written += 1;
            }
            // Put everything back: the user's folder at `theirs` as it was,
            // Datum's leftovers gone.
            for entry in std::fs::read_dir(&root).unwrap().flatten() {
                let path = entry.path();
                if path != user && is_stage_name(&entry.file_name()) {
                    std::fs::remove_dir_all(&path).unwrap();
                }
            }
            for entry in std::fs::read_dir(&user).unwrap().flatten() {
                if entry.file_name() != "marker" {
                    std::fs::remove_file(entry.path()).unwrap();
                }
            }
            if user != theirs {
                std::fs::rename(&user, &theirs).unwrap();
            }
            set_old(&theirs);
        }
        let (tries, swaps) = race.finish();
        assert!(
            written == 0 && others.is_empty(),
            "{written} of {tries} tries staged the copy in the user's folder, {} failed otherwise ({swaps} swaps, {refused} refused): {:?}",
            others.len(),
            others.first()
        );
        eprintln!("{tries} tries, {swaps} swaps, {refused} refused");
    }

    #[test]
    fn staged_symlinks_replace_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new(dir.path());
        let link = dir.path().join("current");
        std::os::unix::fs::symlink("v1", &link).unwrap();
        at(&host, "/current")
            .stage_symlink(Path::new("v2"))
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
        std::fs::create_dir(stale.join("nested")).unwrap();
        let keep_file = dir.path().join(".datum.stage.file");
        std::fs::write(&keep_file, b"not ours").unwrap();
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("precious"), b"x").unwrap();
        let link = dir.path().join(".datum.stage.link");
        std::os::unix::fs::symlink(outside.path(), &link).unwrap();

        let handle = Dir::open_path(dir.path()).unwrap();
        assert_eq!(cleanup_stale(&handle).unwrap(), 1);
        assert!(!stale.exists());
        assert!(keep_file.exists() && other.exists());
        assert!(
            outside.path().join("precious").exists(),
            "links never followed"
        );
    }
}
