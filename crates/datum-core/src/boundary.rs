//! What a repository allows beyond the strict file-system boundary
//! (`boundary:` in `datum.yaml`): the vocabulary only; the walk that applies
//! it is `datum_host::boundary`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Declared paths (as on the managed machine, `/var/run`) the repository
/// explicitly allows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Boundary {
    /// Parent links that may be followed: each is read once and resolved
    /// inside the root (an absolute target starts at the root).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub follow_links: Vec<PathBuf>,
    /// Directories (and everything below them) that may be entered from a
    /// directory owned by another, unprivileged user.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owner_transitions: Vec<PathBuf>,
}

impl Boundary {
    /// Whether the link at `declared_link` may be followed.
    pub fn follows(&self, declared_link: &Path) -> bool {
        self.follow_links.iter().any(|p| p == declared_link)
    }

    /// Whether entering `declared_dir` from an unprivileged user's directory
    /// is allowed.
    pub fn trusts(&self, declared_dir: &Path) -> bool {
        self.owner_transitions
            .iter()
            .any(|p| declared_dir.starts_with(p))
    }

    pub fn is_empty(&self) -> bool {
        self.follow_links.is_empty() && self.owner_transitions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowances_match_declared_paths() {
        let b = Boundary {
            follow_links: vec![PathBuf::from("/var/run")],
            owner_transitions: vec![PathBuf::from("/srv/app")],
        };
        assert!(b.follows(Path::new("/var/run")));
        assert!(!b.follows(Path::new("/var/run/x")));
        assert!(b.trusts(Path::new("/srv/app/conf")));
        assert!(!b.trusts(Path::new("/srv/application")));
    }
}
