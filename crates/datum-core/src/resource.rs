//! One compiled catalogue entry: a resource declaration after layering,
//! rendering and checking, ready for a pass.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::{Content, Desired, Origin, ResourceId};

/// The class a resource has when its documents name none (the drift
/// classes of `datum.yaml` give every other class its settings; this one
/// exists whether declared or not).
pub const DEFAULT_CLASS: &str = "normal";

/// A resource as the engine sees it.
///
/// Engine-owned settings (the envelope: `requires`, `class`, `sensitive`,
/// `validate`) are kept apart from the provider's own fields in `desired`, so a
/// provider never has to know about dependency ordering or secrecy.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Resource {
    pub id: ResourceId,
    /// The provider's fields after layering (for File: path, owner, group, mode,
    /// ensure; the content fields `content`/`source`/`template` are resolved
    /// into [`Resource::content`] and removed from here).
    pub desired: Desired,
    /// Rendered content, for resources that declare some.
    pub content: Option<Content>,
    pub requires: Vec<ResourceId>,
    pub class: String,
    /// Whether the resource's values are secret: its own `sensitive: true`,
    /// or a field its kind calls sensitive is declared (a User's
    /// `password_hash`). Content, digests and validator output of a
    /// sensitive resource are never shown.
    pub sensitive: bool,
    /// Whether `sensitive` comes only from such a field, not from the
    /// resource's own `sensitive: true`: then only that field's value is
    /// hidden among its field differences (`datum check` shows a User's
    /// shell, never its hash). `false` by default, which hides every field
    /// of a sensitive resource.
    #[serde(default)]
    pub sensitive_by_field_only: bool,
    /// Name of a validator from the program's registry (never a command line).
    pub validate: Option<String>,
    /// The document that declared the resource (the last layer that touched it).
    pub origin: Origin,
    /// For `catalogue --explain`: the layer and position each field came
    /// from, or, for a field a later layer removed (set to null), where it
    /// was removed (then it is not in `desired`; `content`: no content).
    pub field_origins: BTreeMap<String, Origin>,
    /// Hash of everything declared about the resource (its id, fields,
    /// content checksum, validator, sensitivity and explicit requirements;
    /// the catalogue computes it): when it differs from the one recorded at
    /// the last verified apply, a change is intentional; when equal, it is
    /// corrective.
    pub declaration_hash: String,
    /// The kind's parsed declaration of this resource, made at its first
    /// use and kept for every later pass (see [`HeldDeclaration`]). Never
    /// serialised, empty in a new resource (`Default::default()`).
    #[serde(skip)]
    pub held: HeldDeclaration,
}

impl Resource {
    /// A resource with just an id and its desired fields: no content, no
    /// requirements, class `normal`, not sensitive, no validator, no origin.
    /// What tests and hand-built catalogues start from (struct update syntax
    /// sets the rest); the catalogue fills every field itself.
    pub fn new(id: ResourceId, desired: impl Into<Desired>) -> Self {
        Resource {
            id,
            desired: desired.into(),
            content: None,
            requires: Vec::new(),
            class: DEFAULT_CLASS.to_owned(),
            sensitive: false,
            sensitive_by_field_only: false,
            validate: None,
            origin: Origin::default(),
            field_origins: BTreeMap::new(),
            declaration_hash: String::new(),
            held: HeldDeclaration::default(),
        }
    }

    /// A desired string field, if present.
    pub fn desired_str(&self, field: &str) -> Option<&str> {
        self.desired.get(field).and_then(|v| v.as_str())
    }
}

/// A resource's declaration in its kind's typed form (opaque here: only the
/// kind that made it reads it, through `datum_providers::Declared`), parsed
/// once and held beside the resource, so every pass over one loaded
/// catalogue (the agent's) uses it instead of parsing `desired` again.
///
/// It is held for the [`Resource::declaration_hash`] it was made for, and
/// handed out only while the resource still has that hash: a resource
/// whose declared fields, content, id or requirements changed since (its
/// hash recomputed, as the compiler and the snapshot loader do) is declared
/// again, and a resource with no hash (built by hand) is never held for at
/// all. A clone shares the held declaration and whether it holds (a
/// catalogue built from a subset of another keeps both); it is never
/// compared.
///
/// Held only by a resource made to hold ([`HeldDeclaration::start_holding`]):
/// the resources of a catalogue that is kept for many passes and was made
/// so (`datum_catalog::Compiler::holding_declarations` for a compile,
/// `datum_catalog::Catalogue::hold_declarations` for one loaded from its
/// snapshot: `datum agent`'s). A new resource (`Default::default()`,
/// [`Resource::new`], one deserialised) holds nothing: a one-shot command
/// (`datum apply`, `plan`, `check`) parses each declaration once anyway,
/// in its one pass, and its pass lets a converged resource's declaration
/// go as soon as it is observed, so a no-op apply of 20,000 Files does not
/// keep 20,000 parsed declarations (about 8 MiB, measured in
/// docs/benchmarks.md) to the end for nothing. Two catalogues in one
/// process, one holding and one not, do not affect each other.
#[derive(Default)]
pub struct HeldDeclaration(Mutex<Cell>);

