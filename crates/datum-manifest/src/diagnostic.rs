//! Problems found in a repository, reported the way a compiler reports them.
//!
//! This module owns the [`Diagnostic`] value (severity, message, resource id,
//! position), the [`Diagnostics`] collection every check appends to (so all
//! errors are reported, never just the first), and its two renderings: the
//! compiler-style form with the source line and a caret, and the one-line form
//! for logs (`base/ssh.yaml:7:5: error: File[sshd-config]: unknown field`).
//!
//! It must not decide what is wrong with a repository (the loader and the
//! catalogue do) and must not print: callers get strings and choose where they go.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use datum_core::{Origin, ResourceId};
use serde::{Serialize, Serializer};

use crate::yaml::Pos;

/// How bad a diagnostic is. Any error stops a repository from being applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// One problem, with where it is and which resource it concerns.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    pub message: String,
    /// The resource the problem belongs to, written `File[sshd-config]`.
    #[serde(serialize_with = "id_as_text")]
    pub resource: Option<ResourceId>,
    /// File (relative to the repository), 1-based line and column, layer.
    pub origin: Option<Origin>,
    /// Where the offending text ends, for the width of the caret. Not part of
    /// the serialised form: `origin` is the position people and tools use.
    #[serde(skip)]
    pub end: Option<Pos>,
    /// Extra lines shown under the snippet (`note: ...`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The offending line is not shown (it holds a sensitive value): only
    /// its position.
    #[serde(skip)]
    pub hide_source: bool,
}

fn id_as_text<S: Serializer>(id: &Option<ResourceId>, s: S) -> Result<S::Ok, S::Error> {
    match id {
        Some(id) => s.serialize_str(&id.to_string()),
        None => s.serialize_none(),
    }
}

impl Diagnostic {
    /// An error with a message and nothing else; add the rest with the builders.
    pub fn error(message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Error,
            message: message.into(),
            resource: None,
            origin: None,
            end: None,
            notes: Vec::new(),
            hide_source: false,
        }
    }

    pub fn warning(message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Warning,
            ..Self::error(message)
        }
    }

    pub fn at(mut self, origin: Origin) -> Self {
        self.origin = Some(origin);
        self
    }

    /// Sets the end of the offending text (same line: the caret's width).
    pub fn until(mut self, end: Pos) -> Self {
        self.end = Some(end);
        self
    }

    pub fn resource(mut self, id: &ResourceId) -> Self {
        self.resource = Some(id.clone());
        self
    }

    /// Shows the position only, never the line: it holds a sensitive value
    /// (a User's password hash, anything in a `sensitive: true` resource).
    pub fn hiding_source(mut self, hide: bool) -> Self {
        self.hide_source = hide;
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    /// `base/ssh.yaml:7:5: error: File[sshd-config]: unknown field `mdoe``.
    pub fn one_line(&self) -> String {
        let mut out = String::new();
        if let Some(o) = &self.origin {
            let _ = write!(out, "{}: ", position(o));
        }
        let _ = write!(out, "{}: ", self.severity);
        if let Some(id) = &self.resource {
            let _ = write!(out, "{id}: ");
        }
        out.push_str(&self.message);
        out
    }

    /// [`Diagnostic::one_line`] with the file's full path under the
    /// repository `root` (`/srv/repo/base/ssh.yaml:7:5: error: ...`), for a
    /// log line read away from the repository.
    pub fn one_line_in(&self, root: &std::path::Path) -> String {
        match &self.origin {
            Some(o) => {
                let full = Origin {
                    file: root.join(&o.file),
                    ..o.clone()
                };
                Diagnostic {
                    origin: Some(full),
                    ..self.clone()
                }
                .one_line()
            }
            None => format!("{}: {}", root.display(), self.one_line()),
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.one_line())
    }
}

