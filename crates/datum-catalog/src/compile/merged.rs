//! Merged resources: the documents layered into resources, each checked
//! whole by its provider, `requires` resolved against the others and
//! dependency cycles reported.

use super::field_errors::{field_error, reported_as_content};
use super::{Analysis, Edge, Take};
use crate::content::CONTENT_KEYS;
use crate::graph;
use crate::host::HostIdentity;
use crate::merge::{self, DocView, Merged};
use datum_core::ResourceId;
use datum_manifest::Diagnostic;
use std::collections::{HashMap, HashSet};

impl<'r> Analysis<'r> {
    /// The resources `order`'s documents make, layered. With `take` (the
    /// host's merge, the last to read the documents' values), see
    /// [`Written::fields`](super::Written::fields).
    pub(super) fn merge(&mut self, order: Vec<usize>, take: Take) -> Vec<Merged> {
        let (repo, providers, content_set) = (self.repo, &self.providers, &self.content_set);
        let written = &mut self.written;
        // Only the host's merge, and only to explain it.
        let note = self.explain && take != Take::Nothing;
        let removed = &mut self.removed;
        let noted = |id: &ResourceId, field: &str, doc: usize| {
            if note {
                removed
                    .entry(id.clone())
                    .or_default()
                    .insert(field.to_owned(), doc);
            }
        };
        merge::merge_noting_removals(
            order,
            |i| {
                let doc = &repo.documents[i];
                let takes_content = providers[i].is_some_and(|p| p.takes_content());
                DocView {
                    id: &doc.id,
                    fields: written.fields(i, doc, takes_content, take),
                    content: content_set[i],
                    sets_requires: doc.requires.is_some(),
                    sets_class: doc.class.is_some(),
                    // Only `true` counts: a later layer cannot make a secret
                    // visible (`sensitive: false` is warned about instead).
                    sets_sensitive: doc.sensitive.as_ref().is_some_and(|s| s.value),
                    sets_validate: doc.validate.is_some(),
                }
            },
            noted,
        )
    }

    /// The provider's check on each merged resource: catches missing required
    /// fields and, for one host, combinations no single document shows. With
    /// every layer applied (`missing_only`), only missing fields are reported
    /// for resources declared in several documents: two layers that never
    /// meet on one host may legitimately contradict each other (`ensure:
    /// absent` for one role, content for another).
    pub(super) fn check_merged(&mut self, merged: &[Merged], missing_only: bool) {
        // Each resource checked on its own (the provider parses its merged
        // fields): on every core; the problems are sorted by position later,
        // like every diagnostic.
        let this = &*self;
        let found = datum_core::parallel::each_stretch(merged, |stretch| {
            let mut own = Vec::new();
            for m in stretch {
                this.check_one_merged(m, missing_only, &mut own);
            }
            own
        });
        for d in found.into_iter().flatten() {
            self.diags.push(d);
        }
    }

    /// [`Analysis::check_merged`] of one resource, its problems into `out`.
    fn check_one_merged(&self, m: &Merged, missing_only: bool, out: &mut Vec<Diagnostic>) {
        let Some(provider) = self.providers[m.last_doc()] else {
            return;
        };
        // The resource's name where it stands for a field no layer writes
        // (a User's account, a Package's package): at the `name:` line.
        let field = |k: &str| m.fields.get(k).map(|(v, _)| v);
        if let Some(problem) = provider.check_resource_name(&field, &m.id.name) {
            let doc = self.doc(m.first_doc());
            out.push(
                Diagnostic::error(problem)
                    .resource(&m.id)
                    .at(doc.origin_at(doc.name_span.start))
                    .until(doc.name_span.end)
                    .hiding_source(self.hides_lines(m)),
            );
        }
        // The provider checks the declaration as written: the merged
        // fields plus the winning content field.
        let mut desired = m.desired_json();
        if let (Some(d), Some(obj)) = (m.content, desired.as_object_mut()) {
            for (k, v, _) in self.desired(d).entries() {
                if CONTENT_KEYS.contains(&k) && !v.is_null() {
                    obj.insert(k.to_owned(), v.to_json());
                }
            }
        }
        let Err(errors) = provider.check(&desired) else {
            return;
        };
        for e in errors {
            if reported_as_content(provider, &e, &desired) {
                continue;
            }
            let written = e.path.first().and_then(|k| {
                let content = if CONTENT_KEYS.contains(&k.as_str()) {
                    m.content
                } else {
                    None
                };
                content.or_else(|| m.fields.get(k).map(|(_, doc)| *doc))
            });
            // (A resource declared once has no other layer to contradict.)
            if missing_only && written.is_some() && m.docs.len() > 1 {
                continue;
            }
            let (origin, end) = match written {
                Some(doc) => {
                    let (o, end) = self.field_location(doc, &e.path);
                    (o, Some(end))
                }
                // Not written anywhere: point at the first `desired:`.
                None => (self.doc(m.first_doc()).desired_location().0, None),
            };
            let secret = self.is_sensitive(m);
            out.push(field_error(
                provider, e, &desired, secret, &m.id, origin, end,
            ));
        }
    }

