//! Test-only builders shared by the unit tests of several kinds.

use datum_core::{Content, Origin, Resource, ResourceId};

/// A compiled resource as the catalogue would hand it over.
pub fn resource(kind: &str, desired: serde_json::Value, content: Option<Content>) -> Resource {
    Resource {
        id: ResourceId::new(kind, "test"),
        desired,
        content,
        requires: Vec::new(),
        class: String::new(),
        sensitive: false,
        validate: None,
        origin: Origin::default(),
        field_origins: Default::default(),
        declaration_hash: String::new(),
    }
}
