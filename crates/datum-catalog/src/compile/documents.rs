//! Every document on its own: its type and validator, its content field
//! (the path a `source:` or `template:` names, the template's syntax), a
//! Tree's source folder, its fields where a resource has several documents,
//! and duplicate names within a layer.

use super::field_errors::{field_error, reported_as_content};
use super::{Analysis, TreeDir};
use crate::content::{self, CONTENT_KEYS, ContentDecl, ContentKind};
use crate::merge::ContentSet;
use crate::validators;
use datum_core::ResourceId;
use datum_core::parallel::in_stretches;
use datum_manifest::{Diagnostic, Diagnostics, Resolver};
use datum_providers::Registry;
use std::collections::{HashMap, HashSet};

impl<'r> Analysis<'r> {
    pub(super) fn check_documents(&mut self) {
        let registry = self.registry;
        for (slot, doc) in self.providers.iter_mut().zip(&self.repo.documents) {
            *slot = registry.lookup(&doc.id.kind);
        }
        self.declare_contents();
        let mut declarations: HashMap<&ResourceId, usize> =
            HashMap::with_capacity(self.repo.documents.len());
        // A resource any layer calls sensitive: another layer's document of
        // it (an override writing its content) shows no line either.
        let mut sensitive_ids: HashSet<&ResourceId> = HashSet::new();
        for d in &self.repo.documents {
            *declarations.entry(&d.id).or_default() += 1;
            if d.sensitive.as_ref().is_some_and(|s| s.value) {
                sensitive_ids.insert(&d.id);
            }
        }
        // A secret stays one in every layer (see `merge`): a document that
        // says otherwise is told so where it says it.
        for d in &self.repo.documents {
            if let Some(said) = d.sensitive.as_ref().filter(|s| !s.value)
                && sensitive_ids.contains(&d.id)
            {
                self.diags.push(
                    Diagnostic::warning(format!(
                        "`sensitive: false` does not make {} visible: another layer declares it sensitive, and a resource stays sensitive once any layer says so",
                        d.id
                    ))
                    .resource(&d.id)
                    .at(said.origin()),
                );
            }
        }
        for i in 0..self.repo.documents.len() {
            let doc = self.doc(i);
            let provider = self.providers[i];
            if provider.is_none() {
                self.diags.push(
                    Diagnostic::error(unknown_type_message(self.registry, &doc.id.kind))
                        .resource(&doc.id)
                        .at(doc.origin_at(doc.kind_span.start))
                        .until(doc.kind_span.end),
                );
            }

            if let Some(v) = &doc.validate
                && let Err(problem) = validators::check(&v.value)
            {
                self.diags.push(
                    Diagnostic::error(problem.to_string())
                        .resource(&doc.id)
                        .at(v.origin())
                        .until(v.end),
                );
            }

            let Some(provider) = provider else { continue };
            if let Some(v) = &doc.validate
                && !provider.takes_validator()
            {
                self.diags.push(
                    Diagnostic::error(format!(
                        "`validate` on a {kind}: a {kind} stages no content for a validator to check (name the validator on the File or Tree that holds the configuration)",
                        kind = doc.id.kind
                    ))
                    .resource(&doc.id)
                    .at(v.origin())
                    .until(v.end),
                );
            }
            if let Some(v) = &doc.validate
                && provider.takes_validator()
                && !provider.takes_file_validator()
                && datum_providers::validators::lookup(&v.value)
                    .is_some_and(|def| def.scope == datum_providers::validators::Scope::File)
            {
                self.diags.push(
                    Diagnostic::error(format!(
                        "`validate: {name}` on a {kind}: {name} checks staged content, and a {kind} stages none (name it on the File that holds the configuration; a group validator such as nginx applies to a {kind})",
                        name = v.value,
                        kind = doc.id.kind
                    ))
                    .resource(&doc.id)
                    .at(v.origin())
                    .until(v.end),
                );
            }
            if provider.takes_content() {
                let values: Vec<bool> = self
                    .written
                    .of(i, doc)
                    .entries()
                    .filter(|(k, _, _)| CONTENT_KEYS.contains(k))
                    .map(|(_, v, _)| v.is_null())
                    .collect();
                self.content_set[i] = if values.iter().any(|null| !null) {
                    ContentSet::Declares
                } else if values.is_empty() {
                    ContentSet::Untouched
                } else {
                    ContentSet::Clears
                };
                if let Some(ContentDecl {
                    kind: ContentKind::Template,
                    file: Some(file),
                    ..
                }) = &self.contents[i]
                {
                    let layer = self.layer_name(doc);
                    let sensitive = doc.sensitive.as_ref().is_some_and(|s| s.value);
                    self.templates.load(
                        &file.abs,
                        &file.rel,
                        &doc.id,
                        &layer,
                        sensitive,
                        &mut self.diags,
                    );
                }
            }

            if let Some(folder) = provider.source_folder() {
                self.tree_dirs[i] = self.tree_source(i, folder.field());
            }

            // A resource declared once is checked whole after merging (the
            // same fields): checking the document too would only repeat it.
            if declarations.get(&doc.id).copied().unwrap_or(0) <= 1 {
                continue;
            }
            // A document may be a partial override: only problems with the
            // fields it writes are its own. Missing fields are judged on the
            // merged resource.
            // Null means "remove what an earlier layer set": nothing to check.
            let mut desired = self.desired(i).to_json();
            if let Some(obj) = desired.as_object_mut() {
                obj.retain(|_, v| !v.is_null());
            }
            if let Err(errors) = provider.check(&desired) {
                let secret = doc.sensitive.as_ref().is_some_and(|s| s.value)
                    || sensitive_ids.contains(&doc.id);
                for e in errors {
                    let own = e.path.first().is_some_and(|k| desired.get(k).is_some());
                    if own && !reported_as_content(provider, &e, &desired) {
                        let (origin, end) = self.field_location(i, &e.path);
                        self.diags.push(field_error(
                            provider,
                            e,
                            &desired,
                            secret,
                            &doc.id,
                            origin,
                            Some(end),
                        ));
                    }
                }
            }
        }
    }

