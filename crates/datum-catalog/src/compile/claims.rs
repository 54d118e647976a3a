//! Path and exclusive claims: two resources managing one path, something
//! declared inside another resource's path or in Datum's own folder, and
//! two claiming what their kind manages alone (one account, one uid).

use super::Analysis;
use crate::graph;
use crate::merge::Merged;
use datum_core::ResourceId;
use datum_manifest::Diagnostic;
use datum_providers::PathClaim;
use std::collections::HashMap;

impl<'r> Analysis<'r> {
    /// The path a merged resource claims, by its kind's path capability.
    /// Its path is borrowed from the merged fields: the claims of every
    /// resource are held at once, at the compile's fullest (a copy of each
    /// path was ~15 MB of a 100,000-File compile's peak).
    pub(super) fn claim<'m>(&self, m: &'m Merged) -> Option<PathClaim<'m>> {
        let paths = self.providers[m.last_doc()]?.paths()?;
        let field = |k: &str| m.fields.get(k).map(|(v, _)| v);
        paths.claim(&field)
    }

    /// Two resources managing one path would fight on every pass.
    pub(super) fn check_paths(&mut self, merged: &[Merged]) {
        let claims: Vec<Option<PathClaim<'_>>> = merged.iter().map(|m| self.claim(m)).collect();
        // Keyed by the claims' paths, borrowed: no copy of each (this runs
        // at the compile's fullest, before the `desired` mappings go).
        let mut seen: HashMap<&str, usize> = HashMap::with_capacity(merged.len());
        for (i, m) in merged.iter().enumerate() {
            let Some(claim) = &claims[i] else {
                continue;
            };
            let key = claim.path.trim_end_matches('/');
            if is_datums_own(key) {
                let own = datum_host::lock::STATE_FOLDER;
                let message = format!(
                    "path `{}` is {}Datum's own folder {own} (the state store, the backups, the lock): nothing may be declared there",
                    claim.path,
                    if key == own { "" } else { "inside " },
                );
                self.diags.push(self.claim_error(m, claim, message));
            }
            if let Some(&prev) = seen.get(&key) {
                let message = format!(
                    "path `{}` is also managed by {}",
                    claim.path, merged[prev].id
                );
                self.diags.push(self.claim_error(m, claim, message));
            } else {
                seen.insert(key, i);
            }
        }
        // Something declared inside another resource's path: the outer
        // one's kind says whether it leaves that to others (a folder does, a
        // file holds nothing, a Tree manages what it does not exclude); and
        // nothing can be present inside a folder declared absent. Either
        // way the two would undo each other on every pass.
        let mut nearest = graph::NearestFolder::default();
        for (i, m) in merged.iter().enumerate() {
            let Some(claim) = &claims[i] else {
                continue;
            };
            let path = std::path::Path::new(claim.path.trim_end_matches('/'));
            let Some(o) = nearest.above(path, |at| seen.get(at.trim_end_matches('/')).copied())
            else {
                continue;
            };
            let Some(outer) = &claims[o] else {
                continue;
            };
            let outer_path = std::path::Path::new(outer.path.trim_end_matches('/'));
            let below = path.strip_prefix(outer_path).unwrap_or(path);
            let field = |k: &str| merged[o].fields.get(k).map(|(v, _)| v);
            let leaves = self.providers[merged[o].last_doc()]
                .and_then(|p| p.paths())
                .map_or(Ok(()), |p| {
                    p.leaves_inside(&field, below, claim.holds_children)
                });
            let through_link =
                outer.links && outer.present && !self.repo.settings.boundary.follows(outer_path);
            let message = match leaves {
                _ if through_link => format!(
                    "`{}` is declared inside {}, a symbolic link, and Datum does not follow links in parent folders: declare the path where the link points, or list `{}` under `boundary.follow_links` in datum.yaml",
                    claim.path,
                    merged[o].id,
                    outer_path.display()
                ),
                Err(why) => format!(
                    "`{}` is declared inside {}, {why}",
                    claim.path, merged[o].id
                ),
                // A link declared absent is removed: nothing stays at a
                // path through it, whether the walk follows it or not.
                Ok(())
                    if claim.present && (outer.holds_children || outer.links) && !outer.present =>
                {
                    format!(
                        "`{}` is declared present inside {}, which is declared absent",
                        claim.path, merged[o].id
                    )
                }
                Ok(()) => continue,
            };
            self.diags.push(self.claim_error(m, claim, message));
        }
    }

    /// Two resources claiming what their kind manages alone (one account's
    /// name, one uid: `Capabilities::exclusive_claims`) would undo each other
    /// on every pass, or the second fail after the first was applied.
    pub(super) fn check_exclusive(&mut self, merged: &[Merged]) {
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, m) in merged.iter().enumerate() {
            let Some(provider) = self.providers[m.last_doc()] else {
                continue;
            };
            let field = |k: &str| m.fields.get(k).map(|(v, _)| v);
            for claim in provider.exclusive_claims(&field, &m.id.name) {
                let Some(&prev) = seen.get(&claim.key) else {
                    seen.insert(claim.key, i);
                    continue;
                };
                let doc = m
                    .fields
                    .get(claim.field)
                    .map_or_else(|| m.last_doc(), |(_, d)| *d);
                let (origin, end) = self.field_location(doc, &[claim.field.to_owned()]);
                let other = &merged[prev];
                // The claimed value is both resources' (a uid, an account's
                // name): when either says `sensitive: true`, neither the
                // message nor the line holding it shows it.
                let sensitive: Vec<&ResourceId> = [m, other]
                    .into_iter()
                    .filter(|r| self.is_sensitive(r))
                    .map(|r| &r.id)
                    .collect();
                let message = match sensitive.as_slice() {
                    [] => format!("{} is also managed by {}", claim.shown, other.id),
                    ids => format!(
                        "the same `{}` is also managed by {} (its value is not shown: {} {} sensitive)",
                        claim.field,
                        other.id,
                        ids.iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(" and "),
                        if ids.len() == 1 { "is" } else { "are" }
                    ),
                };
                let secret = self.hides_lines(m) || !sensitive.is_empty();
                self.diags.push(
                    Diagnostic::error(message)
                        .resource(&m.id)
                        .at(origin)
                        .until(end)
                        .hiding_source(secret),
                );
            }
        }
    }

    /// An error about `m`'s path claim, at the claim's field where it is
    /// written (the document that wrote it). The line is not shown for a
    /// sensitive resource: a flow mapping holds its content (or a User's
    /// hash) on the line of its path.
    pub(super) fn claim_error(
        &self,
        m: &Merged,
        claim: &PathClaim<'_>,
        message: String,
    ) -> Diagnostic {
        let doc = m
            .fields
            .get(claim.field)
            .map_or_else(|| m.last_doc(), |(_, d)| *d);
        let (origin, end) = self.field_location(doc, &[claim.field.to_owned()]);
        Diagnostic::error(message)
            .resource(&m.id)
            .at(origin)
            .until(end)
            .hiding_source(self.hides_lines(m))
    }
}

/// Whether a declared path (without a trailing `/`) is Datum's own folder
/// or inside it: a resource there would fight the state store, the backups
/// and the lock (a Directory's mode opening the private folder, a File over
/// the store), so the catalogue refuses it.
fn is_datums_own(path: &str) -> bool {
    let own = datum_host::lock::STATE_FOLDER;
    path.strip_prefix(own)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}
