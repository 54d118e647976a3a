//! Keeping repository paths inside the repository.
//!
//! This module owns one rule: a path written in the repository (a layer's
//! folder, a `source:` or `template:` file) names something inside the
//! repository, even after `..` and symbolic links are followed. A repository
//! that could read `/etc/shadow` into a managed file, or a template that could
//! include one, would turn a repository review into a false sense of safety.
//!
//! It reads the file system only to resolve links (canonicalize); it never
//! reads file contents.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use datum_host::repo::{EntryKind, EntryStat};

/// Why a declared path is refused.
#[derive(Debug, thiserror::Error)]
pub enum PathProblem {
    #[error("`{declared}` is an absolute path: write a path relative to the layer folder")]
    Absolute { declared: String },
    #[error("`{declared}` leaves the repository through `..`")]
    Escapes { declared: String },
    #[error("`{declared}` resolves to {} through a symbolic link, outside the repository", resolved.display())]
    LinkOutside { declared: String, resolved: PathBuf },
    #[error("`{declared}` does not exist in the repository (looked for {})", looked.display())]
    Missing { declared: String, looked: PathBuf },
    #[error("`{declared}` cannot be resolved: {source}")]
    Io {
        declared: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{declared}` is empty")]
    Empty { declared: String },
}

/// Resolves `declared`, written relative to `base` (a folder relative to the
/// repository root), to a canonical absolute path inside `canonical_root`.
/// Returns the canonical path and the path relative to the repository root.
pub fn resolve_inside(
    canonical_root: &Path,
    base: &Path,
    declared: &str,
) -> Result<(PathBuf, PathBuf), PathProblem> {
    Resolver::new(canonical_root).resolve(base, declared)
}

/// [`resolve_inside`] for many paths: each folder is resolved once, so a
/// repository with 20,000 `source:` files costs one `lstat` per file rather
/// than a link walk over every component of every path.
#[derive(Debug)]
pub struct Resolver {
    root: PathBuf,
    /// Folder (relative) -> its canonical path, or the error kind.
    dirs: HashMap<PathBuf, Result<PathBuf, std::io::ErrorKind>>,
    /// The folder whose entries were looked at last, open (by its canonical
    /// path): a repository lists its files folder by folder, so most
    /// lookups are one `lstat` of one name relative to it. One, not one per
    /// folder: a repository of many folders would hold a descriptor each.
    open: Option<(PathBuf, datum_host::repo::Folder)>,
}

impl Resolver {
    pub fn new(canonical_root: &Path) -> Self {
        Self {
            root: canonical_root.to_owned(),
            dirs: HashMap::new(),
            open: None,
        }
    }

    /// `lstat` of `name` in the folder at the canonical path `parent`.
    fn lstat_in(
        &mut self,
        parent: &Path,
        name: &std::ffi::OsStr,
    ) -> std::io::Result<datum_host::repo::EntryStat> {
        let folder = match self.open.take() {
            Some((path, folder)) if path == parent => (path, folder),
            _ => (parent.to_owned(), datum_host::repo::Folder::open(parent)?),
        };
        let stat = folder.1.lstat(name);
        self.open = Some(folder);
        stat
    }

    /// See [`resolve_inside`].
    pub fn resolve(
        &mut self,
        base: &Path,
        declared: &str,
    ) -> Result<(PathBuf, PathBuf), PathProblem> {
        self.resolve_file(base, declared)
            .map(|(abs, rel, _)| (abs, rel))
    }

    /// [`Resolver::resolve`], also giving the key (size, times, identity) of
    /// the regular file the path names (`None`: something else, a folder for
    /// instance), from the same `lstat` (the target's, for a link), so that a
    /// caller needs no second system call for it.
    pub fn resolve_file(
        &mut self,
        base: &Path,
        declared: &str,
    ) -> Result<(PathBuf, PathBuf, Option<datum_host::repo::EntryKey>), PathProblem> {
        let problem_declared = || declared.to_owned();
        if declared.is_empty() {
            return Err(PathProblem::Empty {
                declared: problem_declared(),
            });
        }
        let written = Path::new(declared);
        if written.has_root() || written.is_absolute() {
            return Err(PathProblem::Absolute {
                declared: problem_declared(),
            });
        }
        // Lexical check first: `..` may move around inside the repository but
        // never above its root.
        let mut relative: Vec<&std::ffi::OsStr> = Vec::new();
        for c in base.components().chain(written.components()) {
            match c {
                Component::Normal(part) => relative.push(part),
                Component::CurDir => {}
                Component::ParentDir => {
                    if relative.pop().is_none() {
                        return Err(PathProblem::Escapes {
                            declared: problem_declared(),
                        });
                    }
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(PathProblem::Absolute {
                        declared: problem_declared(),
                    });
                }
            }
        }
        let rel: PathBuf = relative.iter().collect();
        let missing = |rel: PathBuf| PathProblem::Missing {
            declared: declared.to_owned(),
            looked: rel,
        };
        let io = |source: std::io::Error| PathProblem::Io {
            declared: declared.to_owned(),
            source,
        };
        let Some((name, parent)) = relative.split_last() else {
            return Ok((self.root.clone(), rel, None));
        };
        let parent_rel: PathBuf = parent.iter().collect();
        let parent_canonical = match self.dirs.get(&parent_rel) {
            Some(known) => known.clone(),
            None => {
                let found = datum_host::repo::canonicalize(&self.root.join(&parent_rel))
                    .map_err(|e| e.kind());
                self.dirs.insert(parent_rel, found.clone());
                found
            }
        };
        let parent_canonical = match parent_canonical {
            Ok(p) => p,
            Err(std::io::ErrorKind::NotFound) => return Err(missing(rel)),
            Err(kind) => return Err(io(std::io::Error::from(kind))),
        };
        // Exactly sized: `join` leaves room for twice the folder's path, and
        // a compile keeps 20,000 of these while it hashes their files.
        let mut candidate =
            PathBuf::with_capacity(parent_canonical.as_os_str().len() + 1 + name.len());
        candidate.push(&parent_canonical);
        candidate.push(name);
        let file_key = |s: EntryStat| (s.kind == EntryKind::File).then_some(s.key);
        let (canonical, file) = match self.lstat_in(&parent_canonical, name) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(missing(rel)),
            Err(e) => return Err(io(e)),
            // Only a link needs the full walk (it may point anywhere).
            Ok(entry) if entry.kind == EntryKind::Link => {
                match datum_host::repo::canonicalize(&candidate) {
                    Ok(c) => {
                        let file = datum_host::repo::stat_following(&c).ok().and_then(file_key);
                        (c, file)
                    }
                    // A dangling link: report what is more useful, that it is missing.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(missing(rel)),
                    Err(e) => return Err(io(e)),
                }
            }
            Ok(entry) => (candidate, file_key(entry)),
        };
        if !canonical.starts_with(&self.root) {
            return Err(PathProblem::LinkOutside {
                declared: problem_declared(),
                resolved: canonical,
            });
        }
        Ok((canonical, rel, file))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("base/files")).unwrap();
        std::fs::create_dir_all(root.join("common")).unwrap();
        std::fs::write(root.join("base/files/motd"), "hi").unwrap();
        std::fs::write(root.join("common/x"), "x").unwrap();
        (dir, root)
    }

    #[test]
    fn plain_relative_paths_resolve_under_the_layer() {
        let (_d, root) = repo();
        let (abs, rel) = resolve_inside(&root, Path::new("base"), "files/motd").unwrap();
        assert_eq!(abs, root.join("base/files/motd"));
        assert_eq!(rel, PathBuf::from("base/files/motd"));
    }

    #[test]
    fn dot_dot_inside_the_repository_is_allowed() {
        let (_d, root) = repo();
        let (_, rel) = resolve_inside(&root, Path::new("base"), "../common/x").unwrap();
        assert_eq!(rel, PathBuf::from("common/x"));
    }

    #[test]
    fn escapes_absolute_and_missing_are_refused() {
        let (_d, root) = repo();
        assert!(matches!(
            resolve_inside(&root, Path::new("base"), "../../etc/shadow"),
            Err(PathProblem::Escapes { .. })
        ));
        assert!(matches!(
            resolve_inside(&root, Path::new("base"), "/etc/shadow"),
            Err(PathProblem::Absolute { .. })
        ));
        assert!(matches!(
            resolve_inside(&root, Path::new("base"), "files/nope"),
            Err(PathProblem::Missing { .. })
        ));
        assert!(matches!(
            resolve_inside(&root, Path::new("base"), ""),
            Err(PathProblem::Empty { .. })
        ));
    }

    #[test]
    fn a_linked_folder_leading_out_is_refused_and_remembered() {
        let (_d, root) = repo();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("base/out")).unwrap();
        let mut r = Resolver::new(&root);
        for _ in 0..2 {
            let err = r.resolve(Path::new("base"), "out/secret").unwrap_err();
            assert!(matches!(err, PathProblem::LinkOutside { .. }), "{err}");
        }
        assert!(r.resolve(Path::new("base"), "files/motd").is_ok());
        assert!(r.resolve(Path::new("base"), "files/../files/motd").is_ok());
        assert!(matches!(
            r.resolve(Path::new("base"), "nodir/x"),
            Err(PathProblem::Missing { .. })
        ));
    }

    #[test]
    fn symlinks_out_of_the_repository_are_refused() {
        let (_d, root) = repo();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.join("base/files/link"))
            .unwrap();
        let err = resolve_inside(&root, Path::new("base"), "files/link").unwrap_err();
        assert!(matches!(err, PathProblem::LinkOutside { .. }), "{err}");
        assert!(err.to_string().contains("outside the repository"));
    }

    #[test]
    fn a_resolved_file_comes_with_its_own_metadata() {
        use std::os::unix::fs::MetadataExt as _;
        let (_d, root) = repo();
        std::os::unix::fs::symlink("motd", root.join("base/files/alias")).unwrap();
        std::fs::write(root.join("common/y"), "yyy").unwrap();
        let mut r = Resolver::new(&root);
        let motd = std::fs::metadata(root.join("base/files/motd")).unwrap();
        let (_, _, key) = r.resolve_file(Path::new("base"), "files/motd").unwrap();
        let key = key.expect("a regular file has a key");
        assert_eq!((key.inode, key.size), (motd.ino(), 2));
        assert_eq!(
            key.mtime_ns,
            motd.mtime() * 1_000_000_000 + motd.mtime_nsec()
        );
        // A link inside the repository: its target's key, not the link's.
        let (abs, _, key) = r.resolve_file(Path::new("base"), "files/alias").unwrap();
        assert_eq!(abs, root.join("base/files/motd"));
        assert_eq!(key.expect("the target is a file").inode, motd.ino());
        // A folder is not a file.
        let (_, _, key) = r.resolve_file(Path::new("base"), "files").unwrap();
        assert!(key.is_none());
        // Each file of another folder is looked at in that folder, and back.
        for (file, size) in [("../common/x", 1), ("../common/y", 3), ("files/motd", 2)] {
            let (abs, _, key) = r.resolve_file(Path::new("base"), file).unwrap();
            let meta = std::fs::metadata(&abs).unwrap();
            let key = key.expect("a file");
            assert_eq!((key.inode, key.size), (meta.ino(), size), "{file}");
        }
    }
}
