//! `Symlink`: a symbolic link at a path pointing at a target, or its absence.
//!
//! The target is stored exactly as declared (relative targets stay relative)
//! and is not resolved under `--root`: it is read by the host's kernel, from
//! wherever the link ends up. A link is created or changed by staging the new
//! link under the link's own name beside it and renaming it over the path, so
//! there is no moment without a link. A file in the way is replaced (the
//! engine has backed it up); a directory in the way is a failure.
//!
//! This module must not look at what the link points to: a dangling link is
//! a valid declaration.

use std::path::{Path, PathBuf};

use datum_core::{Action, Diff, Observed, Presence, Resource};
use datum_host::fs::{FileKind, Stat};
use datum_host::{Host, HostError, Located};
use serde_json::Value;

use crate::common::entry::{EntryDesired, EntryProvider};
use crate::common::fields::declared_path;
use crate::common::schema;
use crate::common::{
    Ensure, FieldKind, FieldSpec, all_or_nothing, check_fields, ensure_change, text_change,
};
use crate::{FieldError, ProviderError};

pub const FIELDS: &[FieldSpec] = &[
    FieldSpec::required("path", FieldKind::Path),
    FieldSpec::optional("target", FieldKind::NonEmptyText),
    FieldSpec::optional("ensure", FieldKind::Ensure),
    FieldSpec::VALIDATE,
];

/// The longest target a link can hold: PATH_MAX (4096) less its NUL.
pub const MAX_TARGET: usize = 4095;

/// A Symlink declaration in typed form.
#[derive(Debug, Clone)]
pub struct SymlinkDesired {
    pub path: PathBuf,
    /// Required when present (checked by `check`).
    pub target: Option<String>,
    pub ensure: Ensure,
}

/// The `Symlink` resource type.
#[derive(Debug, Default)]
pub struct SymlinkProvider;

impl EntryDesired for SymlinkDesired {
    fn from_resource(resource: &Resource) -> Result<Self, ProviderError> {
        let invalid = |field: &str, message: String| ProviderError::Invalid {
            field: field.to_owned(),
            message,
        };
        let desired = &resource.desired;
        let ensure = Ensure::parse(desired.get("ensure")).map_err(|m| invalid("ensure", m))?;
        let target = desired
            .get("target")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if ensure == Ensure::Present && target.is_none() {
            return Err(invalid("target", "a Symlink needs `target`".to_owned()));
        }
        Ok(SymlinkDesired {
            path: declared_path(desired).map_err(|m| invalid("path", m))?,
            target,
            ensure,
        })
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

/// A Symlink's `desired` as written in a manifest: the type its JSON
/// Schema is derived from (held to `FIELDS` and to `check` below).
#[derive(schemars::JsonSchema)]
#[schemars(
    deny_unknown_fields,
    transform = datum_core::schema::optional_never_null,
    title = "Symlink",
    description = "A symbolic link at `path` pointing at `target` (required unless `ensure: absent`).",
    extend("if" = {"not": {"required": ["ensure"], "properties": {"ensure": {"const": "absent"}}}}),
    extend("then" = {"required": ["target"]})
)]
pub struct SymlinkDeclaration {
    #[schemars(with = "schema::HostPath")]
    pub path: String,
    /// What the link points at, written into it as given.
    #[schemars(with = "Option<schema::NonEmptyText>")]
    pub target: Option<String>,
    #[schemars(with = "Option<schema::Ensure>")]
    pub ensure: Option<String>,
    /// A group validator (`nginx`, `apache2`) checking the configuration the
    /// link takes part in; a file validator is refused (a link stages no
    /// content to check).
    #[schemars(with = "Option<schema::ValidatorName>")]
    pub validate: Option<String>,
}

impl EntryProvider for SymlinkProvider {
    type Desired = SymlinkDesired;
    type Written = SymlinkDeclaration;
    type Staging = ();
    const KIND: &'static str = "Symlink";
    const REFUSES_A_DIRECTORY: bool = true;
    const IS_LINK: bool = true;
    // The link is staged without content: only a group validator applies.
    const TAKES_FILE_VALIDATOR: bool = false;
    // A link has no mode of its own; content is never staged at one.
    const DEFAULT_MODE: u32 = 0o777;

