//! The typed contract every resource type implements, and the blanket impl
//! that makes each of them a [`Provider`] for the engine and the catalogue.
//!
//! A kind names its parsed declaration ([`Kind::Declaration`]) and what it
//! carries from staging to activation ([`Kind::Staging`]); it never sees
//! `&dyn Any`. The blanket impl parses once ([`Provider::declare`]) and
//! downcasts for every later step, so no kind parses `resource.desired`
//! again during a pass. A kind whose resources are one entry at a path
//! (File, Directory, Symlink) implements the narrower
//! [`crate::common::entry::EntryProvider`] instead, which is a `Kind`
//! through its own blanket impl.

use datum_core::{Diff, Observed, Resource};
use datum_host::Host;
use serde_json::Value;

use crate::{
    Activated, Activates, Batches, Declared, Exclusive, ExtraFindings, FieldError, FieldLookup,
    Fingerprints, OrdersOthers, OwnsPaths, Planned, Provider, ProviderError, Refusal, Staged,
    Staging, TakesSourceFolder,
};

/// One resource type in typed form. See [`Provider`] for what each step
/// means; here every step gets the kind's own declaration type.
pub trait Kind: Send + Sync {
    /// The manifest `type:`.
    const KIND: &'static str;
    /// The declaration as the steps use it (fields parsed and checked).
    type Declaration: Send + Sync + 'static;
    /// The declaration as written in a manifest, for its JSON Schema (see
    /// [`Provider::declaration_schema`]).
    type Written: schemars::JsonSchema;
    /// What `stage` hands `activate` (a staged copy, or [`Planned`] for a
    /// kind with nothing to stage).
    type Staging: Send + 'static;

    /// Checks declared fields without host access (see [`Provider::check`]).
    fn check_fields(&self, desired: &Value) -> Result<(), Vec<FieldError>>;

    /// Parses the declaration (see [`Provider::declare`]).
    fn declare(&self, resource: &Resource) -> Result<Self::Declaration, ProviderError>;

    /// See [`Provider::observe_declared`].
    fn observe(
        &self,
        host: &Host,
        resource: &Resource,
        d: &Self::Declaration,
    ) -> Result<Observed, ProviderError>;

    /// See [`Provider::plan`]. Pure.
    fn plan(&self, resource: &Resource, d: &Self::Declaration, observed: &Observed) -> Diff;

    /// See [`Provider::refuses`]. Pure.
    fn refuses(&self, _d: &Self::Declaration, _observed: &Observed) -> Option<String> {
        None
    }

    /// See [`Provider::observed_identity`]. Pure.
    fn observed_identity(&self, _observed: &Observed) -> Option<String> {
        None
    }

    /// See [`Provider::refuses_unless_changed_first`]. Pure.
    fn refuses_unless_changed_first(
        &self,
        _d: &Self::Declaration,
        _observed: &Observed,
    ) -> Option<Refusal> {
        None
    }

    /// See [`Provider::stage`].
    fn stage(
        &self,
        host: &Host,
        resource: &Resource,
        d: &Self::Declaration,
        observed: &Observed,
        diff: &Diff,
    ) -> Result<Self::Staging, ProviderError>;

