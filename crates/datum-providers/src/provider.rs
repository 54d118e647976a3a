//! The contract every resource type implements.
//!
//! A provider turns a resource's declared fields into a typed declaration
//! (parsed once per pass, or, in the agent, once for every pass over its
//! catalogue: [`Provider::declare`]), observations of the host,
//! a plan, and changes, each step a separate call the engine drives:
//! `stage`, `validation_target`, then `activate` or `discard`, then
//! `verify`. Pure steps (`check`, `plan`) never touch the host, so they are
//! tested as plain functions. Safety rules (validator lookup, what to do
//! when validation fails, blocking dependents, hiding sensitive output) belong
//! to the engine, not here: a provider stages, says what to validate, and
//! makes live or discards what the engine tells it to (a kind that writes
//! entry by entry stages the next entry as it makes one live, and the
//! engine checks each: [`Activated::Next`]).
//!
//! One required trait, [`Provider`], and optional capabilities the engine and
//! the catalogue discover through it instead of matching kind names (in the
//! spirit of mgmt's optional resource interfaces), all declared once in
//! [`Capabilities`], the supertrait of both [`Provider`] and the typed
//! [`crate::Kind`]: a kind that owns host paths answers
//! [`Capabilities::paths`], one that orders other resources after itself
//! answers [`Capabilities::ordering`], one whose resources are applied
//! together answers [`Capabilities::batching`], one that is reloaded or
//! restarted when others change answers [`Capabilities::activation`], one
//! that carries a folder of the repository answers
//! [`Capabilities::source_folder`], and so on. Each accessor has a default
//! (`None`, `false`, nothing): a new kind implements only what it has, in
//! its `impl Capabilities`, and nothing above the providers names it. A new
//! capability is one method of [`Capabilities`] with its default; no impl
//! forwards it.

use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datum_core::{Content, Diff, Observed, Resource, ResourceId};
use datum_host::{Boundary, Host, HostError};
use serde_json::Value;

/// A problem with one declared field, found without touching the host.
/// `path` is the field path inside `desired` (`["mode"]`, `["ensure"]`), so the
/// manifest loader can point at the exact line; empty for the whole document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FieldError {
    pub path: Vec<String>,
    pub message: String,
}

impl FieldError {
    pub fn new(path: &[&str], message: impl Into<String>) -> Self {
        Self {
            path: path.iter().map(|s| (*s).to_owned()).collect(),
            message: message.into(),
        }
    }
}

/// Why the engine refused a staged copy (a validator said no, or could not run).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{summary}")]
pub struct GateRejection {
    /// One line for reports, e.g. `validation failed (sshd, exit 255)`.
    pub summary: String,
    /// Captured validator output, already bounded and already suppressed by the
    /// engine for sensitive resources.
    pub detail: Option<String>,
}

/// A change the apply refuses given what was observed, unless an earlier
/// change of the pass alters it first (see
/// [`Provider::refuses_unless_changed_first`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The apply's own error, with declared paths.
    pub why: String,
    /// Which earlier changes of a path may alter it.
    pub reach: Reach,
}

/// Which earlier changes of declared paths may alter what a [`Refusal`]
/// depends on (beside those that may alter anything: a batched kind, a kind
/// without paths, a requirement, a path through a followed link).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// A change at the resource's own paths, above them or inside them (its
    /// missing parent, what is in a folder declared absent).
    Around,
    /// That, or a change at these declared paths, above or inside them (the
    /// account files a declared owner or group is looked up in).
    AlsoAround(&'static [&'static str]),
    /// A change of any path: what decides it may be anywhere (another name
    /// of a hard-linked file).
    AnyPath,
}

impl Refusal {
    /// A refusal only a change around the resource's own paths may alter.
    pub fn around(why: String) -> Self {
        Refusal {
            why,
            reach: Reach::Around,
        }
    }
}

/// Something a provider could not do on the host.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("{0}")]
    Rejected(#[from] GateRejection),
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// A kind's own failure (systemd refused, apt refused, ...), in that
    /// kind's error type (see [`KindError`]).
    #[error(transparent)]
    Kind(KindError),
}

/// One kind's own error type behind one boxed trait object, so the contract
/// names no kind: `ServiceError`, `PackageError` and whatever a new kind
/// brings all travel as this. Boxed: they carry units, hosts and tool output,
/// and would make every provider's `Result` large. Display and source are the
/// inner error's; [`KindError::downcast_ref`] gets the typed error back.
pub struct KindError(Box<dyn std::error::Error + Send + Sync + 'static>);

impl KindError {
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Box::new(error))
    }

    /// The kind's own error, if it is a `T`.
    pub fn downcast_ref<T: std::error::Error + 'static>(&self) -> Option<&T> {
        self.0.downcast_ref::<T>()
    }
}

