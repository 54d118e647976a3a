//! Content fields: `content:`, `source:` and `template:`.
//!
//! This module owns finding a document's content field, checking that source
//! and template paths stay inside the repository, and turning the winning
//! field into bytes (inline text, a repository file, or a minijinja template
//! rendered for the host with strict undefined variables).
//!
//! It reads repository files only, never the managed machine, and it never
//! puts content into a message: templates may render secrets.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use datum_core::{Origin, ResourceId};
use datum_manifest::yaml::{Node, Pos};
use datum_manifest::{Diagnostic, Diagnostics, Document, Repository, Resolver};
use minijinja::{AutoEscape, Environment, UndefinedBehavior, Value};

use crate::host::HostIdentity;

/// The keys that declare content, in the order they are described.
pub const CONTENT_KEYS: &[&str] = &["content", "source", "template"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ContentKind {
    Inline,
    Source,
    Template,
}

impl ContentKind {
    fn from_key(key: &str) -> Option<Self> {
        match key {
            "content" => Some(Self::Inline),
            "source" => Some(Self::Source),
            "template" => Some(Self::Template),
            _ => None,
        }
    }
}

/// A document's content field, checked.
#[derive(Debug, Clone)]
pub(crate) struct ContentDecl {
    pub kind: ContentKind,
    /// The inline text (empty for a file: its path is in `file`).
    pub text: String,
    /// Where the key was written in its document's file (what `--explain`
    /// shows for `content`): a position, not an `Origin`, so that 20,000
    /// documents do not each hold a copy of their file's path.
    pub key: Pos,
    pub end: Pos,
    /// For source and template: the file. `None` when the path was refused
    /// (already reported).
    pub file: Option<SourceFile>,
}

/// A `source:` or `template:` file as the resolver found it.
#[derive(Debug, Clone)]
pub(crate) struct SourceFile {
    /// The canonical file.
    pub abs: std::sync::Arc<Path>,
    /// Its path relative to the repository root.
    pub rel: PathBuf,
    /// Its key from the resolver's `lstat`: what the source-hash cache is
    /// asked with, so that hashing a remembered file costs no second `lstat`.
    pub key: crate::hashes::FileKey,
}

/// Finds and checks the content field of `doc`, whose `desired` mapping is
/// `desired` (for a provider that takes content): non-string values and
/// refused or missing paths. Returns the first one.
pub(crate) fn declared(
    repo: &Repository,
    doc: &Document,
    desired: &Node,
    resolver: &mut Resolver,
    diags: &mut Diagnostics,
) -> Option<ContentDecl> {
    let mut found: Option<ContentDecl> = None;
    let layer_path = repo
        .layer_of(doc)
        .map(|l| l.path.clone())
        .unwrap_or_default();
    for (key, value, key_start) in desired.entries() {
        let Some(kind) = ContentKind::from_key(key) else {
            continue;
        };
        // `source: null` in an override clears content; nothing to check.
        if value.is_null() {
            continue;
        }
        let end = doc
            .field_span_in(desired, &[key.to_owned()])
            .map_or(value.end, |(_, end)| end);
        // Two content fields: the provider's check reports it (File does);
        // the first one is used for the remaining checks.
        if found.is_some() {
            continue;
        }
        let Some(text) = value.as_str() else {
            // The value written is the content (or a path meant as one):
            // pointed at, never shown, for it may be a secret whatever the
            // resource's `sensitive:` says in this or another layer.
            diags.push(
                Diagnostic::error(format!(
                    "`{key}` must be a string, found {}",
                    value.type_name()
                ))
                .resource(&doc.id)
                .at(doc.place.origin(value.start))
                .until(value.end)
                .hiding_source(true),
            );
            continue;
        };
        let file = match kind {
            ContentKind::Inline => None,
            ContentKind::Source | ContentKind::Template => {
                match resolver.resolve_file(&layer_path, text) {
                    Ok((abs, rel, Some(key))) => Some(SourceFile {
                        abs: abs.into(),
                        rel,
                        key: key.into(),
                    }),
                    Ok((_, rel, None)) => {
                        diags.push(
                            Diagnostic::error(format!(
                                "`{key}: {text}` is not a file ({})",
                                rel.display()
                            ))
                            .resource(&doc.id)
                            .at(doc.place.origin(value.start))
                            .until(value.end),
                        );
                        None
                    }
                    Err(problem) => {
                        diags.push(
                            Diagnostic::error(format!("`{key}`: {problem}"))
                                .resource(&doc.id)
                                .at(doc.place.origin(value.start))
                                .until(value.end),
                        );
                        None
                    }
                }
            }
        };
        found = Some(ContentDecl {
            kind,
            text: match kind {
                ContentKind::Inline => text.to_owned(),
                ContentKind::Source | ContentKind::Template => String::new(),
            },
            key: key_start,
            end,
            file,
        });
    }
    found
}

/// The fuel one render of a template may use (minijinja's measure: about
/// one per instruction and one per 64 bytes of data it makes, output
/// included): some two million steps, or about 128 MB, far more than a
/// configuration file needs and small enough that a loop ends within
/// seconds and renders side by side stay within the agent's memory.
pub(crate) const TEMPLATE_FUEL: u64 = 2_000_000;

/// Templates read so far, parsed once each, rendered per host.
pub(crate) struct Templates {
    env: Environment<'static>,
    /// Template text by path relative to the repository; `None` when it could
    /// not be read or did not parse (already reported).
    sources: HashMap<PathBuf, Option<String>>,
}

impl Templates {
    pub(crate) fn new() -> Self {
        let mut env = Environment::new();
        // An undefined variable is an error, never an empty string: a config
        // file missing a value is worse than a failed compile.
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        // Configuration files are not HTML, whatever their suffix.
        env.set_auto_escape_callback(|_| AutoEscape::None);
        // Byte ranges in errors, for columns.
        env.set_debug(true);
        // A budget for one render's work and memory: without it a template
        // looped for hours (two nested `range(100000)`) or built gigabytes
        // from a few instructions (`a ~ a` five times, `join`, `replace`),
        // as root, in every compile.
        env.set_fuel(Some(TEMPLATE_FUEL));
        if let Ok(syntax) = minijinja::syntax::SyntaxConfig::builder()
            .keep_trailing_newline(true)
            .build()
        {
            env.set_syntax(syntax);
        }
        Self {
            env,
            sources: HashMap::new(),
        }
    }

    /// Reads and parses a template (once), reporting syntax errors at the
    /// template's own line. Returns whether it is usable.
    /// `sensitive`: the resource is, so a syntax error never shows the
    /// template's line (it may hold the secret), only where it is.
    pub(crate) fn load(
        &mut self,
        abs: &Path,
        rel: &Path,
        id: &ResourceId,
        layer: &str,
        sensitive: bool,
        diags: &mut Diagnostics,
    ) -> bool {
        if let Some(known) = self.sources.get(rel) {
            return known.is_some();
        }
        let text = match datum_host::repo::read(abs) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(t) => t,
                Err(_) => {
                    diags.push(
                        Diagnostic::error(format!("template {} is not UTF-8 text", rel.display()))
                            .resource(id)
                            .at(whole_file(rel, layer)),
                    );
                    self.sources.insert(rel.to_owned(), None);
                    return false;
                }
            },
            Err(e) => {
                diags.push(
                    Diagnostic::error(format!("cannot read template {}: {e}", rel.display()))
                        .resource(id)
                        .at(whole_file(rel, layer)),
                );
                self.sources.insert(rel.to_owned(), None);
                return false;
            }
        };
        diags.sources_mut().insert(rel.to_owned(), text.as_str());
        let name = rel.display().to_string();
        let ok = match self.env.template_from_named_str(&name, &text) {
            Ok(_) => true,
            Err(err) => {
                diags.push(template_diagnostic(
                    "template syntax error",
                    &err,
                    &text,
                    rel,
                    layer,
                    id,
                    sensitive,
                ));
                false
            }
        };
        self.sources.insert(rel.to_owned(), ok.then_some(text));
        ok
    }

    /// Whether a template was read and parsed without error.
    pub(crate) fn is_loaded(&self, rel: &Path) -> bool {
        matches!(self.sources.get(rel), Some(Some(_)))
    }

    /// Renders a loaded template for `host`. Errors (undefined variables,
    /// failing filters) become a diagnostic at the template's line, with a
    /// note naming the resource's `template:` line.
    /// `sensitive`: the resource is, so the error points at the template's
    /// line without showing it.
    pub(crate) fn render(
        &self,
        rel: &Path,
        host: &HostIdentity,
        id: &ResourceId,
        decl_origin: &Origin,
        layer: &str,
        sensitive: bool,
    ) -> Result<String, Box<Diagnostic>> {
        let Some(Some(text)) = self.sources.get(rel) else {
            return Err(Box::new(
                Diagnostic::error(format!("template {} was not loaded", rel.display()))
                    .resource(id),
            ));
        };
        let name = rel.display().to_string();
        let result = self
            .env
            .template_from_named_str(&name, text)
            .and_then(|t| t.render(host_context(host)));
        result.map_err(|err| {
            Box::new(
                template_diagnostic("template error", &err, text, rel, layer, id, sensitive).note(
                    format!(
                        "rendering for host `{}`, declared at {decl_origin}",
                        host.name
                    ),
                ),
            )
        })
    }
}