    /// Every content-taking document's declared content
    /// (`content::declared`: its content field, a `source:` or `template:`
    /// path resolved inside the repository with one `lstat`), the documents
    /// split into one stretch per core, each with a resolver of its own.
    fn declare_contents(&mut self) {
        let mut contents = std::mem::take(&mut self.contents);
        let this = &*self;
        let problems = in_stretches(&mut contents, |first, slots| {
            let mut resolver = Resolver::new(&this.repo.canonical_root);
            let mut own = Diagnostics::new();
            for (i, slot) in (first..).zip(slots.iter_mut()) {
                let doc = this.doc(i);
                if this.providers[i].is_some_and(|p| p.takes_content()) {
                    let desired = this.written.of(i, doc);
                    *slot = content::declared(this.repo, doc, desired, &mut resolver, &mut own);
                }
            }
            own.into_vec()
        });
        self.contents = contents;
        for d in problems.into_iter().flatten() {
            self.diags.push(d);
        }
    }

    /// The folder a document's source-folder field (a Tree's `source:`)
    /// names, with the same repository-escape checks as a File's source (a
    /// link leading out of the repository is refused); problems are
    /// reported at the field.
    fn tree_source(&mut self, i: usize, field: &str) -> Option<TreeDir> {
        let doc = self.doc(i);
        let (value, at) = self
            .written
            .of(i, doc)
            .entries()
            .find(|(k, _, _)| *k == field)
            .map(|(_, v, start)| (v, start))?;
        let origin = doc.origin_at(at);
        let text = value.as_str()?;
        let layer_path = self
            .repo
            .layer_of(doc)
            .map(|l| l.path.clone())
            .unwrap_or_default();
        let problem = match self.resolver.resolve_file(&layer_path, text) {
            Ok((abs, _, None)) if datum_host::repo::metadata(&abs).is_ok_and(|m| m.is_dir()) => {
                return Some(TreeDir {
                    path: abs,
                    at,
                    end: value.end,
                });
            }
            Ok((_, rel, _)) => format!(
                "`{field}: {text}` is not a folder ({}); a {kind}'s {field} is a folder",
                rel.display(),
                kind = doc.id.kind
            ),
            Err(problem) => format!("`{field}`: {problem}"),
        };
        self.diags.push(
            Diagnostic::error(problem)
                .resource(&doc.id)
                .at(origin)
                .until(value.end),
        );
        None
    }

    pub(super) fn check_duplicates(&mut self) {
        let mut first: HashMap<(usize, &ResourceId), usize> = HashMap::new();
        for (i, doc) in self.repo.documents.iter().enumerate() {
            if let Some(&prev) = first.get(&(doc.layer, &doc.id)) {
                let prev = self.doc(prev);
                self.diags.push(
                    Diagnostic::error(format!(
                        "duplicate name: {} is already declared in layer `{}` at {}",
                        doc.id,
                        self.layer_name(doc),
                        prev.origin_at(prev.name_span.start)
                    ))
                    .resource(&doc.id)
                    .at(doc.origin_at(doc.name_span.start))
                    .until(doc.name_span.end),
                );
            } else {
                first.insert((doc.layer, &doc.id), i);
            }
        }
    }
}

fn unknown_type_message(registry: &Registry, kind: &str) -> String {
    let known: Vec<&str> = registry.kinds();
    let close = known
        .iter()
        .find(|k| k.eq_ignore_ascii_case(kind))
        .copied()
        .or_else(|| datum_manifest::suggest::closest(kind, known.iter().copied()));
    if let Some(close) = close {
        return format!("unknown type `{kind}`; did you mean `{close}`?");
    }
    if known.is_empty() {
        format!("unknown type `{kind}` (this build of Datum knows no resource types)")
    } else {
        format!("unknown type `{kind}`; known types: {}", known.join(", "))
    }
}
