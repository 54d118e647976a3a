//! A YAML tree in which every key and value remembers where it was written.
//!
//! This module owns turning YAML text into [`Node`]s with 1-based line and
//! column positions, and converting them to `serde_json::Value` for the
//! providers. It resolves plain scalars with the YAML 1.2 core schema (so `0600`
//! is the integer 600 and `"0600"` is a string: a provider can tell them apart).
//!
//! It must not know about Datum's document envelope or layers: it only parses.
//! Anything the envelope needs (duplicate keys, unsupported tags) is reported
//! here as a [`YamlError`] with a position, never by panicking.

use std::collections::{HashMap, HashSet};

use saphyr_parser::{Event, Marker, Parser, ScalarStyle, Span, Tag};

/// A position in a text: 1-based line and 1-based column, counted in
/// characters (so carets line up under non-ASCII text too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Pos {
    /// `u32`, not `usize`: a repository's tree holds four positions per
    /// mapping entry, and no manifest has four billion lines.
    pub line: u32,
    pub column: u32,
}

impl Pos {
    /// A position from `usize` line and column (saturating).
    pub fn at(line: usize, column: usize) -> Self {
        Self {
            line: u32::try_from(line).unwrap_or(u32::MAX),
            column: u32::try_from(column).unwrap_or(u32::MAX),
        }
    }

    fn from_marker(m: Marker) -> Self {
        Self {
            line: u32::try_from(m.line()).unwrap_or(u32::MAX),
            column: u32::try_from(m.col() + 1).unwrap_or(u32::MAX),
        }
    }
}

/// One YAML value with the span it was written at.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    pub start: Pos,
    pub end: Pos,
}

/// A mapping entry: the key's text and span, and the value.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub key: String,
    pub key_start: Pos,
    pub key_end: Pos,
    pub value: Node,
}

/// YAML values after core-schema resolution.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    /// Entries in the order written; keys are unique (duplicates are errors).
    Map(Vec<Entry>),
}

/// A problem in the YAML text itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct YamlError {
    pub message: String,
    pub start: Pos,
    pub end: Pos,
}

/// Every document of one file (as nodes, or what [`parse_each`] made of
/// each), and the problems found while reading it. A syntax error ends the
/// file (the parser cannot resynchronise), but the documents completed
/// before it are kept.
#[derive(Debug, Clone)]
pub struct Parsed<T = Node> {
    pub documents: Vec<T>,
    pub errors: Vec<YamlError>,
}

impl<T> Default for Parsed<T> {
    fn default() -> Self {
        Parsed {
            documents: Vec::new(),
            errors: Vec::new(),
        }
    }
}

impl Node {
    /// The name of the value's type, for messages (`expected a string, found a list`).
    pub fn type_name(&self) -> &'static str {
        match self.value {
            Value::Null => "nothing (null)",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_map(&self) -> Option<&[Entry]> {
        match &self.value {
            Value::Map(entries) => Some(entries),
            _ => None,
        }
    }

    pub fn as_seq(&self) -> Option<&[Node]> {
        match &self.value {
            Value::Seq(items) => Some(items),
            _ => None,
        }
    }

    /// A mapping's entries as `(key, value, where the key starts)`; none for
    /// anything else.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &Node, Pos)> {
        self.as_map()
            .unwrap_or(&[])
            .iter()
            .map(|e| (e.key.as_str(), &e.value, e.key_start))
    }

    /// The entry for `key` when this is a mapping.
    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.as_map()?.iter().find(|e| e.key == key)
    }

    /// A scalar written as text (labels and matchers accept `role: 1` as "1").
    pub fn scalar_text(&self) -> Option<String> {
        match &self.value {
            Value::Str(s) => Some(s.clone()),
            Value::Bool(b) => Some(b.to_string()),
            Value::Int(i) => Some(i.to_string()),
            Value::Float(f) => Some(f.to_string()),
            Value::Null | Value::Seq(_) | Value::Map(_) => None,
        }
    }

    /// Moves every position in the node down by `lines` (a piece of a text
    /// parsed from its own line 1, see [`parse`]).
    fn shift_lines(&mut self, lines: u32) {
        self.start.line = self.start.line.saturating_add(lines);
        self.end.line = self.end.line.saturating_add(lines);
        match &mut self.value {
            Value::Seq(items) => items.iter_mut().for_each(|n| n.shift_lines(lines)),
            Value::Map(entries) => {
                for e in entries {
                    e.key_start.line = e.key_start.line.saturating_add(lines);
                    e.key_end.line = e.key_end.line.saturating_add(lines);
                    e.value.shift_lines(lines);
                }
            }
            _ => {}
        }
    }

    /// Whether the node is an empty document (`---` followed by nothing).
    pub fn is_null(&self) -> bool {
        matches!(self.value, Value::Null)
    }

    /// The value as JSON, positions dropped, its texts moved (not copied).
    pub fn into_json(self) -> serde_json::Value {
        match self.value {
            Value::Str(s) => serde_json::Value::String(s),
            Value::Seq(items) => {
                serde_json::Value::Array(items.into_iter().map(Node::into_json).collect())
            }
            Value::Map(entries) => serde_json::Value::Object(
                entries
                    .into_iter()
                    .map(|e| (e.key, e.value.into_json()))
                    .collect(),
            ),
            _ => self.to_json(),
        }
    }

    /// The value as JSON, positions dropped.
    pub fn to_json(&self) -> serde_json::Value {
        match &self.value {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Int(i) => serde_json::Value::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f)
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null),
            Value::Str(s) => serde_json::Value::String(s.clone()),
            Value::Seq(items) => {
                serde_json::Value::Array(items.iter().map(Node::to_json).collect())
            }
            Value::Map(entries) => serde_json::Value::Object(
                entries
                    .iter()
                    .map(|e| (e.key.clone(), e.value.to_json()))
                    .collect(),
            ),
        }
    }

    /// Finds the entry at a field path (`["mode"]`, `["env", "PATH"]`); list
    /// items are addressed by their index written as a number.
    pub fn entry_at(&self, path: &[String]) -> Option<Located> {
        let (first, rest) = path.split_first()?;
        match &self.value {
            Value::Map(entries) => {
                let e = entries.iter().find(|e| &e.key == first)?;
                if rest.is_empty() {
                    Some(Located {
                        start: e.key_start,
                        end: e.value.end.max(e.key_end),
                    })
                } else {
                    e.value.entry_at(rest)
                }
            }
            Value::Seq(items) => {
                let index: usize = first.parse().ok()?;
                let item = items.get(index)?;
                if rest.is_empty() {
                    Some(Located {
                        start: item.start,
                        end: item.end,
                    })
                } else {
                    item.entry_at(rest)
                }
            }
            _ => None,
        }
    }
}

/// Where something was found: from the key (or item) start to the value end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Located {
    pub start: Pos,
    pub end: Pos,
}

