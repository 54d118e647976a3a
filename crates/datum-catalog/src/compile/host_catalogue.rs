//! One host's catalogue: its layers merged and checked, the ordering
//! edges added (parent folders, followed links, removals, activation, the
//! kinds' ordering capability), and the resources built in that order.

use super::{Analysis, Take, Written};
use crate::catalogue::{Catalogue, declaration_hash_of};
use crate::content::{CONTENT_KEYS, ContentKind};
use crate::graph;
use crate::host::HostIdentity;
use crate::merge::Merged;
use datum_core::parallel::in_stretches;
use datum_core::{Content, Desired, Resource, ResourceId};
use datum_manifest::{DEFAULT_CLASS, Diagnostic};
use datum_providers::PathClaim;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

impl<'r> Analysis<'r> {
    pub(super) fn host_catalogue(
        &mut self,
        host: &HostIdentity,
        union: &HashSet<&ResourceId>,
    ) -> Option<Catalogue> {
        let applies: Vec<bool> = self
            .repo
            .settings
            .layers
            .iter()
            .map(|l| l.matcher.matches(&host.labels))
            .collect();
        let order: Vec<usize> = (0..self.repo.documents.len())
            .filter(|&i| applies.get(self.doc(i).layer).copied().unwrap_or(false))
            .collect();
        // The last merge to read the documents' values: it takes them (only
        // the texts for `--explain`, which points at every field later).
        let take = if self.explain {
            Take::Texts
        } else {
            Take::Entries
        };
        // The source-hash cache is read on another thread while this one
        // merges and checks (the render, which asks it, waited for it on
        // one core), when some content comes from a `source:` file.
        let prepare = self.hashes.filter(|_| {
            self.contents
                .iter()
                .flatten()
                .any(|d| d.kind == ContentKind::Source)
        });
        let (merged, edges, acyclic) = std::thread::scope(|scope| {
            if let Some(hashes) = prepare {
                scope.spawn(move || hashes.prepare());
            }
            let merged = self.merge(order, take);
            self.reparse = take == Take::Entries && matches!(self.written, Written::Taken(_));
            self.check_merged(&merged, false);
            let edges = self.resolve(&merged, Some((host, union)));
            let acyclic = self.check_cycles(&merged, &edges);
            self.check_paths(&merged);
            self.check_exclusive(&merged);
            (merged, edges, acyclic)
        });
        // Every check that points into a `desired` mapping has run: a
        // compile that holds them lets them go before rendering, the
        // longest and fullest part of it (only `--explain` still reads
        // them, for each field's origin).
        if !self.explain {
            self.written.release();
        }

        let contents = self.render_all(&merged, host);
        if let Some(hashes) = self.hashes {
            hashes.hashed_all();
        }
        if !acyclic {
            return None;
        }
        // Rendered: the checked content fields (paths as written and
        // resolved, their places) are needed again only to explain where
        // `content` came from (letting them go took the peak of a `plan
        // --recompile` of 20,000 Files down 7.5 MiB).
        if !self.explain {
            self.contents = Vec::new();
        }

        let mut plain: graph::Edges = edges
            .iter()
            .map(|e| e.iter().map(|x| x.to).collect())
            .collect();
        // Each resource's path once: what is present (`paths`) and what is
        // declared absent (`removed`, only when something is).
        let mut paths: Vec<Option<(&str, bool)>> = Vec::with_capacity(merged.len());
        let mut removed: Vec<Option<(&str, bool)>> = Vec::new();
        // Each followed link declared present, with its target resolved.
        let mut followed: Vec<(usize, PathBuf)> = Vec::new();
        for (i, m) in merged.iter().enumerate() {
            let claim = self.claim(m);
            // Something being removed neither needs its parent nor can
            // serve as one: ordering it after the folder would remove the
            // folder first.
            // A link the boundary lets the walk follow serves as a folder:
            // what is declared below it is reached through it, so after it.
            let boundary = &self.repo.settings.boundary;
            let serves_as_folder = |c: &PathClaim<'_>| {
                c.holds_children
                    || (c.links
                        && boundary.follows(std::path::Path::new(c.path.trim_end_matches('/'))))
            };
            paths.push(
                claim
                    .as_ref()
                    .filter(|c| c.present)
                    .map(|c| (c.path, serves_as_folder(c))),
            );
            if let Some(c) = claim.as_ref().filter(|c| c.present && c.links)
                && let Some(target) = c.link_target
                && serves_as_folder(c)
            {
                followed.push((i, link_target_in_root(c.path, target)));
            }
            if let Some(c) = claim.filter(|c| !c.present) {
                removed.resize(i + 1, None);
                removed[i] = Some((c.path, c.holds_children));
            }
        }
        let (mut added, closing) = graph::add_parent_edges(&mut plain, &paths);
        // What is below a followed link is written where it points: the
        // folder declared at or above its target is made before the link,
        // so before what is below it (where no cycle forbids it).
        if !followed.is_empty() {
            added.extend(graph::add_target_edges(&mut plain, &paths, &followed));
        }
        drop(paths);
        // And the other way round for removals: a folder declared absent is
        // removed only when empty, so after what is removed inside it.
        let (removal, removal_closing) = graph::add_removal_edges(&mut plain, &removed);
        drop(removed);
        added.extend(removal);
        if !removal_closing.is_empty() {
            for (folder, inside) in removal_closing {
                let m = &merged[inside];
                let message = format!(
                    "dependency cycle: {} requires {}, which is declared absent and can only be removed once what is inside it is: remove that requirement",
                    m.id, merged[folder].id
                );
                match self.claim(m) {
                    Some(claim) => self.diags.push(self.claim_error(m, &claim, message)),
                    None => self.diags.push(Diagnostic::error(message).resource(&m.id)),
                }
            }
            return None;
        }
        // A folder that requires what is inside it (directly or through
        // others): the file cannot be made before its folder, so the
        // implicit edge is not dropped in silence (the apply would then fail
        // on a missing folder) but refused like any other cycle.
        if !closing.is_empty() {
            for (inside, folder) in closing {
                let m = &merged[inside];
                let message = format!(
                    "dependency cycle: {} requires {}, which is inside its folder (a folder is made before what is in it): remove that requirement",
                    merged[folder].id, m.id
                );
                match self.claim(m) {
                    Some(claim) => self.diags.push(self.claim_error(m, &claim, message)),
                    None => self.diags.push(Diagnostic::error(message).resource(&m.id)),
                }
            }
            return None;
        }
        // A resource that reloads or restarts on others (a Service's
        // `reload_on`/`restart_on`, by its kind's activation capability)
        // runs after them, so it sees their changes in the same pass.
        let mut reach = graph::Reach::default();
        // Made when the first activation is met (most catalogues are Files).
        let mut position: Option<HashMap<&ResourceId, usize>> = None;
        for (from, m) in merged.iter().enumerate() {
            let Some(activates) = self.providers[m.last_doc()].and_then(|p| p.activation()) else {
                continue;
            };
            let position = position.get_or_insert_with(|| {
                let mut first = HashMap::with_capacity(merged.len());
                for (i, o) in merged.iter().enumerate() {
                    first.entry(&o.id).or_insert(i);
                }
                first
            });
            let field = |k: &str| m.fields.get(k).map(|(v, _)| v);
            for (id, _) in activates.notified_by(&field) {
                let Some(&to) = position.get(&id) else {
                    continue;
                };
                if to != from && !reach.reaches(&plain, to, from) {
                    plain[from].push(to);
                    added.push((from, to));
                }
            }
        }
        let (sequence, stuck) = graph::order(&plain);
        if !stuck.is_empty() {
            return None;
        }

