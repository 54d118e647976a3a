//! From one resource's observation and diff to its drift findings.
//!
//! Owns the categories `datum check` reports, one finding per drifted thing:
//! - `changed_outside`: the resource exists as declared type, fields differ
//!   (the field names are the finding's paths; for a Tree, the entries);
//! - `deleted_outside`: declared present, not there (a Tree entry missing);
//! - `type_changed`: something of another type is there (a file became a
//!   directory or a link);
//! - `unmanaged`: an entry inside a Tree that no declaration covers and no
//!   exclusion hides;
//! - `not_converged`: the resource differs, but the apply loop never made it
//!   match as declared now (never applied, its last apply failed, or its
//!   declaration changed since its last verified apply): not drift, work that
//!   apply still owes ([`not_converged`] folds the other findings into it).
//!
//! Every difference reads in the direction reality moved: from the declared
//! value (`before`) to what the host has now (`after`), and a content diff
//! from the declared text to the live one, so a line added on the host is a
//! `+`. (`datum plan` shows the other direction: what apply will do.)
//!
//! Must not: read the host, or keep a value of a sensitive resource (its
//! differences carry paths only, and no content diff is produced).

use datum_core::diff::{EntryDifference, EntryDrift, EntryValue};
use datum_core::{ChangedBy, Diff, Observed, Presence, ResourceId};
use datum_report::{AttrDiff, Finding};
use serde_json::Value;

/// One finding plus what only a person reads (never hashed into history).
#[derive(Debug, Clone, PartialEq)]
pub struct CheckFinding {
    pub finding: Finding,
    pub id: ResourceId,
    pub class: String,
    /// The managed path, for display.
    pub target: Option<String>,
    /// A unified diff of the content (declared -> live); `None` when the
    /// resource is sensitive or no text was read.
    pub content_diff: Option<String>,
    /// Who changed it, as the agent's attribution saw it (classes with
    /// `attribute: true`; empty otherwise). Metadata: shown for a sensitive
    /// resource too.
    pub changed_by: Vec<ChangedBy>,
}

/// What `findings_for` needs to know about a resource.
#[derive(Debug, Clone, Copy)]
pub struct Inspected<'a> {
    pub id: &'a ResourceId,
    pub class: &'a str,
    /// Whether the resource's values are secret (`Resource::sensitive`):
    /// no content digest or diff, and its field differences masked (all of
    /// them, or those `masked_only` names).
    pub sensitive: bool,
    /// The only fields a sensitive resource masks, when it is sensitive
    /// only because it declares them (a User's `password_hash`, its kind's
    /// sensitive fields); `None` masks every field (the resource's own
    /// `sensitive: true`).
    pub masked_only: Option<&'a [&'a str]>,
    /// Whether the resource owns the whole folder at its path (its kind's
    /// `owns_subtree` capability, a Tree's): a change of the folder's own
    /// type is worded as every other kind's.
    pub owns_subtree: bool,
    /// How the entries of the folder it owns differ from the declaration,
    /// as its kind's `entry_differences` capability read them from
    /// `observed` (a Tree's); `None` for a kind without it. When present,
    /// the findings of a resource that is there are per entry.
    pub entries: Option<&'a [EntryDifference]>,
    pub target: Option<&'a str>,
    pub observed: &'a Observed,
    pub diff: &'a Diff,
}

