//! Values tagged with where they were written.
//!
//! This module owns [`Place`] (a file and the layer it belongs to, cheap to
//! clone: a catalogue of 20,000 resources holds one per document) and
//! [`Spanned`] (a value plus its start and end), the glue between the YAML
//! tree's positions and `datum_core::Origin`. It holds no logic of its own.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datum_core::Origin;

use crate::yaml::{Entry, Node, Pos};

/// A file relative to the repository root and the layer it belongs to
/// (empty for `datum.yaml` and host files). Clones share the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub file: Arc<Path>,
    pub layer: Arc<str>,
}

impl Default for Place {
    fn default() -> Self {
        Self::new("", "")
    }
}

impl Place {
    pub fn new(file: impl Into<PathBuf>, layer: impl Into<String>) -> Self {
        Self {
            file: Arc::from(file.into()),
            layer: Arc::from(layer.into()),
        }
    }

    pub fn origin(&self, pos: Pos) -> Origin {
        Origin {
            file: self.file.to_path_buf(),
            line: pos.line as usize,
            column: pos.column as usize,
            layer: self.layer.to_string(),
        }
    }

    /// The whole file, for problems that have no line (unreadable, not UTF-8).
    pub fn whole_file(&self) -> Origin {
        self.origin(Pos { line: 0, column: 0 })
    }

    pub fn spanned<T>(&self, value: T, node: &Node) -> Spanned<T> {
        self.at(value, Span::of(node))
    }

    /// An entry's key, spanning to the end of its value.
    pub fn key<T>(&self, value: T, entry: &Entry) -> Spanned<T> {
        self.at(value, Span::of_key(entry))
    }

    fn at<T>(&self, value: T, span: Span) -> Spanned<T> {
        Spanned {
            value,
            place: self.clone(),
            start: span.start,
            end: span.end,
        }
    }
}

/// Where something was written in a file that is known from context (a
/// document's own [`Place`]): its start and end, and nothing else, so a
/// document keeps the spans of its envelope fields without a copy of their
/// text or of the place for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    pub start: Pos,
    /// Where the written text ends (for the caret's width).
    pub end: Pos,
}

impl Span {
    /// A node's span.
    pub fn of(node: &Node) -> Self {
        Self {
            start: node.start,
            end: node.end,
        }
    }

    /// An entry's key, spanning to the end of its value.
    pub fn of_key(entry: &Entry) -> Self {
        Self {
            start: entry.key_start,
            end: entry.value.end.max(entry.key_end),
        }
    }
}

/// A value and where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Spanned<T> {
    pub value: T,
    pub place: Place,
    pub start: Pos,
    /// Where the written text ends (for the caret's width).
    pub end: Pos,
}

impl<T> Spanned<T> {
    /// Where it was written, without the value or the place.
    pub fn span(&self) -> Span {
        Span {
            start: self.start,
            end: self.end,
        }
    }

    /// Where the value starts, as an origin for messages and `--explain`.
    pub fn origin(&self) -> Origin {
        self.place.origin(self.start)
    }
}
