//! `Directory`: one directory's owner, group and mode, or its absence.
//!
//! A Directory creates only itself: its parent must exist or be declared (and
//! ordered first), so nothing appears on the host that no manifest names.
//! `ensure: absent` removes an empty directory only; a non-empty one is a
//! failure naming the path, never a recursive delete. A file or symlink in the
//! way is replaced (the engine has backed it up before `apply`).
//!
//! This module must not touch what is inside the directory: that belongs to
//! the resources declared for it.

use std::path::{Path, PathBuf};

use datum_core::{Action, Diff, Observed, Presence, Resource};
use datum_host::fs::{FileKind, Stat};
use datum_host::{Dir, Host, Located};
use serde_json::Value;

use crate::common::entry::{EntryDesired, EntryProvider, path_meta_ensure};
use crate::common::schema;
use crate::common::{
    Ensure, FieldKind, FieldSpec, MetaDesired, all_or_nothing, check_fields, compare_meta,
    create_meta_changes, ensure_change, note_unknown_accounts, observe_meta, text_change,
    unknown_account_refusal,
};
use crate::{FieldError, ProviderError, Refusal};

/// Mode of a created directory when none is declared.
pub const DEFAULT_MODE: u32 = 0o755;

pub const FIELDS: &[FieldSpec] = &[
    FieldSpec::required("path", FieldKind::Path),
    FieldSpec::optional("owner", FieldKind::Account),
    FieldSpec::optional("group", FieldKind::Account),
    FieldSpec::optional("mode", FieldKind::Mode),
    FieldSpec::optional("ensure", FieldKind::Ensure),
];

/// A Directory declaration in typed form.
#[derive(Debug, Clone)]
pub struct DirectoryDesired {
    pub path: PathBuf,
    pub meta: MetaDesired,
    pub ensure: Ensure,
}

/// The `Directory` resource type.
#[derive(Debug, Default)]
pub struct DirectoryProvider;

impl EntryDesired for DirectoryDesired {
    fn from_resource(resource: &Resource) -> Result<Self, ProviderError> {
        let (path, meta, ensure) = path_meta_ensure(&resource.desired)?;
        Ok(DirectoryDesired { path, meta, ensure })
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

/// A Directory's `desired` as written in a manifest: the type its JSON
/// Schema is derived from (held to `FIELDS` and to `check` below).
#[derive(schemars::JsonSchema)]
#[schemars(
    deny_unknown_fields,
    transform = datum_core::schema::optional_never_null,
    title = "Directory",
    description = "A folder with owner, group and mode (its content is not managed: use Tree for that)."
)]
pub struct DirectoryDeclaration {
    #[schemars(with = "schema::HostPath")]
    pub path: String,
    #[schemars(with = "Option<schema::Account>")]
    pub owner: Option<String>,
    #[schemars(with = "Option<schema::Account>")]
    pub group: Option<String>,
    #[schemars(with = "Option<schema::Mode>")]
    pub mode: Option<String>,
    #[schemars(with = "Option<schema::Ensure>")]
    pub ensure: Option<String>,
}

impl EntryProvider for DirectoryProvider {
    type Desired = DirectoryDesired;
    type Written = DirectoryDeclaration;
    type Staging = ();
    const KIND: &'static str = "Directory";
    const TAKES_VALIDATOR: bool = false;
    const HOLDS_CHILDREN: bool = true;
    const DEFAULT_MODE: u32 = DEFAULT_MODE;

    fn check_fields(desired: &Value) -> Result<(), Vec<FieldError>> {
        let errors = check_fields("Directory", desired, FIELDS);
        all_or_nothing(errors)
    }

    fn observe_present(
        host: &Host,
        _resource: &Resource,
        d: &DirectoryDesired,
        at: &Located,
        stat: Stat,
    ) -> Result<Observed, ProviderError> {
        let mut observed = Observed::absent();
        if stat.kind == FileKind::Directory {
            observed.presence = Presence::Present;
            observe_meta(host, &stat.meta, &d.meta, &mut observed.fields);
            // Only a folder to remove is looked inside (one listing): the
            // removal fails on anything in it.
            if d.ensure == Ensure::Absent
                && let Some(dir) = at.open_dir()?
                && holds_entries(&dir)?
            {
                observed
                    .fields
                    .insert(HOLDS_ENTRIES_FIELD.to_owned(), Value::Bool(true));
            }
        } else {
            observed.presence = Presence::OtherType(stat.kind.word().to_owned());
            // Replaced by a folder made with the declared owner.
            if d.ensure == Ensure::Present {
                note_unknown_accounts(host, &d.meta, &mut observed.fields);
            }
        }
        observed.meta = Some(stat.meta);
        Ok(observed)
    }