/// Parses every document in `text`. A long text of many documents is cut
/// at its document markers into pieces that the cores parse side by side
/// (a few pieces per core, each at least 256 KiB, handed to
/// whichever core is free); the result is the one a single pass gives.
pub fn parse(text: &str) -> Parsed {
    parse_each(text, |node| node)
}

/// [`parse`], each document turned into what `each` makes of it on the
/// thread that parsed it (the pieces of a long text are parsed on several).
pub fn parse_each<T: Send>(text: &str, each: impl Fn(Node) -> T + Sync) -> Parsed<T> {
    if text.len() < 2 * PIECE_AT_LEAST {
        // Most manifests: no thread, and no asking how many cores there
        // are (which reads the process's cgroup files every time).
        return parse_piece(text).parsed.map(&each);
    }
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let wanted = (text.len() / PIECE_AT_LEAST).min(cores.saturating_mul(PIECES_PER_CORE));
    parse_cut(text, &pieces(text, wanted), cores, &each)
}

impl Parsed {
    /// Each document as `each` makes it.
    fn map<T>(self, each: impl Fn(Node) -> T) -> Parsed<T> {
        Parsed {
            documents: self.documents.into_iter().map(each).collect(),
            errors: self.errors,
        }
    }
}

/// The least text a piece gets. Parsing takes 40-50 ms per MB here and a
/// piece's handing over well under a millisecond; the pieces' nodes are the
/// same nodes, so the memory is the same within a fraction of a MiB.
const PIECE_AT_LEAST: usize = 256 << 10;

/// How many pieces a core gets, about: one each left a core idle for a
/// third of the parse whenever the other ran something else meanwhile (the
/// compile's stamp walk does), several let the free one take more.
const PIECES_PER_CORE: usize = 4;

/// [`parse`] in (at most) `wanted` pieces, on as many threads.
#[cfg(test)]
fn parse_in(text: &str, wanted: usize) -> Parsed {
    parse_cut(text, &pieces(text, wanted), wanted, &|node| node)
}

/// A piece of a text: where it starts, and the number of lines before it.
struct Cut<'a> {
    lines_before: u32,
    start: usize,
    text: &'a str,
}

/// Parses the pieces on up to `threads` threads (the calling one among
/// them), each piece moved to its lines in the whole text, and joins them in
/// order. The result is exactly one pass's: a piece that stopped at a syntax
/// error (other than the last) is parsed again with the rest of the text
/// behind it, since a cut may have turned the error one pass meets just
/// after it into another (an unclosed quote that meets the end of its piece
/// instead of the next marker); nothing after the error is kept.
fn parse_cut<T: Send>(
    text: &str,
    pieces: &[Cut<'_>],
    threads: usize,
    each: &(impl Fn(Node) -> T + Sync),
) -> Parsed<T> {
    // A piece parsed from `from` on, moved to the whole text's lines, each
    // document made into what `each` makes of it.
    let parse_from = |from: &str, lines_before: u32| {
        let mut piece = parse_piece(from);
        piece.shift_lines(lines_before);
        (piece.parsed.map(each), piece.stopped)
    };
    let [first, others @ ..] = pieces else {
        return Parsed::default();
    };
    if others.is_empty() {
        return parse_from(first.text, first.lines_before).0;
    }
    // Whichever thread is free takes the next piece.
    let (results, ()) = datum_core::parallel::each_taken(
        pieces,
        threads,
        || (),
        |_, cut| parse_from(cut.text, cut.lines_before),
    );
    let mut parsed = Parsed::default();
    parsed
        .documents
        .reserve(results.iter().map(|(r, _)| r.documents.len()).sum());
    let last = pieces.len() - 1;
    for (i, (mut piece, cut)) in results.into_iter().zip(pieces).enumerate() {
        if piece.1 && i < last {
            piece = parse_from(&text[cut.start..], cut.lines_before);
        }
        let (
            Parsed {
                mut documents,
                mut errors,
            },
            stopped,
        ) = piece;
        parsed.documents.append(&mut documents);
        parsed.errors.append(&mut errors);
        // A syntax error ends the file: what follows it is not read.
        if stopped {
            break;
        }
    }
    parsed
}

/// Whether `text` has a directive line (`%YAML`, `%TAG`) after its first: a
/// directive belongs to the document after it, so such a text is neither cut
/// into pieces nor parsed again a document at a time.
pub fn has_directive(text: &str) -> bool {
    text.contains("\n%")
}

/// The document that one pass over a whole text finds starting at `start`,
/// parsed again on its own from `rest`, the whole text from the beginning of
/// line `start.line` on: up to the next document-marker line (YAML forbids
/// one inside a document, see [`parse`]). Lines are the whole text's. `None`
/// when no document starts there (the text is not the one parsed), or when
/// the whole text (`whole_has_directive`) has a directive line, which
/// belongs to the document after it and may be out of reach.
pub fn document_at(rest: &str, start: Pos, whole_has_directive: bool) -> Option<Node> {
    if whole_has_directive || start.line == 0 {
        return None;
    }
    let end = next_marker(rest.as_bytes(), 0).unwrap_or(rest.len());
    let mut piece = parse_piece(rest.get(..end)?);
    if piece.stopped || !piece.parsed.errors.is_empty() {
        return None;
    }
    let mut node = piece.parsed.documents.drain(..).find(|d| !d.is_null())?;
    node.shift_lines(start.line - 1);
    (node.start == start).then_some(node)
}

/// `text` cut into at most `wanted` pieces of about equal length, each
/// beginning at a line that is a document marker (`---` at the start of a
/// line, then a space, a tab or the end of the line). YAML forbids such a
/// line inside any value (no scalar, quoted or not, and no collection can
/// span it), so every piece is a stream of whole documents, or one pass
/// would also have stopped at a syntax error there (see [`parse_cut`]). A
/// text with a directive line (`%YAML`, `%TAG`) after its start is never
/// cut: a directive belongs to the document after it.
fn pieces(text: &str, wanted: usize) -> Vec<Cut<'_>> {
    let mut starts = vec![0usize];
    if wanted >= 2 && !has_directive(text) {
        for i in 1..wanted {
            let target = text.len() / wanted * i;
            if target <= starts.last().copied().unwrap_or(0) {
                continue;
            }
            match next_marker(text.as_bytes(), target) {
                Some(at) => starts.push(at),
                None => break,
            }
        }
    }
    cut_at(text, &starts)
}

/// The pieces of `text` that begin at `starts` (ascending, the first 0).
fn cut_at<'a>(text: &'a str, starts: &[usize]) -> Vec<Cut<'a>> {
    let mut lines_before = 0u32;
    let mut cuts = Vec::with_capacity(starts.len());
    for (i, &start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(text.len());
        let piece = &text[start..end];
        cuts.push(Cut {
            lines_before,
            start,
            text: piece,
        });
        let newlines = piece.bytes().filter(|&b| b == b'\n').count();
        lines_before = lines_before.saturating_add(u32::try_from(newlines).unwrap_or(u32::MAX));
    }
    cuts
}

