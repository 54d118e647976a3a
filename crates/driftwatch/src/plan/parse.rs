//! From bytes to a [`Plan`], refusing anything that would make the report lie.
//!
//! Refused, each with its own error: state JSON (no plan at all), a `format_version` whose
//! major version is not 1, an errored plan (its drift list is partial), HCP/TFC "redacted"
//! plan JSON (a different format), and a normal plan given as the refresh-only plan (it
//! proposes changes, which a refresh-only plan never does: the two were probably swapped,
//! and one made with `-refresh=false` has no drift at all). Data sources and ephemeral
//! resources in
//! `resource_drift` are skipped: a data source changing is the point of a data source.
//!
//! Secrets are removed here, before anything else sees the plan: every changed leaf is
//! checked against both sensitivity markers and the [`Masker`]'s secret names, and a secret
//! leaf keeps its path but loses its values. Error messages carry a file name and a
//! position, never serde's own text, which can quote the input.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path as FsPath;

use serde_json::Value;
use serde_json::value::RawValue;

use super::raw::{RawChange, RawCheck, RawHead};
use super::siblings::Claims;
use super::stream;
use super::{Action, ChangeEntry, DriftEntry, Leaf, LeafDiff, Plan};
use crate::flatten::{Path, Step, flatten};
use crate::mask::{Hidden, Masker, hides_anything};

/// Which of the two plans a document is supposed to be.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PlanRole {
    /// `plan -refresh-only`: drift is read from it, with values.
    RefreshOnly,
    /// The normal plan: what the next apply does. Its own drift list is not used.
    #[default]
    Normal,
    /// A normal plan that is the only input: drift is read from its own `resource_drift`
    /// (every drifted managed instance its refresh saw, but moves; none at all when it was
    /// made with `-refresh=false`) and changes from its `resource_changes`.
    Combined,
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("{source_name}: cannot read: {error}")]
    Read {
        source_name: String,
        error: std::io::Error,
    },
    #[error("{source_name}: {what} at line {line}, column {column}")]
    Json {
        source_name: String,
        what: &'static str,
        line: usize,
        column: usize,
    },
    #[error(
        "{source_name}: this is state JSON, not a plan (save a plan with -out and read it with `show -json PLANFILE`)"
    )]
    State { source_name: String },
    #[error(
        "{source_name}: this is HCP/TFC redacted plan JSON, not `show -json` output; export the plan and run `show -json` on it"
    )]
    Redacted { source_name: String },
    #[error("{source_name}: not plan JSON (no format_version)")]
    NoFormatVersion { source_name: String },
    #[error("{source_name}: plan format_version {found} is not supported (driftwatch reads 1.x)")]
    FormatVersion { source_name: String, found: String },
    #[error(
        "{source_name}: the plan is errored (\"errored\": true); its drift list is incomplete, so there is nothing trustworthy to report"
    )]
    Errored { source_name: String },
    #[error(
        "{source_name}: given as the refresh-only plan, but it is a normal plan (it proposes changes: {address}: {action}); pass it with --plan, or save the refresh-only plan with `plan -refresh-only -out` (were the two plans swapped?)"
    )]
    NotRefreshOnly {
        source_name: String,
        address: String,
        action: String,
    },
    #[error(
        "{source_name}: the values of the variables declared sensitive are over {VARIABLES_LIMIT} bytes in all, too many to withhold their copies in the drift"
    )]
    VariablesTooLarge { source_name: String },
    #[error(
        "{source_name}: the normal plan shows none of the drift the refresh-only plan found ({drifted}), so it cannot say what the next apply does about it: was it made with `plan -refresh=false`? Make it with refresh (the default), or make both plans again if the drift was undone between them"
    )]
    NotRefreshed {
        source_name: String,
        /// The first drifted address, and how many more there are.
        drifted: String,
    },
}

/// Read and parse a plan file, streaming: the file is never held whole in memory.
pub fn read_plan_file(path: &FsPath, role: PlanRole, masker: &Masker) -> Result<Plan, PlanError> {
    let source_name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|error| PlanError::Read {
        source_name: source_name.clone(),
        error,
    })?;
    parse_reader(file, &source_name, role, masker)
}

/// Parse `tofu show -json` output held in memory. `source_name` names the input in errors.
pub fn parse_plan(
    bytes: &[u8],
    source_name: &str,
    role: PlanRole,
    masker: &Masker,
) -> Result<Plan, PlanError> {
    parse_reader(bytes, source_name, role, masker)
}

/// What the document says about itself, collected while it streams past.
#[derive(Default)]
struct Header {
    format_version: Option<String>,
    errored: Option<bool>,
    complete: Option<bool>,
    looks_like_plan: bool,
    redacted: bool,
    state_marks: bool,
    failed_checks: Vec<String>,
}

/// The top-level members driftwatch reads, and the ones whose presence alone says what a
/// document is. Everything else is skipped unparsed.
enum Member {
    Drift,
    Changes,
    FormatVersion,
    Errored,
    Complete,
    Checks,
    PlannedValues,
    PriorState,
    Variables,
    Configuration,
    OutputChanges,
    Redacted,
    StateMark,
    Other,
}

fn member(key: &str) -> Member {
    match key {
        "resource_drift" => Member::Drift,
        "resource_changes" => Member::Changes,
        "format_version" => Member::FormatVersion,
        "errored" => Member::Errored,
        "complete" => Member::Complete,
        "checks" => Member::Checks,
        "planned_values" => Member::PlannedValues,
        "prior_state" => Member::PriorState,
        "variables" => Member::Variables,
        "configuration" => Member::Configuration,
        "output_changes" => Member::OutputChanges,
        "plan_format_version" | "provider_schemas" => Member::Redacted,
        "values" | "lineage" | "serial" => Member::StateMark,
        _ => Member::Other,
    }
}

/// A serde error inside a value that starts at `at`, as a position in the whole document.
fn value_error(source_name: &str, e: &serde_json::Error, at: stream::Position) -> PlanError {
    let what = match e.classify() {
        serde_json::error::Category::Data => "unexpected plan JSON structure",
        serde_json::error::Category::Eof => "truncated JSON",
        _ => "invalid JSON",
    };
    let (line, column) = if e.line() <= 1 {
        (at.line, at.column + e.column().saturating_sub(1))
    } else {
        (at.line + e.line() - 1, e.column())
    };
    PlanError::Json {
        source_name: source_name.to_owned(),
        what,
        line,
        column,
    }
}

fn scan_error(source_name: &str, stop: stream::Stop) -> PlanError {
    match stop {
        stream::Stop::Io(error) => PlanError::Read {
            source_name: source_name.to_owned(),
            error,
        },
        stream::Stop::Syntax(e) => PlanError::Json {
            source_name: source_name.to_owned(),
            what: e.what,
            line: e.line,
            column: e.column,
        },
        stream::Stop::Value { error, at } => value_error(source_name, &error, at),
    }
}

/// Parse `tofu show -json` output from a reader, one member and one array element at a
/// time. The document-level refusals (state JSON, redacted JSON, format version, errored
/// plan) come first, as if the whole document had been read before anything else; the
/// first problem inside an entry comes after them.
pub fn parse_reader<R: std::io::Read>(
    reader: R,
    source_name: &str,
    role: PlanRole,
    masker: &Masker,
) -> Result<Plan, PlanError> {
    let mut scanner = stream::Scanner::new(reader);
    let mut header = Header::default();
    let mut plan = Plan {
        source: source_name.to_owned(),
        role,
        ..Plan::default()
    };
    let mut first_error: Option<PlanError> = None;
    // The strings the markers hide anywhere in the document, to withhold their copies in
    // other resources once every entry is read. Never part of the Plan.
    let mut secrets = Hidden::default();
    // What the plan's resources add to other resources' sets (see `siblings`).
    let mut claims = Claims::default();
    let mut drift_read = false;
    // The values of the root module's variables (the plan's `variables`, which come before
    // the `configuration` that says which are sensitive), until it is known which to keep.
    let mut variables = Variables::default();
    let scan = |e| scan_error(source_name, e);

    let mut more = scanner
        .open(b'{', b'}', "not a JSON object")
        .map_err(scan)?;
    while more {
        if scanner.peek().map_err(scan)? != Some(b'"') {
            return Err(scan(scanner.syntax("invalid JSON")));
        }
        let key: String = scanner.parse(stream::owned).map_err(scan)?;
        scanner.expect(b':', "invalid JSON").map_err(scan)?;
        match member(&key) {
            kind @ (Member::Drift | Member::Changes) => {
                if scanner.peek().map_err(scan)? == Some(b'n') {
                    // `null`: the same as absent.
                    scanner.skip_value().map_err(scan)?;
                } else {
                    header.looks_like_plan = true;
                    drift_read |= matches!(kind, Member::Drift);
                    let entries = Entries {
                        drift: matches!(kind, Member::Drift),
                        role,
                        masker,
                        source_name,
                    };
                    entries
                        .read(&mut scanner, &mut plan, &mut first_error, &mut secrets)
                        .map_err(scan)?;
                }
            }
            Member::FormatVersion => {
                header.format_version = scanner.parse(stream::owned).map_err(scan)?;
            }
            Member::Errored => header.errored = scanner.parse(stream::owned).map_err(scan)?,
            Member::Complete => header.complete = scanner.parse(stream::owned).map_err(scan)?,
            Member::Checks => {
                // Read leniently: a check result of an unexpected shape must not make a
                // valid plan unreadable.
                let raw: Box<serde_json::value::RawValue> =
                    scanner.parse(stream::owned).map_err(scan)?;
                header.failed_checks = failed_checks(raw.get().as_bytes());
            }
            // The normal plan's `variables` come before its changes, which say whether
            // they are needed: always kept until then (a sensitive variable used as a map
            // key is shown as a pending change's path).
            Member::Variables
                if first_error.is_none()
                    && (role == PlanRole::Normal || copies_may_show(&plan, drift_read)) =>
            {
                variables.read(&mut scanner).map_err(scan)?;
            }
            Member::Configuration
                if first_error.is_none() && copies_may_show(&plan, drift_read) =>
            {
                variables.read_declared(&mut scanner).map_err(scan)?;
            }
            Member::OutputChanges
                if first_error.is_none() && copies_may_show(&plan, drift_read) =>
            {
                let mut learn = Marked {
                    secrets: &mut secrets,
                    claims: None,
                    first_error: &mut first_error,
                    source_name,
                };
                members(&mut scanner, |scanner, _| learn.output_change(scanner)).map_err(scan)?;
            }
            kind @ (Member::PlannedValues | Member::PriorState)
                if first_error.is_none()
                    && (copies_may_show(&plan, drift_read) || wants_claims(&plan)) =>
            {
                let prior_state = matches!(kind, Member::PriorState);
                header.looks_like_plan |= !prior_state;
                let claiming = wants_claims(&plan);
                let mut learn = Marked {
                    secrets: &mut secrets,
                    claims: claiming.then_some(&mut claims),
                    first_error: &mut first_error,
                    source_name,
                };
                if prior_state {
                    members(&mut scanner, |scanner, key| match key {
                        "values" => learn.values(scanner),
                        _ => scanner.skip_value(),
                    })
                } else {
                    learn.values(&mut scanner)
                }
                .map_err(scan)?;
            }
            skipped => {
                match skipped {
                    Member::PlannedValues => header.looks_like_plan = true,
                    Member::Redacted => header.redacted = true,
                    Member::StateMark => header.state_marks = true,
                    Member::Configuration => variables.configuration_seen = true,
                    _ => {}
                }
                scanner.skip_value().map_err(scan)?;
            }
        }
        more = scanner.more(b'}').map_err(scan)?;
    }
    scanner.finish().map_err(scan)?;

    let name = || source_name.to_owned();
    if header.redacted {
        return Err(PlanError::Redacted {
            source_name: name(),
        });
    }
    if !header.looks_like_plan && header.state_marks {
        return Err(PlanError::State {
            source_name: name(),
        });
    }
    let Some(version) = header.format_version else {
        return Err(PlanError::NoFormatVersion {
            source_name: name(),
        });
    };
    if version.split('.').next() != Some("1") {
        return Err(PlanError::FormatVersion {
            source_name: name(),
            found: printable_version(&version),
        });
    }
    if header.errored == Some(true) {
        return Err(PlanError::Errored {
            source_name: name(),
        });
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    if copies_may_show(&plan, drift_read) {
        variables.keep_sensitive(&mut secrets, source_name)?;
    }
    claims.settle(&secrets);
    for entry in &mut plan.drift {
        for wanted in std::mem::take(&mut entry.wanted) {
            if claims.make_all(&wanted) {
                entry.made_by_others.push(wanted.path);
            }
        }
    }
    if !secrets.is_empty() {
        // A provider can copy a value into another resource that does not mark it (the
        // AWS provider's aws_s3_bucket.lifecycle_rule mirrors the rules of an
        // aws_s3_bucket_lifecycle_configuration, a sensitive prefix included).
        for entry in &mut plan.drift {
            withhold_copies(&mut entry.diffs, &secrets);
        }
        // An unapplied change's paths are shown too (pending changes, replace paths).
        for change in &mut plan.changes {
            withhold_keys(change, &secrets);
        }
    }
    plan.format_version = version;
    plan.incomplete = header.complete == Some(false);
    plan.failed_checks = header.failed_checks;
    Ok(plan)
}

/// Refuse a normal plan that did not refresh (`plan -refresh=false`): it compares the
/// configuration with the state as stored, so every drifted resource is a no-op in it and
/// one deleted outside is still there. Read against it, drift the next (refreshing) apply
/// reverts would be "ignored" and a deletion "gone from the configuration too".
///
/// OpenTofu and Terraform put every drifted managed instance (but for moves) in a
/// refreshing normal plan's own `resource_drift`. A normal plan that has none, while the
/// refresh-only plan found drift on instances it lists, did not refresh (or the drift was
/// undone between the two plans: then a new pair of plans says so).
pub fn check_refreshed(refresh: &Plan, normal: &Plan) -> Result<(), PlanError> {
    if refresh.role != PlanRole::RefreshOnly
        || normal.role != PlanRole::Normal
        || !normal.drift.is_empty()
        || normal.skipped_drift > 0
    {
        return Ok(());
    }
    let listed: std::collections::BTreeSet<&str> = normal
        .changes
        .iter()
        .filter(|c| !c.deposed)
        .map(|c| c.address.as_str())
        .collect();
    let unseen: std::collections::BTreeSet<&str> = refresh
        .drift
        .iter()
        .filter(|d| match d.action {
            Action::Delete => true,
            // An update without a changed leaf (null against {}) is not drift.
            Action::Update => !d.diffs.is_empty(),
            _ => false,
        })
        .map(|d| d.address.as_str())
        .filter(|a| listed.contains(a))
        .collect();
    match unseen.first() {
        None => Ok(()),
        Some(first) => Err(PlanError::NotRefreshed {
            source_name: normal.source.clone(),
            drifted: match unseen.len() - 1 {
                0 => (*first).to_owned(),
                more => format!("{first} and {more} more"),
            },
        }),
    }
}

/// Whether strings marked sensitive in other resources can matter to what is shown: only
/// in a plan whose drift is read with values and, once its drift list has been read, only
/// when some drifted leaf is shown (a large plan with no drift, or drift of secrets only,
/// reads no state).
///
/// A change's paths are shown too, with no values: only a map key past the attribute's
/// name can hold a marked string there, so a plan whose changes (read before `output_changes`,
/// `prior_state` and `configuration`) have such a path learns from those members as well.
/// The normal plan's `variables` and `planned_values` come before its changes: it keeps
/// the variables' strings whatever its changes (see the `Member::Variables` arm), and
/// learns from its changes' own markers instead of `planned_values` ([`change_markers`]).
fn copies_may_show(plan: &Plan, drift_read: bool) -> bool {
    (plan.role != PlanRole::Normal
        && (!drift_read
            || plan
                .drift
                .iter()
                .any(|d| d.diffs.iter().any(|diff| !diff.sensitive))))
        || plan.changes.iter().any(|c| {
            [&c.changed_paths, &c.unknown_paths, &c.replace_paths]
                .into_iter()
                .flatten()
                .any(|p| p.0.iter().skip(1).any(|s| matches!(s, Step::Key(_))))
        })
}

/// Whether a drifted set may hold members other resources make (see `siblings`): then
/// `prior_state` and `planned_values` are read for them.
fn wants_claims(plan: &Plan) -> bool {
    plan.drift.iter().any(|d| !d.wanted.is_empty())
}

/// Cut each path of an unapplied change at the first map key (past the attribute's name)
/// that is, or holds, a hidden string, as [`withhold_copies`] cuts a drifted leaf's path;
/// a cut path keeps no digest of the value the apply sets.
fn withhold_keys(change: &mut ChangeEntry, hidden: &Hidden) {
    let cut_at = |path: &Path| first_key_holding(path, hidden);
    change.changed_to.retain(|(path, _)| cut_at(path).is_none());
    for paths in [
        &mut change.changed_paths,
        &mut change.unknown_paths,
        &mut change.replace_paths,
    ] {
        let mut cut = false;
        for path in paths.iter_mut() {
            if let Some(depth) = cut_at(path) {
                path.0.truncate(depth);
                cut = true;
            }
        }
        if cut {
            paths.sort();
            paths.dedup();
        }
    }
}

/// How many bytes of variable values may wait for the `configuration` to say which
/// variables are sensitive.
const VARIABLES_LIMIT: usize = 16 << 20;

/// The strings of the root module's variables declared sensitive, to withhold their
/// unmarked copies in the drift: a sensitive variable used only where it is not stored in
/// state (or by a resource that is not in the state) is marked nowhere else, and a provider
/// can copy it into another resource unmarked. The plan's `variables` (every value, in
/// plain text) come before the `configuration` that says which are sensitive, so their
/// strings are kept, up to [`VARIABLES_LIMIT`] bytes, until it is read; nothing is shown
/// before the whole document is read.
#[derive(Default)]
struct Variables {
    /// Each variable's strings, by name, while it is not known whether it is sensitive.
    values: Vec<(String, Hidden)>,
    /// Variables whose values were over the limit (only their names are kept).
    dropped: Vec<String>,
    bytes: usize,
    /// The variables `configuration.root_module.variables` declares sensitive, once read.
    sensitive: Option<std::collections::BTreeSet<String>>,
    /// A `configuration` member was there (read or skipped).
    configuration_seen: bool,
    /// The strings of the literals module calls give their modules' variables declared
    /// sensitive (see [`module_literals`]).
    module_literals: Hidden,
}

/// A variable of the plan's `variables`.
#[derive(serde::Deserialize)]
struct RawVariable<'a> {
    #[serde(borrow, default)]
    value: Option<&'a RawValue>,
}