impl std::fmt::Debug for KindError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl std::fmt::Display for KindError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for KindError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl ProviderError {
    /// The kind's own error, if this is one and it is a `T`.
    pub fn kind_error<T: std::error::Error + 'static>(&self) -> Option<&T> {
        match self {
            Self::Kind(e) => e.downcast_ref::<T>(),
            _ => None,
        }
    }
}

/// A complete staged copy, as the gate sees it: where it is (a validator is
/// pointed at that path) and exactly what was written there, so a
/// sandboxed validator can be shown those bytes rather than whatever the
/// path holds a moment later.
#[derive(Debug, Clone, Copy)]
pub struct Staged<'a> {
    pub path: &'a Path,
    pub bytes: &'a [u8],
    pub mode: u32,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

/// What [`Provider::activate`] did with a staged change.
#[derive(Debug)]
pub enum Activated<S = Staging> {
    /// The change is live.
    Done,
    /// Part of it is live and the next part is staged: the engine checks
    /// that part as it checked the first ([`Provider::validation_target`],
    /// evidence) and calls `activate` again with it, or `discard`s it. A
    /// kind whose change is many entries written one at a time (a Tree)
    /// goes live this way, so no staged copy ever replaces a live one
    /// without the engine's say.
    Next(S),
}

/// A validator's stand-in for [`Provider::apply`] (every step of a change
/// in one call, for tools and tests; the engine drives the steps itself).
pub trait StagingGate {
    /// Called with each complete staged copy, after owner, group and mode
    /// are set, before it replaces the live file. An error means the change
    /// must not go live.
    fn check_staged(&mut self, staged: &Staged<'_>) -> Result<(), GateRejection>;
}

/// A gate that lets everything through (resources without a validator).
pub struct OpenGate;

impl StagingGate for OpenGate {
    fn check_staged(&mut self, _staged: &Staged<'_>) -> Result<(), GateRejection> {
        Ok(())
    }
}

/// A resource's declaration in its kind's typed form, handed to every step
/// of a pass (observe, plan, stage, activate, verify, and the capabilities
/// that read the declaration) instead of parsing `desired` again. Opaque to
/// the engine: only the kind that made it reads it (see [`crate::Kind`]).
///
/// It shares the declaration the resource holds
/// ([`datum_core::HeldDeclaration`], parsed once by [`Provider::declare`]
/// for as long as the resource declares the same): a pass never changes
/// that one. What a pass writes into it ([`Declared::get_mut`], a batch's
/// note) goes to a copy of its own, which the next pass does not see.
pub struct Declared<'r> {
    pub resource: &'r Resource,
    declaration: Arc<dyn Any + Send + Sync>,
    /// This pass's own copy, once something wrote into the declaration.
    own: Option<Box<dyn Any + Send + Sync>>,
}

impl<'r> Declared<'r> {
    pub fn new<T: Any + Send + Sync>(resource: &'r Resource, declaration: T) -> Self {
        Self::shared(resource, Arc::new(declaration))
    }

    /// A declaration shared with whoever else holds it (the resource's
    /// [`datum_core::HeldDeclaration`]).
    pub fn shared(resource: &'r Resource, declaration: Arc<dyn Any + Send + Sync>) -> Self {
        Self {
            resource,
            declaration,
            own: None,
        }
    }

    /// The typed declaration, if it is a `T` (it is for the kind that
    /// declared it): this pass's copy once it has one.
    pub fn get<T: Any>(&self) -> Option<&T> {
        match &self.own {
            Some(own) => own.downcast_ref::<T>(),
            None => self.declaration.downcast_ref::<T>(),
        }
    }

    /// The typed declaration, mutably: a batch tells each declaration of
    /// its kind what it learned of the others (see [`Batches`]). Copy on
    /// write: the first call copies the shared declaration into this
    /// pass's own, so the one the resource holds stays as parsed.
    pub fn get_mut<T: Any + Clone + Send + Sync>(&mut self) -> Option<&mut T> {
        if self.own.is_none() {
            let copy = self.declaration.downcast_ref::<T>()?.clone();
            self.own = Some(Box::new(copy));
        }
        self.own.as_mut()?.downcast_mut::<T>()
    }
}

impl std::fmt::Debug for Declared<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Declared")
            .field("resource", &self.resource.id)
            .finish_non_exhaustive()
    }
}

/// What [`Provider::stage`] prepared for one change, held by the engine
/// until it calls [`Provider::activate`] or [`Provider::discard`]: a staged
/// copy beside the target, or, for a kind with nothing to stage, the plan it
/// will act on. Opaque to the engine, like [`Declared`].
/// `Send`: the engine may stage a run of resources on several threads
/// ahead of the loop that activates them (see [`Capabilities::stages_ahead`]).
pub struct Staging(Box<dyn Any + Send>);

