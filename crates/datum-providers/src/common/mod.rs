//! What File, Directory and Symlink share (and User and Group: their
//! account files, [`account_files`]): the typed provider contract of a
//! file-system entry at a declared path ([`entry`]), checking declared fields
//! (field tables, modes, owners, `ensure`), reading ownership and mode into
//! observed fields, comparing them, and resolving owners for apply.
//!
//! Only things at least two kinds use live here; anything specific to one
//! kind stays in its folder. The checks are pure; the observe and apply
//! helpers go through `datum_host` and never touch the machine directly.

pub mod account_files;
pub mod entry;
pub mod fields;
pub mod meta;
pub mod schema;

pub use fields::{Ensure, FieldKind, FieldSpec, all_or_nothing, check_fields};
pub use meta::{
    MetaDesired, compare_meta, create_meta_changes, note_unknown_accounts, observe_meta,
    unknown_account_refusal,
};

use datum_core::FieldChange;

/// The change of `ensure` (`present` to `absent` for a removal, or from
/// what the name holds instead, `absent` to `present` for a creation):
/// every kind shows whether the resource is to exist the same way.
pub fn ensure_change(before: &str, after: &str) -> FieldChange {
    text_change("ensure", Some(before), Some(after))
}

/// A field change between two optional text values.
pub fn text_change(field: &str, before: Option<&str>, after: Option<&str>) -> FieldChange {
    FieldChange {
        field: field.to_owned(),
        before: before.map(|s| serde_json::Value::String(s.to_owned())),
        after: after.map(|s| serde_json::Value::String(s.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use datum_core::{Action, Observed, Presence};
    use serde_json::json;

    use crate::testing::{diff, resource};
    use crate::{Provider, directory, file, group, symlink, user};

    /// A File and a Directory read `path`, then owner, group and mode,
    /// then `ensure`: the first problem is the declaration's error, under
    /// its field, in the words of the field's own parser.
    #[test]
    fn a_file_and_a_directory_name_the_first_bad_field_alike() {
        use crate::ProviderError;
        let bad_path = json!({"path": 3, "mode": 644, "ensure": "gone"});
        let bad_mode = json!({"path": "/etc/a", "owner": "root", "mode": 644, "ensure": "gone"});
        let bad_ensure = json!({"path": "/etc/a", "mode": "0644", "ensure": "gone"});
        let want = [
            ("path", super::fields::declared_path(&bad_path).unwrap_err()),
            ("mode", super::fields::parse_mode(&json!(644)).unwrap_err()),
            (
                "ensure",
                super::Ensure::parse(Some(&json!("gone"))).unwrap_err(),
            ),
        ];
        let providers: [(&dyn Provider, &str); 2] = [
            (&file::FileProvider, "File"),
            (&directory::DirectoryProvider, "Directory"),
        ];
        for (provider, kind) in providers {
            for (desired, (field, message)) in
                [&bad_path, &bad_mode, &bad_ensure].into_iter().zip(&want)
            {
                let r = resource(kind, desired.clone(), None);
                match provider.declare(&r) {
                    Err(ProviderError::Invalid {
                        field: f,
                        message: m,
                    }) => {
                        assert_eq!((f.as_str(), &m), (*field, message), "{kind} {desired}");
                    }
                    other => panic!("{kind} {desired}: {:?}", other.err()),
                }
            }
            let fine = json!({"path": "/etc/a", "owner": "root", "mode": "0644"});
            assert!(
                provider.declare(&resource(kind, fine, None)).is_ok(),
                "{kind}"
            );
        }
    }

    /// Every kind that removes shows it as the one `ensure` change, from
    /// what was found to `absent`.
    #[test]
    fn a_removal_shows_ensure_from_what_was_found_to_absent() {
        let found = |presence: Presence| Observed {
            presence,
            ..Observed::absent()
        };
        let path = json!({"path": "/srv/x", "ensure": "absent"});
        let name = json!({"ensure": "absent"});
        let cases: [(&dyn Provider, &str, &serde_json::Value, Presence, &str); 6] = [
            (
                &file::FileProvider,
                "File",
                &path,
                Presence::Present,
                "present",
            ),
            (
                &file::FileProvider,
                "File",
                &path,
                Presence::OtherType("symlink".into()),
                "symlink",
            ),
            (
                &directory::DirectoryProvider,
                "Directory",
                &path,
                Presence::Present,
                "present",
            ),
            (
                &symlink::SymlinkProvider,
                "Symlink",
                &path,
                Presence::Present,
                "present",
            ),
            (
                &group::GroupProvider,
                "Group",
                &name,
                Presence::Present,
                "present",
            ),
            (
                &user::UserProvider,
                "User",
                &name,
                Presence::Present,
                "present",
            ),
        ];
        for (provider, kind, desired, presence, before) in cases {
            let d = diff(
                provider,
                &resource(kind, desired.clone(), None),
                &found(presence),
            );
            assert_eq!(d.action, Some(Action::Remove), "{kind}");
            let changes: Vec<_> = d
                .changes
                .iter()
                .map(|c| (c.field.as_str(), c.before.clone(), c.after.clone()))
                .collect();
            assert_eq!(
                changes,
                [("ensure", Some(json!(before)), Some(json!("absent")))],
                "{kind}"
            );
        }
    }
}
