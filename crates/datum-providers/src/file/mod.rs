//! `File`: a regular file's content, owner, group and mode, or its absence.
//!
//! Content changes go through a staged copy beside the target
//! (`datum_host::staging`): written, given its owner, group and mode, shown
//! to the engine as the validation target (the engine runs the validator),
//! and only then renamed over the live file by `activate`. Owner and mode
//! changes alone are made in place, except: a File that declares its
//! content gets a new owner or group, a set-id bit, or a mode taking
//! writing away from its group or others, with its declared bytes written
//! afresh (the content was compared at the observation, the name may hold
//! other bytes by now, and whoever could write it before may still write
//! through a descriptor), and any other mode only on a file holding those
//! bytes at that moment; a hard-linked file is rewritten too. A
//! directory in the way is a failure, never a recursive delete; a missing
//! parent directory is a failure naming it.
//!
//! This module must not run validators or decide what to do when one says
//! no: the engine does. It must not keep backups either: the engine saves
//! the old content before `activate` (for a validated file, once the
//! validator accepted the staged copy).

mod desired;

use datum_core::{Action, Content, ContentChange, Diff, Observed, Presence, Resource};
use datum_host::fs::{self, FileKind, Stat};
use datum_host::{Host, HostError, Located};
use serde_json::Value;

use crate::common::entry::EntryProvider;
use crate::common::{
    Ensure, compare_meta, create_meta_changes, ensure_change, note_unknown_accounts, observe_meta,
    text_change, unknown_account_refusal,
};
use crate::{FieldError, ProviderError, Reach, Refusal, Staged};

pub use desired::{CONTENT_FIELDS, FileDeclaration, FileDesired};

/// Mode of a created file when none is declared.
pub const DEFAULT_MODE: u32 = 0o644;

/// The `File` resource type.
#[derive(Debug, Default)]
pub struct FileProvider;

impl EntryProvider for FileProvider {
    type Desired = FileDesired;
    type Written = desired::FileDeclaration;
    type Staging = FileStaging;
    const KIND: &'static str = "File";
    const TAKES_CONTENT: bool = true;
    const HOLDS_NOTHING: Option<&'static str> = Some("a file, not a folder");
    const REFUSES_A_DIRECTORY: bool = true;
    // Staging writes a hidden copy beside the target (owner and mode
    // resolved from the host as it is) and changes nothing live.
    const STAGES_AHEAD: bool = true;
    const DEFAULT_MODE: u32 = DEFAULT_MODE;

    fn check_fields(desired: &Value) -> Result<(), Vec<FieldError>> {
        desired::check(desired)
    }

    fn observe_present(
        host: &Host,
        resource: &Resource,
        d: &FileDesired,
        at: &Located,
        stat: Stat,
    ) -> Result<Observed, ProviderError> {
        let mut observed = Observed::absent();
        if stat.kind != FileKind::File {
            observed.presence = Presence::OtherType(stat.kind.word().to_owned());
            observed.meta = Some(stat.meta);
            // Replaced by a file written with the declared owner.
            if d.ensure == Ensure::Present {
                note_unknown_accounts(host, &d.meta, &mut observed.fields);
            }
            return Ok(observed);
        }
        // A hard-linked file whose content is not declared: its owner or
        // mode cannot change (see `stage`). From the same lstat.
        if stat.links > 1 && d.ensure == Ensure::Present && d.content(resource).is_none() {
            observed
                .fields
                .insert(HARD_LINKS_FIELD.to_owned(), Value::from(stat.links));
        }
        // Compared by BLAKE3 when the declaration carries it (SHA-256 only
        // for a file that differs); the result is the same either way.
        let expected = d.content(resource).and_then(|c| {
            Some(fs::Expected {
                size: c.size,
                sha256: &c.sha256,
                blake3: c.blake3.as_deref()?,
            })
        });
        let hashed = match expected {
            Some(expected) => at.hash_expecting(expected)?,
            None => at.hash()?,
        };
        datum_core::progress::file_hashed();
        datum_core::progress::bytes_hashed(hashed.size);
        let mut meta = stat.meta;
        meta.size = hashed.size;
        meta.sha256 = Some(hashed.sha256.clone());
        observe_meta(host, &meta, &d.meta, &mut observed.fields);
        observed
            .fields
            .insert("content_sha256".to_owned(), Value::String(hashed.sha256));
        observed.presence = Presence::Present;
        observed.meta = Some(meta);
        Ok(observed)
    }

