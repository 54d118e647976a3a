//! Machine access for Datum. (Skeleton: being written.)

use std::path::{Path, PathBuf};

/// The machine a pass runs against, seen through `--root`.
#[derive(Debug, Clone)]
pub struct Host {
    root: PathBuf,
}

impl Host {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
}

/// A failed operation on the host, always naming what it was done to.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
