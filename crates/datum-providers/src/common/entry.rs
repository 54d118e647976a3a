//! The typed side of the providers whose resource is one entry of the file
//! system at a declared path (File, Directory, Symlink), and the blanket
//! impl that makes each of them a [`Kind`] (and so a `Provider`) for the engine.
//!
//! What the three share lives once, here: parse the declaration, map its
//! path under the root, look at what is there without following a link (an
//! absent entry is an absent observation), compare only a declaration that
//! parses, and dispatch apply by action (nothing, remove, or converge) on the
//! entry as the boundary reached it (`Host::locate`: its parent open,
//! reached without following a link; a parent link or an unsafe ownership
//! transition is an error naming it, for observe as much as for apply). A type writes only what differs: its field
//! checks, what it reads from an entry that is there, the pure diff, and how
//! it converges and removes. Must not: run validators or keep backups (the
//! engine does, see [`crate::Provider`]).

use std::path::{Path, PathBuf};

use datum_core::{Action, Diff, Observed, Presence, Resource};
use datum_host::fs::Stat;
use datum_host::{Host, Located};
use serde_json::Value;

use crate::Activated;
use crate::kind::declaration;
use crate::{
    Capabilities, Declared, DeclaredMeta, FieldError, FieldLookup, Kind, OwnsPaths, PathClaim,
    ProviderError, Refusal, Staged,
};

/// A declaration naming one path.
pub trait EntryDesired: Sized + Clone + Send + Sync + 'static {
    /// The typed declaration (fields already checked by the catalogue).
    fn from_resource(resource: &Resource) -> Result<Self, ProviderError>;
    /// The declared path (as on the managed machine, not under the root).
    fn path(&self) -> &Path;
}

/// What a File and a Directory declare alike, parsed in this order (the
/// first problem is the error, naming its field): `path`, then `owner`,
/// `group` and `mode`, then `ensure`.
pub(crate) fn path_meta_ensure(
    desired: &dyn datum_core::DeclaredFields,
) -> Result<(PathBuf, super::MetaDesired, super::Ensure), ProviderError> {
    let invalid = |(field, message): (String, String)| ProviderError::Invalid { field, message };
    let path =
        super::fields::declared_path(desired).map_err(|m| invalid(("path".to_owned(), m)))?;
    let meta = super::MetaDesired::parse(desired).map_err(invalid)?;
    let ensure = super::Ensure::parse(desired.get("ensure"))
        .map_err(|m| invalid(("ensure".to_owned(), m)))?;
    Ok((path, meta, ensure))
}

/// A resource type that is one file-system entry at a declared path.
pub trait EntryProvider: Send + Sync {
    type Desired: EntryDesired;
    /// The manifest `type:`.
    const KIND: &'static str;
    /// The declaration as written in a manifest, for its JSON Schema
    /// (see [`crate::Provider::declaration_schema`]).
    type Written: schemars::JsonSchema;
    /// What [`EntryProvider::stage`] hands [`EntryProvider::converge`]: a
    /// staged copy, or `()` for an entry with nothing to stage.
    type Staging: Send + 'static;
    /// Whether staging may run ahead of the pass (see
    /// [`crate::Capabilities::stages_ahead`]).
    const STAGES_AHEAD: bool = false;
    /// Whether declarations carry content (see [`crate::Capabilities::takes_content`]).
    const TAKES_CONTENT: bool = false;
    /// Whether `validate:` applies (see [`crate::Capabilities::takes_validator`]).
    const TAKES_VALIDATOR: bool = true;
    /// Whether a file validator has staged content to check (see
    /// [`crate::Capabilities::takes_file_validator`]).
    const TAKES_FILE_VALIDATOR: bool = Self::TAKES_VALIDATOR;
    /// Whether the entry is a folder whose declared contents are ordered
    /// after it (see [`PathClaim::holds_children`]).
    const HOLDS_CHILDREN: bool = false;
    /// Why no other resource may claim a path inside this entry's (see
    /// [`OwnsPaths::leaves_inside`]), for an entry that can hold nothing
    /// (a file); `None` leaves it to the host's boundary rules.
    const HOLDS_NOTHING: Option<&'static str> = None;
    /// Whether the entry is a symbolic link (see [`PathClaim::links`]).
    const IS_LINK: bool = false;
    /// Whether staging refuses a directory found at the path (a file or a
    /// link is never written over a folder: Datum removes a folder only
    /// when asked to), so a plan can say so before the apply fails.
    const REFUSES_A_DIRECTORY: bool = false;
    /// The mode of an entry created without a declared `mode`.
    const DEFAULT_MODE: u32;

