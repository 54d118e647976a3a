//! Hash values and the hash functions behind the two fingerprint algorithms.
//!
//! Owns: the 32-byte [`Digest`], the tagged [`ContentHash`] of a regular file's bytes, the
//! [`Algorithm`] choice and the streaming [`ContentHasher`]. Must not: touch the file
//! system or know about trees (`node_hash.rs` computes the payloads documented on
//! [`Algorithm`]).

use std::fmt;

use sha2::Digest as _;

/// Which fingerprint definition to compute.
///
/// Both sides of a comparison must use the same one: a declared tree and an observed tree
/// fingerprinted differently never have equal hashes.
///
/// # Compat (the specification's reference function)
///
/// SHA-256 everywhere; hashes enter payloads as 64 lowercase hex digits; `<mode>` is
/// `mode & 0o7777` in octal without prefix (`644`, `4755`).
///
/// * regular file: `sha256("f:<mode>:<uid>:<gid>:<sha256 hex of content>")`
/// * symlink, fifo, socket, device: `sha256("o:<mode>")`
/// * directory: `sha256(join("\n", name + "=" + child hex))` over entries in raw byte
///   order; an empty directory is `sha256("")`. Its own mode and owner are not hashed.
///
/// # Native (Datum's default, version 1)
///
/// BLAKE3 everywhere (content hash = plain BLAKE3 of the bytes, what `b3sum` prints).
/// Integers are little-endian, hashes enter as their 32 raw bytes, and every variable-length
/// field is length-prefixed, so no two different trees share a payload (the compat
/// directory format is ambiguous for names containing `=` or a newline). Each payload
/// starts with a tag that names the entry type, so a type change always changes the hash:
///
/// * regular file: `"datum-fp1:f" mode:u32 uid:u32 gid:u32 content:[32]`
/// * symlink: `"datum-fp1:l" mode:u32 len:u64 target`
/// * fifo / socket / char device / block device: `"datum-fp1:o" kind:u8 mode:u32`, kind
///   1 / 2 / 3 / 4
/// * directory: `"datum-fp1:d" mode:u32 uid:u32 gid:u32 count:u64` then per entry in raw
///   byte order `len:u64 name child:[32]`
///
/// A directory's own mode, uid and gid and a symlink's target are covered; a symlink's
/// owner is not (Linux ignores it for access).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    /// Byte-for-byte the specification's reference function (SHA-256 everywhere, hex
    /// payloads). It ignores a symlink's target and a directory's own mode and owner, so
    /// it exists for interoperability and golden values, not as Datum's default.
    Compat,
    /// Datum's own fingerprint (the default): BLAKE3, and it also covers a symlink's
    /// target, a directory's own mode/uid/gid and the entry type (format above).
    #[default]
    Native,
}

impl Algorithm {
    /// The hash function this algorithm uses for a regular file's content.
    pub fn content_function(self) -> HashFunction {
        match self {
            Algorithm::Compat => HashFunction::Sha256,
            Algorithm::Native => HashFunction::Blake3,
        }
    }

    /// A streaming hasher for file content under this algorithm.
    pub fn content_hasher(self) -> ContentHasher {
        ContentHasher::new(self.content_function())
    }

    /// The content hash of `bytes` as this algorithm expects it in a [`crate::Node`]
    /// (what the Tree provider calls on each rendered file of a declaration).
    pub fn hash_content(self, bytes: &[u8]) -> ContentHash {
        let mut hasher = self.content_hasher();
        hasher.update(bytes);
        hasher.finish()
    }

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Compat => "compat",
            Algorithm::Native => "native",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A hash function whose output is 32 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashFunction {
    /// SHA-256 (FIPS 180-4); the `sha2` crate uses the CPU's SHA extensions when present.
    Sha256,
    /// BLAKE3; vectorised over 1 KiB chunks, so faster on all but the smallest files.
    Blake3,
}

impl fmt::Display for HashFunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HashFunction::Sha256 => "sha256",
            HashFunction::Blake3 => "blake3",
        })
    }
}