/// The findings of one inspected resource (empty when it has not drifted).
pub fn findings_for(r: &Inspected<'_>) -> Vec<CheckFinding> {
    if r.observed.presence == Presence::Present
        && let Some(entries) = r.entries
    {
        return entry_findings(r, entries);
    }
    if r.diff.is_empty() {
        return Vec::new();
    }
    let category = match &r.observed.presence {
        Presence::Absent => "deleted_outside",
        Presence::OtherType(_) => "type_changed",
        Presence::Present => "changed_outside",
    };
    let mut diffs: Vec<AttrDiff> = Vec::new();
    for change in &r.diff.changes {
        // A subtree's own root changed type: its provider names the change
        // `tree:.` (as `datum plan` shows it); the finding says `type`, as
        // every other kind's does.
        let field = if category == "type_changed" && r.owns_subtree && change.field == "tree:." {
            "type".to_owned()
        } else {
            change.field.clone()
        };
        let masked = r.sensitive
            && r.masked_only
                .is_none_or(|only| only.contains(&change.field.as_str()));
        diffs.push(if masked {
            AttrDiff::sensitive(field)
        } else {
            // The provider's diff goes live -> declared (what apply does):
            // drift is the other way round.
            AttrDiff::plain(
                field,
                show(change.after.as_ref()),
                show(change.before.as_ref()),
            )
        });
    }
    let mut content_diff = None;
    if let Some(content) = &r.diff.content {
        if r.sensitive {
            diffs.push(AttrDiff::sensitive("content"));
        } else {
            diffs.push(AttrDiff::plain(
                "content",
                short(&content.after_sha256),
                short(content.before_sha256.as_deref().unwrap_or("(none)")),
            ));
            if content.live_withheld {
                // The live file is not readable by everyone: its lines are
                // never shown (whoever reads the report may not read it).
                content_diff = Some(datum_core::diff::withheld_note(
                    r.target.unwrap_or("content"),
                ));
            } else if content.declared_unread {
                // The declared bytes were refused (their repository file no
                // longer holds what the catalogue recorded): no diff against
                // nothing.
                content_diff = Some(datum_core::diff::unread_note(r.target.unwrap_or("content")));
            } else if r.observed.presence == Presence::Present {
                content_diff = text_diff(
                    &content.after,
                    content.before.as_deref(),
                    r.target.unwrap_or("content"),
                );
            }
        }
    }
    // A missing or replaced resource is one finding whatever its fields say.
    if category != "changed_outside" {
        diffs.retain(|d| d.path() == "type" || category == "deleted_outside");
        if category == "deleted_outside" {
            diffs = vec![AttrDiff::plain("presence", "present", "absent")];
        }
        content_diff = None;
    }
    vec![finding_of(r, category, diffs, content_diff)]
}

/// A finding of `r` in `category`: its differences and text diff, with who
/// changed it left for attribution to fill in.
fn finding_of(
    r: &Inspected<'_>,
    category: &str,
    diffs: Vec<AttrDiff>,
    content_diff: Option<String>,
) -> CheckFinding {
    CheckFinding {
        finding: Finding {
            subject: r.id.to_string(),
            category: category.to_owned(),
            diffs,
        },
        id: r.id.clone(),
        class: r.class.to_owned(),
        target: r.target.map(str::to_owned),
        content_diff,
        changed_by: Vec::new(),
    }
}

/// The category of a resource the apply loop never made match.
pub const NOT_CONVERGED: &str = "not_converged";

/// One resource's findings folded into a single `not_converged` finding
/// (every difference kept, the first content diff too): drift is what the
/// apply loop did not produce, and a resource never applied, or whose last
/// apply failed, was never produced. `None` when there is nothing to fold.
pub fn not_converged(found: Vec<CheckFinding>) -> Option<CheckFinding> {
    let mut found = found.into_iter();
    let mut first = found.next()?;
    first.finding.category = NOT_CONVERGED.to_owned();
    for other in found {
        first.finding.diffs.extend(other.finding.diffs);
        if first.content_diff.is_none() {
            first.content_diff = other.content_diff;
        }
    }
    Some(first)
}

/// A folder's entry differences (a Tree's), grouped by category: one
/// finding per category, each naming its entries.
fn entry_findings(r: &Inspected<'_>, entries: &[EntryDifference]) -> Vec<CheckFinding> {
    let mut by_category: std::collections::BTreeMap<&'static str, Vec<AttrDiff>> =
        std::collections::BTreeMap::new();
    // The changed entries' text diffs (the observation makes none for a
    // sensitive Tree; checked again here).
    let mut content_diffs: Vec<&str> = Vec::new();
    for entry in entries {
        let path = if entry.path.is_empty() {
            "."
        } else {
            entry.path.as_str()
        };
        let (category, diff) = match &entry.drift {
            EntryDrift::Unmanaged => ("unmanaged", AttrDiff::plain(path, "undeclared", "present")),
            EntryDrift::Missing => (
                "deleted_outside",
                AttrDiff::plain(path, "present", "absent"),
            ),
            EntryDrift::TypeChanged { declared, found } => (
                "type_changed",
                AttrDiff::plain(
                    path,
                    declared.as_deref().unwrap_or("?"),
                    found.as_deref().unwrap_or("?"),
                ),
            ),
            EntryDrift::Changed {
                fields,
                values,
                content_diff,
            } => {
                let diff = if r.sensitive {
                    AttrDiff::sensitive(path)
                } else {
                    let (declared, observed) = entry_values(fields, values);
                    if let Some(text) = content_diff {
                        content_diffs.push(text);
                    }
                    AttrDiff::plain(path, declared, observed)
                };
                ("changed_outside", diff)
            }
        };
        by_category.entry(category).or_default().push(diff);
    }
    by_category
        .into_iter()
        .map(|(category, diffs)| {
            let content_diff = (category == "changed_outside" && !content_diffs.is_empty())
                .then(|| content_diffs.concat());
            finding_of(r, category, diffs, content_diff)
        })
        .collect()
}

