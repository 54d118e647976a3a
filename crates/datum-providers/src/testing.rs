//! Test-only builders shared by the unit tests of several kinds.

use datum_core::{Content, Diff, Observed, Resource, ResourceId};

use crate::Provider;

/// A compiled resource as the catalogue would hand it over.
pub fn resource(kind: &str, desired: serde_json::Value, content: Option<Content>) -> Resource {
    Resource {
        content,
        ..Resource::new(ResourceId::new(kind, "test"), desired)
    }
}

/// What `provider` would change for `resource` as `observed`: the
/// declaration parsed, then planned (what a pass does in two steps). A
/// declaration that does not parse plans nothing.
pub fn diff(provider: &dyn Provider, resource: &Resource, observed: &Observed) -> Diff {
    match provider.declare(resource) {
        Ok(d) => provider.plan(&d, observed),
        Err(_) => Diff::default(),
    }
}
