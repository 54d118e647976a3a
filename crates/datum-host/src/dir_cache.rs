//! The folders a pass has opened, by declared path: the [`crate::Host`]'s
//! cache, so that a File next to one reached before costs one `fstatat`.
//!
//! Bounded: at most `with_most`'s number of folders are kept open (a quarter of
//! the soft limit of open files less a reserve, between 16 and 4,096:
//! [`crate::descriptors::Budget`]), the least
//! recently used let go past that (its handle closed once nothing else holds
//! it). Before, every folder reached stayed open to the end of the pass, so
//! Files in more folders than the descriptor limit failed with "Too many
//! open files" (under a hard limit of 1,024, or past 65,536 folders).
//!
//! A folder let go and reached again is opened again by the boundary's walk
//! ([`crate::boundary::Walker`]) from the deepest folder still kept on its
//! way (the root at worst), one component at a time, with every check of the
//! first open: a link on the way is refused unless the repository allows it
//! (then read again and judged again), an unsafe ownership transition is
//! refused. A folder replaced meanwhile is whatever the walk finds now, as
//! it would be for the pass's first look; no identity of a folder is kept
//! from one open to the next (none was before: a handle held open saw the
//! folder it was opened on, the next pass the one there then).
//!
//! Owns: which folders stay open. Must not: open anything itself.

use std::path::{Path, PathBuf};

use hashlink::LruCache;

use crate::Dir;

/// The open folders, by declared path, least recently used first out.
pub(crate) struct DirCache {
    open: LruCache<PathBuf, Dir>,
}

impl std::fmt::Debug for DirCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirCache")
            .field("open", &self.open.len())
            .field("most", &self.open.capacity())
            .finish()
    }
}

impl DirCache {
    /// Bounded by this process's share of open files for folder handles
    /// ([`crate::descriptors::Budget`]).
    pub(crate) fn for_this_process() -> Self {
        Self::with_most(crate::descriptors::Budget::of_this_process().folders)
    }

    /// At most `most` folders kept open (at least one).
    pub(crate) fn with_most(most: usize) -> Self {
        Self {
            open: LruCache::new(most.max(1)),
        }
    }

    /// How many folders are kept open at most.
    #[cfg(test)]
    pub(crate) fn most(&self) -> usize {
        self.open.capacity()
    }

    /// The folder opened at `declared`, if it is still kept (it is then the
    /// most recently used).
    pub(crate) fn get(&mut self, declared: &Path) -> Option<Dir> {
        self.open.get(declared).cloned()
    }

    /// Keeps `dir`, opened at `declared`; the least recently used folder is
    /// let go when there are more than the cache was made for.
    pub(crate) fn insert(&mut self, declared: &Path, dir: &Dir) {
        self.open.insert(declared.to_path_buf(), dir.clone());
    }

    /// Lets go of the folders at or below `declared`.
    pub(crate) fn forget_under(&mut self, declared: &Path) {
        let gone: Vec<PathBuf> = self
            .open
            .iter()
            .filter(|(p, _)| p.starts_with(declared))
            .map(|(p, _)| p.clone())
            .collect();
        for p in gone {
            self.open.remove(&p);
        }
    }

    /// How many folders are kept open now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::{Host, HostError};

    /// A host keeping at most `most` folders open.
    fn host_keeping(root: &Path, most: usize) -> Host {
        let mut host = Host::new(root);
        host.dirs = Arc::new(Mutex::new(DirCache::with_most(most)));
        host
    }

    fn kept(host: &Host) -> usize {
        host.dirs.lock().unwrap().len()
    }

    /// Past the bound the least recently used folder is let go, and reached
    /// again from the deepest folder still kept on its way: the same entry,
    /// never more folders open than the bound.
    #[test]
    fn the_least_recently_used_folder_is_let_go_and_reached_again() {
        let root = tempfile::tempdir().unwrap();
        for i in 0..10 {
            std::fs::create_dir_all(root.path().join(format!("a/d{i}"))).unwrap();
            std::fs::write(root.path().join(format!("a/d{i}/f")), format!("{i}")).unwrap();
        }
        let host = host_keeping(root.path(), 3);
        for round in 0..2 {
            for i in 0..10 {
                let bytes = host
                    .read(Path::new(&format!("/a/d{i}/f")))
                    .unwrap()
                    .unwrap();
                assert_eq!(bytes, format!("{i}").into_bytes(), "round {round}");
                assert!(kept(&host) <= 3, "{} kept", kept(&host));
            }
        }
        // /a, used for every walk, stays; the oldest leaf went.
        let mut cache = host.dirs.lock().unwrap();
        assert!(cache.get(Path::new("/a")).is_some());
        assert!(cache.get(Path::new("/a/d0")).is_none());
        assert!(cache.get(Path::new("/a/d9")).is_some());
    }

