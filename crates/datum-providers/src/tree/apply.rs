//! Activation: the walk over the declared entries from `stage` through
//! each `activate` (folders, links, owners and modes set as it reaches
//! them, each changed file staged for the engine's validator before it goes
//! live).

use std::path::Path;

use datum_fingerprint::{Algorithm, Exclusions};
use datum_host::fs::{FileKind, Stat};
use datum_host::{Dir, Host, HostError, Located};

use super::archive::EntryRef;
use super::observe::{FOLDER_KEEPING_EXCLUDED, bytes_path, holds_excluded};
use super::{DEFAULT_DIR_MODE, DEFAULT_FILE_MODE, Folders, TreeDesired, excluded};
use crate::common::meta::in_place_strands_a_writer;
use crate::{Planned, ProviderError};

/// What a Tree carries from `stage` through each `activate`: the plan, and
/// where the walk over the declared entries stands. A Tree's change is many
/// entries; folders, links, owners and modes are set as the walk reaches
/// them, and each file whose content changes is staged beside its target
/// and handed back to the engine
/// ([`Activated::Next`](crate::Activated::Next)), which runs the
/// Tree's validator on it and keeps the evidence before the next
/// `activate` renames it over the live file. An entry the engine refuses
/// is discarded; the entries before it are live (a Tree is not one atomic
/// change; `datum plan` runs the validator on every changed entry first).
pub struct TreeStaging {
    pub(super) planned: Planned,
    pub(super) walk: Option<Walk>,
}

/// The walk of one Tree's activation, between two calls of `activate`.
pub(super) struct Walk {
    uid: Option<u32>,
    gid: Option<u32>,
    exclusions: Exclusions,
    live: Dir,
    folders: Folders,
    /// The next declared entry to handle (its position in tree order).
    next: usize,
    /// The file staged for the engine to check, not yet live.
    pub(super) pending: Option<crate::file::StagedContent>,
    /// A folder where `pending` goes, removed just before it goes live.
    pub(super) in_the_way: Option<InTheWay>,
}

impl Walk {
    /// Owner, exclusions, and the tree's own folder, made as declared.
    pub(super) fn start(host: &Host, d: &TreeDesired) -> Result<Walk, ProviderError> {
        let root = host.locate(&d.path)?;
        let (uid, gid) = d.meta.resolve(host)?;
        // Checked before anything is made; then made for where the
        // folder really is.
        d.exclusions()?;
        ensure_dir(host, &root, uid, gid, d.dir_mode)?;
        let Some(live) = root.open_dir()? else {
            return Err(HostError::MissingParent {
                path: root.path().to_path_buf(),
                parent: root.path().to_path_buf(),
            }
            .into());
        };
        let exclusions = d.exclusions_in(host, &live)?;
        Ok(Walk {
            uid,
            gid,
            exclusions,
            folders: Folders::new(live.clone())?,
            live,
            next: 0,
            pending: None,
            in_the_way: None,
        })
    }

    /// Makes each declared entry after the last one handled match, in path
    /// order (parents first), until a file's new content is staged (`true`:
    /// it is in `pending`) or the declared entries are done; then (with
    /// `purge`) removes the unmanaged entries (`false`). Every check is made
    /// afresh on the live entry, and every entry is reached from the tree's
    /// own handle, one folder at a time, without following a link.
    pub(super) fn advance(&mut self, host: &Host, d: &TreeDesired) -> Result<bool, ProviderError> {
        while let Some((path, entry)) = d.entries.at(self.next) {
            self.next += 1;
            let rel = bytes_path(path);
            let is_dir = matches!(entry, EntryRef::Dir);
            if excluded(&self.exclusions, rel, is_dir) {
                continue;
            }
            let target = self.folders.entry(rel)?;
            match entry {
                EntryRef::Dir => ensure_dir(host, &target, self.uid, self.gid, d.dir_mode)?,
                EntryRef::File { blake3, size } => {
                    let source = d.entries.source_of(path);
                    let want = Declared {
                        blake3,
                        size,
                        source: &source,
                    };
                    // A folder in the way is found by the staging's own
                    // look at the entry (no second one per file).
                    let mut in_the_way = None;
                    let staged =
                        match stage_file(host, &target, want, self.uid, self.gid, d.meta.mode) {
                            Err(ProviderError::Host(HostError::InTheWay { .. }))
                                if let Some(id) = self.clear(d, &target, rel)? =>
                            {
                                in_the_way = Some(id);
                                Some(stage_new_file(
                                    host,
                                    &target,
                                    want,
                                    self.uid,
                                    self.gid,
                                    d.meta.mode,
                                )?)
                            }
                            other => other?,
                        };
                    if let Some(staged) = staged {
                        self.pending = Some(staged);
                        self.in_the_way = in_the_way.map(|id| InTheWay { at: target, id });
                        return Ok(true);
                    }
                }
                EntryRef::Symlink(to) => {
                    if let Some(id) = self.clear(d, &target, rel)? {
                        remove_if_same(&target, id)?;
                    }
                    ensure_link(host, &target, to)?;
                }
            }
        }
        if d.purge {
            let mut found = Vec::new();
            unmanaged(&self.live, Path::new(""), d, &self.exclusions, &mut found)?;
            purge(&mut self.folders, &found)?;
        }
        Ok(false)
    }

    /// Whether `target` (at `rel`) is a folder where a file or link is
    /// declared that a purging tree removes (`Some`: when the new entry
    /// goes live, and only while it is that folder, the one looked into
    /// here: [`remove_if_same`]). Its entries are unmanaged, which
    /// `purge: true` asks to remove (the engine saved its files first),
    /// unless one is excluded: then it stays, and the entry fails. Without
    /// `purge` a folder in the way is a failure, as ever.
    fn clear(
        &self,
        d: &TreeDesired,
        target: &Located,
        rel: &Path,
    ) -> Result<Option<Identity>, ProviderError> {
        if !d.purge
            || target
                .lstat()?
                .is_none_or(|s| s.kind != FileKind::Directory)
        {
            return Ok(None);
        }
        let Some(dir) = target.open_dir()? else {
            return Ok(None);
        };
        if holds_excluded(&dir, rel, &self.exclusions, &mut Default::default())? {
            return Err(HostError::InTheWay {
                path: target.path().to_path_buf(),
                found: FOLDER_KEEPING_EXCLUDED.to_owned(),
            }
            .into());
        }
        Identity::of_dir(&dir).map(Some)
    }
}

