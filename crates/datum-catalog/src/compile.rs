//! Lint and compile: every check on a loaded repository, and the catalogue for
//! one host.
//!
//! This module owns the order checks run in and what each view of the
//! repository is checked against:
//! - every document on its own (known type, field values via the provider's
//!   `check`, validator names, content fields and their paths, template
//!   syntax, duplicate names within a layer);
//! - every resource with all layers applied (`requires` resolved against every
//!   declared resource, cycles, required fields);
//! - with a host: its layers only (`requires` against its own catalogue,
//!   templates rendered with its name and labels, cycles again), from which
//!   the catalogue is built.
//!
//! All problems are collected; nothing stops at the first. It must not touch
//! the managed machine: it reads the repository only.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::hashes::SourceHashes;
use std::path::PathBuf;

use datum_core::{Content, Desired, Origin, Resource, ResourceId};
use datum_manifest::yaml::{Node, Pos, Value};
use datum_manifest::{DEFAULT_CLASS, Diagnostic, Diagnostics, Document, Repository, Resolver};
use datum_providers::{FieldError, PathClaim, Provider, Registry};

use crate::catalogue::{Catalogue, declaration_hash};
use crate::content::{self, CONTENT_KEYS, ContentDecl, ContentKind, Templates};
use crate::graph;
use crate::host::HostIdentity;
use crate::merge::{self, ContentSet, DocView, Merged};
use crate::validators;
use datum_core::parallel::in_stretches;

/// The documents' `desired` mappings, which the checks read and point their
/// messages into.
pub(crate) enum Written {
    /// Left in the documents: the caller keeps the repository (a lint).
    InDocuments,
    /// Taken out of them (`Repository::take_desired`) by a compile that owns
    /// the repository, in document order. Let go once nothing more can be
    /// reported about them, before the contents are rendered: they were a
    /// fifth of a `plan --recompile`'s peak at 20,000 Files.
    Taken(Vec<Node>),
}

/// What a merge takes out of the written mappings (see [`Written::fields`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Take {
    /// Nothing: it copies (a check of every layer, before the host's merge).
    Nothing,
    /// The texts, leaving the entries to point at (`--explain`).
    Texts,
    /// The values and their entries, but the content fields.
    Entries,
}

/// What a mapping that was let go reads as (and a document past the end).
const RELEASED: &Node = &Node {
    value: Value::Map(Vec::new()),
    start: Pos { line: 0, column: 0 },
    end: Pos { line: 0, column: 0 },
};

impl Written {
    /// Lets the taken mappings go (the documents' own stay: their owner
    /// keeps them).
    fn release(&mut self) {
        if let Written::Taken(nodes) = self {
            *nodes = Vec::new();
        }
    }

    /// Document `i`'s top-level fields for layering, as JSON, without the
    /// content fields of a content-taking type (those are layered as one).
    /// With `take` (the host's merge: after it, only the content fields are
    /// read again, which are not layered here and never taken), the values
    /// are moved out of a taken mapping instead of copied (they go on into
    /// the catalogue), and their entries go with them: a message that points
    /// at one of them finds it by parsing the document again
    /// ([`Repository::desired_as_written`]), which only a repository with
    /// problems pays for. Every mapping held and every field merged at once
    /// were the peak of a 100,000-File compile. (`--explain`, which points
    /// at every field, takes only the texts and keeps the entries.)
    fn fields(
        &mut self,
        i: usize,
        doc: &Document,
        takes_content: bool,
        take: Take,
    ) -> Vec<(String, serde_json::Value)> {
        let layered = |k: &str| !(takes_content && CONTENT_KEYS.contains(&k));
        let entries = match self {
            Written::Taken(nodes) if take != Take::Nothing => {
                nodes.get_mut(i).and_then(|n| match &mut n.value {
                    Value::Map(entries) => Some(entries),
                    _ => None,
                })
            }
            _ => {
                return self
                    .of(i, doc)
                    .entries()
                    .filter(|(k, _, _)| layered(k))
                    .map(|(k, v, _)| (k.to_owned(), v.to_json()))
                    .collect();
            }
        };
        let Some(entries) = entries else {
            return Vec::new();
        };
        if take == Take::Entries {
            let mut fields = Vec::with_capacity(entries.len());
            entries.retain_mut(|e| {
                if !layered(&e.key) {
                    return true;
                }
                let value = std::mem::replace(&mut e.value, RELEASED.clone());
                fields.push((std::mem::take(&mut e.key), value.into_json()));
                false
            });
            entries.shrink_to_fit();
            return fields;
        }
        entries
            .iter_mut()
            .filter(|e| layered(&e.key))
            .map(|e| {
                let value = match std::mem::replace(&mut e.value.value, Value::Null) {
                    Value::Str(text) => serde_json::Value::String(text),
                    other => {
                        e.value.value = other;
                        e.value.to_json()
                    }
                };
                (e.key.clone(), value)
            })
            .collect()
    }