    /// A folder let go and then replaced by a link is refused when reached
    /// again, as the first walk would refuse it; a folder still kept is the
    /// one first opened (its handle, not the name, is what it is).
    #[test]
    fn a_folder_reached_again_is_refused_when_it_became_a_link() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        for name in ["d", "e", "f"] {
            std::fs::create_dir(root.path().join(name)).unwrap();
        }
        let host = host_keeping(root.path(), 2);
        host.locate(Path::new("/d/x")).unwrap();
        // Still kept: the handle is the folder first opened, moved or not.
        std::fs::rename(root.path().join("d"), root.path().join("gone")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("d")).unwrap();
        let at = host.locate(Path::new("/d/x")).unwrap();
        assert_eq!(at.parent().path(), root.path().join("d"));
        at.create_dir(0o755, None, None).unwrap();
        assert!(root.path().join("gone/x").is_dir());
        // Let go (two other folders used since): walked again, and the link
        // is refused, nothing written through it.
        host.locate(Path::new("/e/x")).unwrap();
        host.locate(Path::new("/f/x")).unwrap();
        let err = host.locate(Path::new("/d/y")).unwrap_err();
        assert!(matches!(err, HostError::ParentLink(_)), "{err}");
        assert!(host.lstat(Path::new("/d/x")).is_err());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        // A folder put back where the link was is reached like a new one.
        std::fs::remove_file(root.path().join("d")).unwrap();
        std::fs::rename(root.path().join("gone"), root.path().join("d")).unwrap();
        assert!(host.lstat(Path::new("/d/x")).unwrap().is_some());
    }

    /// A host given a boundary gets a cache of its own, bounded by the
    /// budget (not by the cache it had): a folder reached through a link
    /// the new boundary allows is never handed to a clone taken before,
    /// which keeps the strict walk and refuses the link.
    #[test]
    fn a_host_given_a_boundary_shares_no_folder_with_the_host_it_was() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("etc")).unwrap();
        std::fs::create_dir_all(root.path().join("real")).unwrap();
        std::fs::write(root.path().join("real/x.conf"), "x").unwrap();
        std::os::unix::fs::symlink("/real", root.path().join("etc/in")).unwrap();
        let strict = host_keeping(root.path(), 1);
        strict.locate(Path::new("/etc/y")).unwrap();
        let allowing = strict.clone().with_boundary(crate::Boundary {
            follow_links: vec![PathBuf::from("/etc/in")],
            owner_transitions: Vec::new(),
        });
        assert_eq!(
            allowing.dirs.lock().unwrap().most(),
            crate::descriptors::Budget::of_this_process().folders
        );
        assert_eq!(kept(&allowing), 0);
        assert_eq!(
            allowing.read(Path::new("/etc/in/x.conf")).unwrap(),
            Some(b"x".to_vec())
        );
        let err = strict.locate(Path::new("/etc/in/x.conf")).unwrap_err();
        assert!(matches!(err, HostError::ParentLink(_)), "{err}");
        assert_eq!(kept(&strict), 1);
    }

    #[test]
    fn forgetting_a_folder_forgets_what_is_below_it() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("a/b/c")).unwrap();
        std::fs::create_dir_all(root.path().join("ab")).unwrap();
        let host = host_keeping(root.path(), 10);
        host.dir(Path::new("/a/b/c")).unwrap();
        host.dir(Path::new("/ab")).unwrap();
        assert_eq!(kept(&host), 4);
        host.forget_dirs_under(Path::new("/a/b"));
        let mut cache = host.dirs.lock().unwrap();
        assert_eq!(cache.len(), 2);
        assert!(cache.get(Path::new("/a")).is_some());
        assert!(cache.get(Path::new("/ab")).is_some());
    }
}
