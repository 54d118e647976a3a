//! Configuration files of declared packages that changed after the package
//! installed them (dpkg's conffiles, checked against their packaged MD5 sums):
//! one finding each, for `datum check` and the agent's own checks alike.
//! Report only, whatever the class's policy: nothing declares their content,
//! so there is nothing to revert to. Must not read files a File or Tree
//! declares: those are that resource's findings.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use datum_core::Resource;
use datum_drift::check::CheckFinding;
use datum_host::Host;
use datum_report::AttrDiff;

/// Package-owned configuration files (dpkg's conffiles, and the files a
/// package put under /etc) of the declared, installed packages that differ
/// from the packaged version: one finding each, subject
/// `Package[name]:/path`. A path a File declares, or one inside a declared
/// Tree, is left out: that resource reports it, so a change is reported once.
/// `declared` is every resource's (kind, declared path); `checked` are the
/// resources this check inspected (only the Packages among them count).
/// Errors (the package database cannot be read) come back as (resource,
/// reason) pairs, attributed to the first declared package.
pub(crate) fn findings<'a>(
    declared: impl IntoIterator<Item = (&'a str, &'a str)>,
    checked: impl IntoIterator<Item = &'a Resource>,
    host: &Host,
) -> (Vec<CheckFinding>, Vec<(String, String)>) {
    use datum_providers::package::{self, Wanted};
    let mut owners: BTreeMap<String, &Resource> = BTreeMap::new();
    for r in checked {
        if r.id.kind != package::KIND {
            continue;
        }
        // An invalid declaration already failed its own observation.
        if let Ok(spec) = package::spec(r)
            && spec.state != Wanted::Absent
        {
            owners.insert(spec.bare_name().to_owned(), r);
        }
    }
    let Some(first) = owners.values().next() else {
        return (Vec::new(), Vec::new());
    };
    let names: Vec<String> = owners.keys().cloned().collect();
    let drift = match package::changed_conffiles(host, Some(&names)) {
        Ok(drift) => drift,
        Err(e) => return (Vec::new(), vec![(first.id.to_string(), e.to_string())]),
    };
    let mut files: HashSet<&Path> = HashSet::new();
    let mut trees: Vec<&Path> = Vec::new();
    for (kind, path) in declared {
        if crate::checking::owns_subtree(kind) {
            trees.push(Path::new(path));
        } else {
            files.insert(Path::new(path));
        }
    }
    let md5 = |sum: &str| format!("md5:{}", sum.get(..12).unwrap_or(sum));
    let mut findings = Vec::new();
    for d in drift {
        if files.contains(d.path.as_path()) || trees.iter().any(|t| d.path.starts_with(t)) {
            continue;
        }
        let Some(owner) = owners.get(&d.package) else {
            continue;
        };
        let (category, diff) = match (&d.actual_md5, d.found) {
            // Declared (here: packaged) -> observed, like every check finding.
            (_, Some(found)) => ("type_changed", AttrDiff::plain("type", "file", found)),
            (None, None) => (
                "deleted_outside",
                AttrDiff::plain("presence", "present", "absent"),
            ),
            (Some(actual), None) => (
                "changed_outside",
                AttrDiff::plain(
                    "content",
                    format!("{} (packaged)", md5(&d.expected_md5)),
                    md5(actual),
                ),
            ),
        };
        let path = d.path.display().to_string();
        findings.push(CheckFinding {
            finding: datum_report::Finding {
                subject: format!("{}:{path}", owner.id),
                category: category.to_owned(),
                diffs: vec![diff],
            },
            id: owner.id.clone(),
            class: owner.class.clone(),
            target: Some(path),
            content_diff: None,
            changed_by: Vec::new(),
        });
    }
    (findings, Vec::new())
}
