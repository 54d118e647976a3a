//! Values tagged with where they were written.
//!
//! This module owns [`Place`] (a file and the layer it belongs to) and
//! [`Spanned`] (a value plus its start and end), the glue between the YAML
//! tree's positions and `datum_core::Origin`. It holds no logic of its own.

use std::path::PathBuf;

use datum_core::Origin;

use crate::yaml::{Entry, Node, Pos};

/// A file relative to the repository root and the layer it belongs to
/// (empty for `datum.yaml` and host files).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Place {
    pub file: PathBuf,
    pub layer: String,
}

impl Place {
    pub fn new(file: impl Into<PathBuf>, layer: impl Into<String>) -> Self {
        Self {
            file: file.into(),
            layer: layer.into(),
        }
    }

    pub fn origin(&self, pos: Pos) -> Origin {
        Origin {
            file: self.file.clone(),
            line: pos.line,
            column: pos.column,
            layer: self.layer.clone(),
        }
    }

    /// The whole file, for problems that have no line (unreadable, not UTF-8).
    pub fn whole_file(&self) -> Origin {
        self.origin(Pos { line: 0, column: 0 })
    }

    pub fn spanned<T>(&self, value: T, node: &Node) -> Spanned<T> {
        Spanned {
            value,
            origin: self.origin(node.start),
            end: node.end,
        }
    }

    /// The origin of an entry's key, spanning to the end of its value.
    pub fn key<T>(&self, value: T, entry: &Entry) -> Spanned<T> {
        Spanned {
            value,
            origin: self.origin(entry.key_start),
            end: entry.value.end.max(entry.key_end),
        }
    }
}

/// A value and where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Spanned<T> {
    pub value: T,
    pub origin: Origin,
    /// Where the written text ends (for the caret's width).
    pub end: Pos,
}
