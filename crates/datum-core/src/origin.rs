//! Where a declaration came from, so every message can point at a file and line.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A position in the repository: the manifest file (relative to the repository
/// root), 1-based line and column, and the layer the file belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct Origin {
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
    pub layer: String,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file.display(), self.line, self.column)
    }
}
