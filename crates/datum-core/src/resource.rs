//! One compiled catalogue entry: a resource declaration after layering,
//! rendering and checking, ready for a pass.

use std::collections::BTreeMap;

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
    /// Hash of everything declared about the resource (fields + content hash):
    /// when it differs from the one recorded at the last verified apply, a
    /// change is intentional; when equal, it is corrective.
    pub declaration_hash: String,
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
        }
    }

    /// A desired string field, if present.
    pub fn desired_str(&self, field: &str) -> Option<&str> {
        self.desired.get(field).and_then(|v| v.as_str())
    }
}