    /// See [`Provider::validation_target`]; nothing by default.
    fn validation_target<'s>(&self, _staging: &'s Self::Staging) -> Option<Staged<'s>> {
        None
    }

    /// See [`Provider::activate`].
    fn activate(
        &self,
        host: &Host,
        resource: &Resource,
        d: &Self::Declaration,
        staging: Self::Staging,
    ) -> Result<Activated<Self::Staging>, ProviderError>;

    /// See [`Provider::discard`]; dropping the staging value by default
    /// (a staged copy removes itself when dropped).
    fn discard(&self, staging: Self::Staging) {
        drop(staging);
    }

    /// See [`Provider::verify_declared`]; observe and plan again by default.
    fn verify(
        &self,
        host: &Host,
        resource: &Resource,
        d: &Self::Declaration,
    ) -> Result<(Observed, Diff), ProviderError> {
        let observed = Kind::observe(self, host, resource, d)?;
        let diff = Kind::plan(self, resource, d, &observed);
        Ok((observed, diff))
    }

    /// See [`Provider::takes_content`].
    fn takes_content(&self) -> bool {
        false
    }
    /// See [`Provider::takes_validator`].
    fn takes_validator(&self) -> bool {
        true
    }
    /// See [`Provider::takes_file_validator`].
    fn takes_file_validator(&self) -> bool {
        Kind::takes_validator(self)
    }
    /// See [`Provider::paths`].
    fn paths(&self) -> Option<&dyn OwnsPaths> {
        None
    }
    /// See [`Provider::ordering`].
    fn ordering(&self) -> Option<&dyn OrdersOthers> {
        None
    }
    /// See [`Provider::batching`].
    fn batching(&self) -> Option<&dyn Batches> {
        None
    }
    /// See [`Provider::activation`].
    fn activation(&self) -> Option<&dyn Activates> {
        None
    }
    /// See [`Provider::source_folder`].
    fn source_folder(&self) -> Option<&dyn TakesSourceFolder> {
        None
    }
    /// See [`Provider::fingerprints`].
    fn fingerprints(&self) -> Option<&dyn Fingerprints> {
        None
    }
    /// See [`Provider::owns_subtree`].
    fn owns_subtree(&self) -> bool {
        false
    }
    /// See [`Provider::names_a_regular_file`].
    fn names_a_regular_file(&self) -> bool {
        false
    }
    /// See [`Provider::stages_ahead`].
    fn stages_ahead(&self) -> bool {
        false
    }
    /// See [`Provider::sensitive_fields`].
    fn sensitive_fields(&self) -> &'static [&'static str] {
        &[]
    }
    /// See [`Provider::exclusive_claims`].
    fn exclusive_claims(&self, _field: FieldLookup<'_, '_>, _name: &str) -> Vec<Exclusive> {
        Vec::new()
    }
    /// See [`Provider::check_resource_name`].
    fn check_resource_name(&self, _field: FieldLookup<'_, '_>, _name: &str) -> Option<String> {
        None
    }
    /// See [`Provider::extra_findings`].
    fn extra_findings(&self) -> Option<&dyn ExtraFindings> {
        None
    }
}

/// The typed declaration a [`Declared`] holds for kind `T`; an error when
/// it was declared by another kind (a programming error in the caller).
pub fn declaration<'d, T: Kind>(d: &'d Declared<'_>) -> Result<&'d T::Declaration, ProviderError> {
    d.get::<T::Declaration>()
        .ok_or_else(|| ProviderError::Invalid {
            field: "type".to_owned(),
            message: format!(
                "{} was declared by another kind than {}",
                d.resource.id,
                T::KIND
            ),
        })
}

/// [`declaration`], mutably (for a batch, see [`crate::Batches`]).
pub fn declaration_mut<'d, T: Kind>(
    d: &'d mut Declared<'_>,
) -> Result<&'d mut T::Declaration, ProviderError> {
    let id = d.resource.id.to_string();
    d.get_mut::<T::Declaration>()
        .ok_or_else(|| ProviderError::Invalid {
            field: "type".to_owned(),
            message: format!("{id} was declared by another kind than {}", T::KIND),
        })
}

/// A kind with nothing to stage: `stage` returns the plan, `activate` acts
/// on it.
pub fn planned(observed: &Observed, diff: &Diff) -> Planned {
    Planned {
        observed: observed.clone(),
        diff: diff.clone(),
    }
}

