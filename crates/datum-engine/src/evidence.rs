//! Evidence first: the content a change is about to destroy is saved in the
//! backup store before it goes, and a save that fails stops the change.
//!
//! What is saved: a regular file replaced by new declared content or
//! removed (File and the file-like types), and inside a Tree every regular
//! file whose content is overwritten, replaced by another type, or purged as
//! unmanaged (a purged folder: every regular file below it). When the
//! resource names a single-file validator, a content update is saved only
//! once the validator accepted the staged copy, just before the rename (for
//! a Tree, once its first staged entry is accepted), so content that
//! validation refused to write leaves no backup entry behind. A live file
//! is streamed into the store, never read whole; one larger than the store
//! keeps (`datum_store::backup::MAX_KEPT_BYTES`) is recorded by its size
//! and SHA-256 alone, and the change goes ahead.
//!
//! Must not: change the host (it reads the live files through the
//! boundary, never through a link).

use std::path::{Path, PathBuf};

use datum_core::{Action, Diff, Observed, Presence, Resource};
use datum_host::{Host, Located};

use crate::observe::Bound;
use datum_store::backup::{BackupReason, BackupStore, Retention, SavedFrom};

/// One live file to save before the change, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ToSave {
    pub declared: PathBuf,
    pub reason: BackupReason,
}

/// The live files `diff` would overwrite or remove.
pub(crate) fn to_save(bound: &Bound<'_>, observed: &Observed, diff: &Diff) -> Vec<ToSave> {
    if observed.presence != Presence::Present {
        // Absent: nothing to lose. Another type (a file where a folder is
        // declared) is saved below when it is a regular file.
        if !matches!(observed.presence, Presence::OtherType(_)) {
            return Vec::new();
        }
    }
    let paths = bound.provider.paths();
    if let Some(entries) = paths.and_then(|p| p.destroyed_entries(&bound.declared, observed)) {
        return entries
            .into_iter()
            .map(|(declared, removed)| ToSave {
                declared,
                reason: if removed {
                    BackupReason::Remove
                } else {
                    BackupReason::Update
                },
            })
            .collect();
    }
    let destroys_content = match diff.action() {
        Action::Remove | Action::Replace => true,
        Action::Update => diff.content.is_some(),
        _ => false,
    };
    // Something of another type is saved when it turns out to be a
    // regular file (`save` looks).
    let is_file = observed.meta.as_ref().is_some_and(|m| m.sha256.is_some())
        || matches!(observed.presence, Presence::OtherType(_));
    if !destroys_content || !is_file {
        return Vec::new();
    }
    let reason = if diff.action() == Action::Remove {
        BackupReason::Remove
    } else {
        BackupReason::Update
    };
    paths
        .map(|p| p.managed_paths(&bound.declared))
        .unwrap_or_default()
        .into_iter()
        .map(|declared| ToSave { declared, reason })
        .collect()
}

/// Why the evidence could not be kept (the change is then not made).
#[derive(Debug, thiserror::Error)]
#[error("cannot save the old content of {path} in the backup store ({source}): not replaced")]
pub(crate) struct NotSaved {
    path: String,
    source: Box<dyn std::error::Error + Send + Sync>,
}

/// Saves every regular file of `files` that is still there (inside a
/// folder, for a purge, every regular file below it); the first failure
/// stops (and is returned). Retention runs after the saves so the store
/// stays bounded.
pub(crate) fn save(
    host: &Host,
    backups: &mut BackupStore,
    resource: &Resource,
    files: &[ToSave],
    now: i64,
) -> Result<(), NotSaved> {
    let mut saved = false;
    for file in files {
        // Through the boundary: never evidence read through a link.
        let at = host
            .try_locate(&file.declared)
            .map_err(|e| not_saved(&file.declared, e))?;
        if let Some(at) = at {
            let mut saving = Saving {
                backups,
                resource,
                reason: file.reason,
                now,
                saved: &mut saved,
            };
            saving.entry(&at, &file.declared)?;
        }
    }
    if saved {
        // Pruning is housekeeping: the evidence is already kept.
        let _ = backups.prune(&Retention::default(), now);
    }
    Ok(())
}