/// Where the first document-marker line that begins after `from` begins.
fn next_marker(bytes: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i < bytes.len() {
        let newline = i + bytes[i..].iter().position(|&b| b == b'\n')?;
        let line = newline + 1;
        let rest = &bytes[line..];
        if rest.starts_with(b"---")
            && matches!(rest.get(3), None | Some(b' ' | b'\t' | b'\n' | b'\r'))
        {
            return Some(line);
        }
        i = line;
    }
    None
}

/// One piece's documents and problems, and whether a syntax error stopped
/// it before its end.
struct Piece {
    parsed: Parsed,
    stopped: bool,
}

impl Piece {
    /// Moves every position down by `by` lines (the lines before the
    /// piece in the whole text).
    fn shift_lines(&mut self, by: u32) {
        if by == 0 {
            return;
        }
        for doc in &mut self.parsed.documents {
            doc.shift_lines(by);
        }
        for e in &mut self.parsed.errors {
            // Line 0 is "no position": it stays so.
            for pos in [&mut e.start, &mut e.end] {
                if pos.line > 0 {
                    pos.line = pos.line.saturating_add(by);
                }
            }
        }
    }
}

/// Parses every document in one piece of text, from its own line 1.
fn parse_piece(text: &str) -> Piece {
    let mut builder = Builder {
        parser: Parser::new_from_str(text),
        text,
        anchors: HashMap::new(),
        depth: 0,
        nodes: 0,
        expanded: 0,
        weight: 0,
        copied: 0,
        doc_start: 0,
        errors: Vec::new(),
        ascii: text.is_ascii(),
        cursor: (0, 0),
        open_entries: Vec::new(),
        open_items: Vec::new(),
    };
    let mut parsed = Parsed::default();
    let mut stopped = false;
    loop {
        match builder.next() {
            Ok(None) => break,
            Ok(Some((Event::DocumentStart(_), span))) => {
                // Anchors and the alias budget are per document (YAML's
                // anchors do not cross `---`), so a long file of plain
                // documents is never refused for its length.
                builder.anchors.clear();
                builder.expanded = 0;
                builder.copied = 0;
                builder.doc_start = span.start.index();
                match builder.document(span) {
                    Ok(doc) => parsed.documents.push(doc),
                    Err(e) => {
                        builder.errors.push(e);
                        stopped = true;
                        break;
                    }
                }
            }
            Ok(Some((Event::StreamStart, _))) => {}
            Ok(Some((Event::StreamEnd, _))) => break,
            Ok(Some((_, span))) => {
                builder
                    .errors
                    .push(error_at(span, "unexpected YAML event outside a document"));
                stopped = true;
                break;
            }
            Err(e) => {
                builder.errors.push(e);
                stopped = true;
                break;
            }
        }
    }
    parsed.errors = builder.errors;
    Piece { parsed, stopped }
}

fn error_at(span: Span, message: impl Into<String>) -> YamlError {
    YamlError {
        message: message.into(),
        start: Pos::from_marker(span.start),
        end: Pos::from_marker(span.end),
    }
}

/// Deeper nesting than this is refused rather than risking the stack.
const MAX_DEPTH: usize = 200;
/// More values than this copied by aliases into one document is refused: a
/// few nested aliases can otherwise expand to gigabytes. Values written out
/// in the file are not counted (the file's size bounds them).
const MAX_EXPANDED: usize = 1_000_000;
/// From this many entries a mapping's keys are also kept in a set, to find
/// a duplicate key without comparing it with every key before it (below,
/// comparing is cheaper than hashing and allocates nothing).
const LONG_MAPPING: usize = 32;
/// Aliases may copy into a document at most this many bytes (see
/// [`weight_of`]) per character of the document read up to the alias. The
/// value budget above is per document, so on its own a file of many small
/// documents, each copying just under a million values, or a document
/// copying a long string thousands of times, grew without bound (118 KB of
/// YAML took more than 6 GB); tied to the text, what aliases add stays a
/// fixed multiple of what was read (a document copying its anchors a few
/// times uses a small part of it), and pieces parsed apart count the same.
const COPY_PER_CHARACTER: usize = 64;

/// What a value holds in memory, roughly: its node and, for a string, its
/// bytes (its entries and items are nodes of their own, counted with them).
fn weight_of(node: &Node) -> usize {
    std::mem::size_of::<Node>()
        + match &node.value {
            Value::Str(s) => s.len(),
            _ => 0,
        }
}

/// saphyr's words for a line indented with a tab after a plain value, an
/// error it places at the value's start, a line that holds no tab.
const PLAIN_SCALAR_TAB: &str = "while scanning a plain scalar, found a tab";

/// Where the tab is that [`PLAIN_SCALAR_TAB`] is about: the first one on a
/// line after the value's (saphyr's marker counts characters).
fn tab_after(text: &str, marker: &Marker) -> Option<Pos> {
    let mut line = marker.line();
    let mut column = 0;
    let mut next_line = false;
    for c in text.chars().skip(marker.index()) {
        match c {
            '\n' => {
                next_line = true;
                line += 1;
                column = 0;
            }
            '\t' if next_line => return Some(Pos::at(line, column + 1)),
            _ => column += 1,
        }
    }
    None
}

/// Just after the last character of `text` that is not a blank or a line
/// break; `None` for a text of nothing else.
fn end_of_content(text: &str) -> Option<Pos> {
    let content = text.trim_end();
    if content.is_empty() {
        return None;
    }
    let (line, last) = match content.rfind('\n') {
        Some(at) => (content[..at].matches('\n').count() + 2, &content[at + 1..]),
        None => (1, content),
    };
    Some(Pos::at(line, last.chars().count() + 1))
}

struct Builder<'a> {
    parser: Parser<'a, saphyr_parser::StrInput<'a>>,
    /// The text parsed (to place an error saphyr places elsewhere).
    text: &'a str,
    /// Anchored values, how many values each holds and their weight.
    anchors: HashMap<usize, (Node, usize, usize)>,
    depth: usize,
    /// Values built so far in the current document (to size anchors).
    nodes: usize,
    /// Values copied by aliases in the current document.
    expanded: usize,
    /// The weight ([`weight_of`]) of the values built so far (to weigh
    /// anchors).
    weight: usize,
    /// The weight copied by aliases in the current document.
    copied: usize,
    /// Where the current document starts (characters).
    doc_start: usize,
    /// Problems that do not stop the file (duplicate keys, unknown tags).
    errors: Vec<YamlError>,
    /// Whether `text` is ASCII: a character index is then a byte offset.
    ascii: bool,
    /// A character index of `text` and its byte offset, the last one
    /// [`Builder::byte_offset`] found (values come in order, so finding
    /// each from the last walks the text once).
    cursor: (usize, usize),
    /// The entries of the mappings being built, innermost last: each
    /// mapping's own are moved out in one exactly sized list when it ends
    /// (a list per mapping grown by doubling and then shrunk was two or
    /// three copies of every entry, a tenth of a long manifest's parse).
    open_entries: Vec<Entry>,
    /// The same for sequences' items.
    open_items: Vec<Node>,
}

