//! Merkle fingerprints of directory trees: one hash that proves a whole owned tree equals
//! its declaration, and a recursion that names the differing leaves when it does not.
//!
//! Owns: the tree model ([`Node`]), the two fingerprint definitions ([`Algorithm::Compat`],
//! the specification's reference function byte for byte, and [`Algorithm::Native`],
//! Datum's default that also covers link targets and directory owners), fingerprinting a
//! declared tree ([`fingerprint_declared`]) and comparing the two ([`compare()`]).
//!
//! Must not: decide what drift *means* for a resource (the Tree provider and `datum check`
//! do), print, or touch the host. Scanning a host tree is machine access and lives in
//! `datum_host::tree_scan`, which builds a [`Node`] tree and hashes it with
//! [`fingerprint_tree`]. This crate sits below the providers (the Tree provider uses it)
//! and depends on no other Datum crate.
//!
//! ```
//! use datum_fingerprint::{Algorithm, Node, fingerprint_declared};
//!
//! let mut root = Node::dir(0o755, 0, 0);
//! root.insert("a", Node::file_with_bytes(Algorithm::Compat, 0o644, 0, 0, b"hi\n")).ok();
//! root.insert("b", Node::symlink("a")).ok();
//! root.insert("d", Node::dir(0o755, 0, 0)).ok();
//! root.insert("e", Node::dir(0o755, 0, 0)).ok();
//! // The specification's golden vector (bench README).
//! assert_eq!(
//!     fingerprint_declared(&root, Algorithm::Compat).unwrap().to_string(),
//!     "0af960f6499974f32010cb41f68bd4665f5a4ce3e29fc528d3cb30cf3714c039",
//! );
//! ```

#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        reason = "unit tests build their fixtures on disk directly"
    )
)]

mod compare;
mod digest;
mod error;
mod exclude;
mod node_hash;
mod tree;

pub use compare::{ChangedValue, TreeDifference, changed_values, compare, compare_with_values};
pub use digest::{Algorithm, ContentHash, ContentHasher, Digest, HashFunction};
pub use error::FingerprintError;
pub use exclude::Exclusions;
pub use node_hash::{dir_hash, fingerprint_declared, fingerprint_tree, leaf_hash};
pub use tree::{Entry, EntryKind, FingerprintedNode, FingerprintedTree, Node, OtherKind};
