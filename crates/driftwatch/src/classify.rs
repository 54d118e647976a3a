//! One category per drifted resource, decided by what the next apply does.
//!
//! Drift comes from the refresh-only plan; the consequence comes from the normal plan's
//! `resource_changes` for the same address (joined on the current address, after `moved`).
//! The decision table, in order:
//!
//! | drift | normal plan | category |
//! |---|---|---|
//! | delete | anything | deleted outside |
//! | update | replace | replaced by the next apply |
//! | update | every changed path covered by `ignore_changes` | ignored |
//! | update | no-op | ignored |
//! | update | forget (the forget itself is pending) | ignored |
//! | update | not listed, in a plan that lists other changes | ignored |
//! | update | update of other paths only (the update itself is pending) | ignored |
//! | update | update, delete, or `--drift-only` | changed outside |
//!
//! A real normal plan lists every managed instance, no-ops included, so "not listed" only
//! happens in trimmed or hand-written plans; there it means the plan does not touch the
//! resource. A normal plan with no `resource_changes` at all proves nothing, and its drift
//! stays "changed outside".
//!
//! `no-op` drift (a move without a value change), an update whose two sides differ only
//! between `null` and an empty map, list or string, data sources and deposed objects are not
//! findings; nor are the members other resources of the stack added to a role's or a
//! security group's set, unless the next apply changes that set (`plan::siblings`). Whatever the normal plan does to an address that did not drift is pending: an
//! unapplied change, listed apart. `--ignore-attr` paths are removed from every diff before
//! classifying, and a resource left without any changed path disappears.

use std::collections::{BTreeMap, BTreeSet};

use datum_report::{AttrDiff, Signature, history::Seen};

use crate::flatten::Path;
use crate::plan::{Action, ChangeEntry, DriftEntry, Leaf, LeafDiff, Plan};
use crate::rules::Rules;

/// The tool name used in dedupe keys.
pub const TOOL: &str = "driftwatch";

/// What happened to a drifted resource and what the next apply does about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Category {
    /// Listed first: the finding a reviewer most needs to see.
    Replaced,
    DeletedOutside,
    ChangedOutside,
    Ignored,
}

impl Category {
    /// The id used in JSON, history and fingerprints.
    pub fn id(self) -> &'static str {
        match self {
            Category::Replaced => "replaced",
            Category::DeletedOutside => "deleted_outside",
            Category::ChangedOutside => "changed_outside",
            Category::Ignored => "ignored",
        }
    }

    /// The phrase used in text and Markdown.
    pub fn phrase(self) -> &'static str {
        match self {
            Category::Replaced => "replaced by the next apply",
            Category::DeletedOutside => "deleted outside",
            Category::ChangedOutside => "changed outside",
            Category::Ignored => "ignored",
        }
    }

    /// The marker at the start of a text line, as in a plan.
    pub fn marker(self) -> &'static str {
        match self {
            Category::Replaced => "-/+",
            Category::DeletedOutside => "-",
            Category::ChangedOutside => "~",
            Category::Ignored => "=",
        }
    }
}

/// One attribute of a finding: the displayable diff plus, for codify, the new value.
#[derive(Debug, Clone, PartialEq)]
pub struct Diff {
    pub path: Path,
    pub shown: AttrDiff,
    /// The refreshed value; `None` when sensitive.
    pub after: Option<Leaf>,
}

/// One drifted managed resource instance.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub address: String,
    pub previous_address: Option<String>,
    pub category: Category,
    /// The normal plan's action for this address; `None` with `--drift-only` or when the
    /// normal plan does not mention it.
    pub next_apply: Option<Action>,
    pub diffs: Vec<Diff>,
    /// All `replace_paths` of the replacing change, rendered.
    pub replace_paths: Vec<String>,
    /// The `replace_paths` that are (or contain) drifted paths: why drift forces a replace.
    pub forcing_paths: Vec<String>,
    /// The `ignore_changes` entries that cover at least one changed path.
    pub ignored_by: Vec<String>,
    /// The normal plan updates this resource, but only attributes that did not drift.
    pub left_alone_by_update: bool,
    /// The normal plan sets a drifted attribute to a new value from the configuration,
    /// not back to the last apply's (the configuration changed since).
    pub overwritten: bool,
    /// The normal plan's `action_reason` for a replacement (`replace_because_tainted`, ...).
    pub replace_reason: Option<String>,
    /// Checked against a normal plan that lists resource changes (false with
    /// `--drift-only`, or when the plan lists none): only then does an address the plan
    /// leaves out say anything about the configuration.
    pub plan_checked: bool,
    /// Filled by history when `--history` is given.
    pub age: Option<Seen>,
}

impl Finding {
    pub fn is_actionable(&self) -> bool {
        self.category != Category::Ignored
    }

    /// The tool-independent view used by fingerprints and history.
    pub fn shared(&self) -> datum_report::Finding {
        datum_report::Finding {
            subject: self.address.clone(),
            category: self.category.id().to_owned(),
            diffs: self.diffs.iter().map(|d| d.shown.clone()).collect(),
        }
    }

    pub fn signature(&self) -> Signature {
        self.shared().signature()
    }

    /// What the next apply does, in words.
    pub fn consequence(&self) -> String {
        match (self.category, &self.next_apply) {
            (Category::Replaced, _) => {
                // A replacement the drift did not force says what did, so that the drift
                // is not taken for its cause.
                let why = match self.replace_reason.as_deref() {
                    _ if !self.forcing_paths.is_empty() => "",
                    Some("replace_because_tainted") => " (it is tainted)",
                    Some("replace_by_triggers") => " (replace_triggered_by)",
                    Some("replace_by_request") => " (-replace was requested)",
                    _ => "",
                };
                format!("the next apply destroys and recreates it{why}")
            }
            (Category::DeletedOutside, Some(Action::Create | Action::Replace)) => {
                "the next apply creates it again".to_owned()
            }
            (Category::DeletedOutside, _) if !self.plan_checked => {
                "not checked against a normal plan".to_owned()
            }
            (Category::DeletedOutside, _) => {
                "no longer in the configuration either; the next apply only updates state"
                    .to_owned()
            }
            (Category::Ignored, _) if !self.ignored_by.is_empty() => {
                format!("covered by ignore_changes ({})", self.ignored_by.join(", "))
            }
            (Category::Ignored, Some(Action::Update)) if self.left_alone_by_update => {
                "the next apply updates other attributes and leaves this drift alone".to_owned()
            }
            (Category::Ignored, Some(Action::Forget)) => {
                "the next apply stops managing it (forget) and leaves it as it is".to_owned()
            }
            (Category::Ignored, None) => {
                "not among the normal plan's changes; the next apply leaves it alone".to_owned()
            }
            (Category::Ignored, _) => "the next apply leaves it alone (no-op)".to_owned(),
            (Category::ChangedOutside, Some(Action::Update)) if self.overwritten => {
                "the next apply sets a new value from the configuration, not the last apply's"
                    .to_owned()
            }
            (Category::ChangedOutside, Some(Action::Update)) => {
                "the next apply reverts it".to_owned()
            }
            (Category::ChangedOutside, Some(Action::Delete)) => {
                "the next apply destroys it (removed from the configuration)".to_owned()
            }
            (Category::ChangedOutside, Some(other)) => {
                format!("the next apply: {}", other.as_str())
            }
            (Category::ChangedOutside, None) => "not checked against a normal plan".to_owned(),
        }
    }
}