fn whole_file(rel: &Path, layer: &str) -> Origin {
    Origin {
        file: rel.to_owned(),
        line: 0,
        column: 0,
        layer: layer.to_owned(),
    }
}

/// The variables a template sees: `host.name`, `host.labels.KEY`, and the same
/// as `name` and `labels`.
fn host_context(host: &HostIdentity) -> Value {
    let labels: BTreeMap<Value, Value> = host
        .labels
        .iter()
        .map(|(k, v)| (Value::from(k.as_str()), Value::from(v.as_str())))
        .collect();
    let labels = Value::from(labels);
    let mut host_map: BTreeMap<Value, Value> = BTreeMap::new();
    host_map.insert(Value::from("name"), Value::from(host.name.as_str()));
    host_map.insert(Value::from("labels"), labels.clone());
    let mut top: BTreeMap<Value, Value> = BTreeMap::new();
    top.insert(Value::from("host"), Value::from(host_map));
    top.insert(Value::from("name"), Value::from(host.name.as_str()));
    top.insert(Value::from("labels"), labels);
    Value::from(top)
}

/// The diagnostic of a template error at the template's own line.
/// `sensitive`: the resource is, so neither the line nor minijinja's detail
/// is shown (the detail quotes the template's expressions, `m['...']` is
/// undefined, and values: the name a computed `include` asked for).
fn template_diagnostic(
    what: &str,
    err: &minijinja::Error,
    text: &str,
    rel: &Path,
    layer: &str,
    id: &ResourceId,
    sensitive: bool,
) -> Diagnostic {
    let mut message = format!("{what}: {}", err.kind());
    match err.detail() {
        Some(_) if sensitive => {
            message.push_str(" (its detail is left out: the resource is sensitive)");
        }
        Some(detail) => {
            message.push_str(": ");
            message.push_str(detail);
        }
        None => {}
    }
    if err.kind() == minijinja::ErrorKind::OutOfFuel {
        message.push_str(&format!(
            " (a render may take about {TEMPLATE_FUEL} steps, or make about {} MB of text and values)",
            TEMPLATE_FUEL * 64 / 1_000_000
        ));
    }
    let (start, end) = match err.range() {
        Some(range) => (pos_of(text, range.start), Some(pos_of(text, range.end))),
        None => (
            Pos::at(err.line().unwrap_or(0), usize::from(err.line().is_some())),
            None,
        ),
    };
    let mut d = Diagnostic::error(message)
        .resource(id)
        .at(Origin {
            file: rel.to_owned(),
            line: start.line as usize,
            column: start.column as usize,
            layer: layer.to_owned(),
        })
        .hiding_source(sensitive);
    if let Some(end) = end {
        d = d.until(end);
    }
    d
}