/// A folder where a purging Tree declares a file, which the engine's
/// check of the staged file let go: removed just before the file goes
/// live, while it is still the folder `Walk::clear` found holding nothing
/// excluded (else the Tree fails: whoever may write in its folder may have
/// swapped it for one holding an excluded entry meanwhile).
pub(super) struct InTheWay {
    at: Located,
    id: Identity,
}

impl InTheWay {
    /// Removes the folder and everything in it, if it is the one found
    /// ([`remove_if_same`]).
    pub(super) fn remove_all(&self) -> Result<(), ProviderError> {
        remove_if_same(&self.at, self.id)
    }
}

/// Adds to `found` the host entries below the folder `dir` (at `rel` in
/// the tree) that nothing declares and no rule excludes: what the
/// observation's comparison calls unmanaged, each at its topmost path, an
/// undeclared folder holding an excluded entry looked into (only what else
/// it holds is unmanaged, as `holds_excluded` decides for the
/// observation). Found by listing folders, without following a link and
/// without reading any file: the purge needs names, not content (before,
/// it scanned and hashed the whole tree again, every file's bytes, at the
/// end of each apply that changed it). The folders looked into are walked
/// depth first from a stack kept here, not by a call per level (a local
/// user's chain of folders 3,000 deep holding an excluded entry overflowed
/// the stack and aborted the pass), holding at most a walk's share of
/// descriptors ([`datum_host::way`]). An undeclared folder is looked into
/// by `holds_excluded` once: the folders it finds holding an excluded
/// entry are remembered, so the folders inside it are not looked into
/// again at each level (a chain of them was read once per folder above it).
///
/// Each entry found comes with the device and inode of itself and of the
/// folder it was listed in, looked at through the handle that was listed
/// (and, for a folder, the one `holds_excluded` looked into), for
/// [`purge`] to check. A folder found is looked into through the very
/// handle it is then listed by; one that `holds_excluded` did not find
/// kept, below a kept folder (reached again by its name, which whoever
/// may write in its parent can swap since), is looked into again through
/// its own handle before it is called unmanaged: once more for what the
/// purge removes, never for what it keeps.
fn unmanaged(
    dir: &Dir,
    rel: &Path,
    d: &TreeDesired,
    exclusions: &Exclusions,
    found: &mut Vec<Listed>,
) -> Result<(), ProviderError> {
    use std::os::unix::ffi::OsStrExt as _;
    /// A folder being listed: its entries not looked at yet, whether it is
    /// an undeclared folder kept for the excluded entries it holds
    /// (`holds_excluded` has then looked into everything below it), and
    /// which folder it is.
    struct Open {
        entries: std::vec::IntoIter<(std::ffi::OsString, FileKind)>,
        kept: bool,
        id: Identity,
    }
    let mut way = datum_host::way::Way::new(
        dir.clone(),
        datum_host::descriptors::Budget::of_this_process().walk,
    )?;
    // The undeclared folders found holding an excluded entry.
    let mut kept = super::observe::KeptFolders::default();
    let mut path = rel.to_path_buf();
    let mut stack = vec![Open {
        entries: dir.list()?.into_iter(),
        kept: false,
        id: Identity::of_dir(dir)?,
    }];
    while let Some(top) = stack.last_mut() {
        let Some((name, kind)) = top.entries.next() else {
            stack.pop();
            if !stack.is_empty() {
                // Back in the folder above.
                way.leave();
                path.pop();
            }
            continue;
        };
        path.push(&name);
        let child = &path;
        let is_dir = kind == FileKind::Directory;
        if exclusions.is_excluded(child, is_dir) {
            path.pop();
            continue;
        }
        // A declared entry its rules exclude is not declared (the
        // comparison passes over it).
        let declared = d
            .entries
            .get(child.as_os_str().as_bytes())
            .filter(|e| !exclusions.is_excluded(child, matches!(e, EntryRef::Dir)));
        // Whether to look into it, whether it is kept, and the handle
        // already open on it.
        let look_into = match declared {
            Some(EntryRef::Dir) => is_dir.then_some((false, None)),
            // Declared, of its kind or not: the walk made it what it is.
            Some(_) => None,
            None if !is_dir => {
                match way.here()?.lstat_entry(&name)? {
                    // Gone since the listing: nothing to remove.
                    None => {}
                    // A folder now, which nothing looked into.
                    Some(stat) if stat.kind == FileKind::Directory => {
                        return Err(moved_while_purging(way.here()?.path().join(&name)));
                    }
                    Some(stat) => found.push(Listed {
                        path: child.clone(),
                        folder: top.id,
                        entry: Identity::of(&stat),
                    }),
                }
                None
            }
            None => {
                // `holds_excluded` passes over staging litter: such a
                // folder is looked into on its own.
                let litter = name
                    .as_encoded_bytes()
                    .starts_with(datum_host::staging::STAGE_PREFIX.as_bytes());
                if top.kept && !litter && kept.contains(child) {
                    Some((true, None))
                } else {
                    match way.here()?.open_child_dir(&name)? {
                        // Gone since the listing: nothing to remove.
                        None => None,
                        Some(sub) if holds_excluded(&sub, child, exclusions, &mut kept)? => {
                            Some((true, Some(sub)))
                        }
                        Some(sub) => {
                            found.push(Listed {
                                path: child.clone(),
                                folder: top.id,
                                entry: Identity::of_dir(&sub)?,
                            });
                            None
                        }
                    }
                }
            }
        };
        if let Some((kept, opened)) = look_into {
            let sub = match opened {
                Some(sub) => Some(sub),
                None => way.here()?.open_child_dir(&name)?,
            };
            if let Some(sub) = sub {
                // Listed next; its name stays on `path` until it is done.
                let entries = sub.list()?.into_iter();
                let id = Identity::of_dir(&sub)?;
                way.enter(&name, sub)?;
                stack.push(Open { entries, kept, id });
                continue;
            }
        }
        path.pop();
    }
    Ok(())
}

