//! What a provider found on the host.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Whether the thing a resource manages exists, and as what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "found")]
pub enum Presence {
    Absent,
    Present,
    /// Something else is at the path (a directory where a file was declared,
    /// a link where a directory was): the word names what was found.
    OtherType(String),
}

/// File-system metadata recorded after a verified apply; metadata-first checks
/// compare against it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct FileMeta {
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub inode: u64,
    pub dev: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// SHA-256 of the content, for regular files.
    pub sha256: Option<String>,
}

/// A record of file metadata made this close (in nanoseconds) after the
/// file's last change does not vouch for its content: timestamps come from a
/// coarse clock, so a write in the same tick as the read that verified it
/// can leave every field as it was (what git calls "racy clean").
pub const RACY_WINDOW_NS: i64 = 2_000_000_000;

impl FileMeta {
    /// Whether this metadata, recorded by a verification that started at
    /// `verified_at` (Unix seconds), was quiet then: the file had not changed
    /// within [`RACY_WINDOW_NS`] before it. Only such a record can vouch
    /// that unchanged metadata means unchanged content. An mtime set ahead
    /// counts as a change (it is never quiet).
    pub fn quiet_at(&self, verified_at: i64) -> bool {
        // Seconds, truncated: never later than the verification's start.
        let verified_ns = verified_at.saturating_mul(1_000_000_000);
        self.ctime_ns.max(self.mtime_ns) < verified_ns.saturating_sub(RACY_WINDOW_NS)
    }
}

/// The observed state of one resource, in the same field names as its desired
/// state so that diffing is a field-by-field comparison. Its `Debug` shows the
/// content's length, never its bytes (the content may be sensitive).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct Observed {
    pub presence: Presence,
    pub fields: BTreeMap<String, serde_json::Value>,
    /// Current content where the provider read it (for text diffs). Never
    /// serialised: it may be sensitive.
    #[serde(skip)]
    pub content: Option<Vec<u8>>,
    pub meta: Option<FileMeta>,
}

impl std::fmt::Debug for Observed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let content = self
            .content
            .as_ref()
            .map(|bytes| format!("<{} bytes, not shown>", bytes.len()));
        f.debug_struct("Observed")
            .field("presence", &self.presence)
            .field("fields", &self.fields)
            .field("content", &content)
            .field("meta", &self.meta)
            .finish()
    }
}

impl Observed {
    pub fn absent() -> Self {
        Self {
            presence: Presence::Absent,
            fields: BTreeMap::new(),
            content: None,
            meta: None,
        }
    }

    /// What an accepted observation is compared by (`datum reconcile` records
    /// it, plan and apply compare with it): presence and the observed fields
    /// (content hash included), never the content itself.
    pub fn acceptance_hash(&self) -> String {
        let value = serde_json::json!({"presence": self.presence, "fields": self.fields});
        crate::sha256_hex(value.to_string().as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_the_contents_length_never_its_bytes() {
        let observed = Observed {
            content: Some(b"CANARY-debug-7f3a".to_vec()),
            ..Observed::absent()
        };
        let printed = format!("{observed:?} {observed:#?}");
        assert!(!printed.contains("CANARY"), "{printed}");
        assert!(printed.contains("<17 bytes, not shown>"), "{printed}");
        assert!(format!("{:?}", Observed::absent()).contains("content: None"));
    }
}