fn not_saved(path: &Path, e: impl std::error::Error + Send + Sync + 'static) -> NotSaved {
    NotSaved {
        path: path.display().to_string(),
        source: Box::new(e),
    }
}

/// One save's settings, for the walk below a purged folder.
struct Saving<'a> {
    backups: &'a mut BackupStore,
    resource: &'a Resource,
    reason: BackupReason,
    now: i64,
    saved: &'a mut bool,
}

impl Saving<'_> {
    /// Saves `at` if it is a regular file; a folder is only entered for a
    /// removal (what a purge takes away with it); links and the rest hold
    /// no content to lose.
    fn entry(&mut self, at: &Located, declared: &Path) -> Result<(), NotSaved> {
        let Some(stat) = at.lstat().map_err(|e| not_saved(declared, e))? else {
            return Ok(());
        };
        match stat.kind {
            datum_host::fs::FileKind::File => self.file(at, declared),
            datum_host::fs::FileKind::Directory if self.reason == BackupReason::Remove => {
                match at.open_dir().map_err(|e| not_saved(declared, e))? {
                    Some(dir) => self.folder(dir, declared),
                    None => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }

    /// Saves the regular files below the folder `dir` (at `declared`), in
    /// the order a walk depth first in listing order meets them. The walk
    /// keeps a stack of its folders' listings, not a call per level (a
    /// local user's chain of folders 2,600 deep in a purged Tree overflowed
    /// the 8 MiB main thread's stack and aborted the apply), and holds at
    /// most a walk's share of folders open ([`datum_host::way`]).
    fn folder(&mut self, dir: datum_host::Dir, declared: &Path) -> Result<(), NotSaved> {
        let mut path = declared.to_path_buf();
        let mut way = datum_host::way::Way::new(
            dir.clone(),
            datum_host::descriptors::Budget::of_this_process().walk,
        )
        .map_err(|e| not_saved(&path, e))?;
        let mut stack = vec![dir.list().map_err(|e| not_saved(&path, e))?.into_iter()];
        while let Some(top) = stack.last_mut() {
            let Some((name, _)) = top.next() else {
                stack.pop();
                if !stack.is_empty() {
                    // Back in the folder above.
                    way.leave();
                    path.pop();
                }
                continue;
            };
            let here = way.here().map_err(|e| not_saved(&path, e))?;
            let at = here.entry(&name);
            path.push(&name);
            let stat = at.lstat().map_err(|e| not_saved(&path, e))?;
            match stat.map(|s| s.kind) {
                Some(datum_host::fs::FileKind::File) => self.file(&at, &path)?,
                Some(datum_host::fs::FileKind::Directory) => {
                    if let Some(sub) = at.open_dir().map_err(|e| not_saved(&path, e))? {
                        // Walked next; its name stays on `path` until it is done.
                        let listed = sub.list().map_err(|e| not_saved(&path, e))?;
                        way.enter(&name, sub).map_err(|e| not_saved(&path, e))?;
                        stack.push(listed.into_iter());
                        continue;
                    }
                }
                _ => {}
            }
            path.pop();
        }
        Ok(())
    }

    /// Saves the regular file `at` (at `declared`).
    fn file(&mut self, at: &Located, declared: &Path) -> Result<(), NotSaved> {
        // Streamed: a live file of any size costs a buffer, and one larger
        // than the store keeps leaves its size and digest (`content_kept:
        // false`), never fills the disk. Owner and mode are the opened
        // file's own: the name may hold another file since the look above
        // (a restore gives the bytes the owner and mode recorded with
        // them).
        let (mut file, stat) = at.open_file_stat().map_err(|e| not_saved(declared, e))?;
        let len = stat.meta.size;
        self.backups
            .save_from(
                &SavedFrom {
                    resource: &self.resource.id,
                    declared_path: declared,
                    len,
                    mode: stat.meta.mode,
                    uid: stat.meta.uid,
                    gid: stat.meta.gid,
                    reason: self.reason,
                    sensitive: self.resource.sensitive,
                    at: self.now,
                },
                &mut file,
            )
            .map_err(|e| not_saved(declared, e))?;
        *self.saved = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use datum_core::{ResourceId, diff::ContentChange};
    use serde_json::json;

    use datum_providers::Provider;

    use super::*;

    fn tree(purge: bool) -> Resource {
        // An empty source folder, packed as the catalogue packs one.
        let source = tempfile::tempdir().unwrap();
        let pack = datum_providers::lookup("Tree")
            .and_then(|p| p.source_folder())
            .expect("Tree takes a source folder");
        Resource {
            content: Some(pack.pack(source.path()).unwrap()),
            ..Resource::new(
                ResourceId::new("Tree", "t"),
                json!({"path": "/etc/t", "source": "tree", "purge": purge}),
            )
        }
    }

    fn bound<'a>(provider: &'a dyn Provider, resource: &'a Resource) -> Bound<'a> {
        Bound {
            provider,
            declared: provider.declare(resource).unwrap(),
        }
    }

    fn observed_tree() -> Observed {
        let mut o = Observed::absent();
        o.presence = Presence::Present;
        o.fields.insert(
            "tree".into(),
            json!([
                {"category": "changed", "path": "a.conf", "fields": ["content"]},
                {"category": "changed", "path": "m.conf", "fields": ["mode"]},
                {"category": "unmanaged", "path": "sub/stray.conf"},
                {"category": "missing", "path": "gone.conf"},
                {"category": "type_changed", "path": "d", "declared": "directory", "found": "file"},
            ]),
        );
        o
    }

    #[test]
    fn a_tree_saves_what_it_overwrites_and_what_purge_removes() {
        let provider = datum_providers::lookup("Tree").expect("Tree");
        let saved = |purge: bool| -> Vec<(String, BackupReason)> {
            let tree = tree(purge);
            to_save(&bound(provider, &tree), &observed_tree(), &Diff::default())
                .into_iter()
                .map(|s| (s.declared.display().to_string(), s.reason))
                .collect()
        };
        assert_eq!(
            saved(false),
            vec![
                ("/etc/t/a.conf".to_owned(), BackupReason::Update),
                ("/etc/t/d".to_owned(), BackupReason::Update),
            ]
        );
        assert_eq!(
            saved(true),
            vec![
                ("/etc/t/a.conf".to_owned(), BackupReason::Update),
                ("/etc/t/sub/stray.conf".to_owned(), BackupReason::Remove),
                ("/etc/t/d".to_owned(), BackupReason::Update),
            ]
        );
    }

    #[test]
    fn a_file_saves_only_when_content_goes() {
        let provider = datum_providers::lookup("File").expect("File");
        let file = Resource::new(ResourceId::new("File", "f"), json!({"path": "/f"}));
        let mut present = Observed::absent();
        present.presence = Presence::Present;
        present.meta = Some(datum_core::FileMeta {
            sha256: Some("ab".into()),
            ..datum_core::FileMeta::default()
        });
        let mut diff = Diff {
            action: Some(Action::Update),
            ..Diff::default()
        };
        // A mode change keeps the content: nothing to save.
        assert!(to_save(&bound(provider, &file), &present, &diff).is_empty());
        diff.content = Some(Box::new(ContentChange {
            before: None,
            after: b"new".to_vec(),
            before_sha256: Some("ab".into()),
            after_sha256: "cd".into(),
            live_withheld: false,
            declared_unread: false,
        }));
        let saved = to_save(&bound(provider, &file), &present, &diff);
        assert_eq!(saved.len(), 1);
        assert_eq!(saved[0].reason, BackupReason::Update);
        // Nothing there: nothing to lose.
        assert!(to_save(&bound(provider, &file), &Observed::absent(), &diff).is_empty());
    }

    #[test]
    fn a_saved_file_keeps_its_own_mode_whatever_the_name_holds_next() {
        // The owner of the folder puts another user's private file (0600)
        // and the managed one (0644) in turn at the name while the evidence
        // is saved (here each linked there by an atomic rename, so the name
        // is never empty):
        // the bytes saved must carry the mode of the file they came from,
        // or a restore writes the private bytes out under 0644.
        use std::os::unix::fs::PermissionsExt;
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let root = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let host = Host::new(root.path());
        let mut backups = BackupStore::open(&state.path().join("backups")).unwrap();
        let resource = Resource::new(
            ResourceId::new("File", "notes"),
            json!({"path": "/notes", "content": "declared"}),
        );
        // Two files, each linked in turn over the managed name by an
        // atomic rename: the name always holds one of them.
        let (notes, spare) = (root.path().join("notes"), root.path().join(".spare"));
        let sources = [("public", 0o644), ("private", 0o600)].map(|(text, mode)| {
            let path = root.path().join(text);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            path
        });
        std::fs::hard_link(&sources[0], &notes).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (notes, spare, stop) = (notes.clone(), spare.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for source in &sources {
                        let _ = std::fs::remove_file(&spare);
                        let _ = std::fs::hard_link(source, &spare);
                        let _ = std::fs::rename(&spare, &notes);
                    }
                }
            })
        };
        let files = [ToSave {
            declared: PathBuf::from("/notes"),
            reason: BackupReason::Update,
        }];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(4);
        let (mut i, mut checked, mut wrong) = (0, 0, 0);
        let mut seen = std::collections::HashSet::new();
        while std::time::Instant::now() < deadline {
            i += 1;
            let _ = save(&host, &mut backups, &resource, &files, i);
            // Each save is looked at before the store's retention drops it.
            for entry in backups.list(None).unwrap() {
                if !seen.insert(entry.id) {
                    continue;
                }
                let (entry, bytes) = backups.get(entry.id).unwrap();
                let want = if bytes.starts_with(b"private") {
                    0o600
                } else {
                    0o644
                };
                checked += 1;
                wrong += usize::from(entry.mode & 0o7777 != want);
            }
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        assert!(checked > 0);
        assert_eq!(
            wrong, 0,
            "{wrong} of {checked} saves took another file's mode"
        );
    }

    /// The files below a purged folder at the bottom of a chain far deeper
    /// than a thread's stack allows a call per level (3,000, as a local user
    /// may make in a purged Tree) are saved on a 256 KiB thread.
    #[test]
    fn a_chain_of_folders_deeper_than_the_stack_allows_calls_is_saved() {
        use std::os::fd::AsRawFd;
        const DEPTH: usize = 3000;
        let root = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("t/u")).unwrap();
        let host = Host::new(root.path());
        let mut here = host
            .locate(Path::new("/t/u"))
            .unwrap()
            .open_dir()
            .unwrap()
            .unwrap();
        for _ in 0..DEPTH {
            let d = std::ffi::OsStr::new("d");
            here.entry(d).create_dir(0o755, None, None).unwrap();
            here = here.open_child_dir(d).unwrap().unwrap();
        }
        // Named through the open folder: the path is longer than the
        // system allows.
        std::fs::write(
            format!("/proc/self/fd/{}/f", here.fd().as_raw_fd()),
            "bottom",
        )
        .unwrap();
        let resource = Resource::new(
            ResourceId::new("Tree", "t"),
            json!({"path": "/t", "source": "tree", "purge": true}),
        );
        let (backups, _state) = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                let mut backups = BackupStore::open(&state.path().join("backups")).unwrap();
                let files = [ToSave {
                    declared: PathBuf::from("/t/u"),
                    reason: BackupReason::Remove,
                }];
                save(&host, &mut backups, &resource, &files, 1).unwrap();
                (backups, state)
            })
            .unwrap()
            .join()
            .unwrap();
        let saved = backups.list(None).unwrap();
        assert_eq!(saved.len(), 1);
        let mut bottom = PathBuf::from("/t/u");
        bottom.extend(std::iter::repeat_n("d", DEPTH));
        assert_eq!(saved[0].path, bottom.join("f"));
        assert_eq!(backups.get(saved[0].id).unwrap().1, b"bottom");
    }
}