    /// Checks declared fields without host access (see [`crate::Provider::check`]).
    fn check_fields(desired: &Value) -> Result<(), Vec<FieldError>>;

    /// Observes the entry at `at`, which exists and whose `lstat` is `stat`
    /// (`resource` is the one `d` was declared from).
    fn observe_present(
        host: &Host,
        resource: &Resource,
        d: &Self::Desired,
        at: &Located,
        stat: Stat,
    ) -> Result<Observed, ProviderError>;

    /// Compares declared and observed state. Pure.
    fn diff(resource: &Resource, d: &Self::Desired, observed: &Observed) -> Diff;

    /// Prepares creating, updating or replacing the entry at `at` (a
    /// staged copy beside it, complete with owner and mode); the live entry
    /// is untouched.
    fn stage(
        host: &Host,
        resource: &Resource,
        d: &Self::Desired,
        at: &Located,
        diff: &Diff,
    ) -> Result<Self::Staging, ProviderError>;

    /// The staged copy a validator is pointed at (see
    /// [`crate::Provider::validation_target`]).
    fn target(_staging: &Self::Staging) -> Option<Staged<'_>> {
        None
    }

    /// Makes the entry at `at` match `d`, from what `stage` prepared.
    fn converge(
        host: &Host,
        d: &Self::Desired,
        at: &Located,
        staging: Self::Staging,
    ) -> Result<(), ProviderError>;

    /// Removes the entry at `at` (declared `ensure: absent`).
    fn remove(host: &Host, at: &Located) -> Result<(), ProviderError>;

    /// The observation of an entry that is not there (its parent is). By
    /// default [`Observed::absent`]; a kind that creates it with a declared
    /// owner notes what the apply would refuse (an unknown account).
    fn observe_absent(_host: &Host, _d: &Self::Desired) -> Observed {
        Observed::absent()
    }

    /// What this kind alone observed that makes the change fail unless an
    /// earlier change of the pass alters it (see
    /// [`crate::Provider::refuses_unless_changed_first`]; a missing parent
    /// is the blanket impl's). `None` by default.
    fn refuses_around(_d: &Self::Desired, _observed: &Observed) -> Option<Refusal> {
        None
    }
}

/// Where an entry's observation says why it is absent when its parent is
/// the reason: [`PARENT_MISSING`], or [`PARENT_NOT_A_DIRECTORY`] with the
/// declared path of what is there in [`PARENT_AT_FIELD`]. Only an absent
/// entry whose walk stopped short carries it: the walk found it, no
/// system call is added.
pub const PARENT_FIELD: &str = "parent";
/// See [`PARENT_FIELD`].
pub const PARENT_AT_FIELD: &str = "parent_at";
/// The entry's parent folder does not exist.
pub const PARENT_MISSING: &str = "missing";
/// A folder on the entry's way is something else.
pub const PARENT_NOT_A_DIRECTORY: &str = "not_a_directory";