    fn check_fields(desired: &Value) -> Result<(), Vec<FieldError>> {
        let mut errors = check_fields("Symlink", desired, FIELDS);
        let present = matches!(Ensure::parse(desired.get("ensure")), Ok(Ensure::Present));
        if desired.is_object() && present && desired.get("target").is_none() {
            errors.push(FieldError::new(&[], "a Symlink needs `target`"));
        }
        // What symlink(2) would refuse, refused before anything is applied
        // rather than by the apply, after what came before it.
        if let Some(target) = desired.get("target").and_then(Value::as_str) {
            if target.contains('\0') {
                errors.push(FieldError::new(
                    &["target"],
                    "`target` holds a NUL byte, which no link can hold",
                ));
            } else if target.len() > MAX_TARGET {
                errors.push(FieldError::new(
                    &["target"],
                    format!(
                        "`target` is {} bytes long, more than a link can hold ({MAX_TARGET})",
                        target.len()
                    ),
                ));
            }
        }
        all_or_nothing(errors)
    }

    fn observe_present(
        _host: &Host,
        _resource: &Resource,
        _d: &SymlinkDesired,
        at: &Located,
        stat: Stat,
    ) -> Result<Observed, ProviderError> {
        let mut observed = Observed::absent();
        if stat.kind == FileKind::Symlink {
            let target = at.read_link()?;
            observed.presence = Presence::Present;
            observed.fields.insert(
                "target".to_owned(),
                Value::String(target.to_string_lossy().into_owned()),
            );
        } else {
            observed.presence = Presence::OtherType(stat.kind.word().to_owned());
        }
        observed.meta = Some(stat.meta);
        Ok(observed)
    }

    fn diff(_resource: &Resource, d: &SymlinkDesired, observed: &Observed) -> Diff {
        diff(d, observed)
    }

    fn stage(
        _host: &Host,
        _resource: &Resource,
        _d: &SymlinkDesired,
        _at: &Located,
        _diff: &Diff,
    ) -> Result<(), ProviderError> {
        Ok(())
    }

    fn converge(
        host: &Host,
        d: &SymlinkDesired,
        at: &Located,
        _staging: (),
    ) -> Result<(), ProviderError> {
        match &d.target {
            Some(target) => converge(host, at, Path::new(target)),
            None => Err(ProviderError::Invalid {
                field: "target".to_owned(),
                message: "a Symlink needs `target`".to_owned(),
            }),
        }
    }

    fn remove(host: &Host, at: &Located) -> Result<(), ProviderError> {
        remove(at)?;
        host.forget_dirs_under(&at.declared());
        Ok(())
    }
}

/// The pure comparison behind [`SymlinkProvider::diff`].
pub fn diff(d: &SymlinkDesired, observed: &Observed) -> Diff {
    let mut out = Diff::default();
    let seen = observed.fields.get("target").and_then(Value::as_str);
    match (d.ensure, &observed.presence, &d.target) {
        (Ensure::Absent, Presence::Present, _) => {
            out.action = Some(Action::Remove);
            out.changes.push(ensure_change("present", "absent"));
        }
        // Not a link: not this resource's business.
        (Ensure::Absent, _, _) | (Ensure::Present, _, None) => {}
        (Ensure::Present, Presence::Absent, Some(target)) => {
            out.action = Some(Action::Create);
            out.changes.push(text_change("target", None, Some(target)));
        }
        (Ensure::Present, Presence::OtherType(kind), Some(target)) => {
            // A directory shows as a replace here and fails at apply.
            out.action = Some(Action::Replace);
            out.changes
                .push(text_change("type", Some(kind), Some("symlink")));
            out.changes.push(text_change("target", None, Some(target)));
        }
        (Ensure::Present, Presence::Present, Some(target)) => {
            if seen != Some(target.as_str()) {
                out.action = Some(Action::Update);
                out.changes.push(text_change("target", seen, Some(target)));
            }
        }
    }
    out
}

fn remove(at: &Located) -> Result<(), ProviderError> {
    match at.lstat()? {
        Some(stat) if stat.kind == FileKind::Symlink => Ok(at.remove_file()?),
        _ => Ok(()),
    }
}

