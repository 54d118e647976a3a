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
//!
//! [`Analysis`] and the views every check shares are here; the checks and
//! the catalogue are one module each: `documents` (every document on its
//! own), `merged` (the resources layered, `requires` and cycles), `claims`
//! (paths and what a kind manages alone), `render` (contents for one host),
//! `host_catalogue` (one host's catalogue and its order) and `field_errors`
//! (a provider's field errors, nothing sensitive shown).

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::hashes::SourceHashes;
use std::path::PathBuf;

use datum_core::{Origin, ResourceId};
use datum_manifest::yaml::{Node, Pos, Value};
use datum_manifest::{Diagnostics, Document, Repository, Resolver};
use datum_providers::{Provider, Registry};

use crate::catalogue::Catalogue;
use crate::content::{CONTENT_KEYS, ContentDecl, Templates};
use crate::host::HostIdentity;
use crate::merge::{ContentSet, Merged};

mod claims;
mod documents;
mod field_errors;
mod host_catalogue;
mod merged;
mod render;

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
    /// The catalogue's resources hold their declarations, and the compile
    /// declares each (`Compiler::holding_declarations`).
    hold: bool,
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
            hold: false,
        }
    }

    /// Looks source hashes up in (and records them into) `hashes`.
    pub(crate) fn with_hashes(mut self, hashes: Option<&'r dyn SourceHashes>) -> Self {
        self.hashes = hashes;
        self
    }

    /// Makes the catalogue's resources hold their declarations (declared
    /// by the compile), or not.
    pub(crate) fn holding(mut self, hold: bool) -> Self {
        self.hold = hold;
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

    /// Whether a merged resource is sensitive (as its layers say, the last
    /// one that says so deciding).
    fn is_sensitive(&self, m: &Merged) -> bool {
        m.sensitive
            .and_then(|d| self.doc(d).sensitive.as_ref())
            .is_some_and(|s| s.value)
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
