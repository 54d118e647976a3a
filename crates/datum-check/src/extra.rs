//! The findings a kind adds to a check beyond each resource's own diff,
//! through its [`ExtraFindings`] capability (a Package: dpkg's conffiles
//! and files it put under `/etc`, changed since it installed them), worded
//! as check findings: subject `Kind[name]:/path`, declared (what the kind
//! put there) -> observed. For `datum check` and the agent's own checks
//! alike. Report only, whatever the class's policy: nothing declares their
//! content, so there is nothing to revert to. Must not report a path a
//! resource declares, or one inside a resource that owns its subtree: that
//! resource reports it, so a change is reported once.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use datum_core::Resource;
use datum_drift::check::CheckFinding;
use datum_host::Host;
use datum_providers::{ExtraDrift, ExtraFinding, ExtraFindings, Registry};
use datum_report::AttrDiff;

/// The paths the catalogue declares: what another resource reports.
#[derive(Debug, Default)]
pub struct Declared<'a> {
    paths: HashSet<&'a Path>,
    /// Paths of resources that own their subtree (a Tree's folder).
    subtrees: Vec<&'a Path>,
}

impl<'a> Declared<'a> {
    /// From every resource's (kind, declared path).
    pub fn new(
        registry: &Registry,
        declared: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Self {
        let mut out = Declared::default();
        for (kind, path) in declared {
            if crate::owns_subtree(registry, kind) {
                out.subtrees.push(Path::new(path));
            } else {
                out.paths.insert(Path::new(path));
            }
        }
        out
    }

    /// Whether a declared resource covers `path`.
    pub fn covers(&self, path: &Path) -> bool {
        self.paths.contains(path) || self.subtrees.iter().any(|t| path.starts_with(t))
    }
}

/// The extra findings of the `checked` resources whose kind has the
/// capability, one check finding each, leaving out what `declared` covers
/// (built only when some checked resource has the capability: a check of
/// 20,000 Files and no Package never indexes their paths).
/// A kind whose findings cannot be read (the package database) comes back
/// as a (resource, reason) pair, attributed to its first resource.
pub fn findings<'a, 'd>(
    registry: &Registry,
    declared: impl FnOnce() -> Declared<'d>,
    checked: impl IntoIterator<Item = &'a Resource>,
    host: &Host,
) -> (Vec<CheckFinding>, Vec<(String, String)>) {
    // By kind, in the catalogue's order of first appearance per kind.
    let mut by_kind: BTreeMap<&str, (&dyn ExtraFindings, Vec<&Resource>)> = BTreeMap::new();
    for r in checked {
        let Some(extra) = registry.lookup(&r.id.kind).and_then(|p| p.extra_findings()) else {
            continue;
        };
        by_kind
            .entry(r.id.kind.as_str())
            .or_insert_with(|| (extra, Vec::new()))
            .1
            .push(r);
    }
    let mut findings = Vec::new();
    let mut errors = Vec::new();
    if by_kind.is_empty() {
        return (findings, errors);
    }
    let declared = declared();
    for (extra, resources) in by_kind.values() {
        let found = match extra.findings(host, resources) {
            Ok(found) => found,
            Err(e) => {
                if let Some(first) = resources.first() {
                    errors.push((first.id.to_string(), e.to_string()));
                }
                continue;
            }
        };
        let class: BTreeMap<_, _> = resources.iter().map(|r| (&r.id, &r.class)).collect();
        for f in found {
            if declared.covers(&f.path) {
                continue;
            }
            let Some(class) = class.get(&f.owner) else {
                continue;
            };
            findings.push(check_finding(f, class));
        }
    }
    (findings, errors)
}

/// One extra finding as check words it.
fn check_finding(f: ExtraFinding, class: &str) -> CheckFinding {
    let (category, diff) = match f.drift {
        // Declared (here: what the kind put there) -> observed, like every
        // check finding.
        ExtraDrift::TypeChanged { found } => {
            ("type_changed", AttrDiff::plain("type", "file", found))
        }
        ExtraDrift::Deleted => (
            "deleted_outside",
            AttrDiff::plain("presence", "present", "absent"),
        ),
        ExtraDrift::Changed {
            field,
            expected,
            found,
        } => ("changed_outside", AttrDiff::plain(field, expected, found)),
    };
    let path = f.path.display().to_string();
    CheckFinding {
        finding: datum_report::Finding {
            subject: format!("{}:{path}", f.owner),
            category: category.to_owned(),
            diffs: vec![diff],
        },
        id: f.owner,
        class: class.to_owned(),
        target: Some(path),
        content_diff: None,
        changed_by: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use datum_core::ResourceId;
    use datum_testkit::fake::{FAKE_FILE, FAKE_UNIT, fake_registry, fake_unit};

    use super::*;

    fn at(owner: &Resource, path: &str, drift: ExtraDrift) -> ExtraFinding {
        ExtraFinding {
            owner: owner.id.clone(),
            path: PathBuf::from(path),
            drift,
        }
    }

    #[test]
    fn a_kinds_extra_findings_are_worded_as_check_findings_unless_declared() {
        let (registry, _, faults) = fake_registry();
        let root = tempfile::tempdir().unwrap();
        let host = Host::new(root.path().to_path_buf());
        let unit = Resource {
            class: "critical".to_owned(),
            ..fake_unit("web", &[])
        };
        let other = fake_unit("other", &[]);
        faults.report_extra(at(
            &unit,
            "/etc/web/a.conf",
            ExtraDrift::Changed {
                field: "content",
                expected: "md5:1 (packaged)".to_owned(),
                found: "md5:2".to_owned(),
            },
        ));
        faults.report_extra(at(&unit, "/etc/web/gone.conf", ExtraDrift::Deleted));
        faults.report_extra(at(
            &unit,
            "/etc/web/link.conf",
            ExtraDrift::TypeChanged {
                found: "symlink".to_owned(),
            },
        ));
        // A path another resource declares: that resource reports it.
        faults.report_extra(at(&unit, "/etc/web/declared.conf", ExtraDrift::Deleted));
        // A unit this check did not inspect.
        faults.report_extra(at(&other, "/etc/other.conf", ExtraDrift::Deleted));
        let declared = || Declared::new(&registry, [(FAKE_FILE, "/etc/web/declared.conf")]);
        let (found, errors) = findings(&registry, declared, [&unit], &host);
        assert!(errors.is_empty(), "{errors:?}");
        let words: Vec<(String, String, String)> = found
            .iter()
            .map(|f| {
                (
                    f.finding.subject.clone(),
                    f.finding.category.clone(),
                    format!(
                        "{}: {} -> {}",
                        f.finding.diffs[0].path(),
                        f.finding.diffs[0].before_display(),
                        f.finding.diffs[0].after_display()
                    ),
                )
            })
            .collect();
        assert_eq!(
            words,
            vec![
                (
                    "FakeUnit[web]:/etc/web/a.conf".to_owned(),
                    "changed_outside".to_owned(),
                    "content: md5:1 (packaged) -> md5:2".to_owned()
                ),
                (
                    "FakeUnit[web]:/etc/web/gone.conf".to_owned(),
                    "deleted_outside".to_owned(),
                    "presence: present -> absent".to_owned()
                ),
                (
                    "FakeUnit[web]:/etc/web/link.conf".to_owned(),
                    "type_changed".to_owned(),
                    "type: file -> symlink".to_owned()
                ),
            ]
        );
        assert!(
            found
                .iter()
                .all(|f| f.id == unit.id && f.class == "critical")
        );
        assert_eq!(found[0].target.as_deref(), Some("/etc/web/a.conf"));
    }

    #[test]
    fn kinds_without_the_capability_add_nothing_and_a_failure_is_an_error() {
        let (registry, _, faults) = fake_registry();
        let root = tempfile::tempdir().unwrap();
        let host = Host::new(root.path().to_path_buf());
        let file = Resource::new(ResourceId::new(FAKE_FILE, "a"), serde_json::json!({}));
        // Nothing with the capability: the declared paths are never indexed.
        let (found, errors) = findings(
            &registry,
            || -> Declared<'_> { panic!("indexed for nothing") },
            [&file],
            &host,
        );
        assert!(found.is_empty() && errors.is_empty());
        faults.fail_extra();
        let unit = fake_unit("web", &[]);
        let (found, errors) = findings(&registry, Declared::default, [&file, &unit], &host);
        assert!(found.is_empty());
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].0, format!("{FAKE_UNIT}[web]"));
        assert!(errors[0].1.contains("unreadable"), "{}", errors[0].1);
    }
}
