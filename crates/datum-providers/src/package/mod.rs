//! The Package resource type: a Debian package that should be installed (at
//! a version, optionally held) or absent.
//!
//! ```yaml
//! datum: v1alpha1
//! type: Package
//! name: web
//! desired:
//!   name: nginx-light       # optional; the resource name otherwise
//!   version: "1.22.*"       # optional; exact ("1.22.1-9") or a prefix ending in *
//!   state: installed        # installed (default) | held | absent
//! ```
//!
//! This module owns the package's installation state, version and hold.
//!
//! * **Observe** reads the dpkg status database directly ([`status`]),
//!   parsed once per pass and shared by every Package resource; never one
//!   `dpkg -s` per package.
//! * **Apply** runs `apt-get` non-interactively ([`apt`]), keeping locally
//!   changed configuration files (`--force-confold`), never installing
//!   recommends, never removing a package the repository did not declare
//!   absent, and refusing to run under a `--root` other than `/`. A held
//!   package is changed only when its declaration names a version.
//! * **Batching**: [`install_batch`] (the [`Batches`] capability, which the
//!   engine calls before its per-resource loop) installs every Package that
//!   needs installing in one apt transaction and returns what each changed
//!   package was before it; the engine diffs that (so the pass reports the
//!   change where it belongs), each resource's apply finds nothing left to
//!   do, and its verify reads the database afresh.
//! * **Verify** is stronger than the fields: the package is installed at the
//!   declared version, and the database is consistent (nothing
//!   half-installed, half-configured, unpacked or waiting for triggers, and
//!   `dpkg --audit` silent).
//!
//! `state: installed` does not manage the hold: a package an operator held
//! is still installed. `state: absent` removes the package (`apt-get
//! remove`, not purge): its configuration files stay, as after an
//! administrator's `apt remove`, and the package counts as absent.
//!
//! Also here: which declared packages provide validators ([`edges`]) and
//! package-owned configuration files that differ from the packaged version
//! ([`conffiles`]).

pub mod apt;
pub mod conffiles;
pub mod desired;
pub mod edges;
pub mod error;
pub mod status;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use datum_core::{Action, Diff, FieldChange, Observed, Presence, Resource, ResourceId};
use datum_host::Host;
use serde_json::{Value, json};

pub use conffiles::{ConffileDrift, changed_conffiles};
pub use desired::{PackageSpec, VersionReq, Wanted};
pub use edges::{
    MissingValidatorPackage, implicit_edges, missing_validator_packages, validator_packages,
};
pub use error::PackageError;
pub use status::{DpkgState, PackageRecord, StatusDb};

use crate::Activated;
use crate::kind::planned;
use crate::{
    Batched, Batches, Capabilities, Declared, Exclusive, FieldError, FieldLookup, Kind,
    OrderingEdge, OrdersOthers, Planned, ProviderError,
};

/// The Package provider. Stateless; what it knows comes from the dpkg
/// database (cached per pass in the [`Host`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct PackageProvider;

/// The kind name manifests use.
pub const KIND: &str = "Package";

/// The parsed declaration of a Package resource.
pub fn spec(resource: &Resource) -> Result<PackageSpec, ProviderError> {
    PackageSpec::parse(&resource.desired, &resource.id.name).map_err(|errors| {
        let field = errors.first().map(|e| e.path.join(".")).unwrap_or_default();
        let message = errors
            .iter()
            .map(|e| e.message.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        ProviderError::Invalid { field, message }
    })
}

/// The word observations use for a package's state.
fn state_word(record: Option<&PackageRecord>) -> &'static str {
    match record {
        None => "absent",
        Some(r) if r.state.is_absent() => "absent",
        Some(r) if r.state == DpkgState::Installed && r.is_held() => "held",
        Some(r) => r.state.word(),
    }
}

/// The observation for a package: the declared fields under their declared
/// names (`state`, `version`), and what dpkg says behind them.
fn observation(name: &str, record: Option<&PackageRecord>) -> Observed {
    let mut fields = BTreeMap::new();
    fields.insert("name".to_owned(), json!(name));
    fields.insert("state".to_owned(), json!(state_word(record)));
    let present = record.is_some_and(|r| !r.state.is_absent());
    fields.insert(
        "version".to_owned(),
        match record {
            Some(r) if present => json!(r.version),
            _ => Value::Null,
        },
    );
    fields.insert(
        "held".to_owned(),
        json!(record.is_some_and(|r| r.is_held())),
    );
    if let Some(r) = record {
        fields.insert(
            "status".to_owned(),
            json!(format!("{} {} {}", r.want, r.flag, r.state.word())),
        );
        if let Some(arch) = &r.architecture {
            fields.insert("architecture".to_owned(), json!(arch));
        }
    }
    Observed {
        presence: if present {
            Presence::Present
        } else {
            Presence::Absent
        },
        fields,
        content: None,
        meta: None,
    }
}