impl<'a> Builder<'a> {
    fn next(&mut self) -> Result<Option<(Event<'a>, Span)>, YamlError> {
        match self.parser.next_event() {
            None => Ok(None),
            Some(Ok(ev)) => Ok(Some(ev)),
            Some(Err(e)) => {
                if e.info() == PLAIN_SCALAR_TAB
                    && let Some(pos) = tab_after(self.text, e.marker())
                {
                    return Err(YamlError {
                        message: "YAML syntax error: a tab in the indentation (YAML indents with spaces only)".to_owned(),
                        start: pos,
                        end: pos,
                    });
                }
                // An error met at the end of the text (an unclosed `{` or
                // `[`) is placed there by saphyr, on the line after the
                // last, which a message cannot show: it goes just after
                // the last character written instead.
                if self.byte_offset(e.marker().index()) == Some(self.text.len())
                    && let Some(pos) = end_of_content(self.text)
                {
                    return Err(YamlError {
                        message: format!("YAML syntax error: {} (the file ends here)", e.info()),
                        start: pos,
                        end: pos,
                    });
                }
                let pos = Pos::from_marker(*e.marker());
                Err(YamlError {
                    message: format!("YAML syntax error: {}", e.info()),
                    start: pos,
                    end: pos,
                })
            }
        }
    }

    /// Where a quoted scalar written at `span` ends: just after its
    /// closing quote. saphyr's span runs on over the blanks and the comment
    /// after it to the end of the line (`mode: "0999"  # note`), which a
    /// message's underline would take in. `None` when the text at `span`
    /// is not such a scalar (saphyr's end stands then).
    fn closing_quote(&mut self, span: Span, quote: u8) -> Option<Pos> {
        let from = self.byte_offset(span.start.index())?;
        let to = self.byte_offset(span.end.index())?;
        let written = self.text.get(from..to)?;
        let bytes = written.as_bytes();
        if bytes.first() != Some(&quote) {
            return None;
        }
        let mut i = 1;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' if quote == b'"' => i += 2,
                b if b == quote && quote == b'\'' && bytes.get(i + 1) == Some(&quote) => i += 2,
                b if b == quote => {
                    // What follows the quote up to saphyr's end is on the
                    // quote's line (blanks, a comment).
                    let after = written.get(i + 1..)?.chars().count();
                    let end = Pos::from_marker(span.end);
                    let column = end.column.checked_sub(u32::try_from(after).ok()?)?;
                    return Some(Pos { column, ..end });
                }
                _ => i += 1,
            }
        }
        None
    }

    /// The byte offset of character `index` of the text (saphyr's markers
    /// count characters), found from the last one asked for.
    fn byte_offset(&mut self, index: usize) -> Option<usize> {
        if self.ascii {
            return (index <= self.text.len()).then_some(index);
        }
        if index < self.cursor.0 {
            self.cursor = (0, 0);
        }
        let (mut chars, mut bytes) = self.cursor;
        let mut rest = self.text.get(bytes..)?.chars();
        while chars < index {
            bytes += rest.next()?.len_utf8();
            chars += 1;
        }
        self.cursor = (chars, bytes);
        Some(bytes)
    }

    fn next_required(&mut self) -> Result<(Event<'a>, Span), YamlError> {
        self.next()?.ok_or_else(|| YamlError {
            message: "YAML syntax error: the file ends in the middle of a value".to_owned(),
            start: Pos::default(),
            end: Pos::default(),
        })
    }

    fn document(&mut self, start: Span) -> Result<Node, YamlError> {
        let (ev, span) = self.next_required()?;
        let node = match ev {
            // `---` followed directly by `---` or the end: an empty document.
            Event::DocumentEnd => {
                return Ok(Node {
                    value: Value::Null,
                    start: Pos::from_marker(start.start),
                    end: Pos::from_marker(span.end),
                });
            }
            ev => self.node(ev, span)?,
        };
        let (ev, span) = self.next_required()?;
        if ev != Event::DocumentEnd {
            return Err(error_at(
                span,
                "YAML syntax error: expected the end of the document",
            ));
        }
        Ok(node)
    }

    fn node(&mut self, ev: Event<'a>, span: Span) -> Result<Node, YamlError> {
        if self.depth >= MAX_DEPTH {
            return Err(error_at(
                span,
                format!("values nested deeper than {MAX_DEPTH} levels"),
            ));
        }
        self.depth += 1;
        let nodes_before = self.nodes;
        let weight_before = self.weight;
        let result = self.node_inner(ev, span);
        self.depth -= 1;
        let (anchor, node) = result?;
        self.nodes += 1;
        self.weight = self.weight.saturating_add(weight_of(&node));
        if anchor != 0 {
            self.anchors.insert(
                anchor,
                (
                    node.clone(),
                    self.nodes - nodes_before,
                    self.weight - weight_before,
                ),
            );
        }
        Ok(node)
    }

    fn node_inner(&mut self, ev: Event<'a>, span: Span) -> Result<(usize, Node), YamlError> {
        let start = Pos::from_marker(span.start);
        Ok(match ev {
            Event::Scalar(text, style, anchor, tag) => {
                let value = self.scalar(&text, style, tag.as_deref(), span);
                let end = match style {
                    ScalarStyle::SingleQuoted => self.closing_quote(span, b'\''),
                    ScalarStyle::DoubleQuoted => self.closing_quote(span, b'"'),
                    _ => None,
                };
                (
                    anchor,
                    Node {
                        value,
                        start,
                        end: end.unwrap_or_else(|| Pos::from_marker(span.end)),
                    },
                )
            }
            Event::Alias(id) => {
                let Some((target, count, weight)) = self.anchors.get(&id) else {
                    return Err(error_at(span, "YAML alias refers to an unknown anchor"));
                };
                // The copy counts as many values as it holds (minus itself,
                // which the caller counts), and weighs as much.
                self.nodes += count.saturating_sub(1);
                self.expanded += count;
                self.weight = self
                    .weight
                    .saturating_add(weight.saturating_sub(weight_of(target)));
                self.copied = self.copied.saturating_add(*weight);
                let read = span.end.index().saturating_sub(self.doc_start);
                if self.copied > read.saturating_mul(COPY_PER_CHARACTER) {
                    return Err(error_at(
                        span,
                        format!(
                            "aliases in this document copy {} bytes, more than {COPY_PER_CHARACTER} per character of the document",
                            self.copied
                        ),
                    ));
                }
                // Checked before copying, so a bomb never allocates.
                if self.expanded > MAX_EXPANDED {
                    return Err(error_at(
                        span,
                        format!(
                            "aliases in this document expand to more than {MAX_EXPANDED} values"
                        ),
                    ));
                }
                // The alias's own position is more useful in messages than
                // the anchor's: that is where the value is used.
                let mut copy = target.clone();
                copy.start = start;
                copy.end = Pos::from_marker(span.end);
                (0, copy)
            }
            Event::SequenceStart(anchor, tag) => {
                self.reject_tag(tag.as_deref(), "seq", span);
                let first = self.open_items.len();
                loop {
                    let (ev, span) = self.next_required()?;
                    if ev == Event::SequenceEnd {
                        // Trees live as long as the repository: no spare
                        // room (a drained range collects exactly sized).
                        let items: Vec<Node> = self.open_items.drain(first..).collect();
                        let node = Node {
                            value: Value::Seq(items),
                            start,
                            end: Pos::from_marker(span.end),
                        };
                        break (anchor, node);
                    }
                    let item = self.node(ev, span)?;
                    self.open_items.push(item);
                }
            }
            Event::MappingStart(anchor, tag) => {
                self.reject_tag(tag.as_deref(), "map", span);
                let first = self.open_entries.len();
                // A long mapping's keys, once it has many: each key compared
                // with every one before it made a mapping of 50,000 keys
                // cost 14 s of every compile.
                let mut keys: Option<HashSet<String>> = None;
                loop {
                    let (ev, kspan) = self.next_required()?;
                    if ev == Event::MappingEnd {
                        let entries: Vec<Entry> = self.open_entries.drain(first..).collect();
                        let node = Node {
                            value: Value::Map(entries),
                            start,
                            end: Pos::from_marker(kspan.end),
                        };
                        break (anchor, node);
                    }
                    let key_node = self.node(ev, kspan)?;
                    let (vev, vspan) = self.next_required()?;
                    let value = self.node(vev, vspan)?;
                    let Some(key) = key_node.scalar_text() else {
                        self.errors.push(YamlError {
                            message: format!(
                                "a mapping key must be a plain word, found {}",
                                key_node.type_name()
                            ),
                            start: key_node.start,
                            end: key_node.end,
                        });
                        continue;
                    };
                    let so_far = &self.open_entries[first..];
                    if keys.is_none() && so_far.len() >= LONG_MAPPING {
                        keys = Some(so_far.iter().map(|e| e.key.clone()).collect());
                    }
                    let duplicate = match &mut keys {
                        Some(keys) => !keys.insert(key.clone()),
                        None => so_far.iter().any(|e| e.key == key),
                    };
                    if duplicate {
                        self.errors.push(YamlError {
                            message: format!("duplicate key `{key}`"),
                            start: key_node.start,
                            end: key_node.end,
                        });
                        continue;
                    }
                    self.open_entries.push(Entry {
                        key,
                        key_start: key_node.start,
                        key_end: key_node.end,
                        value,
                    });
                }
            }
            _ => {
                return Err(error_at(span, "YAML syntax error: unexpected event"));
            }
        })
    }

    fn reject_tag(&mut self, tag: Option<&Tag>, expected: &str, span: Span) {
        if let Some(tag) = tag
            && !(tag.is_yaml_core_schema() && tag.suffix == expected)
        {
            self.errors
                .push(error_at(span, format!("unsupported YAML tag `{tag}`")));
        }
    }

    fn scalar(&mut self, text: &str, style: ScalarStyle, tag: Option<&Tag>, span: Span) -> Value {
        if let Some(tag) = tag {
            if !tag.is_yaml_core_schema() {
                self.errors
                    .push(error_at(span, format!("unsupported YAML tag `{tag}`")));
                return Value::Str(text.to_string());
            }
            return match tag.suffix.as_str() {
                "str" => Value::Str(text.to_string()),
                "null" | "bool" | "int" | "float" => {
                    let v = resolve_plain(text);
                    let ok = matches!(
                        (tag.suffix.as_str(), &v),
                        ("null", Value::Null)
                            | ("bool", Value::Bool(_))
                            | ("int", Value::Int(_))
                            | ("float", Value::Float(_) | Value::Int(_))
                    );
                    if !ok {
                        self.errors
                            .push(error_at(span, format!("`{text}` is not a valid `{tag}`")));
                    }
                    v
                }
                _ => {
                    self.errors
                        .push(error_at(span, format!("unsupported YAML tag `{tag}`")));
                    Value::Str(text.to_string())
                }
            };
        }
        match style {
            ScalarStyle::Plain => resolve_plain(text),
            _ => Value::Str(text.to_string()),
        }
    }
}

