//! A tree of files written beneath a fresh folder, as a repository revision
//! lists them, through `datum-host`'s handles only.
//!
//! Every entry is reached from the open checkout folder one component at a
//! time: folders with [`datum_host::Dir::open_child_dir`] (never through a
//! link), files created with [`datum_host::Located::create_new`]
//! (`O_CREAT | O_EXCL | O_NOFOLLOW`: never written through something
//! already there), links with [`datum_host::Located::symlink`]. Each path is
//! checked component by component: no empty, `.` or `..` component, no NUL,
//! and no `.git` in any letter case (a checkout must never hold something
//! git would take for a repository). Nothing is ever reached through a link,
//! even one written earlier in the same tree.
//!
//! Owns the checks of a tree's paths; must not decide what the tree is (the
//! listing, in [`crate::checkout`]) or where it goes.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use datum_host::{Dir, HostError};

/// Mode of the folders a tree creates.
const DIR_MODE: u32 = 0o755;

fn refused(op: &'static str, path: &Path, why: String) -> HostError {
    HostError::io(
        op,
        path,
        std::io::Error::new(std::io::ErrorKind::InvalidInput, why),
    )
}

/// One component of a relative path: a plain name, never `.`, `..`, empty,
/// holding a NUL, or `.git` in any case.
fn check_component(name: &[u8]) -> Result<(), String> {
    match name {
        b"" => Err("an empty path component".to_owned()),
        b"." | b".." => Err(format!(
            "the path component `{}`",
            String::from_utf8_lossy(name)
        )),
        _ if name.contains(&0) => Err("a NUL byte".to_owned()),
        _ if name.eq_ignore_ascii_case(b".git") => Err("a `.git` component".to_owned()),
        _ => Ok(()),
    }
}

/// Writes a tree of files beneath a fresh folder: parents are created as
/// needed (0755), files with `O_EXCL` (0644, or 0755 when executable),
/// links as written (see the module header).
#[derive(Debug)]
pub struct TreeWriter {
    root: Dir,
    /// The open folders of the current directory, outermost first.
    open: Vec<(Vec<u8>, Dir)>,
    files: u64,
    bytes: u64,
}

/// What a [`TreeWriter`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TreeWritten {
    /// Regular files and links.
    pub files: u64,
    pub bytes: u64,
}

impl TreeWriter {
    pub fn new(root: Dir) -> Self {
        Self {
            root,
            open: Vec::new(),
            files: 0,
            bytes: 0,
        }
    }

    /// Checks a slash-separated relative path; returns its components.
    fn split<'p>(&self, rel: &'p [u8]) -> Result<Vec<&'p [u8]>, HostError> {
        let parts: Vec<&[u8]> = rel.split(|b| *b == b'/').collect();
        for part in &parts {
            if let Err(why) = check_component(part) {
                return Err(refused(
                    "write",
                    &self.root.path().join(OsStr::from_bytes(rel)),
                    format!("refusing {why}"),
                ));
            }
        }
        Ok(parts)
    }

    /// The last component and its parents.
    fn leaf<'a, 'p>(
        &self,
        rel: &[u8],
        parts: &'a [&'p [u8]],
    ) -> Result<(&'p [u8], &'a [&'p [u8]]), HostError> {
        match parts.split_last() {
            Some((name, dirs)) => Ok((name, dirs)),
            None => Err(refused(
                "write",
                &self.root.path().join(OsStr::from_bytes(rel)),
                "refusing an empty path".to_owned(),
            )),
        }
    }

    /// The open folder for `dirs` (components below the root), creating
    /// what is missing.
    fn folder(&mut self, dirs: &[&[u8]]) -> Result<&Dir, HostError> {
        let keep = self
            .open
            .iter()
            .zip(dirs)
            .take_while(|((name, _), want)| name.as_slice() == **want)
            .count();
        self.open.truncate(keep);
        for name in &dirs[keep..] {
            let parent = self.open.last().map_or(&self.root, |(_, d)| d);
            let os = OsStr::from_bytes(name);
            let next = match parent.open_child_dir(os)? {
                Some(d) => d,
                None => {
                    parent.entry(os).create_dir(DIR_MODE, None, None)?;
                    parent.open_child_dir(os)?.ok_or_else(|| {
                        HostError::io(
                            "open directory",
                            parent.path().join(os),
                            std::io::ErrorKind::NotFound.into(),
                        )
                    })?
                }
            };
            self.open.push((name.to_vec(), next));
        }
        Ok(self.open.last().map_or(&self.root, |(_, d)| d))
    }

    /// Writes the regular file at `rel` from `content`.
    pub fn file(
        &mut self,
        rel: &[u8],
        executable: bool,
        content: &mut dyn Read,
    ) -> Result<(), HostError> {
        let parts = self.split(rel)?;
        let (name, dirs) = self.leaf(rel, &parts)?;
        let mode = if executable { 0o755 } else { 0o644 };
        let entry = self.folder(dirs)?.entry(OsStr::from_bytes(name));
        let written = write_new(&entry, mode, content)?;
        self.files += 1;
        self.bytes += written;
        Ok(())
    }

    /// Writes the symlink at `rel` pointing at `target`.
    pub fn symlink(&mut self, rel: &[u8], target: &[u8]) -> Result<(), HostError> {
        let parts = self.split(rel)?;
        let (name, dirs) = self.leaf(rel, &parts)?;
        if target.is_empty() || target.contains(&0) {
            return Err(refused(
                "create symlink",
                &self.root.path().join(OsStr::from_bytes(rel)),
                "an empty target or one holding a NUL byte".to_owned(),
            ));
        }
        self.folder(dirs)?
            .entry(OsStr::from_bytes(name))
            .symlink(Path::new(OsStr::from_bytes(target)))?;
        self.files += 1;
        Ok(())
    }

    /// Makes sure the directory at `rel` exists (an empty one, such as the
    /// place of a submodule that is not checked out).
    pub fn dir(&mut self, rel: &[u8]) -> Result<(), HostError> {
        let parts = self.split(rel)?;
        self.folder(&parts)?;
        Ok(())
    }

    /// Gives the root folder back with what was written. Nothing is durable
    /// yet: call [`Dir::sync_filesystem`] on it when the tree is complete
    /// (one `syncfs` instead of an fsync per file).
    pub fn finish(self) -> (Dir, TreeWritten) {
        drop(self.open);
        (
            self.root,
            TreeWritten {
                files: self.files,
                bytes: self.bytes,
            },
        )
    }
}