    /// Document `i`'s `desired` mapping.
    fn of<'a>(&'a self, i: usize, doc: &'a Document) -> &'a Node {
        match self {
            Written::InDocuments => &doc.desired,
            Written::Taken(nodes) => nodes.get(i).unwrap_or(RELEASED),
        }
    }
}

pub(crate) struct Analysis<'r> {
    repo: &'r Repository,
    /// Every document's `desired` mapping (see [`Written`]).
    written: Written,
    /// The resource types this compile knows.
    registry: &'r Registry,
    diags: Diagnostics,
    /// Per document: its provider, when the type is known.
    providers: Vec<Option<&'r dyn Provider>>,
    /// Per document: its checked content field (content-taking types only).
    contents: Vec<Option<ContentDecl>>,
    /// Per document: what it does to the content (a refused field still
    /// counts as declaring: it is an error either way).
    content_set: Vec<ContentSet>,
    templates: Templates,
    resolver: Resolver,
    /// Per document of a kind that takes a source folder (Tree): the
    /// repository folder it names, checked to stay inside the repository.
    tree_dirs: Vec<Option<TreeDir>>,
    /// Record where each field came from (`catalogue --explain`). Off
    /// otherwise: for 20,000 resources those origins are most of the
    /// catalogue's memory.
    explain: bool,
    /// With `explain`, the fields a layer removed (set to null) in the
    /// host's merge: resource -> field -> the document that removed it.
    removed: HashMap<ResourceId, BTreeMap<String, usize>>,
    /// Remembered source hashes (see `crate::hashes`), when the caller keeps
    /// some.
    hashes: Option<&'r dyn SourceHashes>,
    /// A merge took fields' entries out of the written mappings: messages
    /// about them parse their document again (see [`Written::fields`]).
    reparse: bool,
}

/// A source folder a document names, with where its field is written (for a
/// problem reading it while rendering, when the `desired` mapping has been
/// let go).
#[derive(Clone)]
struct TreeDir {
    path: PathBuf,
    at: Pos,
    end: Pos,
}

/// A requirement edge with the `requires:` entry that wrote it.
struct Edge {
    to: usize,
    origin: Origin,
    end: Pos,
}

impl<'r> Analysis<'r> {
    /// An analysis of `repo`, whose documents' `desired` mappings are in
    /// the documents or in `written` (see [`Written`]).
    pub(crate) fn new(repo: &'r Repository, written: Written, registry: &'r Registry) -> Self {
        let n = repo.documents.len();
        Self {
            repo,
            written,
            registry,
            diags: repo.diagnostics.clone(),
            providers: vec![None; n],
            contents: vec![None; n],
            content_set: vec![ContentSet::Untouched; n],
            templates: Templates::new(),
            resolver: Resolver::new(&repo.canonical_root),
            tree_dirs: vec![None; n],
            explain: false,
            removed: HashMap::new(),
            hashes: None,
            reparse: false,
        }
    }

    /// Looks source hashes up in (and records them into) `hashes`.
    pub(crate) fn with_hashes(mut self, hashes: Option<&'r dyn SourceHashes>) -> Self {
        self.hashes = hashes;
        self
    }