/// An unapplied change: the normal plan acts on an address that did not drift.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub address: String,
    /// `create`, `update`, `replace`, `delete`, `forget`, `import`, `delete-deposed`, ...
    pub action: String,
    pub reason: Option<String>,
    pub paths: Vec<String>,
}

impl Pending {
    /// What the normal plan does to `change` beside the drift: `action`
    /// (the change's own unless it is deposed or imported), on `paths`.
    fn of(change: &ChangeEntry, action: String, paths: &[Path]) -> Self {
        Pending {
            address: change.address.clone(),
            action,
            reason: change.action_reason.clone(),
            paths: paths.iter().map(Path::to_string).collect(),
        }
    }

    pub fn marker(&self) -> &'static str {
        match self.action.as_str() {
            "create" => "+",
            "update" => "~",
            "replace" => "-/+",
            "delete" | "delete-deposed" => "-",
            "import" => "<=",
            _ => "?",
        }
    }
}

/// Options that change classification.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--ignore-attr`: paths dropped from every diff (prefix match).
    pub ignore_attrs: Vec<Path>,
}

/// The whole triage result for one stack.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub stack: String,
    pub key: String,
    pub findings: Vec<Finding>,
    pub pending: Vec<Pending>,
    /// Things a reader should know that are not findings (moves, partial plans...).
    pub notes: Vec<String>,
    /// Whether a normal plan was used (false with `--drift-only`).
    pub with_plan: bool,
}

impl Report {
    pub fn fingerprint(&self) -> String {
        let sigs: Vec<Signature> = self.findings.iter().map(Finding::signature).collect();
        datum_report::fingerprint(&sigs)
    }

    pub fn count(&self, category: Category) -> usize {
        self.findings
            .iter()
            .filter(|f| f.category == category)
            .count()
    }

    pub fn actionable(&self) -> usize {
        self.findings.iter().filter(|f| f.is_actionable()).count()
    }
}

fn render_value(value: &Leaf) -> String {
    // JSON text: strings quoted, so `"blue"` and `blue` cannot be confused with `null`;
    // numbers with the digits the plan wrote.
    value.json()
}

fn to_diff(leaf: &LeafDiff) -> Diff {
    let path_text = leaf.path.to_string();
    match (&leaf.before, &leaf.after, leaf.sensitive) {
        (Some(before), Some(after), false) => Diff {
            path: leaf.path.clone(),
            shown: AttrDiff::plain(path_text, render_value(before), render_value(after)),
            after: Some(after.clone()),
        },
        _ => Diff {
            path: leaf.path.clone(),
            shown: AttrDiff::sensitive(path_text),
            after: None,
        },
    }
}

/// Whether an update's changes are all on paths that did not drift: neither a path it
/// changes nor one it leaves known only after apply (which may be a drifted one) touches a
/// drifted path. An update that says nothing about its paths (neither list has any: e.g. a
/// trimmed plan) counts as reverting the drift. `drifted` is every path that drifted, those
/// hidden by `--ignore-attr` included: an update that reverts a hidden path still reverts
/// drift, and is not an unapplied change.
fn updates_only_other_paths(change: &ChangeEntry, drifted: &[&Path]) -> bool {
    let touches_drift = |path: &Path| drifted.iter().any(|d| path.covers(d) || d.covers(path));
    (!change.changed_paths.is_empty() || !change.unknown_paths.is_empty())
        && !drifted.is_empty()
        && !change.changed_paths.iter().any(touches_drift)
        && !change.unknown_paths.iter().any(touches_drift)
}

/// The arrays that drifted and that the update puts back as the last apply left them,
/// compared as sets ([`crate::plan::ArrayDigest`]): plan JSON writes a set (a security
/// group's `ingress`) by position, so a member added outside shifts the others, and the
/// update's removal of it reads, position by position, as changes to members that did not
/// drift. Every path under such an array is the revert of drift.
fn arrays_put_back<'c>(change: &'c ChangeEntry, entry: &DriftEntry) -> Vec<&'c Path> {
    change
        .arrays
        .iter()
        .filter(|planned| {
            entry
                .arrays
                .iter()
                .any(|drifted| drifted.path == planned.path && drifted.before == planned.after)
        })
        .map(|planned| &planned.path)
        .collect()
}

/// The paths an update of a drifted resource changes for the configuration's sake, not to
/// revert drift: paths that touch no drifted path, and drifted paths it sets to something
/// other than the last apply's value (compared by digest; a sensitive one cannot be, and
/// counts as reverted). Paths under an array the update puts back (`put_back`) are a
/// revert whatever their positions. The flag says whether a drifted path is among them.
fn configured_paths(
    change: &ChangeEntry,
    drift: &[LeafDiff],
    put_back: &[&Path],
) -> (Vec<Path>, bool) {
    let touches_drift = |path: &Path| {
        drift
            .iter()
            .any(|d| path.covers(&d.path) || d.path.covers(path))
            || put_back.iter().any(|a| a.covers(path))
    };
    let mut out: Vec<Path> = change
        .changed_paths
        .iter()
        .filter(|p| !touches_drift(p))
        .cloned()
        .collect();
    let mut overwritten = false;
    for (path, digest) in &change.changed_to {
        if put_back.iter().any(|a| a.covers(path)) {
            continue;
        }
        let Some(before) = drift
            .iter()
            .find(|d| !d.sensitive && &d.path == path)
            .and_then(|d| d.before.as_ref())
        else {
            continue;
        };
        let before = Some(before).filter(|b| !b.is_null());
        if crate::plan::leaf_digest(before) != *digest {
            overwritten = true;
            out.push(path.clone());
        }
    }
    out.sort();
    out.dedup();
    (out, overwritten)
}