/// Reads the package's record from this pass's database.
fn observe_fresh(host: &Host, spec: &PackageSpec) -> Result<Observed, PackageError> {
    let db = status::load(host).map_err(|source| PackageError::Status {
        package: spec.name.clone(),
        source,
    })?;
    let record = db.get(&spec.name);
    let mut observed = observation(&spec.name, record);
    // No record: the architecture apt would install it for (the declared
    // one, else the native one, dpkg's own), so that `foo` and
    // `foo:amd64` are seen to be one package before either is installed
    // (see `observed_identity`).
    if record.is_none()
        && let Some(arch) = install_architecture(&spec.name, &db)
    {
        observed
            .fields
            .insert("architecture".to_owned(), json!(arch));
    }
    // Noted for the plan (see `refuses`); a journal that cannot be listed
    // is left to apt to judge.
    if status::interrupted(host).unwrap_or(false) {
        observed
            .fields
            .insert("dpkg".to_owned(), json!(DPKG_INTERRUPTED));
    }
    Ok(observed)
}

/// The architecture `apt-get install NAME` installs a package for: the one
/// written after `:` (`native` and `all` are the native one for apt), else
/// the native one, which is dpkg's own (`None` when the database has no
/// dpkg record).
fn install_architecture(name: &str, db: &status::StatusDb) -> Option<String> {
    let native = || db.native().map(str::to_owned);
    match name.split_once(':') {
        Some((_, "native" | "all")) => native(),
        Some((_, arch)) => Some(arch.to_owned()),
        None => native(),
    }
}

/// The observed `dpkg` when dpkg's journal holds an unfinished run (the
/// field is absent otherwise).
const DPKG_INTERRUPTED: &str = "interrupted";

/// Whether an observed state satisfies the declared one.
fn state_satisfied(wanted: Wanted, observed: &str) -> bool {
    match wanted {
        Wanted::Installed => matches!(observed, "installed" | "held"),
        Wanted::Held => observed == "held",
        Wanted::Absent => observed == "absent",
    }
}

/// The diff for a declaration and an observation. Pure.
pub fn diff_spec(spec: &PackageSpec, observed: &Observed) -> Diff {
    let seen_state = observed.fields.get("state").and_then(Value::as_str);
    let seen_version = observed.fields.get("version").and_then(Value::as_str);
    let mut changes = Vec::new();
    if !state_satisfied(spec.state, seen_state.unwrap_or("absent")) {
        changes.push(FieldChange {
            field: "state".to_owned(),
            before: seen_state.map(|s| json!(s)),
            after: Some(json!(spec.state.word())),
        });
    }
    if let Some(want) = &spec.version
        && spec.state.wants_installed()
        && !seen_version.is_some_and(|v| want.matches(v))
    {
        changes.push(FieldChange {
            field: "version".to_owned(),
            before: seen_version.map(|v| json!(v)),
            after: Some(json!(want.declared())),
        });
    }
    let action = if changes.is_empty() {
        None
    } else if observed.presence == Presence::Absent && spec.state.wants_installed() {
        Some(Action::Create)
    } else if observed.presence == Presence::Present && spec.state == Wanted::Absent {
        Some(Action::Remove)
    } else {
        Some(Action::Update)
    };
    Diff {
        action,
        changes,
        content: None,
    }
}

