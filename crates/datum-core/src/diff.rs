//! Differences between declared and observed state, and the action they call for.
//!
//! A diff is a value, not a side effect: `datum plan` prints it, `datum apply`
//! acts on it, `datum check` reports it as drift.

use serde::{Deserialize, Serialize};

/// How long a line diff of two texts (a plan's diff, a drift finding's, an
/// accepted patch) may search for the shortest difference before it settles
/// for a longer one (still exact: it turns one text into the other). Myers'
/// search is quadratic when the two share little: two 80,000-line files with
/// no line in common took over two minutes, a managed file's 8 MiB limit
/// hours, in `plan`, `apply`, `check` and the agent. Give it to `similar`'s
/// `TextDiff::configure().timeout(..)`.
pub const TEXT_DIFF_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

/// Why a content change shows no line of the live file: it is not readable
/// by everyone (see [`ContentChange::live_withheld`]). Plan, apply and check
/// say the same words.
pub const LIVE_WITHHELD: &str =
    "the live file is not readable by everyone, so its lines are not shown";

/// [`LIVE_WITHHELD`] standing where the content diff of `name` would (a
/// check's finding, a Tree entry's diff).
pub fn withheld_note(name: &str) -> String {
    format!("{name}: {LIVE_WITHHELD}\n")
}

/// Why a content change shows no line of the declared side: the
/// repository file that holds the declared bytes no longer holds what the
/// catalogue was compiled from (see [`ContentChange::declared_unread`]).
/// Plan, apply and check say the same words.
pub const DECLARED_UNREAD: &str = "the declared bytes are not shown: their repository file no longer holds what the catalogue was compiled from (edited since, or a damaged cache), so nothing is written from it until a pass compiles again";

/// [`DECLARED_UNREAD`] standing where the content diff of `name` would (a
/// check's finding).
pub fn unread_note(name: &str) -> String {
    format!("{name}: {DECLARED_UNREAD}\n")
}

/// What a pass would do to a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Already as declared.
    None,
    Create,
    Update,
    /// Something of another type is in the way and is replaced.
    Replace,
    Remove,
}

impl Action {
    pub fn is_change(self) -> bool {
        self != Action::None
    }

    pub fn word(self) -> &'static str {
        match self {
            Action::None => "unchanged",
            Action::Create => "create",
            Action::Update => "update",
            Action::Replace => "replace",
            Action::Remove => "remove",
        }
    }
}

/// One field whose observed value differs from the declared one. Values are
/// `None` when absent on that side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldChange {
    pub field: String,
    pub before: Option<serde_json::Value>,
    pub after: Option<serde_json::Value>,
}

/// Content that differs: the old bytes (if the target existed and could be
/// read) and the new. Never serialised: renderers decide what may be shown.
#[derive(Clone, PartialEq)]
pub struct ContentChange {
    pub before: Option<Vec<u8>>,
    pub after: Vec<u8>,
    pub before_sha256: Option<String>,
    pub after_sha256: String,
    /// The live file is not readable by everyone (no read bit for others,
    /// or a folder on its way others may not search): its bytes were not
    /// read (`before` stays `None`) and no output shows its lines, only
    /// the checksums and why. Repository content is never a way to read
    /// what the repository's authors could not (`docs/boundary.md`).
    pub live_withheld: bool,
    /// The declared bytes, kept in a repository file, were refused when
    /// they were read for the diff: the file no longer holds what the
    /// catalogue recorded (`after` stays empty). Outputs say so
    /// ([`DECLARED_UNREAD`]) rather than diff against nothing or call the
    /// content too large.
    pub declared_unread: bool,
}

impl std::fmt::Debug for ContentChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ContentChange({:?} -> {})",
            self.before_sha256, self.after_sha256
        )
    }
}

/// Declared vs observed for one resource.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Diff {
    pub action: Option<Action>,
    pub changes: Vec<FieldChange>,
    /// Boxed: most diffs have none, and a pass holds a diff per resource.
    pub content: Option<Box<ContentChange>>,
}

impl Diff {
    pub fn action(&self) -> Action {
        self.action.unwrap_or(Action::None)
    }

    pub fn is_empty(&self) -> bool {
        !self.action().is_change()
    }

    /// Names of the fields that differ, content included (as `content`).
    pub fn changed_fields(&self) -> Vec<String> {
        let mut names: Vec<String> = self.changes.iter().map(|c| c.field.clone()).collect();
        if self.content.is_some() {
            names.push("content".to_owned());
        }
        names
    }

    /// Replaces the values of every changed field by
    /// [`crate::SENSITIVE_PLACEHOLDER`] (an absent side stays absent; the
    /// field names stay): what a report shows of a resource whose every
    /// value is secret, its own `sensitive: true`, as `datum check` masks it.
    pub fn mask_field_values(&mut self) {
        let hidden = || serde_json::Value::String(crate::SENSITIVE_PLACEHOLDER.to_owned());
        for change in &mut self.changes {
            for side in [&mut change.before, &mut change.after] {
                if side.is_some() {
                    *side = Some(hidden());
                }
            }
        }
    }
}

/// One entry of a resource that owns a whole folder (a Tree) that is not on
/// the host as declared: what a kind's observation tells, entry by entry,
/// in terms every crate above the providers reads without knowing how that
/// kind keeps it (`datum check` words each as a finding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryDifference {
    /// The entry's path relative to the resource's folder; empty for the
    /// folder itself.
    pub path: String,
    pub drift: EntryDrift,
}

/// How an [`EntryDifference`]'s entry differs from its declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryDrift {
    /// On the host, declared by nothing and hidden by no exclusion.
    Unmanaged,
    /// Declared, not on the host.
    Missing,
    /// Another type of entry is there (each side a type word: `file`,
    /// `directory`, `symlink`); `None` where the observation does not say.
    TypeChanged {
        declared: Option<String>,
        found: Option<String>,
    },
    /// There, with fields that differ.
    Changed {
        /// The fields that differ (`content`, `mode`, `owner`, ...).
        fields: Vec<String>,
        /// Both sides of those that are shown as values (mode, owner,
        /// group, link target; never content); empty when the observation
        /// carries none (one an older Datum recorded).
        values: Vec<EntryValue>,
        /// A text diff of the entry's content, declared -> live; never for
        /// a sensitive resource.
        content_diff: Option<String>,
    },
}

/// One field of a changed entry, both sides as shown to a person
/// (`mode`: `0644` declared, `0777` observed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryValue {
    pub field: String,
    pub declared: String,
    pub observed: String,
}
