//! The digest of a sensitive resource's content that Datum may publish.
//!
//! A plain SHA-256 of a secret is a confirmation oracle: whoever reads the
//! catalogue or a saved plan can hash a guessed password and compare. For a
//! resource marked sensitive, outputs carry instead a keyed digest: BLAKE3 in
//! its keyed mode (a MAC, like HMAC) over the content's SHA-256, with a
//! 32-byte secret that lives only on this host (`digest.key`, mode 0600, in
//! the state folder). Two runs on one host show the same digest, so a person
//! still sees "it changed" or "it is what was declared"; nobody without the
//! host's key can test a guess against it. Where no key is available, the
//! outputs carry no digest at all.

/// A host's secret for [`DigestKey::digest`]. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct DigestKey([u8; 32]);

/// The prefix of every keyed digest, so no one mistakes it for a SHA-256.
pub const KEYED_PREFIX: &str = "keyed-blake3:";

impl DigestKey {
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        DigestKey(bytes)
    }

    /// The keyed digest of content whose SHA-256 (hex) is `sha256_hex`.
    pub fn digest(&self, sha256_hex: &str) -> String {
        format!(
            "{KEYED_PREFIX}{}",
            blake3::keyed_hash(&self.0, sha256_hex.as_bytes()).to_hex()
        )
    }
}

impl std::fmt::Debug for DigestKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DigestKey(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_keyed_stable_and_never_the_sha256() {
        let sha = crate::sha256_hex(b"hunter2\n");
        let a = DigestKey::from_bytes([7; 32]);
        let b = DigestKey::from_bytes([8; 32]);
        assert_eq!(a.digest(&sha), a.digest(&sha), "stable on one host");
        assert_ne!(
            a.digest(&sha),
            b.digest(&sha),
            "another key, another digest"
        );
        assert!(a.digest(&sha).starts_with(KEYED_PREFIX));
        assert!(!a.digest(&sha).contains(&sha));
        assert_eq!(format!("{a:?}"), "DigestKey(..)");
    }
}