    /// Records per-field origins in the catalogue (for `--explain`).
    pub(crate) fn explaining(mut self) -> Self {
        self.explain = true;
        self
    }

    /// Runs every check, and with a host builds its catalogue. The catalogue
    /// is returned only when no error was found.
    pub(crate) fn run(mut self, host: Option<&HostIdentity>) -> (Option<Catalogue>, Diagnostics) {
        self.check_documents();
        // Whatever a check points at, no line of a resource whose values are
        // secret is shown (see below). Read before a merge takes the fields
        // out of the documents.
        let secret: HashSet<&ResourceId> = (0..self.repo.documents.len())
            .filter(|&i| self.declares_secret(i))
            .map(|i| &self.doc(i).id)
            .collect();
        self.check_duplicates();
        crate::classes::check(self.repo, &mut self.diags);

        let union: HashSet<&ResourceId> = self.repo.documents.iter().map(|d| &d.id).collect();
        // Every layer applied: catches what any host could hit. When the host
        // gets every layer, its own view below is the same and stricter.
        let host_gets_all = host.is_some_and(|h| {
            self.repo
                .settings
                .layers
                .iter()
                .all(|l| l.matcher.matches(&h.labels))
        });
        if !host_gets_all {
            let all = self.merge((0..self.repo.documents.len()).collect(), Take::Nothing);
            self.check_merged(&all, true);
            let edges = self.resolve(&all, None);
            self.check_cycles(&all, &edges);
        }

        let catalogue = host.and_then(|host| self.host_catalogue(host, &union));
        let mut diags = self.diags;
        // Written as a flow mapping (the whole document on one line), a
        // resource's content or password hash is on the line of an unknown
        // requirement or a bad class too.
        for d in diags.iter_mut() {
            if d.resource.as_ref().is_some_and(|id| secret.contains(id)) {
                d.hide_source = true;
            }
        }
        diags.finish();
        if diags.has_errors() {
            (None, diags)
        } else {
            (catalogue, diags)
        }
    }

    /// Whether document `i` says its resource is sensitive, or declares a
    /// field its kind calls sensitive (a User's `password_hash`).
    fn declares_secret(&self, i: usize) -> bool {
        self.doc(i).sensitive.as_ref().is_some_and(|s| s.value)
            || self.providers[i].is_some_and(|p| {
                let desired = self.desired(i);
                p.sensitive_fields()
                    .iter()
                    .any(|f| desired.entries().any(|(k, v, _)| k == *f && !v.is_null()))
            })
    }