/// The text of every file diagnostics may point into, keyed by the path
/// relative to the repository, so the renderer can show the offending line.
///
/// A manifest's text is not held: it is read again, only when a message
/// about it is shown, and shown only when it is still what was parsed (its
/// length and BLAKE3 the same). A repository's manifests are its largest
/// text, and held for the whole compile they were a tenth of a 100,000-File
/// compile's peak memory, for messages that are most often never written.
#[derive(Debug, Clone, Default)]
pub struct SourceMap {
    files: BTreeMap<PathBuf, Source>,
}

#[derive(Debug, Clone)]
enum Source {
    /// Held in memory (the settings file, templates: small, or kept anyway).
    Held(Arc<str>),
    /// On disk, read when first needed (shared by the map's clones).
    OnDisk(Arc<OnDisk>),
}

/// A file whose text is read again when a message shows a line of it.
#[derive(Debug)]
struct OnDisk {
    /// Its canonical path (read without following links, as it was loaded).
    canonical: PathBuf,
    len: usize,
    digest: blake3::Hash,
    /// Whether the text has a directive line after its first (see
    /// [`SourceMap::has_directive`]): found once, not per message.
    directive: bool,
    /// The text read again: `None` when it cannot be read or has changed.
    text: OnceLock<Option<Box<str>>>,
    /// Where each of its lines begins, once a line is asked for: a
    /// repository with thousands of messages about one large manifest finds
    /// each line without scanning the text from its start.
    lines: OnceLock<Vec<usize>>,
}

impl OnDisk {
    fn text(&self) -> Option<&str> {
        self.text
            .get_or_init(|| {
                let bytes = datum_host::repo::read(&self.canonical).ok()?;
                let same = bytes.len() == self.len && blake3::hash(&bytes) == self.digest;
                let text = String::from_utf8(bytes).ok().filter(|_| same)?;
                Some(text.into_boxed_str())
            })
            .as_deref()
    }
}

impl SourceMap {
    pub fn insert(&mut self, path: impl Into<PathBuf>, text: impl Into<Arc<str>>) {
        self.files.insert(path.into(), Source::Held(text.into()));
    }

    /// Records `text`, read from `canonical`, by its length and BLAKE3 only:
    /// [`SourceMap::get`] reads the file again and returns it while it is
    /// still `text`.
    pub fn insert_on_disk(&mut self, path: impl Into<PathBuf>, canonical: &Path, text: &str) {
        let on_disk = OnDisk {
            canonical: canonical.to_owned(),
            len: text.len(),
            digest: blake3::hash(text.as_bytes()),
            directive: crate::yaml::has_directive(text),
            text: OnceLock::new(),
            lines: OnceLock::new(),
        };
        self.files
            .insert(path.into(), Source::OnDisk(Arc::new(on_disk)));
    }

    pub fn get(&self, path: &Path) -> Option<&str> {
        match self.files.get(path)? {
            Source::Held(text) => Some(text),
            Source::OnDisk(file) => file.text(),
        }
    }

    /// Line `line` (1-based) of `path`, without its newline.
    pub fn line(&self, path: &Path, line: usize) -> Option<&str> {
        self.from_line(path, line)?.lines().next()
    }

    /// The text of `path` from the beginning of line `line` (1-based) on.
    pub fn from_line(&self, path: &Path, line: usize) -> Option<&str> {
        let index = line.checked_sub(1)?;
        match self.files.get(path)? {
            Source::Held(text) => {
                let start = if index == 0 {
                    0
                } else {
                    text.match_indices('\n').nth(index - 1)?.0 + 1
                };
                text.get(start..)
            }
            Source::OnDisk(file) => {
                let text = file.text()?;
                let starts = file.lines.get_or_init(|| {
                    std::iter::once(0)
                        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
                        .collect()
                });
                text.get(*starts.get(index)?..)
            }
        }
    }

    /// [`crate::yaml::has_directive`] of `path`'s text (true when unknown).
    pub fn has_directive(&self, path: &Path) -> bool {
        match self.files.get(path) {
            Some(Source::Held(text)) => crate::yaml::has_directive(text),
            Some(Source::OnDisk(file)) => file.directive,
            None => true,
        }
    }

