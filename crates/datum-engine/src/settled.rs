//! Whether, in a plan, what a resource observed *around* itself is what the
//! apply will find when its turn comes (see
//! `Provider::refuses_unless_changed_first`): its missing parent, what is
//! inside a folder declared absent, the excluded entries a purge must keep.
//!
//! The apply changes the host in order, so an earlier change may alter any
//! of that: a batched kind (a Package: every batch is applied before the
//! first resource) creates and empties folders anywhere, and so may a kind
//! that acts beyond the paths it declares (a Service started, a User); a
//! resource on a related path (an ancestor, the same path, something
//! inside) changes what is there, and anything the resource requires may
//! prepare it. Only with none of them pending does a plan call such a
//! change one that would fail; otherwise it stays pending and the apply
//! decides. Nothing here is consulted, or costs anything, unless a provider
//! found such a refusal; a plan records the changed paths of path kinds as
//! it goes (none in a converged pass).
//!
//! A refusal may depend on more than what is around its own paths (its
//! [`Reach`]): an owner no account file knows on the account files (which
//! a User, a Group or a Package makes, all changes beyond declared paths,
//! or a File writing them), a hard-linked file on its other names, which
//! may be anywhere (any earlier change of a path keeps it pending).
//!
//! Paths are compared as declared, and a link the repository lets the walk
//! follow (`boundary.follow_links`: `/var/run -> /run`) gives one folder two
//! spellings: a Directory `/run/app` makes the parent of a File
//! `/var/run/app/pid`. So a change to a path through such a link, or any
//! change before a resource whose own path goes through one, keeps the
//! refusal pending.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use datum_core::{Boundary, Outcome, Resource, ResourceId};
use datum_providers::Reach;

use crate::observe::{Bound, Observations};

/// What a plan has met so far that could change the host before a later
/// resource's turn in the apply.
#[derive(Debug, Default)]
pub(crate) struct Settled {
    /// A resource of a batched kind would change (anywhere in the pass).
    batches_change: bool,
    /// An earlier resource of a kind without declared paths would change.
    beyond_paths_changed: bool,
    /// The declared paths of earlier path-kind resources that would change.
    changed_paths: BTreeSet<PathBuf>,
    /// The links the walk follows (`boundary.follow_links`, declared).
    followed_links: Vec<PathBuf>,
    /// An earlier changed path goes through one of `followed_links`.
    through_link_changed: bool,
}

impl Settled {
    /// Before a plan's loop: whether any batched resource would change
    /// (one whose observation failed counts, as it may still be batched).
    /// `boundary`: what the walk follows (see the module header).
    pub(crate) fn new(
        selected: &[&Resource],
        observations: &Observations<'_>,
        boundary: &Boundary,
    ) -> Self {
        let batches_change = (0..selected.len()).any(|i| {
            observations.bound(i).is_some_and(|b| {
                b.provider.batching().is_some()
                    && observations
                        .peek(i, |o| b.provider.plan(&b.declared, o).action().is_change())
                        .unwrap_or(true)
            })
        });
        Settled {
            batches_change,
            followed_links: boundary.follow_links.clone(),
            ..Settled::default()
        }
    }

    /// Records one resource's step (its binding, when it has one).
    pub(crate) fn record(
        &mut self,
        bound: Option<&Bound<'_>>,
        action: datum_core::Action,
        outcome: &Outcome,
    ) {
        let may_change = match outcome {
            Outcome::WouldChange { .. } | Outcome::Changed { .. } => true,
            // A failure may have changed part of it (a Tree's walk).
            Outcome::Failed { .. } => action.is_change(),
            _ => false,
        };
        if !may_change {
            return;
        }
        match bound.and_then(|b| Some((b.provider.paths()?, &b.declared))) {
            Some((paths, declared)) => {
                for path in paths.managed_paths(declared) {
                    self.through_link_changed |= self.through_link(&path);
                    self.changed_paths.insert(path);
                }
            }
            // A kind without paths, or a change whose binding the loop no
            // longer holds (declared again this turn): anything may change.
            None => self.beyond_paths_changed = true,
        }
    }

    /// Whether nothing before `resource` (whose declared paths are
    /// `paths`) would change what its refusal depends on: what it observed
    /// around those paths, and what `reach` adds (see [`Reach`]).
    pub(crate) fn holds_for(
        &self,
        resource: &Resource,
        paths: &[PathBuf],
        reach: Reach,
        changed: &HashSet<ResourceId>,
    ) -> bool {
        let also: &[&str] = match reach {
            Reach::Around => &[],
            Reach::AlsoAround(also) => also,
            // Any earlier change of a path may be the one.
            Reach::AnyPath if !self.changed_paths.is_empty() => return false,
            Reach::AnyPath => &[],
        };
        let related = paths
            .iter()
            .map(PathBuf::as_path)
            .chain(also.iter().map(Path::new));
        // Through a followed link, the declared paths do not say what is
        // related: any earlier change of a path may be.
        let spelled_twice = self.through_link_changed
            || (!self.changed_paths.is_empty() && related.clone().any(|p| self.through_link(p)));
        !self.batches_change
            && !self.beyond_paths_changed
            && !spelled_twice
            && !resource.requires.iter().any(|dep| changed.contains(dep))
            && !related.into_iter().any(|p| self.related_changed(p))
    }

    /// Whether `path` is, or goes through, a link the walk follows.
    fn through_link(&self, path: &Path) -> bool {
        self.followed_links
            .iter()
            .any(|link| path.starts_with(link))
    }

    /// Whether a changed path is `path`, one of its ancestors, or inside it.
    fn related_changed(&self, path: &Path) -> bool {
        if path.ancestors().any(|a| self.changed_paths.contains(a)) {
            return true;
        }
        self.changed_paths
            .range::<Path, _>((std::ops::Bound::Excluded(path), std::ops::Bound::Unbounded))
            .next()
            .is_some_and(|next| next.starts_with(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_path_is_related_as_ancestor_itself_or_inside() {
        let mut s = Settled::default();
        s.changed_paths.insert(PathBuf::from("/srv/a"));
        for related in ["/srv/a", "/srv/a/b/c", "/srv"] {
            assert!(s.related_changed(Path::new(related)), "{related}");
        }
        for unrelated in ["/srv/ab", "/srv/b", "/etc"] {
            assert!(!s.related_changed(Path::new(unrelated)), "{unrelated}");
        }
    }

    #[test]
    fn a_refusal_holds_until_a_change_within_its_reach() {
        let r = Resource::new(ResourceId::new("Thing", "t"), serde_json::json!({}));
        let own = [PathBuf::from("/srv/app.conf")];
        let accounts = Reach::AlsoAround(&["/etc/passwd", "/etc/group"]);
        let holds = |s: &Settled, reach| s.holds_for(&r, &own, reach, &HashSet::new());
        let mut s = Settled::default();
        for reach in [Reach::Around, accounts, Reach::AnyPath] {
            assert!(holds(&s, reach), "nothing changed: {reach:?}");
        }
        // An unrelated path: only a refusal that may depend on any path
        // (another name of a hard-linked file) waits for the apply.
        s.changed_paths.insert(PathBuf::from("/var/www/other"));
        assert!(holds(&s, Reach::Around) && holds(&s, accounts));
        assert!(!holds(&s, Reach::AnyPath));
        // The account files (or a folder above them).
        for changed in ["/etc/passwd", "/etc"] {
            let mut s = Settled::default();
            s.changed_paths.insert(PathBuf::from(changed));
            assert!(holds(&s, Reach::Around), "{changed}");
            assert!(!holds(&s, accounts), "{changed}");
        }
    }
}