/// An entry the purge's listing found unmanaged ([`unmanaged`]): its path
/// in the tree, and which entry it was and in which folder, for [`purge`]
/// to remove that entry or nothing.
struct Listed {
    path: std::path::PathBuf,
    folder: Identity,
    entry: Identity,
}

/// Which file or folder an entry is: its device and inode.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Identity {
    dev: u64,
    inode: u64,
}

impl Identity {
    fn of(stat: &Stat) -> Identity {
        Identity {
            dev: stat.meta.dev,
            inode: stat.meta.inode,
        }
    }

    /// The folder `dir` is open on (looked at through that handle).
    fn of_dir(dir: &Dir) -> Result<Identity, ProviderError> {
        match dir.lstat_entry(std::ffi::OsStr::new("."))? {
            Some(stat) => Ok(Identity::of(&stat)),
            None => Err(moved_while_purging(dir.path().to_path_buf())),
        }
    }
}

/// The purge's failure when what it is about to remove is not what its
/// listing found there.
fn moved_while_purging(path: std::path::PathBuf) -> ProviderError {
    HostError::io(
        "purge",
        path,
        std::io::Error::other(
            "it was moved or replaced while the purge ran (whoever may write in its \
             folder can swap it); the purge removed nothing more",
        ),
    )
    .into()
}

/// Removes the entries [`unmanaged`] listed, in order, each only while it
/// is the entry listed in the folder it was listed in: its folder is
/// reached again from the tree's root (one folder at a time, without
/// following a link) and must be the folder listed, the entry there
/// (looked at without following a link) the entry listed, and a folder is
/// emptied through a handle that must be open on it. Else the purge fails
/// ([`moved_while_purging`]) and removes nothing more (what it removed
/// before stays removed): whoever may write in a kept folder may have
/// swapped it, or a folder in it, for one holding an excluded entry,
/// which must never be removed. (The engine saved, before the apply,
/// what the observation found unmanaged: an entry swapped in after the
/// listing is refused here; one swapped in before it is listed as it is,
/// its excluded entries kept.)
fn purge(folders: &mut Folders, found: &[Listed]) -> Result<(), ProviderError> {
    for listed in found {
        let Some(name) = listed.path.file_name() else {
            return Err(moved_while_purging(listed.path.clone()));
        };
        let parent = match folders.dir(listed.path.parent().unwrap_or(Path::new(""))) {
            Ok(parent) => parent,
            Err(ProviderError::Host(HostError::MissingParent { path, .. })) => {
                return Err(moved_while_purging(path));
            }
            Err(e) => return Err(e),
        };
        if Identity::of_dir(&parent)? != listed.folder {
            return Err(moved_while_purging(parent.path().join(name)));
        }
        remove_if_same(&parent.entry(name), listed.entry)?;
    }
    Ok(())
}

/// Removes the entry `at` (a folder with everything in it) only while it
/// is `id`: looked at without following a link, then a folder emptied
/// through a handle checked to be open on it, and removed while its name
/// still holds it; else [`moved_while_purging`], and nothing more is
/// removed. Nothing there is no error (nothing to remove). Whoever may
/// write in the entry's folder can still swap a name between the look and
/// the removal: a file's `unlink` then takes only the name (never a
/// folder), and a folder's `rmdir` only an empty folder.
fn remove_if_same(at: &Located, id: Identity) -> Result<(), ProviderError> {
    let Some(stat) = at.lstat()? else {
        return Ok(());
    };
    if Identity::of(&stat) != id {
        return Err(moved_while_purging(at.path().to_path_buf()));
    }
    if stat.kind != FileKind::Directory {
        at.remove_file()?;
        return Ok(());
    }
    let Some(dir) = at.parent().open_child_dir(at.name())? else {
        return Ok(());
    };
    if Identity::of_dir(&dir)? != id {
        return Err(moved_while_purging(at.path().to_path_buf()));
    }
    for (inner, _) in dir.list()? {
        dir.entry(&inner).remove_all()?;
    }
    drop(dir);
    match at.lstat()? {
        Some(stat) if Identity::of(&stat) == id => Ok(at.remove_dir()?),
        _ => Err(moved_while_purging(at.path().to_path_buf())),
    }
}

fn ensure_dir(
    host: &Host,
    at: &Located,
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
) -> Result<(), ProviderError> {
    match at.lstat()? {
        Some(stat) if stat.kind == FileKind::Directory => {
            fix_meta(at, &stat, uid, gid, mode)?;
            return Ok(());
        }
        // A file or link where a folder is declared: inside an owned tree it
        // is replaced.
        Some(_) => at.remove_file()?,
        None => {}
    }
    host.forget_dirs_under(&at.declared());
    at.create_dir(mode.unwrap_or(DEFAULT_DIR_MODE), uid, gid)?;
    Ok(())
}

/// Sets the declared owner, group and mode where they differ from `seen`
/// (the entry's `lstat`), on that very entry or on nothing. A chown clears
/// set-id bits, so the mode (declared, or as it was) is set again after one.
fn fix_meta(
    at: &Located,
    seen: &Stat,
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
) -> Result<(), ProviderError> {
    if let Some(set) = meta_changes(&seen.meta, uid, gid, mode) {
        at.set_metadata(seen, set.uid, set.gid, set.mode)?;
    }
    Ok(())
}

/// What [`meta_changes`] found must be set: each `None` is left as it is.
struct MetaToSet {
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
}

/// What [`fix_meta`] would set (owner, group, mode), or `None` when
/// everything declared is as observed.
fn meta_changes(
    meta: &datum_core::FileMeta,
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
) -> Option<MetaToSet> {
    let uid = uid.filter(|u| *u != meta.uid);
    let gid = gid.filter(|g| *g != meta.gid);
    let owner_changes = uid.is_some() || gid.is_some();
    let mode = match mode {
        Some(m) if m != meta.mode || owner_changes => Some(m),
        None if owner_changes => Some(meta.mode),
        _ => None,
    };
    (owner_changes || mode.is_some()).then_some(MetaToSet { uid, gid, mode })
}