/// YAML 1.2 core schema resolution of a plain (unquoted) scalar.
fn resolve_plain(text: &str) -> Value {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    if let Some(v) = resolve_int(text) {
        return v;
    }
    if is_float(text)
        && let Ok(f) = text.parse::<f64>()
        && f.is_finite()
    {
        return Value::Float(f);
    }
    // `.inf` and `.nan` have no JSON form; they stay text.
    Value::Str(text.to_owned())
}

fn resolve_int(text: &str) -> Option<Value> {
    if let Some(oct) = text.strip_prefix("0o") {
        return i64::from_str_radix(oct, 8).ok().map(Value::Int);
    }
    if let Some(hex) = text.strip_prefix("0x") {
        return i64::from_str_radix(hex, 16).ok().map(Value::Int);
    }
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Too large for i64: keep it as a number if it fits a float.
    Some(match text.parse::<i64>() {
        Ok(i) => Value::Int(i),
        Err(_) => text
            .parse::<f64>()
            .map(Value::Float)
            .unwrap_or_else(|_| Value::Str(text.to_owned())),
    })
}

fn is_float(text: &str) -> bool {
    let body = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let (int_part, frac_part) = match mantissa.split_once('.') {
        Some((a, b)) => (a, Some(b)),
        None => (mantissa, None),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match frac_part {
        Some(frac) => digits(int_part) && digits(frac) && !(int_part.is_empty() && frac.is_empty()),
        None => !int_part.is_empty() && digits(int_part),
    };
    let exponent_ok = match exponent {
        None => true,
        Some(e) => {
            let e = e.strip_prefix(['-', '+']).unwrap_or(e);
            !e.is_empty() && digits(e)
        }
    };
    mantissa_ok && exponent_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Node {
        let p = parse(text);
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        assert_eq!(p.documents.len(), 1);
        p.documents.into_iter().next().unwrap()
    }

    #[test]
    fn keys_and_values_carry_one_based_positions() {
        let doc = one("type: File\ndesired:\n    mode: \"0600\"\n");
        let desired = doc.get("desired").unwrap();
        assert_eq!(desired.key_start, Pos { line: 2, column: 1 });
        let mode = desired.value.get("mode").unwrap();
        assert_eq!(mode.key_start, Pos { line: 3, column: 5 });
        assert_eq!(
            mode.value.start,
            Pos {
                line: 3,
                column: 11
            }
        );
        assert_eq!(mode.value.as_str(), Some("0600"));
    }

    #[test]
    fn plain_scalars_follow_the_core_schema_and_quoted_ones_stay_text() {
        let doc = one("a: 0600\nb: '0600'\nc: true\nd: ~\ne: 1.5\nf: 0o644\ng: yes\nh: .inf\n");
        let j = doc.to_json();
        assert_eq!(j["a"], serde_json::json!(600));
        assert_eq!(j["b"], serde_json::json!("0600"));
        assert_eq!(j["c"], serde_json::json!(true));
        assert_eq!(j["d"], serde_json::Value::Null);
        assert_eq!(j["e"], serde_json::json!(1.5));
        assert_eq!(j["f"], serde_json::json!(420));
        // YAML 1.1's yes/no booleans are plain text in 1.2.
        assert_eq!(j["g"], serde_json::json!("yes"));
        assert_eq!(j["h"], serde_json::json!(".inf"));
    }

    #[test]
    fn several_documents_and_empty_ones_are_kept_in_order() {
        let p = parse("a: 1\n---\n---\nb: 2\n");
        assert!(p.errors.is_empty());
        assert_eq!(p.documents.len(), 3);
        assert!(p.documents[1].is_null());
        assert_eq!(p.documents[2].get("b").unwrap().key_start.line, 4);
    }

    #[test]
    fn syntax_errors_keep_earlier_documents_and_point_at_the_line() {
        let p = parse("a: 1\n---\nb: [1, 2\nc: 3\n");
        assert_eq!(p.documents.len(), 1);
        assert_eq!(p.errors.len(), 1);
        assert!(
            p.errors[0].message.starts_with("YAML syntax error"),
            "{:?}",
            p.errors
        );
        assert!(p.errors[0].start.line >= 3);
    }

    /// An error met at the end of the text (an unclosed `{`) is placed just
    /// after the last character written, a line a message can show, not on
    /// the line after the last.
    #[test]
    fn an_error_at_the_end_of_the_text_points_at_its_last_character() {
        for (text, at) in [
            ("a: 1\nb: {k: v\n", Pos::at(2, 9)),
            ("a: 1\nb: {k: v\n\n  \n", Pos::at(2, 9)),
            ("a: 1\nb: {k: v", Pos::at(2, 9)),
            ("a: [x, é\n", Pos::at(1, 9)),
        ] {
            let p = parse(text);
            assert_eq!(p.errors.len(), 1, "{text:?}: {:?}", p.errors);
            assert_eq!((p.errors[0].start, p.errors[0].end), (at, at), "{text:?}");
            assert!(
                p.errors[0].message.ends_with("(the file ends here)"),
                "{:?}",
                p.errors[0]
            );
        }
        // The same when the text is parsed in pieces: the last piece's end
        // is the text's.
        let mut text = "a: 1\n---\n".repeat(400);
        text.push_str("b: [1,\n  2\n");
        let p = parse_in(&text, 4);
        assert_eq!(p.errors.len(), 1, "{:?}", p.errors);
        assert_eq!(p.errors[0].start, Pos::at(802, 4));
        // An error before the end stays where saphyr puts it.
        let p = parse("a: \"x\n");
        assert_eq!(p.errors[0].start, Pos::at(1, 4));
        assert!(!p.errors[0].message.contains("ends here"));
    }

    /// A line indented with a tab after a plain value: the parser names the
    /// value's start, a line with no tab; the error points at the tab.
    #[test]
    fn a_tab_in_the_indentation_is_pointed_at() {
        let p = parse("type: File\ndesired:\n  path: /etc/x\n\towner: root\n");
        assert_eq!(p.errors.len(), 1, "{:?}", p.errors);
        assert_eq!(
            p.errors[0].message,
            "YAML syntax error: a tab in the indentation (YAML indents with spaces only)"
        );
        assert_eq!(p.errors[0].start, Pos { line: 4, column: 1 });
        // The same after a blank line, and in a later document.
        let p = parse("a: 1\n---\nb:\n  c: d\n\n  \t e: f\n");
        assert_eq!(
            p.errors[0].start,
            Pos { line: 6, column: 3 },
            "{:?}",
            p.errors
        );
    }

    #[test]
    fn duplicate_keys_are_errors_at_the_second_key() {
        let p = parse("a: 1\nb: 2\na: 3\n");
        assert_eq!(p.errors.len(), 1);
        assert_eq!(p.errors[0].message, "duplicate key `a`");
        assert_eq!(p.errors[0].start, Pos { line: 3, column: 1 });
    }

    #[test]
    fn a_mapping_of_many_keys_is_checked_for_duplicates_in_linear_time() {
        // Each key was compared with every key before it: 50,000 keys (a
        // 600 KB manifest) took 14 s of every compile, lint and agent
        // reload, and 100,000 a minute. A duplicate is still found,
        // far down such a mapping, at its line.
        let mut text = String::from("m:\n");
        for i in 0..100_000 {
            text.push_str(&format!("  k{i}: v\n"));
        }
        text.push_str("  k7: again\n");
        let t0 = std::time::Instant::now();
        let p = parse(&text);
        let took = t0.elapsed();
        assert_eq!(p.errors.len(), 1, "{:?}", p.errors.first());
        assert_eq!(p.errors[0].message, "duplicate key `k7`");
        assert_eq!(p.errors[0].start.line, 100_002);
        let m = p.documents[0].get("m").unwrap();
        assert_eq!(m.value.as_map().unwrap().len(), 100_000);
        assert!(took < std::time::Duration::from_secs(10), "{took:?}");
    }

    /// A key repeated only in a nested mapping, or in a sibling one, is no
    /// duplicate; one repeated in the same mapping is, however deep; every
    /// mapping and sequence keeps its own members in order.
    #[test]
    fn each_mapping_checks_and_keeps_its_own_keys() {
        let p = parse(
            "a:\n  b: 1\n  c:\n    - {b: 2}\n    - {b: 3, d: [x, {b: 4}], b: 5}\n  e: [[1, 2], [3]]\nb: 6\n",
        );
        assert_eq!(p.errors.len(), 1, "{:?}", p.errors);
        assert_eq!(p.errors[0].message, "duplicate key `b`");
        assert_eq!(
            p.errors[0].start,
            Pos {
                line: 5,
                column: 30
            }
        );
        assert_eq!(
            p.documents[0].to_json(),
            serde_json::json!({
                "a": {"b": 1, "c": [{"b": 2}, {"b": 3, "d": ["x", {"b": 4}]}], "e": [[1, 2], [3]]},
                "b": 6
            })
        );
    }

    #[test]
    fn aliases_copy_the_anchored_value() {
        let doc = one("a: &x {k: v}\nb: *x\n");
        assert_eq!(doc.to_json()["b"], serde_json::json!({"k": "v"}));
        assert_eq!(doc.get("b").unwrap().value.start.line, 2);
    }

    #[test]
    fn str_tag_forces_text_and_unknown_tags_are_errors() {
        let p = parse("a: !!str 0600\nb: !custom x\n");
        assert_eq!(p.documents[0].to_json()["a"], serde_json::json!("0600"));
        assert_eq!(p.errors.len(), 1);
        assert!(p.errors[0].message.contains("unsupported YAML tag"));
        assert_eq!(p.errors[0].start.line, 2);
    }

    #[test]
    fn entry_at_spans_key_to_value() {
        let doc = one("desired:\n  env:\n    - x\n    - yy\n");
        let loc = doc
            .entry_at(&["desired".into(), "env".into(), "1".into()])
            .unwrap();
        assert_eq!(loc.start, Pos { line: 4, column: 7 });
        assert_eq!(loc.end, Pos { line: 4, column: 9 });
        assert!(doc.entry_at(&["desired".into(), "nope".into()]).is_none());
    }

    #[test]
    fn a_quoted_value_ends_at_its_closing_quote_not_at_a_comment_after_it() {
        // (text, the value of `a`'s end column); saphyr's own span ran to
        // the end of the line, over the blanks and the comment.
        let cases = [
            ("a: \"0999\"  # world-readable\nb: 1\n", 10),
            ("a: \"0999\"\n", 10),
            ("a: '09'\t# c\n", 8),
            ("a: 'it''s' # 'q'\n", 11),
            ("a: \"x\\\"y\\\\\" # \"q\"\n", 12),
            ("a: \"é€\"  # ü\n", 8),
            ("x: é\na: \"0999\"   # c\n", 10),
        ];
        for (text, column) in cases {
            let doc = one(text);
            let a = &doc.get("a").unwrap().value;
            let line = text.lines().position(|l| l.starts_with("a:")).unwrap() + 1;
            assert_eq!(a.end, Pos::at(line, column), "{text:?}: {:?}", a.to_json());
        }
        // A value over two lines ends on the second, at its quote.
        let doc = one("a: \"one\n  two\"  # c\nb: 'x\n  y' # d\n");
        assert_eq!(doc.get("a").unwrap().value.end, Pos::at(2, 7));
        assert_eq!(doc.get("b").unwrap().value.end, Pos::at(4, 5));
        // In a flow mapping too.
        let doc = one("a: {k: \"v\"  , j: 'w'  }\n");
        let k = &doc.get("a").unwrap().value.get("k").unwrap().value;
        assert_eq!((k.start, k.end), (Pos::at(1, 8), Pos::at(1, 11)));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        // Ours stops at 200 levels; the parser's own limit a little later.
        for depth in [220, 5000] {
            let text = format!("a: {}{}\n", "[".repeat(depth), "]".repeat(depth));
            let p = parse(&text);
            assert_eq!(p.errors.len(), 1);
            let m = &p.errors[0].message;
            assert!(
                m.contains("nested deeper") || m.contains("recursion limit"),
                "{m}"
            );
        }
    }

    #[test]
    fn alias_bombs_are_refused() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let prev = i - 1;
            text.push_str(&format!("a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"));
        }
        let p = parse(&text);
        assert_eq!(p.errors.len(), 1, "{:?}", p.errors);
        assert!(p.errors[0].message.contains("more than"), "{:?}", p.errors);
    }

    #[test]
    fn a_long_file_of_plain_documents_is_not_refused_for_its_length() {
        // 60,000 documents of 21 values: 1.26 million values in one file,
        // more than the alias budget, but no alias anywhere.
        let mut text = String::new();
        for i in 0..60_000 {
            text.push_str(&format!(
                "---\ntype: File\nname: f{i}\npath: /srv/f/{i}\nmode: \"0644\"\nowner: root\ngroup: root\nlabels: {{a: b, c: d}}\ncontent: x\nclass: normal\n"
            ));
        }
        let p = parse(&text);
        assert!(p.errors.is_empty(), "{:?}", p.errors.first());
        assert_eq!(p.documents.len(), 60_000);
    }

    #[test]
    fn the_alias_budget_is_per_document() {
        // Each document copies its anchor a few times (what a manifest
        // does with aliases): 2,000 of them in one file are fine; one
        // document past the budget is refused, and named by its alias's
        // line.
        let doc =
            "---\nd: &d {owner: root, group: root, mode: \"0644\"}\na: *d\nb: *d\nc: [*d, *d]\n";
        let text = doc.repeat(2_000);
        let p = parse(&text);
        assert!(p.errors.is_empty(), "{:?}", p.errors.first());
        assert_eq!(p.documents.len(), 2_000);
        let mut bomb = String::from("---\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..7 {
            let prev = i - 1;
            bomb.push_str(&format!("a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"));
        }
        let p = parse(&format!("{doc}{bomb}"));
        assert_eq!(p.errors.len(), 1, "{:?}", p.errors);
        assert!(p.errors[0].message.contains("more than"), "{:?}", p.errors);
        assert_eq!(p.errors[0].start.line, 9, "{:?}", p.errors);
    }

    #[test]
    fn what_aliases_copy_stays_a_multiple_of_the_text() {
        // Many small documents, each under the million values a document
        // may copy (300 of them with six levels, 118 KB, took more than 6
        // GB; five levels here, 60,000 values each, keep the test small).
        let mut doc = String::from("---\na0: &a0 [x, x, x, x, x, x, x, x, x]\n");
        for i in 1..5 {
            let prev = i - 1;
            let items = vec![format!("*a{prev}"); 9].join(", ");
            doc.push_str(&format!("a{i}: &a{i} [{items}]\n"));
        }
        let p = parse(&doc.repeat(20));
        assert!(!p.errors.is_empty());
        assert!(p.errors[0].message.contains("more than"), "{:?}", p.errors);
        // One long string copied many times: a few values, many bytes
        // (a 1 MiB string copied 20,000 times is 20 GB; 128 MB here).
        let long = "x".repeat(1 << 16);
        let aliases = vec!["*a"; 2_000].join(", ");
        let p = parse(&format!("s: &a \"{long}\"\nt: [{aliases}]\n"));
        assert_eq!(p.errors.len(), 1, "{:?}", p.errors.first());
        assert!(p.errors[0].message.contains("more than"), "{:?}", p.errors);
        // Copied a few times, a long string is fine.
        let p = parse(&format!("s: &a \"{long}\"\nt: [*a, *a, *a]\n"));
        assert!(p.errors.is_empty(), "{:?}", p.errors.first());
    }

    #[test]
    fn non_ascii_columns_count_characters() {
        let doc = one("é: ü\nk: v\n");
        assert_eq!(doc.get("é").unwrap().value.start.column, 4);
    }

    /// Documents of every shape a manifest uses, numbered, some with
    /// problems that do not stop the file (a duplicate key, a tag).
    fn many_documents(count: usize) -> String {
        let mut text = String::from("# a comment before the first document\n");
        for i in 0..count {
            match i % 6 {
                0 => text.push_str(&format!(
                    "---\ntype: File\nname: f{i}\ndesired:\n  path: /etc/f{i}\n  mode: \"0644\"\n  content: |\n    line one {i}\n    ----\n    --- not a marker inside, indented\n"
                )),
                1 => text.push_str(&format!(
                    "--- # a marker with a comment\nname: s{i}\nlist: [a, b, {{c: d}}]\nquoted: 'it''s {i}'\n"
                )),
                2 => text.push_str(&format!("---\nname: d{i}\nname: again\nvalue: !!int 7\n")),
                3 => text.push_str("---\n"),
                4 => text.push_str(&format!(
                    "---\nkey: &k {{a: 1}}\nother: *k\nfolded: >\n  some\n  text {i}\n...\n"
                )),
                _ => text.push_str(&format!("---\n- {i}\n- ---x\n- nested:\n    - 1.5\n    - ~\n")),
            }
        }
        text
    }

    #[test]
    fn a_document_parsed_again_on_its_own_is_what_one_pass_gave() {
        let text = many_documents(60);
        let one_pass = parse_in(&text, 1);
        let from_line = |line: u32| {
            let skip = text.split_inclusive('\n').take(line as usize - 1);
            &text[skip.map(str::len).sum::<usize>()..]
        };
        let (mut same, mut refused) = (0, 0);
        for doc in one_pass.documents.iter().filter(|d| !d.is_null()) {
            let again = document_at(from_line(doc.start.line), doc.start, false);
            // A document with a duplicate key is not given back (its
            // message came from the first pass).
            let duplicate = one_pass
                .errors
                .iter()
                .any(|e| e.start.line > doc.start.line && e.start.line <= doc.end.line);
            if duplicate {
                assert_eq!(again, None);
                refused += 1;
            } else {
                assert_eq!(again.as_ref(), Some(doc), "at line {}", doc.start.line);
                same += 1;
            }
            assert_eq!(doc.clone().into_json(), doc.to_json());
        }
        assert!(
            same >= 40 && refused == 10,
            "{same} same, {refused} refused"
        );
        // No document starts there (the caller checks that the text is the
        // one parsed), or the text has a directive: nothing.
        let first = one_pass.documents.iter().find(|d| !d.is_null()).unwrap();
        let inside = Pos::at(first.start.line as usize, 3);
        assert_eq!(document_at(from_line(inside.line), inside, false), None);
        assert_eq!(
            document_at(from_line(first.start.line), first.start, true),
            None
        );
    }

    #[test]
    fn a_text_parsed_in_pieces_is_what_one_pass_gives() {
        let text = many_documents(600);
        assert_eq!(pieces(&text, 4).len(), 4, "the text is cut");
        let one_pass = parse_in(&text, 1);
        assert!(
            !one_pass.errors.is_empty(),
            "the duplicate keys are reported"
        );
        for wanted in [2, 3, 4, 7] {
            // As many threads as pieces, and fewer: a thread takes whichever
            // piece is next, and the pieces join in the text's order.
            for threads in [wanted, 2, 1] {
                let cut = parse_cut(&text, &pieces(&text, wanted), threads, &|node| node);
                assert_eq!(cut.documents.len(), one_pass.documents.len());
                // Positions included: every piece's lines count from the
                // text's first line.
                let how = format!("{wanted} pieces, {threads} threads");
                assert_eq!(cut.documents, one_pass.documents, "{how}");
                assert_eq!(cut.errors, one_pass.errors, "{how}");
            }
        }
        // The last document's values are on the text's last lines.
        let last = one_pass.documents.last().unwrap();
        assert_eq!(last.end.line as usize, text.lines().count() + 1);
    }

    #[test]
    fn a_syntax_error_in_a_later_piece_ends_the_file_as_one_pass_does() {
        let mut text = many_documents(300);
        text.push_str("---\nname: broken\nvalue: [unclosed\n---\nname: after\n");
        text.push_str(&many_documents(300));
        let one_pass = parse_in(&text, 1);
        let syntax: Vec<_> = one_pass
            .errors
            .iter()
            .filter(|e| e.message.contains("syntax error"))
            .collect();
        assert_eq!(syntax.len(), 1, "{:?}", one_pass.errors);
        let broken_line = text.lines().position(|l| l == "value: [unclosed").unwrap() + 1;
        assert!(
            syntax[0].start.line as usize > broken_line,
            "{:?}",
            syntax[0]
        );
        assert_eq!(pieces(&text, 2).len(), 2);
        for (wanted, threads) in [(2, 2), (5, 2), (5, 3)] {
            let cut = parse_cut(&text, &pieces(&text, wanted), threads, &|node| node);
            // Nothing after the error is read, in pieces as in one pass.
            assert_eq!(cut.documents, one_pass.documents, "{wanted} pieces");
            assert_eq!(cut.errors, one_pass.errors, "{wanted} pieces");
            assert!(cut.documents.iter().all(|d| {
                d.get("name")
                    .is_none_or(|n| n.value.as_str() != Some("after"))
            }));
        }
    }

    #[test]
    fn an_error_that_a_cut_changes_is_the_one_pass_error() {
        // A cut just after an unclosed value: its piece ends in the middle
        // of it, where one pass meets the next marker instead.
        for unclosed in [
            "v: \"open quote\n",
            "v: 'open\n",
            "v: [open\n",
            "v: {a: 1\n",
        ] {
            let text = format!("---\na: 1\n---\n{unclosed}---\nname: after\n");
            let marker = text.find("---\nname").unwrap();
            let cut = parse_cut(&text, &cut_at(&text, &[0, marker]), 2, &|node| node);
            let one_pass = parse_in(&text, 1);
            assert_eq!(
                one_pass.errors.len(),
                1,
                "{unclosed:?}: {:?}",
                one_pass.errors
            );
            assert_eq!(cut.errors, one_pass.errors, "{unclosed:?}");
            assert_eq!(cut.documents, one_pass.documents, "{unclosed:?}");
        }
    }

    #[test]
    fn a_text_is_cut_only_at_document_markers_and_never_with_a_directive() {
        let text = many_documents(200);
        for cut in pieces(&text, 5).iter().skip(1) {
            let first = cut.text.lines().next().unwrap();
            assert!(first == "---" || first.starts_with("--- "), "{first:?}");
        }
        // A directive belongs to the document after it: never cut.
        let directive = format!("{text}...\n%YAML 1.2\n---\nname: last\n{text}");
        assert_eq!(pieces(&directive, 4).len(), 1);
        // Lines that only begin with dashes are values, not markers.
        let no_marker = format!("- a\n{}", "----\n---x\n  ---\n".repeat(1000));
        assert_eq!(pieces(&no_marker, 4).len(), 1);
    }
}
