//! The report vocabulary shared by Datum's drift tools.
//!
//! Two tools report drift: `driftwatch` (an OpenTofu/Terraform stack against the cloud) and
//! `datum check` (a host's files, directories and packages against the catalogue). They look
//! at different things but answer the same question for the same readers: a person reading
//! a terminal or a GitHub issue, and a bot that must find "its" issue again tomorrow. This
//! crate holds the parts of that answer that do not depend on what was inspected.
//!
//! # Contract
//!
//! * [`Finding`] is one drifted subject (`google_compute_instance.worker`,
//!   `File[sshd-config]`) with a tool-defined `category` (a short snake_case id such as
//!   `changed_outside`) and its attribute differences ([`AttrDiff`]).
//! * [`AttrDiff`] carries rendered before/after values. A sensitive difference carries
//!   **no value at all**: [`AttrDiff::sensitive`] builds one with both sides `None`, and the
//!   fields are private so that no caller can fill them in later. [`AttrDiff::path_only`]
//!   is for tools that know a path changed but keep no values (content hashes). Tools must drop a secret
//!   when they read it, not when they print it; this type is the place where that rule is
//!   enforced for everything downstream.
//! * [`dedupe_key`] names a stack or host for a bot: `<tool>-` followed by the first twelve
//!   hex digits of SHA-256 of the name. It never changes while the name does not.
//! * [`fingerprint`] summarises a report without values: it hashes subjects, categories and
//!   sorted paths, so a value that moves every night (a resource version, an mtime) does not
//!   look like new drift, while a new path or a new subject does. An empty report is
//!   `"clean"`.
//! * [`render`] is the one interface every report is shown through: a [`render::Format`]
//!   chosen once by the front end and a [`render::Render`] implementation per report, in
//!   the crate that owns the report's data (so this crate depends on none of them). [`json`]
//!   holds the conventions of every JSON document (`format_version`, RFC 3339 times).
//! * [`markdown`] has the escaping rules every Markdown report must use (table cells, inline
//!   code) and the marker line that carries the dedupe key.
//! * [`history`] remembers, per key, when each [`Signature`] was first seen and for how many
//!   distinct days (nights, or passes of `datum check`) it has persisted. Its clock is a
//!   trait so tests can replay several days. Loading and saving the JSON history file is the
//!   only I/O in this crate.
//!
//! Nothing here prints, reads configuration, chooses a format or knows about OpenTofu.
//!
//! ```
//! use datum_report::{AttrDiff, Finding, dedupe_key, fingerprint, markdown};
//!
//! let finding = Finding {
//!     subject: "File[motd]".to_owned(),
//!     category: "changed_outside".to_owned(),
//!     diffs: vec![
//!         AttrDiff::plain("mode", "0644", "0600"),
//!         AttrDiff::sensitive("content"),
//!     ],
//! };
//! assert_eq!(finding.diffs[1].after_display(), "(sensitive)");
//! let key = dedupe_key("datum", "web-1");
//! assert!(key.starts_with("datum-") && key.len() == 18);
//! let print = fingerprint(&[finding.signature()]);
//! assert_eq!(print.len(), 16);
//! assert_eq!(fingerprint(&[]), "clean");
//! assert_eq!(markdown::marker_line(&key), format!("<!-- {key} -->"));
//! ```

#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        reason = "unit tests build their fixtures on disk directly; the code under test goes through datum-host"
    )
)]

pub mod history;
pub mod json;
pub mod markdown;
pub mod render;
pub mod style;
pub mod time;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// How a value that must not be shown is written in every human-facing format.
pub const SENSITIVE_PLACEHOLDER: &str = "(sensitive)";

/// How a value that was never recorded (see [`AttrDiff::path_only`]) is written.
pub const NOT_RECORDED_PLACEHOLDER: &str = "(not recorded)";

/// One attribute that differs between the recorded and the observed object.
///
/// `path` uses the owning tool's path syntax (for driftwatch, OpenTofu's `ignore_changes`
/// syntax). Values are already rendered for display; `None` means "withheld" and is only
/// ever produced together with `sensitive == true`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttrDiff {
    path: String,
    before: Option<String>,
    after: Option<String>,
    sensitive: bool,
}

impl AttrDiff {
    /// A difference whose values may be shown.
    pub fn plain(
        path: impl Into<String>,
        before: impl Into<String>,
        after: impl Into<String>,
    ) -> Self {
        AttrDiff {
            path: path.into(),
            before: Some(before.into()),
            after: Some(after.into()),
            sensitive: false,
        }
    }

    /// A difference known only by its path (a tool that compares hashes, or chooses not to
    /// keep values). Displayed as [`NOT_RECORDED_PLACEHOLDER`].
    pub fn path_only(path: impl Into<String>) -> Self {
        AttrDiff {
            path: path.into(),
            before: None,
            after: None,
            sensitive: false,
        }
    }

    /// A difference whose values are secret: only the path survives.
    pub fn sensitive(path: impl Into<String>) -> Self {
        AttrDiff {
            path: path.into(),
            before: None,
            after: None,
            sensitive: true,
        }
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// The old value, or `None` when it is withheld.
    pub fn before(&self) -> Option<&str> {
        self.before.as_deref()
    }

    /// The new value, or `None` when it is withheld.
    pub fn after(&self) -> Option<&str> {
        self.after.as_deref()
    }

    pub fn is_sensitive(&self) -> bool {
        self.sensitive
    }

    fn placeholder(&self) -> &'static str {
        if self.sensitive {
            SENSITIVE_PLACEHOLDER
        } else {
            NOT_RECORDED_PLACEHOLDER
        }
    }