/// Creates the file `entry` (never through anything already there) with
/// `mode` and fills it from `content`; the bytes written.
pub fn write_new(
    entry: &datum_host::Located,
    mode: u32,
    content: &mut dyn Read,
) -> Result<u64, HostError> {
    let mut file = entry.create_new(mode)?;
    let written =
        std::io::copy(content, &mut file).map_err(|e| HostError::io("write", entry.path(), e))?;
    file.flush()
        .map_err(|e| HostError::io("write", entry.path(), e))?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt as _;

    #[test]
    fn a_tree_is_written_beneath_its_folder_and_nowhere_else() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("tree")).unwrap();
        let top = Dir::open_path(&dir.path().join("tree")).unwrap();
        let mut w = TreeWriter::new(top);
        w.file(b"datum.yaml", false, &mut &b"datum: v1alpha1\n"[..])
            .unwrap();
        w.file(b"base/files/run.sh", true, &mut &b"#!/bin/sh\n"[..])
            .unwrap();
        w.file(b"base/x.yaml", false, &mut &b"x"[..]).unwrap();
        w.symlink(b"base/link", b"x.yaml").unwrap();
        // A link written earlier in the same tree is never gone through.
        w.symlink(b"out", outside.path().as_os_str().as_bytes())
            .unwrap();
        let err = w.file(b"out/planted", false, &mut &b"x"[..]).unwrap_err();
        assert!(err.to_string().contains("out"), "{err}");
        for bad in [
            &b"a/../b"[..],
            b"./a",
            b"a//b",
            b".git/config",
            b"x/.GIT/hooks/post",
            b"",
        ] {
            let err = w.file(bad, false, &mut &b"x"[..]).unwrap_err();
            assert!(err.to_string().contains("refusing"), "{err}");
        }
        w.dir(b"vendor/module").unwrap();
        let (root, written) = w.finish();
        root.sync_filesystem().unwrap();
        assert_eq!(written.files, 5);
        assert_eq!(written.bytes, 16 + 10 + 1);
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        let t = dir.path().join("tree");
        let mode = |p: &str| std::fs::metadata(t.join(p)).unwrap().mode() & 0o777;
        assert_eq!(mode("base/files/run.sh"), 0o755);
        assert_eq!(mode("base/x.yaml"), 0o644);
        assert_eq!(
            std::fs::read_link(t.join("base/link")).unwrap(),
            Path::new("x.yaml")
        );
        assert!(t.join("vendor/module").is_dir());
        assert!(!t.join("a").exists() && !t.join(".git").exists() && !t.join("x").exists());
    }

    #[test]
    fn files_are_never_written_through_what_is_already_there() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join("f")).unwrap();
        let root = Dir::open_path(dir.path()).unwrap();
        assert!(write_new(&root.entry(OsStr::new("f")), 0o644, &mut &b"x"[..]).is_err());
        assert!(write_new(&root.entry(OsStr::new("victim")), 0o644, &mut &b"x"[..]).is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    }
}