/// A leaf that is `null` on one side and `""` on the other (the plan parser already
/// leaves out `null` against `{}` or `[]`: neither has a leaf). A sensitive leaf has no
/// values to tell, and is a change; so is a key missing on one side (a tag holding `""`
/// added or removed outside: [`LeafDiff::missing`]).
fn null_against_empty_string(leaf: &LeafDiff) -> bool {
    let absent = |side: &Option<Leaf>| {
        side.as_ref().is_some_and(|l| {
            l.is_null() || matches!(l, Leaf::Value(serde_json::Value::String(s)) if s.is_empty())
        })
    };
    !leaf.sensitive && !leaf.missing && absent(&leaf.before) && absent(&leaf.after)
}

/// Classify the drift of `refresh` against `normal` (absent with `--drift-only`).
/// `entry` without the sets other resources of the stack filled (members an
/// `aws_iam_role_policy` or an `aws_security_group_rule` adds, read as drift after the
/// apply that made them: see `plan::siblings`), unless the next apply changes that set;
/// `None` when there are none.
fn made_by_others(entry: &DriftEntry, change: Option<&ChangeEntry>) -> Option<DriftEntry> {
    let touched = |set: &Path| {
        change.is_some_and(|c| {
            c.changed_paths
                .iter()
                .chain(&c.unknown_paths)
                .any(|p| set.covers(p))
        })
    };
    let sets: Vec<&Path> = entry
        .made_by_others
        .iter()
        .filter(|set| !touched(set))
        .collect();
    if sets.is_empty() {
        return None;
    }
    let mut left = entry.clone();
    left.diffs
        .retain(|leaf| !sets.iter().any(|set| set.covers(&leaf.path)));
    left.arrays
        .retain(|array| !sets.iter().any(|set| set.covers(&array.path)));
    Some(left)
}