/// 1-based line and column (in characters) of a byte offset.
fn pos_of(text: &str, offset: usize) -> Pos {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    Pos::at(line, column)
}

/// SHA-256 and BLAKE3 of a repository file and its size, read in one
/// streaming pass with a buffer reused per thread; with a cache, not read at
/// all when the cache remembers the file under `key` (see `crate::hashes`).
/// `key`: the file's key from the `lstat` this compile already made (the
/// resolver's), so none is made here.
pub(crate) fn hash_source(
    path: &Path,
    key: &crate::hashes::FileKey,
    cache: Option<&dyn crate::hashes::SourceHashes>,
) -> std::io::Result<(crate::hashes::SourceDigests, u64)> {
    use crate::hashes::FileKey;
    let Some(cache) = cache else {
        return hash_open(&mut datum_host::repo::open(path)?);
    };
    // A remembered hash is looked up by the file's key: no open and close
    // for the file that did not change (most of them). The key names the
    // file itself (inode, device, size, times), so a hit is that very file's
    // hash. Unlike the open below, the resolver's lstat followed a link that
    // replaced a parent folder since the path was resolved: the hash is
    // still that file's, and the apply that reads the source refuses the
    // link (it re-reads the bytes without following links and checks them
    // against this SHA-256 before writing anything). A key taken earlier in
    // this compile is as good as one taken now: the stamp the catalogue is
    // saved with was taken before either, so a change since then is seen by
    // the next run, which compiles again.
    if let Some(digests) = cache.get(path, key) {
        return Ok((digests, key.size));
    }
    let mut file = datum_host::repo::open(path)?;
    // The key comes from the open file before reading: a change during the
    // read moves ctime past it, so the next pass misses and hashes again.
    let key = FileKey::of(&file.metadata()?);
    let (digests, size) = hash_open(&mut file)?;
    if size == key.size && !key.is_racy(crate::hashes::now_ns()) {
        cache.put(path, key, digests);
    }
    Ok((digests, size))
}