    /// The old value as a person should see it.
    pub fn before_display(&self) -> &str {
        self.before.as_deref().unwrap_or(self.placeholder())
    }

    /// The new value as a person should see it.
    pub fn after_display(&self) -> &str {
        self.after.as_deref().unwrap_or(self.placeholder())
    }
}

/// One drifted subject, independent of the tool that found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// What drifted, as the tool names it (`kubernetes_config_map_v1.flags`, `File[motd]`).
    pub subject: String,
    /// A short snake_case id chosen by the tool (`changed_outside`, `deleted_outside`...).
    pub category: String,
    /// The attribute differences, in the order the tool wants them shown.
    pub diffs: Vec<AttrDiff>,
}

impl Finding {
    /// The value-free identity of this finding, used by fingerprints and history.
    pub fn signature(&self) -> Signature {
        Signature::new(
            self.subject.clone(),
            self.category.clone(),
            self.diffs.iter().map(|d| d.path.clone()).collect(),
        )
    }
}

/// The value-free identity of a finding: subject, category and the set of changed paths.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Signature {
    pub subject: String,
    pub category: String,
    /// Sorted and without duplicates, so equal findings always compare equal.
    pub paths: Vec<String>,
}

impl Signature {
    pub fn new(subject: String, category: String, mut paths: Vec<String>) -> Self {
        paths.sort();
        paths.dedup();
        Signature {
            subject,
            category,
            paths,
        }
    }

    /// A stable textual id for this signature (used as a map key in the history file).
    pub fn id(&self) -> String {
        hex_prefix(&self.canonical_json(), 16)
    }

    fn canonical_json(&self) -> Vec<u8> {
        // A tuple serialises as a JSON array: ["subject","category",["p1","p2"]].
        serde_json::to_vec(&(&self.subject, &self.category, &self.paths)).unwrap_or_default()
    }
}

/// The per-stack / per-host key a bot searches for: `<tool>-` + 12 hex digits.
pub fn dedupe_key(tool: &str, name: &str) -> String {
    format!("{tool}-{}", hex_prefix(name.as_bytes(), 12))
}

/// Fingerprint of a whole report: 16 hex digits over the sorted signatures, or `"clean"`.
pub fn fingerprint<'a>(signatures: impl IntoIterator<Item = &'a Signature>) -> String {
    let mut sorted: Vec<&Signature> = signatures.into_iter().collect();
    if sorted.is_empty() {
        return "clean".to_owned();
    }
    sorted.sort();
    let rows: Vec<(&str, &str, &[String])> = sorted
        .iter()
        .map(|s| (s.subject.as_str(), s.category.as_str(), s.paths.as_slice()))
        .collect();
    let encoded = serde_json::to_vec(&rows).unwrap_or_default();
    hex_prefix(&encoded, 16)
}

fn hex_prefix(bytes: &[u8], digits: usize) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for byte in digest {
        out.push_str(&format!("{byte:02x}"));
    }
    out.truncate(digits);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dedupe_key_is_tool_prefix_and_twelve_hex_digits() {
        let key = dedupe_key("driftwatch", "shop-prod");
        // sha256("shop-prod") computed independently with sha256sum.
        assert_eq!(key, "driftwatch-587d35c66f5f");
        assert_eq!(dedupe_key("datum", "web-1").len(), "datum-".len() + 12);
    }

    #[test]
    fn fingerprint_ignores_values_and_order() {
        let a = Finding {
            subject: "x.a".into(),
            category: "changed_outside".into(),
            diffs: vec![
                AttrDiff::plain("v", "1", "2"),
                AttrDiff::plain("u", "1", "2"),
            ],
        };
        let mut b = a.clone();
        b.diffs = vec![
            AttrDiff::plain("u", "7", "8"),
            AttrDiff::plain("v", "9", "0"),
        ];
        let c = Finding {
            subject: "x.c".into(),
            category: "deleted_outside".into(),
            diffs: vec![],
        };
        let f1 = fingerprint(&[a.signature(), c.signature()]);
        let f2 = fingerprint(&[c.signature(), b.signature()]);
        assert_eq!(f1, f2);
        assert_eq!(f1.len(), 16);
        let mut d = a.clone();
        d.diffs.push(AttrDiff::plain("w", "1", "2"));
        assert_ne!(fingerprint(&[d.signature(), c.signature()]), f1);
    }

    #[test]
    fn empty_fingerprint_is_clean() {
        assert_eq!(fingerprint(&[]), "clean");
    }

    #[test]
    fn path_only_diff_is_not_called_sensitive() {
        let d = AttrDiff::path_only("content");
        assert!(!d.is_sensitive());
        assert_eq!(d.before_display(), NOT_RECORDED_PLACEHOLDER);
    }

    #[test]
    fn sensitive_diff_has_no_values() {
        let d = AttrDiff::sensitive("data.password");
        assert_eq!(d.before(), None);
        assert_eq!(d.after_display(), SENSITIVE_PLACEHOLDER);
        assert!(d.is_sensitive());
    }
}