/// A variable of `configuration.root_module.variables`: only whether it is sensitive.
#[derive(serde::Deserialize)]
struct RawDeclared {
    #[serde(default)]
    sensitive: Option<Value>,
}

impl RawDeclared {
    /// Anything but `false` or nothing hides: fail closed.
    fn sensitive(&self) -> bool {
        self.sensitive
            .as_ref()
            .is_some_and(|s| !matches!(s, Value::Bool(false) | Value::Null))
    }
}

/// An argument of a module call (`module_calls.NAME.expressions.VARIABLE`): only a
/// literal value.
#[derive(serde::Deserialize)]
struct RawExpression {
    #[serde(default)]
    constant_value: Option<Value>,
}

/// The strings of the literals module calls give to their modules' variables declared
/// `sensitive` (`configuration`'s `module_calls`, at any depth), added to `out`: such a
/// value is in the plan only there (a child module's variables are not in the plan's
/// `variables`), and marked nowhere else when nothing stores it. A call whose module does
/// not say which of its variables are sensitive keeps every literal it gives (fail
/// closed).
fn module_literals<R: std::io::Read>(
    scanner: &mut stream::Scanner<R>,
    depth: usize,
    out: &mut Hidden,
) -> Result<(), stream::Stop> {
    if depth > MODULE_DEPTH {
        return Err(scanner.syntax("modules nested too deeply"));
    }
    members(scanner, |scanner, _call| {
        let mut given: Vec<(String, Hidden)> = Vec::new();
        let mut sensitive: Option<std::collections::BTreeSet<String>> = None;
        members(scanner, |scanner, key| match key {
            "expressions" => members(scanner, |scanner, name| {
                let raw = scanner.parse(|bytes| stream::one::<RawExpression>(bytes))?;
                if let Some(value) = raw.constant_value {
                    let mut hidden = Hidden::default();
                    hidden.add(&value, Some(&Value::Bool(true)));
                    given.push((name.to_owned(), hidden));
                }
                Ok(())
            }),
            "module" => members(scanner, |scanner, key| match key {
                "variables" => {
                    let declared = sensitive.get_or_insert_with(Default::default);
                    members(scanner, |scanner, name| {
                        let raw = scanner.parse(|bytes| stream::one::<RawDeclared>(bytes))?;
                        if raw.sensitive() {
                            declared.insert(name.to_owned());
                        }
                        Ok(())
                    })
                }
                "module_calls" => module_literals(scanner, depth + 1, out),
                _ => scanner.skip_value(),
            }),
            _ => scanner.skip_value(),
        })?;
        for (name, hidden) in &given {
            if sensitive.as_ref().is_none_or(|s| s.contains(name)) {
                out.add_strings_and_keys_of(hidden);
            }
        }
        Ok(())
    })
}

impl Variables {
    /// The plan's `variables`: `{name: {value}}`.
    fn read<R: std::io::Read>(
        &mut self,
        scanner: &mut stream::Scanner<R>,
    ) -> Result<(), stream::Stop> {
        members(scanner, |scanner, name| {
            if self.sensitive.as_ref().is_some_and(|s| !s.contains(name)) {
                return scanner.skip_value();
            }
            let (hidden, size) = scanner.parse(|bytes| {
                let (raw, used) = stream::one::<RawVariable<'_>>(bytes)?;
                let mut hidden = Hidden::default();
                if let Some(value) = raw.value {
                    hidden.add(
                        &serde_json::from_str(value.get())?,
                        Some(&Value::Bool(true)),
                    );
                }
                Ok(((hidden, used), used))
            })?;
            if self.sensitive.is_some() || self.bytes + size <= VARIABLES_LIMIT {
                self.bytes += size;
                self.values.push((name.to_owned(), hidden));
            } else {
                self.dropped.push(name.to_owned());
            }
            Ok(())
        })
    }

    /// `configuration`: which of the root module's variables are declared sensitive.
    fn read_declared<R: std::io::Read>(
        &mut self,
        scanner: &mut stream::Scanner<R>,
    ) -> Result<(), stream::Stop> {
        self.configuration_seen = true;
        let mut sensitive = std::collections::BTreeSet::new();
        let mut literals = Hidden::default();
        members(scanner, |scanner, key| match key {
            "root_module" => members(scanner, |scanner, key| match key {
                "variables" => members(scanner, |scanner, name| {
                    let declared = scanner.parse(|bytes| stream::one::<RawDeclared>(bytes))?;
                    if declared.sensitive() {
                        sensitive.insert(name.to_owned());
                    }
                    Ok(())
                }),
                "module_calls" => module_literals(scanner, 0, &mut literals),
                _ => scanner.skip_value(),
            }),
            _ => scanner.skip_value(),
        })?;
        self.values.retain(|(name, _)| sensitive.contains(name));
        self.dropped.retain(|name| sensitive.contains(name));
        self.sensitive = Some(sensitive);
        self.module_literals = literals;
        Ok(())
    }

    /// Add the strings of the sensitive variables to `secrets`: every variable's when the
    /// document has no `configuration` to say which are (fail closed).
    fn keep_sensitive(self, secrets: &mut Hidden, source_name: &str) -> Result<(), PlanError> {
        let keep = |name: &str| match &self.sensitive {
            Some(sensitive) => sensitive.contains(name),
            None => !self.configuration_seen,
        };
        if self.dropped.iter().any(|name| keep(name)) {
            return Err(PlanError::VariablesTooLarge {
                source_name: source_name.to_owned(),
            });
        }
        for (name, hidden) in &self.values {
            if keep(name) {
                secrets.add_strings_and_keys_of(hidden);
            }
        }
        secrets.add_strings_and_keys_of(&self.module_literals);
        Ok(())
    }
}

/// How deep `child_modules` may nest before the document is refused.
const MODULE_DEPTH: usize = 64;

/// The members of the object at the cursor, one at a time (anything else is skipped).
fn members<R: std::io::Read>(
    scanner: &mut stream::Scanner<R>,
    mut each: impl FnMut(&mut stream::Scanner<R>, &str) -> Result<(), stream::Stop>,
) -> Result<(), stream::Stop> {
    if scanner.peek()? != Some(b'{') {
        return scanner.skip_value();
    }
    let mut more = scanner.open(b'{', b'}', "unexpected plan JSON structure")?;
    while more {
        if scanner.peek()? != Some(b'"') {
            return Err(scanner.syntax("invalid JSON"));
        }
        let key: String = scanner.parse(stream::owned)?;
        scanner.expect(b':', "invalid JSON")?;
        each(scanner, &key)?;
        more = scanner.more(b'}')?;
    }
    Ok(())
}

/// The elements of the array at the cursor, one at a time (anything else is skipped).
fn elements<R: std::io::Read>(
    scanner: &mut stream::Scanner<R>,
    mut each: impl FnMut(&mut stream::Scanner<R>) -> Result<(), stream::Stop>,
) -> Result<(), stream::Stop> {
    if scanner.peek()? != Some(b'[') {
        return scanner.skip_value();
    }
    let mut more = scanner.open(b'[', b']', "unexpected plan JSON structure")?;
    while more {
        each(scanner)?;
        more = scanner.more(b']')?;
    }
    Ok(())
}

/// Learning the strings that `sensitive_values` marks in the resources of `prior_state`
/// and `planned_values` (every resource, drifted or not), to withhold their unmarked
/// copies in the drift: a provider copies a value into another resource's computed
/// attribute without its marker (the AWS provider's aws_iam_role.inline_policy holds an
/// aws_iam_role_policy's policy), and the resource it came from need not drift. The
/// `resource_changes` markers are the same as these (`before_sensitive` is the prior
/// state's, `after_sensitive` the planned values'). Streamed: one resource at a time, and
/// only the marked parts of a resource whose marker hides something are parsed.
struct Marked<'a> {
    secrets: &'a mut Hidden,
    /// Where to add what each resource makes in other resources' sets, when a drifted set
    /// may hold such members.
    claims: Option<&'a mut Claims>,
    first_error: &'a mut Option<PlanError>,
    source_name: &'a str,
}

