//! Test-only builders shared by the unit tests of several kinds.

use datum_core::{Content, Resource, ResourceId};

/// A compiled resource as the catalogue would hand it over.
pub fn resource(kind: &str, desired: serde_json::Value, content: Option<Content>) -> Resource {
    Resource {
        content,
        ..Resource::new(ResourceId::new(kind, "test"), desired)
    }
}