/// Whether a package needs an apt-get install to match the declaration
/// (missing, unfinished, or at another version).
fn needs_install(spec: &PackageSpec, record: Option<&PackageRecord>) -> bool {
    if !spec.state.wants_installed() {
        return false;
    }
    let Some(record) = record else {
        return true;
    };
    if record.state != DpkgState::Installed {
        return true;
    }
    match (&spec.version, &record.version) {
        (Some(want), Some(have)) => !want.matches(have),
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// The `apt-get install` argument for a declaration.
fn pin(spec: &PackageSpec) -> String {
    match &spec.version {
        Some(version) => version.apt_pin(&spec.name),
        None => spec.name.clone(),
    }
}

/// A Package's declaration as a pass holds it: what the manifest says, and
/// the packages declared absent beside it in the pass's batch, which its own
/// apply lets apt remove (a catalogue-wide fact one resource cannot see; the
/// batch writes it here, see [`Batches`]). Empty for a resource applied
/// without a batch: then apt may remove nothing else for it.
#[derive(Debug, Clone)]
pub struct PackageDeclared {
    pub spec: PackageSpec,
    pub absent_alongside: Arc<[String]>,
}

/// What [`install_batch`] did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct BatchOutcome {
    /// Each resource the transaction changed (`installed` and `removed`),
    /// observed as it was before: the engine diffs that, so the pass reports
    /// the change where it belongs.
    pub before: Vec<(ResourceId, Observed)>,
    /// Resources whose packages the transaction installed, upgraded or
    /// downgraded. Their own apply finds nothing to do; their observe
    /// reports the package as it was before, so the pass shows the change.
    pub installed: Vec<ResourceId>,
    /// Resources declared absent whose packages the transaction removed
    /// because an installed package replaced them (a conflicting flavour).
    /// Reported like `installed`.
    pub removed: Vec<ResourceId>,
    /// `apt-get install` runs made (0 when nothing needed installing; 2 when
    /// the first failed on packages apt does not know and was retried
    /// without them).
    pub transactions: usize,
    /// Resources left to their own apply, with why: apt did not know the
    /// package (their apply fails with apt's message), the transaction failed
    /// as a whole, or they depend on something that is not a Package.
    pub left: Vec<(ResourceId, String)>,
}

/// Installs, in one apt transaction, every Package in `resources` that needs
/// installing (missing, unfinished, or at another version; versions pinned
/// with `name=version`). Call it in apply mode before the per-resource loop,
/// with every Package resource of the catalogue (others are ignored).
///
/// Only packages whose `requires` are all Packages in the batch take part:
/// one that needs a File first (an apt source, a preseed) is left to its own
/// apply, in graph order. When apt refuses the transaction because it does
/// not know some packages (or versions), it is retried once without them
/// and the resources that require them; those fail in their own apply,
/// naming the package and quoting apt. Any other failure leaves every
/// package to its own apply, so one bad package never stops the rest.
///
/// Returns an error only when the database cannot be read or the host is
/// not the running system.
pub fn install_batch(host: &Host, resources: &[&Resource]) -> Result<BatchOutcome, PackageError> {
    let mut invalid = Vec::new();
    let mut parsed: Vec<(&Resource, PackageSpec)> = Vec::new();
    for resource in resources.iter().filter(|r| r.id.kind == KIND) {
        match PackageSpec::parse(&resource.desired, &resource.id.name) {
            Ok(spec) => parsed.push((resource, spec)),
            Err(_) => invalid.push((resource.id.clone(), "invalid declaration".to_owned())),
        }
    }
    let specs: Vec<(&Resource, &PackageSpec)> = parsed.iter().map(|(r, s)| (*r, s)).collect();
    let mut outcome = install_specs(host, &specs)?;
    outcome.left.splice(0..0, invalid);
    Ok(outcome)
}

/// [`install_batch`] for declarations already parsed (what the engine
/// hands the [`Batches`] capability).
pub fn install_specs(
    host: &Host,
    specs: &[(&Resource, &PackageSpec)],
) -> Result<BatchOutcome, PackageError> {
    let mut outcome = BatchOutcome::default();
    let absent_names = absent_alongside(specs.iter().map(|(_, spec)| *spec));

    // Resources whose requirements are all batchable Packages, to a fixpoint.
    let mut eligible: BTreeSet<ResourceId> = specs.iter().map(|(r, _)| r.id.clone()).collect();
    loop {
        let before = eligible.len();
        for (resource, _) in specs {
            if resource.requires.iter().any(|dep| !eligible.contains(dep)) {
                eligible.remove(&resource.id);
            }
        }
        if eligible.len() == before {
            break;
        }
    }
    for (resource, _) in specs {
        if !eligible.contains(&resource.id) {
            outcome.left.push((
                resource.id.clone(),
                "requires something applied in graph order".to_owned(),
            ));
        }
    }

    let Some((first, _)) = specs.first() else {
        return Ok(outcome);
    };
    let db = status::load(host).map_err(|source| PackageError::Status {
        package: first.id.name.clone(),
        source,
    })?;
    let mut pending: Vec<(&Resource, &PackageSpec, Observed, bool)> = specs
        .iter()
        .filter(|(r, _)| eligible.contains(&r.id))
        .filter_map(|(r, spec)| {
            let record = db.get(&spec.name);
            needs_install(spec, record).then(|| {
                let held = record.is_some_and(PackageRecord::is_held);
                (*r, *spec, observation(&spec.name, record), held)
            })
        })
        .collect();
    // Packages declared absent that are installed now: the transaction may
    // remove them (a conflicting flavour being replaced), and if it does,
    // their resources report the removal like the installs.
    let absent_before: Vec<(&Resource, &PackageSpec, Observed)> = specs
        .iter()
        .filter(|(_, spec)| spec.state == Wanted::Absent)
        .filter_map(|(r, spec)| {
            let record = db.get(&spec.name);
            record
                .is_some_and(|rec| !rec.state.is_absent())
                .then(|| (*r, *spec, observation(&spec.name, record)))
        })
        .collect();
    // Names dpkg has no record of that apt knows only as virtual packages:
    // apt-get would install a provider in their place. Left out, with what
    // requires them, for their own apply to refuse.
    let unrecorded: Vec<String> = pending
        .iter()
        .filter(|(_, spec, _, _)| db.get(&spec.name).is_none())
        .map(|(_, spec, _, _)| spec.name.clone())
        .collect();
    drop(db);
    if pending.is_empty() {
        return Ok(outcome);
    }
    apt::ensure_running_system(host, &pending[0].1.name)?;
    let virtual_names: Vec<String> = apt::purely_virtual(host, &unrecorded)?
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    if !virtual_names.is_empty() {
        let named: BTreeSet<ResourceId> = pending
            .iter()
            .filter(|(_, spec, _, _)| virtual_names.contains(&spec.name))
            .map(|(r, _, _, _)| r.id.clone())
            .collect();
        leave_out(
            &mut pending,
            named,
            "a virtual package's name (or something it requires)",
            &mut outcome,
        );
        if pending.is_empty() {
            return Ok(outcome);
        }
    }

    loop {
        let pins: Vec<String> = pending.iter().map(|(_, spec, _, _)| pin(spec)).collect();
        let allow_held = pending.iter().any(|(_, _, _, held)| *held);
        outcome.transactions += 1;
        let installed = apt::install(&pins, allow_held, &absent_names);
        // Maintainer scripts add system users and groups (postgresql's
        // `postgres`): a File owned by one, later in the pass, must find it.
        // Dropped whatever apt said, since a failed transaction may have run
        // some of them.
        crate::common::account_files::changed(host);
        match installed {
            Ok(()) => {
                let db = status::load(host).map_err(|source| PackageError::Status {
                    package: first.id.name.clone(),
                    source,
                })?;
                for (resource, _, observed, _) in pending {
                    outcome.before.push((resource.id.clone(), observed));
                    outcome.installed.push(resource.id.clone());
                }
                for (resource, spec, observed) in absent_before {
                    if db.get(&spec.name).is_none_or(|r| r.state.is_absent()) {
                        outcome.before.push((resource.id.clone(), observed));
                        outcome.removed.push(resource.id.clone());
                    }
                }
                return Ok(outcome);
            }
            Err(failure) => {
                let unknown = failure.unknown_packages();
                let is_unknown = |spec: &PackageSpec| {
                    unknown
                        .iter()
                        .any(|n| n == &spec.name || n == spec.bare_name())
                };
                let culprits: Vec<ResourceId> = pending
                    .iter()
                    .filter(|(_, spec, _, _)| is_unknown(spec))
                    .map(|(r, _, _, _)| r.id.clone())
                    .collect();
                let retry = outcome.transactions == 1
                    && !culprits.is_empty()
                    && culprits.len() < pending.len();
                if !retry {
                    let why = format!(
                        "the shared transaction failed: {}",
                        failure.lines.join(" / ")
                    );
                    for (resource, _, _, _) in pending {
                        outcome.left.push((resource.id.clone(), why.clone()));
                    }
                    return Ok(outcome);
                }
                // Drop the unknown ones and whatever requires them.
                leave_out(
                    &mut pending,
                    culprits.into_iter().collect(),
                    "apt does not know it (or something it requires)",
                    &mut outcome,
                );
            }
        }
    }
}

/// Takes out of `pending` the resources named in `dropped` and, to a
/// fixpoint, every one that requires one taken out, each left in `outcome`
/// with `why` (its own apply says the rest).
fn leave_out(
    pending: &mut Vec<(&Resource, &PackageSpec, Observed, bool)>,
    mut dropped: BTreeSet<ResourceId>,
    why: &str,
    outcome: &mut BatchOutcome,
) {
    loop {
        let before = dropped.len();
        for (resource, _, _, _) in pending.iter() {
            if resource.requires.iter().any(|d| dropped.contains(d)) {
                dropped.insert(resource.id.clone());
            }
        }
        if dropped.len() == before {
            break;
        }
    }
    pending.retain(|(resource, _, _, _)| {
        if dropped.contains(&resource.id) {
            outcome.left.push((resource.id.clone(), why.to_owned()));
            false
        } else {
            true
        }
    });
}

/// The names of the packages declared absent among `specs`: what apt may
/// remove while it applies any one of them.
fn absent_alongside<'s>(specs: impl Iterator<Item = &'s PackageSpec>) -> Vec<String> {
    specs
        .filter(|spec| spec.state == Wanted::Absent)
        .map(|spec| spec.name.clone())
        .collect()
}

