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

/// `path` holds `declared` and is root's, mode 0644: the owner and mode
/// went to the declared bytes only. Else the message starts with `what`,
/// followed by the owner and mode the file got.
#[track_caller]
pub fn assert_declared_bytes_are_roots(path: &std::path::Path, declared: &[u8], what: &str) {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(path).unwrap();
    assert_eq!(
        std::fs::read(path).unwrap(),
        declared,
        "{what} {}:{} {:o}",
        meta.uid(),
        meta.gid(),
        meta.mode() & 0o7777
    );
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o7777),
        (0, 0, 0o644)
    );
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
