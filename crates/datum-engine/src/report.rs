//! What a pass tells the outside world: one report per resource and a summary.
//! It is data only: the binary renders it (`crates/datum/src/render/`:
//! human, JSON and Markdown, through `datum_report::render`), and the fleet
//! report is built from it in `datum-reporting`.

use std::collections::{BTreeMap, BTreeSet};

use datum_core::{Action, Diff, Origin, Outcome, ResourceId};
use serde::Serialize;

/// How one resource ended the pass, with what a renderer needs to explain it.
#[derive(Debug, Clone, Serialize)]
pub struct ResourceReport {
    pub id: ResourceId,
    pub origin: Origin,
    /// The path the resource manages, where it has one (for diff headers).
    pub target: Option<String>,
    pub action: Action,
    /// The difference observed before acting (fields and content).
    #[serde(skip)]
    pub diff: Diff,
    pub outcome: Outcome,
    pub sensitive: bool,
    /// Extra lines for a failure (validator output, bounded; never for a
    /// sensitive resource).
    pub detail: Option<String>,
    /// A validator's output left out of `detail` because it may quote a
    /// sensitive value, and why: renderers say so, so that a failure is
    /// never shown without its reason unannounced.
    pub withheld: Option<Withheld>,
    pub duration_ms: u64,
}

/// Why a validator's output was withheld, and which sensitive resources it
/// was withheld for (their ids only, never the words it matched).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Withheld {
    pub reason: WithheldReason,
    /// The sensitive resources' ids, sorted, each once.
    pub resources: Vec<String>,
}

/// What made a validator's output withheld.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WithheldReason {
    /// The validator read a sensitive resource: the resource itself, or a
    /// member of the group (or a file in its folder) that is sensitive.
    SensitiveResource,
    /// The output names a sensitive resource's declared path.
    NamesSensitivePath,
    /// The output holds a word of a sensitive resource's declared content.
    QuotesSensitiveContent,
    /// A sensitive content could not be read again (or is too large to look
    /// through), so no output could be told free of it: every one is
    /// withheld (failing closed).
    SensitiveContentUnread,
}

impl WithheldReason {
    /// The reason as JSON spells it (`quotes_sensitive_content`).
    pub fn word(self) -> &'static str {
        match self {
            Self::SensitiveResource => "sensitive_resource",
            Self::NamesSensitivePath => "names_sensitive_path",
            Self::QuotesSensitiveContent => "quotes_sensitive_content",
            Self::SensitiveContentUnread => "sensitive_content_unread",
        }
    }
}

impl Withheld {
    /// For `resources` (ids), sorted and each once.
    pub fn new(reason: WithheldReason, mut resources: Vec<String>) -> Self {
        resources.sort();
        resources.dedup();
        Withheld { reason, resources }
    }

    /// What a person reads: `validator output withheld: it may quote a
    /// sensitive value (quotes a word of File[secret]'s content)`.
    pub fn sentence(&self) -> String {
        let who = self.resources.join(", ");
        let why = match self.reason {
            WithheldReason::SensitiveResource => format!("the validator read {who}"),
            WithheldReason::NamesSensitivePath => format!("it names the path of {who}"),
            WithheldReason::QuotesSensitiveContent => {
                format!("it holds a word of the content of {who}")
            }
            WithheldReason::SensitiveContentUnread => format!(
                "the content of {who} could not be read again to look for it, so every output is withheld"
            ),
        };
        format!(
            "validator output withheld: it may quote a sensitive value ({why}); run the validator on the host to read it"
        )
    }
}

/// Everything that happened in one pass.
#[derive(Debug, Clone, Serialize, Default)]
pub struct PassSummary {
    pub resources: Vec<ResourceReport>,
    pub duration_ms: u64,
    /// The fingerprint of every visited resource's observation before the
    /// pass changed anything (`None`: it could not be observed), in pass
    /// order: what a saved plan records.
    #[serde(skip)]
    pub observed: Vec<(ResourceId, Option<String>)>,
    /// How many resources were taken as converged by their metadata, not
    /// read (`None`: the pass was not asked to trust metadata).
    pub trusted_by_metadata: Option<u64>,
    /// The resources a person quarantined (`datum quarantine`), held out of
    /// this pass (each reported blocked by itself): a decision, not a
    /// failure, so neither they nor what they hold back make the pass fail.
    #[serde(skip)]
    pub quarantined: BTreeSet<ResourceId>,
    /// What the operator must be told that is no resource's failure (a
    /// staging folder a local user moved away, left where they put it:
    /// `datum_host::Host::take_notices`), shown under the summary.
    pub warnings: Vec<String>,
}

impl PassSummary {
    /// Outcome word -> number of resources.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        // Counted by the outcome's own word, each key spelled once: a pass
        // of 20,000 resources asks this three times (report, rendering,
        // record), and a key made per resource was 60,000 allocations.
        let mut by_word: BTreeMap<&'static str, u64> = BTreeMap::new();
        for r in &self.resources {
            *by_word.entry(r.outcome.word()).or_insert(0) += 1;
        }
        by_word
            .into_iter()
            .map(|(word, n)| (word.replace(' ', "_"), n))
            .collect()
    }

    pub fn any_changed(&self) -> bool {
        self.resources.iter().any(|r| {
            matches!(
                r.outcome,
                Outcome::Changed { .. } | Outcome::WouldChange { .. }
            )
        })
    }

    /// Whether a resource failed, or was blocked by one that failed (or by
    /// anything but a quarantine: a requirement `--class` left out of sync).
    pub fn any_failed(&self) -> bool {
        self.resources.iter().any(|r| match &r.outcome {
            Outcome::Failed { .. } => true,
            Outcome::Blocked { .. } => !self.held_by_quarantine(r),
            _ => false,
        })
    }

    /// Whether `r` was not applied because a person quarantined it, or
    /// quarantined a resource it requires.
    pub fn held_by_quarantine(&self, r: &ResourceReport) -> bool {
        matches!(&r.outcome, Outcome::Blocked { by } if self.quarantined.contains(by))
    }
}

/// Progress and results as they happen.
#[derive(Debug)]
pub enum Event<'a> {
    PassStarted { resources: usize },
    ResourceStarted { id: &'a ResourceId },
    ResourceFinished { report: &'a ResourceReport },
}

/// Receives events; the binary renders them, tests collect them.
pub trait Reporter {
    fn event(&mut self, event: Event<'_>);
}

/// A reporter that ignores everything.
pub struct SilentReporter;

impl Reporter for SilentReporter {
    fn event(&mut self, _event: Event<'_>) {}
}
