//! The typed contract every resource type implements, and the blanket impl
//! that makes each of them a [`Provider`] for the engine and the catalogue.
//!
//! A kind names its parsed declaration ([`Kind::Declaration`]) and what it
//! carries from staging to activation ([`Kind::Staging`]); it never sees
//! `&dyn Any`. The blanket impl parses once ([`Provider::declare`]; in the
//! agent the declaration is held by the resource,
//! `datum_core::HeldDeclaration`, and shared by every pass over its
//! catalogue while its declaration hash is the same) and downcasts for
//! every later step, so no kind parses `resource.desired` again during a
//! pass, nor in the agent's next one. A kind whose resources are one entry at a path
//! (File, Directory, Symlink) implements the narrower
//! [`crate::common::entry::EntryProvider`] instead, which is a `Kind`
//! through its own blanket impl.
//!
//! What a kind can do beyond these steps (own paths, order others, batch,
//! be activated, take a source folder, ...) is not repeated here: it is
//! [`Capabilities`], the supertrait of both `Kind` and [`Provider`], which
//! a kind implements once (`impl Capabilities for MyProvider`, empty when
//! it has none) and the blanket impl needs not forward.

use std::any::Any;
use std::sync::Arc;

use datum_core::{Diff, Observed, Resource};
use datum_host::Host;
use serde_json::Value;

use crate::{
    Activated, Capabilities, Declared, FieldError, Planned, Provider, ProviderError, Refusal,
    Staged, Staging,
};

/// One resource type in typed form. See [`Provider`] for what each step
/// means; here every step gets the kind's own declaration type. What it
/// can do beyond the steps is its [`Capabilities`].
pub trait Kind: Capabilities + Send + Sync {
    /// The manifest `type:`.
    const KIND: &'static str;
    /// The declaration as the steps use it (fields parsed and checked).
    /// Held beside the resource once parsed and shared by every pass;
    /// `Clone` for the pass that writes into it (see [`Declared::get_mut`]).
    type Declaration: Clone + Send + Sync + 'static;
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

    fn declare<'r>(&self, resource: &'r Resource) -> Result<Declared<'r>, ProviderError> {
        // Parsed once: a declaration the resource holds for what it
        // declares now is shared, not parsed again (one of another type,
        // made by another provider of the same kind name, is not used).
        let hash = &resource.declaration_hash;
        if let Some(held) = resource.held.get(hash)
            && (*held).is::<T::Declaration>()
        {
            return Ok(Declared::shared(resource, held));
        }
        let declaration: Arc<dyn Any + Send + Sync> = Arc::new(Kind::declare(self, resource)?);
        resource.held.hold(hash, Arc::clone(&declaration));
        Ok(Declared::shared(resource, declaration))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FieldLookup;

    /// A kind that answers each capability it has once, in its own
    /// `impl Capabilities`, and nothing else about them.
    struct Odd;

    impl Capabilities for Odd {
        fn takes_content(&self) -> bool {
            true
        }
        fn takes_validator(&self) -> bool {
            false
        }
        fn owns_subtree(&self) -> bool {
            true
        }
        fn names_a_regular_file(&self) -> bool {
            true
        }
        fn stages_ahead(&self) -> bool {
            true
        }
        fn sensitive_fields(&self) -> &'static [&'static str] {
            &["secret"]
        }
        fn check_resource_name(&self, _field: FieldLookup<'_, '_>, name: &str) -> Option<String> {
            Some(format!("{name} is odd"))
        }
    }

    impl Kind for Odd {
        const KIND: &'static str = "Odd";
        type Declaration = ();
        type Written = serde_json::Value;
        type Staging = Planned;

        fn check_fields(&self, _desired: &Value) -> Result<(), Vec<FieldError>> {
            Ok(())
        }
        fn declare(&self, _resource: &Resource) -> Result<(), ProviderError> {
            Ok(())
        }
        fn observe(&self, _: &Host, _: &Resource, _: &()) -> Result<Observed, ProviderError> {
            Ok(Observed::absent())
        }
        fn plan(&self, _resource: &Resource, _d: &(), _observed: &Observed) -> Diff {
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
            Ok(planned(observed, diff))
        }
        fn activate(
            &self,
            _host: &Host,
            _resource: &Resource,
            _d: &(),
            _staging: Planned,
        ) -> Result<Activated<Planned>, ProviderError> {
            Ok(Activated::Done)
        }
    }

    /// What the engine, the catalogue and the check ask of a `&dyn
    /// Provider` is what the kind said once in its `impl Capabilities`:
    /// nothing between them forwards (or forgets to forward) a capability,
    /// and what it does not say keeps the default (a default that follows
    /// another answer, as `takes_file_validator` follows `takes_validator`,
    /// follows the kind's).
    #[test]
    fn a_capability_a_kind_gives_once_is_what_its_provider_answers() {
        let p: &dyn Provider = &Odd;
        assert_eq!(p.kind(), "Odd");
        assert!(p.takes_content());
        assert!(!p.takes_validator());
        assert!(!p.takes_file_validator());
        assert!(p.owns_subtree());
        assert!(p.names_a_regular_file());
        assert!(p.stages_ahead());
        assert_eq!(p.sensitive_fields(), ["secret"]);
        assert_eq!(
            p.check_resource_name(&|_| None, "x").as_deref(),
            Some("x is odd")
        );
        assert!(p.exclusive_claims(&|_| None, "x").is_empty());
        assert!(p.paths().is_none());
        assert!(p.ordering().is_none());
        assert!(p.batching().is_none());
        assert!(p.activation().is_none());
        assert!(p.source_folder().is_none());
        assert!(p.fingerprints().is_none());
        assert!(p.extra_findings().is_none());
    }
}