/// The observation of an entry the walk could not reach because a folder
/// on its way is missing or is not a folder (`e`, a missing parent).
pub(crate) fn absent_behind(host: &Host, e: &datum_host::HostError) -> Observed {
    let mut observed = Observed::absent();
    match e {
        datum_host::HostError::NotADirectory { parent, .. } => {
            let declared = parent
                .strip_prefix(host.root())
                .map_or_else(|_| parent.clone(), |rest| Path::new("/").join(rest));
            observed
                .fields
                .insert(PARENT_FIELD.to_owned(), Value::from(PARENT_NOT_A_DIRECTORY));
            observed.fields.insert(
                PARENT_AT_FIELD.to_owned(),
                Value::from(declared.to_string_lossy().into_owned()),
            );
        }
        _ => {
            observed
                .fields
                .insert(PARENT_FIELD.to_owned(), Value::from(PARENT_MISSING));
        }
    }
    observed
}

/// The apply's own error for an entry at `path` whose walk stopped short,
/// as [`absent_behind`] recorded it (declared paths, not the root's).
pub(crate) fn parent_refusal(path: &Path, observed: &Observed) -> Option<String> {
    if observed.presence != Presence::Absent {
        return None;
    }
    let error = match observed.fields.get(PARENT_FIELD)?.as_str()? {
        PARENT_MISSING => datum_host::HostError::MissingParent {
            path: path.to_owned(),
            parent: path.parent()?.to_owned(),
        },
        PARENT_NOT_A_DIRECTORY => datum_host::HostError::NotADirectory {
            path: path.to_owned(),
            parent: PathBuf::from(observed.fields.get(PARENT_AT_FIELD)?.as_str()?),
        },
        _ => return None,
    };
    Some(error.to_string())
}

/// What an entry kind carries from staging to activation.
pub enum EntryStaging<S> {
    /// Nothing to do.
    Nothing,
    /// Remove the entry (looked up again when it is done).
    Remove,
    /// Converge the entry at the located path with what was staged.
    Converge(Located, S),
}

impl<T: EntryProvider> Kind for T {
    const KIND: &'static str = <T as EntryProvider>::KIND;
    type Declaration = T::Desired;
    type Written = T::Written;
    type Staging = EntryStaging<<T as EntryProvider>::Staging>;

    fn check_fields(&self, desired: &Value) -> Result<(), Vec<FieldError>> {
        <T as EntryProvider>::check_fields(desired)
    }

    fn declare(&self, resource: &Resource) -> Result<T::Desired, ProviderError> {
        T::Desired::from_resource(resource)
    }

    fn observe(
        &self,
        host: &Host,
        resource: &Resource,
        d: &T::Desired,
    ) -> Result<Observed, ProviderError> {
        // A missing parent: nothing can be there (and the observation says
        // why, for `refuses_unless_changed_first`).
        let at = match host.locate(d.path()) {
            Ok(at) => at,
            Err(e) if e.is_missing_parent() => return Ok(absent_behind(host, &e)),
            Err(e) => return Err(e.into()),
        };
        match at.lstat()? {
            Some(stat) => T::observe_present(host, resource, d, &at, stat),
            None => Ok(T::observe_absent(host, d)),
        }
    }

    fn plan(&self, resource: &Resource, d: &T::Desired, observed: &Observed) -> Diff {
        <T as EntryProvider>::diff(resource, d, observed)
    }

    fn refuses(&self, d: &T::Desired, observed: &Observed) -> Option<String> {
        let found_a_directory =
            matches!(&observed.presence, Presence::OtherType(kind) if kind == "directory");
        (T::REFUSES_A_DIRECTORY && found_a_directory).then(|| {
            datum_host::HostError::InTheWay {
                path: d.path().to_owned(),
                found: "directory".to_owned(),
            }
            .to_string()
        })
    }

    /// A new entry whose parent is missing (or is not a folder) fails
    /// when it is staged, unless an earlier change makes that parent; and
    /// what the kind itself says (a folder declared absent that is not
    /// empty, an owner no account file knows).
    fn refuses_unless_changed_first(&self, d: &T::Desired, observed: &Observed) -> Option<Refusal> {
        parent_refusal(d.path(), observed)
            .map(Refusal::around)
            .or_else(|| T::refuses_around(d, observed))
    }