    fn diff(resource: &Resource, d: &FileDesired, observed: &Observed) -> Diff {
        diff(d, d.content(resource), observed)
    }

    fn stage(
        host: &Host,
        resource: &Resource,
        d: &FileDesired,
        at: &Located,
        diff: &Diff,
    ) -> Result<FileStaging, ProviderError> {
        stage(host, d, d.content(resource), at, diff)
    }

    fn target(staging: &FileStaging) -> Option<Staged<'_>> {
        match staging {
            FileStaging::Content(staged) => Some(staged.target()),
            FileStaging::Metadata { .. } => None,
        }
    }

    fn converge(
        host: &Host,
        _d: &FileDesired,
        at: &Located,
        staging: FileStaging,
    ) -> Result<(), ProviderError> {
        match staging {
            // New account files are read again by the engine after any
            // resource writes them (User's and Group's `WatchesWrites`).
            FileStaging::Content(staged) => staged.commit(host),
            FileStaging::Metadata {
                seen,
                holding,
                uid,
                gid,
                mode,
            } => {
                if uid.is_some() || gid.is_some() || mode.is_some() {
                    // On the file looked at when staging, or on nothing;
                    // holding the declared bytes, when there are some.
                    match &holding {
                        Some((size, sha256, blake3)) => {
                            let holding = datum_host::Holding {
                                size: *size,
                                sha256,
                                blake3: blake3.as_deref(),
                            };
                            at.set_metadata_holding(&seen, holding, uid, gid, mode)?
                        }
                        None => at.set_metadata(&seen, uid, gid, mode)?,
                    }
                }
                Ok(())
            }
        }
    }

    fn remove(_host: &Host, at: &Located) -> Result<(), ProviderError> {
        remove(at)
    }

    fn observe_absent(host: &Host, d: &FileDesired) -> Observed {
        let mut observed = Observed::absent();
        if d.ensure == Ensure::Present {
            note_unknown_accounts(host, &d.meta, &mut observed.fields);
        }
        observed
    }

    /// A file to write or change whose declared owner or group no account
    /// file knows, unless an earlier change makes that account. A
    /// hard-linked file without declared content whose owner, group or
    /// mode must change (`stage` refuses it), unless an earlier change
    /// removes its other names, which may be anywhere.
    fn refuses_around(d: &FileDesired, observed: &Observed) -> Option<Refusal> {
        if d.ensure != Ensure::Present {
            return None;
        }
        if let Some(refusal) = unknown_account_refusal(&d.meta, observed) {
            return Some(refusal);
        }
        let links = observed.fields.get(HARD_LINKS_FIELD)?.as_u64()?;
        let mut changes = Vec::new();
        compare_meta(&d.meta, observed, &mut changes);
        (observed.presence == Presence::Present && !changes.is_empty()).then(|| Refusal {
            why: hard_linked_refused(&d.path, links).to_string(),
            reach: Reach::AnyPath,
        })
    }
}

/// Where the observation of a File that declares no content says how many
/// names its file has, when it has more than one (left out otherwise).
pub const HARD_LINKS_FIELD: &str = "hard_links";

/// Why the owner or mode of a file with `links` names, at the declared
/// `path`, is not changed when the File declares no content.
fn hard_linked_refused(path: &std::path::Path, links: u64) -> ProviderError {
    ProviderError::Invalid {
        field: "content".to_owned(),
        message: format!(
            "{} has {links} hard links: its owner and mode are not changed in place (that would reach every other name), and bytes Datum was not given are not copied (they may be another file's); declare its content, or remove the other links",
            path.display(),
        ),
    }
}

