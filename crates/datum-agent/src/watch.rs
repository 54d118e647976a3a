//! Event-driven detection: kernel file-change notifications (inotify through
//! `notify`) on the files and trees of watched classes, mapped back to the
//! resources they may have changed.
//!
//! Owns the mapping (path -> resources) and the watcher's lifetime. It must
//! not run checks or decide when: it turns kernel events into [`WatchNews`]
//! for the daemon. It must never fail silently: an overflowed queue, a watch
//! that could not be added (the `max_user_watches` limit) or a backend error
//! becomes news the daemon counts, logs and answers with a full pass.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use datum_core::ResourceId;
use notify::event::{AccessKind, AccessMode, EventKind};
use notify::{RecommendedWatcher, RecursiveMode, Watcher as _};

use crate::check::{WatchScope, WatchTarget};

/// What the watcher tells the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchNews {
    /// These resources (by class) may have changed.
    Changed(BTreeMap<String, BTreeSet<ResourceId>>),
    /// The kernel dropped events (inotify `IN_Q_OVERFLOW`): anything may have
    /// changed.
    Overflow,
    /// A watch could not be kept or added; `reason` is a fixed word
    /// (`limit`, `missing`, `backend`), safe as a metric label.
    Lost {
        reason: &'static str,
        detail: String,
    },
}

/// Which resources a changed path belongs to.
#[derive(Debug, Default, Clone)]
pub struct WatchPlan {
    files: BTreeMap<PathBuf, Vec<(String, ResourceId)>>,
    /// The paths that name regular files, watched on their own as well.
    own: BTreeSet<PathBuf>,
    trees: Vec<(PathBuf, String, ResourceId)>,
}

impl WatchPlan {
    pub fn new(targets: &[WatchTarget]) -> Self {
        let mut plan = Self::default();
        for t in targets {
            // The kernel reports absolute paths (notify joins a relative
            // watch path to the current folder), so keys must be absolute
            // too, or a `--root` given as a relative path sees nothing.
            let path = std::path::absolute(&t.path).unwrap_or_else(|_| t.path.clone());
            if t.scope == WatchScope::Subtree {
                plan.trees.push((path, t.class.clone(), t.resource.clone()));
            } else {
                // Only a regular file's inode is watched on its own
                // (watching a link would watch what it points at, a folder
                // every entry).
                if t.scope == WatchScope::RegularFile {
                    plan.own.insert(path.clone());
                }
                plan.files
                    .entry(path)
                    .or_default()
                    .push((t.class.clone(), t.resource.clone()));
            }
        }
        plan
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.trees.is_empty()
    }

    /// The kernel watches to add: each tree recursively, and the parent
    /// folder of each file (an editor or an apply that renames a new file
    /// into place would leave a watch on the file itself on the old inode).
    pub fn watches(&self) -> BTreeMap<PathBuf, RecursiveMode> {
        let mut out = BTreeMap::new();
        for (path, _, _) in &self.trees {
            out.insert(path.clone(), RecursiveMode::Recursive);
        }
        for path in self.files.keys() {
            let parent = path.parent().unwrap_or(Path::new("/")).to_path_buf();
            out.entry(parent).or_insert(RecursiveMode::NonRecursive);
        }
        out
    }

    /// The files (of `File` resources) to watch themselves as well, beside
    /// their folders' watches: the kernel tells a folder's watch only of
    /// what is done through that folder, and a file's own watch (on its
    /// inode) of a write through any of its hard links. That watch stays on the inode the name
    /// held when it was added: a file replaced since (renamed into place by
    /// an apply or an editor) is watched through its folder only until the
    /// watches are armed again (every full pass).
    pub fn files(&self) -> impl Iterator<Item = &PathBuf> {
        self.own.iter()
    }

    /// The resources a change of `path` may concern, added to `into`.
    pub fn affected(&self, path: &Path, into: &mut BTreeMap<String, BTreeSet<ResourceId>>) {
        if let Some(owners) = self.files.get(path) {
            for (class, id) in owners {
                into.entry(class.clone()).or_default().insert(id.clone());
            }
        }
        for (root, class, id) in &self.trees {
            if path.starts_with(root) {
                into.entry(class.clone()).or_default().insert(id.clone());
            }
        }
    }
}