/// What a [`HeldDeclaration`] holds. `Holding`'s hash is empty while it
/// holds no declaration (`declaration` is `None` then): two variants, not
/// three, keep it the size of the `Option` it was (an empty `Box<str>`
/// does not allocate).
#[derive(Default, Clone)]
enum Cell {
    /// Holds nothing, ever: a one-shot command's resource.
    #[default]
    Off,
    /// Holds the declaration made for `hash`, once one is made.
    Holding {
        hash: Box<str>,
        declaration: Option<AnyDeclaration>,
    },
}

/// A declaration in whatever type its kind gives it.
pub type AnyDeclaration = Arc<dyn Any + Send + Sync>;

impl HeldDeclaration {
    /// Makes this resource hold its declaration once one is made (a
    /// resource of a catalogue kept for many passes). One held already
    /// stays held.
    pub fn start_holding(&mut self) {
        let cell = self.0.get_mut().unwrap_or_else(PoisonError::into_inner);
        if matches!(cell, Cell::Off) {
            *cell = Cell::Holding {
                hash: Box::default(),
                declaration: None,
            };
        }
    }

    /// Whether this resource holds its declaration once one is made
    /// ([`HeldDeclaration::start_holding`]).
    pub fn holds(&self) -> bool {
        let cell = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        matches!(*cell, Cell::Holding { .. })
    }

    /// The declaration held for `declaration_hash`, if one is (`None` for
    /// an empty hash).
    pub fn get(&self, declaration_hash: &str) -> Option<AnyDeclaration> {
        if declaration_hash.is_empty() {
            return None;
        }
        let cell = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match &*cell {
            Cell::Holding {
                hash,
                declaration: Some(declaration),
            } if &**hash == declaration_hash => Some(Arc::clone(declaration)),
            _ => None,
        }
    }

    /// Holds `declaration`, made for `declaration_hash`, in place of any
    /// other (nothing is held for an empty hash, nor by a resource that
    /// does not hold: [`HeldDeclaration::start_holding`]).
    pub fn hold(&self, declaration_hash: &str, declaration: AnyDeclaration) {
        if declaration_hash.is_empty() {
            return;
        }
        let mut cell = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Cell::Holding { .. } = &*cell {
            *cell = Cell::Holding {
                hash: declaration_hash.into(),
                declaration: Some(declaration),
            };
        }
    }

    /// Whether a declaration is held for `declaration_hash`.
    pub fn is_held(&self, declaration_hash: &str) -> bool {
        self.get(declaration_hash).is_some()
    }
}

impl Clone for HeldDeclaration {
    fn clone(&self) -> Self {
        let held = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        Self(Mutex::new(held.clone()))
    }
}

impl std::fmt::Debug for HeldDeclaration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HeldDeclaration(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(held: &HeldDeclaration, hash: &str) -> Option<u32> {
        held.get(hash)
            .and_then(|d| d.downcast_ref::<u32>().copied())
    }

    /// A declaration is handed out only for the hash it was made for: a
    /// resource that declares something else since (its hash recomputed)
    /// is declared again, and one without a hash (built by hand, mutated
    /// freely) never holds one. A clone shares it; serde never carries it.
    #[test]
    fn a_held_declaration_is_for_the_hash_it_was_made_for_only() {
        let mut r = Resource::new(
            ResourceId::new("File", "a"),
            serde_json::json!({"path": "/a"}),
        );
        // A resource not made to hold (every one-shot command's) holds
        // nothing: its one pass lets each declaration go.
        r.declaration_hash = "h0".to_owned();
        r.held.hold(&r.declaration_hash, Arc::new(0u32));
        assert!(!r.held.holds());
        assert!(!r.held.is_held("h0"), "held with holding off");
        let mut other = r.clone();
        r.held.start_holding();
        assert!(r.held.holds());
        assert!(!r.held.is_held("h0"), "nothing held before it holds");
        r.declaration_hash = String::new();
        r.held.hold(&r.declaration_hash, Arc::new(1u32));
        assert_eq!(held(&r.held, ""), None, "no hash: nothing held");
        r.declaration_hash = "h1".to_owned();
        assert!(!r.held.is_held(&r.declaration_hash));
        r.held.hold(&r.declaration_hash, Arc::new(2u32));
        assert_eq!(held(&r.held, "h1"), Some(2));
        let copy = r.clone();
        assert_eq!(held(&copy.held, "h1"), Some(2), "a clone shares it");
        r.held.start_holding();
        assert_eq!(held(&r.held, "h1"), Some(2), "made holding again: kept");
        r.declaration_hash = "h2".to_owned();
        assert_eq!(held(&r.held, &r.declaration_hash), None, "changed since");
        r.held.hold(&r.declaration_hash, Arc::new(3u32));
        assert_eq!(held(&r.held, "h2"), Some(3));
        assert_eq!(held(&r.held, "h1"), None);
        assert_eq!(held(&copy.held, "h1"), Some(2), "the clone keeps its own");
        let text = serde_json::to_string(&r).unwrap();
        assert!(!text.contains("held"), "{text}");
        let back: Resource = serde_json::from_str(&text).unwrap();
        assert_eq!(back.declaration_hash, "h2");
        assert!(!back.held.is_held("h2"), "loaded: declared at first use");
        assert!(!back.held.holds(), "loaded: holds once made to");
        // The resource that never held still does not, whatever holds
        // beside it.
        other.declaration_hash = "h1".to_owned();
        other.held.hold("h1", Arc::new(4u32));
        assert!(!other.held.holds());
        assert_eq!(held(&other.held, "h1"), None, "not made to hold");
    }
}