fn converge(host: &Host, at: &Located, target: &Path) -> Result<(), ProviderError> {
    if let Some(stat) = at.lstat()?
        && stat.kind == FileKind::Directory
    {
        return Err(HostError::InTheWay {
            path: at.path().to_path_buf(),
            found: "directory".to_owned(),
        }
        .into());
    }
    host.sweep_stale_staging(at.parent())?;
    at.stage_symlink(target)?.commit()?;
    // A link the walk follows (`boundary.follow_links`) was read once and
    // the folder it led to kept for the pass: what is below it is reached
    // again from now on, where the link now leads.
    host.forget_dirs_under(&at.declared());
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::Provider;
    use crate::testing::resource;

    #[test]
    fn the_declaration_type_has_the_field_table_and_agrees_with_check() {
        use crate::common::schema;
        let p = SymlinkProvider;
        let schema = crate::Provider::declaration_schema(&p, &mut schema::generator());
        let (names, required) = schema::fields_of(&schema);
        let mut want: Vec<&str> = FIELDS.iter().map(|f| f.name).collect();
        want.sort();
        assert_eq!(names, want);
        assert_eq!(required, ["path"]);
        let cases = [
            serde_json::json!({"path": "/etc/a", "target": "/etc/b"}),
            serde_json::json!({"path": "/etc/a", "target": "b", "ensure": "present"}),
            serde_json::json!({"path": "/etc/a", "ensure": "absent"}),
            serde_json::json!({"path": "/etc/a"}),
            serde_json::json!({"path": "/etc/a", "target": ""}),
            serde_json::json!({"path": "/etc/a", "target": "b", "mode": "0644"}),
        ];
        schema::agrees_with_check(&p, &cases).unwrap();
    }

    fn link(target: &str) -> Observed {
        let mut o = Observed::absent();
        o.presence = Presence::Present;
        o.fields.insert("target".into(), json!(target));
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
            (
                json!({"path": "/etc/localtime", "target": "/usr/share/zoneinfo/UTC"}),
                0,
            ),
            (json!({"path": "/srv/current", "target": "releases/42"}), 0),
            (json!({"path": "/srv/current", "ensure": "absent"}), 0),
            (json!({"path": "/srv/current"}), 1),
            (json!({"path": "/srv/current", "target": ""}), 1),
            (
                json!({"path": "/srv/current", "target": "x", "mode": "0644"}),
                1,
            ),
            (json!({"path": "srv", "target": 3}), 2),
            // What symlink(2) refuses is refused before anything is applied:
            // a NUL, and a target longer than PATH_MAX - 1 bytes.
            (json!({"path": "/srv/current", "target": "a\u{0}b"}), 1),
            (
                json!({"path": "/srv/current", "target": "é".repeat(2048)}),
                1,
            ),
            (
                json!({"path": "/srv/current", "target": "a".repeat(4095)}),
                0,
            ),
        ];
        for (desired, want) in cases {
            let got = SymlinkProvider.check(&desired).err().map_or(0, |e| e.len());
            assert_eq!(got, want, "{desired}");
        }
    }

    #[test]
    fn diff_table() {
        let want = json!({"path": "/srv/current", "target": "releases/2"});
        let absent = json!({"path": "/srv/current", "ensure": "absent"});
        let cases: Vec<(&str, Value, Observed, Action, Vec<&str>)> = vec![
            (
                "create",
                want.clone(),
                Observed::absent(),
                Action::Create,
                vec!["target"],
            ),
            (
                "converged",
                want.clone(),
                link("releases/2"),
                Action::None,
                vec![],
            ),
            (
                "retarget",
                want.clone(),
                link("releases/1"),
                Action::Update,
                vec!["target"],
            ),
            (
                "file in the way",
                want.clone(),
                other("file"),
                Action::Replace,
                vec!["type", "target"],
            ),
            (
                "directory in the way",
                want.clone(),
                other("directory"),
                Action::Replace,
                vec!["type", "target"],
            ),
            (
                "remove",
                absent.clone(),
                link("x"),
                Action::Remove,
                vec!["ensure"],
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
                &SymlinkProvider,
                &resource("Symlink", desired, None),
                &observed,
            );
            assert_eq!(d.action(), action, "{name}");
            assert_eq!(d.changed_fields(), fields, "{name}");
        }
        let d = crate::testing::diff(
            &SymlinkProvider,
            &resource("Symlink", want, None),
            &link("releases/1"),
        );
        assert_eq!(
            d.changes,
            vec![text_change(
                "target",
                Some("releases/1"),
                Some("releases/2")
            )]
        );
    }
}