    fn stage(
        &self,
        host: &Host,
        resource: &Resource,
        d: &T::Desired,
        _observed: &Observed,
        diff: &Diff,
    ) -> Result<Self::Staging, ProviderError> {
        match diff.action() {
            Action::None => Ok(EntryStaging::Nothing),
            Action::Remove => Ok(EntryStaging::Remove),
            Action::Create | Action::Update | Action::Replace => {
                let at = host.locate(d.path())?;
                let staged = <T as EntryProvider>::stage(host, resource, d, &at, diff)?;
                Ok(EntryStaging::Converge(at, staged))
            }
        }
    }

    fn validation_target<'s>(&self, staging: &'s Self::Staging) -> Option<Staged<'s>> {
        match staging {
            EntryStaging::Converge(_, staged) => T::target(staged),
            _ => None,
        }
    }

    fn activate(
        &self,
        host: &Host,
        _resource: &Resource,
        d: &T::Desired,
        staging: Self::Staging,
    ) -> Result<Activated<Self::Staging>, ProviderError> {
        match staging {
            EntryStaging::Nothing => {}
            EntryStaging::Remove => {
                if let Some(at) = host.try_locate(d.path())? {
                    T::remove(host, &at)?;
                }
            }
            EntryStaging::Converge(at, staged) => T::converge(host, d, &at, staged)?,
        }
        Ok(Activated::Done)
    }
}

/// What an entry kind can do, from its constants: it owns its path.
impl<T: EntryProvider> Capabilities for T {
    fn takes_content(&self) -> bool {
        T::TAKES_CONTENT
    }

    fn takes_validator(&self) -> bool {
        T::TAKES_VALIDATOR
    }

    fn takes_file_validator(&self) -> bool {
        T::TAKES_FILE_VALIDATOR
    }

    fn stages_ahead(&self) -> bool {
        T::STAGES_AHEAD
    }

    fn names_a_regular_file(&self) -> bool {
        // An entry that can hold nothing and is not a link: a file.
        T::HOLDS_NOTHING.is_some() && !T::IS_LINK
    }

    fn paths(&self) -> Option<&dyn OwnsPaths> {
        Some(self)
    }
}

/// Every entry type owns the one path it declares (`path:`).
impl<T: EntryProvider> OwnsPaths for T {
    fn claim<'a>(&self, field: FieldLookup<'_, 'a>) -> Option<PathClaim<'a>> {
        path_claim(field, T::HOLDS_CHILDREN).map(|claim| PathClaim {
            links: T::IS_LINK,
            link_target: T::IS_LINK
                .then(|| field("target").and_then(Value::as_str))
                .flatten(),
            ..claim
        })
    }

    fn leaves_inside(
        &self,
        _field: FieldLookup<'_, '_>,
        _below: &Path,
        _is_dir: bool,
    ) -> Result<(), String> {
        T::HOLDS_NOTHING.map_or(Ok(()), |why| Err(why.to_owned()))
    }

    fn managed_paths(&self, d: &Declared<'_>) -> Vec<PathBuf> {
        declaration::<T>(d)
            .map(|typed| vec![typed.path().to_owned()])
            .unwrap_or_default()
    }

    fn declared_meta(&self, host: &Host, d: &Declared<'_>) -> Result<DeclaredMeta, String> {
        Ok(crate::common::meta::declared_meta(
            host,
            &d.resource.desired,
            T::DEFAULT_MODE,
        ))
    }
}

/// The claim of a declaration whose `path:` names one entry and whose
/// `ensure: absent` removes it (the entry types and Tree).
pub fn path_claim<'a>(field: FieldLookup<'_, 'a>, holds_children: bool) -> Option<PathClaim<'a>> {
    let path = field("path")?.as_str()?;
    let present = field("ensure").and_then(Value::as_str) != Some("absent");
    Some(PathClaim {
        field: "path",
        path,
        present,
        holds_children,
        links: false,
        link_target: None,
    })
}
