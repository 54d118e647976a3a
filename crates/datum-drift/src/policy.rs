//! The decisions behind the reconciliation policies, kept pure so they are
//! tested without a host: which resources a quarantine excludes from apply,
//! when a resource that keeps drifting back stops being reverted (flap
//! detection), and the patch that lets a declaration follow an accepted
//! change.
//!
//! Must not: change the host or the store (the `datum` binary does, through
//! the engine and `datum_store`).

use std::collections::HashSet;

use datum_core::ResourceId;
use datum_store::{Quarantine, QuarantineTarget};

/// The resources an apply must skip: every quarantined resource, and all of
/// them when the host itself is quarantined.
pub fn skip_set<'a>(
    quarantines: &[Quarantine],
    resources: impl IntoIterator<Item = &'a ResourceId>,
) -> HashSet<ResourceId> {
    let host = quarantines
        .iter()
        .any(|q| q.target == QuarantineTarget::Host);
    let named: HashSet<&ResourceId> = quarantines
        .iter()
        .filter_map(|q| match &q.target {
            QuarantineTarget::Resource(id) => Some(id),
            QuarantineTarget::Host => None,
        })
        .collect();
    resources
        .into_iter()
        .filter(|id| host || named.contains(id))
        .cloned()
        .collect()
}

/// What to do with a drifted resource of a `revert` class, given how many
/// reverts (this one included) fell within the class's flap window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlapDecision {
    /// Revert it.
    Revert,
    /// It drifted back `limit` times already: leave it as it is this time and
    /// report it (something on the host keeps rewriting it).
    BackOff,
    /// Still drifting after the back-off: quarantine it for a person.
    Escalate,
}

/// `count` reverts (this attempt included) within the window; `limit` from
/// the class (`flap_limit`, default 3).
pub fn flap_decision(count: u64, limit: u64) -> FlapDecision {
    if count <= limit {
        FlapDecision::Revert
    } else if count == limit + 1 {
        FlapDecision::BackOff
    } else {
        FlapDecision::Escalate
    }
}

/// A unified diff that turns `declared` into `observed`, with the
/// repository-relative `path` in both headers (`a/` and `b/` prefixes, for
/// `git apply` or `patch -p1`). `None` when either side is not text.
pub fn content_patch(path: &str, declared: &[u8], observed: &[u8]) -> Option<String> {
    let before = std::str::from_utf8(declared).ok()?;
    let after = std::str::from_utf8(observed).ok()?;
    Some(
        similar::TextDiff::from_lines(before, after)
            .unified_diff()
            .context_radius(3)
            .header(&format!("a/{path}"), &format!("b/{path}"))
            .to_string(),
    )
}

/// A file name for a resource's patch: `File-motd.patch` (anything but
/// letters, digits, `.`, `_` and `-` becomes `_`).
pub fn patch_file_name(id: &ResourceId, extension: &str) -> String {
    let safe: String = format!("{}-{}", id.kind, id.name)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{safe}.{extension}")
}

#[cfg(test)]
mod tests {
    use datum_store::QuarantineSource;

    use super::*;

    fn q(target: QuarantineTarget) -> Quarantine {
        Quarantine {
            target,
            reason: "r".into(),
            source: QuarantineSource::Person,
            since: 0,
        }
    }

    #[test]
    fn skip_set_names_quarantined_resources_or_all_for_the_host() {
        let a = ResourceId::new("File", "a");
        let b = ResourceId::new("File", "b");
        let one = skip_set(&[q(QuarantineTarget::Resource(a.clone()))], [&a, &b]);
        assert_eq!(one, HashSet::from([a.clone()]));
        let all = skip_set(&[q(QuarantineTarget::Host)], [&a, &b]);
        assert_eq!(all.len(), 2);
        assert!(skip_set(&[], [&a]).is_empty());
    }

    #[test]
    fn flapping_backs_off_then_escalates() {
        assert_eq!(flap_decision(1, 3), FlapDecision::Revert);
        assert_eq!(flap_decision(3, 3), FlapDecision::Revert);
        assert_eq!(flap_decision(4, 3), FlapDecision::BackOff);
        assert_eq!(flap_decision(5, 3), FlapDecision::Escalate);
    }

    #[test]
    fn patch_applies_to_the_declared_side() {
        let p = content_patch("base/files/motd", b"hello\n", b"hello\nworld\n").unwrap();
        assert!(p.starts_with("--- a/base/files/motd\n+++ b/base/files/motd\n"));
        assert!(p.contains("+world"));
        assert!(content_patch("x", &[0xff], b"a").is_none());
        assert_eq!(
            patch_file_name(&ResourceId::new("File", "a/b c"), "patch"),
            "File-a_b_c.patch"
        );
    }
}