impl Marked<'_> {
    /// `prior_state.values` or `planned_values`: `{outputs, root_module}`.
    fn values<R: std::io::Read>(
        &mut self,
        scanner: &mut stream::Scanner<R>,
    ) -> Result<(), stream::Stop> {
        members(scanner, |scanner, key| match key {
            "root_module" => self.module(scanner, 0),
            "outputs" => members(scanner, |scanner, _| self.output(scanner)),
            _ => scanner.skip_value(),
        })
    }

    /// An output of `outputs`: `{sensitive, value, type}`, learned when it is sensitive.
    fn output<R: std::io::Read>(
        &mut self,
        scanner: &mut stream::Scanner<R>,
    ) -> Result<(), stream::Stop> {
        let learned = scanner.parse(|bytes| {
            let (raw, used) = stream::one::<RawOutput<'_>>(bytes)?;
            let marker = raw.sensitive.map(|v| v.get().as_bytes());
            Ok((
                marked_strings(raw.value.map(|v| v.get().as_bytes()), marker),
                used,
            ))
        })?;
        self.learn(learned);
        Ok(())
    }

    /// An output of `output_changes`: each side with its own marker.
    fn output_change<R: std::io::Read>(
        &mut self,
        scanner: &mut stream::Scanner<R>,
    ) -> Result<(), stream::Stop> {
        let learned = scanner.parse(|bytes| {
            let (raw, used) = stream::one::<RawOutputChange<'_>>(bytes)?;
            let side = |value: Option<&RawValue>, marker: Option<&RawValue>| {
                marked_strings(
                    value.map(|v| v.get().as_bytes()),
                    marker.map(|v| v.get().as_bytes()),
                )
            };
            let learned = side(raw.before, raw.before_sensitive).and_then(|mut hidden| {
                hidden.add_strings_of(&side(raw.after, raw.after_sensitive)?);
                Ok(hidden)
            });
            Ok((learned, used))
        })?;
        self.learn(learned);
        Ok(())
    }

    fn learn(&mut self, learned: Result<Hidden, serde_json::Error>) {
        match learned {
            // An output is declared sensitive whole: its keys are secret too.
            Ok(hidden) => self.secrets.add_strings_and_keys_of(&hidden),
            Err(e) => {
                if self.first_error.is_none() {
                    *self.first_error = Some(PlanError::Json {
                        source_name: self.source_name.to_owned(),
                        what: "invalid value inside an output",
                        line: e.line(),
                        column: e.column(),
                    });
                }
            }
        }
    }

    fn module<R: std::io::Read>(
        &mut self,
        scanner: &mut stream::Scanner<R>,
        depth: usize,
    ) -> Result<(), stream::Stop> {
        if depth > MODULE_DEPTH {
            return Err(scanner.syntax("modules nested too deeply"));
        }
        members(scanner, |scanner, key| match key {
            "resources" => elements(scanner, |scanner| self.resource(scanner)),
            "child_modules" => elements(scanner, |scanner| self.module(scanner, depth + 1)),
            _ => scanner.skip_value(),
        })
    }

    fn resource<R: std::io::Read>(
        &mut self,
        scanner: &mut stream::Scanner<R>,
    ) -> Result<(), stream::Stop> {
        let claiming = self.claims.is_some();
        let (learned, made) = scanner.parse_quick(
            |bytes| {
                // Found by structure; anything unusual is left to serde below.
                let (object, used) = super::structural::object_prefix(bytes, b"")?;
                let (mut values, mut marker, mut kind) = (None, None, None);
                for (key, value) in object.members {
                    let slot = match key {
                        b"\"values\"" => &mut values,
                        b"\"sensitive_values\"" => &mut marker,
                        b"\"type\"" => &mut kind,
                        _ if key.contains(&b'\\') => return None,
                        _ => continue,
                    };
                    if slot.replace(value).is_some() {
                        return None;
                    }
                }
                // An error is left to serde too, which says where it is.
                let learned = marked_strings(values, marker).ok()?;
                let made = match kind {
                    Some(kind) if claiming => {
                        makes(serde_json::from_slice(kind).ok()?, values, &learned).ok()?
                    }
                    _ => None,
                };
                Some(((Ok(learned), made), used))
            },
            |bytes| {
                let (raw, used) = stream::one::<RawStateResource<'_>>(bytes)?;
                let learned = marked_strings(
                    raw.values.map(|v| v.get().as_bytes()),
                    raw.sensitive_values.map(|v| v.get().as_bytes()),
                );
                let made = match (&learned, raw.kind) {
                    (Ok(hidden), Some(kind)) if claiming => {
                        makes(kind, raw.values.map(|v| v.get().as_bytes()), hidden)?
                    }
                    _ => None,
                };
                Ok(((learned, made), used))
            },
        )?;
        if let (Some(claims), Some((kind, values))) = (self.claims.as_deref_mut(), made) {
            claims.consider(kind, values);
        }
        match learned {
            Ok(hidden) => self.secrets.add_strings_of(&hidden),
            Err(e) => {
                if self.first_error.is_none() {
                    *self.first_error = Some(PlanError::Json {
                        source_name: self.source_name.to_owned(),
                        what: "invalid value inside a resource's state",
                        line: e.line(),
                        column: e.column(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// An output of `prior_state.values` or `planned_values`: its value and whether it is
/// sensitive.
#[derive(serde::Deserialize)]
struct RawOutput<'a> {
    #[serde(borrow, default)]
    value: Option<&'a RawValue>,
    #[serde(borrow, default)]
    sensitive: Option<&'a RawValue>,
}

/// An output of `output_changes`: its two sides and their markers.
#[derive(serde::Deserialize)]
struct RawOutputChange<'a> {
    #[serde(borrow, default)]
    before: Option<&'a RawValue>,
    #[serde(borrow, default)]
    after: Option<&'a RawValue>,
    #[serde(borrow, default)]
    before_sensitive: Option<&'a RawValue>,
    #[serde(borrow, default)]
    after_sensitive: Option<&'a RawValue>,
}

/// The type and values of a resource that makes members of other resources' sets
/// (`siblings::is_claimant`), when its markers hide nothing: a marked value is never kept.
fn makes(
    kind: Cow<'_, str>,
    values: Option<&[u8]>,
    hidden: &Hidden,
) -> Result<Option<(String, Value)>, serde_json::Error> {
    match values {
        Some(values) if hidden.is_empty() && super::siblings::is_claimant(&kind) => {
            Ok(Some((kind.into_owned(), serde_json::from_slice(values)?)))
        }
        _ => Ok(None),
    }
}

/// A resource of `prior_state` or `planned_values`: only its type, values and their marker.
#[derive(serde::Deserialize)]
struct RawStateResource<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    values: Option<&'a RawValue>,
    #[serde(borrow, default)]
    sensitive_values: Option<&'a RawValue>,
}

/// What `marker` (a resource's `sensitive_values`) hides in `values`; nothing is parsed
/// when the marker has no `true` in it (almost every resource).
fn marked_strings(
    values: Option<&[u8]>,
    marker: Option<&[u8]>,
) -> Result<Hidden, serde_json::Error> {
    let mut hidden = Hidden::default();
    let (Some(values), Some(marker)) = (values, marker) else {
        return Ok(hidden);
    };
    if memchr::memmem::find(marker, b"true").is_none()
        && marker
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|b| matches!(b, b'{' | b'[' | b'f' | b'n'))
    {
        return Ok(hidden);
    }
    let marker: Value = serde_json::from_slice(marker)?;
    let values: &RawValue = serde_json::from_slice(values)?;
    add_hidden(&mut hidden, Some(values), Some(&marker))?;
    Ok(hidden)
}

/// The strings the markers of one `resource_changes` element hide, on both sides (what
/// `prior_state` and `planned_values` mark for its instance); nothing is parsed when
/// neither marker has a `true` in it.
fn change_markers(raw: &RawChange<'_>, source_name: &str) -> Result<Hidden, PlanError> {
    let side = |value: Option<&RawValue>, marker: Option<&RawValue>| {
        marked_strings(
            value.map(|v| v.get().as_bytes()),
            marker.map(|v| v.get().as_bytes()),
        )
    };
    let mut hidden =
        side(raw.change.before, raw.change.before_sensitive).map_err(inside_change(source_name))?;
    hidden.add_strings_of(
        &side(raw.change.after, raw.change.after_sensitive).map_err(inside_change(source_name))?,
    );
    Ok(hidden)
}

/// One `resource_drift` element: `None` when it is not a current managed instance.
fn drift_entry(
    raw: RawChange<'_>,
    role: PlanRole,
    masker: &Masker,
    source_name: &str,
    secrets: &mut Hidden,
) -> Result<Option<DriftEntry>, PlanError> {
    if !is_current_managed(&raw) {
        return Ok(None);
    }
    let action = Action::from_actions(&raw.change.actions);
    let (diffs, arrays, wanted) = if role != PlanRole::Normal && action == Action::Update {
        let arrays = super::sets::array_digests(raw.change.before, raw.change.after)
            .map_err(inside_change(source_name))?;
        let wanted =
            super::siblings::wanted(raw.kind.as_deref(), raw.change.before, raw.change.after)
                .map_err(inside_change(source_name))?;
        (
            drift_diffs(&raw, masker, source_name, secrets)?,
            arrays,
            wanted,
        )
    } else {
        (Vec::new(), Vec::new(), Vec::new())
    };
    Ok(Some(DriftEntry {
        address: raw.address.into_owned(),
        previous_address: raw.previous_address.map(Cow::into_owned),
        action,
        diffs,
        arrays,
        made_by_others: Vec::new(),
        wanted,
    }))
}

/// How to read the entries of one of the two arrays.
struct Entries<'a> {
    /// `resource_drift` (else `resource_changes`).
    drift: bool,
    role: PlanRole,
    masker: &'a Masker,
    source_name: &'a str,
}

impl Entries<'_> {
    /// Read the array at the cursor into `plan`. The first problem inside an entry goes to
    /// `first_error` (the document-level refusals come first); after it, the rest is only
    /// checked for structure.
    fn read<R: std::io::Read>(
        &self,
        scanner: &mut stream::Scanner<R>,
        plan: &mut Plan,
        first_error: &mut Option<PlanError>,
        secrets: &mut Hidden,
    ) -> Result<(), stream::Stop> {
        let (role, masker, source_name) = (self.role, self.masker, self.source_name);
        let mut more = scanner.open(b'[', b']', "unexpected plan JSON structure")?;
        while more {
            if first_error.is_some() {
                scanner.skip_value()?;
            } else {
                let entry = if self.drift && role == PlanRole::Normal {
                    // The normal plan's own drift is only compared by address.
                    let head = scanner.parse(|bytes| {
                        let (head, used) = stream::one::<RawHead<'_>>(bytes)?;
                        Ok((drift_head(head), used))
                    })?;
                    record_drift(plan, head);
                    Ok(())
                } else if self.drift {
                    scanner
                        .parse(|bytes| {
                            let (raw, used) = stream::one::<RawChange<'_>>(bytes)?;
                            Ok((drift_entry(raw, role, masker, source_name, secrets), used))
                        })?
                        .map(|e| record_drift(plan, e))
                } else {
                    // The normal plan reads neither `planned_values` (it comes before
                    // `resource_changes`, when it is not known whether a path can show a
                    // hidden string) nor, unless then needed, `prior_state`: the markers
                    // of its changes are the planned values' markers (and the prior
                    // state's) of every instance that is not a no-op.
                    let learn = role == PlanRole::Normal;
                    let (entry, learned) = scanner.parse_quick(
                        |bytes| {
                            super::raw::quick_no_op(bytes).map(|(raw, used)| {
                                ((change_entry(raw, role, source_name), None), used)
                            })
                        },
                        |bytes| {
                            let (raw, used) = stream::one::<RawChange<'_>>(bytes)?;
                            let learned = learn.then(|| change_markers(&raw, source_name));
                            Ok(((change_entry(raw, role, source_name), learned), used))
                        },
                    )?;
                    match learned {
                        Some(Ok(hidden)) => secrets.add_strings_of(&hidden),
                        Some(Err(e)) => *first_error = Some(e),
                        None => {}
                    }
                    entry.map(|e| match e {
                        // Only a no-op gets this far in a refresh-only plan.
                        Some(_) if role == PlanRole::RefreshOnly => plan.listed_no_ops += 1,
                        Some(e) => plan.changes.push(e),
                        None => {}
                    })
                };
                if let Err(e) = entry {
                    *first_error = Some(e);
                }
            }
            more = scanner.more(b']')?;
        }
        Ok(())
    }
}

fn record_drift(plan: &mut Plan, entry: Option<DriftEntry>) {
    match entry {
        Some(e) => plan.drift.push(e),
        None => plan.skipped_drift += 1,
    }
}

/// A normal plan's drift entry, address and action only.
fn drift_head(head: RawHead<'_>) -> Option<DriftEntry> {
    if head.mode.as_deref().is_some_and(|m| m != "managed") || head.deposed.is_some() {
        return None;
    }
    Some(DriftEntry {
        address: head.address.into_owned(),
        previous_address: head.previous_address.map(Cow::into_owned),
        action: Action::from_actions(&head.change.actions),
        diffs: Vec::new(),
        arrays: Vec::new(),
        made_by_others: Vec::new(),
        wanted: Vec::new(),
    })
}

/// One `resource_changes` element: `None` when it is not about a managed resource, or is a
/// no-op listed in a refresh-only plan (kept as a count for the note about it).
fn change_entry(
    raw: RawChange<'_>,
    role: PlanRole,
    source_name: &str,
) -> Result<Option<ChangeEntry>, PlanError> {
    if raw.mode.as_deref().is_some_and(|m| m != "managed") {
        return Ok(None);
    }
    let action = Action::from_actions(&raw.change.actions);
    // OpenTofu and Terraform write no resource_changes at all in a refresh-only plan
    // (they refuse one that proposes any change): a proposed change means this is a
    // normal plan. An entry that is a no-op proves less (generated plans list them),
    // so it is only noted, by the classifier.
    if role == PlanRole::RefreshOnly && action != Action::NoOp {
        return Err(PlanError::NotRefreshOnly {
            source_name: source_name.to_owned(),
            address: raw.address.into_owned(),
            action: action.as_str().to_owned(),
        });
    }
    let arrays = if matches!(action, Action::Update | Action::Replace) {
        super::sets::array_digests(raw.change.before, raw.change.after)
            .map_err(inside_change(source_name))?
    } else {
        Vec::new()
    };
    let (changed_paths, unknown_paths, changed_to) =
        if matches!(action, Action::Update | Action::Replace) {
            let (changed, unknown) = changed_paths(&raw, source_name)?;
            let paths: Vec<Path> = changed.iter().map(|(p, _)| p.clone()).collect();
            let shown = shown_paths(&raw, paths, source_name)?;
            // A digest only where the whole path is shown (nothing below a secret).
            let changed_to = changed
                .into_iter()
                .filter(|(p, _)| shown.binary_search(p).is_ok())
                .map(|(p, new)| {
                    let digest = super::leaf_digest(new.as_ref());
                    (p, digest)
                })
                .collect();
            (shown, shown_paths(&raw, unknown, source_name)?, changed_to)
        } else {
            (Vec::new(), Vec::new(), Vec::new())
        };
    let mut replace_paths: Vec<Path> = raw
        .change
        .replace_paths
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter_map(|steps| Path::from_json_steps(steps))
        .collect();
    if !replace_paths.is_empty() {
        replace_paths.sort();
        replace_paths = shown_paths(&raw, replace_paths, source_name)?;
    }
    Ok(Some(ChangeEntry {
        address: raw.address.into_owned(),
        previous_address: raw.previous_address.map(Cow::into_owned),
        action,
        action_reason: raw.action_reason.map(Cow::into_owned),
        deposed: raw.deposed.is_some(),
        importing: raw.change.importing.is_some(),
        replace_paths,
        changed_paths,
        unknown_paths,
        changed_to,
        arrays,
    }))
}

/// Addresses of failed or errored checks; anything unreadable is skipped, not fatal.
fn failed_checks(raw: &[u8]) -> Vec<String> {
    let Ok(checks) = serde_json::from_slice::<Vec<RawCheck>>(raw) else {
        return Vec::new();
    };
    checks
        .into_iter()
        .filter(|c| matches!(c.status.as_deref(), Some("fail" | "error")))
        .map(|c| {
            let address = c
                .address
                .and_then(|a| a.to_display)
                .unwrap_or_else(|| "(unnamed)".to_owned());
            format!("{address} ({})", c.status.unwrap_or_default())
        })
        .collect()
}

fn is_current_managed(raw: &RawChange<'_>) -> bool {
    raw.mode.as_deref().is_none_or(|m| m == "managed") && raw.deposed.is_none()
}

/// A version string is echoed only when it looks like one; anything else could be content.
fn printable_version(version: &str) -> String {
    if !version.is_empty()
        && version.len() <= 16
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
    {
        format!("\"{version}\"")
    } else {
        "(unrecognised)".to_owned()
    }
}

fn value_of(raw: Option<&RawValue>, source_name: &str) -> Result<Value, PlanError> {
    match raw {
        None => Ok(Value::Null),
        Some(raw) => serde_json::from_str(raw.get()).map_err(|e| PlanError::Json {
            source_name: source_name.to_owned(),
            what: "invalid value inside a change",
            line: e.line(),
            column: e.column(),
        }),
    }
}

/// The marker to use for one side: a missing marker is harmless only when the value on
/// that side is null (nothing to hide); otherwise it is treated as "hide everything".
fn marker_of(
    raw: Option<&RawValue>,
    value: Option<&RawValue>,
    source_name: &str,
) -> Result<Option<Value>, PlanError> {
    match raw {
        Some(_) => Ok(Some(value_of(raw, source_name)?)),
        None if value.is_none_or(is_null) => Ok(Some(Value::Bool(false))),
        None => Ok(None),
    }
}

fn is_null(raw: &RawValue) -> bool {
    raw.get().trim() == "null"
}

/// Whether `raw` holds an explicit `null` at `path` (every step there, the last one
/// written `null`): not a missing key or element, nor a `null` above it. Anything that
/// cannot be read says no.
fn explicit_null_at(raw: Option<&RawValue>, path: &Path) -> bool {
    let Some(mut here) = raw else {
        return false;
    };
    for step in &path.0 {
        if is_null(here) {
            return false;
        }
        let next = match step {
            Step::Key(key) => serde_json::from_str::<BTreeMap<String, &RawValue>>(here.get())
                .ok()
                .and_then(|m| m.get(key).copied()),
            Step::Index(i) => serde_json::from_str::<Vec<&RawValue>>(here.get())
                .ok()
                .and_then(|v| usize::try_from(*i).ok().and_then(|i| v.get(i).copied())),
        };
        match next {
            Some(next) => here = next,
            None => return false,
        }
    }
    is_null(here)
}

fn inside_change(source_name: &str) -> impl Fn(serde_json::Error) -> PlanError + '_ {
    move |e| PlanError::Json {
        source_name: source_name.to_owned(),
        what: "invalid value inside a change",
        line: e.line(),
        column: e.column(),
    }
}