/// Makes the package match the declaration, acting on a fresh reading;
/// apt may remove `absent_alongside` (packages declared absent) beside it,
/// nothing else.
fn converge(
    host: &Host,
    spec: &PackageSpec,
    absent_alongside: &[String],
) -> Result<(), PackageError> {
    let status_error = |source| PackageError::Status {
        package: spec.name.clone(),
        source,
    };
    let db = status::load(host).map_err(status_error)?;
    let record = db.get(&spec.name).cloned();
    drop(db);
    let held = record.as_ref().is_some_and(PackageRecord::is_held);
    match spec.state {
        Wanted::Absent => {
            if record.as_ref().is_some_and(|r| !r.state.is_absent()) {
                apt::ensure_running_system(host, &spec.name)?;
                let removed = apt::remove(host, &spec.name, absent_alongside, held);
                // Its maintainer scripts may have removed accounts.
                crate::common::account_files::changed(host);
                removed?;
            }
        }
        Wanted::Installed | Wanted::Held => {
            if needs_install(spec, record.as_ref()) {
                apt::ensure_running_system(host, &spec.name)?;
                if record.is_none() {
                    refuse_virtual(host, &spec.name)?;
                }
                let pins = [pin(spec)];
                let installed = apt::install(&pins, held, absent_alongside);
                // As after the batch's transaction (`apply_batch`).
                crate::common::account_files::changed(host);
                installed.map_err(|failure| {
                    if failure.wanted_removals() {
                        let others = apt::removals_for_install(&pins);
                        if !others.is_empty() {
                            return PackageError::WouldRemoveOthers {
                                verb: "installing",
                                package: spec.name.clone(),
                                host: host.name().to_owned(),
                                others,
                            };
                        }
                    }
                    failure.into_error(host, &spec.name)
                })?;
                // apt said yes: the package is there, unless apt read the
                // name as a virtual package's and installed its provider.
                let now = status::load(host).map_err(status_error)?;
                if now.get(&spec.name).is_none_or(|r| r.state.is_absent()) {
                    return Err(PackageError::NotInstalledByName {
                        package: spec.name.clone(),
                        host: host.name().to_owned(),
                    });
                }
            }
            if spec.state == Wanted::Held {
                let now = status::load(host).map_err(status_error)?;
                if !now.get(&spec.name).is_some_and(PackageRecord::is_held) {
                    apt::ensure_running_system(host, &spec.name)?;
                    apt::mark(host, apt::Mark::Hold, &spec.name)?;
                }
            }
        }
    }
    Ok(())
}