impl Staging {
    pub fn new<T: Any + Send>(staging: T) -> Self {
        Self(Box::new(staging))
    }

    /// The kind's own staging value, if it is a `T`.
    pub fn into_inner<T: Any>(self) -> Result<T, Self> {
        self.0.downcast::<T>().map(|b| *b).map_err(Self)
    }

    /// The kind's own staging value, by reference.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0.downcast_ref::<T>()
    }
}

impl std::fmt::Debug for Staging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Staging(..)")
    }
}

/// The plan a kind with nothing to stage carries from `stage` to
/// `activate` (a Service, a Package, a User): what was observed and what
/// differs.
#[derive(Debug, Clone)]
pub struct Planned {
    pub observed: Observed,
    pub diff: Diff,
}

/// What a kind is and can do beyond the steps of a change, declared once:
/// both the object-safe [`Provider`] and the typed [`crate::Kind`] have
/// this as their supertrait, so the engine, the catalogue and the check
/// ask `provider.paths()` of a `&dyn Provider` and a kind answers it in its
/// own `impl Capabilities` (an entry kind through
/// [`crate::common::entry::EntryProvider`]'s constants). Every method has
/// a default (no capability, the common answer): a kind overrides only
/// what it has, and a new capability is one method here, with its default,
/// that nothing has to forward.
pub trait Capabilities: Send + Sync {
    /// Whether declarations of this type carry content (`content:`, `source:`
    /// or `template:`), which the catalogue renders into `Resource::content`.
    fn takes_content(&self) -> bool {
        false
    }

    /// Whether `validate:` means anything for this type: something is staged
    /// (content, a tree, a link) that a validator can check before it goes
    /// live. A type that stages nothing (a Directory) refuses `validate:` at
    /// compile time instead of ignoring it.
    fn takes_validator(&self) -> bool {
        true
    }

    /// Whether a file validator (scope `file`: `json`, `sshd`) has staged
    /// content to check. A link is staged without any (only a group
    /// validator, which checks the configuration it takes part in, applies
    /// to one): the catalogue refuses a file validator there rather than
    /// skip it.
    fn takes_file_validator(&self) -> bool {
        self.takes_validator()
    }

    /// Host paths this kind's resources own (conflict checks, parent
    /// ordering, staging sweeps, backups, text diffs).
    fn paths(&self) -> Option<&dyn OwnsPaths> {
        None
    }

    /// Ordering edges this kind adds to a compiled catalogue beyond
    /// `requires` and paths (a Package before the File whose validator it
    /// installs).
    fn ordering(&self) -> Option<&dyn OrdersOthers> {
        None
    }

    /// Applying every resource of this kind together, before the pass's
    /// per-resource loop (one apt transaction for every Package).
    fn batching(&self) -> Option<&dyn Batches> {
        None
    }

    /// Being reloaded or restarted when resources it names change (a
    /// Service's `reload_on`/`restart_on`).
    fn activation(&self) -> Option<&dyn Activates> {
        None
    }

    /// A folder of the repository the catalogue reads and packs into
    /// `Resource::content` (a Tree's `source:`).
    fn source_folder(&self) -> Option<&dyn TakesSourceFolder> {
        None
    }

    /// A Merkle fingerprint of the declared state and of what was observed,
    /// entry by entry (a Tree's).
    fn fingerprints(&self) -> Option<&dyn Fingerprints> {
        None
    }

    /// Whether [`Provider::stage`] may run ahead of the pass's loop, on
    /// another thread, for a resource that requires nothing: staging
    /// touches nothing live (a hidden copy beside the target) and depends
    /// only on the declaration, the observation and what is on the host
    /// before the pass changes anything. The engine stages runs of such
    /// resources in parallel (their content fsynced together) and
    /// activates them in order as before; a copy it does not use is
    /// discarded. A File does; a kind that acts when it stages, or whose
    /// staging reads what an earlier resource may change, must not.
    fn stages_ahead(&self) -> bool {
        false
    }

    /// Whether a resource of this type owns the whole folder at its
    /// declared `path`, entries included (a Tree): drift is looked for in
    /// the subtree, evidence and accepted changes are per entry, and files
    /// inside it are no other finding's. Check and the agent ask this
    /// instead of naming a kind.
    fn owns_subtree(&self) -> bool {
        false
    }

    /// How the entries of the folder a resource of this kind owns differ
    /// from its declaration, as its observation tells (a Tree's): check
    /// reports one finding per category, naming the entries, and asks this
    /// instead of reading the kind's observation.
    fn entry_differences(&self) -> Option<&dyn EntryDifferences> {
        None
    }