/// Both sides of a changed entry, declared -> observed, with the values
/// the observation carries (`mode 0644, owner 0` -> `mode 0777, owner 1000`);
/// content is named, its text is not here. An observation without values
/// (recorded by an older Datum) says only which fields changed.
fn entry_values(fields: &[String], values: &[EntryValue]) -> (String, String) {
    if values.is_empty() {
        return (
            "declared".to_owned(),
            format!("changed: {}", fields.join(", ")),
        );
    }
    let mut declared = Vec::new();
    let mut observed = Vec::new();
    if fields.iter().any(|f| f == "content") {
        declared.push("content as declared".to_owned());
        observed.push("content changed".to_owned());
    }
    for v in values {
        declared.push(format!("{} {}", v.field, v.declared));
        observed.push(format!("{} {}", v.field, v.observed));
    }
    (declared.join(", "), observed.join(", "))
}

fn show(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "(none)".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

fn short(sha: &str) -> String {
    if sha.len() > 12 {
        format!("sha256:{}", &sha[..12])
    } else {
        sha.to_owned()
    }
}

/// A unified diff from the declared text to the live one (what changed on
/// the host), for text that is valid UTF-8 on both sides.
fn text_diff(declared: &[u8], live: Option<&[u8]>, name: &str) -> Option<String> {
    let declared = std::str::from_utf8(declared).ok()?;
    let live = std::str::from_utf8(live?).ok()?;
    let diff = similar::TextDiff::configure()
        .timeout(datum_core::diff::TEXT_DIFF_TIMEOUT)
        .diff_lines(declared, live);
    Some(
        diff.unified_diff()
            .context_radius(2)
            .header(&format!("{name} (declared)"), &format!("{name} (live)"))
            .to_string(),
    )
}

#[cfg(test)]
mod tests {
    use datum_core::{Action, ContentChange, FieldChange};
    use serde_json::json;

    use super::*;

    fn run(kind: &str, presence: Presence, diff: Diff, sensitive: bool) -> Vec<CheckFinding> {
        let id = ResourceId::new(kind, "x");
        let mut observed = Observed::absent();
        observed.presence = presence;
        observed.content = Some(b"old\n".to_vec());
        findings_for(&Inspected {
            id: &id,
            class: "normal",
            sensitive,
            masked_only: None,
            owns_subtree: false,
            entries: None,
            target: Some("/etc/x"),
            observed: &observed,
            diff: &diff,
        })
    }

    fn update(fields: &[&str], content: bool) -> Diff {
        Diff {
            action: Some(Action::Update),
            changes: fields
                .iter()
                .map(|f| FieldChange {
                    field: (*f).to_owned(),
                    before: Some(json!("0600")),
                    after: Some(json!("0644")),
                })
                .collect(),
            content: content.then(|| {
                Box::new(ContentChange {
                    before: Some(b"old\n".to_vec()),
                    after: b"new\n".to_vec(),
                    before_sha256: Some("a".repeat(64)),
                    after_sha256: "b".repeat(64),
                    live_withheld: false,
                    declared_unread: false,
                })
            }),
        }
    }

    #[test]
    fn one_finding_per_resource_in_the_right_category() {
        let f = run("File", Presence::Present, update(&["mode"], true), false);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].finding.category, "changed_outside");
        let paths: Vec<&str> = f[0].finding.diffs.iter().map(|d| d.path()).collect();
        assert_eq!(paths, vec!["mode", "content"]);
        // Declared -> live: the host's "old" text is what was added there.
        let diff = f[0].content_diff.as_deref().unwrap();
        assert!(diff.contains("-new\n") && diff.contains("+old\n"), "{diff}");
        assert!(diff.contains("--- /etc/x (declared)") && diff.contains("+++ /etc/x (live)"));
        let mode = &f[0].finding.diffs[0];
        assert_eq!((mode.before(), mode.after()), (Some("0644"), Some("0600")));

        let f = run("File", Presence::Absent, update(&["mode"], true), false);
        assert_eq!(f[0].finding.category, "deleted_outside");
        let f = run(
            "File",
            Presence::OtherType("symlink".into()),
            update(&["type", "mode"], true),
            false,
        );
        assert_eq!(f[0].finding.category, "type_changed");
        assert!(run("File", Presence::Present, Diff::default(), false).is_empty());
    }

    /// A live file not everyone may read: its checksums, and a note in
    /// place of the diff, never a line of it (even were its bytes at hand).
    #[test]
    fn a_withheld_live_file_gets_a_note_not_its_lines() {
        let mut diff = update(&[], true);
        if let Some(c) = diff.content.as_mut() {
            c.live_withheld = true;
        }
        let f = run("File", Presence::Present, diff, false);
        let note = f[0].content_diff.as_deref().unwrap();
        assert_eq!(note, datum_core::diff::withheld_note("/etc/x"));
        assert!(!note.contains("old"), "{note}");
        let content = &f[0].finding.diffs[0];
        assert_eq!(content.path(), "content");
        assert_eq!(content.after(), Some(short(&"a".repeat(64)).as_str()));
    }

    /// A Tree whose folder became a link or a file: its provider names the
    /// change `tree:.` (the tree's root); the finding says `type`, as a
    /// File's does, rather than nothing at all.
    #[test]
    fn a_tree_whose_folder_changed_type_says_what_it_became() {
        let id = ResourceId::new("Tree", "conf-d");
        let mut observed = Observed::absent();
        observed.presence = Presence::OtherType("symlink".into());
        let diff = Diff {
            action: Some(Action::Replace),
            changes: vec![FieldChange {
                field: "tree:.".to_owned(),
                before: Some(json!("symlink")),
                after: Some(json!("directory")),
            }],
            content: None,
        };
        let f = findings_for(&Inspected {
            id: &id,
            class: "normal",
            sensitive: false,
            masked_only: None,
            owns_subtree: true,
            entries: Some(&[]),
            target: Some("/etc/app/conf.d"),
            observed: &observed,
            diff: &diff,
        });
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].finding.category, "type_changed");
        let diffs: Vec<(&str, Option<&str>, Option<&str>)> = f[0]
            .finding
            .diffs
            .iter()
            .map(|d| (d.path(), d.before(), d.after()))
            .collect();
        assert_eq!(diffs, vec![("type", Some("directory"), Some("symlink"))]);
    }

    #[test]
    fn sensitive_resources_keep_no_values() {
        let f = run("File", Presence::Present, update(&["mode"], true), true);
        assert!(f[0].content_diff.is_none());
        assert!(f[0].finding.diffs.iter().all(|d| d.is_sensitive()));
        let text = format!("{:?}", f[0]);
        assert!(!text.contains("old") && !text.contains("0600"));
    }

    /// A resource sensitive only through a field its kind calls sensitive
    /// (a User's `password_hash`) masks that field alone, and any content.
    #[test]
    fn a_resource_sensitive_by_a_field_masks_that_field_only() {
        let id = ResourceId::new("User", "deploy");
        let mut observed = Observed::absent();
        observed.presence = Presence::Present;
        let diff = update(&["shell", "password_hash"], true);
        let f = findings_for(&Inspected {
            id: &id,
            class: "normal",
            sensitive: true,
            masked_only: Some(&["password_hash"]),
            owns_subtree: false,
            entries: None,
            target: None,
            observed: &observed,
            diff: &diff,
        });
        let diffs = &f[0].finding.diffs;
        let masked: Vec<(&str, bool)> =
            diffs.iter().map(|d| (d.path(), d.is_sensitive())).collect();
        assert_eq!(
            masked,
            [("shell", false), ("password_hash", true), ("content", true)]
        );
        assert_eq!(
            (diffs[0].before(), diffs[0].after()),
            (Some("0644"), Some("0600"))
        );
        assert!(f[0].content_diff.is_none());
    }

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

    /// A Tree's findings, `entries` as its capability read them.
    fn tree(entries: Option<&[EntryDifference]>, sensitive: bool) -> Vec<CheckFinding> {
        let id = ResourceId::new("Tree", "conf");
        let mut observed = Observed::absent();
        observed.presence = Presence::Present;
        findings_for(&Inspected {
            id: &id,
            class: "critical",
            sensitive,
            masked_only: None,
            owns_subtree: true,
            entries,
            target: Some("/etc/conf"),
            observed: &observed,
            diff: &Diff::default(),
        })
    }

    #[test]
    fn tree_differences_group_by_category() {
        let id = ResourceId::new("Tree", "conf");
        let entries = [
            at("a.conf", changed(&["content"], &[], Some("--- a.conf\n"))),
            at("a.conf~", EntryDrift::Unmanaged),
            at("b.swp", EntryDrift::Unmanaged),
        ];
        let f = tree(Some(&entries), false);
        let cats: Vec<&str> = f.iter().map(|f| f.finding.category.as_str()).collect();
        assert_eq!(cats, vec!["changed_outside", "unmanaged"]);
        assert_eq!(f[1].finding.diffs.len(), 2);
        assert_eq!(f[0].finding.diffs[0].after(), Some("changed: content"));
        // Each finding is the Tree's, and only the changed entries' carries
        // their text diffs.
        for finding in &f {
            assert_eq!(finding.finding.subject, "Tree[conf]");
            assert_eq!(
                (finding.id.clone(), finding.class.as_str()),
                (id.clone(), "critical")
            );
            assert_eq!(finding.target.as_deref(), Some("/etc/conf"));
            assert!(finding.changed_by.is_empty());
        }
        assert_eq!(f[0].content_diff.as_deref(), Some("--- a.conf\n"));
        assert_eq!(f[1].content_diff, None);
    }

    /// Every category worded, the folder itself as `.`, a type change
    /// whose sides are not known as `?`, and a sensitive Tree's changed
    /// entries masked, their text diffs dropped.
    #[test]
    fn each_entry_is_worded_in_its_category() {
        let entries = [
            at("", changed(&["mode"], &[("mode", "0755", "0700")], None)),
            at("gone", EntryDrift::Missing),
            at(
                "d",
                EntryDrift::TypeChanged {
                    declared: Some("directory".to_owned()),
                    found: Some("symlink".to_owned()),
                },
            ),
            at(
                "e",
                EntryDrift::TypeChanged {
                    declared: None,
                    found: None,
                },
            ),
            at("c", changed(&["content"], &[], Some("--- c\n"))),
        ];
        let shown = |f: &[CheckFinding]| -> Vec<(String, String, String, String)> {
            f.iter()
                .flat_map(|f| {
                    f.finding.diffs.iter().map(|d| {
                        (
                            f.finding.category.clone(),
                            d.path().to_owned(),
                            d.before().unwrap_or("-").to_owned(),
                            d.after().unwrap_or("-").to_owned(),
                        )
                    })
                })
                .collect()
        };
        let row = |c: &str, p: &str, b: &str, a: &str| {
            (c.to_owned(), p.to_owned(), b.to_owned(), a.to_owned())
        };
        let f = tree(Some(&entries), false);
        assert_eq!(
            shown(&f),
            vec![
                row("changed_outside", ".", "mode 0755", "mode 0700"),
                row("changed_outside", "c", "declared", "changed: content"),
                row("deleted_outside", "gone", "present", "absent"),
                row("type_changed", "d", "directory", "symlink"),
                row("type_changed", "e", "?", "?"),
            ]
        );
        assert_eq!(f[0].content_diff.as_deref(), Some("--- c\n"));
        let f = tree(Some(&entries), true);
        assert!(f[0].finding.diffs.iter().all(|d| d.is_sensitive()));
        assert_eq!(f[0].content_diff, None);
        assert_eq!(shown(&f[1..]), shown(&tree(Some(&entries), false)[1..]));
    }

    /// Entry findings come from the kind's capability only: a kind without
    /// it gets none, whatever its observation holds (even a list a Tree's
    /// would), nor does a Tree with no entry drifted.
    #[test]
    fn a_kind_without_entry_differences_gives_no_entry_findings() {
        let id = ResourceId::new("File", "x");
        let mut observed = Observed::absent();
        observed.presence = Presence::Present;
        observed.fields.insert(
            "tree".into(),
            json!([{"category": "unmanaged", "path": "a.conf~"}]),
        );
        for owns_subtree in [false, true] {
            let f = findings_for(&Inspected {
                id: &id,
                class: "normal",
                sensitive: false,
                masked_only: None,
                owns_subtree,
                entries: None,
                target: Some("/etc/x"),
                observed: &observed,
                diff: &Diff::default(),
            });
            assert!(f.is_empty(), "{f:?}");
        }
        assert!(tree(Some(&[]), false).is_empty());
        // The same entry, asked of the capability, is a finding.
        let f = tree(Some(&[at("a.conf~", EntryDrift::Unmanaged)]), false);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].finding.category, "unmanaged");
    }

    #[test]
    fn a_changed_tree_entry_shows_declared_and_observed_values() {
        let EntryDrift::Changed { fields, values, .. } = changed(
            &["content", "mode", "owner"],
            &[("mode", "0644", "0777"), ("owner", "0", "1000")],
            None,
        ) else {
            unreachable!("a changed entry");
        };
        let (declared, observed) = entry_values(&fields, &values);
        assert_eq!(declared, "content as declared, mode 0644, owner 0");
        assert_eq!(observed, "content changed, mode 0777, owner 1000");
        let (declared, observed) = entry_values(&fields, &[]);
        assert_eq!(declared, "declared");
        assert_eq!(observed, "changed: content, mode, owner");
    }
}