/// Refuses a name apt knows only as a virtual package (see
/// [`apt::purely_virtual`]); asked only for a name dpkg has no record of.
fn refuse_virtual(host: &Host, package: &str) -> Result<(), PackageError> {
    let names = [package.to_owned()];
    match apt::purely_virtual(host, &names)?.into_iter().next() {
        Some((package, providers)) => Err(PackageError::Virtual {
            package,
            host: host.name().to_owned(),
            providers,
        }),
        None => Ok(()),
    }
}

/// The database problems that concern a verified package: its own record
/// unfinished or flagged for reinstallation, and anything `dpkg --audit`
/// reports.
fn consistency_problems(host: &Host, spec: &PackageSpec) -> Result<Vec<String>, PackageError> {
    let mut problems = Vec::new();
    let db = status::load(host).map_err(|source| PackageError::Status {
        package: spec.name.clone(),
        source,
    })?;
    if let Some(record) = db.get(&spec.name) {
        if record.state.is_unfinished() {
            problems.push(format!("{} is {}", record.name, record.state.word()));
        }
        if record.flag == "reinstreq" {
            problems.push(format!("{} needs to be reinstalled", record.name));
        }
    }
    drop(db);
    problems.extend(apt::audit(host, &spec.name)?.iter().cloned());
    Ok(problems)
}

/// Every Package the pass may change is installed in one apt transaction
/// (see [`install_batch`]).
impl Batches for PackageProvider {
    fn apply_batch(&self, host: &Host, declared: &mut [&mut Declared<'_>]) -> Batched {
        let absent: Arc<[String]> = absent_alongside(
            declared
                .iter()
                .filter_map(|d| crate::kind::declaration::<Self>(d).ok())
                .map(|d| &d.spec),
        )
        .into();
        for d in declared.iter_mut() {
            if let Ok(d) = crate::kind::declaration_mut::<Self>(d) {
                d.absent_alongside = absent.clone();
            }
        }
        let specs: Vec<(&Resource, &PackageSpec)> = declared
            .iter()
            .filter_map(|d| Some((d.resource, &crate::kind::declaration::<Self>(d).ok()?.spec)))
            .collect();
        // A failure here is each resource's own apply's to report.
        install_specs(host, &specs)
            .map(|outcome| Batched {
                before: outcome.before,
            })
            .unwrap_or_default()
    }
}

/// A resource whose validator's program a declared Package provides runs
/// after that Package (see [`edges`]).
impl OrdersOthers for PackageProvider {
    fn edges(&self, resources: &[Resource]) -> Vec<OrderingEdge> {
        implicit_edges(resources)
            .into_iter()
            .map(|(from, after)| OrderingEdge { from, after })
            .collect()
    }

    fn warnings(&self, resources: &[Resource]) -> Vec<(ResourceId, String)> {
        missing_validator_packages(resources)
            .into_iter()
            .map(|missing| {
                let message = format!(
                    "validator {} needs a binary from a package, and no Package provides it; declare Package[{}] (and the file will be ordered after it)",
                    missing.validator, missing.package
                );
                (missing.resource, message)
            })
            .collect()
    }
}

impl Kind for PackageProvider {
    const KIND: &'static str = KIND;
    type Declaration = PackageDeclared;
    type Written = desired::PackageDeclaration;
    type Staging = Planned;

    fn declare(&self, resource: &Resource) -> Result<PackageDeclared, ProviderError> {
        Ok(PackageDeclared {
            spec: spec(resource)?,
            absent_alongside: Arc::from([]),
        })
    }

    fn check_fields(&self, desired: &Value) -> Result<(), Vec<FieldError>> {
        // The resource name stands in for `name:` when that is absent; it is
        // not known here, so a valid placeholder keeps the other checks going
        // and the name itself is checked by `check_resource_name`.
        PackageSpec::parse(desired, "placeholder").map(drop)
    }

    fn observe(
        &self,
        host: &Host,
        _resource: &Resource,
        d: &PackageDeclared,
    ) -> Result<Observed, ProviderError> {
        Ok(observe_fresh(host, &d.spec)?)
    }

    fn plan(&self, _resource: &Resource, d: &PackageDeclared, observed: &Observed) -> Diff {
        diff_spec(&d.spec, observed)
    }