    /// Resolves `requires` of every merged resource against the others. With
    /// a host, names declared elsewhere in the repository (`union`) get a
    /// message saying they are not for this host.
    pub(super) fn resolve(
        &mut self,
        merged: &[Merged],
        host: Option<(&HostIdentity, &HashSet<&ResourceId>)>,
    ) -> Vec<Vec<Edge>> {
        let scope: HashMap<&ResourceId, usize> =
            merged.iter().enumerate().map(|(i, m)| (&m.id, i)).collect();
        let mut all = Vec::with_capacity(merged.len());
        for m in merged {
            let mut edges = Vec::new();
            if let Some(doc) = m.requires.map(|d| self.doc(d))
                && let Some(requires) = &doc.requires
            {
                for r in &requires.value {
                    match scope.get(&r.value) {
                        Some(&to) => edges.push(Edge {
                            to,
                            origin: r.origin(),
                            end: r.end,
                        }),
                        None => {
                            let message = match host {
                                Some((host, union)) if union.contains(&r.value) => format!(
                                    "requires {}, which is not in the catalogue of host `{}` (its layers do not match this host)",
                                    r.value, host.name
                                ),
                                _ => {
                                    let mut message = format!(
                                        "requires {}, which is not declared anywhere in the repository",
                                        r.value
                                    );
                                    if let Some(close) = self.similar_id(&r.value) {
                                        message.push_str(&format!("; did you mean {close}?"));
                                    }
                                    message
                                }
                            };
                            self.diags.push(
                                Diagnostic::error(message)
                                    .resource(&m.id)
                                    .at(r.origin())
                                    .until(r.end),
                            );
                        }
                    }
                }
            }
            all.push(edges);
        }
        all
    }

    /// A declared id close to a misspelt one: same kind with a near name, or
    /// a near kind with the same name (`File/sshd_config` for `sshd-config`).
    fn similar_id(&self, wanted: &ResourceId) -> Option<ResourceId> {
        let mut names: Vec<&str> = Vec::new();
        let mut kinds: Vec<&str> = Vec::new();
        for d in &self.repo.documents {
            if d.id.kind == wanted.kind {
                names.push(&d.id.name);
            } else if d.id.name == wanted.name {
                kinds.push(&d.id.kind);
            }
        }
        if let Some(name) = datum_manifest::suggest::closest(&wanted.name, names) {
            return Some(ResourceId::new(wanted.kind.clone(), name));
        }
        datum_manifest::suggest::closest(&wanted.kind, kinds)
            .map(|k| ResourceId::new(k, wanted.name.clone()))
    }

    /// Reports every dependency cycle once, at the `requires:` entry that
    /// starts it. Returns whether there was none.
    pub(super) fn check_cycles(&mut self, merged: &[Merged], edges: &[Vec<Edge>]) -> bool {
        let plain: graph::Edges = edges
            .iter()
            .map(|e| e.iter().map(|x| x.to).collect())
            .collect();
        let (_, stuck) = graph::order(&plain);
        let cycles = graph::cycles(&plain, &stuck);
        for cycle in &cycles {
            let names: Vec<String> = cycle.iter().map(|&i| merged[i].id.to_string()).collect();
            let (Some(&a), Some(&b)) = (cycle.first(), cycle.get(1)) else {
                continue;
            };
            let mut d = Diagnostic::error(format!("dependency cycle: {}", names.join(" -> ")))
                .resource(&merged[a].id);
            if let Some(edge) = edges[a].iter().find(|e| e.to == b) {
                d = d.at(edge.origin.clone()).until(edge.end);
            }
            self.diags.push(d);
        }
        cycles.is_empty()
    }
}