    fn observe_absent(host: &Host, d: &DirectoryDesired) -> Observed {
        let mut observed = Observed::absent();
        if d.ensure == Ensure::Present {
            note_unknown_accounts(host, &d.meta, &mut observed.fields);
        }
        observed
    }

    fn diff(_resource: &Resource, d: &DirectoryDesired, observed: &Observed) -> Diff {
        diff(d, observed)
    }

    fn stage(
        _host: &Host,
        _resource: &Resource,
        _d: &DirectoryDesired,
        _at: &Located,
        _diff: &Diff,
    ) -> Result<(), ProviderError> {
        Ok(())
    }

    fn converge(
        host: &Host,
        d: &DirectoryDesired,
        at: &Located,
        _staging: (),
    ) -> Result<(), ProviderError> {
        converge(host, d, at)
    }

    fn remove(host: &Host, at: &Located) -> Result<(), ProviderError> {
        remove(host, at)
    }

    /// A folder declared absent that holds entries: the removal refuses it
    /// (never recursive), unless an earlier change empties it first. A
    /// folder to make or change whose declared owner or group no account
    /// file knows, unless an earlier change makes that account.
    fn refuses_around(d: &DirectoryDesired, observed: &Observed) -> Option<Refusal> {
        if d.ensure == Ensure::Present {
            return unknown_account_refusal(&d.meta, observed);
        }
        let holds = observed.fields.get(HOLDS_ENTRIES_FIELD) == Some(&Value::Bool(true));
        (observed.presence == Presence::Present && holds).then(|| {
            Refusal::around(
                datum_host::HostError::DirectoryNotEmpty {
                    path: d.path.clone(),
                }
                .to_string(),
            )
        })
    }
}

/// Where the observation of a Directory declared absent says that it holds
/// entries (`true`; left out when it is empty or not looked inside).
pub const HOLDS_ENTRIES_FIELD: &str = "holds_entries";

/// Whether the folder `dir` holds anything but a killed pass's staging
/// folders (the removal sweeps those first: they do not make it fail).
fn holds_entries(dir: &Dir) -> Result<bool, ProviderError> {
    let prefix = datum_host::staging::STAGE_PREFIX.as_bytes();
    Ok(dir.list()?.iter().any(|(name, kind)| {
        !(*kind == FileKind::Directory && name.as_encoded_bytes().starts_with(prefix))
    }))
}

/// The pure comparison behind [`DirectoryProvider::diff`].
pub fn diff(d: &DirectoryDesired, observed: &Observed) -> Diff {
    let mut out = Diff::default();
    match (d.ensure, &observed.presence) {
        (Ensure::Absent, Presence::Present) => {
            out.action = Some(Action::Remove);
            out.changes.push(ensure_change("present", "absent"));
        }
        // Something that is not a directory is not this resource's business.
        (Ensure::Absent, _) => {}
        (Ensure::Present, Presence::Absent) => {
            out.action = Some(Action::Create);
            create_meta_changes(&d.meta, DEFAULT_MODE, &mut out.changes);
        }
        (Ensure::Present, Presence::OtherType(kind)) => {
            out.action = Some(Action::Replace);
            out.changes
                .push(text_change("type", Some(kind), Some("directory")));
            create_meta_changes(&d.meta, DEFAULT_MODE, &mut out.changes);
        }
        (Ensure::Present, Presence::Present) => {
            compare_meta(&d.meta, observed, &mut out.changes);
            if !out.changes.is_empty() {
                out.action = Some(Action::Update);
            }
        }
    }
    out
}