/// Whether an event can mean a change. Opening and reading a file (the
/// check itself does that) must not trigger another check.
fn may_change(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// Turns one notification into news, if it concerns a declared path.
pub fn classify(plan: &WatchPlan, event: notify::Result<notify::Event>) -> Option<WatchNews> {
    match event {
        Ok(event) if event.need_rescan() => Some(WatchNews::Overflow),
        Ok(event) => {
            if !may_change(&event.kind) {
                return None;
            }
            let mut changed = BTreeMap::new();
            for path in &event.paths {
                plan.affected(path, &mut changed);
            }
            (!changed.is_empty()).then_some(WatchNews::Changed(changed))
        }
        Err(err) => Some(lost(&err)),
    }
}

/// A watched folder itself was removed or renamed away: the kernel drops
/// its watch without an error, so this is the only sign that changes inside
/// it are no longer seen.
fn root_gone(roots: &BTreeSet<PathBuf>, event: &notify::Event) -> Option<WatchNews> {
    use notify::event::ModifyKind;
    if !matches!(
        event.kind,
        EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(_))
    ) {
        return None;
    }
    let gone = event.paths.iter().find(|p| roots.contains(*p))?;
    Some(WatchNews::Lost {
        reason: "missing",
        detail: format!(
            "{} was removed or renamed; its watch is gone",
            gone.display()
        ),
    })
}

/// Every `reason` a [`WatchNews::Lost`] can carry (the metrics export each
/// at zero from start-up).
pub const LOST_REASONS: [&str; 3] = ["backend", "limit", "missing"];

fn lost(err: &notify::Error) -> WatchNews {
    let reason = match &err.kind {
        notify::ErrorKind::MaxFilesWatch => "limit",
        notify::ErrorKind::PathNotFound => "missing",
        notify::ErrorKind::Io(io) if io.raw_os_error() == Some(28) => "limit", // ENOSPC
        notify::ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::NotFound => "missing",
        _ => "backend",
    };
    WatchNews::Lost {
        reason,
        detail: err.to_string(),
    }
}

/// The running watcher: dropping it removes every watch.
pub struct Watcher {
    _inner: RecommendedWatcher,
    watched: usize,
}