    /// The package as dpkg names it, `name:architecture` (the record's
    /// architecture, or the one apt would install it for): `foo` and
    /// `foo:amd64` are one package on an amd64 host, which two Packages
    /// would install and remove in turn. `None` when no architecture is
    /// known.
    fn observed_identity(&self, observed: &Observed) -> Option<String> {
        let name = observed.fields.get("name")?.as_str()?;
        let arch = observed.fields.get("architecture")?.as_str()?;
        Some(format!("package {}:{arch}", apt::bare(name)))
    }

    /// Every change, while dpkg's journal holds an unfinished run: apt-get
    /// refuses to start, and nothing in a pass finishes it (Datum never
    /// runs `dpkg --configure -a`, which runs whatever maintainer scripts
    /// are pending: the operator's call).
    fn refuses(&self, _d: &PackageDeclared, observed: &Observed) -> Option<String> {
        (observed.fields.get("dpkg") == Some(&json!(DPKG_INTERRUPTED))).then(|| {
            format!(
                "dpkg was interrupted (its journal in {} is not empty): apt-get installs and removes nothing until `dpkg --configure -a` has finished what it started",
                status::UPDATES_DIR
            )
        })
    }

    fn stage(
        &self,
        _host: &Host,
        _resource: &Resource,
        _d: &PackageDeclared,
        observed: &Observed,
        diff: &Diff,
    ) -> Result<Planned, ProviderError> {
        Ok(planned(observed, diff))
    }

    fn activate(
        &self,
        host: &Host,
        _resource: &Resource,
        d: &PackageDeclared,
        _staging: Planned,
    ) -> Result<Activated<Planned>, ProviderError> {
        converge(host, &d.spec, &d.absent_alongside)?;
        Ok(Activated::Done)
    }

    /// Reads the database afresh, compares the
    /// fields, and, when they match, requires a consistent database: an
    /// error naming what dpkg left unfinished otherwise.
    fn verify(
        &self,
        host: &Host,
        _resource: &Resource,
        d: &PackageDeclared,
    ) -> Result<(Observed, Diff), ProviderError> {
        let spec = &d.spec;
        let observed = observe_fresh(host, spec)?;
        let diff = diff_spec(spec, &observed);
        if diff.is_empty() && spec.state.wants_installed() {
            let problems = consistency_problems(host, spec)?;
            if !problems.is_empty() {
                return Err(PackageError::Inconsistent {
                    package: spec.name.clone(),
                    host: host.name().to_owned(),
                    problems,
                }
                .into());
            }
        }
        Ok((observed, diff))
    }
}

impl Capabilities for PackageProvider {
    /// apt-get installs a package whole: nothing is staged for a validator
    /// (the catalogue refuses `validate:` here rather than ignore it).
    fn takes_validator(&self) -> bool {
        false
    }

    fn batching(&self) -> Option<&dyn Batches> {
        Some(self)
    }

    fn ordering(&self) -> Option<&dyn OrdersOthers> {
        Some(self)
    }

    fn extra_findings(&self) -> Option<&dyn crate::provider::ExtraFindings> {
        Some(self)
    }

    /// The package (`name:`, else the resource's name, as written): two
    /// Packages of one name would install and remove it in turn.
    fn exclusive_claims(&self, field: FieldLookup<'_, '_>, name: &str) -> Vec<Exclusive> {
        let package = match field("name") {
            Some(v) => v.as_str().unwrap_or_default(),
            None => name,
        };
        if package.is_empty() {
            return Vec::new();
        }
        vec![Exclusive {
            field: "name",
            key: format!("package {package}"),
            shown: format!("package `{package}`"),
        }]
    }

    /// The resource's name when `name:` is not written: the package's name.
    fn check_resource_name(&self, field: FieldLookup<'_, '_>, name: &str) -> Option<String> {
        crate::common::fields::name_as_field(field, name, "package", desired::check_name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Provider;
    use std::path::Path;

    fn resource(name: &str, desired: Value) -> Resource {
        Resource {
            origin: Default::default(),
            ..Resource::new(ResourceId::new("Package", name), desired)
        }
    }

    const STATUS: &str = "\
Package: demo
Status: install ok installed
Architecture: all
Version: 1.0-1

Package: pinned
Status: hold ok installed
Architecture: amd64
Version: 1:2.5-3

Package: leftover
Status: deinstall ok config-files
Architecture: all
Version: 0.1

Package: broken
Status: install ok half-configured
Architecture: all
Version: 3.0
";

    fn root() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("var/lib/dpkg");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("status"), STATUS).unwrap();
        root
    }

    fn diff_for(host: &Host, name: &str, desired: Value) -> Diff {
        let r = resource(name, desired);
        let observed = Provider::observe(&PackageProvider, host, &r).unwrap();
        crate::testing::diff(&PackageProvider, &r, &observed)
    }