    pub fn extend(&mut self, other: &SourceMap) {
        for (k, v) in &other.files {
            self.files.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
}

/// Every problem found, in a stable order, with the sources to show them.
#[derive(Debug, Clone, Default)]
pub struct Diagnostics {
    items: Vec<Diagnostic>,
    sources: SourceMap,
}

impl Serialize for Diagnostics {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.items.serialize(s)
    }
}

impl Diagnostics {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, d: Diagnostic) {
        self.items.push(d);
    }

    /// Appends another collection, sources included.
    pub fn append(&mut self, other: Diagnostics) {
        self.items.extend(other.items);
        self.sources.extend(&other.sources);
    }

    pub fn sources(&self) -> &SourceMap {
        &self.sources
    }

    pub fn sources_mut(&mut self) -> &mut SourceMap {
        &mut self.sources
    }

    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.items.iter()
    }

    /// Each diagnostic, to change (a check that learns late that a
    /// resource's lines must be hidden).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Diagnostic> {
        self.items.iter_mut()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn error_count(&self) -> usize {
        self.items
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count()
    }

    pub fn warning_count(&self) -> usize {
        self.items
            .iter()
            .filter(|d| d.severity == Severity::Warning)
            .count()
    }

    pub fn has_errors(&self) -> bool {
        self.error_count() > 0
    }

    pub fn into_vec(self) -> Vec<Diagnostic> {
        self.items
    }

    /// Sorts by file, line and column (problems without a position first) and
    /// drops exact repeats, so output is the same on every run whatever order
    /// the checks ran in.
    pub fn finish(&mut self) {
        self.items.sort_by(|a, b| {
            let key = |d: &Diagnostic| {
                d.origin
                    .as_ref()
                    .map(|o| (o.file.clone(), o.line, o.column))
            };
            key(a).cmp(&key(b)).then(a.severity.cmp(&b.severity))
        });
        let mut seen = std::collections::HashSet::new();
        self.items
            .retain(|d| seen.insert((d.origin.clone(), d.resource.clone(), d.message.clone())));
    }

    /// `2 errors, 1 warning`.
    pub fn summary(&self) -> String {
        let plural = |n: usize, word: &str| {
            if n == 1 {
                format!("{n} {word}")
            } else {
                format!("{n} {word}s")
            }
        };
        format!(
            "{}, {}",
            plural(self.error_count(), "error"),
            plural(self.warning_count(), "warning")
        )
    }

    /// One line per diagnostic, for logs.
    pub fn one_line(&self) -> String {
        let mut out = String::new();
        for d in &self.items {
            out.push_str(&d.one_line());
            out.push('\n');
        }
        out
    }

    /// The compiler-style rendering of every diagnostic, separated by blank
    /// lines. ANSI colour only when `color` is true.
    pub fn render(&self, color: bool) -> String {
        let mut out = String::new();
        for (i, d) in self.items.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            render_one(&mut out, d, &self.sources, color);
        }
        out
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.one_line().trim_end())
    }
}

impl std::error::Error for Diagnostics {}

impl IntoIterator for Diagnostics {
    type Item = Diagnostic;
    type IntoIter = std::vec::IntoIter<Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.into_iter()
    }
}

/// `file:line:col`, or just `file` for problems with the whole file (line 0).
fn position(o: &Origin) -> String {
    if o.line == 0 {
        o.file.display().to_string()
    } else {
        o.to_string()
    }
}

