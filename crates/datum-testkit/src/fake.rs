//! Fake resource types for engine tests: a [`Registry`] of kinds the engine
//! has never heard of, so a test of a safety rule shows that the rule is the
//! engine's (it holds for any kind) and not something a shipped provider
//! happens to do.
//!
//! - [`FakeFile`] (`FakeFile[name]`) owns one real file under the host's
//!   root: `desired.path`, content from `Resource::content`. It stages
//!   through `datum_providers::file::StagedContent`, so the engine's
//!   validator and evidence see a real staged copy, and the live file a
//!   test reads back is real. It owns its path (the paths capability), so
//!   evidence and staging sweeps reach it. With `desired.also` (path ->
//!   text) its change has further parts, each staged after the one before
//!   went live and handed back to the engine (`Activated::Next`), as a
//!   Tree's entries are.
//! - [`FakeUnit`] (`FakeUnit[name]`) is in sync (unless
//!   [`Faults::leave_unconverged`] names it: then it reads as stopped where
//!   it is declared running) and is activated (the activation capability)
//!   when a resource it lists in `reload_on` or `restart_on` changes; it
//!   never touches the host.
//!
//! - [`FakeMount`] (`FakeMount[name]`, not among [`fake_providers`]: a
//!   test lists it) owns the host path it declares in `mountpoint`, a
//!   field not named `path`: whoever needs a resource's path asks its kind
//!   (`Registry::path_of`) and finds it; one reading the field `path`
//!   does not. It is always in sync and never touches the host.
//!
//! Both write what the engine asked of them to a shared [`Journal`]
//! (`observe FakeFile[a]`, `apply FakeFile[a]`, `reload FakeUnit[web]`), and
//! fail on demand ([`Faults`]): the test double stands in for "a resource
//! type", not for the host (the host is a real temporary root).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use datum_core::{
    Action, ContentChange, Diff, FieldChange, FileMeta, Observed, Presence, Resource, ResourceId,
};
use datum_host::Host;
use datum_providers::file::StagedContent;
use datum_providers::{
    Activated, Activates, Capabilities, Declared, FieldError, FieldLookup, Kind, OnChange,
    OwnsPaths, PathClaim, Planned, Provider, ProviderError, Registry, Staged,
};
use serde_json::{Value, json};

/// The kind names the fakes register under.
pub const FAKE_FILE: &str = "FakeFile";
pub const FAKE_UNIT: &str = "FakeUnit";
pub const FAKE_MOUNT: &str = "FakeMount";

/// What the engine asked of the fakes, in order, one line per call.
#[derive(Debug, Clone, Default)]
pub struct Journal(Arc<Mutex<Vec<String>>>);