fn remove(host: &Host, at: &Located) -> Result<(), ProviderError> {
    match at.lstat()? {
        Some(stat) if stat.kind == FileKind::Directory => {
            // A killed pass's staging folders in it are Datum's own (the
            // plan does not count them: `holds_entries`), and the sweep
            // before a pass reaches only the folders declared paths are in.
            // Swept only when nothing else is there: a folder the removal
            // refuses is left as it was.
            if let Some(dir) = at.open_dir()?
                && !holds_entries(&dir)?
            {
                host.sweep_stale_staging(&dir)?;
            }
            at.remove_dir()?;
            host.forget_dirs_under(&at.declared());
            Ok(())
        }
        _ => Ok(()),
    }
}

fn converge(host: &Host, d: &DirectoryDesired, at: &Located) -> Result<(), ProviderError> {
    // Resolve owners first: an unknown user must fail before anything moves.
    let (uid, gid) = d.meta.resolve(host)?;
    let current = at.lstat()?;
    let existing = match current {
        Some(stat) if stat.kind == FileKind::Directory => Some(stat),
        Some(_) => {
            // A file, link or special file in the way: the engine has backed
            // it up; a link is removed, never followed. A link the walk
            // followed led to folders it keeps for the pass: what is below
            // is reached again, in the new folder.
            at.remove_file()?;
            host.forget_dirs_under(&at.declared());
            None
        }
        None => None,
    };
    let Some(seen) = existing else {
        // Owner first, then the mode (chown may clear the set-group-id
        // bit), all on the new directory's own descriptor.
        let mode = d.meta.mode.unwrap_or(DEFAULT_MODE);
        at.create_dir(mode, uid, gid)?;
        return Ok(());
    };
    let existing = &seen.meta;
    let uid = uid.filter(|u| *u != existing.uid);
    let gid = gid.filter(|g| *g != existing.gid);
    let owner_changes = uid.is_some() || gid.is_some();
    let mode = match d.meta.mode {
        Some(m) if m != existing.mode || owner_changes => Some(m),
        None if owner_changes => Some(existing.mode),
        _ => None,
    };
    if owner_changes || mode.is_some() {
        // On the folder looked at, or on nothing.
        at.set_metadata(&seen, uid, gid, mode)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::testing::resource;
    use crate::{Capabilities, Provider};

    #[test]
    fn the_declaration_type_has_the_field_table_and_agrees_with_check() {
        use crate::common::schema;
        let p = DirectoryProvider;
        let schema = crate::Provider::declaration_schema(&p, &mut schema::generator());
        let (names, required) = schema::fields_of(&schema);
        let mut want: Vec<&str> = FIELDS.iter().map(|f| f.name).collect();
        want.sort();
        assert_eq!(names, want, "no `validate`: a Directory stages nothing");
        assert!(!p.takes_validator());
        assert_eq!(required, ["path"]);
        let cases = [
            serde_json::json!({"path": "/etc/ssh"}),
            serde_json::json!({"path": "/etc/ssh", "owner": "root", "group": 0, "mode": "0755", "ensure": "absent"}),
            serde_json::json!({"path": "/etc/ssh", "mode": 755}),
            serde_json::json!({"path": "/etc/ssh", "content": "x"}),
            serde_json::json!({"path": "etc"}),
            serde_json::json!({"owner": "root"}),
        ];
        schema::agrees_with_check(&p, &cases).unwrap();
    }

    fn present(owner: &str, mode: &str) -> Observed {
        let mut o = Observed::absent();
        o.presence = Presence::Present;
        o.fields.insert("owner".into(), json!(owner));
        o.fields.insert("group".into(), json!("root"));
        o.fields.insert("mode".into(), json!(mode));
        o
    }

    fn other(kind: &str) -> Observed {
        let mut o = Observed::absent();
        o.presence = Presence::OtherType(kind.into());
        o
    }

    #[test]
    fn check_table() {
        let cases: Vec<(Value, usize)> = vec![
            (json!({"path": "/srv/app"}), 0),
            (
                json!({"path": "/srv/app", "owner": "root", "group": "0", "mode": "2750", "ensure": "absent"}),
                0,
            ),
            (json!({"path": "/srv/app", "content": "x"}), 1),
            (
                json!({"path": "/srv/app", "mode": 755, "ensure": "gone"}),
                2,
            ),
            (json!({}), 1),
        ];
        for (desired, want) in cases {
            let got = DirectoryProvider
                .check(&desired)
                .err()
                .map_or(0, |e| e.len());
            assert_eq!(got, want, "{desired}");
        }
    }

    #[test]
    fn diff_table() {
        let full = json!({"path": "/srv/app", "owner": "root", "mode": "0750"});
        let absent = json!({"path": "/srv/app", "ensure": "absent"});
        let cases: Vec<(&str, Value, Observed, Action, Vec<&str>)> = vec![
            (
                "create",
                full.clone(),
                Observed::absent(),
                Action::Create,
                vec!["owner", "mode"],
            ),
            (
                "converged",
                full.clone(),
                present("root", "0750"),
                Action::None,
                vec![],
            ),
            (
                "mode drift",
                full.clone(),
                present("root", "0755"),
                Action::Update,
                vec!["mode"],
            ),
            (
                "owner undeclared",
                json!({"path": "/srv/app", "mode": "750"}),
                present("app", "0750"),
                Action::None,
                vec![],
            ),
            (
                "file in the way",
                full.clone(),
                other("file"),
                Action::Replace,
                vec!["type", "owner", "mode"],
            ),
            (
                "remove",
                absent.clone(),
                present("root", "0755"),
                Action::Remove,
                vec!["ensure"],
            ),
            (
                "absent already",
                absent.clone(),
                Observed::absent(),
                Action::None,
                vec![],
            ),
            (
                "absent ignores a file",
                absent.clone(),
                other("file"),
                Action::None,
                vec![],
            ),
        ];
        for (name, desired, observed, action, fields) in cases {
            let d = crate::testing::diff(
                &DirectoryProvider,
                &resource("Directory", desired, None),
                &observed,
            );
            assert_eq!(d.action(), action, "{name}");
            assert_eq!(d.changed_fields(), fields, "{name}");
        }
    }

    #[test]
    fn a_file_swapped_in_for_the_folder_never_gets_its_mode() {
        // The owner of the folder above a declared Directory swaps it with
        // a file of theirs while the pass changes the folder's mode: the
        // change lands on what was looked at, or on nothing (a setgid
        // folder's mode on their program would make it setgid).
        use std::os::unix::fs::PermissionsExt;
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let root = tempfile::tempdir().unwrap();
        let host = Host::with_name(root.path(), "test-host");
        let (d, f, t) = (
            root.path().join("d"),
            root.path().join("f"),
            root.path().join("t"),
        );
        let declared = DirectoryDesired::from_resource(&resource(
            "Directory",
            json!({"path": "/d", "mode": "2775"}),
            None,
        ))
        .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (d, f, t, stop) = (d.clone(), f.clone(), t.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _ = std::fs::rename(&d, &t);
                    let _ = std::fs::rename(&f, &d);
                    let _ = std::fs::rename(&t, &f);
                }
            })
        };
        let mut reached = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(4);
        while std::time::Instant::now() < deadline {
            // One folder (mode 0755) and one file (0644) among the names.
            let mut files = 0;
            let mut folders = 0;
            for p in [&d, &f, &t] {
                let Ok(m) = std::fs::symlink_metadata(p) else {
                    continue;
                };
                let mode = m.permissions().mode() & 0o7777;
                if m.is_file() {
                    files += 1;
                    reached += usize::from(mode == 0o2775);
                    let _ = std::fs::set_permissions(p, PermissionsExt::from_mode(0o644));
                } else if m.is_dir() {
                    folders += 1;
                    let _ = std::fs::set_permissions(p, PermissionsExt::from_mode(0o755));
                }
            }
            if files == 0 {
                let _ = std::fs::write(root.path().join("g"), b"#!/bin/sh\n");
                let _ = std::fs::rename(root.path().join("g"), &f);
            }
            if folders == 0 {
                let _ = std::fs::create_dir(root.path().join("h"));
                let _ = std::fs::rename(root.path().join("h"), &t);
            }
            let at = host.locate(Path::new("/d")).unwrap();
            let _ = converge(&host, &declared, &at);
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        assert_eq!(reached, 0, "the folder's mode was set on a file");
    }
}