        let explicit: Vec<Vec<ResourceId>> = edges
            .iter()
            .map(|e| e.iter().map(|x| merged[x.to].id.clone()).collect())
            .collect();
        let autorequires: Vec<(ResourceId, ResourceId)> = added
            .iter()
            .map(|&(from, to)| (merged[from].id.clone(), merged[to].id.clone()))
            .collect();
        // The merged resources are consumed: their fields move into the
        // catalogue instead of being copied.
        let mut resources: Vec<Resource> = merged
            .into_iter()
            .zip(contents)
            .zip(explicit)
            .map(|((m, content), requires)| self.resource(m, content, requires))
            .collect();
        // Over the explicit requirements only, as before the edges added
        // below. Then, in a catalogue that holds declarations
        // (`Compiler::holding_declarations`: the agent's), each resource is
        // made to hold and declared (its kind's typed declaration parsed,
        // its content rendered already): every pass over this catalogue
        // uses that one, and a declaration that does not parse is refused
        // here, not by the pass. Not when an error was found already:
        // there will be no catalogue, and what refused the resource (its
        // field, at its line) is said already. A catalogue that does not
        // hold (a one-shot command's) is not declared: its one pass parses
        // each declaration once itself and keeps none it does not need,
        // and `check_fields` has refused here what every shipped kind's
        // declaration refuses.
        let registry = self.registry;
        let declare = !self.diags.has_errors() && self.hold;
        let undeclared = in_stretches(&mut resources, |first, stretch| {
            let mut undeclared = Vec::new();
            for (k, r) in stretch.iter_mut().enumerate() {
                r.declaration_hash = declaration_hash_of(
                    r,
                    r.content.as_ref().map(|c| c.sha256.as_str()),
                    &r.requires,
                );
                if !declare {
                    continue;
                }
                r.held.start_holding();
                if let Some(provider) = registry.lookup(&r.id.kind)
                    && let Err(e) = provider.declare(r)
                {
                    undeclared.push((first + k, e));
                }
            }
            undeclared
        });
        let mut refused = false;
        for (at, e) in undeclared.into_iter().flatten() {
            let Some(r) = resources.get(at) else {
                continue;
            };
            // A sensitive resource's values may be in the kind's words.
            let message = if r.sensitive {
                format!("{} does not parse as its type declares", r.id)
            } else {
                format!("{} does not parse as its type declares: {e}", r.id)
            };
            self.diags.push(
                Diagnostic::error(message)
                    .resource(&r.id)
                    .at(r.origin.clone())
                    .hiding_source(r.sensitive),
            );
            refused = true;
        }
        if refused {
            return None;
        }
        for (&(from, _), (_, to_id)) in added.iter().zip(&autorequires) {
            if let Some(r) = resources.get_mut(from) {
                r.requires.push(to_id.clone());
            }
        }
        let resources = reorder(resources, &sequence);
        let mut autorequires = autorequires;
        let resources = self.capability_edges(resources, &mut autorequires);
        Some(Catalogue {
            host: host.clone(),
            resources,
            autorequires,
            boundary: self.repo.settings.boundary.clone(),
        })
    }

    /// The ordering edges and warnings of every kind with the ordering
    /// capability (`Capabilities::ordering`), added where they make no cycle.
    /// For example, a resource whose validator's binary a declared Package
    /// installs runs after that Package, and a validated resource with no
    /// such Package is worth a warning, since the validator must then
    /// already be on every host the resource reaches.
    fn capability_edges(
        &mut self,
        resources: Vec<Resource>,
        autorequires: &mut Vec<(ResourceId, ResourceId)>,
    ) -> Vec<Resource> {
        // (from, after): `from` runs after `after`.
        let mut edges: Vec<(ResourceId, ResourceId)> = Vec::new();
        for ordering in self.registry.iter().filter_map(|p| p.ordering()) {
            for (id, message) in ordering.warnings(&resources) {
                let origin = resources
                    .iter()
                    .find(|r| r.id == id)
                    .map(|r| r.origin.clone());
                let mut d = Diagnostic::warning(message).resource(&id);
                if let Some(origin) = origin {
                    d = d.at(origin);
                }
                self.diags.push(d);
            }
            edges.extend(
                ordering
                    .edges(&resources)
                    .into_iter()
                    .map(|e| (e.from, e.after)),
            );
        }
        if edges.is_empty() {
            return resources;
        }
        let index: HashMap<&ResourceId, usize> = resources
            .iter()
            .enumerate()
            .map(|(i, r)| (&r.id, i))
            .collect();
        let mut plain: graph::Edges = resources
            .iter()
            .map(|r| {
                r.requires
                    .iter()
                    .filter_map(|d| index.get(d).copied())
                    .collect()
            })
            .collect();
        let mut added = Vec::new();
        let mut reach = graph::Reach::default();
        for (from, after) in &edges {
            let (Some(&f), Some(&p)) = (index.get(from), index.get(after)) else {
                continue;
            };
            if f != p && !plain[f].contains(&p) && !reach.reaches(&plain, p, f) {
                plain[f].push(p);
                added.push((f, p));
            }
        }
        let (sequence, stuck) = graph::order(&plain);
        if !stuck.is_empty() {
            return resources;
        }
        let mut resources = resources;
        for &(f, p) in &added {
            let after = resources.get(p).map(|r| r.id.clone());
            if let (Some(after), Some(from)) = (after, resources.get_mut(f)) {
                autorequires.push((from.id.clone(), after.clone()));
                from.requires.push(after);
            }
        }
        reorder(resources, &sequence)
    }

    fn resource(&self, m: Merged, content: Option<Content>, requires: Vec<ResourceId>) -> Resource {
        let last = self.doc(m.last_doc());
        let provider = self.providers[m.last_doc()];
        let class = m
            .class
            .and_then(|d| self.doc(d).class.as_ref())
            .map_or_else(|| DEFAULT_CLASS.to_owned(), |c| c.value.clone());
        let sensitive = m
            .sensitive
            .and_then(|d| self.doc(d).sensitive.as_ref())
            .is_some_and(|s| s.value);
        let validate = m
            .validate
            .and_then(|d| self.doc(d).validate.as_ref())
            .map(|v| v.value.clone());

        let mut field_origins = std::collections::BTreeMap::new();
        for (field, (_, doc)) in m.fields.iter().filter(|_| self.explain) {
            let (origin, _) = self.field_location(*doc, std::slice::from_ref(field));
            field_origins.insert(field.clone(), origin);
        }
        if let Some((doc, decl)) = m
            .content
            .filter(|_| self.explain)
            .and_then(|d| Some((self.doc(d), self.contents.get(d)?.as_ref()?)))
        {
            field_origins.insert("content".to_owned(), doc.origin_at(decl.key));
        }
        // A field a later layer removed (set to null) is explained by where
        // it was removed; the catalogue's view tells it from a field set by
        // its absence from `desired` (or, for `content`, no content).
        for (field, &doc) in self.removed.get(&m.id).into_iter().flatten() {
            let gone = if field == "content" {
                m.content.is_none()
            } else {
                m.fields.get(field).is_none()
            };
            if !gone {
                continue;
            }
            let origin = if field == "content" {
                // Where its content field is written as null.
                let desired = self.desired(doc);
                CONTENT_KEYS
                    .iter()
                    .find_map(|k| self.doc(doc).field_span_in(desired, &[(*k).to_owned()]))
                    .map_or_else(|| self.doc(doc).desired_location().0, |(o, _)| o)
            } else {
                self.field_location(doc, std::slice::from_ref(field)).0
            };
            field_origins.insert(field.clone(), origin);
        }
        let envelope = [
            (
                "requires",
                m.requires
                    .and_then(|d| self.doc(d).requires.as_ref().map(|r| r.origin())),
            ),
            (
                "class",
                m.class
                    .and_then(|d| self.doc(d).class.as_ref().map(|r| r.origin())),
            ),
            (
                "sensitive",
                m.sensitive
                    .and_then(|d| self.doc(d).sensitive.as_ref().map(|r| r.origin())),
            ),
            (
                "validate",
                m.validate
                    .and_then(|d| self.doc(d).validate.as_ref().map(|r| r.origin())),
            ),
        ];
        for (name, origin) in envelope.into_iter().filter(|_| self.explain) {
            if let Some(o) = origin {
                field_origins.insert(name.to_owned(), o);
            }
        }

        let desired = Desired::from_fields(m.fields.into_iter().map(|(k, (v, _))| (k, v)));
        // A field that is sensitive by its nature (a User's password hash)
        // makes the whole resource sensitive, whatever `sensitive:` says;
        // only that field's value is hidden among its differences, unless
        // the resource is sensitive itself.
        let by_field = provider
            .map_or(&[][..], |p| p.sensitive_fields())
            .iter()
            .any(|f| desired.get(f).is_some());
        Resource {
            id: m.id,
            desired,
            content,
            requires,
            class,
            sensitive: sensitive || by_field,
            sensitive_by_field_only: by_field && !sensitive,
            validate,
            origin: last.origin(),
            field_origins,
            // Hashed for every resource at once, on every core
            // (`host_catalogue`), and declared there.
            declaration_hash: String::new(),
            held: Default::default(),
        }
    }
}