impl Journal {
    fn push(&self, line: String) {
        self.0.lock().unwrap().push(line);
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// The lines that start with `verb ` (`apply`, `reload`, ...), without
    /// the verb.
    pub fn of(&self, verb: &str) -> Vec<String> {
        let prefix = format!("{verb} ");
        self.lines()
            .iter()
            .filter_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
            .collect()
    }

    pub fn clear(&self) {
        self.0.lock().unwrap().clear();
    }
}

/// Which calls fail, by resource id (`FakeFile[a]`), set by the test.
#[derive(Debug, Clone, Default)]
pub struct Faults(Arc<Mutex<FaultSet>>);

#[derive(Debug, Default)]
struct FaultSet {
    observe: BTreeSet<String>,
    apply: BTreeSet<String>,
    /// Verify reports the content still differs.
    unconverged: BTreeSet<String>,
    activate: BTreeSet<String>,
    /// What `FakeUnit`'s extra findings capability reports.
    extra: Vec<datum_providers::ExtraFinding>,
    /// Whether reading them fails.
    extra_unreadable: bool,
}

impl Faults {
    pub fn fail_observe(&self, id: &str) {
        self.0.lock().unwrap().observe.insert(id.to_owned());
    }
    pub fn fail_apply(&self, id: &str) {
        self.0.lock().unwrap().apply.insert(id.to_owned());
    }
    /// A `FakeFile`'s verify reports its content still differs; a
    /// `FakeUnit` is observed not as declared (stopped).
    pub fn leave_unconverged(&self, id: &str) {
        self.0.lock().unwrap().unconverged.insert(id.to_owned());
    }
    pub fn fail_activate(&self, id: &str) {
        self.0.lock().unwrap().activate.insert(id.to_owned());
    }
    /// A check asks `FakeUnit`'s extra findings capability and gets this
    /// (when `finding.owner` is one of the units it asks about).
    pub fn report_extra(&self, finding: datum_providers::ExtraFinding) {
        self.0.lock().unwrap().extra.push(finding);
    }
    /// The extra findings cannot be read (like a damaged package database).
    pub fn fail_extra(&self) {
        self.0.lock().unwrap().extra_unreadable = true;
    }
    pub fn clear(&self) {
        *self.0.lock().unwrap() = FaultSet::default();
    }
    fn has(&self, which: fn(&FaultSet) -> &BTreeSet<String>, id: &ResourceId) -> bool {
        which(&self.0.lock().unwrap()).contains(&id.to_string())
    }
}

/// A registry of the two fakes sharing one journal and one fault set.
pub fn fake_registry() -> (Registry, Journal, Faults) {
    let (providers, journal, faults) = fake_providers();
    (Registry::new(providers), journal, faults)
}

/// The two fakes, to list in a registry beside other providers.
pub fn fake_providers() -> (Vec<Box<dyn Provider>>, Journal, Faults) {
    let journal = Journal::default();
    let faults = Faults::default();
    let providers: Vec<Box<dyn Provider>> = vec![
        Box::new(FakeFile {
            journal: journal.clone(),
            faults: faults.clone(),
        }),
        Box::new(FakeUnit {
            journal: journal.clone(),
            faults: faults.clone(),
        }),
    ];
    (providers, journal, faults)
}

/// A `FakeFile[name]` at `path` with `content`, requiring `requires`.
pub fn fake_file(name: &str, path: &str, content: &str, requires: &[ResourceId]) -> Resource {
    Resource {
        content: Some(datum_core::Content::new(content.as_bytes().to_vec())),
        requires: requires.to_vec(),
        ..Resource::new(ResourceId::new(FAKE_FILE, name), json!({ "path": path }))
    }
}

/// A `FakeUnit[name]` reloaded when any of `reload_on` changes.
pub fn fake_unit(name: &str, reload_on: &[ResourceId]) -> Resource {
    let list: Vec<String> = reload_on.iter().map(ToString::to_string).collect();
    Resource::new(
        ResourceId::new(FAKE_UNIT, name),
        json!({ "reload_on": list }),
    )
}

/// A `FakeMount[name]` whose path, `at`, is declared in `mountpoint`.
pub fn fake_mount(name: &str, at: &str) -> Resource {
    Resource::new(
        ResourceId::new(FAKE_MOUNT, name),
        json!({ "mountpoint": at }),
    )
}

/// A file under the root, with its content from the catalogue.
pub struct FakeFile {
    journal: Journal,
    faults: Faults,
}

/// A [`FakeFile`]'s declaration (`declare` in the journal each time it is
/// parsed: once for a resource the compiler or a loaded catalogue holds it
/// for, see `datum_core::HeldDeclaration`).
#[derive(Clone)]
pub struct FakeFileDeclared {
    id: ResourceId,
    path: PathBuf,
    bytes: Vec<u8>,
    sha256: Option<String>,
    /// `desired.also` (path -> text): further parts of the same change,
    /// written one at a time after `path`, each staged and handed back to
    /// the engine to judge (a change in several parts, like a Tree's).
    also: Vec<(PathBuf, Vec<u8>)>,
}

/// A [`FakeFile`]'s staged part, the resource it is for (for the journal),
/// and the parts still to write.
pub struct FakeStaging {
    staged: StagedContent,
    id: ResourceId,
    rest: Vec<(PathBuf, Vec<u8>)>,
}

fn declared_path(resource: &Resource) -> Result<PathBuf, ProviderError> {
    resource
        .desired_str("path")
        .map(PathBuf::from)
        .ok_or_else(|| ProviderError::Invalid {
            field: "path".to_owned(),
            message: "missing".to_owned(),
        })
}

fn injected(what: &str, id: &ResourceId) -> ProviderError {
    ProviderError::Invalid {
        field: "fault".to_owned(),
        message: format!("injected {what} failure of {id}"),
    }
}

impl Kind for FakeFile {
    const KIND: &'static str = FAKE_FILE;
    type Declaration = FakeFileDeclared;
    type Written = Value;
    type Staging = FakeStaging;