/// A 32-byte hash value; displayed as 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// The 64 lowercase hex digits, without allocating (the compat payloads embed them).
    pub fn hex_bytes(&self) -> [u8; 64] {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 64];
        for (i, byte) in self.0.iter().enumerate() {
            out[2 * i] = HEX[usize::from(byte >> 4)];
            out[2 * i + 1] = HEX[usize::from(byte & 0x0f)];
        }
        out
    }

    /// Parses 64 hex digits (either case), e.g. a catalogue checksum.
    pub fn from_hex(text: &str) -> Option<Digest> {
        let bytes = text.as_bytes();
        if bytes.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            let hi = char::from(pair[0]).to_digit(16)?;
            let lo = char::from(pair[1]).to_digit(16)?;
            // Both digits are < 16, so the value fits a byte.
            out[i] = u8::try_from(hi * 16 + lo).ok()?;
        }
        Some(Digest(out))
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = self.hex_bytes();
        // hex_bytes only produces ASCII digits and letters.
        f.write_str(std::str::from_utf8(&hex).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

/// The hash of a regular file's bytes, tagged with the function that produced it, so a
/// tree built with SHA-256 content hashes cannot silently be fingerprinted as BLAKE3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ContentHash {
    /// The function that produced `digest`.
    pub function: HashFunction,
    /// The hash value.
    pub digest: Digest,
}

impl ContentHash {
    /// A SHA-256 content hash from the catalogue's hex checksum (`Content::sha256`).
    pub fn sha256_from_hex(text: &str) -> Option<ContentHash> {
        Digest::from_hex(text).map(|digest| ContentHash {
            function: HashFunction::Sha256,
            digest,
        })
    }
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.function, self.digest)
    }
}

/// Streaming content hasher for either function.
// The BLAKE3 state is ~1.9 KiB; a hasher lives on a worker's stack for one file at a
// time, so the size difference between the variants does not matter.
#[expect(
    clippy::large_enum_variant,
    reason = "one hasher per worker at a time; boxing would allocate per file"
)]
pub enum ContentHasher {
    /// SHA-256 state.
    Sha256(sha2::Sha256),
    /// BLAKE3 state.
    Blake3(blake3::Hasher),
}

impl ContentHasher {
    /// A fresh hasher for `function`.
    pub fn new(function: HashFunction) -> ContentHasher {
        match function {
            HashFunction::Sha256 => ContentHasher::Sha256(sha2::Sha256::new()),
            HashFunction::Blake3 => ContentHasher::Blake3(blake3::Hasher::new()),
        }
    }

    /// Feeds more bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            ContentHasher::Sha256(h) => h.update(bytes),
            ContentHasher::Blake3(h) => {
                h.update(bytes);
            }
        }
    }

    /// The hash of everything fed so far.
    pub fn finish(self) -> ContentHash {
        match self {
            ContentHasher::Sha256(h) => ContentHash {
                function: HashFunction::Sha256,
                digest: Digest(h.finalize().into()),
            },
            ContentHasher::Blake3(h) => ContentHash {
                function: HashFunction::Blake3,
                digest: Digest(*h.finalize().as_bytes()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_a_known_vector_in_lowercase_hex() {
        let h = Algorithm::Compat.hash_content(b"hi\n");
        assert_eq!(h.function, HashFunction::Sha256);
        assert_eq!(
            h.digest.to_string(),
            "98ea6e4f216f2fb4b69fff9b3a44842c38686ca685f3f55dc48c5d3fb1107be4"
        );
    }

    #[test]
    fn blake3_of_the_empty_input_matches_the_published_vector() {
        let h = Algorithm::Native.hash_content(b"");
        assert_eq!(h.function, HashFunction::Blake3);
        assert_eq!(
            h.digest.to_string(),
            "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
        );
    }

    #[test]
    fn streaming_equals_one_shot() {
        for algorithm in [Algorithm::Compat, Algorithm::Native] {
            let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
            let mut hasher = algorithm.content_hasher();
            for chunk in data.chunks(4093) {
                hasher.update(chunk);
            }
            assert_eq!(hasher.finish(), algorithm.hash_content(&data));
        }
    }

    #[test]
    fn hex_round_trips_and_rejects_garbage() {
        let d = Algorithm::Compat.hash_content(b"x").digest;
        assert_eq!(Digest::from_hex(&d.to_string()), Some(d));
        assert_eq!(Digest::from_hex(&d.to_string().to_uppercase()), Some(d));
        assert_eq!(Digest::from_hex("abc"), None);
        assert_eq!(Digest::from_hex(&"g".repeat(64)), None);
    }
}