/// The pure comparison behind [`FileProvider::diff`].
pub fn diff(d: &FileDesired, content: Option<&Content>, observed: &Observed) -> Diff {
    let mut out = Diff::default();
    match (d.ensure, &observed.presence) {
        (Ensure::Absent, Presence::Absent) => {}
        // A link where a file should be absent goes too (the link, not what
        // it points at); a directory is not a file and is left alone.
        (Ensure::Absent, Presence::Present) => remove_diff(&mut out, "present"),
        (Ensure::Absent, Presence::OtherType(kind)) if kind != "directory" => {
            remove_diff(&mut out, kind);
        }
        (Ensure::Absent, Presence::OtherType(_)) => {}
        (Ensure::Present, Presence::Absent) => {
            out.action = Some(Action::Create);
            create_meta_changes(&d.meta, DEFAULT_MODE, &mut out.changes);
            out.content = content.map(|c| new_content(c, None));
        }
        (Ensure::Present, Presence::OtherType(kind)) => {
            // A directory shows as a replace in the plan and fails at apply:
            // Datum never deletes a directory to make room for a file.
            out.action = Some(Action::Replace);
            out.changes
                .push(text_change("type", Some(kind), Some("file")));
            create_meta_changes(&d.meta, DEFAULT_MODE, &mut out.changes);
            out.content = content.map(|c| new_content(c, None));
        }
        (Ensure::Present, Presence::Present) => {
            compare_meta(&d.meta, observed, &mut out.changes);
            if let Some(content) = content {
                let have = observed
                    .fields
                    .get("content_sha256")
                    .and_then(Value::as_str);
                if have != Some(content.sha256.as_str()) {
                    out.content = Some(new_content(content, Some(observed)));
                }
            }
            if !out.changes.is_empty() || out.content.is_some() {
                out.action = Some(Action::Update);
            }
        }
    }
    out
}

fn remove_diff(out: &mut Diff, found: &str) {
    out.action = Some(Action::Remove);
    out.changes.push(ensure_change(found, "absent"));
}

fn new_content(content: &datum_core::Content, observed: Option<&Observed>) -> Box<ContentChange> {
    Box::new(ContentChange {
        before: observed.and_then(|o| o.content.clone()),
        // Empty for content kept in a repository file; the engine fills it
        // in when a diff is shown.
        after: content.inline().map(<[u8]>::to_vec).unwrap_or_default(),
        before_sha256: observed.and_then(|o| {
            o.fields
                .get("content_sha256")
                .and_then(Value::as_str)
                .map(str::to_owned)
        }),
        after_sha256: content.sha256.clone(),
        // The engine decides, from the live file's permissions.
        live_withheld: false,
        declared_unread: false,
    })
}

/// Removes what is at `at` unless it is a directory (looked at afresh, not
/// trusted from the observation).
fn remove(at: &Located) -> Result<(), ProviderError> {
    match at.lstat()? {
        None => Ok(()),
        Some(stat) if stat.kind == FileKind::Directory => Ok(()),
        Some(_) => Ok(at.remove_file()?),
    }
}

/// What staging a File prepared: a complete new file beside the live one,
/// or owner and mode to set in place (same content).
pub enum FileStaging {
    Content(StagedContent),
    Metadata {
        /// The file's `lstat` when staging: what the change is for.
        seen: Stat,
        /// The declared content (size, SHA-256, BLAKE3) the file must still
        /// hold when it is changed, when there is one.
        holding: Option<(u64, String, Option<String>)>,
        uid: Option<u32>,
        gid: Option<u32>,
        mode: Option<u32>,
    },
}