/// Every leaf that differs between `before` and `after`, secrets without values.
fn drift_diffs(
    raw: &RawChange<'_>,
    masker: &Masker,
    source_name: &str,
    secrets: &mut Hidden,
) -> Result<Vec<LeafDiff>, PlanError> {
    let before_marker = marker_of(raw.change.before_sensitive, raw.change.before, source_name)?;
    let after_marker = marker_of(raw.change.after_sensitive, raw.change.after, source_name)?;
    let changes = raw_leaf_changes(raw.change.before, raw.change.after)
        .map_err(inside_change(source_name))?;
    let mut out: Vec<LeafDiff> = Vec::with_capacity(changes.len());
    for (path, old, new) in changes {
        let withheld = masker.withheld_path(&path, before_marker.as_ref(), after_marker.as_ref());
        out.push(if let Some(path) = withheld {
            // The values are dropped here, before anything else can see them; so are the
            // keys below a value marked sensitive as a whole (they are part of it).
            LeafDiff {
                path,
                before: None,
                after: None,
                sensitive: true,
                missing: false,
            }
        } else {
            // Both a missing key and an explicit null come back as no leaf: told apart
            // (in the raw value) only where the other side is "", which classify drops
            // as an absent value written two ways unless a key is missing.
            let empty =
                |l: &Option<Leaf>| matches!(l, Some(Leaf::Value(Value::String(s))) if s.is_empty());
            let missing =
                (old.is_none() && empty(&new) && !explicit_null_at(raw.change.before, &path))
                    || (new.is_none() && empty(&old) && !explicit_null_at(raw.change.after, &path));
            LeafDiff {
                path,
                before: Some(old.unwrap_or_else(Leaf::null)),
                after: Some(new.unwrap_or_else(Leaf::null)),
                sensitive: false,
                missing,
            }
        });
    }
    // A leaf that is not marked but copies a marked value (tags_all beside a sensitive
    // tags) is withheld as the original is; the hidden strings are kept for the copies
    // in other resources.
    let hidden = hidden_in(
        raw,
        before_marker.as_ref(),
        after_marker.as_ref(),
        source_name,
    )?;
    secrets.add_strings_of(&hidden);
    withhold_copies(&mut out, &hidden);
    Ok(out)
}

/// The depth of the first map key past the attribute's name in `path` that is, or holds,
/// a hidden string: where a shown path is cut ([`withhold_copies`], [`withhold_keys`]).
fn first_key_holding(path: &Path, hidden: &Hidden) -> Option<usize> {
    path.0.iter().enumerate().skip(1).find_map(|(depth, step)| {
        matches!(step, Step::Key(k) if hidden.holds_string(k)).then_some(depth)
    })
}

/// Withhold every leaf of `diffs` (sorted by path) that holds a value `hidden` holds, or
/// sits under one of its keys (cut at that key), then merge the leaves of one withheld
/// value into one.
fn withhold_copies(diffs: &mut Vec<LeafDiff>, hidden: &Hidden) {
    if !hidden.is_empty() {
        let mut cut = false;
        for diff in diffs.iter_mut().filter(|d| !d.sensitive) {
            let copied = [&diff.before, &diff.after]
                .into_iter()
                .flatten()
                .any(|leaf| holds(hidden, leaf));
            // A key is shown as a path: one that is, or holds, a hidden string (a map keyed
            // by an unmarked arn that holds a sensitive name) is cut as a hidden key is.
            let key_holds = first_key_holding(&diff.path, hidden);
            let under_key = match (hidden.key_depth(&diff.path), key_holds) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if copied || under_key.is_some() {
                if let Some(depth) = under_key {
                    diff.path = Path(diff.path.0[..depth].to_vec());
                    cut = true;
                }
                diff.before = None;
                diff.after = None;
                diff.sensitive = true;
            }
        }
        if cut {
            diffs.sort_by(|a, b| a.path.cmp(&b.path));
        }
    }
    // The leaves of one sensitive value are now one path (sorted, so side by side).
    diffs.dedup_by(|b, a| a.sensitive && b.sensitive && a.path == b.path);
}

/// What the markers of a change hide (see [`crate::mask::Hidden`]); empty, and nothing
/// parsed, when neither marker hides anything.
fn hidden_in(
    raw: &RawChange<'_>,
    before_marker: Option<&Value>,
    after_marker: Option<&Value>,
    source_name: &str,
) -> Result<Hidden, PlanError> {
    let mut hidden = Hidden::default();
    add_hidden(&mut hidden, raw.change.before, before_marker)
        .and_then(|()| add_hidden(&mut hidden, raw.change.after, after_marker))
        .map_err(inside_change(source_name))?;
    Ok(hidden)
}

/// [`Hidden::add`] on a value still in its JSON text: only the parts the marker hides (and
/// the containers on the way to them) are parsed, so a large resource with one sensitive
/// attribute costs little more than that attribute.
fn add_hidden(
    hidden: &mut Hidden,
    raw: Option<&RawValue>,
    marker: Option<&Value>,
) -> Result<(), serde_json::Error> {
    let Some(raw) = raw else {
        return Ok(());
    };
    if !hides_anything(marker) {
        return Ok(());
    }
    match marker {
        Some(Value::Object(markers)) if first_byte(raw) == b'{' => {
            // String keys: a key with an escape in it cannot be borrowed.
            let values: BTreeMap<String, &RawValue> = serde_json::from_str(raw.get())?;
            for (key, marker) in markers {
                add_hidden(hidden, values.get(key).copied(), Some(marker))?;
            }
        }
        Some(Value::Array(markers)) if first_byte(raw) == b'[' => {
            let values: Vec<&RawValue> = serde_json::from_str(raw.get())?;
            for (value, marker) in values.into_iter().zip(markers) {
                add_hidden(hidden, Some(value), Some(marker))?;
            }
        }
        _ => hidden.add(&serde_json::from_str(raw.get())?, marker),
    }
    Ok(())
}

/// Whether `hidden` holds a leaf's value: a string as a string, a number as a number
/// (null and booleans never).
fn holds(hidden: &Hidden, leaf: &Leaf) -> bool {
    match leaf {
        Leaf::Value(Value::String(s)) => hidden.holds_string(s),
        Leaf::Value(Value::Number(n)) => hidden.holds_number(&n.to_string()),
        Leaf::Number(digits) => hidden.holds_number(digits),
        Leaf::Value(_) => false,
    }
}