fn render_one(out: &mut String, d: &Diagnostic, sources: &SourceMap, color: bool) {
    let paint = datum_report::style::Paint::new(color);
    let level_code = match d.severity {
        Severity::Error => "1;31",
        Severity::Warning => "1;33",
    };
    // The resource leads, as in the one-line form: messages may end in a
    // question (`did you mean `mode`?`), so a trailing "in File[x]" would not read.
    let header = match &d.resource {
        Some(id) => format!("{id}: {}", d.message),
        None => d.message.clone(),
    };
    let _ = writeln!(
        out,
        "{}{}",
        paint.wrap(level_code, &d.severity.to_string()),
        paint.wrap("1", &format!(": {header}"))
    );
    let Some(origin) = &d.origin else {
        for note in &d.notes {
            let _ = writeln!(out, "  = note: {note}");
        }
        return;
    };
    let line_text = sources
        .line(&origin.file, origin.line)
        .filter(|_| !d.hide_source);
    let gutter = origin.line.to_string().len();
    let pad = " ".repeat(gutter);
    let _ = writeln!(
        out,
        "{pad}{} {}",
        paint.wrap("1;34", "-->"),
        position(origin)
    );
    if let Some(text) = line_text {
        let bar = paint.wrap("1;34", "|");
        let line_chars = text.chars().count();
        let start = origin.column.max(1);
        let end = match d.end.map(|e| (e.line as usize, e.column as usize)) {
            Some((line, column)) if line == origin.line && column > start => column,
            // Spans ending on a later line underline the rest of this one.
            Some((line, _)) if line > origin.line => line_chars + 1,
            _ => start + 1,
        };
        let (shown, start, end) = snippet_window(text, start, end);
        let _ = writeln!(out, "{pad} {bar}");
        let _ = writeln!(
            out,
            "{} {bar} {}",
            paint.wrap("1;34", &origin.line.to_string()),
            shown.replace('\t', " ")
        );
        let width = end.saturating_sub(start).max(1);
        let carets = "^".repeat(width);
        let _ = writeln!(
            out,
            "{pad} {bar} {}{}",
            " ".repeat(start - 1),
            paint.wrap(level_code, &carets)
        );
    }
    for note in &d.notes {
        let _ = writeln!(out, "{pad} = note: {note}");
    }
}

/// The most characters of a line a snippet shows.
const SNIPPET_CHARS: usize = 160;