/// A declared file: its hash and the repository file holding its bytes.
#[derive(Clone, Copy)]
struct Declared<'a> {
    blake3: &'a [u8; 32],
    size: u64,
    source: &'a Path,
}

pub(super) fn same_content(bytes: &[u8], blake3: &[u8; 32]) -> bool {
    Algorithm::Native.hash_content(bytes).digest.0 == *blake3
}

/// Whether the live regular file at `at` (of `len` bytes by its `lstat`)
/// holds the declared content: sizes first, then its BLAKE3 streamed
/// through a fixed buffer, so a live file of any size costs the same
/// memory.
fn live_holds(at: &Located, seen: &Stat, want: &Declared<'_>) -> Result<bool, HostError> {
    if seen.meta.size != want.size {
        return Ok(false);
    }
    // The file opened must be the one looked at (`seen`, the lstat the
    // change in place is then tied to): the folder's owner may swap the
    // name between the two, to have another file's bytes compared and
    // their own file (a root-owned secret) given the mode.
    let (mut file, opened) = at.open_file_stat()?;
    if opened.meta.dev != seen.meta.dev
        || opened.meta.inode != seen.meta.inode
        || opened.meta.size != want.size
    {
        return Ok(false);
    }
    let mut hasher = Algorithm::Native.content_hasher();
    datum_host::fs::read_through(&mut file, at.path(), |chunk| hasher.update(chunk))?;
    Ok(hasher.finish().digest.0 == *want.blake3)
}

/// A declared file's new content staged beside `at` (with owner, group and
/// mode), or `None` when the live file already holds it (its owner, group
/// and mode are then set as declared).
fn stage_file(
    host: &Host,
    at: &Located,
    want: Declared<'_>,
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
) -> Result<Option<crate::file::StagedContent>, ProviderError> {
    let current = at.lstat()?;
    let mut kept_mode = None;
    let mut kept_owner = (None, None);
    if let Some(stat) = &current {
        match stat.kind {
            FileKind::Directory => {
                return Err(HostError::InTheWay {
                    path: at.path().to_path_buf(),
                    found: "directory".to_owned(),
                }
                .into());
            }
            FileKind::File => {
                // A hard-linked file whose owner or mode must change is
                // rewritten instead: a change in place would reach its other
                // names (the host refuses it).
                // So is one to be made set-id: that bit goes only to the
                // bytes written from the repository (the live ones may be
                // swapped between the comparison and the change). And one
                // whose owner, group or mode changes while someone who may
                // not write it afterwards could have opened it for writing
                // (`in_place_strands_a_writer`: a non-root owner replaced,
                // group or other write bits taken away): they may hold it
                // open and write their bytes into it once it is the new
                // owner's or closed to them (root's, which some root-run
                // programs take as a sign of trust); a new file has no such
                // writer. Otherwise (the usual tree-wide change of owner or
                // group of root's files, a read or execute bit) it is
                // changed in place.
                let rewrite = meta_changes(&stat.meta, uid, gid, mode).is_some_and(|set| {
                    stat.links > 1
                        || set.mode.unwrap_or(stat.meta.mode) & 0o6000 != 0
                        || in_place_strands_a_writer(&stat.meta, set.uid, set.gid, set.mode)
                });
                if !rewrite && live_holds(at, stat, &want)? {
                    fix_meta(at, stat, uid, gid, mode)?;
                    return Ok(None);
                }
                if rewrite {
                    // The new file keeps what was not declared, as the
                    // change in place would have.
                    kept_owner = (Some(stat.meta.uid), Some(stat.meta.gid));
                }
                // An undeclared mode carries over to the rewritten file.
                kept_mode = Some(stat.meta.mode);
            }
            _ => {}
        }
    }
    // The bytes come from the repository now (see `stage_content`).
    let bytes =
        datum_host::repo::read(want.source).map_err(|e| HostError::io("read", want.source, e))?;
    let mode = mode.or(kept_mode).unwrap_or(DEFAULT_FILE_MODE);
    let (uid, gid) = (uid.or(kept_owner.0), gid.or(kept_owner.1));
    stage_content(host, at, want, bytes, uid, gid, mode).map(Some)
}

/// A declared file's content staged beside `at`, whatever is there now (a
/// folder the purge removes before the rename).
fn stage_new_file(
    host: &Host,
    at: &Located,
    want: Declared<'_>,
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
) -> Result<crate::file::StagedContent, ProviderError> {
    let bytes =
        datum_host::repo::read(want.source).map_err(|e| HostError::io("read", want.source, e))?;
    let mode = mode.unwrap_or(DEFAULT_FILE_MODE);
    stage_content(host, at, want, bytes, uid, gid, mode)
}

/// `bytes`, read from the repository now, staged beside `at`; refused when
/// the source changed since the catalogue hashed it (it would not be what
/// was checked).
fn stage_content(
    host: &Host,
    at: &Located,
    want: Declared<'_>,
    bytes: Vec<u8>,
    uid: Option<u32>,
    gid: Option<u32>,
    mode: u32,
) -> Result<crate::file::StagedContent, ProviderError> {
    if !same_content(&bytes, want.blake3) {
        return Err(ProviderError::Invalid {
            field: "source".to_owned(),
            message: format!(
                "{} changed since the catalogue was compiled; compile again",
                want.source.display()
            ),
        });
    }
    crate::file::StagedContent::write(host, at, bytes, uid, gid, mode)
}