    /// Whether the declared `path` of a resource of this type names one
    /// regular file (a File), as opposed to a folder, a link or no path:
    /// the agent then watches the file's own inode beside its folder, so a
    /// write through another hard link is seen (a watch on a link would
    /// follow it, one on a folder would see every entry). The agent asks
    /// this instead of naming a kind.
    fn names_a_regular_file(&self) -> bool {
        false
    }

    /// Fields of `desired` whose value is sensitive whatever the resource's
    /// `sensitive:` says (a User's `password_hash`): the catalogue masks
    /// them wherever it shows a declaration, and the provider itself never
    /// puts them in an observation, a diff or an error.
    fn sensitive_fields(&self) -> &'static [&'static str] {
        &[]
    }

    /// What a resource of this kind manages that no other resource may
    /// manage too, beyond paths (an account's name, a User's uid): each a
    /// [`Exclusive`] claim. Two resources of one kind with the same key
    /// would undo each other on every pass, or the second would fail after
    /// the first was applied, so the catalogue refuses them at the field.
    /// `field` looks up the merged declaration; `name` is the resource's
    /// own name (the default of a `name:` field).
    fn exclusive_claims(&self, _field: FieldLookup<'_, '_>, _name: &str) -> Vec<Exclusive> {
        Vec::new()
    }

    /// For a kind whose resource name stands for a field when that field is
    /// not written (a User's, Group's, Package's or Service's `name:`, which
    /// reaches useradd, apt-get or systemctl): the problem with `name` as
    /// that value, `None` when it is fine or the field is written. `check`
    /// sees `desired` alone, so without this a resource name no tool takes
    /// (`-ou`, `Web Server`) passed the compile and failed every pass.
    /// `field` looks up the merged declaration.
    fn check_resource_name(&self, _field: FieldLookup<'_, '_>, _name: &str) -> Option<String> {
        None
    }

    /// What this kind reads of the host or owes it in a pass that a write
    /// by any resource may change (User's and Group's parsed account files,
    /// a Service's reload of systemd). The engine tells every registered
    /// kind that answers this what each part of any resource wrote
    /// ([`crate::Registry::after_writing`]) instead of naming a kind.
    fn watches_writes(&self) -> Option<&dyn WatchesWrites> {
        None
    }

    /// Findings a check adds for this kind beyond each resource's own diff:
    /// what its resources put on the host without declaring it, changed
    /// since (a Package's configuration files). Check asks this instead of
    /// naming a kind.
    fn extra_findings(&self) -> Option<&dyn ExtraFindings> {
        None
    }
}

/// What a kind keeps of the host for the rest of a pass, or owes it, that
/// another resource's write may change ([`Capabilities::watches_writes`]).
pub trait WatchesWrites: Send + Sync {
    /// Called after each part of any resource goes live, whatever its
    /// kind, with the declared paths that resource manages (and for an
    /// activation an earlier pass still owes, what it changed then): a kind
    /// drops what it read that the write may have changed, or notes what
    /// it now owes.
    fn after_writing(&self, host: &Host, written: &[PathBuf]);

    /// Whether writing the declared paths `written` may change what a later
    /// resource's staging reads (the account files a File's owner is
    /// resolved from): the engine then stages no later resource ahead of
    /// the writer. `false` unless the kind says so.
    fn changes_what_staging_reads(&self, _boundary: &Boundary, _written: &[PathBuf]) -> bool {
        false
    }
}

/// One resource type, as the engine and the catalogue hold it:
/// object-safe (`&dyn Provider`). A kind does not implement this itself: it
/// implements the typed [`crate::Kind`] (or [`crate::common::entry::EntryProvider`]
/// for an entry at a path), and a blanket impl makes it a `Provider`. What
/// it can do beyond these steps is its supertrait, [`Capabilities`].
///
/// The steps of a change are separate calls the engine drives, each handed
/// the declaration parsed once ([`Provider::declare`]): [`observe_declared`]
/// (the host as it is), [`plan`] (observed against declared), [`stage`]
/// (the staged copy, or nothing), [`validation_target`] (what the
/// resource's validator is pointed at), [`activate`] (make it live: the
/// rename, the systemctl call) or [`discard`] (the staged copy removed,
/// the live object untouched), and [`verify_declared`].
///
/// [`observe_declared`]: Provider::observe_declared
/// [`plan`]: Provider::plan
/// [`stage`]: Provider::stage
/// [`validation_target`]: Provider::validation_target
/// [`activate`]: Provider::activate
/// [`discard`]: Provider::discard
/// [`verify_declared`]: Provider::verify_declared
pub trait Provider: Capabilities + Send + Sync {
    /// The manifest `type:` this provider implements (`File`).
    fn kind(&self) -> &'static str;