/// The part of `line` a snippet shows, and the span's columns in it (1-based,
/// `end` exclusive): the whole line when it is short, else a window that
/// starts a little before the span, each cut marked `…` (a minified
/// manifest's one line would otherwise be printed whole, hundreds of KB).
fn snippet_window(line: &str, start: usize, end: usize) -> (String, usize, usize) {
    let chars: Vec<char> = line.chars().collect();
    if chars.len() <= SNIPPET_CHARS {
        return (line.to_owned(), start, end);
    }
    let from = start.saturating_sub(1).saturating_sub(SNIPPET_CHARS / 4);
    let to = (from + SNIPPET_CHARS).min(chars.len());
    let lead = usize::from(from > 0);
    let mut shown = String::new();
    if from > 0 {
        shown.push('…');
    }
    shown.extend(chars.get(from..to).unwrap_or_default());
    if to < chars.len() {
        shown.push('…');
    }
    let start = start.saturating_sub(from).max(1) + lead;
    let end = (end.min(to + 1).saturating_sub(from) + lead).max(start + 1);
    (shown, start, end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_line_is_shown_around_its_span_not_whole() {
        let line = format!("{}BAD{}", "a".repeat(5000), "z".repeat(5000));
        let (shown, start, end) = snippet_window(&line, 5001, 5004);
        assert!(
            shown.chars().count() <= SNIPPET_CHARS + 2,
            "{}",
            shown.len()
        );
        assert!(shown.starts_with('…') && shown.ends_with('…'), "{shown}");
        let chars: Vec<char> = shown.chars().collect();
        assert_eq!(chars[start - 1..end - 1].iter().collect::<String>(), "BAD");
        // A short line is shown whole, its columns unchanged.
        assert_eq!(
            snippet_window("mode: 644", 7, 10),
            ("mode: 644".to_owned(), 7, 10)
        );
        // A span at the very start of a long line: no leading cut.
        let (shown, start, end) = snippet_window(&line, 1, 4);
        assert!(!shown.starts_with('…') && shown.ends_with('…'));
        assert_eq!((start, end), (1, 4));
    }

    fn sample() -> Diagnostics {
        let mut ds = Diagnostics::new();
        ds.sources_mut().insert(
            "base/ssh.yaml",
            "datum: v1alpha1\ntype: File\nname: sshd-config\ndesired:\n    path: /etc/x\n    mode: \"0600\"\n    mdoe: \"0600\"\n",
        );
        ds.push(
            Diagnostic::error("unknown field `mdoe`")
                .resource(&ResourceId::new("File", "sshd-config"))
                .at(Origin {
                    file: "base/ssh.yaml".into(),
                    line: 7,
                    column: 5,
                    layer: "base".into(),
                })
                .until(Pos {
                    line: 7,
                    column: 17,
                }),
        );
        ds
    }

    #[test]
    fn one_line_form_starts_with_the_position() {
        assert_eq!(
            sample().one_line(),
            "base/ssh.yaml:7:5: error: File[sshd-config]: unknown field `mdoe`\n"
        );
    }

    #[test]
    fn rendering_shows_the_line_and_a_caret_under_the_span() {
        let text = sample().render(false);
        let expected = "error: File[sshd-config]: unknown field `mdoe`\n --> base/ssh.yaml:7:5\n  |\n7 |     mdoe: \"0600\"\n  |     ^^^^^^^^^^^^\n";
        assert_eq!(text, expected);
        assert!(!text.contains('\x1b'));
    }

    #[test]
    fn a_sensitive_line_is_pointed_at_never_shown() {
        let mut ds = sample();
        let d = ds.items[0].clone().hiding_source(true);
        ds.items[0] = d;
        let text = ds.render(false);
        assert_eq!(
            text,
            "error: File[sshd-config]: unknown field `mdoe`\n --> base/ssh.yaml:7:5\n"
        );
    }

    #[test]
    fn colour_only_when_asked() {
        assert!(sample().render(true).contains("\x1b[1;31merror"));
    }

    #[test]
    fn serialises_the_id_as_text_and_the_origin() {
        let json = serde_json::to_value(sample()).unwrap();
        assert_eq!(json[0]["resource"], "File[sshd-config]");
        assert_eq!(json[0]["origin"]["line"], 7);
        assert_eq!(json[0]["severity"], "error");
    }

    #[test]
    fn finish_sorts_by_position_and_drops_repeats() {
        let mut ds = sample();
        let at = |line| Origin {
            file: "a.yaml".into(),
            line,
            column: 1,
            layer: "base".into(),
        };
        ds.push(Diagnostic::error("second").at(at(9)));
        ds.push(Diagnostic::error("first").at(at(2)));
        ds.push(Diagnostic::error("first").at(at(2)));
        ds.finish();
        let messages: Vec<_> = ds.iter().map(|d| d.message.as_str()).collect();
        assert_eq!(messages, ["first", "second", "unknown field `mdoe`"]);
        assert_eq!(ds.summary(), "3 errors, 0 warnings");
    }

    #[test]
    fn a_manifest_line_is_read_again_only_while_the_file_is_what_was_parsed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().canonicalize().unwrap().join("a.yaml");
        let parsed = "datum: v1alpha1\ntype: File\nname: x\n";
        std::fs::write(&file, parsed).unwrap();
        let mut early = SourceMap::default();
        early.insert_on_disk("base/a.yaml", &file, parsed);
        let mut late = SourceMap::default();
        late.insert_on_disk("base/a.yaml", &file, parsed);
        // Unchanged: the line is shown, read from the file.
        assert_eq!(early.line(Path::new("base/a.yaml"), 3), Some("name: x"));
        // Changed after it was parsed (same length, other bytes): a line of
        // the new text would point at something the message is not about.
        std::fs::write(&file, parsed.replace("name: x", "name: y")).unwrap();
        assert_eq!(late.line(Path::new("base/a.yaml"), 3), None);
        // What was read once stays, in the map and its clones.
        assert_eq!(
            early.clone().line(Path::new("base/a.yaml"), 3),
            Some("name: x")
        );
        // Gone: nothing to show, and no error.
        let mut gone = SourceMap::default();
        gone.insert_on_disk("base/b.yaml", &dir.path().join("b.yaml"), parsed);
        assert_eq!(gone.get(Path::new("base/b.yaml")), None);
    }
}
