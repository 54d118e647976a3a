//! Rendered file content and its checksum.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Content a resource declares, already rendered (inline, from a source file or
/// from a template). The checksum is what the catalogue prints and what the
/// state store records; the bytes never leave the process for a sensitive
/// resource.
///
/// Content from a repository file (`source:`) is not held in memory: the
/// catalogue records its path, size and checksum, and whoever needs the bytes
/// reads them through `datum_host::repo::content_bytes`, which refuses a file
/// that changed since it was hashed. A catalogue of 20,000 files therefore
/// costs their checksums, not their bytes. For such content `bytes` is empty:
/// never read `bytes` without checking [`Content::source`].
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Content {
    /// The bytes, for content rendered in memory (inline, templates, packed
    /// trees); empty when [`Content::source`] is set. Shared, not copied: a
    /// packed tree of 200,000 files is ~20 MB, and what unpacks it refers to
    /// these bytes rather than holding a second copy.
    #[serde(skip)]
    pub bytes: bytes::Bytes,
    pub sha256: String,
    pub size: u64,
    /// The repository file holding the bytes, when they are not in memory.
    /// Shared: the compile that resolved the path hands the same one on
    /// (a copy per resource was 9 MB of a 100,000-File compile's peak).
    #[serde(skip)]
    pub source: Option<std::sync::Arc<std::path::Path>>,
    /// BLAKE3 (hex) of the same bytes, when known: a check compares a live
    /// file by it (several times faster than SHA-256) and computes the
    /// SHA-256 only for a file that differs. `None` for content from an
    /// older catalogue; SHA-256 remains the checksum of record.
    #[serde(default)]
    pub blake3: Option<String>,
}

impl Content {
    /// Content held in memory.
    pub fn new(bytes: impl Into<bytes::Bytes>) -> Self {
        let bytes = bytes.into();
        let sha256 = sha256_hex(&bytes);
        let blake3 = Some(blake3::hash(&bytes).to_hex().to_string());
        let size = bytes.len() as u64;
        Self {
            bytes,
            sha256,
            size,
            source: None,
            blake3,
        }
    }

    /// Content that stays in a repository file, already hashed (`blake3`
    /// when the hashing computed it too).
    pub fn from_source(
        path: impl Into<std::sync::Arc<std::path::Path>>,
        sha256: String,
        blake3: Option<String>,
        size: u64,
    ) -> Self {
        Self {
            bytes: bytes::Bytes::new(),
            sha256,
            size,
            source: Some(path.into()),
            blake3,
        }
    }

    /// The bytes when they are in memory.
    pub fn inline(&self) -> Option<&[u8]> {
        self.source.is_none().then_some(&self.bytes[..])
    }
}

// Content is never printed by Debug: it may be sensitive.
impl std::fmt::Debug for Content {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Content({} bytes, sha256 {})", self.size, self.sha256)
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
        // The BLAKE3 specification's value for empty input.
        assert_eq!(
            Content::new(Vec::new()).blake3.as_deref(),
            Some("af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262")
        );
    }

    #[test]
    fn debug_never_shows_bytes() {
        let c = Content::new(b"CANARY-secret".to_vec());
        assert!(!format!("{c:?}").contains("CANARY"));
    }
}