    fn doc(&self, i: usize) -> &'r Document {
        &self.repo.documents[i]
    }

    /// Document `i`'s `desired` mapping.
    fn desired(&self, i: usize) -> &Node {
        self.written.of(i, self.doc(i))
    }

    /// Where a field path is written in document `i` (see [`field_location`]).
    /// After a merge that took the entries out, a field no longer held is
    /// found in the document parsed again (only a message needs it).
    fn field_location(&self, i: usize, path: &[String]) -> (Origin, Pos) {
        let (doc, held) = (self.doc(i), self.desired(i));
        let is_held = |k: &String| held.entries().any(|(key, _, _)| key == k.as_str());
        if self.reparse
            && !path.first().is_some_and(is_held)
            && let Some(written) = self.repo.desired_as_written(doc)
        {
            return field_location(doc, &written, path);
        }
        field_location(doc, held, path)
    }

    fn layer_name(&self, doc: &Document) -> String {
        self.repo
            .layer_of(doc)
            .map(|l| l.name.clone())
            .unwrap_or_default()
    }

    // ---- every document on its own -------------------------------------

    fn check_documents(&mut self) {
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

    /// A source-folder resource's declared content (a Tree's): its folder
    /// packed as content by its kind.
    fn render_tree(
        &self,
        m: &Merged,
        folder: &dyn datum_providers::TakesSourceFolder,
    ) -> Result<Option<Content>, Box<Diagnostic>> {
        let Some((_, d)) = m.fields.get(folder.field()) else {
            return Ok(None);
        };
        // A refused folder is already reported.
        let Some(dir) = self.tree_dirs.get(*d).and_then(Option::as_ref) else {
            return Ok(None);
        };
        match folder.pack(&dir.path) {
            Ok(content) => {
                let path = m.fields.get("path").and_then(|(v, _)| v.as_str());
                match path.map(|path| folder.check_packed(&content, path)) {
                    Some(Err(problem)) => Err(Box::new(
                        Diagnostic::error(format!("the tree source: {problem}"))
                            .resource(&m.id)
                            .at(self.doc(*d).origin_at(dir.at))
                            .until(dir.end),
                    )),
                    _ => Ok(Some(content)),
                }
            }
            Err(e) => {
                // The document's `desired` mapping may be gone by now: the
                // place was kept with the folder.
                Err(Box::new(
                    Diagnostic::error(format!("cannot read the tree source: {e}"))
                        .resource(&m.id)
                        .at(self.doc(*d).origin_at(dir.at))
                        .until(dir.end),
                ))
            }
        }
    }

    fn check_duplicates(&mut self) {
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

    // ---- merged resources ------------------------------------------------

    /// The resources `order`'s documents make, layered. With `take` (the
    /// host's merge, the last to read the documents' values), see
    /// [`Written::fields`].
    fn merge(&mut self, order: Vec<usize>, take: Take) -> Vec<Merged> {
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
    fn check_merged(&mut self, merged: &[Merged], missing_only: bool) {
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
    fn resolve(
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
    fn check_cycles(&mut self, merged: &[Merged], edges: &[Vec<Edge>]) -> bool {
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

    // ---- one host ----------------------------------------------------------

    fn host_catalogue(
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
        // below.
        in_stretches(&mut resources, |_, stretch| {
            for r in stretch {
                r.declaration_hash = declaration_hash(
                    &r.id,
                    &r.desired,
                    r.content.as_ref().map(|c| c.sha256.as_str()),
                    r.validate.as_deref(),
                    r.sensitive,
                    &r.requires,
                );
            }
        });
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
    /// capability (`Provider::ordering`), added where they make no cycle.
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

    /// Whether a merged resource is sensitive (as its layers say, the last
    /// one that says so deciding).
    fn is_sensitive(&self, m: &Merged) -> bool {
        m.sensitive
            .and_then(|d| self.doc(d).sensitive.as_ref())
            .is_some_and(|s| s.value)
    }

    /// The path a merged resource claims, by its kind's path capability.
    /// Its path is borrowed from the merged fields: the claims of every
    /// resource are held at once, at the compile's fullest (a copy of each
    /// path was ~15 MB of a 100,000-File compile's peak).
    fn claim<'m>(&self, m: &'m Merged) -> Option<PathClaim<'m>> {
        let paths = self.providers[m.last_doc()]?.paths()?;
        let field = |k: &str| m.fields.get(k).map(|(v, _)| v);
        paths.claim(&field)
    }

    /// Two resources managing one path would fight on every pass.
    fn check_paths(&mut self, merged: &[Merged]) {
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
    /// name, one uid: `Provider::exclusive_claims`) would undo each other
    /// on every pass, or the second fail after the first was applied.
    fn check_exclusive(&mut self, merged: &[Merged]) {
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
    fn claim_error(&self, m: &Merged, claim: &PathClaim<'_>, message: String) -> Diagnostic {
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

    /// Whether no line of `m` may be shown in an error: it is sensitive
    /// (`sensitive: true`), or declares a field its kind calls sensitive
    /// (a User's `password_hash`).
    fn hides_lines(&self, m: &Merged) -> bool {
        self.is_sensitive(m)
            || self.providers[m.last_doc()].is_some_and(|p| {
                p.sensitive_fields()
                    .iter()
                    .any(|f| m.fields.get(f).is_some())
            })
    }

    /// Every resource's content for this host, read and hashed on all cores
    /// (file reads and SHA-256 dominate a large catalogue's compile time).
    /// Problems are reported in resource order, whatever thread found them.
    fn render_all(&mut self, merged: &[Merged], host: &HostIdentity) -> Vec<Option<Content>> {
        let this = &*self;
        // Each thread renders straight into its own stretch of the result:
        // no per-thread list joined into a second one (20,000 contents held
        // three times at the compile's peak).
        let mut contents: Vec<Option<Content>> = Vec::new();
        contents.resize_with(merged.len(), || None);
        let problems = in_stretches(&mut contents, |first, slots| {
            let mut problems = Vec::new();
            for (slot, m) in slots.iter_mut().zip(&merged[first..]) {
                match this.render(m, host) {
                    Ok(content) => *slot = content,
                    Err(d) => problems.push(*d),
                }
            }
            problems
        });
        for d in problems.into_iter().flatten() {
            self.diags.push(d);
        }
        contents
    }

    /// The winning content field as bytes for this host.
    fn render(&self, m: &Merged, host: &HostIdentity) -> Result<Option<Content>, Box<Diagnostic>> {
        if let Some(folder) = self.providers[m.last_doc()].and_then(|p| p.source_folder()) {
            return self.render_tree(m, folder);
        }
        let Some((doc, decl)) = m
            .content
            .and_then(|d| Some((self.doc(d), self.contents[d].as_ref()?)))
        else {
            return Ok(None);
        };
        match decl.kind {
            ContentKind::Inline => Ok(Some(Content::new(decl.text.clone().into_bytes()))),
            ContentKind::Source => {
                // A refused path is already reported.
                let Some(file) = decl.file.as_ref() else {
                    return Ok(None);
                };
                // Hashed, not kept: the bytes are read again when a File
                // is written (and refused if they changed meanwhile).
                match content::hash_source(&file.abs, &file.key, self.hashes) {
                    Ok((digests, size)) => Ok(Some(Content::from_source(
                        file.abs.clone(),
                        digests.sha256_hex(),
                        Some(digests.blake3_hex()),
                        size,
                    ))),
                    Err(e) => Err(Box::new(
                        Diagnostic::error(format!(
                            "cannot read source {}: {e}",
                            file.rel.display()
                        ))
                        .resource(&m.id)
                        .at(doc.origin_at(decl.key))
                        .until(decl.end),
                    )),
                }
            }
            ContentKind::Template => {
                let Some(rel) = decl.file.as_ref().map(|f| &f.rel) else {
                    return Ok(None);
                };
                // A template that did not parse is already reported.
                if !self.templates.is_loaded(rel) {
                    return Ok(None);
                }
                let layer = self.layer_name(doc);
                let origin = doc.origin_at(decl.key);
                self.templates
                    .render(rel, host, &m.id, &origin, &layer, self.is_sensitive(m))
                    .map(|text| Some(Content::new(text.into_bytes())))
            }
        }
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
            // (`host_catalogue`).
            declaration_hash: String::new(),
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

/// Where a field path is written in a document whose `desired` mapping is
/// `desired`: the deepest part of the path the document has, else its
/// `desired:` key.
fn field_location(doc: &Document, desired: &Node, path: &[String]) -> (Origin, Pos) {
    for len in (1..=path.len()).rev() {
        if let Some(found) = doc.field_span_in(desired, &path[..len]) {
            return found;
        }
    }
    doc.desired_location()
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

/// Whether a provider's field error is about a content field whose value
/// is not a string: `content::declared` has reported that already, at the
/// value and without its line (it may be a secret), so the provider's
/// wording of the same mistake would repeat it and show the line.
fn reported_as_content(
    provider: &dyn Provider,
    e: &FieldError,
    desired: &serde_json::Value,
) -> bool {
    provider.takes_content()
        && e.path.len() == 1
        && e.path.first().is_some_and(|k| {
            CONTENT_KEYS.contains(&k.as_str())
                && desired
                    .get(k)
                    .is_some_and(|v| !v.is_string() && !v.is_null())
        })
}

/// Whether a field error is about a value sensitive by its kind's nature.
fn is_sensitive_field(provider: &dyn Provider, e: &FieldError) -> bool {
    e.path
        .first()
        .is_some_and(|f| provider.sensitive_fields().contains(&f.as_str()))
}

/// Whether `desired` declares a field its kind calls sensitive (a User's
/// `password_hash`): that makes the whole resource sensitive, so no line of
/// it is shown, not even another field's (`desired: {password_hash: ...,
/// uid: x}` holds the hash on the line of the `uid` error).
fn declares_sensitive_field(provider: &dyn Provider, desired: &serde_json::Value) -> bool {
    provider
        .sensitive_fields()
        .iter()
        .any(|f| desired.get(f).is_some_and(|v| !v.is_null()))
}

/// A provider's field error as a diagnostic, with what is sensitive kept
/// out of it: the source line hidden when the resource is sensitive
/// (`secret`, its own or another layer's `sensitive: true`) or the error
/// is about, or the resource declares, a field its kind calls sensitive;
/// and the values it must not quote replaced in the message ([`unquoted`]).
fn field_error(
    provider: &dyn Provider,
    e: FieldError,
    desired: &serde_json::Value,
    secret: bool,
    id: &ResourceId,
    origin: Origin,
    end: Option<Pos>,
) -> Diagnostic {
    let hide =
        secret || is_sensitive_field(provider, &e) || declares_sensitive_field(provider, desired);
    let e = unquoted(e, &secret_values(provider, desired, secret));
    field_diagnostic(&e, id, origin, end).hiding_source(hide)
}

/// The values of `desired` an error must not quote: every string in it
/// for a resource declared sensitive (`secret`), else those of the fields
/// its kind calls sensitive.
fn secret_values(
    provider: &dyn Provider,
    desired: &serde_json::Value,
    secret: bool,
) -> Vec<String> {
    fn strings(value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::String(s) if !s.is_empty() => out.push(s.clone()),
            serde_json::Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
            serde_json::Value::Object(fields) => fields.values().for_each(|v| strings(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    if secret {
        strings(desired, &mut out);
    } else {
        for field in provider.sensitive_fields() {
            if let Some(value) = desired.get(field) {
                strings(value, &mut out);
            }
        }
    }
    // The longest first: a value that holds a shorter one is replaced whole.
    out.sort_by_key(|v| std::cmp::Reverse(v.len()));
    out
}

/// `e` with every quoted occurrence of `values` in its message replaced by
/// `(sensitive)` (providers quote a bad value: `` `mode` "0x9" is not an
/// octal mode ``); a value still found in it after that (written some
/// other way) gives a message that names the field only. The source line
/// is hidden separately ([`Diagnostic::hiding_source`]).
fn unquoted(mut e: FieldError, values: &[String]) -> FieldError {
    if values.is_empty() {
        return e;
    }
    let mut message = e.message.clone();
    for v in values {
        for quoted in [
            format!("\"{v}\""),
            format!("`{v}`"),
            format!("'{v}'"),
            format!("{v:?}"),
        ] {
            message = message.replace(&quoted, datum_core::SENSITIVE_PLACEHOLDER);
        }
    }
    // Values of one or two characters are words of the message as often as
    // they are a value; nothing secret is that short.
    if values
        .iter()
        .any(|v| v.len() > 2 && message.contains(v.as_str()))
    {
        let dotted = e.path.join(".");
        message =
            format!("`{dotted}` is not valid (its value is not shown: the resource is sensitive)");
    }
    e.message = message;
    e
}

fn field_diagnostic(
    e: &FieldError,
    id: &ResourceId,
    origin: Origin,
    end: Option<Pos>,
) -> Diagnostic {
    let dotted = e.path.join(".");
    // Providers usually name the field; when they do not, say which it is.
    let message = if dotted.is_empty() || e.message.contains(&format!("`{dotted}`")) {
        e.message.clone()
    } else {
        format!("`{dotted}`: {}", e.message)
    };
    let mut d = Diagnostic::error(message).resource(id).at(origin);
    if let Some(end) = end {
        d = d.until(end);
    }
    d
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