    fn check_fields(&self, desired: &Value) -> Result<(), Vec<FieldError>> {
        match desired.get("path").and_then(Value::as_str) {
            Some(_) => Ok(()),
            None => Err(vec![FieldError::new(&["path"], "`path` is required")]),
        }
    }

    fn declare(&self, resource: &Resource) -> Result<FakeFileDeclared, ProviderError> {
        self.journal.push(format!("declare {}", resource.id));
        Ok(FakeFileDeclared {
            id: resource.id.clone(),
            path: declared_path(resource)?,
            bytes: resource
                .content
                .as_ref()
                .map(|c| c.bytes.to_vec())
                .unwrap_or_default(),
            sha256: resource.content.as_ref().map(|c| c.sha256.clone()),
            also: resource
                .desired
                .get("also")
                .and_then(Value::as_object)
                .map(|parts| {
                    parts
                        .iter()
                        .map(|(path, text)| {
                            let text = text.as_str().unwrap_or_default();
                            (PathBuf::from(path), text.as_bytes().to_vec())
                        })
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    fn observe(
        &self,
        host: &Host,
        resource: &Resource,
        d: &FakeFileDeclared,
    ) -> Result<Observed, ProviderError> {
        self.journal.push(format!("observe {}", resource.id));
        if self.faults.has(|f| &f.observe, &resource.id) {
            return Err(injected("observe", &resource.id));
        }
        let Some(bytes) = host.read(&d.path)? else {
            return Ok(Observed::absent());
        };
        let sha256 = datum_core::sha256_hex(&bytes);
        let mut observed = Observed::absent();
        observed.presence = Presence::Present;
        observed
            .fields
            .insert("content_sha256".to_owned(), json!(sha256));
        observed.meta = Some(FileMeta {
            size: bytes.len() as u64,
            mode: 0o644,
            sha256: Some(sha256),
            ..FileMeta::default()
        });
        Ok(observed)
    }

    fn plan(&self, _resource: &Resource, d: &FakeFileDeclared, observed: &Observed) -> Diff {
        let Some(sha256) = &d.sha256 else {
            return Diff::default();
        };
        let live = observed.meta.as_ref().and_then(|m| m.sha256.clone());
        if live.as_deref() == Some(sha256.as_str()) {
            return Diff::default();
        }
        let action = match observed.presence {
            Presence::Absent => Action::Create,
            _ => Action::Update,
        };
        Diff {
            action: Some(action),
            changes: vec![FieldChange {
                field: "content_sha256".to_owned(),
                before: live.clone().map(Value::String),
                after: Some(json!(sha256)),
            }],
            content: Some(Box::new(ContentChange {
                before: None,
                after: d.bytes.clone(),
                before_sha256: live,
                after_sha256: sha256.clone(),
                live_withheld: false,
                declared_unread: false,
            })),
        }
    }

    fn stage(
        &self,
        host: &Host,
        _resource: &Resource,
        d: &FakeFileDeclared,
        _observed: &Observed,
        _diff: &Diff,
    ) -> Result<Self::Staging, ProviderError> {
        let id = d.id.clone();
        self.journal.push(format!("stage {id}"));
        if self.faults.has(|f| &f.apply, &id) {
            return Err(injected("apply", &id));
        }
        let at = host.locate(&d.path)?;
        let staged = StagedContent::write(host, &at, d.bytes.clone(), None, None, 0o644)?;
        Ok(FakeStaging {
            staged,
            id,
            rest: d.also.clone(),
        })
    }

    fn validation_target<'s>(&self, staging: &'s Self::Staging) -> Option<Staged<'s>> {
        Some(staging.staged.target())
    }

    fn activate(
        &self,
        host: &Host,
        resource: &Resource,
        _d: &FakeFileDeclared,
        staging: Self::Staging,
    ) -> Result<Activated<Self::Staging>, ProviderError> {
        let FakeStaging {
            staged,
            id,
            mut rest,
        } = staging;
        self.journal.push(format!("activate {}", resource.id));
        staged.commit(host)?;
        if rest.is_empty() {
            return Ok(Activated::Done);
        }
        let (path, bytes) = rest.remove(0);
        let at = host.locate(&path)?;
        let staged = StagedContent::write(host, &at, bytes, None, None, 0o644)?;
        Ok(Activated::Next(FakeStaging { staged, id, rest }))
    }

    fn discard(&self, staging: Self::Staging) {
        self.journal.push(format!("discard {}", staging.id));
        staging.staged.discard();
    }

    fn verify(
        &self,
        host: &Host,
        resource: &Resource,
        d: &FakeFileDeclared,
    ) -> Result<(Observed, Diff), ProviderError> {
        let observed = Kind::observe(self, host, resource, d)?;
        let mut diff = Kind::plan(self, resource, d, &observed);
        if self.faults.has(|f| &f.unconverged, &resource.id) {
            diff.action = Some(Action::Update);
            diff.changes.push(FieldChange {
                field: "content_sha256".to_owned(),
                before: None,
                after: None,
            });
        }
        Ok((observed, diff))
    }
}

impl Capabilities for FakeFile {
    fn takes_content(&self) -> bool {
        true
    }

    fn paths(&self) -> Option<&dyn OwnsPaths> {
        Some(self)
    }
}

impl OwnsPaths for FakeFile {
    fn claim<'a>(&self, field: FieldLookup<'_, 'a>) -> Option<PathClaim<'a>> {
        Some(PathClaim {
            field: "path",
            path: field("path")?.as_str()?,
            present: true,
            holds_children: false,
            links: false,
            link_target: None,
        })
    }

    fn managed_paths(&self, d: &Declared<'_>) -> Vec<PathBuf> {
        d.get::<FakeFileDeclared>()
            .map(|typed| vec![typed.path.clone()])
            .unwrap_or_default()
    }
}

/// Something reloaded when the resources it names change; always in sync.
pub struct FakeUnit {
    journal: Journal,
    faults: Faults,
}

impl Kind for FakeUnit {
    const KIND: &'static str = FAKE_UNIT;
    type Declaration = ();
    type Written = Value;
    type Staging = Planned;

    fn check_fields(&self, _desired: &Value) -> Result<(), Vec<FieldError>> {
        Ok(())
    }

    fn declare(&self, resource: &Resource) -> Result<(), ProviderError> {
        self.journal.push(format!("declare {}", resource.id));
        Ok(())
    }

    fn observe(
        &self,
        _host: &Host,
        resource: &Resource,
        _d: &(),
    ) -> Result<Observed, ProviderError> {
        self.journal.push(format!("observe {}", resource.id));
        let mut observed = Observed::absent();
        observed.presence = Presence::Present;
        Ok(observed)
    }

    fn plan(&self, resource: &Resource, _d: &(), _observed: &Observed) -> Diff {
        // Left unconverged (`Faults::leave_unconverged`): stopped where it
        // is declared running, as long as the fault holds.
        if self.faults.has(|f| &f.unconverged, &resource.id) {
            return Diff {
                action: Some(Action::Update),
                changes: vec![FieldChange {
                    field: "state".to_owned(),
                    before: Some(json!("stopped")),
                    after: Some(json!("running")),
                }],
                content: None,
            };
        }
        Diff::default()
    }

    fn stage(
        &self,
        _host: &Host,
        _resource: &Resource,
        _d: &(),
        observed: &Observed,
        diff: &Diff,
    ) -> Result<Planned, ProviderError> {
        Ok(Planned {
            observed: observed.clone(),
            diff: diff.clone(),
        })
    }

    fn activate(
        &self,
        _host: &Host,
        resource: &Resource,
        _d: &(),
        _staging: Planned,
    ) -> Result<Activated<Planned>, ProviderError> {
        self.journal.push(format!("activate {}", resource.id));
        Ok(Activated::Done)
    }
}

impl Capabilities for FakeUnit {
    fn takes_validator(&self) -> bool {
        false
    }

    fn activation(&self) -> Option<&dyn Activates> {
        Some(self)
    }

    fn extra_findings(&self) -> Option<&dyn datum_providers::ExtraFindings> {
        Some(self)
    }
}

impl Activates for FakeUnit {
    fn notified_by(&self, field: FieldLookup<'_, '_>) -> Vec<(ResourceId, OnChange)> {
        let mut out = Vec::new();
        for (name, how) in [
            ("reload_on", OnChange::Reload),
            ("restart_on", OnChange::Restart),
        ] {
            for text in field(name)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if let Ok(id) = ResourceId::parse(text) {
                    out.push((id, how));
                }
            }
        }
        out
    }

    fn activate(&self, _host: &Host, d: &Declared<'_>, how: OnChange) -> Result<(), ProviderError> {
        let resource = d.resource;
        self.journal.push(format!("{} {}", how.verb(), resource.id));
        if self.faults.has(|f| &f.activate, &resource.id) {
            return Err(injected(how.verb(), &resource.id));
        }
        Ok(())
    }

    fn subject(&self, resource: &Resource) -> String {
        format!("unit {}", resource.id.name)
    }
}

/// Reads a file under `root` (a test's view of the host).
pub fn read_live(root: &Path, declared: &str) -> Option<String> {
    std::fs::read_to_string(root.join(declared.trim_start_matches('/'))).ok()
}

/// `FakeUnit`'s extra findings: what the test set with
/// [`Faults::report_extra`], for the units asked about.
impl datum_providers::ExtraFindings for FakeUnit {
    fn findings(
        &self,
        _host: &Host,
        resources: &[&Resource],
    ) -> Result<Vec<datum_providers::ExtraFinding>, ProviderError> {
        let faults = self.faults.0.lock().unwrap();
        if faults.extra_unreadable {
            return Err(ProviderError::Invalid {
                field: "extra".to_owned(),
                message: "the fake's database is unreadable".to_owned(),
            });
        }
        Ok(faults
            .extra
            .iter()
            .filter(|f| resources.iter().any(|r| r.id == f.owner))
            .cloned()
            .collect())
    }
}

/// A kind whose one host path is declared in `mountpoint` (see the module
/// documentation); always in sync, it never touches the host.
#[derive(Debug, Default)]
pub struct FakeMount;

/// The field a [`FakeMount`] declares its path in.
const MOUNTPOINT: &str = "mountpoint";

impl Kind for FakeMount {
    const KIND: &'static str = FAKE_MOUNT;
    /// The declared mount point.
    type Declaration = PathBuf;
    type Written = Value;
    type Staging = Planned;

    fn check_fields(&self, desired: &Value) -> Result<(), Vec<FieldError>> {
        match desired.get(MOUNTPOINT).and_then(Value::as_str) {
            Some(_) => Ok(()),
            None => Err(vec![FieldError::new(
                &[MOUNTPOINT],
                "`mountpoint` is required",
            )]),
        }
    }

    fn declare(&self, resource: &Resource) -> Result<PathBuf, ProviderError> {
        resource
            .desired_str(MOUNTPOINT)
            .map(PathBuf::from)
            .ok_or_else(|| ProviderError::Invalid {
                field: MOUNTPOINT.to_owned(),
                message: "missing".to_owned(),
            })
    }

    fn observe(
        &self,
        _host: &Host,
        _resource: &Resource,
        _d: &PathBuf,
    ) -> Result<Observed, ProviderError> {
        let mut observed = Observed::absent();
        observed.presence = Presence::Present;
        Ok(observed)
    }

    fn plan(&self, _resource: &Resource, _d: &PathBuf, _observed: &Observed) -> Diff {
        Diff::default()
    }

    fn stage(
        &self,
        _host: &Host,
        _resource: &Resource,
        _d: &PathBuf,
        observed: &Observed,
        diff: &Diff,
    ) -> Result<Planned, ProviderError> {
        Ok(Planned {
            observed: observed.clone(),
            diff: diff.clone(),
        })
    }

    fn activate(
        &self,
        _host: &Host,
        _resource: &Resource,
        _d: &PathBuf,
        _staging: Planned,
    ) -> Result<Activated<Planned>, ProviderError> {
        Ok(Activated::Done)
    }
}

impl Capabilities for FakeMount {
    fn takes_validator(&self) -> bool {
        false
    }

    fn paths(&self) -> Option<&dyn OwnsPaths> {
        Some(self)
    }
}

impl OwnsPaths for FakeMount {
    fn claim<'a>(&self, field: FieldLookup<'_, 'a>) -> Option<PathClaim<'a>> {
        Some(PathClaim {
            field: MOUNTPOINT,
            path: field(MOUNTPOINT)?.as_str()?,
            present: true,
            holds_children: true,
            links: false,
            link_target: None,
        })
    }

    fn managed_paths(&self, d: &Declared<'_>) -> Vec<PathBuf> {
        d.get::<PathBuf>()
            .map(|at| vec![at.clone()])
            .unwrap_or_default()
    }
}