/// Prepares creating, replacing or updating the file so it matches the
/// declaration; the live file is untouched.
fn stage(
    host: &Host,
    d: &FileDesired,
    content: Option<&Content>,
    at: &Located,
    diff: &Diff,
) -> Result<FileStaging, ProviderError> {
    // Look again: the observation may be stale, and the safety rules below
    // must hold for what is there now.
    let current = at.lstat()?;
    let current_file = match &current {
        Some(stat) if stat.kind == FileKind::Directory => {
            return Err(HostError::InTheWay {
                path: at.path().to_path_buf(),
                found: "directory".to_owned(),
            }
            .into());
        }
        Some(stat) if stat.kind == FileKind::File => Some(&stat.meta),
        _ => None,
    };
    let hard_linked = current
        .as_ref()
        .is_some_and(|stat| stat.kind == FileKind::File && stat.links > 1);
    let (uid, gid) = d.meta.resolve(host)?;

    let seen = current
        .as_ref()
        .filter(|stat| stat.kind == FileKind::File && diff.content.is_none());
    let Some(seen) = seen else {
        // New content, or nothing usable there: write a whole new file.
        // Undeclared owner and mode carry over from a file being rewritten.
        let uid = uid.or(current_file.map(|m| m.uid));
        let gid = gid.or(current_file.map(|m| m.gid));
        let mode = d
            .meta
            .mode
            .or(current_file.map(|m| m.mode))
            .unwrap_or(DEFAULT_MODE);
        let bytes = match content {
            Some(c) => declared_bytes(c)?,
            None => Vec::new(),
        };
        return Ok(FileStaging::Content(StagedContent::write(
            host, at, bytes, uid, gid, mode,
        )?));
    };

    // Same content: fix owner and mode in place. A chown clears set-id bits,
    // so the mode is set again afterwards, declared or as it was.
    let existing = &seen.meta;
    let uid = uid.filter(|u| *u != existing.uid);
    let gid = gid.filter(|g| *g != existing.gid);
    let owner_changes = uid.is_some() || gid.is_some();
    let mode = match d.meta.mode {
        Some(m) if m != existing.mode || owner_changes => Some(m),
        None if owner_changes => Some(existing.mode),
        _ => None,
    };
    let changes = owner_changes || mode.is_some();
    // The content was compared when the file was observed (and `seen` is
    // this moment's lstat, not the inode hashed then): whoever can write to
    // the folder may have put other bytes at the name since, and whoever
    // held the file open for writing may write theirs after the change.
    // So a File that declares its content gets a new owner or group, or a
    // set-id bit, or a mode taking writing away from its group or others
    // (`in_place_strands_a_writer`: one of them may hold it open for
    // writing and go on writing after the chmod), only with its declared
    // bytes written afresh (its old owner's bytes made root's, which some
    // root-run programs take as a sign of trust; set-id bytes nobody
    // checked; a writer's bytes in a file reported closed to them). Any
    // other mode is set in place, but only on a file holding the declared
    // bytes, hashed from the descriptor the change is made through (a
    // root-owned 0600 file the folder's owner can move to the name is not
    // opened up to 0644).
    let set_id = mode.unwrap_or(existing.mode) & 0o6000 != 0;
    let declared = content.is_some()
        && (owner_changes
            || set_id
            || crate::common::meta::in_place_strands_a_writer(existing, uid, gid, mode));
    if (hard_linked || declared) && changes {
        // A chown or chmod in place would reach the file's other names too
        // (the host refuses it), or make set-id bytes nobody checked: the
        // declared bytes are written to a new file with the declared owner
        // and mode, which the rename puts in this name's place, leaving the
        // other names as they were.
        // Only bytes Datum was given: copying what is there would hand its
        // content, under the declared mode, to whoever linked another file
        // (say /etc/shadow) to this name.
        let Some(c) = content else {
            return Err(hard_linked_refused(
                &at.declared(),
                current.as_ref().map_or(0, |stat| stat.links),
            ));
        };
        let bytes = declared_bytes(c)?;
        return Ok(FileStaging::Content(StagedContent::write(
            host,
            at,
            bytes,
            uid.or(Some(existing.uid)),
            gid.or(Some(existing.gid)),
            mode.unwrap_or(existing.mode),
        )?));
    }
    Ok(FileStaging::Metadata {
        seen: seen.clone(),
        holding: content.map(|c| (c.size, c.sha256.clone(), c.blake3.clone())),
        uid,
        gid,
        mode,
    })
}