pub fn classify(
    stack: &str,
    refresh: &Plan,
    normal: Option<&Plan>,
    rules: &Rules,
    options: &Options,
) -> Report {
    let mut notes = Vec::new();
    let changes: BTreeMap<&str, &ChangeEntry> = normal
        .map(|plan| {
            plan.changes
                .iter()
                .filter(|c| !c.deposed)
                .map(|c| (c.address.as_str(), c))
                .collect()
        })
        .unwrap_or_default();

    let plan_lists_changes = normal.is_some_and(|p| !p.changes.is_empty());
    let mut side_pending = Vec::new();
    let mut findings = Vec::new();
    let mut drifted: BTreeSet<&str> = BTreeSet::new();
    for entry in &refresh.drift {
        let (is_delete, is_update) = match entry.action {
            Action::Delete => (true, false),
            Action::Update => (false, true),
            Action::NoOp => {
                if let Some(prev) = &entry.previous_address {
                    notes.push(format!("{} moved from {prev} (not drift)", entry.address));
                }
                continue;
            }
            ref other => {
                // Unknown drift actions are shown as changes rather than dropped.
                notes.push(format!(
                    "{}: unfamiliar drift action {}",
                    entry.address,
                    other.as_str()
                ));
                (false, true)
            }
        };
        let address = entry.address.as_str();
        let trimmed;
        let entry = match made_by_others(entry, changes.get(address).copied()) {
            Some(left) => {
                trimmed = left;
                &trimmed
            }
            None => entry,
        };
        if entry.action == Action::Update && entry.diffs.iter().all(null_against_empty_string) {
            // Before and after differ only in how an absent value is written (`null` on
            // one side, `{}`, `[]` or `""` on the other: the AWS provider reads `tags`
            // back as `{}` after creating it as `null`, and a security group rule's
            // `description` back as `""` after an apply that planned it as `null`).
            // Nothing changed outside.
            continue;
        }
        drifted.insert(address);
        let diffs: Vec<Diff> = entry
            .diffs
            .iter()
            .filter(|leaf| !options.ignore_attrs.iter().any(|ig| ig.covers(&leaf.path)))
            .map(to_diff)
            .collect();
        if is_update && diffs.is_empty() && !entry.diffs.is_empty() {
            // Its only drift was in --ignore-attr paths: not a finding at all.
            continue;
        }
        let change = changes.get(entry.address.as_str()).copied();
        let next_apply = change.map(|c| c.action.clone());
        let mut finding = Finding {
            address: entry.address.clone(),
            previous_address: entry.previous_address.clone(),
            category: Category::ChangedOutside,
            next_apply: next_apply.clone(),
            diffs,
            replace_paths: Vec::new(),
            forcing_paths: Vec::new(),
            ignored_by: Vec::new(),
            left_alone_by_update: false,
            overwritten: false,
            replace_reason: None,
            plan_checked: plan_lists_changes,
            age: None,
        };
        if is_delete {
            finding.category = Category::DeletedOutside;
            findings.push(finding);
            continue;
        }
        let matched = rules.for_address(&entry.address);
        let covered_all = !finding.diffs.is_empty()
            && finding
                .diffs
                .iter()
                .all(|d| matched.iter().any(|r| r.covers(&d.path)));
        finding.ignored_by = matched
            .iter()
            .filter(|r| finding.diffs.iter().any(|d| r.covers(&d.path)))
            .map(|r| r.text.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if next_apply == Some(Action::Replace) {
            finding.category = Category::Replaced;
            if let Some(change) = change {
                finding.replace_reason = change.action_reason.clone();
                finding.replace_paths = change.replace_paths.iter().map(Path::to_string).collect();
                finding.forcing_paths = change
                    .replace_paths
                    .iter()
                    .filter(|rp| {
                        finding
                            .diffs
                            .iter()
                            .any(|d| rp.covers(&d.path) || d.path.covers(rp))
                    })
                    .map(Path::to_string)
                    .collect();
            }
        } else if covered_all
            || next_apply == Some(Action::NoOp)
            || next_apply == Some(Action::Forget)
            || (next_apply.is_none() && plan_lists_changes)
        {
            // A forget (a `removed` block with destroy = false) leaves the object as it is,
            // drift and all, and stops managing it: nothing reverts the drift.
            finding.category = Category::Ignored;
            if let Some(change) = change.filter(|c| {
                (covered_all || c.action == Action::Forget)
                    && !matches!(c.action, Action::NoOp | Action::Read)
            }) {
                // ignore_changes keeps the drift out of the plan, so what the plan does
                // to the resource is the configuration's doing: an update of other
                // attributes, or a delete (a count lowered, a resource removed), is
                // pending, as below; nothing else would list it.
                finding.left_alone_by_update = change.action == Action::Update;
                side_pending.push(Pending::of(
                    change,
                    change.action.as_str().to_owned(),
                    &change.changed_paths,
                ));
            }
        } else if let Some(change) = change.filter(|c| {
            // An array put back counts as drifted as a whole: positions say nothing of
            // which of its members the update touches.
            let drifted: Vec<&Path> = (entry.diffs.iter().map(|leaf| &leaf.path))
                .chain(arrays_put_back(c, entry))
                .collect();
            c.action == Action::Update && updates_only_other_paths(c, &drifted)
        }) {
            // The update is a configuration change on other attributes (for example beside
            // an ignore_changes rule): the drift survives it, and the update is pending.
            finding.category = Category::Ignored;
            finding.left_alone_by_update = true;
            side_pending.push(Pending::of(
                change,
                change.action.as_str().to_owned(),
                &change.changed_paths,
            ));
        } else if let Some(change) = change.filter(|c| c.action == Action::Update) {
            // The update reverts drift, and may carry configuration changes too: on
            // attributes that did not drift, or a drifted one set to a new value. Those are
            // unapplied changes, listed as pending (nothing else would list them).
            let put_back = arrays_put_back(change, entry);
            let (configured, overwritten) = configured_paths(change, &entry.diffs, &put_back);
            finding.overwritten = overwritten;
            if !configured.is_empty() {
                side_pending.push(Pending::of(
                    change,
                    change.action.as_str().to_owned(),
                    &configured,
                ));
            }
        }
        findings.push(finding);
    }

    let mut pending = side_pending;
    if let Some(plan) = normal {
        for change in &plan.changes {
            if drifted.contains(change.address.as_str()) && !change.deposed {
                continue;
            }
            let action = if change.deposed {
                "delete-deposed".to_owned()
            } else if change.importing {
                "import".to_owned()
            } else {
                match change.action {
                    Action::NoOp | Action::Read => continue,
                    ref a => a.as_str().to_owned(),
                }
            };
            pending.push(Pending::of(change, action, &change.changed_paths));
        }
        // Drift seen by the normal plan's own refresh but not by the refresh-only plan:
        // something changed between the two runs.
        let seen_by_refresh: BTreeSet<&str> =
            refresh.drift.iter().map(|d| d.address.as_str()).collect();
        for entry in &plan.drift {
            if entry.action != Action::NoOp && !seen_by_refresh.contains(entry.address.as_str()) {
                notes.push(format!(
                    "{} drifted between the two plans (seen only by the normal plan)",
                    entry.address
                ));
            }
        }
        // And the other way round: drift the normal plan's refresh no longer saw (put back
        // between the two runs), whose category is then about an object that is no
        // longer drifted. A normal plan with no drift at all did not refresh, and is
        // refused before this (plan::check_refreshed).
        let seen_by_plan: BTreeSet<&str> = plan.drift.iter().map(|d| d.address.as_str()).collect();
        if !plan.drift.is_empty() {
            for finding in &findings {
                // The normal plan does not refresh an object it forgets.
                if !seen_by_plan.contains(finding.address.as_str())
                    && finding.next_apply != Some(Action::Forget)
                {
                    notes.push(format!(
                        "{} drifted in the refresh-only plan but not in the normal plan's refresh (undone between the two plans?)",
                        finding.address
                    ));
                }
            }
        }
        note_plan_state(plan, &mut notes);
    }
    if refresh.listed_no_ops > 0 {
        notes.push(format!(
            "{}: lists resource_changes (all no-op), which a refresh-only plan from OpenTofu or Terraform does not; if it is a normal plan made with -refresh=false, it shows no drift at all",
            refresh.source
        ));
    }
    note_plan_state(refresh, &mut notes);
    // The same file can be given as both plans; say each thing once.
    let mut seen = BTreeSet::new();
    notes.retain(|n| seen.insert(n.clone()));

    findings.sort_by(|a, b| (a.category, &a.address).cmp(&(b.category, &b.address)));
    pending.sort_by(|a, b| a.address.cmp(&b.address));
    Report {
        stack: stack.to_owned(),
        key: datum_report::dedupe_key(TOOL, stack),
        findings,
        pending,
        notes,
        with_plan: normal.is_some(),
    }
}

/// What a plan says of itself that its reader should know: marked
/// incomplete, and each check it failed (the normal plan's and the
/// refresh-only plan's alike).
fn note_plan_state(plan: &Plan, notes: &mut Vec<String>) {
    if plan.incomplete {
        notes.push(format!("{}: the plan is marked incomplete", plan.source));
    }
    for check in &plan.failed_checks {
        notes.push(format!("{}: check failed: {check}", plan.source));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn leaf(path: &str, before: Value, after: Value) -> LeafDiff {
        LeafDiff {
            path: Path::parse(path).unwrap(),
            before: Some(before.into()),
            after: Some(after.into()),
            sensitive: false,
            missing: false,
        }
    }

    fn drift(address: &str, action: Action, diffs: Vec<LeafDiff>) -> DriftEntry {
        DriftEntry {
            address: address.into(),
            previous_address: None,
            action,
            diffs,
            arrays: Vec::new(),
            made_by_others: Vec::new(),
            wanted: Vec::new(),
        }
    }

    fn change(address: &str, action: Action) -> ChangeEntry {
        ChangeEntry {
            address: address.into(),
            previous_address: None,
            action,
            action_reason: None,
            deposed: false,
            importing: false,
            replace_paths: Vec::new(),
            changed_paths: Vec::new(),
            unknown_paths: Vec::new(),
            changed_to: Vec::new(),
            arrays: Vec::new(),
        }
    }

    /// `classify` with the default rules and options.
    fn classify_plain(refresh: &Plan, normal: Option<&Plan>) -> Report {
        classify("s", refresh, normal, &Rules::default(), &Options::default())
    }

    /// Each plan's own state (incomplete, failed checks) is a note naming
    /// the plan, the normal plan's first; the same file given as both plans
    /// says each once.
    #[test]
    fn each_plans_incomplete_mark_and_failed_checks_are_noted() {
        let plan = |source: &str, incomplete: bool, checks: &[&str]| Plan {
            source: source.to_owned(),
            incomplete,
            failed_checks: checks.iter().map(|c| (*c).to_owned()).collect(),
            ..Plan::default()
        };
        let refresh = plan("refresh.json", true, &["output.a (fail)"]);
        let normal = plan("plan.json", true, &["check.b (error)", "check.c (fail)"]);
        assert_eq!(
            classify_plain(&refresh, Some(&normal)).notes,
            [
                "plan.json: the plan is marked incomplete",
                "plan.json: check failed: check.b (error)",
                "plan.json: check failed: check.c (fail)",
                "refresh.json: the plan is marked incomplete",
                "refresh.json: check failed: output.a (fail)",
            ]
        );
        let both = plan("p.json", false, &["check.b (fail)"]);
        assert_eq!(
            classify_plain(&both, Some(&both)).notes,
            ["p.json: check failed: check.b (fail)"]
        );
        assert_eq!(
            classify_plain(&plan("r.json", false, &[]), None).notes,
            [] as [&str; 0]
        );
    }

    fn color() -> Vec<LeafDiff> {
        vec![leaf("data.color", json!("blue"), json!("red"))]
    }

    fn one(drift_action: Action, next: Option<Action>) -> Report {
        let refresh = Plan {
            drift: vec![drift("t.a", drift_action, color())],
            ..Plan::default()
        };
        let normal = next.map(|a| Plan {
            changes: vec![change("t.a", a), change("t.other", Action::NoOp)],
            ..Plan::default()
        });
        classify_plain(&refresh, normal.as_ref())
    }

    #[test]
    fn decision_table() {
        let cases = [
            (
                Action::Delete,
                Some(Action::Create),
                Category::DeletedOutside,
            ),
            (Action::Delete, None, Category::DeletedOutside),
            (Action::Update, Some(Action::Replace), Category::Replaced),
            (
                Action::Update,
                Some(Action::Update),
                Category::ChangedOutside,
            ),
            (Action::Update, Some(Action::NoOp), Category::Ignored),
            (
                Action::Update,
                Some(Action::Delete),
                Category::ChangedOutside,
            ),
        ];
        for (drift_action, next, expected) in cases {
            let report = one(drift_action.clone(), next.clone());
            assert_eq!(
                report.findings[0].category, expected,
                "{drift_action:?} / {next:?}"
            );
            assert!(report.pending.is_empty());
        }
        assert_eq!(
            one(Action::Delete, Some(Action::Create)).findings[0].consequence(),
            "the next apply creates it again"
        );
        // Gone from a plan that lists the others: gone from the configuration too. Without
        // a normal plan (--drift-only), or one that lists nothing, nothing is known of it.
        let deleted = Plan {
            drift: vec![drift("t.a", Action::Delete, vec![])],
            ..Plan::default()
        };
        let listed = Plan {
            changes: vec![change("t.other", Action::NoOp)],
            ..Plan::default()
        };
        assert_eq!(
            classify_plain(&deleted, Some(&listed)).findings[0].consequence(),
            "no longer in the configuration either; the next apply only updates state"
        );
        for normal in [None, Some(&Plan::default())] {
            assert_eq!(
                classify_plain(&deleted, normal).findings[0].consequence(),
                "not checked against a normal plan"
            );
        }
        // Left out of a plan that lists other resources: the plan does not touch it.
        let refresh = Plan {
            drift: vec![drift("t.a", Action::Update, color())],
            ..Plan::default()
        };
        let listed = Plan {
            changes: vec![change("t.other", Action::Create)],
            ..Plan::default()
        };
        let report = classify_plain(&refresh, Some(&listed));
        assert_eq!(report.findings[0].category, Category::Ignored);
        let empty = Plan::default();
        let report = classify_plain(&refresh, Some(&empty));
        assert_eq!(report.findings[0].category, Category::ChangedOutside);
    }

    #[test]
    fn update_of_other_paths_leaves_the_drift_alone() {
        let refresh = Plan {
            drift: vec![drift(
                "k.routing",
                Action::Update,
                vec![
                    leaf("metadata[0].labels.owner", Value::Null, json!("oncall")),
                    leaf("metadata[0].resource_version", json!("1"), json!("2")),
                ],
            )],
            ..Plan::default()
        };
        let mut c = change("k.routing", Action::Update);
        c.changed_paths = vec![Path::parse("data.upstream").unwrap()];
        let normal = Plan {
            changes: vec![c.clone()],
            ..Plan::default()
        };
        let report = classify_plain(&refresh, Some(&normal));
        assert_eq!(report.findings[0].category, Category::Ignored);
        assert_eq!(report.pending[0].address, "k.routing");
        assert_eq!(report.pending[0].paths, vec!["data.upstream"]);
        // When the update touches a drifted path, the apply reverts it.
        c.changed_paths
            .push(Path::parse("metadata[0].labels.owner").unwrap());
        let normal = Plan {
            changes: vec![c],
            ..Plan::default()
        };
        let report = classify_plain(&refresh, Some(&normal));
        assert_eq!(report.findings[0].category, Category::ChangedOutside);
        // ... and data.upstream is still a configuration change of its own.
        assert_eq!(report.pending.len(), 1);
        assert_eq!(report.pending[0].paths, vec!["data.upstream"]);
    }

    #[test]
    fn a_configuration_change_riding_on_a_revert_is_pending() {
        // Seen on the real engine: visibility_timeout_seconds drifted 30 -> 45 outside while
        // the configuration was edited from 30 to 60, and delay_seconds was edited too. The
        // next apply sets 60 (not the last apply's 30) and 5: both are unapplied changes,
        // and the drift is not "reverted".
        let refresh = Plan {
            drift: vec![drift(
                "aws_sqs_queue.q",
                Action::Update,
                vec![leaf("visibility_timeout_seconds", json!(30), json!(45))],
            )],
            ..Plan::default()
        };
        let digest = |v: Value| crate::plan::leaf_digest(Some(&v.into()));
        let mut c = change("aws_sqs_queue.q", Action::Update);
        c.changed_paths = vec![
            Path::parse("delay_seconds").unwrap(),
            Path::parse("visibility_timeout_seconds").unwrap(),
        ];
        c.changed_to = vec![
            (Path::parse("delay_seconds").unwrap(), digest(json!(5))),
            (
                Path::parse("visibility_timeout_seconds").unwrap(),
                digest(json!(60)),
            ),
        ];
        let normal = Plan {
            changes: vec![c.clone()],
            ..Plan::default()
        };
        let report = classify_plain(&refresh, Some(&normal));
        let f = &report.findings[0];
        assert_eq!(f.category, Category::ChangedOutside);
        assert_eq!(
            f.consequence(),
            "the next apply sets a new value from the configuration, not the last apply's"
        );
        let pending: Vec<(&str, &str, Vec<String>)> = report
            .pending
            .iter()
            .map(|p| (p.address.as_str(), p.action.as_str(), p.paths.clone()))
            .collect();
        assert_eq!(
            pending,
            [(
                "aws_sqs_queue.q",
                "update",
                vec![
                    "delay_seconds".to_owned(),
                    "visibility_timeout_seconds".to_owned()
                ]
            )]
        );
        // Set back to the last apply's value, and nothing else: a plain revert.
        c.changed_paths.remove(0);
        c.changed_to = vec![(
            Path::parse("visibility_timeout_seconds").unwrap(),
            digest(json!(30)),
        )];
        let normal = Plan {
            changes: vec![c],
            ..Plan::default()
        };
        let report = classify_plain(&refresh, Some(&normal));
        assert_eq!(
            report.findings[0].consequence(),
            "the next apply reverts it"
        );
        assert!(report.pending.is_empty());
    }

    #[test]
    fn a_set_put_back_is_a_revert_whatever_the_positions() {
        // The stop 55 walkthrough (terraform + hashicorp/aws + moto): a third ingress rule
        // added outside sorts first in the set, so every member moved; the normal plan
        // removes it and plans the other two with description null (stored as ""). By
        // position, its changes include ingress[0].description and ingress[1].description,
        // which did not drift.
        use crate::plan::ArrayDigest;
        let p = |text: &str| Path::parse(text).unwrap();
        let (applied, refreshed, other) = (1, 2, 3);
        let mut entry = drift(
            "aws_security_group.web",
            Action::Update,
            vec![
                leaf("ingress[0].from_port", json!(443), json!(22)),
                leaf("ingress[1].from_port", json!(80), json!(443)),
                leaf("ingress[2].from_port", json!(null), json!(80)),
            ],
        );
        entry.arrays = vec![ArrayDigest {
            path: p("ingress"),
            before: applied,
            after: refreshed,
        }];
        let refresh = Plan {
            drift: vec![entry],
            ..Plan::default()
        };
        let digest = |v: Value| crate::plan::leaf_digest(Some(&v.into()));
        let mut c = change("aws_security_group.web", Action::Update);
        c.changed_paths = vec![
            p("ingress[0].description"),
            p("ingress[0].from_port"),
            p("ingress[1].description"),
            p("ingress[1].from_port"),
            p("ingress[2].from_port"),
        ];
        c.changed_to = vec![
            (p("ingress[0].description"), digest(json!(null))),
            (p("ingress[0].from_port"), digest(json!(443))),
            (p("ingress[1].description"), digest(json!(null))),
            (p("ingress[1].from_port"), digest(json!(80))),
        ];
        c.arrays = vec![ArrayDigest {
            path: p("ingress"),
            before: refreshed,
            after: applied,
        }];
        let report = classify_plain(
            &refresh,
            Some(&Plan {
                changes: vec![c.clone()],
                ..Plan::default()
            }),
        );
        assert_eq!(report.findings[0].category, Category::ChangedOutside);
        assert_eq!(
            report.findings[0].consequence(),
            "the next apply reverts it"
        );
        assert!(report.pending.is_empty(), "{:?}", report.pending);
        // An apply whose set is not the last apply's (a rule edited in the configuration)
        // is judged by position, as before: what touches no drifted leaf is pending.
        let mut edited = c.clone();
        edited.arrays[0].after = other;
        let report = classify_plain(
            &refresh,
            Some(&Plan {
                changes: vec![edited],
                ..Plan::default()
            }),
        );
        assert_eq!(report.findings[0].category, Category::ChangedOutside);
        assert_eq!(
            report.pending[0].paths,
            ["ingress[0].description", "ingress[1].description"]
        );
        // Positions can also say the update touches none of the drifted members (the
        // added one sorted last, the plan's changes on the first two): still the revert,
        // not an update of other attributes that leaves the drift alone.
        c.changed_paths = vec![p("ingress[0].description"), p("ingress[1].description")];
        c.changed_to.clear();
        let mut refresh = refresh;
        refresh.drift[0].diffs = vec![leaf("ingress[2].from_port", json!(null), json!(22))];
        let report = classify_plain(
            &refresh,
            Some(&Plan {
                changes: vec![c],
                ..Plan::default()
            }),
        );
        assert_eq!(report.findings[0].category, Category::ChangedOutside);
        assert_eq!(
            report.findings[0].consequence(),
            "the next apply reverts it"
        );
        assert!(report.pending.is_empty(), "{:?}", report.pending);
    }

    #[test]
    fn an_update_beside_ignore_changes_is_pending() {
        // labels.owner drifted and ignore_changes = [labels] covers it; the normal plan's
        // update is a configuration change of data.upstream: an unapplied change, which
        // --fail-on-pending must see.
        let refresh = Plan {
            drift: vec![drift(
                "k.routing",
                Action::Update,
                vec![leaf("labels.owner", Value::Null, json!("oncall"))],
            )],
            ..Plan::default()
        };
        let mut c = change("k.routing", Action::Update);
        c.changed_paths = vec![Path::parse("data.upstream").unwrap()];
        let normal = Plan {
            changes: vec![c],
            ..Plan::default()
        };
        let mut rules = Rules::default();
        rules.insert_for_test("k.routing", "labels");
        let report = classify("s", &refresh, Some(&normal), &rules, &Options::default());
        let f = &report.findings[0];
        assert_eq!(f.category, Category::Ignored);
        assert_eq!(f.consequence(), "covered by ignore_changes (labels)");
        let pending: Vec<(&str, &str, Vec<String>)> = report
            .pending
            .iter()
            .map(|p| (p.address.as_str(), p.action.as_str(), p.paths.clone()))
            .collect();
        assert_eq!(
            pending,
            [("k.routing", "update", vec!["data.upstream".to_owned()])]
        );
    }

    #[test]
    fn drift_on_an_object_the_next_apply_forgets_is_left_alone_and_the_forget_pending() {
        // Seen on the real engine: visibility_timeout_seconds drifted on a queue that a
        // `removed { lifecycle { destroy = false } }` block takes out of the configuration.
        // The next apply forgets it (nothing reverts the drift), and the normal plan does
        // not refresh it, so its own resource_drift leaves it out.
        let refresh = Plan {
            drift: vec![
                drift(
                    "aws_sqs_queue.absorb",
                    Action::Update,
                    vec![leaf("visibility_timeout_seconds", json!(30), json!(45))],
                ),
                drift(
                    "aws_sqs_queue.other",
                    Action::Update,
                    vec![leaf("delay_seconds", json!(0), json!(5))],
                ),
            ],
            ..Plan::default()
        };
        let mut forget = change("aws_sqs_queue.absorb", Action::Forget);
        forget.action_reason = Some("delete_because_no_resource_config".into());
        let normal = Plan {
            changes: vec![forget, change("aws_sqs_queue.other", Action::Update)],
            drift: vec![drift("aws_sqs_queue.other", Action::Update, Vec::new())],
            ..Plan::default()
        };
        let report = classify_plain(&refresh, Some(&normal));
        let f = report
            .findings
            .iter()
            .find(|f| f.address == "aws_sqs_queue.absorb")
            .unwrap();
        assert_eq!(f.category, Category::Ignored);
        assert_eq!(
            f.consequence(),
            "the next apply stops managing it (forget) and leaves it as it is"
        );
        let pending: Vec<(&str, &str, Option<&str>)> = report
            .pending
            .iter()
            .map(|p| (p.address.as_str(), p.action.as_str(), p.reason.as_deref()))
            .collect();
        assert_eq!(
            pending,
            [(
                "aws_sqs_queue.absorb",
                "forget",
                Some("delete_because_no_resource_config")
            )]
        );
        assert!(report.notes.is_empty(), "{:?}", report.notes);
    }

    #[test]
    fn a_replacement_the_drift_did_not_force_says_why() {
        // Seen on the real engine: a tainted queue whose timeout drifted is replaced, and
        // nothing in its drift forces that; the consequence must not leave the drift to be
        // taken for the cause.
        let refresh = Plan {
            drift: vec![drift(
                "aws_sqs_queue.t",
                Action::Update,
                vec![leaf("visibility_timeout_seconds", json!(30), json!(45))],
            )],
            ..Plan::default()
        };
        let mut c = change("aws_sqs_queue.t", Action::Replace);
        c.action_reason = Some("replace_because_tainted".into());
        let normal = Plan {
            changes: vec![c.clone()],
            ..Plan::default()
        };
        let report = classify_plain(&refresh, Some(&normal));
        assert_eq!(report.findings[0].category, Category::Replaced);
        assert_eq!(
            report.findings[0].consequence(),
            "the next apply destroys and recreates it (it is tainted)"
        );
        // Drift that forces it is the cause, whatever else is said.
        c.replace_paths = vec![Path::parse("visibility_timeout_seconds").unwrap()];
        let normal = Plan {
            changes: vec![c],
            ..Plan::default()
        };
        let report = classify_plain(&refresh, Some(&normal));
        assert_eq!(
            report.findings[0].consequence(),
            "the next apply destroys and recreates it"
        );
    }

    #[test]
    fn a_delete_beside_ignore_changes_is_pending() {
        // q[1]'s tags drifted and ignore_changes = [tags] covers them; the normal plan
        // deletes q[1] (count lowered): the delete must be listed somewhere.
        let refresh = Plan {
            drift: vec![drift(
                "aws_sqs_queue.q[1]",
                Action::Update,
                vec![leaf("tags.owner", Value::Null, json!("oncall"))],
            )],
            ..Plan::default()
        };
        let normal = Plan {
            changes: vec![change("aws_sqs_queue.q[1]", Action::Delete)],
            ..Plan::default()
        };
        let mut rules = Rules::default();
        rules.insert_for_test("aws_sqs_queue.q", "tags");
        let report = classify("s", &refresh, Some(&normal), &rules, &Options::default());
        assert_eq!(report.findings[0].category, Category::Ignored);
        assert!(!report.findings[0].left_alone_by_update);
        let pending: Vec<(&str, &str)> = report
            .pending
            .iter()
            .map(|p| (p.address.as_str(), p.action.as_str()))
            .collect();
        assert_eq!(pending, [("aws_sqs_queue.q[1]", "delete")]);
    }

    #[test]
    fn update_of_known_after_apply_paths_only_leaves_the_drift_alone() {
        // sqs_managed_sse_enabled drifted (optional and computed: the configuration does not
        // set it); the update only makes redrive_policy known after apply (its dead-letter
        // queue is replaced). Terraform shows sqs_managed_sse_enabled among the unchanged
        // attributes: the apply does not revert it.
        let refresh = Plan {
            drift: vec![drift(
                "aws_sqs_queue.main",
                Action::Update,
                vec![leaf("sqs_managed_sse_enabled", json!(true), json!(false))],
            )],
            ..Plan::default()
        };
        let mut c = change("aws_sqs_queue.main", Action::Update);
        c.unknown_paths = vec![Path::parse("redrive_policy").unwrap()];
        let normal = Plan {
            changes: vec![c.clone()],
            ..Plan::default()
        };
        let report = classify_plain(&refresh, Some(&normal));
        assert_eq!(report.findings[0].category, Category::Ignored);
        assert!(report.findings[0].left_alone_by_update);
        assert_eq!(
            report.findings[0].consequence(),
            "the next apply updates other attributes and leaves this drift alone"
        );
        assert_eq!(report.pending[0].address, "aws_sqs_queue.main");
        // A drifted path that is known only after apply may be set back: it is reverted.
        c.unknown_paths
            .push(Path::parse("sqs_managed_sse_enabled").unwrap());
        let normal = Plan {
            changes: vec![c],
            ..Plan::default()
        };
        let report = classify_plain(&refresh, Some(&normal));
        assert_eq!(report.findings[0].category, Category::ChangedOutside);
        assert!(report.pending.is_empty());
    }

    #[test]
    fn moves_data_and_pending() {
        let mut moved = drift("t.new", Action::NoOp, vec![]);
        moved.previous_address = Some("t.old".into());
        let refresh = Plan {
            drift: vec![moved],
            ..Plan::default()
        };
        let mut deposed = change("t.x", Action::Delete);
        deposed.deposed = true;
        let mut imported = change("t.i", Action::NoOp);
        imported.importing = true;
        let normal = Plan {
            changes: vec![
                change("t.new", Action::NoOp),
                change("t.banner", Action::Create),
                deposed,
                imported,
            ],
            ..Plan::default()
        };
        let report = classify_plain(&refresh, Some(&normal));
        assert!(report.findings.is_empty());
        assert_eq!(
            report.notes,
            vec!["t.new moved from t.old (not drift)".to_owned()]
        );
        let pending: Vec<(&str, &str)> = report
            .pending
            .iter()
            .map(|p| (p.address.as_str(), p.action.as_str()))
            .collect();
        assert_eq!(
            pending,
            vec![
                ("t.banner", "create"),
                ("t.i", "import"),
                ("t.x", "delete-deposed")
            ]
        );
    }

    #[test]
    fn replace_cites_drifted_replace_paths() {
        let refresh = Plan {
            drift: vec![drift(
                "t.vm",
                Action::Update,
                vec![
                    leaf("list[1].id", json!("a"), json!("b")),
                    leaf("name", json!("x"), json!("y")),
                ],
            )],
            ..Plan::default()
        };
        let mut c = change("t.vm", Action::Replace);
        c.replace_paths = vec![
            Path::parse("list[1].id").unwrap(),
            Path::parse("zone").unwrap(),
        ];
        let normal = Plan {
            changes: vec![c],
            ..Plan::default()
        };
        let report = classify_plain(&refresh, Some(&normal));
        let f = &report.findings[0];
        assert_eq!(f.replace_paths, vec!["list[1].id", "zone"]);
        assert_eq!(f.forcing_paths, vec!["list[1].id"]);
    }

    #[test]
    fn ignore_attr_removes_paths_and_empty_findings() {
        let refresh = Plan {
            drift: vec![
                drift(
                    "t.flags",
                    Action::Update,
                    vec![
                        leaf("data.color", json!("blue"), json!("red")),
                        leaf("metadata[0].resource_version", json!("1"), json!("2")),
                    ],
                ),
                drift(
                    "t.cache",
                    Action::Update,
                    vec![leaf("metadata[0].resource_version", json!("1"), json!("2"))],
                ),
            ],
            ..Plan::default()
        };
        let options = Options {
            ignore_attrs: vec![Path::parse("metadata[0].resource_version").unwrap()],
        };
        let report = classify("s", &refresh, None, &Rules::default(), &options);
        assert_eq!(report.findings.len(), 1);
        assert_eq!(report.findings[0].address, "t.flags");
        assert_eq!(report.findings[0].diffs.len(), 1);
        assert!(!report.with_plan);
    }

    #[test]
    fn ignore_attr_on_a_path_the_apply_reverts_is_not_an_unapplied_change() {
        // tags.Owner drifted and is covered by no rule; tags_all.Owner drifted too and is
        // hidden with --ignore-attr. The normal plan reverts both.
        let refresh = Plan {
            drift: vec![drift(
                "aws_sqs_queue.jobs",
                Action::Update,
                vec![
                    leaf("tags.Owner", Value::Null, json!("oncall")),
                    leaf("tags_all.Owner", Value::Null, json!("oncall")),
                ],
            )],
            ..Plan::default()
        };
        let mut c = change("aws_sqs_queue.jobs", Action::Update);
        c.changed_paths = vec![Path::parse("tags_all.Owner").unwrap()];
        let normal = Plan {
            changes: vec![c],
            ..Plan::default()
        };
        let options = Options {
            ignore_attrs: vec![Path::parse("tags_all").unwrap()],
        };
        let report = classify("s", &refresh, Some(&normal), &Rules::default(), &options);
        assert!(report.pending.is_empty(), "{:?}", report.pending);
        let f = &report.findings[0];
        assert_eq!(f.category, Category::ChangedOutside);
        assert!(!f.left_alone_by_update);
        let paths: Vec<&str> = f.diffs.iter().map(|d| d.shown.path()).collect();
        assert_eq!(paths, ["tags.Owner"]);
        // When the only drift is the hidden path, the finding goes, and nothing is pending.
        let refresh = Plan {
            drift: vec![drift(
                "aws_sqs_queue.jobs",
                Action::Update,
                vec![leaf("tags_all.Owner", Value::Null, json!("oncall"))],
            )],
            ..Plan::default()
        };
        let report = classify("s", &refresh, Some(&normal), &Rules::default(), &options);
        assert!(report.findings.is_empty() && report.pending.is_empty());
    }

    #[test]
    fn a_key_holding_an_empty_string_added_or_removed_outside_is_drift() {
        // A tag whose value is "" (a marker tag, `Backup = ""`) removed or added by hand:
        // the key is missing on one side, which the parser also writes as null, but it is
        // not how an absent value is written; only an explicit null against "" (a set
        // member's `description`, the key on both sides) is that.
        let plan = |before: &str, after: &str| {
            let text = format!(
                r#"{{"format_version":"1.2","resource_drift":[
                  {{"address":"aws_s3_bucket.b","mode":"managed","change":{{"actions":["update"],
                    "before":{before},"after":{after},
                    "before_sensitive":false,"after_sensitive":false}}}}]}}"#
            );
            crate::plan::parse_plan(
                text.as_bytes(),
                "t.json",
                crate::plan::PlanRole::RefreshOnly,
                &crate::mask::Masker::new(&[]).unwrap(),
            )
            .unwrap()
        };
        let marked = r#"{"tags":{"Backup":""},"tags_all":{"Backup":""}}"#;
        let unmarked = r#"{"tags":{},"tags_all":{}}"#;
        for (before, after) in [(marked, unmarked), (unmarked, marked)] {
            let report = classify_plain(&plan(before, after), None);
            assert_eq!(report.findings.len(), 1, "{before} -> {after}");
        }
        let report = classify_plain(
            &plan(
                r#"{"ingress":[{"description":null,"from_port":443}]}"#,
                r#"{"ingress":[{"description":"","from_port":443}]}"#,
            ),
            None,
        );
        assert!(report.findings.is_empty(), "{:?}", report.findings);
    }

    #[test]
    fn null_versus_empty_is_not_drift() {
        // The plan parser found no leaf that differs (tags: null -> {}).
        let refresh = Plan {
            drift: vec![drift("aws_sqs_queue.q", Action::Update, vec![])],
            ..Plan::default()
        };
        let normal = Plan {
            changes: vec![change("aws_sqs_queue.q", Action::Update)],
            ..Plan::default()
        };
        let report = classify_plain(&refresh, Some(&normal));
        assert!(report.findings.is_empty());
        // Whatever the normal plan does to it is then an unapplied change.
        assert_eq!(report.pending[0].address, "aws_sqs_queue.q");
        // Seen on the real engine after an apply that put a security group's ingress set
        // back: the plan set each rule's description to null, the provider reads "".
        let refresh = Plan {
            drift: vec![drift(
                "aws_security_group.web",
                Action::Update,
                vec![
                    leaf("ingress[0].description", json!(null), json!("")),
                    leaf("ingress[1].description", json!(""), json!(null)),
                ],
            )],
            ..Plan::default()
        };
        let report = classify_plain(&refresh, None);
        assert!(report.findings.is_empty(), "{:?}", report.findings);
        // Beside a real change, or as a value that was not empty, it is drift; so is a
        // sensitive leaf, whose values are not there to tell.
        for diffs in [
            vec![
                leaf("ingress[0].description", json!(null), json!("")),
                leaf("ingress[0].from_port", json!(443), json!(22)),
            ],
            vec![leaf("description", json!("x"), json!(""))],
            vec![leaf("description", json!(null), json!(" "))],
            vec![LeafDiff {
                path: Path::parse("password").unwrap(),
                before: None,
                after: None,
                sensitive: true,
                missing: false,
            }],
        ] {
            let refresh = Plan {
                drift: vec![drift("aws_security_group.web", Action::Update, diffs)],
                ..Plan::default()
            };
            assert_eq!(classify_plain(&refresh, None).findings.len(), 1);
        }
    }

    #[test]
    fn sensitive_leaves_have_no_values() {
        let refresh = Plan {
            drift: vec![drift(
                "k.db",
                Action::Update,
                vec![LeafDiff {
                    path: Path::parse("data.password").unwrap(),
                    before: None,
                    after: None,
                    sensitive: true,
                    missing: false,
                }],
            )],
            ..Plan::default()
        };
        let report = classify_plain(&refresh, None);
        let d = &report.findings[0].diffs[0];
        assert!(d.shown.is_sensitive() && d.after.is_none());
        assert_eq!(d.shown.before_display(), "(sensitive)");
    }
}