    /// Checks declared fields without host access: unknown fields, wrong value
    /// types, bad modes, missing required fields. Returns every problem, not
    /// just the first.
    fn check(&self, desired: &serde_json::Value) -> Result<(), Vec<FieldError>>;

    /// The JSON Schema of `desired` as written in a manifest (for editors;
    /// see `common::schema`), from the kind's declaration type.
    fn declaration_schema(&self, generator: &mut schemars::SchemaGenerator) -> schemars::Schema;

    /// The resource's declaration in the kind's typed form; every other
    /// step is handed the result. In a catalogue that holds declarations
    /// (the agent's: `datum_catalog::Compiler::holding_declarations`,
    /// `Catalogue::hold_declarations`) it is parsed once and held by the
    /// resource ([`datum_core::HeldDeclaration`]) for as long as its
    /// declaration hash is the same: the compiler declares every resource
    /// of the catalogue it makes, a catalogue loaded from its snapshot
    /// declares each at its first use, and every later call (every pass
    /// over the catalogue) shares the one held (the blanket impl for
    /// [`crate::Kind`] does this). Elsewhere (a one-shot command's
    /// catalogue, one pass) and for a resource without a declaration hash
    /// (built by hand) nothing is held: the pass that calls this keeps the
    /// result as long as it needs it. An error names the field (the catalogue has
    /// checked the fields, so this is rare: a resource built by hand, a
    /// name that is not valid for the host); the agent's compiler refuses
    /// such a catalogue, a one-shot pass that resource.
    fn declare<'r>(&self, resource: &'r Resource) -> Result<Declared<'r>, ProviderError>;

    /// Reads the current state from the host.
    fn observe_declared(&self, host: &Host, d: &Declared<'_>) -> Result<Observed, ProviderError>;

    /// Compares declared and observed state: the plan (what `datum plan`
    /// shows, and what `stage` and `activate` carry out). Pure.
    fn plan(&self, d: &Declared<'_>, observed: &Observed) -> Diff;

    /// What the resource manages on the host as the observation names it,
    /// when another name can reach the same object (a Service's unit
    /// through an alias: systemd's `Id`). Two resources of one kind with
    /// one identity are refused by the pass before anything is applied, as
    /// the catalogue refuses two that claim one name. `None` (the default):
    /// the kind's names are its objects, and the catalogue's claims cover
    /// it. Pure.
    fn observed_identity(&self, _observed: &Observed) -> Option<String> {
        None
    }

    /// Why the change a plan found cannot be made to what was observed, when
    /// that is certain before anything is staged (`None`: nothing says it
    /// cannot): `datum plan` then reports the change as one that would fail
    /// (exit 4), as the apply will, rather than as pending (exit 2). Pure.
    fn refuses(&self, _d: &Declared<'_>, _observed: &Observed) -> Option<String> {
        None
    }

    /// Why the change cannot be made given what was observed *around* the
    /// resource's own object (the entries in a folder declared absent, the
    /// missing parent of a new entry, the excluded entries in a folder a
    /// purge must clear), which an earlier change of the same pass may still
    /// alter (a Package installed or purged creates and empties folders).
    /// The engine reports it in `datum plan` as a change that would fail
    /// only when nothing before the resource would change the host there:
    /// nothing it requires, no batched kind (applied before everything),
    /// nothing earlier of a kind that acts beyond declared paths (a reload
    /// a change owes a service counts), nothing earlier at its path, above
    /// it or inside it, and nothing earlier at all when either path goes
    /// through a link `boundary.follow_links` lets the walk follow (one
    /// folder, two spellings). Otherwise the change
    /// stays pending and the apply decides. Pure; `None` by default. A kind
    /// without declared paths (a Service, whose unit any earlier file or a
    /// `daemon-reload` may bring) must not refuse here: the engine cannot
    /// tell which earlier changes it depends on. What it depends on beyond
    /// its own paths (the account files a declared owner is looked up in,
    /// another name of a hard-linked file) is the [`Refusal`]'s [`Reach`].
    fn refuses_unless_changed_first(
        &self,
        _d: &Declared<'_>,
        _observed: &Observed,
    ) -> Option<Refusal> {
        None
    }

    /// Prepares the change `diff` without making it live: a content change
    /// is written to a staged copy beside the target, with its owner, group
    /// and mode; a kind with nothing to stage returns the plan it will act
    /// on. The live object is as it was.
    fn stage(
        &self,
        host: &Host,
        d: &Declared<'_>,
        observed: &Observed,
        diff: &Diff,
    ) -> Result<Staging, ProviderError>;

    /// What the resource's validator is pointed at: the complete staged
    /// copy, or `None` when nothing was staged (owner or mode only, a
    /// removal, a kind with nothing to stage).
    fn validation_target<'s>(&self, staging: &'s Staging) -> Option<Staged<'s>>;

    /// Makes a staged change live (the rename over the live file, the
    /// systemctl or apt call), once the engine has checked what
    /// [`Provider::validation_target`] showed it. A kind that writes several
    /// entries one at a time (a Tree) makes one part live and returns the
    /// next part staged ([`Activated::Next`]), for the engine to check in
    /// turn. A failure leaves the live object (or the part being written) as
    /// it was. A kind need not say that it wrote an account file: after each
    /// part the caller tells every kind that watches writes what the
    /// resource manages ([`crate::Registry::after_writing`]), so the pass's
    /// parsed account files are read again when the paths reach them, and
    /// systemd reloads before a unit acts when they reach a unit folder.
    fn activate(
        &self,
        host: &Host,
        d: &Declared<'_>,
        staging: Staging,
    ) -> Result<Activated, ProviderError>;

    /// Removes what `stage` wrote, leaving the live object untouched (the
    /// validator refused it, or the evidence could not be saved).
    fn discard(&self, staging: Staging);

    /// Confirms the host now holds the declared state. Returns what was
    /// observed (the engine records its metadata as the last verified state)
    /// and the remaining difference (empty when converged).
    fn verify_declared(
        &self,
        host: &Host,
        d: &Declared<'_>,
    ) -> Result<(Observed, Diff), ProviderError>;

    /// [`Provider::observe_declared`] for a resource not yet declared (parses it).
    fn observe(&self, host: &Host, resource: &Resource) -> Result<Observed, ProviderError> {
        self.observe_declared(host, &self.declare(resource)?)
    }

    /// Every step of a change in order, with `gate` standing in for the
    /// engine's validator: stage, offer the validation target to `gate`
    /// (a refusal discards the staged copy and is returned), activate, and
    /// the same for each further part a multi-part change stages.
    fn apply(
        &self,
        host: &Host,
        resource: &Resource,
        observed: &Observed,
        diff: &Diff,
        gate: &mut dyn StagingGate,
    ) -> Result<(), ProviderError> {
        let d = self.declare(resource)?;
        let mut staging = self.stage(host, &d, observed, diff)?;
        let written = self
            .paths()
            .map(|p| p.managed_paths(&d))
            .unwrap_or_default();
        loop {
            let refused = self
                .validation_target(&staging)
                .and_then(|target| gate.check_staged(&target).err());
            if let Some(rejection) = refused {
                self.discard(staging);
                return Err(rejection.into());
            }
            let part = self.activate(host, &d, staging);
            // As the engine does (with the shipped kinds): new account
            // files are read again, a new unit file is loaded before a unit
            // acts.
            crate::registry().after_writing(host, &written);
            match part? {
                Activated::Done => return Ok(()),
                Activated::Next(next) => staging = next,
            }
        }
    }

    /// [`Provider::verify_declared`] for a resource not yet declared.
    fn verify(&self, host: &Host, resource: &Resource) -> Result<(Observed, Diff), ProviderError> {
        self.verify_declared(host, &self.declare(resource)?)
    }
}

