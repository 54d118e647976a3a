//! Where a Tree's observation keeps its entry differences, and the
//! [`crate::EntryDifferences`] capability that reads them back: check's
//! findings ask it instead of reading the observation by name.

use datum_core::Observed;
use datum_core::diff::{EntryDifference, EntryDrift, EntryValue};
use serde_json::Value;

use super::TreeProvider;

/// Where a Tree's observation keeps its differences, parents first: a list
/// of objects, each with its `category` (`changed`, `missing`, `unmanaged`,
/// `type_changed`) and `path` (relative; empty for the folder itself), a
/// changed entry's `fields`, `values` (`field`, `declared`, `observed`) and
/// `content_diff`, a type change's `declared` and `found`.
pub(crate) const DIFFERENCES_FIELD: &str = "tree";

/// A Tree's entries are its differences as its observation lists them.
impl crate::EntryDifferences for TreeProvider {
    fn entries(&self, observed: &Observed) -> Vec<EntryDifference> {
        observed
            .fields
            .get(DIFFERENCES_FIELD)
            .and_then(Value::as_array)
            .map(|items| items.iter().map(entry).collect())
            .unwrap_or_default()
    }
}

/// One difference of the observation, typed. What it does not say is left
/// empty (a path, fields or values), and an item of no known category is a
/// changed entry, as check has always read it.
fn entry(item: &Value) -> EntryDifference {
    let text = |key: &str| item.get(key).and_then(Value::as_str);
    let drift = match text("category") {
        Some("unmanaged") => EntryDrift::Unmanaged,
        Some("missing") => EntryDrift::Missing,
        Some("type_changed") => EntryDrift::TypeChanged {
            declared: text("declared").map(str::to_owned),
            found: text("found").map(str::to_owned),
        },
        _ => EntryDrift::Changed {
            fields: item
                .get("fields")
                .and_then(Value::as_array)
                .map(|f| {
                    f.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            values: item
                .get("values")
                .and_then(Value::as_array)
                .map(|vs| vs.iter().filter_map(value).collect())
                .unwrap_or_default(),
            content_diff: text("content_diff").map(str::to_owned),
        },
    };
    EntryDifference {
        path: text("path").unwrap_or_default().to_owned(),
        drift,
    }
}

/// One of a changed entry's `values`, when it has all three sides.
fn value(v: &Value) -> Option<EntryValue> {
    let text = |key: &str| v.get(key)?.as_str().map(str::to_owned);
    Some(EntryValue {
        field: text("field")?,
        declared: text("declared")?,
        observed: text("observed")?,
    })
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use datum_core::Presence;
    use datum_host::Host;
    use serde_json::json;

    use super::*;
    use crate::EntryDifferences;

    fn changed(fields: &[&str], values: &[(&str, &str, &str)], diff: Option<&str>) -> EntryDrift {
        EntryDrift::Changed {
            fields: fields.iter().map(|f| (*f).to_owned()).collect(),
            values: values
                .iter()
                .map(|(field, declared, observed)| EntryValue {
                    field: (*field).to_owned(),
                    declared: (*declared).to_owned(),
                    observed: (*observed).to_owned(),
                })
                .collect(),
            content_diff: diff.map(str::to_owned),
        }
    }

    fn at(path: &str, drift: EntryDrift) -> EntryDifference {
        EntryDifference {
            path: path.to_owned(),
            drift,
        }
    }

    /// What the Tree's observe writes of a real folder, read back through
    /// the capability the registry's Tree answers: every category, the
    /// values of a changed entry, its text diff, parents first.
    #[test]
    fn the_trees_entries_are_what_its_observation_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("repo/t");
        fs::create_dir_all(source.join("sub")).unwrap();
        fs::create_dir_all(source.join("d")).unwrap();
        fs::write(source.join("a.conf"), "a = 1\n").unwrap();
        fs::write(source.join("sub/b.conf"), "b = 2\n").unwrap();
        fs::write(source.join("c.conf"), "c = 3\n").unwrap();
        fs::write(source.join("d/e"), "e\n").unwrap();
        let live = dir.path().join("root/etc/t");
        fs::create_dir_all(live.join("sub")).unwrap();
        fs::write(live.join("a.conf"), "a = 1\n").unwrap();
        fs::set_permissions(live.join("a.conf"), fs::Permissions::from_mode(0o600)).unwrap();
        fs::write(live.join("sub/b.conf"), "b = 3\n").unwrap();
        fs::set_permissions(live.join("sub/b.conf"), fs::Permissions::from_mode(0o644)).unwrap();
        fs::write(live.join("stray~"), "x\n").unwrap();
        fs::write(live.join("d"), "not a folder\n").unwrap();
        for folder in [&live, &live.join("sub")] {
            fs::set_permissions(folder, fs::Permissions::from_mode(0o755)).unwrap();
        }
        let host = Host::with_name(dir.path().join("root"), "test-host");
        let resource = crate::testing::resource(
            super::super::KIND,
            json!({"path": "/etc/t", "source": "t", "mode": "0644", "dir_mode": "0755"}),
            Some(super::super::archive::pack_source_dir(&source).unwrap()),
        );
        let registry = crate::registry();
        let tree = registry.lookup(super::super::KIND).unwrap();
        let observed = tree.observe(&host, &resource).unwrap();
        assert_eq!(observed.presence, Presence::Present);
        let entries = tree.entry_differences().unwrap().entries(&observed);
        let diff = "--- /etc/t/sub/b.conf (declared)\n+++ /etc/t/sub/b.conf (live)\n@@ -1 +1 @@\n-b = 2\n+b = 3\n";
        assert_eq!(
            entries,
            vec![
                at(
                    "a.conf",
                    changed(&["mode"], &[("mode", "0644", "0600")], None)
                ),
                at("c.conf", EntryDrift::Missing),
                at(
                    "d",
                    EntryDrift::TypeChanged {
                        declared: Some("directory".to_owned()),
                        found: Some("file".to_owned()),
                    }
                ),
                at("stray~", EntryDrift::Unmanaged),
                at("sub/b.conf", changed(&["content"], &[], Some(diff))),
            ],
            "{:#?}",
            observed.fields
        );
        // An observation of the folder as declared carries none.
        assert!(
            tree.entry_differences()
                .unwrap()
                .entries(&Observed::absent())
                .is_empty()
        );
    }

    /// An item missing what its category has (as an older Datum may have
    /// recorded it) reads as check always read it: no path, no values, no
    /// type words, and no category as a changed entry.
    #[test]
    fn what_an_item_does_not_say_is_left_empty() {
        let mut observed = Observed::absent();
        observed.fields.insert(
            DIFFERENCES_FIELD.to_owned(),
            json!([
                {"category": "type_changed", "path": "x"},
                {"fields": ["content", 7], "values": [{"field": "mode", "declared": "0644"}]},
                "not an object",
            ]),
        );
        assert_eq!(
            TreeProvider.entries(&observed),
            vec![
                at(
                    "x",
                    EntryDrift::TypeChanged {
                        declared: None,
                        found: None
                    }
                ),
                at("", changed(&["content"], &[], None)),
                at("", changed(&[], &[], None)),
            ]
        );
    }
}