/// `items` in the order `sequence` gives (`sequence[k]` is the index of the
/// item that goes to position `k`). A permutation is applied in place by
/// swapping along its cycles: a catalogue of 20,000 resources is not held
/// twice. Anything else (never produced by `graph::order` without stuck
/// resources, but cheap to tolerate) keeps the listed items, in that order,
/// each once.
fn reorder<T>(mut items: Vec<T>, sequence: &[usize]) -> Vec<T> {
    let n = items.len();
    let mut placed = vec![false; n];
    let is_permutation = sequence.len() == n
        && sequence
            .iter()
            .all(|&i| i < n && !std::mem::replace(&mut placed[i], true));
    if !is_permutation {
        let mut slots: Vec<Option<T>> = items.into_iter().map(Some).collect();
        return sequence
            .iter()
            .filter_map(|&i| slots.get_mut(i).and_then(Option::take))
            .collect();
    }
    // `placed` now means "position not yet filled".
    for start in 0..n {
        if !placed[start] {
            continue;
        }
        let mut k = start;
        loop {
            placed[k] = false;
            let src = sequence[k];
            if src == start {
                break;
            }
            items.swap(k, src);
            k = src;
        }
    }
    items
}

/// Where a link declared at `link` pointing at `target` leads, as the
/// host's walk resolves a followed link (`datum_host::boundary`): from the
/// link's folder, an absolute target from the root, `..` never above it.
fn link_target_in_root(link: &str, target: &str) -> PathBuf {
    let base = std::path::Path::new(link.trim_end_matches('/'))
        .parent()
        .unwrap_or(std::path::Path::new("/"));
    datum_host::paths::lexical_normal(&base.join(target))
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reorder_applies_a_permutation_in_place_and_tolerates_anything_else() {
        let items: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
        assert_eq!(
            reorder(items.clone(), &[3, 0, 4, 1, 2]),
            ["d", "a", "e", "b", "c"]
        );
        assert_eq!(reorder(items.clone(), &[0, 1, 2, 3, 4]), items);
        assert_eq!(
            reorder(items.clone(), &[4, 3, 2, 1, 0]),
            ["e", "d", "c", "b", "a"]
        );
        // Not a permutation: the listed items once each, in that order.
        assert_eq!(reorder(items.clone(), &[2, 2, 0]), ["c", "a"]);
        assert_eq!(reorder(items, &[9, 1]), ["b"]);
    }
}