/// A declaration's top-level field by name, as whoever holds it stores it
/// (the catalogue's merged fields, a compiled resource's `desired`). The
/// values live as long as their holder (`'a`), not only as long as the
/// lookup (`'f`): a claim's path borrows from them, not copied.
pub type FieldLookup<'f, 'a> = &'f dyn Fn(&str) -> Option<&'a Value>;

/// One thing a declaration manages alone ([`Capabilities::exclusive_claims`]):
/// `key` is compared with the other resources' keys of the same kind,
/// `shown` names it in the error, at `field`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exclusive {
    pub field: &'static str,
    pub key: String,
    pub shown: String,
}

/// The path a declaration claims, for the catalogue's checks and ordering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathClaim<'a> {
    /// The field that declares it (where a conflict is reported).
    pub field: &'static str,
    /// As declared (not under `--root`).
    pub path: &'a str,
    /// False for something declared absent: it neither needs its parent nor
    /// can serve as one (ordering it after the folder would remove the
    /// folder first), but it still conflicts with another claim of the path.
    pub present: bool,
    /// Whether what is declared there is a folder other claims inside it are
    /// ordered after (a Directory, a Tree), and conflict with when it is absent.
    pub holds_children: bool,
    /// Whether what is declared there is a symbolic link (a Symlink): a path
    /// declared below it is reached through the link, which the walk follows
    /// only where `boundary.follow_links` lists the link's path. The
    /// catalogue refuses a claim below an unlisted one (every apply of it
    /// would fail) and orders one below a listed one after the link.
    pub links: bool,
    /// Where a link declared present points (a Symlink's `target`, as
    /// written): what is below a followed link is written there, so the
    /// folder declared at or above it is ordered before the link.
    pub link_target: Option<&'a str>,
}