/// The bytes a File writes. A repository file is checked against the
/// checksum the catalogue recorded (`content_bytes`); so are bytes held in
/// memory (inline content, a template's output), which may have been read
/// back from the catalogue snapshot, a file a damaged disk can alter after
/// the compile: written unchecked, they went live and only the verify after
/// the rename found them wrong. The checksum is not quoted: for a
/// sensitive resource a plain one is never shown.
fn declared_bytes(c: &Content) -> Result<Vec<u8>, ProviderError> {
    let bytes = datum_host::repo::content_bytes(c)?.into_owned();
    if c.source.is_none() && datum_core::sha256_hex(&bytes) != c.sha256 {
        return Err(ProviderError::Invalid {
            field: "content".to_owned(),
            message: "the declared bytes do not match the checksum recorded when the catalogue was compiled (a damaged catalogue snapshot?); nothing was written: run again with --recompile".to_owned(),
        });
    }
    Ok(bytes)
}

/// A complete staged copy inside its target's open parent (see
/// `datum_host::staging`), with the bytes written to it: what a validator
/// is pointed at, then renamed into place or discarded. Dropped without a
/// commit, it removes itself.
pub struct StagedContent {
    file: datum_host::staging::StagedFile,
    bytes: Vec<u8>,
    mode: u32,
    uid: Option<u32>,
    gid: Option<u32>,
}

impl StagedContent {
    /// Writes `bytes` to a new staged copy beside `at`, with owner, group
    /// and mode set and synced (stale copies of a killed pass swept first).
    pub fn write(
        host: &Host,
        at: &Located,
        bytes: Vec<u8>,
        uid: Option<u32>,
        gid: Option<u32>,
        mode: u32,
    ) -> Result<Self, ProviderError> {
        host.sweep_stale_staging(at.parent())?;
        let mut file = at.stage_file()?;
        file.write_all(&bytes)?;
        file.set_owner(uid, gid)?;
        file.set_mode(mode)?;
        file.sync()?;
        Ok(Self {
            file,
            bytes,
            mode,
            uid,
            gid,
        })
    }

    /// The staged copy as the validator sees it.
    pub fn target(&self) -> Staged<'_> {
        Staged {
            path: self.file.path(),
            bytes: &self.bytes,
            mode: self.mode,
            uid: self.uid,
            gid: self.gid,
        }
    }

    /// Renames the staged copy over the live file (its content fsynced
    /// first); the parent directory's fsync is owed to the pass's
    /// [`Host::durability`], which the state store flushes before it
    /// records the resource (see `datum_host::durability`).
    pub fn commit(self, host: &Host) -> Result<(), ProviderError> {
        Ok(self.file.commit_deferred(host.durability())?)
    }

    /// Removes the staged copy; the live file is untouched. A staging
    /// directory that could not be removed is swept by the next pass.
    pub fn discard(self) {
        let _ = self.file.discard();
    }
}

#[cfg(test)]
mod tests {
    use datum_core::Content;
    use serde_json::json;

    use super::*;
    use crate::testing::resource;

    fn present(owner: &str, mode: &str, content: &[u8]) -> Observed {
        let mut o = Observed::absent();
        o.presence = Presence::Present;
        o.fields.insert("owner".into(), json!(owner));
        o.fields.insert("group".into(), json!("root"));
        o.fields.insert("mode".into(), json!(mode));
        o.fields.insert(
            "content_sha256".into(),
            json!(datum_core::sha256_hex(content)),
        );
        o.content = Some(content.to_vec());
        o
    }

    fn other(kind: &str) -> Observed {
        let mut o = Observed::absent();
        o.presence = Presence::OtherType(kind.into());
        o
    }

    fn run(desired: Value, content: Option<&[u8]>, observed: &Observed) -> Diff {
        let r = resource("File", desired, content.map(|c| Content::new(c.to_vec())));
        crate::testing::diff(&FileProvider, &r, observed)
    }