    #[test]
    fn observation_reads_state_version_and_hold() {
        let root = root();
        let host = Host::with_name(root.path(), "h");
        let p = PackageProvider;
        let o = Provider::observe(&p, &host, &resource("pinned", json!({}))).unwrap();
        assert_eq!(o.presence, Presence::Present);
        assert_eq!(o.fields["state"], json!("held"));
        assert_eq!(o.fields["version"], json!("1:2.5-3"));
        assert_eq!(o.fields["held"], json!(true));
        assert_eq!(o.fields["status"], json!("hold ok installed"));
        let o = Provider::observe(&p, &host, &resource("leftover", json!({}))).unwrap();
        assert_eq!(o.presence, Presence::Absent);
        assert_eq!(o.fields["state"], json!("absent"));
        assert_eq!(o.fields["version"], Value::Null);
        let o = Provider::observe(&p, &host, &resource("nosuch", json!({}))).unwrap();
        assert_eq!(o.presence, Presence::Absent);
        assert!(!o.fields.contains_key("status"));
        let o = Provider::observe(&p, &host, &resource("broken", json!({}))).unwrap();
        assert_eq!(o.fields["state"], json!("half-configured"));
        // One parse for every observation of the pass.
        assert_eq!(host.pass_cache::<status::StatusCache>().parses(), 1);
    }

    /// What one Package's own apply must know of the others (the packages
    /// declared absent, which apt may remove for it) travels in its
    /// declaration, written there by the batch: no per-pass cache.
    #[test]
    fn the_batch_tells_each_declaration_which_packages_are_declared_absent() {
        let root = root();
        let host = Host::with_name(root.path(), "h");
        let resources = [
            resource("demo", json!({})),
            resource("leftover", json!({"state": "absent"})),
            resource("gone", json!({"name": "nosuch", "state": "absent"})),
        ];
        let mut declared: Vec<Declared<'_>> = resources
            .iter()
            .map(|r| Provider::declare(&PackageProvider, r).unwrap())
            .collect();
        let absent = |d: &Declared<'_>| -> Vec<String> {
            crate::kind::declaration::<PackageProvider>(d)
                .unwrap()
                .absent_alongside
                .to_vec()
        };
        assert!(absent(&declared[0]).is_empty(), "nothing before the batch");
        let mut members: Vec<&mut Declared<'_>> = declared.iter_mut().collect();
        // Everything is as declared: no transaction (apt is never run here).
        let batched = Batches::apply_batch(&PackageProvider, &host, &mut members);
        assert!(batched.before.is_empty());
        for d in &declared {
            assert_eq!(absent(d), ["leftover", "nosuch"], "{}", d.resource.id);
        }
    }