/// [`hash_source`] without a cache: the file at `path` opened (as the
/// compile opens a source) and read whole. Only a regular file: the
/// compile's resolver refuses anything else by its `lstat` before hashing,
/// and a FIFO, opened without blocking, would read as empty (or as
/// whatever a writer sends) and pass for a source.
pub(crate) fn hash_file(path: &Path) -> std::io::Result<(crate::hashes::SourceDigests, u64)> {
    let mut file = datum_host::repo::open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    hash_open(&mut file)
}

fn hash_open(file: &mut std::fs::File) -> std::io::Result<(crate::hashes::SourceDigests, u64)> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0u8; 128 * 1024]);
    }
    let mut sha = Sha256::new();
    let mut b3 = blake3::Hasher::new();
    let mut size = 0u64;
    BUF.with(|cell| -> std::io::Result<()> {
        let mut buf = cell.borrow_mut();
        loop {
            let n = match file.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            sha.update(&buf[..n]);
            b3.update(&buf[..n]);
            size += n as u64;
            // A compile that hashes a large `source:` shows it moving.
            datum_core::progress::bytes_hashed(n as u64);
        }
    })?;
    datum_core::progress::file_hashed();
    let digests = crate::hashes::SourceDigests {
        sha256: sha.finalize().into(),
        blake3: *b3.finalize().as_bytes(),
    };
    Ok((digests, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> HostIdentity {
        HostIdentity {
            name: "web-01".into(),
            labels: [("role".to_owned(), "web".to_owned())].into(),
        }
    }

    fn template(text: &str) -> (tempfile::TempDir, Templates, Diagnostics, bool) {
        let dir = tempfile::tempdir().unwrap();
        let abs = dir.path().join("motd.j2");
        std::fs::write(&abs, text).unwrap();
        let mut t = Templates::new();
        let mut diags = Diagnostics::new();
        let ok = t.load(
            &abs,
            Path::new("base/templates/motd.j2"),
            &ResourceId::new("File", "motd"),
            "base",
            false,
            &mut diags,
        );
        (dir, t, diags, ok)
    }

    #[test]
    fn renders_host_name_and_labels_and_keeps_the_final_newline() {
        let (_d, t, _, ok) =
            template("{{ host.name }} {{ host.labels.role }} {{ name }} {{ labels.role }}\n");
        assert!(ok);
        let out = t
            .render(
                Path::new("base/templates/motd.j2"),
                &host(),
                &ResourceId::new("File", "motd"),
                &Origin::default(),
                "base",
                false,
            )
            .unwrap();
        assert_eq!(out, "web-01 web web-01 web\n");
    }

    #[test]
    fn a_template_cannot_loop_forever_or_take_the_memory_of_the_host() {
        // Each of these ran unbounded: ten billion steps, or gigabytes of
        // strings built from a few instructions (`~`, `join`, `replace`).
        for text in [
            "{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}",
            "{% set a = \"x\" * 100000000 %}{% set a = a ~ a %}{% set a = a ~ a %}{% set a = a ~ a %}{% set a = a ~ a %}{% set a = a ~ a %}{{ a|length }}",
            "{% set a = \"x\" * 10000000 %}{{ [a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a]|join|length }}",
            "{% set a = \"x\" * 100000 %}{{ a|replace(\"x\", a)|length }}",
        ] {
            let (_d, t, _, ok) = template(text);
            assert!(ok, "{text}");
            let started = std::time::Instant::now();
            let d = t
                .render(
                    Path::new("base/templates/motd.j2"),
                    &host(),
                    &ResourceId::new("File", "motd"),
                    &Origin::default(),
                    "base",
                    false,
                )
                .unwrap_err();
            assert!(d.message.contains("out of fuel"), "{text}: {}", d.message);
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "{text}"
            );
        }
        // A template doing real work (a thousand lines from a loop) renders.
        let (_d, t, _, ok) = template(
            "{% for i in range(1000) %}server s{{ i }} {{ host.name }}:{{ 8000 + i }}\n{% endfor %}",
        );
        assert!(ok);
        let out = t
            .render(
                Path::new("base/templates/motd.j2"),
                &host(),
                &ResourceId::new("File", "motd"),
                &Origin::default(),
                "base",
                false,
            )
            .unwrap();
        assert_eq!(out.lines().count(), 1000);
    }

    #[test]
    fn undefined_variables_are_errors_at_the_template_line() {
        let (_d, t, _, ok) = template("line one\nrole {{ host.labels.colour }}\n");
        assert!(ok);
        let d = t
            .render(
                Path::new("base/templates/motd.j2"),
                &host(),
                &ResourceId::new("File", "motd"),
                &Origin::default(),
                "base",
                false,
            )
            .unwrap_err();
        assert!(d.message.contains("undefined"), "{}", d.message);
        let o = d.origin.clone().unwrap();
        assert_eq!(
            (o.file.to_str().unwrap(), o.line),
            ("base/templates/motd.j2", 2)
        );
        assert!(o.column >= 6, "{o}");
    }

    /// A sensitive resource's template error points at the template's line
    /// without showing it, and its message must not show it either:
    /// minijinja's details quote the expression (`m['...']` is undefined)
    /// and the name a computed `include` asked for.
    #[test]
    fn a_sensitive_template_s_error_never_quotes_the_template() {
        for text in [
            "{% set m = {\"a\": 1} %}\n{{ m[\"CANARY-KEY\"] + 1 }}",
            "{% set pw = \"CANARY-INCLUDE\" %}\n{% include pw %}",
            "x\n{{ host.labels[\"CANARY-LABEL\"] }}",
        ] {
            let (_d, t, _, ok) = template(text);
            assert!(ok, "{text}");
            let d = t
                .render(
                    Path::new("base/templates/motd.j2"),
                    &host(),
                    &ResourceId::new("File", "motd"),
                    &Origin::default(),
                    "base",
                    true,
                )
                .unwrap_err();
            let shown = format!("{} {:?}", d.message, d.notes);
            assert!(!shown.contains("CANARY"), "{text}: {shown}");
            assert!(d.message.starts_with("template error: "), "{}", d.message);
            assert_eq!(d.origin.as_ref().map(|o| o.line), Some(2), "{text}");
            // Not sensitive: the detail helps, and is shown.
            let d = t
                .render(
                    Path::new("base/templates/motd.j2"),
                    &host(),
                    &ResourceId::new("File", "motd"),
                    &Origin::default(),
                    "base",
                    false,
                )
                .unwrap_err();
            assert!(d.message.contains("CANARY"), "{text}: {}", d.message);
        }
    }

    #[test]
    fn html_suffixes_are_not_escaped() {
        let dir = tempfile::tempdir().unwrap();
        let abs = dir.path().join("x.html");
        std::fs::write(&abs, "{{ '<b>' }}").unwrap();
        let mut t = Templates::new();
        let mut diags = Diagnostics::new();
        let id = ResourceId::new("File", "x");
        assert!(t.load(&abs, Path::new("x.html"), &id, "base", false, &mut diags));
        let out = t
            .render(
                Path::new("x.html"),
                &host(),
                &id,
                &Origin::default(),
                "base",
                false,
            )
            .unwrap();
        assert_eq!(out, "<b>");
    }

    #[test]
    fn syntax_errors_are_reported_once_at_their_line() {
        let (_d, _t, diags, ok) = template("ok\n{% if x %}\nno end\n");
        assert!(!ok);
        let d: Vec<_> = diags.iter().collect();
        assert_eq!(d.len(), 1);
        assert!(
            d[0].message.starts_with("template syntax error"),
            "{}",
            d[0].message
        );
        assert_eq!(
            d[0].origin.as_ref().unwrap().file,
            PathBuf::from("base/templates/motd.j2")
        );
    }

    use crate::hashes::SourceDigests;

    /// A cache of source hashes held in memory.
    #[derive(Default)]
    struct Remembered(std::sync::Mutex<Vec<(PathBuf, crate::hashes::FileKey, SourceDigests)>>);

    impl crate::hashes::SourceHashes for Remembered {
        fn get(&self, path: &Path, key: &crate::hashes::FileKey) -> Option<SourceDigests> {
            let all = self.0.lock().unwrap();
            all.iter()
                .rev()
                .find(|(p, k, _)| p == path && k == key)
                .map(|e| e.2)
        }
        fn put(&self, path: &Path, key: crate::hashes::FileKey, digests: SourceDigests) {
            self.0.lock().unwrap().push((path.to_owned(), key, digests));
        }
    }

    /// The cache is asked with the key the compile already has (no lstat of
    /// its own): a hit stands for the file remembered under that key, a
    /// miss reads the file at the path, and what is read is never a link.
    #[test]
    fn a_remembered_hash_stands_for_the_key_it_was_remembered_under() {
        use crate::hashes::{FileKey, SourceHashes as _};
        use sha2::Digest as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().canonicalize().unwrap().join("motd");
        std::fs::write(&path, "hello").unwrap();
        let live = FileKey::of(&std::fs::symlink_metadata(&path).unwrap());
        let cache = Remembered::default();
        // Digests no file has: returned only when the cache is believed.
        let made_up = SourceDigests {
            sha256: [7; 32],
            blake3: [9; 32],
        };
        // Remembered under a key the file no longer has: that key finds it,
        // though the file's own key would not (no lstat is made here).
        let earlier = FileKey {
            ctime_ns: live.ctime_ns - 1,
            size: 3,
            ..live
        };
        cache.put(&path, earlier, made_up);
        assert_eq!(
            hash_source(&path, &earlier, Some(&cache)).unwrap(),
            (made_up, 3)
        );
        // The file's own key, which the cache does not know: read.
        let (read, size) = hash_source(&path, &live, Some(&cache)).unwrap();
        assert_eq!(
            (read.sha256, size),
            (sha2::Sha256::digest("hello").into(), 5)
        );

        // Another file of the same size renamed into its place, with its
        // own key: read again, its own bytes.
        let other = dir.path().join("motd.new");
        std::fs::write(&other, "world").unwrap();
        std::fs::rename(&other, &path).unwrap();
        let renamed = FileKey::of(&std::fs::symlink_metadata(&path).unwrap());
        let (digests, size) = hash_source(&path, &renamed, Some(&cache)).unwrap();
        assert_eq!(size, 5);
        assert_eq!(
            digests.sha256,
            <[u8; 32]>::from(sha2::Sha256::digest("world"))
        );

        // A link in its place is refused when it has to be read.
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("elsewhere", &path).unwrap();
        assert!(hash_source(&path, &live, Some(&cache)).is_err());
    }

    #[test]
    fn byte_offsets_become_character_columns() {
        assert_eq!(pos_of("ab\ncé{{x}}", 6), Pos { line: 2, column: 3 });
        assert_eq!(pos_of("abc", 0), Pos { line: 1, column: 1 });
    }
}