impl<T: Kind> Provider for T {
    fn kind(&self) -> &'static str {
        T::KIND
    }

    fn check(&self, desired: &Value) -> Result<(), Vec<FieldError>> {
        T::check_fields(self, desired)
    }

    fn declaration_schema(&self, generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <T::Written as schemars::JsonSchema>::json_schema(generator)
    }

    fn takes_content(&self) -> bool {
        Kind::takes_content(self)
    }

    fn takes_validator(&self) -> bool {
        Kind::takes_validator(self)
    }

    fn takes_file_validator(&self) -> bool {
        Kind::takes_file_validator(self)
    }

    fn paths(&self) -> Option<&dyn OwnsPaths> {
        Kind::paths(self)
    }

    fn ordering(&self) -> Option<&dyn OrdersOthers> {
        Kind::ordering(self)
    }

    fn batching(&self) -> Option<&dyn Batches> {
        Kind::batching(self)
    }

    fn activation(&self) -> Option<&dyn Activates> {
        Kind::activation(self)
    }

    fn source_folder(&self) -> Option<&dyn TakesSourceFolder> {
        Kind::source_folder(self)
    }

    fn fingerprints(&self) -> Option<&dyn Fingerprints> {
        Kind::fingerprints(self)
    }

    fn owns_subtree(&self) -> bool {
        Kind::owns_subtree(self)
    }

    fn names_a_regular_file(&self) -> bool {
        Kind::names_a_regular_file(self)
    }

    fn stages_ahead(&self) -> bool {
        Kind::stages_ahead(self)
    }

    fn sensitive_fields(&self) -> &'static [&'static str] {
        Kind::sensitive_fields(self)
    }

    fn exclusive_claims(&self, field: FieldLookup<'_, '_>, name: &str) -> Vec<Exclusive> {
        Kind::exclusive_claims(self, field, name)
    }

    fn check_resource_name(&self, field: FieldLookup<'_, '_>, name: &str) -> Option<String> {
        Kind::check_resource_name(self, field, name)
    }

    fn extra_findings(&self) -> Option<&dyn ExtraFindings> {
        Kind::extra_findings(self)
    }

    fn declare<'r>(&self, resource: &'r Resource) -> Result<Declared<'r>, ProviderError> {
        Ok(Declared::new(resource, Kind::declare(self, resource)?))
    }

    fn observe_declared(&self, host: &Host, d: &Declared<'_>) -> Result<Observed, ProviderError> {
        Kind::observe(self, host, d.resource, declaration::<T>(d)?)
    }

    fn plan(&self, d: &Declared<'_>, observed: &Observed) -> Diff {
        match declaration::<T>(d) {
            Ok(typed) => Kind::plan(self, d.resource, typed, observed),
            Err(_) => Diff::default(),
        }
    }

    fn refuses(&self, d: &Declared<'_>, observed: &Observed) -> Option<String> {
        Kind::refuses(self, declaration::<T>(d).ok()?, observed)
    }

    fn observed_identity(&self, observed: &Observed) -> Option<String> {
        Kind::observed_identity(self, observed)
    }

    fn refuses_unless_changed_first(
        &self,
        d: &Declared<'_>,
        observed: &Observed,
    ) -> Option<Refusal> {
        Kind::refuses_unless_changed_first(self, declaration::<T>(d).ok()?, observed)
    }

    fn stage(
        &self,
        host: &Host,
        d: &Declared<'_>,
        observed: &Observed,
        diff: &Diff,
    ) -> Result<Staging, ProviderError> {
        let typed = declaration::<T>(d)?;
        Kind::stage(self, host, d.resource, typed, observed, diff).map(Staging::new)
    }

    fn validation_target<'s>(&self, staging: &'s Staging) -> Option<Staged<'s>> {
        Kind::validation_target(self, staging.get::<T::Staging>()?)
    }

    fn activate(
        &self,
        host: &Host,
        d: &Declared<'_>,
        staging: Staging,
    ) -> Result<Activated, ProviderError> {
        let typed = declaration::<T>(d)?;
        let staging = staging
            .into_inner::<T::Staging>()
            .map_err(|_| ProviderError::Invalid {
                field: "type".to_owned(),
                message: format!(
                    "{} was staged by another kind than {}",
                    d.resource.id,
                    T::KIND
                ),
            })?;
        Ok(
            match Kind::activate(self, host, d.resource, typed, staging)? {
                Activated::Done => Activated::Done,
                Activated::Next(next) => Activated::Next(Staging::new(next)),
            },
        )
    }

    fn discard(&self, staging: Staging) {
        if let Ok(staging) = staging.into_inner::<T::Staging>() {
            Kind::discard(self, staging);
        }
    }

    fn verify_declared(
        &self,
        host: &Host,
        d: &Declared<'_>,
    ) -> Result<(Observed, Diff), ProviderError> {
        Kind::verify(self, host, d.resource, declaration::<T>(d)?)
    }
}