/// `paths` (sorted) as they may be shown: a path below a value marked sensitive as a whole
/// stops at that value, as in [`drift_diffs`] (a sensitive map's keys are part of it).
fn shown_paths(
    raw: &RawChange<'_>,
    paths: Vec<Path>,
    source_name: &str,
) -> Result<Vec<Path>, PlanError> {
    let before = marker_of(raw.change.before_sensitive, raw.change.before, source_name)?;
    let after = marker_of(raw.change.after_sensitive, raw.change.after, source_name)?;
    // A key of a sensitive value is also hidden where a provider copied it unmarked
    // (tags_all beside a sensitive tags map).
    let hidden = if paths.is_empty() {
        Hidden::default()
    } else {
        hidden_in(raw, before.as_ref(), after.as_ref(), source_name)?
    };
    let mut out: Vec<Path> = paths
        .into_iter()
        .map(|path| {
            match [before.as_ref(), after.as_ref()]
                .into_iter()
                .filter_map(|m| crate::mask::sensitive_depth(m, &path))
                .chain(hidden.key_depth(&path))
                .min()
            {
                Some(depth) => Path(path.0[..depth].to_vec()),
                None => path,
            }
        })
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

/// Paths that differ, each with the value the apply sets there (the caller keeps only a
/// digest of it), and the paths that are unknown until apply.
///
/// Attributes that are unknown until apply (`after_unknown` true) are left out of the
/// first list: they are "known after apply", not a value the apply sets back, and OpenTofu
/// leaves them out of `after`, which would otherwise look like "set to null". They are the
/// second list (the empty path when the whole value is unknown), so that the classifier
/// can tell an update of other attributes from one that may touch a drifted one.
fn changed_paths(
    raw: &RawChange<'_>,
    source_name: &str,
) -> Result<(Vec<ChangedLeaf>, Vec<Path>), PlanError> {
    let unknown = value_of(raw.change.after_unknown, source_name).unwrap_or(Value::Null);
    let unknown_paths: Vec<Path> = if unknown == Value::Bool(true) {
        vec![Path::default()]
    } else {
        flatten(&unknown)
            .into_iter()
            .filter(|(_, v)| **v == Value::Bool(true))
            .map(|(p, _)| p)
            .collect()
    };
    let changed = raw_leaf_changes(raw.change.before, raw.change.after)
        .map_err(inside_change(source_name))?
        .into_iter()
        .map(|(path, _, new)| (path, new))
        .filter(|(path, _)| !unknown_paths.iter().any(|u| u.covers(path)))
        .collect();
    Ok((changed, unknown_paths))
}

/// A changed path and the value the apply sets there (`None`: absent).
type ChangedLeaf = (Path, Option<Leaf>);

/// A changed leaf with its own values.
type OwnedChange = (Path, Option<Leaf>, Option<Leaf>);

/// `leaf_changes` (the tests' reference) of two values still in their JSON text, parsing
/// only what differs:
/// two subtrees whose text is the same are equal without being parsed (most of a drifted
/// resource did not change), objects and lists whose text differs are split one level into
/// raw members, and only the leaves (or subtrees of different shapes) are parsed.
fn raw_leaf_changes(
    before: Option<&RawValue>,
    after: Option<&RawValue>,
) -> Result<Vec<OwnedChange>, serde_json::Error> {
    let mut out = Vec::new();
    let mut prefix = Vec::new();
    raw_diff_into(before, after, &mut prefix, &mut out)?;
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

fn first_byte(raw: &RawValue) -> u8 {
    raw.get().trim_start().bytes().next().unwrap_or(b'n')
}

fn raw_diff_into<'a>(
    before: Option<&'a RawValue>,
    after: Option<&'a RawValue>,
    prefix: &mut Vec<Step>,
    out: &mut Vec<OwnedChange>,
) -> Result<(), serde_json::Error> {
    let before = before.filter(|r| !is_null(r));
    let after = after.filter(|r| !is_null(r));
    match (before, after) {
        (None, None) => Ok(()),
        (Some(a), Some(b)) if a.get() == b.get() => Ok(()),
        (Some(a), Some(b)) if first_byte(a) == b'{' && first_byte(b) == b'{' => {
            let a: BTreeMap<String, &'a RawValue> = serde_json::from_str(a.get())?;
            let b: BTreeMap<String, &'a RawValue> = serde_json::from_str(b.get())?;
            let mut keys: Vec<&String> = a
                .keys()
                .chain(b.keys().filter(|k| !a.contains_key(*k)))
                .collect();
            keys.sort_unstable();
            for key in keys {
                prefix.push(Step::Key(key.clone()));
                raw_diff_into(a.get(key).copied(), b.get(key).copied(), prefix, out)?;
                prefix.pop();
            }
            Ok(())
        }
        (Some(a), Some(b)) if first_byte(a) == b'[' && first_byte(b) == b'[' => {
            let a: Vec<&'a RawValue> = serde_json::from_str(a.get())?;
            let b: Vec<&'a RawValue> = serde_json::from_str(b.get())?;
            for i in 0..a.len().max(b.len()) {
                prefix.push(Step::Index(i as u64));
                raw_diff_into(a.get(i).copied(), b.get(i).copied(), prefix, out)?;
                prefix.pop();
            }
            Ok(())
        }
        (a, b) => {
            // Different shapes, or a leaf on at least one side: join the two subtrees'
            // leaves on path. Leaves are read with [`Leaf::parse`], so a number keeps the
            // digits the plan wrote and two numbers differ when their digits do.
            let mut joined: BTreeMap<Path, (Option<Leaf>, Option<Leaf>)> = BTreeMap::new();
            let mut leaves = Vec::new();
            if let Some(a) = a {
                raw_flatten(a, &mut Vec::new(), &mut leaves)?;
            }
            for (path, leaf) in leaves.drain(..) {
                joined.entry(path).or_default().0 = Some(leaf);
            }
            if let Some(b) = b {
                raw_flatten(b, &mut Vec::new(), &mut leaves)?;
            }
            for (path, leaf) in leaves {
                joined.entry(path).or_default().1 = Some(leaf);
            }
            for (rel, (old, new)) in joined {
                let same = match (&old, &new) {
                    (Some(x), Some(y)) => x.same(y),
                    _ => false,
                };
                if !same {
                    let mut path = prefix.clone();
                    path.extend(rel.0);
                    out.push((Path(path), old, new));
                }
            }
            Ok(())
        }
    }
}

/// Every non-null leaf of a raw value with its path (as [`flatten`] does for a parsed one).
fn raw_flatten(
    raw: &RawValue,
    prefix: &mut Vec<Step>,
    out: &mut Vec<(Path, Leaf)>,
) -> Result<(), serde_json::Error> {
    match first_byte(raw) {
        b'n' => {}
        b'{' => {
            let map: BTreeMap<String, &RawValue> = serde_json::from_str(raw.get())?;
            for (key, value) in map {
                prefix.push(Step::Key(key));
                raw_flatten(value, prefix, out)?;
                prefix.pop();
            }
        }
        b'[' => {
            let items: Vec<&RawValue> = serde_json::from_str(raw.get())?;
            for (i, item) in items.into_iter().enumerate() {
                prefix.push(Step::Index(i as u64));
                raw_flatten(item, prefix, out)?;
                prefix.pop();
            }
        }
        _ => out.push((Path(prefix.clone()), Leaf::parse(raw.get())?)),
    }
    Ok(())
}

#[cfg(test)]
type Change<'v> = (Path, Option<&'v Value>, Option<&'v Value>);

/// The leaves that differ between `before` and `after`, in path order (the reference for
/// [`raw_leaf_changes`], which parses less): the same result as
/// joining the two flattened sides on path and keeping the pairs that differ, without
/// flattening what is equal. Objects are compared key by key and lists position by
/// position, so an unchanged subtree costs one comparison and no allocation; where the
/// shapes differ (a map on one side, a string on the other) both subtrees are flattened
/// and joined. `null` and an absent key are the same (flattening drops both).
#[cfg(test)]
pub(crate) fn leaf_changes<'v>(before: &'v Value, after: &'v Value) -> Vec<Change<'v>> {
    let mut out = Vec::new();
    let mut prefix = Vec::new();
    diff_into(Some(before), Some(after), &mut prefix, &mut out);
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[cfg(test)]
fn present(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

#[cfg(test)]
fn diff_into<'v>(
    before: Option<&'v Value>,
    after: Option<&'v Value>,
    prefix: &mut Vec<Step>,
    out: &mut Vec<Change<'v>>,
) {
    let (before, after) = (present(before), present(after));
    match (before, after) {
        (None, None) => {}
        (Some(a), Some(b)) if a == b => {}
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let mut keys: Vec<&String> = a
                .keys()
                .chain(b.keys().filter(|k| !a.contains_key(*k)))
                .collect();
            keys.sort_unstable();
            for key in keys {
                prefix.push(Step::Key(key.clone()));
                diff_into(a.get(key.as_str()), b.get(key.as_str()), prefix, out);
                prefix.pop();
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) => {
            for i in 0..a.len().max(b.len()) {
                prefix.push(Step::Index(i as u64));
                diff_into(a.get(i), b.get(i), prefix, out);
                prefix.pop();
            }
        }
        (a, b) => {
            // Different shapes, or a leaf on at least one side: join the two subtrees'
            // leaves on path.
            let mut joined: BTreeMap<Path, (Option<&Value>, Option<&Value>)> = BTreeMap::new();
            for (path, value) in a.map(flatten).unwrap_or_default() {
                joined.entry(path).or_default().0 = Some(value);
            }
            for (path, value) in b.map(flatten).unwrap_or_default() {
                joined.entry(path).or_default().1 = Some(value);
            }
            for (rel, (old, new)) in joined {
                if old != new {
                    let mut path = prefix.clone();
                    path.extend(rel.0);
                    out.push((Path(path), old, new));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masker() -> Masker {
        Masker::new(&[]).unwrap()
    }

    fn parse(text: &str, role: PlanRole) -> Result<Plan, PlanError> {
        parse_plan(text.as_bytes(), "t.json", role, &masker())
    }

    #[test]
    fn refuses_state_errored_and_old_versions() {
        let state =
            r#"{"format_version":"1.0","terraform_version":"1.8.0","values":{"root_module":{}}}"#;
        assert!(matches!(
            parse(state, PlanRole::Normal),
            Err(PlanError::State { .. })
        ));
        let raw_state = r#"{"version":4,"serial":3,"lineage":"x","resources":[]}"#;
        assert!(matches!(
            parse(raw_state, PlanRole::Normal),
            Err(PlanError::State { .. })
        ));
        let old = r#"{"format_version":"0.2","planned_values":{}}"#;
        let err = parse(old, PlanRole::Normal).unwrap_err();
        assert!(err.to_string().contains("\"0.2\""), "{err}");
        let errored =
            r#"{"format_version":"1.2","errored":true,"planned_values":{"root_module":{}}}"#;
        assert!(matches!(
            parse(errored, PlanRole::Normal),
            Err(PlanError::Errored { .. })
        ));
        let redacted = r#"{"plan_format_version":"1.0","resource_drift":[]}"#;
        assert!(matches!(
            parse(redacted, PlanRole::Normal),
            Err(PlanError::Redacted { .. })
        ));
        assert!(matches!(
            parse("{", PlanRole::Normal),
            Err(PlanError::Json { .. })
        ));
    }

    #[test]
    fn json_errors_do_not_quote_the_input() {
        let text = r#"{"format_version":"1.2","resource_drift":[{"address":"a","change":{"actions":"CANARY-x"}}]}"#;
        let msg = parse(text, PlanRole::RefreshOnly).unwrap_err().to_string();
        assert!(!msg.contains("CANARY"), "{msg}");
        assert!(msg.starts_with("t.json: "), "{msg}");
    }

    #[test]
    fn drift_is_diffed_and_masked_at_parse_time() {
        let text = r#"{"format_version":"1.2","resource_drift":[
          {"address":"k.db","mode":"managed","change":{"actions":["update"],
            "before":{"data":{"password":"old-pw","user":"app"},"note":"a"},
            "after":{"data":{"password":"new-pw","user":"app"},"note":"b"},
            "before_sensitive":{"data":true},"after_sensitive":{"data":true}}},
          {"address":"data.x.y","mode":"data","change":{"actions":["update"],"before":{},"after":{}}}
        ]}"#;
        let plan = parse(text, PlanRole::RefreshOnly).unwrap();
        assert_eq!(plan.skipped_drift, 1);
        let diffs = &plan.drift[0].diffs;
        assert_eq!(diffs.len(), 2);
        // The map is sensitive as a whole: its keys are part of the secret.
        assert_eq!(diffs[0].path.to_string(), "data");
        assert!(diffs[0].sensitive && diffs[0].before.is_none() && diffs[0].after.is_none());
        assert_eq!(diffs[1].path.to_string(), "note");
        assert_eq!(diffs[1].after, Some(Leaf::from(Value::String("b".into()))));
        assert!(!format!("{plan:?}").contains("-pw"));
    }

    #[test]
    fn keys_of_a_sensitive_map_are_never_paths() {
        // A map from a sensitive variable, keyed by secrets: drift adds one, the normal plan
        // takes it out again and replaces the resource for another. OpenTofu shows
        // `tags = (sensitive value)`; no key may reach a path.
        let text = r#"{"format_version":"1.2","resource_drift":[
          {"address":"t.a","mode":"managed","change":{"actions":["update"],
            "before":{"tags":{"CANARY-k1":"v"},"n":1},
            "after":{"tags":{"CANARY-k1":"v","CANARY-k2":"w","CANARY-k3":"x"},"n":1},
            "before_sensitive":{"tags":true},"after_sensitive":{"tags":true}}}]}"#;
        let plan = parse(text, PlanRole::RefreshOnly).unwrap();
        let paths: Vec<String> = plan.drift[0]
            .diffs
            .iter()
            .map(|d| d.path.to_string())
            .collect();
        assert_eq!(paths, ["tags"]);
        assert!(plan.drift[0].diffs[0].sensitive);
        let text = r#"{"format_version":"1.2","resource_changes":[
          {"address":"t.a","mode":"managed","change":{"actions":["delete","create"],
            "before":{"tags":{"CANARY-k1":"v","CANARY-k2":"w"},"n":1},
            "after":{"tags":{"CANARY-k1":"v"},"n":2},
            "before_sensitive":{"tags":true},"after_sensitive":{"tags":true},
            "replace_paths":[["tags","CANARY-k2"],["n"]]}}]}"#;
        let plan = parse(text, PlanRole::Normal).unwrap();
        let shown = |paths: &[Path]| paths.iter().map(Path::to_string).collect::<Vec<_>>();
        assert_eq!(shown(&plan.changes[0].changed_paths), ["n", "tags"]);
        assert_eq!(shown(&plan.changes[0].replace_paths), ["n", "tags"]);
        assert!(!format!("{plan:?}").contains("CANARY"));
    }

    #[test]
    fn keys_of_a_sensitive_map_known_only_after_apply_are_never_paths() {
        // A sensitive map whose values are known only after apply: `after_unknown` is keyed
        // by its secret keys, which must not reach the unknown paths (nor the plan's debug
        // form) any more than the changed ones.
        let text = r#"{"format_version":"1.2","resource_changes":[
          {"address":"t.a","mode":"managed","change":{"actions":["update"],
            "before":{"tags":{"canary-7f3a-k1":"v"},"n":1},
            "after":{"tags":{},"n":2},
            "after_unknown":{"tags":{"canary-7f3a-k1":true}},
            "before_sensitive":{"tags":true},"after_sensitive":{"tags":true}}}]}"#;
        let plan = parse(text, PlanRole::Normal).unwrap();
        let shown = |paths: &[Path]| paths.iter().map(Path::to_string).collect::<Vec<_>>();
        assert_eq!(shown(&plan.changes[0].unknown_paths), ["tags"]);
        assert!(!format!("{plan:?}").contains("canary-7f3a"), "{plan:?}");
    }

    #[test]
    fn unmarked_copies_of_sensitive_values_are_withheld() {
        // As the AWS provider writes them on the real engine: `tags` from a sensitive
        // variable is marked, `tags_all` (the same tags, merged with default_tags) is not.
        // One queue has one sensitive tag value, rotated outside; the other a sensitive
        // map keyed by secrets, to which a tag was added outside.
        let text = r#"{"format_version":"1.2","resource_drift":[
          {"address":"q.one","mode":"managed","change":{"actions":["update"],
            "before":{"tags":{"plain":"p","sv":"CANARY-var"},"tags_all":{"plain":"p","sv":"CANARY-var"},"n":1},
            "after":{"tags":{"plain":"p2","sv":"CANARY-oob"},"tags_all":{"plain":"p2","sv":"CANARY-oob"},"n":2},
            "before_sensitive":{"tags":{"sv":true},"tags_all":{}},
            "after_sensitive":{"tags":{"sv":true},"tags_all":{}}}},
          {"address":"q.map","mode":"managed","change":{"actions":["update"],
            "before":{"tags":{"CANARY-k1":"CANARY-v1"},"tags_all":{"CANARY-k1":"CANARY-v1"}},
            "after":{"tags":{"CANARY-k1":"CANARY-v1","CANARY-k2":"CANARY-v2"},"tags_all":{"CANARY-k1":"CANARY-v1","CANARY-k2":"CANARY-v2"}},
            "before_sensitive":{"tags":true,"tags_all":{}},
            "after_sensitive":{"tags":true,"tags_all":{}}}}
        ]}"#;
        let plan = parse(text, PlanRole::RefreshOnly).unwrap();
        let shown = |i: usize| {
            plan.drift[i]
                .diffs
                .iter()
                .map(|d| format!("{} {}", d.path, d.sensitive))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            shown(0),
            [
                "n false",
                "tags.plain false",
                "tags.sv true",
                "tags_all.plain false",
                "tags_all.sv true"
            ]
        );
        assert_eq!(shown(1), ["tags true", "tags_all true"]);
        assert!(!format!("{plan:?}").contains("CANARY"), "{plan:?}");
        // A pending change's paths: the keys copied into tags_all stay hidden.
        let text = r#"{"format_version":"1.2","resource_changes":[
          {"address":"q.map","mode":"managed","change":{"actions":["update"],
            "before":{"tags":{"CANARY-k1":"v"},"tags_all":{"CANARY-k1":"v"},"n":1},
            "after":{"tags":{"CANARY-k1":"v","CANARY-k2":"w"},"tags_all":{"CANARY-k1":"v","CANARY-k2":"w"},"n":2},
            "before_sensitive":{"tags":true,"tags_all":{}},
            "after_sensitive":{"tags":true,"tags_all":{}}}}]}"#;
        let plan = parse(text, PlanRole::Normal).unwrap();
        let paths: Vec<String> = plan.changes[0]
            .changed_paths
            .iter()
            .map(Path::to_string)
            .collect();
        assert_eq!(paths, ["n", "tags", "tags_all"]);
        assert!(!format!("{plan:?}").contains("CANARY"), "{plan:?}");
    }

    #[test]
    fn copies_of_sensitive_strings_in_other_resources_are_withheld() {
        // As on the real engine: a lifecycle configuration's second rule has a prefix from a
        // sensitive variable; the first rule was deleted outside, so the secret rule moved
        // to rule[0], where the after marker (from state paths) no longer marks it. The
        // bucket, which marks nothing, mirrors the rules in its computed lifecycle_rule.
        let text = r#"{"format_version":"1.2","resource_drift":[
          {"address":"aws_s3_bucket.b","mode":"managed","change":{"actions":["update"],
            "before":{"lifecycle_rule":[],"bucket":"b"},
            "after":{"lifecycle_rule":[{"prefix":"CANARY-prefix/","enabled":true}],"bucket":"b"},
            "before_sensitive":{"lifecycle_rule":[]},"after_sensitive":{"lifecycle_rule":[{}]}}},
          {"address":"aws_s3_bucket_lifecycle_configuration.l","mode":"managed","change":{"actions":["update"],
            "before":{"rule":[{"id":"plain","filter":[{"prefix":"plain/"}]},{"id":"secret","filter":[{"prefix":"CANARY-prefix/"}]}]},
            "after":{"rule":[{"id":"secret","filter":[{"prefix":"CANARY-prefix/"}]}]},
            "before_sensitive":{"rule":[{"filter":[{}]},{"filter":[{"prefix":true}]}]},
            "after_sensitive":{"rule":[{"filter":[{}]}]}}}
        ]}"#;
        let plan = parse(text, PlanRole::RefreshOnly).unwrap();
        let shown = |i: usize| {
            plan.drift[i]
                .diffs
                .iter()
                .map(|d| format!("{} {}", d.path, d.sensitive))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            shown(0),
            [
                "lifecycle_rule[0].enabled false",
                "lifecycle_rule[0].prefix true"
            ]
        );
        assert_eq!(
            shown(1),
            [
                "rule[0].filter[0].prefix true",
                "rule[0].id false",
                "rule[1].filter[0].prefix true",
                "rule[1].id false"
            ]
        );
        assert!(!format!("{plan:?}").contains("CANARY"), "{plan:?}");
    }

    #[test]
    fn copies_of_strings_marked_in_resources_that_did_not_drift_are_withheld() {
        // As on the real engine (terraform, hashicorp/aws): an aws_iam_role_policy's policy
        // holds a sensitive variable; the provider copies it, unmarked, into the role's
        // computed inline_policy, which shows as drift after a clean apply. The policy did
        // not drift: its marker is only in prior_state (and planned_values), here in a
        // child module. Strings a marker does not cover are not learned.
        let policy = r#""{\"Condition\":\"CANARY-pw\"}""#;
        let state = format!(
            r#"{{"values":{{"outputs":{{}},"root_module":{{"resources":[
              {{"address":"aws_iam_role.app","values":{{"inline_policy":[],"name":"app"}},"sensitive_values":{{"inline_policy":[]}}}}],
              "child_modules":[{{"address":"module.m","resources":[
                {{"address":"module.m.aws_iam_role_policy.app","mode":"managed","values":{{"name":"in-line","policy":{policy}}},"sensitive_values":{{"policy":true}}}}]}}]}}}}}}"#
        );
        let drift = format!(
            r#"[{{"address":"aws_iam_role.app","mode":"managed","change":{{"actions":["update"],
              "before":{{"inline_policy":[],"name":"app"}},
              "after":{{"inline_policy":[{{"name":"in-line","policy":{policy}}}],"name":"app"}},
              "before_sensitive":{{"inline_policy":[]}},"after_sensitive":{{"inline_policy":[{{}}]}}}}}}]"#
        );
        let shown = |plan: &Plan| {
            plan.drift[0]
                .diffs
                .iter()
                .map(|d| format!("{} {}", d.path, d.sensitive))
                .collect::<Vec<_>>()
        };
        let want = [
            "inline_policy[0].name false",
            "inline_policy[0].policy true",
        ];
        for (role, text) in [
            (
                PlanRole::RefreshOnly,
                format!(
                    r#"{{"format_version":"1.2","planned_values":{{"root_module":{{}}}},"resource_drift":{drift},"prior_state":{state}}}"#
                ),
            ),
            // prior_state before the drift, as another writer may order them.
            (
                PlanRole::RefreshOnly,
                format!(
                    r#"{{"format_version":"1.2","prior_state":{state},"resource_drift":{drift}}}"#
                ),
            ),
            (
                PlanRole::Combined,
                format!(
                    r#"{{"format_version":"1.2","resource_drift":{drift},"resource_changes":[
                      {{"address":"aws_iam_role.app","mode":"managed","change":{{"actions":["no-op"],"before":{{}},"after":{{}},"before_sensitive":{{}},"after_sensitive":{{}}}}}}],
                      "prior_state":{state}}}"#
                ),
            ),
            // Only planned_values marks it.
            (
                PlanRole::Combined,
                format!(
                    r#"{{"format_version":"1.2","planned_values":{},"resource_drift":{drift}}}"#,
                    &state[10..state.len() - 1]
                ),
            ),
        ] {
            let plan = parse(&text, role).unwrap();
            assert_eq!(shown(&plan), want, "{text}");
            assert!(!format!("{plan:?}").contains("CANARY"), "{plan:?}");
        }
        // Unmarked: the copy is shown (only marked strings are learned).
        let text = format!(
            r#"{{"format_version":"1.2","resource_drift":{drift},"prior_state":{}}}"#,
            state.replace(r#""policy":true"#, r#""policy":false"#)
        );
        let plan = parse(&text, PlanRole::RefreshOnly).unwrap();
        assert_eq!(
            shown(&plan),
            [
                "inline_policy[0].name false",
                "inline_policy[0].policy false"
            ]
        );
        // A marked value that is not JSON is an error, not a secret let through.
        let text = format!(
            r#"{{"format_version":"1.2","resource_drift":{drift},"prior_state":{}}}"#,
            state.replace(policy, "tru")
        );
        assert!(matches!(
            parse(&text, PlanRole::RefreshOnly),
            Err(PlanError::Json { .. })
        ));
    }

    #[test]
    fn copies_of_sensitive_variables_and_outputs_are_withheld() {
        // No resource marks anything: the secrets are a variable declared sensitive (its
        // value only in `variables`, the declaration in `configuration`, after the drift as
        // terraform writes them) and a sensitive output, each copied into a drifted tag.
        let drift = r#"[{"address":"s.b","mode":"managed","change":{"actions":["update"],
          "before":{"tags":{}},
          "after":{"tags":{"pw":"CANARY-pw","out":"CANARY-out","region":"eu-west-1"}},
          "before_sensitive":{"tags":{}},"after_sensitive":{"tags":{}}}}]"#;
        let variables = r#"{"pw":{"value":"CANARY-pw"},"region":{"value":"eu-west-1"}}"#;
        let config = r#"{"root_module":{"variables":{"pw":{"sensitive":true},"region":{}}}}"#;
        let output = r#"{"sensitive":true,"type":"string","value":"CANARY-out"}"#;
        let change = r#"{"actions":["no-op"],"before":"CANARY-out","after":"CANARY-out","before_sensitive":true,"after_sensitive":true}"#;
        let shown = |text: &str, role: PlanRole| -> Vec<String> {
            let plan = parse(text, role).unwrap();
            plan.drift[0]
                .diffs
                .iter()
                .map(|d| format!("{} {}", d.path, d.sensitive))
                .collect()
        };
        let hidden = ["tags.out true", "tags.pw true", "tags.region false"];
        for (role, text) in [
            (
                PlanRole::RefreshOnly,
                format!(
                    r#"{{"format_version":"1.2","variables":{variables},"planned_values":{{"outputs":{{"o":{output}}},"root_module":{{}}}},"resource_drift":{drift},"configuration":{config}}}"#
                ),
            ),
            // The declaration first; the output only in output_changes.
            (
                PlanRole::Combined,
                format!(
                    r#"{{"format_version":"1.2","configuration":{config},"resource_drift":{drift},"output_changes":{{"o":{change}}},"variables":{variables}}}"#
                ),
            ),
            // The output only in prior_state; no configuration at all: every variable is
            // taken as sensitive (fail closed), so the region is hidden too.
            (
                PlanRole::RefreshOnly,
                format!(
                    r#"{{"format_version":"1.2","variables":{{"pw":{{"value":"CANARY-pw"}}}},"resource_drift":{drift},"prior_state":{{"values":{{"outputs":{{"o":{output}}}}}}}}}"#
                ),
            ),
        ] {
            assert_eq!(shown(&text, role), hidden, "{text}");
            assert!(!format!("{:?}", parse(&text, role)).contains("CANARY"));
        }
        // Not sensitive: shown.
        let text = format!(
            r#"{{"format_version":"1.2","variables":{variables},"resource_drift":{drift},"output_changes":{{"o":{}}},"configuration":{}}}"#,
            change.replace("true", "false"),
            config.replace("true", "false")
        );
        assert_eq!(
            shown(&text, PlanRole::RefreshOnly),
            ["tags.out false", "tags.pw false", "tags.region false"]
        );
        // Without configuration, every variable is hidden.
        let text = format!(
            r#"{{"format_version":"1.2","variables":{variables},"resource_drift":{drift}}}"#
        );
        assert_eq!(
            shown(&text, PlanRole::RefreshOnly),
            ["tags.out false", "tags.pw true", "tags.region true"]
        );
        // Values over the limit waiting for the declaration: refused, unless the
        // declaration says the big one is not sensitive.
        let big = "x".repeat(VARIABLES_LIMIT);
        for (sensitive, refused) in [("true", true), ("false", false)] {
            let text = format!(
                r#"{{"format_version":"1.2","variables":{{"pw":{{"value":"CANARY-pw"}},"big":{{"value":"{big}"}}}},"resource_drift":{drift},"configuration":{{"root_module":{{"variables":{{"pw":{{"sensitive":true}},"big":{{"sensitive":{sensitive}}}}}}}}}}}"#
            );
            let result = parse(&text, PlanRole::RefreshOnly);
            assert_eq!(
                matches!(result, Err(PlanError::VariablesTooLarge { .. })),
                refused,
                "{sensitive}"
            );
        }
    }

    #[test]
    fn a_marked_string_inside_a_longer_unmarked_one_is_withheld() {
        // As on the real engine: a policy built from a queue's computed arn (which holds
        // the sensitive name) is marked nowhere, and the provider copies it into the role's
        // inline_policy; the name is marked in the queue's state. A second drifted
        // resource's own marked tag is inside its unmarked description. Short marked
        // strings hide only whole values.
        let policy = r#""{\"Resource\":\"arn:aws:sqs:eu-central-1:1:q-CANARY-name\",\"k\":\"CANARY-q\\\"\\u003c\\\\x\"}""#;
        let text = format!(
            r#"{{"format_version":"1.2","resource_drift":[
              {{"address":"aws_iam_role.app","mode":"managed","change":{{"actions":["update"],
                "before":{{"inline_policy":[],"note":"yes"}},
                "after":{{"inline_policy":[{{"name":"in-line","policy":{policy}}}],"note":"say no more"}},
                "before_sensitive":{{"inline_policy":[]}},"after_sensitive":{{"inline_policy":[{{}}]}}}}}},
              {{"address":"aws_sqs_queue.other","mode":"managed","change":{{"actions":["update"],
                "before":{{"description":"a","tags":{{"t":"CANARY-tag-value"}}}},
                "after":{{"description":"about CANARY-tag-value","tags":{{"t":"CANARY-tag-value"}}}},
                "before_sensitive":{{"tags":{{"t":true}}}},"after_sensitive":{{"tags":{{"t":true}}}}}}}}],
              "prior_state":{{"values":{{"root_module":{{"resources":[
                {{"address":"aws_sqs_queue.q","values":{{"name":"q-CANARY-name","short":"no"}},"sensitive_values":{{"name":true,"short":true}}}},
                {{"address":"aws_sqs_queue.s","values":{{"tags":{{"q":"CANARY-q\"<\\x"}}}},"sensitive_values":{{"tags":true}}}}]}}}}}}}}"#
        );
        let plan = parse(&text, PlanRole::RefreshOnly).unwrap();
        let shown: Vec<String> = plan
            .drift
            .iter()
            .flat_map(|d| &d.diffs)
            .map(|d| format!("{} {}", d.path, d.sensitive))
            .collect();
        assert_eq!(
            shown,
            [
                "inline_policy[0].name false",
                "inline_policy[0].policy true",
                // "no" is marked but short: inside "say no more" it is shown.
                "note false",
                "description true",
            ]
        );
        assert!(!format!("{plan:?}").contains("CANARY"), "{plan:?}");
        // Each secret alone is enough: the escaped one, then the name.
        for (gone, kept) in [
            (r#""name":true,"#, "CANARY-q"),
            (r#""tags":true"#, "CANARY-name"),
        ] {
            let plan = parse(&text.replace(gone, ""), PlanRole::RefreshOnly).unwrap();
            assert!(plan.drift[0].diffs[1].sensitive, "{kept}");
        }
    }

    #[test]
    fn a_map_key_holding_a_marked_string_is_withheld() {
        // A map keyed by a queue's computed arn (unmarked, holding the sensitive name) or
        // by a marked string itself, drifted in a resource that marks nothing: the keys
        // are paths, shown as the values would be.
        let text = r#"{"format_version":"1.2","resource_drift":[
          {"address":"aws_iam_role.app","mode":"managed","change":{"actions":["update"],
            "before":{"tags":{}},
            "after":{"tags":{"arn:aws:sqs:eu-central-1:1:q-CANARY-name":"1","q-CANARY-name":"2","plain":"3"}},
            "before_sensitive":{"tags":{}},"after_sensitive":{"tags":{}}}}],
          "prior_state":{"values":{"root_module":{"resources":[
            {"address":"aws_sqs_queue.q","values":{"name":"q-CANARY-name"},"sensitive_values":{"name":true}}]}}}}"#;
        let plan = parse(text, PlanRole::RefreshOnly).unwrap();
        assert!(!format!("{plan:?}").contains("CANARY"), "{plan:?}");
        let shown: Vec<String> = plan.drift[0]
            .diffs
            .iter()
            .map(|d| format!("{} {}", d.path, d.sensitive))
            .collect();
        assert_eq!(shown, ["tags true", "tags.plain false"]);
    }

    #[test]
    fn the_keys_of_a_map_a_resource_marks_whole_are_withheld_in_other_resources() {
        // As on the real engine (terraform 1.11, hashicorp/aws 5.100): queue a's tags are
        // `sensitive({...})`, marked whole; the provider's tags_all of a is not marked,
        // and queue b copies it (`tags = aws_sqs_queue.a.tags_all`), queue c builds keys
        // from it; b and c mark nothing. A key that cannot be an attribute's name (not
        // lower-case snake_case) is the user's data: withheld in b and c, as a key or
        // inside one. A key that could be an attribute's name (`master_user`) stays
        // within its resource, not to hide every equal attribute name of the plan.
        let text = r#"{"format_version":"1.2","resource_drift":[
          {"address":"aws_sqs_queue.a","mode":"managed","change":{"actions":["update"],
            "before":{"tags":{"CANARY-k1":"CANARY-v1"},"tags_all":{"CANARY-k1":"CANARY-v1"}},
            "after":{"tags":{"CANARY-k1":"CANARY-v2"},"tags_all":{"CANARY-k1":"CANARY-v2"}},
            "before_sensitive":{"tags":true,"tags_all":{}},"after_sensitive":{"tags":true,"tags_all":{}}}},
          {"address":"aws_sqs_queue.b","mode":"managed","change":{"actions":["update"],
            "before":{"tags":{"CANARY-k1":"x","plain":"p"}},
            "after":{"tags":{"CANARY-k1":"y","plain":"q"}},
            "before_sensitive":{"tags":{}},"after_sensitive":{"tags":{}}}},
          {"address":"aws_sqs_queue.c","mode":"managed","change":{"actions":["update"],
            "before":{"tags":{"copy-CANARY-k1":"x","master_user":"m"}},
            "after":{"tags":{"copy-CANARY-k1":"y","master_user":"n"}},
            "before_sensitive":{"tags":{}},"after_sensitive":{"tags":{}}}}],
          "prior_state":{"values":{"root_module":{"resources":[
            {"address":"aws_db.d","values":{"settings":{"master_user":"u"}},"sensitive_values":{"settings":true}}]}}}}"#;
        let plan = parse(text, PlanRole::RefreshOnly).unwrap();
        assert!(!format!("{plan:?}").contains("CANARY"), "{plan:?}");
        let shown = |i: usize| {
            plan.drift[i]
                .diffs
                .iter()
                .map(|d| format!("{} {}", d.path, d.sensitive))
                .collect::<Vec<_>>()
        };
        assert_eq!(shown(1), ["tags true", "tags.plain false"]);
        assert_eq!(shown(2), ["tags true", "tags.master_user false"]);
    }

    #[test]
    fn a_map_key_holding_a_marked_string_is_withheld_in_an_unapplied_change() {
        // The normal plan's changes are shown as paths (pending changes): a key holding a
        // string the state marks is cut there as in the drift, and keeps no digest.
        let text = r#"{"format_version":"1.2","resource_changes":[
          {"address":"aws_iam_role.app","mode":"managed","change":{"actions":["update"],
            "before":{"tags":{}},
            "after":{"tags":{"x-q-CANARY-name-y":"1","plain":"2"}},
            "replace_paths":[["tags","x-q-CANARY-name-y"]],
            "before_sensitive":{"tags":{}},"after_sensitive":{"tags":{}}}},
          {"address":"aws_sqs_queue.q","mode":"managed","change":{"actions":["no-op"],
            "before":{"name":"q-CANARY-name"},"after":{"name":"q-CANARY-name"},
            "before_sensitive":{"name":true},"after_sensitive":{"name":true}}}],
          "prior_state":{"values":{"root_module":{"resources":[
            {"address":"aws_sqs_queue.q","values":{"name":"q-CANARY-name"},"sensitive_values":{"name":true}}]}}}}"#;
        for role in [PlanRole::Normal, PlanRole::Combined] {
            let plan = parse(text, role).unwrap();
            assert!(!format!("{plan:?}").contains("CANARY"), "{plan:?}");
            let change = &plan.changes[0];
            let shown = |paths: &[Path]| paths.iter().map(Path::to_string).collect::<Vec<_>>();
            assert_eq!(shown(&change.changed_paths), ["tags", "tags.plain"]);
            assert_eq!(shown(&change.replace_paths), ["tags"]);
            let digests: Vec<String> = change
                .changed_to
                .iter()
                .map(|(p, _)| p.to_string())
                .collect();
            assert_eq!(digests, ["tags.plain"]);
        }
    }

    #[test]
    fn a_sensitive_variable_or_planned_value_used_as_a_map_key_is_withheld_in_the_normal_plan() {
        // In `show -json` output `variables` and `planned_values` come before
        // `resource_changes`: the normal plan had not read them when its changes said they
        // were needed, so a key known only there (a sensitive variable's value, a value
        // marked only in the planned values of an instance being created) was shown.
        let change = |key: &str| {
            format!(
                r#"{{"address":"aws_iam_role.app","mode":"managed","change":{{"actions":["update"],
                "before":{{"tags":{{}}}},"after":{{"tags":{{"{key}":"1","plain":"2"}}}},
                "before_sensitive":{{"tags":{{}}}},"after_sensitive":{{"tags":{{}}}}}}}}"#
            )
        };
        let by_variable = format!(
            r#"{{"format_version":"1.2",
              "variables":{{"tag_key":{{"value":"k-CANARY-var"}},"region":{{"value":"r"}}}},
              "planned_values":{{"root_module":{{}}}},
              "resource_changes":[{}],
              "configuration":{{"root_module":{{"variables":{{"tag_key":{{"sensitive":true}},"region":{{}}}}}}}}}}"#,
            change("x-k-CANARY-var-y")
        );
        let planned = r#"{"address":"aws_ssm_parameter.p","mode":"managed","values":{"value":"k-CANARY-planned"},"sensitive_values":{"value":true}}"#;
        let by_planned_value = format!(
            r#"{{"format_version":"1.2",
              "planned_values":{{"root_module":{{"resources":[{planned}]}}}},
              "resource_changes":[{},
                {{"address":"aws_ssm_parameter.p","mode":"managed","change":{{"actions":["create"],
                  "before":null,"after":{{"value":"k-CANARY-planned"}},
                  "before_sensitive":false,"after_sensitive":{{"value":true}}}}}}],
              "prior_state":{{"values":{{"root_module":{{}}}}}}}}"#,
            change("k-CANARY-planned")
        );
        for text in [&by_variable, &by_planned_value] {
            for role in [PlanRole::Normal, PlanRole::Combined] {
                let plan = parse(text, role).unwrap();
                assert!(!format!("{plan:?}").contains("CANARY"), "{role:?} {plan:?}");
                let paths: Vec<String> = plan.changes[0]
                    .changed_paths
                    .iter()
                    .map(Path::to_string)
                    .collect();
                assert_eq!(paths, ["tags", "tags.plain"], "{role:?}");
            }
        }
        // A variable not declared sensitive hides nothing.
        let plain = by_variable.replace(r#""tag_key":{"sensitive":true}"#, r#""tag_key":{}"#);
        let plan = parse(&plain, PlanRole::Normal).unwrap();
        assert!(format!("{plan:?}").contains("x-k-CANARY-var-y"));
    }

    #[test]
    fn the_keys_of_a_sensitive_map_variable_or_output_are_withheld_as_keys_of_copies() {
        // `default_tags { tags = var.secret_tags }`: the provider copies the keys of the
        // sensitive map into every tags_all, unmarked; they are shown as paths.
        let change = r#"{"address":"aws_sqs_queue.q","mode":"managed","change":{"actions":["update"],
          "before":{"tags_all":{"plain":"p"}},
          "after":{"tags_all":{"plain":"p","k-CANARY-var-map-key":"v","k-CANARY-out-key":"w","team":"ops"}},
          "before_sensitive":{"tags_all":{}},"after_sensitive":{"tags_all":{}}}}"#;
        let text = format!(
            r#"{{"format_version":"1.2",
              "variables":{{"secret_tags":{{"value":{{"k-CANARY-var-map-key":"v"}}}}}},
              "resource_changes":[{change}],
              "output_changes":{{"o":{{"actions":["no-op"],"before":{{"k-CANARY-out-key":1}},
                "after":{{"k-CANARY-out-key":1}},"before_sensitive":true,"after_sensitive":true}}}},
              "configuration":{{"root_module":{{"variables":{{"secret_tags":{{"sensitive":true}}}}}}}}}}"#
        );
        for role in [PlanRole::Normal, PlanRole::Combined] {
            let plan = parse(&text, role).unwrap();
            assert!(!format!("{plan:?}").contains("CANARY"), "{role:?} {plan:?}");
            let paths: Vec<String> = plan.changes[0]
                .changed_paths
                .iter()
                .map(Path::to_string)
                .collect();
            assert_eq!(paths, ["tags_all", "tags_all.team"], "{role:?}");
        }
    }

    #[test]
    fn literals_given_to_a_child_modules_sensitive_variable_are_withheld() {
        // A child module's variables are not in the plan's `variables`: a literal given to
        // one declared sensitive is only in `configuration` (the call's expressions, then
        // the module's declarations), and marked nowhere when nothing stores it.
        let drift = r#"[{"address":"s.b","mode":"managed","change":{"actions":["update"],
          "before":{"tags":{}},
          "after":{"tags":{"a":"CANARY-lit","b":"x/CANARY-deep/y","c":"plain-value","d":"n"}},
          "before_sensitive":{"tags":{}},"after_sensitive":{"tags":{}}}}]"#;
        let config = r#"{"root_module":{"module_calls":{"m":{"source":"./m",
          "expressions":{"token":{"constant_value":"CANARY-lit"},"name":{"constant_value":"plain-value"},
            "count":{"constant_value":"n"},"ref":{"references":["var.x"]}},
          "module":{"variables":{"token":{"sensitive":true},"name":{},"count":{"sensitive":false}},
            "module_calls":{"inner":{"expressions":{"deep":{"constant_value":{"k":"CANARY-deep"}}},
              "module":{"variables":{"deep":{"sensitive":true}}}}}}}}}}"#;
        let text = format!(
            r#"{{"format_version":"1.2","resource_drift":{drift},"configuration":{config}}}"#
        );
        let plan = parse(&text, PlanRole::RefreshOnly).unwrap();
        let shown: Vec<String> = plan.drift[0]
            .diffs
            .iter()
            .map(|d| format!("{} {}", d.path, d.sensitive))
            .collect();
        assert_eq!(
            shown,
            ["tags.a true", "tags.b true", "tags.c false", "tags.d false"]
        );
        assert!(!format!("{plan:?}").contains("CANARY"), "{plan:?}");
        // A call whose module says nothing of its variables keeps every literal.
        let text = text.replace(
            r#""module":{"variables":{"deep":{"sensitive":true}}}"#,
            r#""module":{}"#,
        );
        let plan = parse(&text, PlanRole::RefreshOnly).unwrap();
        assert!(plan.drift[0].diffs[1].sensitive);
    }

    #[test]
    fn only_what_a_marker_hides_is_read_for_copies() {
        // Only the marked parts of an entry are parsed for the values they hide; a key
        // with an escape on the way to them is read as any other.
        let text = r#"{"format_version":"1.2","resource_drift":[
          {"address":"q.a","mode":"managed","change":{"actions":["update"],
            "before":{"m":{"k\"q":"CANARY-esc"},"big":[1,2,3],"copy":"CANARY-esc","n":1},
            "after":{"m":{"k\"q":"CANARY-esc"},"big":[1,2,3,4],"copy":"CANARY-esc2","n":2},
            "before_sensitive":{"m":{"k\"q":true}},"after_sensitive":{"m":true}}}]}"#;
        let plan = parse(text, PlanRole::RefreshOnly).unwrap();
        let shown: Vec<String> = plan.drift[0]
            .diffs
            .iter()
            .map(|d| format!("{} {}", d.path, d.sensitive))
            .collect();
        assert_eq!(shown, ["big[3] false", "copy true", "n false"]);
    }

    #[test]
    fn copied_numbers_are_withheld_and_strings_never_hide_numbers() {
        // A sensitive port copied into an unmarked attribute of the same resource is
        // withheld; an SSM parameter's value "30" (marked by the provider whatever its type)
        // does not hide another resource's timeout of 30.
        let text = r#"{"format_version":"1.2","resource_drift":[
          {"address":"a.db","mode":"managed","change":{"actions":["update"],
            "before":{"port":5432,"endpoint":{"port":5432},"n":1},
            "after":{"port":6543,"endpoint":{"port":6543},"n":2},
            "before_sensitive":{"port":true},"after_sensitive":{"port":true}}},
          {"address":"aws_ssm_parameter.p","mode":"managed","change":{"actions":["update"],
            "before":{"value":"30"},"after":{"value":"31"},
            "before_sensitive":{"value":true},"after_sensitive":{"value":true}}},
          {"address":"aws_sqs_queue.q","mode":"managed","change":{"actions":["update"],
            "before":{"visibility_timeout_seconds":30},"after":{"visibility_timeout_seconds":45},
            "before_sensitive":{},"after_sensitive":{}}}
        ]}"#;
        let plan = parse(text, PlanRole::RefreshOnly).unwrap();
        let shown = |i: usize| {
            plan.drift[i]
                .diffs
                .iter()
                .map(|d| format!("{} {}", d.path, d.sensitive))
                .collect::<Vec<_>>()
        };
        assert_eq!(shown(0), ["endpoint.port true", "n false", "port true"]);
        assert_eq!(shown(2), ["visibility_timeout_seconds false"]);
    }

    #[test]
    fn missing_markers_fail_closed() {
        let text = r#"{"format_version":"1.2","resource_drift":[
          {"address":"a.b","change":{"actions":["update"],"before":{"x":"1"},"after":{"x":"2"}}}]}"#;
        let plan = parse(text, PlanRole::RefreshOnly).unwrap();
        assert!(plan.drift[0].diffs[0].sensitive);
    }

    #[test]
    fn unknown_after_values_are_not_changed_paths() {
        let text = r#"{"format_version":"1.2","resource_changes":[
          {"address":"a.b","mode":"managed","change":{"actions":["update"],
           "before":{"id":"1","v":"x","tags":["a"]},"after":{"v":"y","tags":[null]},
           "after_unknown":{"id":true,"tags":[true]}}}]}"#;
        let plan = parse(text, PlanRole::Normal).unwrap();
        let paths: Vec<String> = plan.changes[0]
            .changed_paths
            .iter()
            .map(Path::to_string)
            .collect();
        assert_eq!(paths, vec!["v"]);
        let unknown: Vec<String> = plan.changes[0]
            .unknown_paths
            .iter()
            .map(Path::to_string)
            .collect();
        // No sensitivity markers: hidden from the attribute down, as the changed paths are.
        assert_eq!(unknown, vec!["id", "tags"]);
    }

    #[test]
    fn damaged_input_is_an_error_never_a_panic() {
        let whole: &[u8] = include_bytes!("../../tests/fixtures/shop-prod/refresh_only.json");
        for cut in (0..whole.len()).step_by(61) {
            assert!(parse_plan(&whole[..cut], "t", PlanRole::RefreshOnly, &masker()).is_err());
        }
        // Flip bytes here and there: any outcome but a panic is fine.
        let mut damaged = whole.to_vec();
        for (n, at) in (0..damaged.len()).step_by(89).enumerate() {
            damaged[at] = b"{}[]\",:0tn"[n % 10];
            if let Ok(plan) = parse_plan(&damaged, "t", PlanRole::Combined, &masker()) {
                // Whatever parses must also classify and render.
                let rules = crate::rules::Rules::default();
                let options = crate::classify::Options::default();
                let report = crate::classify::classify("s", &plan, Some(&plan), &rules, &options);
                let _ = crate::report::text::render(&report, true);
                let meta = crate::report::json::Meta {
                    exit_code: 2,
                    generated_at: "2026-10-28T00:00:00Z",
                    timings: None,
                };
                let _ = crate::report::json::render(&report, meta);
                let _ = crate::report::markdown::render(&report, "2026-10-28T00:00:00Z");
            }
        }
    }

    /// The flatten-and-join definition that `leaf_changes` must agree with.
    fn joined_leaves(before: &Value, after: &Value) -> Vec<(String, Option<Value>, Option<Value>)> {
        let mut joined: BTreeMap<Path, (Option<&Value>, Option<&Value>)> = BTreeMap::new();
        for (path, value) in flatten(before) {
            joined.entry(path).or_default().0 = Some(value);
        }
        for (path, value) in flatten(after) {
            joined.entry(path).or_default().1 = Some(value);
        }
        joined
            .into_iter()
            .filter(|(_, (a, b))| a != b)
            .map(|(p, (a, b))| (p.to_string(), a.cloned(), b.cloned()))
            .collect()
    }

    #[test]
    fn raw_leaf_changes_agree_with_parsed_ones() {
        let texts = [
            r#"{"a":{"x":1,"y":[1,2,{"z":"q"}]},"b":null,"c":"s","e":{}}"#,
            r#"{"c":"s","a":{"y":[1,2,{"z":"q"}],"x":1},"e":{}}"#,
            r#"{"a":{"x":2,"y":[1,{"z":"q"}]},"c":{"k":"s"},"d":[null,3]}"#,
            r#"{"a":"flat","b":{"0":1},"c":[],"e":{"f":null}}"#,
            r#"{"a":{"x":1.0},"b":[1],"c":"s","k\"q":1}"#,
            r#"{}"#,
            r#"null"#,
            r#"[1,[2,3],{"k":null}]"#,
        ];
        for a in texts {
            for b in texts {
                let (ra, rb): (Box<RawValue>, Box<RawValue>) = (
                    serde_json::from_str(a).unwrap(),
                    serde_json::from_str(b).unwrap(),
                );
                let (va, vb): (Value, Value) = (
                    serde_json::from_str(a).unwrap(),
                    serde_json::from_str(b).unwrap(),
                );
                let want: Vec<OwnedChange> = leaf_changes(&va, &vb)
                    .into_iter()
                    .map(|(p, x, y)| (p, x.cloned().map(Leaf::from), y.cloned().map(Leaf::from)))
                    .collect();
                assert_eq!(
                    raw_leaf_changes(Some(&ra), Some(&rb)).unwrap(),
                    want,
                    "{a} -> {b}"
                );
            }
        }
    }

    #[test]
    fn leaf_changes_agree_with_flatten_and_join() {
        let sides = [
            serde_json::json!({"a": {"x": 1, "y": [1, 2, {"z": "q"}]}, "b": null, "c": "s", "e": {}}),
            serde_json::json!({"a": {"x": 2, "y": [1, {"z": "q"}]}, "c": {"k": "s"}, "d": [null, 3]}),
            serde_json::json!({"a": "flat", "b": {"0": 1}, "c": [], "e": {"f": null}}),
            serde_json::json!({"a": {"x": 1, "y": [1, 2, {"z": "r"}]}, "b": [1], "c": "s"}),
            serde_json::json!({}),
            serde_json::json!(null),
            serde_json::json!([1, [2, 3], {"k": null}]),
        ];
        for a in &sides {
            for b in &sides {
                let got: Vec<(String, Option<Value>, Option<Value>)> = leaf_changes(a, b)
                    .into_iter()
                    .map(|(p, x, y)| (p.to_string(), x.cloned(), y.cloned()))
                    .collect();
                assert_eq!(got, joined_leaves(a, b), "{a} -> {b}");
            }
        }
    }

    #[test]
    fn refresh_only_with_changes_is_refused() {
        let text = r#"{"format_version":"1.2","resource_changes":[
          {"address":"a.b","mode":"managed","change":{"actions":["create"],"before":null,"after":{}}}]}"#;
        assert!(matches!(
            parse(text, PlanRole::RefreshOnly),
            Err(PlanError::NotRefreshOnly { .. })
        ));
        // No-op entries alone are kept (the classifier notes them).
        let quiet = r#"{"format_version":"1.2","resource_changes":[
          {"address":"a.b","mode":"managed","change":{"actions":["no-op"],"before":{},"after":{}}}]}"#;
        let plan = parse(quiet, PlanRole::RefreshOnly).unwrap();
        assert!(plan.changes.is_empty());
        assert_eq!(plan.listed_no_ops, 1);
        assert_eq!(plan.role, PlanRole::RefreshOnly);
        assert_eq!(
            parse(text, PlanRole::Normal).unwrap().changes[0].action,
            Action::Create
        );
    }
}