/// The declared owner and mode of content staged at a resource's path (a
/// validator such as visudo judges them; `datum plan` shows it the content
/// as it would lie there).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeclaredMeta {
    pub mode: u32,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

/// Capability: resources of this kind own host paths.
pub trait OwnsPaths: Send + Sync {
    /// The path a declaration claims, read from its fields; `None` when it
    /// claims none (or the field is not a path).
    fn claim<'a>(&self, field: FieldLookup<'_, 'a>) -> Option<PathClaim<'a>>;

    /// Host paths (as declared, not yet under `--root`) this resource
    /// manages; the first is the one whose content a text diff shows.
    fn managed_paths(&self, d: &Declared<'_>) -> Vec<PathBuf>;

    /// Whether another resource may claim `below` (a path inside this
    /// declaration's claim, relative to it; `is_dir`: a folder is claimed
    /// there) or, if not, why: the end of "`/etc/app/conf` is declared
    /// inside `File[app]`, ...". A folder leaves its contents to others (the
    /// default); a file holds nothing; a Tree manages everything below its
    /// path that its `exclude` rules do not leave out. Without this check
    /// the two would undo each other on every pass.
    fn leaves_inside(
        &self,
        _field: FieldLookup<'_, '_>,
        _below: &std::path::Path,
        _is_dir: bool,
    ) -> Result<(), String> {
        Ok(())
    }

    /// The owner and mode content would have at the first managed path, or
    /// an error saying why they cannot be known (an owner the host does not
    /// know).
    fn declared_meta(&self, _host: &Host, _d: &Declared<'_>) -> Result<DeclaredMeta, String> {
        Ok(DeclaredMeta {
            mode: 0o644,
            ..DeclaredMeta::default()
        })
    }

    /// Paths inside the resource whose content an apply destroys, when that
    /// is finer than the managed paths themselves (a Tree's changed
    /// entries), each with whether the apply removes it (else overwrites).
    /// `None`: the managed paths are what the change destroys.
    fn destroyed_entries(
        &self,
        _d: &Declared<'_>,
        _observed: &Observed,
    ) -> Option<Vec<(PathBuf, bool)>> {
        None
    }
}

/// A resource that must run after another, and why the catalogue says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderingEdge {
    pub from: ResourceId,
    pub after: ResourceId,
}

/// Capability: resources of this kind order others after themselves.
pub trait OrdersOthers: Send + Sync {
    /// `(resource, what it must follow)` for the compiled catalogue (all
    /// kinds), in catalogue order.
    fn edges(&self, resources: &[Resource]) -> Vec<OrderingEdge>;

    /// Warnings about edges that should exist and cannot (a validator's
    /// package nobody declares), each with the resource it concerns.
    fn warnings(&self, _resources: &[Resource]) -> Vec<(ResourceId, String)> {
        Vec::new()
    }
}

/// What a batch did to the resources it applied.
#[derive(Debug, Default)]
pub struct Batched {
    /// Resources the batch changed, each with what it observed before: the
    /// engine diffs that (so the change is reported where it belongs), and
    /// the resource's own apply then finds nothing left to do.
    pub before: Vec<(ResourceId, Observed)>,
}

/// Capability: resources of this kind are applied together.
pub trait Batches: Send + Sync {
    /// Called once per applying pass, before the per-resource loop, with
    /// every resource of this kind the pass may change. A failure is never
    /// the pass's: what the batch could not do is left to each resource's
    /// own apply, which then fails naming why. Handed the pass's
    /// declarations (each of this kind), never the raw resources, and
    /// mutably: what one resource's own apply must know of the others (a
    /// Package: the packages declared absent beside it, which apt may
    /// remove for it) is written into its declaration here, so it travels
    /// with the resource instead of through a hidden per-pass cache. It is
    /// written into the pass's own copy ([`Declared::get_mut`]): the
    /// declaration the resource holds for later passes stays as parsed.
    fn apply_batch(&self, host: &Host, declared: &mut [&mut Declared<'_>]) -> Batched;
}

/// What a change of a notifying resource asks of the one it notifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum OnChange {
    Reload,
    Restart,
}

impl OnChange {
    /// `reload` or `restart`.
    pub fn verb(self) -> &'static str {
        match self {
            Self::Reload => "reload",
            Self::Restart => "restart",
        }
    }
}