    /// Name, desired, declared content, observed, expected action and fields.
    type Case<'a> = (
        &'a str,
        Value,
        Option<&'a [u8]>,
        Observed,
        Action,
        Vec<&'a str>,
    );

    #[test]
    fn diff_table() {
        let path = json!({"path": "/etc/motd"});
        let full = json!({"path": "/etc/motd", "owner": "root", "mode": "0644"});
        let absent = json!({"path": "/etc/motd", "ensure": "absent"});
        let cases: Vec<Case> = vec![
            (
                "create with content",
                full.clone(),
                Some(b"hi\n"),
                Observed::absent(),
                Action::Create,
                vec!["owner", "mode", "content"],
            ),
            (
                "create metadata only",
                path.clone(),
                None,
                Observed::absent(),
                Action::Create,
                vec!["mode"],
            ),
            (
                "converged",
                full.clone(),
                Some(b"hi\n"),
                present("root", "0644", b"hi\n"),
                Action::None,
                vec![],
            ),
            (
                "content edited",
                full.clone(),
                Some(b"hi\n"),
                present("root", "0644", b"edited\n"),
                Action::Update,
                vec!["content"],
            ),
            (
                "mode changed",
                full.clone(),
                Some(b"hi\n"),
                present("root", "0600", b"hi\n"),
                Action::Update,
                vec!["mode"],
            ),
            (
                "undeclared owner not managed",
                json!({"path": "/etc/motd", "mode": "644"}),
                Some(b"hi\n"),
                present("app", "0644", b"hi\n"),
                Action::None,
                vec![],
            ),
            (
                "content not managed",
                full.clone(),
                None,
                present("root", "0644", b"anything"),
                Action::None,
                vec![],
            ),
            (
                "symlink in the way",
                full.clone(),
                Some(b"hi\n"),
                other("symlink"),
                Action::Replace,
                vec!["type", "owner", "mode", "content"],
            ),
            (
                "directory in the way",
                full.clone(),
                Some(b"hi\n"),
                other("directory"),
                Action::Replace,
                vec!["type", "owner", "mode", "content"],
            ),
            (
                "remove",
                absent.clone(),
                None,
                present("root", "0644", b"x"),
                Action::Remove,
                vec!["ensure"],
            ),
            (
                "already absent",
                absent.clone(),
                None,
                Observed::absent(),
                Action::None,
                vec![],
            ),
            (
                "absent removes a link",
                absent.clone(),
                None,
                other("symlink"),
                Action::Remove,
                vec!["ensure"],
            ),
            (
                "absent leaves a directory",
                absent.clone(),
                None,
                other("directory"),
                Action::None,
                vec![],
            ),
        ];
        for (name, desired, content, observed, action, fields) in cases {
            let d = run(desired, content, &observed);
            assert_eq!(d.action(), action, "{name}");
            assert_eq!(d.changed_fields(), fields, "{name}");
        }
    }

    #[test]
    fn content_changes_carry_both_sides() {
        let d = run(
            json!({"path": "/etc/motd"}),
            Some(b"new\n"),
            &present("root", "0644", b"old\n"),
        );
        let c = d.content.unwrap();
        assert_eq!(c.before.as_deref(), Some(&b"old\n"[..]));
        assert_eq!(c.after, b"new\n");
        assert_eq!(c.before_sha256, Some(datum_core::sha256_hex(b"old\n")));
        assert_eq!(c.after_sha256, datum_core::sha256_hex(b"new\n"));
    }

    #[test]
    fn field_changes_show_before_and_after() {
        let d = run(
            json!({"path": "/etc/motd", "owner": "app", "mode": "600"}),
            None,
            &present("root", "0644", b""),
        );
        assert_eq!(
            d.changes,
            vec![
                text_change("owner", Some("root"), Some("app")),
                text_change("mode", Some("0644"), Some("0600")),
            ]
        );
    }

    /// Bytes held in memory (inline content, a template's output) are
    /// written only as the compile recorded their checksum (dc0b402):
    /// bytes damaged in a snapshot record whose own checksum was made with
    /// them are refused, the checksum not quoted.
    #[test]
    fn in_memory_bytes_are_written_only_as_compiled() {
        let declared = Content::new(b"declared content\n".to_vec());
        assert_eq!(declared_bytes(&declared).unwrap(), b"declared content\n");
        let damaged = Content {
            bytes: bytes::Bytes::from_static(b"declXred content\n"),
            ..declared.clone()
        };
        let err = declared_bytes(&damaged).unwrap_err().to_string();
        assert!(err.contains("--recompile"), "{err}");
        assert!(!err.contains(&declared.sha256), "{err}");
    }

    #[test]
    fn owner_and_mode_go_only_to_the_declared_bytes() {
        // A File declaring its content whose live file has that content and
        // only another owner (or another mode): the owner of its folder
        // swaps another file in between the observation (the content
        // matched) and the change, one of theirs (to be made root's) or a
        // root-owned one they can move (to be opened up). Neither ever gets
        // the declared owner or mode: the declared bytes are written afresh.
        use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
        for (case, live_uid, live_mode, theirs_uid) in [
            ("owner change", 1000, 0o644, 1000),
            ("mode change", 0, 0o600, 0),
        ] {
            let mode_only = live_uid == 0;
            let root = tempfile::tempdir().unwrap();
            let host = Host::with_name(root.path(), "test-host");
            let live = root.path().join("app.conf");
            let r = resource(
                "File",
                json!({"path": "/app.conf", "owner": 0, "group": 0, "mode": "0644"}),
                Some(Content::new(b"declared\n".to_vec())),
            );
            std::fs::write(&live, b"declared\n").unwrap();
            std::os::unix::fs::chown(&live, Some(live_uid), Some(live_uid)).unwrap();
            std::fs::set_permissions(&live, std::fs::Permissions::from_mode(live_mode)).unwrap();
            let observed = crate::Provider::observe(&FileProvider, &host, &r).unwrap();
            let diff = crate::testing::diff(&FileProvider, &r, &observed);
            assert!(diff.content.is_none(), "{case}: the content matched");
            let theirs = root.path().join("theirs");
            std::fs::write(&theirs, b"other bytes\n").unwrap();
            std::os::unix::fs::chown(&theirs, Some(theirs_uid), Some(theirs_uid)).unwrap();
            std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(live_mode)).unwrap();
            std::fs::rename(&theirs, &live).unwrap();
            let applied = crate::Provider::apply(
                &FileProvider,
                &host,
                &r,
                &observed,
                &diff,
                &mut crate::OpenGate,
            );
            let meta = std::fs::metadata(&live).unwrap();
            if mode_only {
                // Set in place, on the file holding the declared bytes or on
                // nothing: the other file keeps its mode, and the pass says.
                let err = applied.unwrap_err().to_string();
                assert!(err.contains("holding other bytes"), "{case}: {err}");
                assert_eq!(meta.mode() & 0o7777, 0o600, "{case}: opened up");
                continue;
            }
            applied.unwrap();
            crate::testing::assert_declared_bytes_are_roots(
                &live,
                b"declared\n",
                &format!("{case}: other bytes got"),
            );
        }
    }

    #[test]
    fn set_id_bits_go_only_to_the_declared_bytes() {
        // A File declaring its content and a set-id mode, whose live file
        // has that content and only lacks the mode: the owner of its folder
        // swaps their own program in between the observation (the content
        // matched) and the change. The set-id bit must never reach bytes
        // Datum did not write: the declared bytes are written afresh.
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let host = Host::with_name(root.path(), "test-host");
        let live = root.path().join("tool");
        let r = resource(
            "File",
            json!({"path": "/tool", "mode": "2755"}),
            Some(Content::new(b"declared\n".to_vec())),
        );
        std::fs::write(&live, b"declared\n").unwrap();
        std::fs::set_permissions(&live, std::fs::Permissions::from_mode(0o755)).unwrap();
        let observed = crate::Provider::observe(&FileProvider, &host, &r).unwrap();
        let diff = crate::testing::diff(&FileProvider, &r, &observed);
        assert!(diff.content.is_none(), "the content matched");
        let theirs = root.path().join("theirs");
        std::fs::write(&theirs, b"#!/bin/sh\nexec sh\n").unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&theirs, &live).unwrap();
        crate::Provider::apply(
            &FileProvider,
            &host,
            &r,
            &observed,
            &diff,
            &mut crate::OpenGate,
        )
        .unwrap();
        let mode = std::fs::metadata(&live).unwrap().permissions().mode() & 0o7777;
        assert_eq!(
            std::fs::read(&live).unwrap(),
            b"declared\n",
            "mode {mode:o}"
        );
        assert_eq!(mode, 0o2755);
    }
}