impl Watcher {
    /// Starts watching `plan`, sending later news through `send`. Watches
    /// that cannot be added are returned (as [`WatchNews::Lost`]): the
    /// caller arms watches just before a full pass, which covers them.
    pub fn start<F>(plan: &WatchPlan, send: F) -> Result<(Self, Vec<WatchNews>), notify::Error>
    where
        F: Fn(WatchNews) + Send + 'static,
    {
        let shared = plan.clone();
        let roots: BTreeSet<PathBuf> = plan.watches().into_keys().collect();
        let mut inner =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                if let Ok(ev) = &event
                    && let Some(news) = root_gone(&roots, ev)
                {
                    send(news);
                }
                if let Some(news) = classify(&shared, event) {
                    send(news);
                }
            })?;
        let mut watched = 0;
        let mut failures = Vec::new();
        for (path, mode) in plan.watches() {
            match inner.watch(&path, mode) {
                Ok(()) => watched += 1,
                Err(mut err) => {
                    if err.paths.is_empty() {
                        err = err.add_path(path.clone());
                    }
                    let news = lost(&err);
                    let limit = matches!(
                        news,
                        WatchNews::Lost {
                            reason: "limit",
                            ..
                        }
                    );
                    failures.push(news);
                    // Past the limit every further add fails the same way.
                    if limit {
                        break;
                    }
                }
            }
        }
        // Then each file itself, for writes through its other hard links
        // (after the folders, so a watch limit reached here costs only
        // these). A file that does not exist yet is watched through its
        // folder only, as before (its creation is a change there).
        let limited = failures.iter().any(|n| {
            matches!(
                n,
                WatchNews::Lost {
                    reason: "limit",
                    ..
                }
            )
        });
        if !limited {
            for path in plan.files() {
                match inner.watch(path, RecursiveMode::NonRecursive) {
                    Ok(()) => {}
                    Err(err) => {
                        let news = lost(&err.add_path(path.clone()));
                        match news {
                            WatchNews::Lost {
                                reason: "missing", ..
                            } => {}
                            WatchNews::Lost {
                                reason: "limit", ..
                            } => {
                                failures.push(news);
                                break;
                            }
                            other => failures.push(other),
                        }
                    }
                }
            }
        }
        Ok((
            Self {
                _inner: inner,
                watched,
            },
            failures,
        ))
    }

    /// Kernel watch roots in place (trees count once).
    pub fn watched(&self) -> usize {
        self.watched
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, Flag, ModifyKind};

    /// A watch target of class `critical`: resource `kind[name]` at `path`.
    fn critical(
        kind: &str,
        name: &str,
        path: impl Into<PathBuf>,
        scope: WatchScope,
    ) -> WatchTarget {
        WatchTarget {
            resource: ResourceId::new(kind, name),
            class: "critical".into(),
            path: path.into(),
            scope,
        }
    }

    /// The watcher of `plan` started, the failures it started with, and
    /// the news it sends.
    fn watching(
        plan: &WatchPlan,
    ) -> (
        Watcher,
        Vec<WatchNews>,
        std::sync::mpsc::Receiver<WatchNews>,
    ) {
        let (tx, rx) = std::sync::mpsc::channel();
        let (w, failures) = Watcher::start(plan, move |n| {
            let _ = tx.send(n);
        })
        .unwrap();
        (w, failures, rx)
    }

    fn targets() -> Vec<WatchTarget> {
        vec![
            critical(
                "File",
                "sshd",
                "/r/etc/ssh/sshd_config",
                WatchScope::RegularFile,
            ),
            critical("Tree", "nginx", "/r/etc/nginx", WatchScope::Subtree),
        ]
    }

    #[test]
    fn files_are_watched_through_their_folder_and_trees_recursively() {
        let plan = WatchPlan::new(&targets());
        let w = plan.watches();
        assert_eq!(
            w.get(Path::new("/r/etc/ssh")),
            Some(&RecursiveMode::NonRecursive)
        );
        assert_eq!(
            w.get(Path::new("/r/etc/nginx")),
            Some(&RecursiveMode::Recursive)
        );
        assert_eq!(w.len(), 2);
    }

    #[test]
    fn events_map_to_their_resources_only() {
        let plan = WatchPlan::new(&targets());
        let ev = notify::Event::new(EventKind::Modify(ModifyKind::Any))
            .add_path("/r/etc/nginx/sites/shop.conf".into());
        let Some(WatchNews::Changed(map)) = classify(&plan, Ok(ev)) else {
            panic!("expected a change");
        };
        let ids: Vec<String> = map["critical"].iter().map(|i| i.to_string()).collect();
        assert_eq!(ids, ["Tree[nginx]"]);
        // A neighbour of a watched file is not news.
        let ev = notify::Event::new(EventKind::Create(CreateKind::File))
            .add_path("/r/etc/ssh/ssh_config".into());
        assert_eq!(classify(&plan, Ok(ev)), None);
        // Reading a file (the check itself) is not news either.
        let ev = notify::Event::new(EventKind::Access(AccessKind::Open(AccessMode::Any)))
            .add_path("/r/etc/ssh/sshd_config".into());
        assert_eq!(classify(&plan, Ok(ev)), None);
        let ev = notify::Event::new(EventKind::Access(AccessKind::Close(AccessMode::Write)))
            .add_path("/r/etc/ssh/sshd_config".into());
        assert!(matches!(
            classify(&plan, Ok(ev)),
            Some(WatchNews::Changed(_))
        ));
    }

    #[test]
    fn relative_paths_match_the_absolute_paths_the_kernel_reports() {
        let plan = WatchPlan::new(&[critical(
            "File",
            "motd",
            "root/etc/motd",
            WatchScope::RegularFile,
        )]);
        let abs = std::env::current_dir().unwrap().join("root/etc/motd");
        let ev = notify::Event::new(EventKind::Modify(ModifyKind::Any)).add_path(abs);
        assert!(matches!(
            classify(&plan, Ok(ev)),
            Some(WatchNews::Changed(_))
        ));
    }

    #[test]
    fn overflow_and_limits_are_news() {
        let plan = WatchPlan::new(&targets());
        let ev = notify::Event::new(EventKind::Other).set_flag(Flag::Rescan);
        assert_eq!(classify(&plan, Ok(ev)), Some(WatchNews::Overflow));
        let err = notify::Error::new(notify::ErrorKind::MaxFilesWatch);
        assert!(matches!(
            classify(&plan, Err(err)),
            Some(WatchNews::Lost {
                reason: "limit",
                ..
            })
        ));
        let err = notify::Error::io(std::io::Error::from_raw_os_error(28));
        assert!(matches!(
            lost(&err),
            WatchNews::Lost {
                reason: "limit",
                ..
            }
        ));
        let err = notify::Error::generic("boom");
        assert!(matches!(
            lost(&err),
            WatchNews::Lost {
                reason: "backend",
                ..
            }
        ));
    }

    #[test]
    fn a_real_edit_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("motd");
        std::fs::write(&file, "a").unwrap();
        let plan = WatchPlan::new(&[critical(
            "File",
            "motd",
            file.clone(),
            WatchScope::RegularFile,
        )]);
        let (w, failures, rx) = watching(&plan);
        assert_eq!(w.watched(), 1);
        assert!(failures.is_empty());
        // Replace atomically, like an editor or an apply.
        let tmp = dir.path().join(".motd.tmp");
        std::fs::write(&tmp, "b").unwrap();
        std::fs::rename(&tmp, &file).unwrap();
        let news = rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap();
        assert!(matches!(news, WatchNews::Changed(m) if m.contains_key("critical")));
    }

    /// The kernel tells a folder's watch nothing of a write through a hard
    /// link in another folder; the file's own watch sees it. What stays
    /// uncovered: a file replaced since the watches were armed, until the
    /// next full pass arms them again.
    #[test]
    fn a_write_through_another_hard_link_is_seen() {
        use std::io::Write as _;
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("etc")).unwrap();
        std::fs::create_dir(dir.path().join("home")).unwrap();
        let file = dir.path().join("etc/motd");
        std::fs::write(&file, "a").unwrap();
        let link = dir.path().join("home/motd-link");
        std::fs::hard_link(&file, &link).unwrap();
        let plan = WatchPlan::new(&[critical(
            "File",
            "motd",
            file.clone(),
            WatchScope::RegularFile,
        )]);
        let (w, failures, rx) = watching(&plan);
        assert_eq!(w.watched(), 1);
        assert!(failures.is_empty(), "{failures:?}");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&link)
            .unwrap();
        f.write_all(b"b").unwrap();
        drop(f);
        let news = rx.recv_timeout(std::time::Duration::from_secs(5));
        assert!(
            matches!(&news, Ok(WatchNews::Changed(m)) if m.contains_key("critical")),
            "a write through another hard link was not seen: {news:?}"
        );
        // A file that does not exist yet is watched through its folder
        // only: no loss reported for it.
        let plan = WatchPlan::new(&[critical(
            "File",
            "later",
            dir.path().join("etc/later"),
            WatchScope::RegularFile,
        )]);
        let (w, failures) = Watcher::start(&plan, |_| {}).unwrap();
        assert_eq!(w.watched(), 1);
        assert!(failures.is_empty(), "{failures:?}");
        // A Symlink's path is watched through its folder only: a watch on
        // it would watch what it points at (a busy log, say).
        let target = dir.path().join("home/busy.log");
        std::fs::write(&target, "a").unwrap();
        let link = dir.path().join("etc/log");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let plan = WatchPlan::new(&[critical("Symlink", "log", link, WatchScope::Entry)]);
        assert_eq!(plan.files().count(), 0);
    }

    #[test]
    fn a_removed_watched_folder_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("tree");
        std::fs::create_dir(&tree).unwrap();
        let plan = WatchPlan::new(&[critical("Tree", "t", tree.clone(), WatchScope::Subtree)]);
        let (_w, failures, rx) = watching(&plan);
        assert!(failures.is_empty());
        std::fs::remove_dir(&tree).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut seen = Vec::new();
        while std::time::Instant::now() < deadline {
            if let Ok(n) = rx.recv_timeout(std::time::Duration::from_millis(100)) {
                let done = matches!(
                    n,
                    WatchNews::Lost {
                        reason: "missing",
                        ..
                    }
                );
                seen.push(n);
                if done {
                    return;
                }
            }
        }
        panic!("no loss reported: {seen:?}");
    }

    #[test]
    fn a_missing_folder_is_reported_not_hidden() {
        let plan = WatchPlan::new(&[critical(
            "Tree",
            "gone",
            "/nonexistent/datum-agent-test/tree",
            WatchScope::Subtree,
        )]);
        let (w, failures) = Watcher::start(&plan, |_| {}).unwrap();
        assert_eq!(w.watched(), 0);
        assert!(
            matches!(
                failures.as_slice(),
                [WatchNews::Lost {
                    reason: "missing",
                    ..
                }]
            ),
            "{failures:?}"
        );
    }
}