/// Capability: resources of this kind are activated when others change.
pub trait Activates: Send + Sync {
    /// The resources whose change this declaration follows, and how, read
    /// from its fields (the catalogue orders it after them).
    fn notified_by(&self, field: FieldLookup<'_, '_>) -> Vec<(ResourceId, OnChange)>;

    /// Performs the activation (the reload or restart) with the
    /// declaration the pass holds; the engine validates the notifiers'
    /// groups before, and verifies the resource after.
    fn activate(&self, host: &Host, d: &Declared<'_>, how: OnChange) -> Result<(), ProviderError>;

    /// What a person calls the activated thing (a unit name), for reports.
    fn subject(&self, resource: &Resource) -> String {
        resource.id.to_string()
    }
}

/// Capability: declarations of this kind carry a folder of the repository.
pub trait TakesSourceFolder: Send + Sync {
    /// The `desired` field naming the folder.
    fn field(&self) -> &'static str;

    /// The folder read and packed as the resource's content.
    fn pack(&self, dir: &Path) -> Result<Content, std::io::Error>;

    /// What is wrong with the packed `content` for a resource whose `path:`
    /// is `path` (the declared path on the host, as written): an entry the
    /// host could never hold, refused when the catalogue is compiled rather
    /// than after part of it was applied.
    fn check_packed(&self, _content: &Content, _path: &str) -> Result<(), String> {
        Ok(())
    }

    /// The bytes of every file the packed `content` holds, read again from
    /// the repository and each checked against what was packed: what a
    /// sensitive resource's validator output is searched for. `None` when
    /// one changed or is gone, the content does not unpack, or the files
    /// hold more than `most` bytes together; the caller then fails closed
    /// (withholds every output). The default knows no files: `None`.
    fn files_again(&self, _content: &Content, _most: u64) -> Option<Vec<Vec<u8>>> {
        None
    }
}

/// Capability: the kind's state has a Merkle fingerprint (a Tree's), which
/// `datum catalogue` shows and fleet reports compare.
pub trait Fingerprints: Send + Sync {
    /// The declared state's root fingerprint (what the host will show once
    /// applied).
    fn declared(&self, host: &Host, resource: &Resource) -> Result<String, ProviderError>;

    /// The observed entries' own fingerprints, by path relative to the
    /// resource (`"missing"` where the host has none).
    fn observed_entries(&self, observed: &Observed) -> std::collections::BTreeMap<String, String>;

    /// The root pair `observed` carries, as fleet reports send it; `None`
    /// when it carries none (nothing there to fingerprint).
    fn roots(&self, observed: &Observed) -> Option<FingerprintRoots>;
}

/// The two root fingerprints an observation carries (see
/// [`Fingerprints::roots`]): equal exactly when the state has not drifted,
/// so an undrifted resource proves itself by one hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FingerprintRoots {
    /// The declared state's root, as the observation compared it (what the
    /// kind does not manage taken from the host).
    pub declared: String,
    /// The host's root; `None` when the observation holds only the
    /// declared one.
    pub observed: Option<String>,
}

/// Capability: a resource of the kind owns a whole folder, and its
/// observation keeps how each entry differs from the declaration (a
/// Tree's). Only the kind knows how it keeps them: whoever reads them asks
/// [`EntryDifferences::entries`].
pub trait EntryDifferences: Send + Sync {
    /// The entry differences `observed` carries, in the order the
    /// observation lists them (parents first); empty when it carries none
    /// (the folder as declared, or not there at all).
    fn entries(&self, observed: &Observed) -> Vec<datum_core::diff::EntryDifference>;
}

/// One extra finding (see [`ExtraFindings`]), in terms no check type knows
/// (the providers sit below the check): the check words it as its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraFinding {
    /// The resource it belongs to (whose class's report it is part of).
    pub owner: ResourceId,
    /// The host path it is about (not under the root).
    pub path: PathBuf,
    pub drift: ExtraDrift,
}

/// How the thing at an [`ExtraFinding`]'s path differs from what the
/// resource put there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtraDrift {
    /// Still there with other content: `field` and both sides as shown to a
    /// person (a digest, never the content itself).
    Changed {
        field: &'static str,
        expected: String,
        found: String,
    },
    /// Gone.
    Deleted,
    /// Replaced by another type of entry (`found`: `symlink`, `directory`).
    TypeChanged { found: String },
}

/// Extra findings of a kind (a Package's configuration files edited after
/// it installed them): report only, since nothing declares their content.
pub trait ExtraFindings: Send + Sync {
    /// The extra findings of `resources` (this kind's resources the check
    /// inspected), read from `host`. An error fails them all.
    fn findings(
        &self,
        host: &Host,
        resources: &[&Resource],
    ) -> Result<Vec<ExtraFinding>, ProviderError>;
}
