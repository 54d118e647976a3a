//! Rendered file content and its checksum.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Content a resource declares, already rendered (inline, from a source file or
/// from a template). The checksum is what the catalogue prints and what the
/// state store records; the bytes never leave the process for a sensitive
/// resource.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Content {
    #[serde(skip)]
    pub bytes: Vec<u8>,
    pub sha256: String,
}

impl Content {
    pub fn new(bytes: Vec<u8>) -> Self {
        let sha256 = sha256_hex(&bytes);
        Self { bytes, sha256 }
    }
}

// Content is never printed by Debug: it may be sensitive.
impl std::fmt::Debug for Content {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Content({} bytes, sha256 {})",
            self.bytes.len(),
            self.sha256
        )
    }
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_matches_a_known_vector() {
        assert_eq!(
            Content::new(b"hi\n".to_vec()).sha256,
            "98ea6e4f216f2fb4b69fff9b3a44842c38686ca685f3f55dc48c5d3fb1107be4"
        );
    }

    #[test]
    fn debug_never_shows_bytes() {
        let c = Content::new(b"CANARY-secret".to_vec());
        assert!(!format!("{c:?}").contains("CANARY"));
    }
}