    /// The batch's note is the pass's: it goes to the pass's own copy of
    /// each declaration, never into the one the resource holds for every
    /// pass (the agent's next pass over the same catalogue, declared
    /// again from it, starts without it, and a pass over part of the
    /// catalogue learns only of its own members).
    #[test]
    fn the_batchs_note_is_not_kept_in_the_declaration_the_resource_holds() {
        let root = root();
        let host = Host::with_name(root.path(), "h");
        // Resources of a catalogue that holds declarations (the agent's).
        let held = |name: &str, desired: Value| {
            let mut r = Resource {
                declaration_hash: format!("hash-{name}"),
                ..resource(name, desired)
            };
            r.held.start_holding();
            r
        };
        let resources = [
            held("demo", json!({})),
            held("leftover", json!({"state": "absent"})),
        ];
        let absent = |d: &Declared<'_>| -> Vec<String> {
            crate::kind::declaration::<PackageProvider>(d)
                .unwrap()
                .absent_alongside
                .to_vec()
        };
        let pass = |members: &[&Resource]| -> Vec<Vec<String>> {
            let mut declared: Vec<Declared<'_>> = members
                .iter()
                .map(|r| Provider::declare(&PackageProvider, r).unwrap())
                .collect();
            let before: Vec<Vec<String>> = declared.iter().map(absent).collect();
            assert!(
                before.iter().all(Vec::is_empty),
                "before the batch: {before:?}"
            );
            let mut batch: Vec<&mut Declared<'_>> = declared.iter_mut().collect();
            Batches::apply_batch(&PackageProvider, &host, &mut batch);
            declared.iter().map(absent).collect()
        };
        assert_eq!(
            pass(&[&resources[0], &resources[1]]),
            [["leftover"], ["leftover"]]
        );
        assert!(
            resources
                .iter()
                .all(|r| r.held.is_held(&r.declaration_hash))
        );
        // The next pass, over `demo` alone: no note of the first pass's.
        assert_eq!(pass(&[&resources[0]]), [Vec::<String>::new()]);
    }

    #[test]
    fn matching_declarations_have_no_diff() {
        let root = root();
        let host = Host::with_name(root.path(), "h");
        assert!(diff_for(&host, "demo", json!({})).is_empty());
        assert!(diff_for(&host, "demo", json!({"version": "1.0-1"})).is_empty());
        assert!(diff_for(&host, "demo", json!({"version": "1.*"})).is_empty());
        assert!(diff_for(&host, "pinned", json!({"state": "installed"})).is_empty());
        assert!(
            diff_for(
                &host,
                "pinned",
                json!({"state": "held", "version": "1:2.5-*"})
            )
            .is_empty()
        );
        // The epoch is part of the version.
        assert!(!diff_for(&host, "pinned", json!({"version": "2.5-*"})).is_empty());
        assert!(diff_for(&host, "leftover", json!({"state": "absent"})).is_empty());
        assert!(diff_for(&host, "nosuch", json!({"state": "absent"})).is_empty());
    }

    #[test]
    fn differences_are_fields_with_the_right_action() {
        let root = root();
        let host = Host::with_name(root.path(), "h");
        let d = diff_for(&host, "demo", json!({"version": "1.1-1"}));
        assert_eq!(d.action(), Action::Update);
        assert_eq!(d.changed_fields(), ["version"]);
        assert_eq!(d.changes[0].before, Some(json!("1.0-1")));
        assert_eq!(d.changes[0].after, Some(json!("1.1-1")));

        let d = diff_for(&host, "nosuch", json!({"version": "2.*"}));
        assert_eq!(d.action(), Action::Create);
        assert_eq!(d.changed_fields(), ["state", "version"]);
        assert_eq!(d.changes[0].before, Some(json!("absent")));
        assert_eq!(d.changes[1].before, None);
        assert_eq!(d.changes[1].after, Some(json!("2.*")));

        let d = diff_for(&host, "demo", json!({"state": "absent"}));
        assert_eq!(d.action(), Action::Remove);
        let d = diff_for(&host, "demo", json!({"state": "held"}));
        assert_eq!(d.action(), Action::Update);
        assert_eq!(d.changes[0].before, Some(json!("installed")));
        let d = diff_for(&host, "broken", json!({}));
        assert_eq!(d.changed_fields(), ["state"]);
        assert_eq!(d.changes[0].before, Some(json!("half-configured")));
    }

    #[test]
    fn what_needs_an_install() {
        let db = StatusDb::parse(STATUS, Path::new("/s")).unwrap();
        let spec = |d: Value| PackageSpec::parse(&d, "x").unwrap();
        assert!(!needs_install(
            &spec(json!({"name": "demo"})),
            db.get("demo")
        ));
        assert!(needs_install(
            &spec(json!({"name": "demo", "version": "2"})),
            db.get("demo")
        ));
        assert!(needs_install(
            &spec(json!({"name": "broken"})),
            db.get("broken")
        ));
        assert!(needs_install(
            &spec(json!({"name": "leftover"})),
            db.get("leftover")
        ));
        assert!(!needs_install(
            &spec(json!({"name": "demo", "state": "absent"})),
            db.get("demo")
        ));
        assert!(!needs_install(
            &spec(json!({"name": "pinned", "state": "held"})),
            db.get("pinned")
        ));
        assert_eq!(
            pin(&spec(json!({"name": "demo", "version": "1.*"}))),
            "demo=1.*"
        );
        assert_eq!(pin(&spec(json!({"name": "demo"}))), "demo");
    }

    #[test]
    fn nothing_is_installed_under_another_root() {
        let root = root();
        let host = Host::with_name(root.path(), "h");
        let r = resource("nosuch", json!({}));
        let observed = Provider::observe(&PackageProvider, &host, &r).unwrap();
        let diff = crate::testing::diff(&PackageProvider, &r, &observed);
        let err = PackageProvider
            .apply(&host, &r, &observed, &diff, &mut crate::OpenGate)
            .unwrap_err();
        assert!(
            err.to_string().contains("only on the running system"),
            "{err}"
        );
        // The batch says the same, and ignores other kinds.
        let file = Resource {
            id: ResourceId::new("File", "x"),
            ..resource("x", json!({}))
        };
        let err = install_batch(&host, &[&r, &file]).unwrap_err();
        assert!(
            matches!(err, PackageError::NotRunningSystem { .. }),
            "{err}"
        );
        // A catalogue with nothing to install is fine anywhere.
        let ok = resource("demo", json!({}));
        let outcome = install_batch(&host, &[&ok, &file]).unwrap();
        assert_eq!(outcome, BatchOutcome::default());
    }

    #[test]
    fn batch_leaves_packages_that_require_non_packages_to_their_own_apply() {
        let root = root();
        let host = Host::with_name(root.path(), "h");
        let mut needs_source = resource("from-repo", json!({}));
        needs_source.requires = vec![ResourceId::new("File", "apt-source")];
        let mut chained = resource("chained", json!({}));
        chained.requires = vec![ResourceId::new("Package", "from-repo")];
        let outcome = install_batch(&host, &[&needs_source, &chained]).unwrap();
        let left: Vec<&str> = outcome
            .left
            .iter()
            .map(|(id, _)| id.name.as_str())
            .collect();
        assert_eq!(left, ["from-repo", "chained"]);
        assert_eq!(outcome.transactions, 0);
    }

    #[test]
    fn check_reports_field_errors_without_a_host() {
        let p = PackageProvider;
        assert!(p.check(&json!({"state": "installed"})).is_ok());
        assert!(p.check(&json!({})).is_ok());
        let errors = p
            .check(&json!({"name": "Bad Name", "state": "latest"}))
            .unwrap_err();
        assert_eq!(errors.len(), 2);
        let r = resource("Not_A_Package", json!({}));
        assert!(matches!(spec(&r), Err(ProviderError::Invalid { field, .. }) if field == "name"));
    }
}