/// Makes `at` a link to `to`. A link or file already there is replaced as
/// the Symlink kind replaces it: the new link staged beside it and renamed
/// over it, so there is no moment (and no killed pass) without one.
fn ensure_link(host: &Host, at: &Located, to: &[u8]) -> Result<(), ProviderError> {
    let target = bytes_path(to);
    match at.lstat()? {
        Some(stat) if stat.kind == FileKind::Symlink && at.read_link()? == target => Ok(()),
        Some(stat) if stat.kind == FileKind::Directory => Err(HostError::InTheWay {
            path: at.path().to_path_buf(),
            found: "directory".to_owned(),
        }
        .into()),
        Some(_) => {
            host.sweep_stale_staging(at.parent())?;
            at.stage_symlink(target)?.commit()?;
            Ok(())
        }
        None => Ok(at.symlink(target)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Tree's link whose target changes is replaced by a rename, as the
    /// Symlink kind does: a reader never finds it missing. Before, it was
    /// removed and made again, and a pass killed between the two (or a
    /// reader in that moment) found no link at all.
    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "the reader looks at the link directly, as any program would"
    )]
    fn a_retargeted_link_is_never_missing() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let host = Host::with_name(dir.path(), "test-host");
        let at = host.locate(Path::new("/ln")).unwrap();
        ensure_link(&host, &at, b"a").unwrap();
        let (path, stop) = (dir.path().join("ln"), Arc::new(AtomicBool::new(false)));
        let reader = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut missing = 0;
                while !stop.load(Ordering::Relaxed) {
                    missing += usize::from(std::fs::symlink_metadata(&path).is_err());
                }
                missing
            })
        };
        for i in 0..400 {
            let to: &[u8] = if i % 2 == 0 { b"b" } else { b"a" };
            ensure_link(&host, &at, to).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        assert_eq!(reader.join().unwrap(), 0, "the link was missing");
        assert_eq!(at.read_link().unwrap(), Path::new("a"));
        // A file in the way is replaced the same way; a folder is refused.
        let file = host.locate(Path::new("/f")).unwrap();
        std::fs::write(dir.path().join("f"), "x").unwrap();
        ensure_link(&host, &file, b"a").unwrap();
        assert_eq!(file.read_link().unwrap(), Path::new("a"));
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let folder = host.locate(Path::new("/d")).unwrap();
        assert!(ensure_link(&host, &folder, b"a").is_err());
    }

    /// The Tree declared by the repository folder `source` with `desired`.
    fn tree_of(source: &Path, desired: serde_json::Value) -> TreeDesired {
        let resource = datum_core::Resource {
            id: datum_core::ResourceId::new("Tree", "t"),
            desired: desired.into(),
            content: Some(super::super::archive::pack_source_dir(source).unwrap()),
            requires: vec![],
            class: "normal".to_owned(),
            sensitive: false,
            sensitive_by_field_only: false,
            validate: None,
            origin: datum_core::Origin::default(),
            field_origins: Default::default(),
            declaration_hash: String::new(),
            held: Default::default(),
        };
        TreeDesired::from_resource(&resource).unwrap()
    }

    /// Writes `files` (path, bytes; a path ending in `/` a folder) below
    /// `dir`.
    fn write_all(dir: &Path, files: &[(&str, &str)]) {
        for (path, bytes) in files {
            let at = dir.join(path);
            if path.ends_with('/') {
                std::fs::create_dir_all(&at).unwrap();
            } else {
                std::fs::create_dir_all(at.parent().unwrap()).unwrap();
                std::fs::write(&at, bytes).unwrap();
            }
        }
    }

    #[test]
    fn the_purges_listing_finds_what_the_comparison_calls_unmanaged() {
        // What the purge removes is found by listing folders; it is what
        // the observation's comparison (a scan hashing every file) calls
        // unmanaged: strays at their topmost path, a folder holding an
        // excluded entry looked into, excluded entries and staging litter
        // left out, declared entries of another kind left to the walk, a
        // link never followed, a declared folder its rules exclude not
        // declared.
        let repo = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        let declared = [
            ("a/x", "x"),
            ("a/b/y", "y"),
            ("f", "f"),
            ("c", "c"),
            ("d/z", "z"),
            ("cache/z", "z"),
            ("e/", ""),
        ];
        write_all(&repo.path().join("t"), &declared);
        std::os::unix::fs::symlink("f", repo.path().join("t/ln")).unwrap();
        let d = tree_of(
            &repo.path().join("t"),
            serde_json::json!({"path": "/t", "source": "t", "purge": true, "exclude": ["*.local", "cache/"]}),
        );
        let live = root.path().join("t");
        write_all(
            &live,
            &[
                ("a/x", "x"),
                ("a/b/y", "y"),
                ("a/stray", "s"),
                ("a/b/strayd/deep", "s"),
                ("f", "f"),
                ("c/inner", "in a folder where a file is declared"),
                ("d", "a file where a folder is declared"),
                ("cache", "a file where an excluded folder is declared"),
                ("e/", ""),
                ("x.local", "excluded"),
                ("a/cache/kept", "excluded with its folder"),
                ("u/keep.local", "k"),
                ("u/other", "o"),
                ("u/sub/z", "z"),
                ("u/sub2/w.local", "w"),
                ("u/sub2/v/w", "w"),
                (".datum.stage.0123456789abcdef/a", "litter"),
                ("v/.datum.stage.0123456789abcdef/a", "litter"),
            ],
        );
        std::os::unix::fs::symlink("f", live.join("ln")).unwrap();
        std::os::unix::fs::symlink("/", live.join("evil")).unwrap();
        let host = Host::with_name(root.path(), "test-host");
        let dir = host
            .locate(Path::new("/t"))
            .unwrap()
            .open_dir()
            .unwrap()
            .unwrap();
        let exclusions = d.exclusions_in(&host, &dir).unwrap();
        let mut listed = Vec::new();
        unmanaged(&dir, Path::new(""), &d, &exclusions, &mut listed).unwrap();
        let mut listed: Vec<_> = listed.into_iter().map(|l| l.path).collect();
        listed.sort();
        let mut compared: Vec<std::path::PathBuf> = super::super::differences(&host, &d, &dir)
            .unwrap()
            .into_iter()
            .filter_map(|found| match found {
                datum_fingerprint::TreeDifference::Unmanaged { path } => Some(path),
                _ => None,
            })
            .collect();
        compared.sort();
        let shown = |paths: &[std::path::PathBuf]| -> Vec<String> {
            paths.iter().map(|p| p.display().to_string()).collect()
        };
        assert_eq!(
            shown(&listed),
            [
                "a/b/strayd",
                "a/stray",
                "cache",
                "evil",
                "u/other",
                "u/sub",
                "u/sub2/v",
                "v"
            ]
        );
        assert_eq!(shown(&listed), shown(&compared));
    }

    /// A chain of undeclared folders far deeper than a thread's stack allows
    /// a call per level (3,000, as a local user may make in a purged Tree),
    /// with an excluded entry at the bottom, is listed on a 256 KiB thread:
    /// the chain is kept, and only the stray beside the excluded entry is
    /// unmanaged.
    #[test]
    fn a_chain_of_folders_deeper_than_the_stack_allows_calls_is_listed() {
        const DEPTH: usize = 3000;
        let repo = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        write_all(&repo.path().join("t"), &[("a/x", "x")]);
        let d = tree_of(
            &repo.path().join("t"),
            serde_json::json!({"path": "/t", "source": "t", "purge": true, "exclude": ["*.local"]}),
        );
        write_all(&root.path().join("t"), &[("a/x", "x"), ("u/", "")]);
        let host = Host::with_name(root.path(), "test-host");
        let dir = host
            .locate(Path::new("/t"))
            .unwrap()
            .open_dir()
            .unwrap()
            .unwrap();
        let u = dir.open_child_dir("u".as_ref()).unwrap().unwrap();
        let bottom = super::super::observe::tests::chain(&u, DEPTH);
        for name in ["keep.local", "stray"] {
            bottom
                .entry(name.as_ref())
                .create_dir(0o755, None, None)
                .unwrap();
        }
        let exclusions = d.exclusions_in(&host, &dir).unwrap();
        let listed = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                let mut listed = Vec::new();
                unmanaged(&dir, Path::new(""), &d, &exclusions, &mut listed).unwrap();
                listed.into_iter().map(|l| l.path).collect::<Vec<_>>()
            })
            .unwrap()
            .join()
            .unwrap();
        let mut stray = std::path::PathBuf::from("u");
        stray.extend(std::iter::repeat_n("d", DEPTH));
        stray.push("stray");
        assert_eq!(listed, [stray]);
    }

    /// The purge removes what its listing found, or nothing: a local user
    /// who may write in a kept folder swaps it (or an unmanaged folder in
    /// it) for one of theirs holding an excluded entry, between the listing
    /// and the removal; the excluded entry stays, the purge fails saying
    /// so, and removes nothing after it.
    #[test]
    fn the_purge_removes_only_what_it_listed() {
        for swap_the_parent in [true, false] {
            let repo = tempfile::tempdir().unwrap();
            let root = tempfile::tempdir().unwrap();
            write_all(&repo.path().join("t"), &[("a/x", "x")]);
            let d = tree_of(
                &repo.path().join("t"),
                serde_json::json!({"path": "/t", "source": "t", "purge": true, "exclude": ["*.local"]}),
            );
            let t = root.path().join("t");
            write_all(
                &t,
                &[
                    ("a/x", "x"),
                    ("u/k/x.local", "mine"),
                    ("u/k/s/", ""),
                    ("u/V/s/app.local", "not mine"),
                    ("v", "a stray listed after u/k/s"),
                ],
            );
            let host = Host::with_name(root.path(), "test-host");
            let dir = host
                .locate(Path::new("/t"))
                .unwrap()
                .open_dir()
                .unwrap()
                .unwrap();
            let exclusions = d.exclusions_in(&host, &dir).unwrap();
            let mut found = Vec::new();
            unmanaged(&dir, Path::new(""), &d, &exclusions, &mut found).unwrap();
            found.sort_by(|a, b| a.path.cmp(&b.path));
            let paths: Vec<_> = found.iter().map(|f| f.path.display().to_string()).collect();
            assert_eq!(paths, ["u/k/s", "v"]);
            if swap_the_parent {
                std::fs::rename(t.join("u/k"), t.join("u/k_old")).unwrap();
                std::fs::rename(t.join("u/V"), t.join("u/k")).unwrap();
            } else {
                std::fs::rename(t.join("u/k/s"), t.join("u/k/s_old")).unwrap();
                std::fs::rename(t.join("u/V/s"), t.join("u/k/s")).unwrap();
            }
            let mut folders = Folders::new(dir.clone()).unwrap();
            let purged = purge(&mut folders, &found);
            assert_eq!(
                std::fs::read_to_string(t.join("u/k/s/app.local")).ok(),
                Some("not mine".to_owned()),
                "the excluded entry was removed (swapped {})",
                if swap_the_parent { "u/k" } else { "u/k/s" }
            );
            let err = purged.unwrap_err().to_string();
            assert!(
                err.contains("moved or replaced while the purge ran"),
                "{err}"
            );
            assert!(err.contains("u/k/s"), "{err}");
            assert!(t.join("v").exists(), "removed after the failure");
            // Nothing swapped: all of it goes.
            let mut found = Vec::new();
            unmanaged(&dir, Path::new(""), &d, &exclusions, &mut found).unwrap();
            let mut folders = Folders::new(dir.clone()).unwrap();
            purge(&mut folders, &found).unwrap();
            assert!(!t.join("v").exists());
            assert!(t.join("u/k/s/app.local").exists());
        }
    }

    /// Below a kept folder, each level is reached again by its name: a
    /// local user who may write in the kept folder `u` swaps `u/m` (whose
    /// `b` holds nothing excluded) with `u/m2` (whose `b` holds
    /// `app.local`), again and again, while purges run. A folder that
    /// `holds_excluded` did not find kept is looked into again through the
    /// handle then listed, so `u/m2`'s `b` is never taken for `u/m`'s:
    /// `app.local` is never removed. (Before, the listing took the kept
    /// set, which `holds_excluded` made looking at the other folder, for
    /// the one it listed.)
    #[test]
    fn a_folder_swapped_below_a_kept_one_keeps_its_excluded_entry() {
        use std::os::unix::fs::MetadataExt as _;
        use std::sync::atomic::{AtomicBool, Ordering};
        let repo = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        write_all(&repo.path().join("t"), &[("a/x", "x")]);
        let d = tree_of(
            &repo.path().join("t"),
            serde_json::json!({"path": "/t", "source": "t", "purge": true, "exclude": ["*.local"]}),
        );
        let t = root.path().join("t");
        write_all(
            &t,
            &[
                ("a/x", "x"),
                ("u/x.local", "mine"),
                ("u/m/y.local", "y"),
                ("u/m2/y.local", "y"),
            ],
        );
        let host = Host::with_name(root.path(), "test-host");
        let dir = host
            .locate(Path::new("/t"))
            .unwrap()
            .open_dir()
            .unwrap()
            .unwrap();
        let exclusions = d.exclusions_in(&host, &dir).unwrap();
        // The one folder holding app.local is made once; the other `b` is
        // made again whenever a purge took it.
        let holder = t.join("u/m2");
        write_all(&holder, &[("b/app.local", "not mine")]);
        // A second name for it outside the tree: its link count says
        // whether the purge removed it, wherever the swaps put it.
        let witness = root.path().join("witness");
        std::fs::hard_link(holder.join("b/app.local"), &witness).unwrap();
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let swapper = {
            let (done, u) = (done.clone(), t.join("u"));
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    let _ = std::fs::rename(u.join("m"), u.join("aside"));
                    let _ = std::fs::rename(u.join("m2"), u.join("m"));
                    let _ = std::fs::rename(u.join("aside"), u.join("m2"));
                }
            })
        };
        let (mut lost, mut purged) = (false, 0);
        let started = std::time::Instant::now();
        while started.elapsed() < std::time::Duration::from_secs(4) && !lost {
            for m in ["m", "m2", "aside"] {
                let b = t.join("u").join(m).join("b");
                let _ = std::fs::create_dir(&b);
            }
            let mut found = Vec::new();
            if unmanaged(&dir, Path::new(""), &d, &exclusions, &mut found).is_ok() {
                let mut folders = Folders::new(dir.clone()).unwrap();
                purged += usize::from(purge(&mut folders, &found).is_ok() && !found.is_empty());
            }
            lost = std::fs::metadata(&witness).unwrap().nlink() < 2;
        }
        done.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        eprintln!("{purged} purges removed something");
        assert!(!lost, "app.local was removed after {purged} purges");
        assert!(t.join("u/x.local").exists());
    }

    /// A folder where a purging Tree declares a file is removed just
    /// before the file goes live, after the engine checked it: a local
    /// user who may write in its folder swaps it meanwhile for one holding
    /// an excluded entry. That one stays and the Tree fails; unswapped,
    /// the folder goes.
    #[test]
    fn a_folder_in_the_way_swapped_before_it_goes_keeps_its_excluded_entry() {
        for swap in [true, false] {
            let repo = tempfile::tempdir().unwrap();
            let root = tempfile::tempdir().unwrap();
            write_all(&repo.path().join("t"), &[("a/x", "x"), ("c", "c")]);
            let d = tree_of(
                &repo.path().join("t"),
                serde_json::json!({"path": "/t", "source": "t", "purge": true, "exclude": ["*.local"]}),
            );
            let t = root.path().join("t");
            write_all(
                &t,
                &[("a/x", "x"), ("c/inner", "i"), ("w/app.local", "not mine")],
            );
            let host = Host::with_name(root.path(), "test-host");
            let mut walk = Walk::start(&host, &d).unwrap();
            assert!(walk.advance(&host, &d).unwrap(), "c staged");
            let folder = walk.in_the_way.take().expect("the folder c in the way");
            if swap {
                std::fs::rename(t.join("c"), t.join("c_old")).unwrap();
                std::fs::rename(t.join("w"), t.join("c")).unwrap();
            }
            let removed = folder.remove_all();
            if swap {
                assert_eq!(
                    std::fs::read_to_string(t.join("c/app.local")).ok(),
                    Some("not mine".to_owned()),
                    "the excluded entry was removed"
                );
                let err = removed.unwrap_err().to_string();
                assert!(err.contains("moved or replaced"), "{err}");
            } else {
                removed.unwrap();
                assert!(!t.join("c").exists());
            }
        }
    }

    #[test]
    fn the_purge_reads_no_file() {
        // A purging tree whose walk changes nothing but a stray's removal:
        // the stray (16 MiB) is removed unread. Before, the purge scanned
        // and hashed the whole tree again to find it.
        let repo = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        write_all(&repo.path().join("t"), &[("a/x", "x")]);
        let d = tree_of(
            &repo.path().join("t"),
            serde_json::json!({"path": "/t", "source": "t", "purge": true}),
        );
        let live = root.path().join("t");
        write_all(&live, &[("a/x", "x")]);
        let stray = live.join("a/stray");
        std::fs::write(&stray, vec![7u8; 16 << 20]).unwrap();
        let host = Host::with_name(root.path(), "test-host");
        let read = || -> u64 {
            let io = std::fs::read_to_string("/proc/self/io").unwrap();
            io.lines()
                .find_map(|l| l.strip_prefix("rchar: "))
                .unwrap()
                .parse()
                .unwrap()
        };
        let mut walk = Walk::start(&host, &d).unwrap();
        let before = read();
        assert!(!walk.advance(&host, &d).unwrap(), "nothing staged");
        let bytes = read() - before;
        assert!(!stray.exists(), "the stray stays");
        assert_eq!(std::fs::read(live.join("a/x")).unwrap(), b"x");
        // Other tests of this process read too, but little.
        assert!(bytes < 8 << 20, "{bytes} bytes read");
    }

    #[test]
    fn a_set_id_mode_goes_only_to_bytes_written_afresh() {
        // An entry holding its declared bytes that only lacks a set-id
        // mode: the bit is never set in place (the bytes compared may be
        // swapped by the folder's owner before the change, or written by
        // whoever holds the file open); the declared bytes are staged anew.
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let repo = tempfile::tempdir().unwrap();
        let host = Host::with_name(root.path(), "test-host");
        let source = repo.path().join("tool");
        std::fs::write(&source, b"declared\n").unwrap();
        let live = root.path().join("tool");
        std::fs::write(&live, b"declared\n").unwrap();
        std::fs::set_permissions(&live, std::fs::Permissions::from_mode(0o755)).unwrap();
        let blake3 = Algorithm::Native.hash_content(b"declared\n").digest.0;
        let want = Declared {
            blake3: &blake3,
            size: 9,
            source: &source,
        };
        let at = host.locate(Path::new("/tool")).unwrap();
        let staged = stage_file(&host, &at, want, None, None, Some(0o2755)).unwrap();
        let mode = || std::fs::metadata(&live).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(), 0o755, "set in place");
        let staged = staged.expect("the declared bytes staged anew");
        staged.commit(&host).unwrap();
        assert_eq!(mode(), 0o2755);
        assert_eq!(std::fs::read(&live).unwrap(), b"declared\n");
        // A mode without a set-id bit is still set in place.
        let at = host.locate(Path::new("/tool")).unwrap();
        assert!(
            stage_file(&host, &at, want, None, None, Some(0o750))
                .unwrap()
                .is_none()
        );
        assert_eq!(mode(), 0o750);
    }

    #[test]
    fn a_mode_goes_only_to_the_file_whose_bytes_were_compared() {
        // An entry holding its declared bytes whose mode alone changes
        // (0600 -> 0644), or its owner and group too (root's, so given in
        // place), in a folder whose owner swaps it, again and again, with
        // a root-owned 0600 file of theirs holding a secret (RENAME_EXCHANGE
        // from another thread): the mode and owner are set in place only
        // on the file whose bytes were just compared, never on the secret.
        use std::os::unix::fs::PermissionsExt as _;
        use std::sync::atomic::{AtomicBool, Ordering};
        let root = tempfile::tempdir().unwrap();
        let repo = tempfile::tempdir().unwrap();
        let host = Host::with_name(root.path(), "test-host");
        let source = repo.path().join("app.conf");
        std::fs::write(&source, b"declared\n").unwrap();
        let (live, secret) = (root.path().join("app.conf"), root.path().join("secret"));
        std::fs::write(&live, b"declared\n").unwrap();
        std::fs::write(&secret, b"secret!!\n").unwrap();
        let blake3 = Algorithm::Native.hash_content(b"declared\n").digest.0;
        let want = Declared {
            blake3: &blake3,
            size: 9,
            source: &source,
        };
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let swapper = {
            let (done, live, secret) = (done.clone(), live.clone(), secret.clone());
            let aside = live.with_file_name("aside");
            std::thread::spawn(move || {
                // Three renames swap the two names (std has no exchange).
                while !done.load(Ordering::Relaxed) {
                    let _ = std::fs::rename(&live, &aside);
                    let _ = std::fs::rename(&secret, &live);
                    let _ = std::fs::rename(&aside, &secret);
                }
            })
        };
        let (mut opened_up, mut tries) = (0, 0);
        let started = std::time::Instant::now();
        while started.elapsed() < std::time::Duration::from_secs(6) {
            tries += 1;
            let names = [live.clone(), secret.clone(), live.with_file_name("aside")];
            // A rewrite renames the declared bytes over whatever holds the
            // name: the secret again, where it was lost.
            if !names
                .iter()
                .any(|p| std::fs::read(p).is_ok_and(|b| b == b"secret!!\n"))
            {
                use std::io::Write as _;
                use std::os::unix::fs::OpenOptionsExt as _;
                let fresh = secret.with_file_name("fresh");
                let _ = std::fs::remove_file(&fresh);
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&fresh)
                    .unwrap();
                f.write_all(b"secret!!\n").unwrap();
                std::fs::rename(&fresh, &secret).unwrap();
            }
            for p in &names {
                let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600));
                let _ = std::os::unix::fs::chown(p, Some(0), Some(0));
            }
            let at = host.locate(Path::new("/app.conf")).unwrap();
            // A mode alone, or (every other try) an owner and group, given
            // in place to root's 0600 file holding the declared bytes.
            let owner = (tries % 2 == 0).then_some(1000);
            // Refused, rewritten or set: what matters is where they went.
            if let Ok(Some(staged)) = stage_file(&host, &at, want, owner, owner, Some(0o644)) {
                let _ = staged.commit(&host);
            }
            // Bytes and mode from one open (the names keep moving).
            for p in &names {
                use std::io::Read as _;
                let Ok(mut f) = std::fs::File::open(p) else {
                    continue;
                };
                let mut bytes = Vec::new();
                let _ = f.read_to_end(&mut bytes);
                let meta = f.metadata().unwrap();
                if bytes == b"secret!!\n"
                    && (meta.permissions().mode() & 0o7777 != 0o600
                        || std::os::unix::fs::MetadataExt::uid(&meta) != 0)
                {
                    opened_up += 1;
                }
            }
        }
        done.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        eprintln!("{tries} tries, {opened_up} opened up");
        assert_eq!(
            opened_up, 0,
            "the secret was opened up {opened_up} times in {tries} tries"
        );
    }

    #[test]
    fn an_owner_goes_only_to_bytes_written_afresh() {
        // An entry holding its declared bytes, owned by a user who keeps it
        // open for writing, to be made root's: given in place, the user
        // writes their bytes into a root-owned file afterwards. The
        // declared bytes are staged anew, and the user's descriptor is left
        // on a file no name holds any more.
        use std::io::Write as _;
        let root = tempfile::tempdir().unwrap();
        let repo = tempfile::tempdir().unwrap();
        let host = Host::with_name(root.path(), "test-host");
        let source = repo.path().join("app.conf");
        std::fs::write(&source, b"declared\n").unwrap();
        let live = root.path().join("app.conf");
        std::fs::write(&live, b"declared\n").unwrap();
        std::os::unix::fs::chown(&live, Some(1000), Some(1000)).unwrap();
        let mut held = std::fs::OpenOptions::new().write(true).open(&live).unwrap();
        let blake3 = Algorithm::Native.hash_content(b"declared\n").digest.0;
        let want = Declared {
            blake3: &blake3,
            size: 9,
            source: &source,
        };
        let at = host.locate(Path::new("/app.conf")).unwrap();
        if let Some(staged) = stage_file(&host, &at, want, Some(0), Some(0), Some(0o644)).unwrap() {
            staged.commit(&host).unwrap();
        }
        held.write_all(b"theirs!!!").unwrap();
        drop(held);
        crate::testing::assert_declared_bytes_are_roots(
            &live,
            b"declared\n",
            "written through the old owner's descriptor into",
        );
    }
}
