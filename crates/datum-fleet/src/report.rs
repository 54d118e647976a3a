//! The report a host (or a driftwatch stack) sends to `datum server`, and the
//! server's reply: the wire model, versioned by [`FORMAT_VERSION`].
//!
//! A report is small by construction: counts per outcome, one root
//! fingerprint per Tree, the bound of each class, and detail only where
//! there is something to see (a failure, a finding, a quarantine). A clean
//! host's report has empty lists and proves its trees by their root hashes.
//!
//! Nothing here holds a value of a sensitive resource: findings carry
//! subjects, categories and changed paths (the value-free signature) plus
//! an observed hash that is left out for sensitive resources; failures of a
//! sensitive resource carry the validator's name and exit status, never its
//! output. The builders in the `datum` binary and in driftwatch fill these
//! types; this module only defines them and what is derived from them.
//!
//! Owns: [`Report`] and its parts, [`Reply`], [`SamplingPlan`]. Must not:
//! read the host, the state store or the network.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The version of [`Report`] and [`Reply`]. A server refuses a report of a
/// version it does not know (HTTP 400), so an old server never half-reads a
/// newer host's report.
pub const FORMAT_VERSION: u32 = 1;

/// What produced a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportKind {
    /// `datum apply`: outcomes per resource (changed, failed...).
    Apply,
    /// `datum check` / `datum reconcile` from the command line or cron.
    Check,
    /// A check run by `datum agent`.
    Agent,
    /// A driftwatch run over an OpenTofu/Terraform stack.
    Stack,
}

impl ReportKind {
    /// The word used in the database, the API and the terminal.
    pub fn word(self) -> &'static str {
        match self {
            ReportKind::Apply => "apply",
            ReportKind::Check => "check",
            ReportKind::Agent => "agent",
            ReportKind::Stack => "stack",
        }
    }

    /// The kind named `word`.
    pub fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "apply" => ReportKind::Apply,
            "check" => ReportKind::Check,
            "agent" => ReportKind::Agent,
            "stack" => ReportKind::Stack,
            _ => return None,
        })
    }
}

/// One report: what one pass saw and did, on one host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    pub format_version: u32,
    /// The idempotency key: 32 hex digits drawn when the report was queued.
    /// A server that already holds this key for this host answers
    /// "duplicate" and stores nothing, so a report retried after a lost
    /// reply is counted once.
    pub key: String,
    /// This host's sequence number for the report (1, 2, ...): the outbox
    /// delivers in this order.
    pub seq: u64,
    pub kind: ReportKind,
    /// The host name (or the stack name for [`ReportKind::Stack`]). The
    /// server checks it against the token's identity.
    pub host: String,
    pub labels: BTreeMap<String, String>,
    /// Version of the program that made the report.
    pub datum_version: String,
    /// The repository revision the catalogue came from: `git:<commit>` for
    /// a git checkout, `stamp:<hash>` otherwise (see the binary's
    /// `revision` module).
    pub revision: String,
    /// Hash of the compiled catalogue (every resource id and declaration
    /// hash, in order): equal on two hosts exactly when they were asked for
    /// the same thing.
    pub catalogue: String,
    pub started_at: i64,
    pub finished_at: i64,
    pub duration_ms: u64,
    pub exit_code: i32,
    /// The classes this report covers; empty for every class (apply, a full
    /// check). A report for some classes replaces only their findings.
    #[serde(default)]
    pub classes_checked: Vec<String>,
    /// Resources per outcome or state word (`unchanged`, `changed`,
    /// `failed`, `converged`, `drifted`...).
    pub counts: BTreeMap<String, u64>,
    /// Resources in the catalogue.
    pub resources: u64,
    /// How often each class is checked and how late drift can be noticed.
    #[serde(default)]
    pub classes: Vec<ClassBound>,
    /// When the server should expect the next report, at the latest (in
    /// seconds after this one): the shortest class interval, or the
    /// interval `report.yaml` states. Staleness is judged against it.
    pub expected_interval_s: u64,
    /// Validator name -> version of the binary that ran (only the validators
    /// that ran in this pass).
    #[serde(default)]
    pub validators: BTreeMap<String, String>,
    /// Declared and observed root fingerprint of every Tree inspected.
    #[serde(default)]
    pub trees: Vec<TreeFingerprint>,
    #[serde(default)]
    pub failures: Vec<Failure>,
    #[serde(default)]
    pub findings: Vec<Finding>,
    /// Resources this pass changed (apply), at most [`CHANGED_KEPT`].
    #[serde(default)]
    pub changed: Vec<String>,
    /// How many resources changed in all (when more than were listed).
    #[serde(default)]
    pub changed_total: u64,
    #[serde(default)]
    pub quarantined: Vec<Quarantined>,
    /// Whether this pass read content (a deep check) and in which sampling
    /// round; `None` when the server asked for no sampling.
    #[serde(default)]
    pub sampling: Option<SamplingUsed>,
    /// An apply asked to trust metadata (`datum apply --trust-metadata`):
    /// how many of its unchanged resources it did not read because their
    /// last verified record vouched for them (size, times, inode, mode and
    /// owner as recorded). Their content was taken as converged, not
    /// compared: a change that kept all of those would not have been seen.
    /// `None` for a pass that read everything it inspected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trusted_by_metadata: Option<u64>,
    /// What became of the server's instructions (quarantine, release) this
    /// host received since its last report: the server marks each one done
    /// when it reads this.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instructions: Vec<InstructionDone>,
    /// A stack's pending changes (what its next normal apply would do), at
    /// most [`PENDING_KEPT`]; empty for a host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PendingChange>,
    /// What the pass warned of although it went on (a shadow-utils
    /// program's words on success, a staging folder a local user moved
    /// away...), as `datum apply`, `check` and `reconcile` show them, at
    /// most [`WARNINGS_KEPT`] of [`WARNING_KEPT`] bytes each; one naming a
    /// sensitive resource is withheld on the host. Sent only to a server
    /// whose reply said it takes them ([`TAKES_WARNINGS`] in
    /// [`Reply::takes`]): a server that predates the field refuses a report
    /// holding it (unknown field), so it is left out, not sent empty,
    /// whenever there is none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// An apply of the host's whole catalogue (no `--target`, `--class`):
    /// the declared resources it did NOT verify (failed, blocked, held by a
    /// quarantine), sorted; every other declared resource it verified,
    /// found as declared or changed and compared again. The server closes
    /// the host's open findings of the verified resources (a hand fix
    /// before the apply leaves nothing to change, and without this the
    /// finding stayed open until the next check). `None` for a partial
    /// apply, one that trusted metadata (`--trust-metadata`: content taken
    /// as converged, not compared), one with more than
    /// [`VERIFIED_EXCEPT_KEPT`] not verified, and every other kind of
    /// report. Sent only to a server whose reply names
    /// [`TAKES_VERIFIED_EXCEPT`] in [`Reply::takes`], as `warnings`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_except: Option<Vec<String>>,
}

impl Report {
    /// The report's JSON, at most `budget` bytes where shedding detail can
    /// make it so: a report over what the server takes is refused for good
    /// (413), and the drift it tells of would never be seen. In turn, until
    /// it fits: content diffs go, the last finding's first (a check that
    /// found many files edited); every change's values; then each
    /// finding keeps at most half as many paths and changes as the most any
    /// finding had, then half of that, down to none (its signature, made
    /// from all of them, is unchanged). No finding is ever left out: the
    /// server takes a check report's findings as every one open on the host
    /// in the classes it covers, and would close the others. Returns the
    /// JSON and, when the report did not fit whole, what was left out and
    /// whether it fits now ([`Shed::fits`]): one that does not is sent as it
    /// is, and a server that takes no more refuses it (413).
    pub fn encode_within(
        &mut self,
        budget: usize,
    ) -> Result<(Vec<u8>, Option<Shed>), serde_json::Error> {
        let mut body = serde_json::to_vec(self)?;
        if body.len() <= budget {
            return Ok((body, None));
        }
        let mut shed = Shed {
            budget,
            size: body.len(),
            diffs: 0,
            values: false,
            paths_kept: None,
        };
        // A diff leaves the JSON with its field name and comma: the size is
        // known without encoding again after each one.
        const FIELD: &str = r#","content_diff":"#;
        while body.len() > budget && self.findings.iter().any(|f| f.content_diff.is_some()) {
            let mut size = body.len();
            for f in self.findings.iter_mut().rev() {
                if size <= budget {
                    break;
                }
                if let Some(diff) = f.content_diff.take() {
                    size = size.saturating_sub(FIELD.len() + serde_json::to_vec(&diff)?.len());
                    shed.diffs += 1;
                }
            }
            body = serde_json::to_vec(self)?;
        }
        let changes = || self.findings.iter().flat_map(|f| f.changes.iter());
        if body.len() > budget && changes().any(|c| c.observed.is_some() || c.declared.is_some()) {
            for c in self.findings.iter_mut().flat_map(|f| f.changes.iter_mut()) {
                c.observed = None;
                c.declared = None;
            }
            shed.values = true;
            body = serde_json::to_vec(self)?;
        }
        let mut kept = self
            .findings
            .iter()
            .map(|f| f.paths.len().max(f.changes.len()))
            .max()
            .unwrap_or(0);
        while body.len() > budget && kept > 0 {
            kept /= 2;
            for f in &mut self.findings {
                f.paths.truncate(kept);
                f.changes.truncate(kept);
            }
            shed.paths_kept = Some(kept);
            body = serde_json::to_vec(self)?;
        }
        shed.size = body.len();
        Ok((body, Some(shed)))
    }

    /// Takes out what the report itself marks sensitive but still carries:
    /// the values of a change marked sensitive, and the content diff of a
    /// finding with such a change. A host's builder never puts them in;
    /// the server calls this before it stores a report, so that a report
    /// that does (a builder's bug, another program's) has no value of a
    /// sensitive resource held or shown anywhere. Returns whether anything
    /// was taken out.
    pub fn withhold_sensitive(&mut self) -> bool {
        let mut withheld = false;
        for finding in &mut self.findings {
            let mut sensitive = false;
            for change in finding.changes.iter_mut().filter(|c| c.sensitive) {
                sensitive = true;
                withheld |= change.observed.take().is_some();
                withheld |= change.declared.take().is_some();
            }
            if sensitive {
                withheld |= finding.content_diff.take().is_some();
            }
        }
        withheld
    }
}

/// The fields a report may hold that a server of an older build does not
/// know (and so refuses the report for, HTTP 400): sent only to a server
/// whose reply said it takes them ([`Reply::takes`]).
pub const OPTIONAL_FIELDS: &[&str] = &[TAKES_WARNINGS, TAKES_VERIFIED_EXCEPT];

/// `body` (a report's JSON) without [`OPTIONAL_FIELDS`], when it holds
/// one: what an older server takes. A host queues warnings after a server
/// said it takes them, and may then deliver to one that does not (a
/// server of the old build behind the same address during an upgrade, or
/// one put back): its refusal (400) would set the report aside for good,
/// its findings and outcomes never seen. `None` when there is nothing to
/// take out (or `body` is not a JSON object).
pub fn without_optional_fields(body: &[u8]) -> Option<Vec<u8>> {
    let mut value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let fields = value.as_object_mut()?;
    let mut removed = false;
    for field in OPTIONAL_FIELDS {
        removed |= fields.remove(*field).is_some();
    }
    if !removed {
        return None;
    }
    serde_json::to_vec(&value).ok()
}

/// At most this many pending changes of a stack travel.
pub const PENDING_KEPT: usize = 100;

/// At most this many bytes of one finding's content diff travel.
pub const DIFF_KEPT: usize = 16 * 1024;

/// The size a report is made to fit in ([`Report::encode_within`]): below
/// the 1 MiB a server takes by default, with room for the headers.
pub const REPORT_BUDGET: usize = 960 * 1024;

/// What [`Report::encode_within`] left out of a report over its budget,
/// and whether it fits now. Its `Display` is the warning a program that
/// queues the report gives (after its own `warning: `).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shed {
    /// The budget, in bytes.
    pub budget: usize,
    /// The report's size as encoded, in bytes.
    pub size: usize,
    /// The findings' content diffs left out.
    pub diffs: usize,
    /// Whether the changes' values were left out.
    pub values: bool,
    /// The paths, and the changes, each finding kept at most, when they
    /// were cut (0: none).
    pub paths_kept: Option<usize>,
}

impl Shed {
    /// Whether the report fits its budget now.
    pub fn fits(&self) -> bool {
        self.size <= self.budget
    }
}

impl std::fmt::Display for Shed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out: Vec<String> = Vec::new();
        if self.diffs > 0 {
            out.push(format!("the last {} content diff(s)", self.diffs));
        }
        if self.values {
            out.push("the changes' values".into());
        }
        match self.paths_kept {
            Some(0) => out.push("every finding's paths and changes".into()),
            Some(n) => out.push(format!(
                "all but the first {n} paths and changes of each finding"
            )),
            None => {}
        }
        let out = match out.split_last() {
            None => "nothing".to_owned(),
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        };
        let kib = |n: usize| n.div_ceil(1024);
        if self.fits() {
            write!(
                f,
                "the fleet report was cut to fit {} KiB: {out} left out (every finding is in it, its signature made from all its paths)",
                kib(self.budget)
            )
        } else {
            write!(
                f,
                "the fleet report is {} KiB even with {out} left out, over the {} KiB a server takes by default: a server that takes no more refuses it for good (HTTP 413)",
                kib(self.size),
                kib(self.budget)
            )
        }
    }
}

/// At most this many bytes of one field value of a finding travel.
pub const VALUE_KEPT: usize = 512;

/// At most this many changed resources are named in one report.
pub const CHANGED_KEPT: usize = 100;

/// At most this many bytes of a failure message travel (validator output
/// included); the rest is cut at a character boundary.
pub const MESSAGE_KEPT: usize = 2048;

/// At most this many warnings of a pass travel ([`Report::warnings`]).
pub const WARNINGS_KEPT: usize = 20;

/// At most this many bytes of one warning travel.
pub const WARNING_KEPT: usize = 1024;

/// What a server's reply names in [`Reply::takes`] when it takes
/// [`Report::warnings`].
pub const TAKES_WARNINGS: &str = "warnings";

/// What a server's reply names in [`Reply::takes`] when it takes
/// [`Report::verified_except`].
pub const TAKES_VERIFIED_EXCEPT: &str = "verified_except";

/// At most this many resources an apply did not verify travel in
/// [`Report::verified_except`]; past them the field is left out (the
/// server then closes only the findings of the resources it changed).
pub const VERIFIED_EXCEPT_KEPT: usize = 1000;

/// One class's schedule as the host knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassBound {
    pub class: String,
    pub interval_s: u64,
    /// Interval + measured inspection time (p95), when measured.
    pub bound_ms: Option<u64>,
    pub resources: u64,
    /// What a check does with drift in the class (`report`, `revert`,
    /// `accept`, `quarantine`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}

/// A Tree's two root hashes. Equal means the tree is exactly as declared.
///
/// For a sensitive Tree both are the host's keyed digests of the roots
/// ([`KEYED_PREFIX`]`...`): a plain root is a checksum of the secrets
/// (`datum fingerprint` of a guessed folder would confirm the guess), a
/// keyed one is equal exactly when the roots are, and only on its host. A
/// host without a key sends no pair for a sensitive Tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeFingerprint {
    /// `Tree[name]`.
    pub resource: String,
    pub declared: String,
    /// `None` when the tree is missing or is not a directory.
    pub observed: Option<String>,
}

/// The prefix of a keyed digest in a [`TreeFingerprint`] (the host's
/// `datum_core::digest::KEYED_PREFIX`).
pub const KEYED_PREFIX: &str = "keyed-blake3:";

/// A resource that failed in this pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Failure {
    /// `Kind[name]`.
    pub resource: String,
    /// The phase it failed in (`observe`, `apply`, `verify`...); `blocked`
    /// for a resource blocked by a failed dependency.
    pub phase: String,
    /// The validator that rejected the content, if one did.
    pub validator: Option<String>,
    pub validator_version: Option<String>,
    pub exit_status: Option<i32>,
    /// The reason as the host reports it, bounded; for a sensitive resource
    /// only the validator's name and exit status are in it.
    pub message: String,
    /// A value-free hash of the message (digits, paths under the staging
    /// folder and hex strings replaced): failures with equal signatures on
    /// two hosts are the same failure.
    pub signature: String,
}

/// A drift finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Finding {
    /// `Kind[name]` (or a stack's resource address).
    pub subject: String,
    /// `changed_outside`, `deleted_outside`, `type_changed`, `unmanaged`...
    pub category: String,
    pub class: String,
    /// The changed fields or Tree entries, sorted.
    pub paths: Vec<String>,
    /// Hash of the subject, category and paths: the value-free identity of
    /// the finding, equal across hosts for the same kind of change.
    pub signature: String,
    /// A hash of what was observed (content hash, field values, entry
    /// fingerprints), equal across hosts that drifted to the same thing;
    /// `None` for a sensitive resource.
    pub observed: Option<String>,
    /// Unix seconds of the first check that saw it (this host).
    pub first_seen: i64,
    /// Consecutive checks of this host that saw it (this one included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<u64>,
    /// What differs, field by field: the live value and the declared one,
    /// each at most [`VALUE_KEPT`] bytes; a sensitive resource's fields
    /// carry no value at all (`sensitive: true`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<FieldChange>,
    /// A unified diff of the content (live -> declared), at most
    /// [`DIFF_KEPT`] bytes; never for a sensitive resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_diff: Option<String>,
    /// Who changed the resource, as the host's attribution read it (a
    /// class with `attribute: true`); empty when nothing was attributed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_by: Vec<Writer>,
}

/// Who changed a finding's resource (issue 20): enough to know whom to ask,
/// and never the command line or environment (either may carry a value).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Writer {
    /// `person`, `package_manager`, `unit`, `process` or `unknown`.
    pub kind: String,
    /// How the change arrived: `sshd session from 10.0.0.7 port 51234`,
    /// `terminal /dev/pts/3`, `dpkg (package upgrade)`, `systemd unit
    /// backup.service`, `unknown`.
    pub via: String,
    /// The writer's user name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Who logged in (the audit login uid's name, kept across `su`/`sudo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login_user: Option<String>,
    /// The systemd unit its cgroup names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// Unix seconds when the change was seen.
    pub at: i64,
}

impl Writer {
    /// One line for a person: `alice (login alice) via sshd session from …`,
    /// `dpkg (package upgrade)`, `unknown`.
    pub fn line(&self) -> String {
        let who = match (&self.user, &self.login_user) {
            (Some(u), Some(l)) if u != l => format!("{u} (login {l})"),
            (Some(u), _) => u.clone(),
            (None, Some(l)) => format!("login {l}"),
            (None, None) => String::new(),
        };
        if who.is_empty() {
            self.via.clone()
        } else {
            format!("{who} via {}", self.via)
        }
    }
}

/// One field of a finding: what the host has and what is declared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldChange {
    pub path: String,
    /// The live value, as shown to a person; `None` when withheld.
    pub observed: Option<String>,
    /// The declared value; `None` when withheld.
    pub declared: Option<String>,
    /// The values are secret: only the path travels.
    #[serde(default)]
    pub sensitive: bool,
}

/// One pending change of a stack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingChange {
    pub address: String,
    /// `create`, `update`, `replace`, `delete`...
    pub action: String,
}

/// A quarantined resource (or the whole host: `host`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quarantined {
    pub target: String,
    /// `person`, `policy` or `flapping`.
    pub source: String,
    /// Why (a person's words, or the policy's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Unix seconds it has been quarantined since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<i64>,
}

/// How a check took part in the fleet's sampling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplingUsed {
    pub round: u64,
    pub deep: bool,
}

/// The server's answer to a delivered report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub format_version: u32,
    /// The report is stored (now or by an earlier delivery of the same key).
    pub accepted: bool,
    /// The key was already stored: nothing new was written.
    pub duplicate: bool,
    /// The fleet's sampling plan, for the host's next checks.
    pub sampling: Option<SamplingPlan>,
    /// What a person asked of this host through the server and the host has
    /// not confirmed yet, oldest first. The host carries them out when it
    /// receives them (in the transaction that records the delivery) and
    /// confirms them in its next report ([`Report::instructions`]); until
    /// then every reply repeats them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instructions: Vec<Instruction>,
    /// The optional report fields this server takes ([`TAKES_WARNINGS`],
    /// [`TAKES_VERIFIED_EXCEPT`]): a report is refused whole for a field its
    /// server does not know, so a host sends such a field only once the
    /// server's last reply named it here. Empty from a server that
    /// predates it (the field is then absent; hosts that predate it ignore
    /// it, a reply's unknown fields being allowed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub takes: Vec<String>,
}

/// What a person can ask of a host through the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstructionAction {
    /// Exclude the target from apply, never revert it (`datum quarantine`).
    Quarantine,
    /// Lift a quarantine (`datum release`).
    Release,
}

impl InstructionAction {
    pub fn word(self) -> &'static str {
        match self {
            InstructionAction::Quarantine => "quarantine",
            InstructionAction::Release => "release",
        }
    }

    pub fn parse(word: &str) -> Option<Self> {
        match word {
            "quarantine" => Some(InstructionAction::Quarantine),
            "release" => Some(InstructionAction::Release),
            _ => None,
        }
    }
}

/// One instruction, as the server hands it to a host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instruction {
    /// 32 hex digits drawn by the server: the host carries out a key once,
    /// however often it is repeated.
    pub key: String,
    pub action: InstructionAction,
    /// `Kind[name]`, or `host` for the whole host.
    pub target: String,
    /// Why, in the words of the person who asked.
    pub reason: String,
    /// Who asked (the name given at login, or the script's).
    pub by: String,
    /// Unix seconds it was asked at.
    pub at: i64,
}

/// The target word of a whole-host quarantine.
pub const HOST_TARGET: &str = "host";

/// What a host did with one instruction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstructionDone {
    pub key: String,
    /// `quarantined`, `released`, `not quarantined`, or `refused: why`.
    pub outcome: String,
    /// Unix seconds the host carried it out.
    pub at: i64,
}

/// The fleet's sampling plan, handed to every host in each reply.
///
/// Time is cut into rounds of `round_s` seconds. With a fraction `f`, the
/// period is `k = ⌈1/f⌉` rounds, and each host deep-checks in exactly one
/// round of every period: the round whose number modulo `k` equals the
/// host's slot, a seeded hash of its name modulo `k` (see [`deep_round`]).
/// So every host is read in full at least once every `k` rounds (a change on
/// one host is seen within `k` rounds plus one check interval, guaranteed,
/// when the class interval is at most a round), and about `1/k` of the fleet
/// is deep-checked in any round.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SamplingPlan {
    pub fraction: f64,
    pub round_s: u64,
    pub seed: u64,
    /// The round the server was in when it answered.
    pub round: u64,
}

impl SamplingPlan {
    /// `⌈1/fraction⌉`: at most this many rounds pass between two deep
    /// checks of one host. 1 for a fraction of 1 or more (or not a number).
    pub fn period(&self) -> u64 {
        period(self.fraction)
    }

    /// The round at Unix time `now`.
    pub fn round_at(&self, now: i64) -> u64 {
        u64::try_from(now).unwrap_or(0) / self.round_s.max(1)
    }

    /// Whether `host` deep-checks in the round at `now`.
    pub fn deep_at(&self, host: &str, now: i64) -> bool {
        deep_round(host, self.seed, self.period(), self.round_at(now))
    }

    /// The pass seed of the round at `now`, for `datum check --pass-seed`.
    pub fn pass_seed(&self, now: i64) -> u64 {
        let mut h = Sha256::new();
        h.update(self.seed.to_le_bytes());
        h.update(self.round_at(now).to_le_bytes());
        let d = h.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&d[..8]);
        u64::from_le_bytes(first)
    }
}

/// `⌈1/fraction⌉`, at least 1.
pub fn period(fraction: f64) -> u64 {
    if fraction.is_nan() || fraction >= 1.0 || fraction <= 0.0 {
        return 1;
    }
    let k = (1.0 / fraction).ceil();
    if k >= u32::MAX as f64 {
        u64::from(u32::MAX)
    } else {
        k as u64
    }
}

/// The slot of `host` in a period of `k` rounds: a seeded hash of the name.
pub fn slot(host: &str, seed: u64, k: u64) -> u64 {
    let mut h = Sha256::new();
    h.update(b"datum-fleet-slot1\0");
    h.update(host.as_bytes());
    h.update(b"\0");
    h.update(seed.to_le_bytes());
    let d = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    u64::from_le_bytes(first) % k.max(1)
}

/// Whether `host` deep-checks in `round` of a fleet whose period is `k`.
pub fn deep_round(host: &str, seed: u64, k: u64, round: u64) -> bool {
    round % k.max(1) == slot(host, seed, k)
}

/// The value-free signature of a finding: 16 hex digits of SHA-256 over the
/// subject, category and sorted paths (the same identity `datum check`
/// keeps history by).
pub fn finding_signature(subject: &str, category: &str, paths: &[String]) -> String {
    let mut h = Sha256::new();
    h.update(b"datum-finding1\0");
    h.update(subject.as_bytes());
    h.update(b"\0");
    h.update(category.as_bytes());
    for p in paths {
        h.update(b"\0");
        h.update(p.as_bytes());
    }
    hex::encode(&h.finalize()[..8])
}

/// A hash of observed values, from `(path, observed value)` pairs in any
/// order: 16 hex digits.
pub fn observed_hash<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut pairs: Vec<(&str, &str)> = pairs.into_iter().collect();
    pairs.sort_unstable();
    let mut h = Sha256::new();
    h.update(b"datum-observed1");
    for (p, v) in pairs {
        h.update(b"\0");
        h.update(p.as_bytes());
        h.update(b"=");
        h.update(v.as_bytes());
    }
    hex::encode(&h.finalize()[..8])
}

/// The value-free signature of a failure message: runs of digits, hex
/// strings of 8 or more digits and the staged file names (`.datum.stage.*`)
/// are replaced before hashing, so the same rejection on two hosts (other
/// line numbers of a temporary path, other pids) signs the same. 16 hex
/// digits over the resource, phase, validator and the normalised message.
pub fn failure_signature(
    resource: &str,
    phase: &str,
    validator: Option<&str>,
    message: &str,
) -> String {
    let mut h = Sha256::new();
    h.update(b"datum-failure1\0");
    h.update(resource.as_bytes());
    h.update(b"\0");
    h.update(phase.as_bytes());
    h.update(b"\0");
    h.update(validator.unwrap_or("").as_bytes());
    h.update(b"\0");
    h.update(normalise_message(message).as_bytes());
    hex::encode(&h.finalize()[..8])
}

/// What [`failure_signature`] hashes of a message: every word holding a
/// digit becomes `#` (line numbers, pids, versions in paths, temporary
/// names), and whitespace runs become one space.
pub fn normalise_message(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for word in message.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        if word.contains(".datum.stage") || word.chars().any(|c| c.is_ascii_digit()) {
            out.push('#');
        } else {
            out.push_str(word);
        }
    }
    out
}

/// `text` cut to at most `max` bytes at a character boundary, with `…` when
/// it was cut.
pub fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// A fresh idempotency key: 32 hex digits from the system's random source.
pub fn new_key() -> String {
    let mut bytes = [0u8; 16];
    crate::random::fill(&mut bytes);
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_report_too_large_sheds_detail_until_it_fits() {
        let mut report: Report = serde_json::from_value(serde_json::json!({
            "format_version": 1, "key": "k", "seq": 1, "kind": "check", "host": "h",
            "labels": {}, "datum_version": "0", "revision": "r", "catalogue": "c",
            "started_at": 0, "finished_at": 0, "duration_ms": 0, "exit_code": 0,
            "counts": {"drifted": 1}, "resources": 1, "expected_interval_s": 600
        }))
        .unwrap();
        let paths: Vec<String> = (0..20_000).map(|i| format!("entry-{i:05}.conf")).collect();
        report.findings = vec![Finding {
            subject: "Tree[big]".into(),
            category: "changed_outside".into(),
            class: "normal".into(),
            signature: finding_signature("Tree[big]", "changed_outside", &paths),
            changes: paths
                .iter()
                .map(|p| FieldChange {
                    path: p.clone(),
                    observed: Some("changed: content".into()),
                    declared: Some("declared".into()),
                    sensitive: false,
                })
                .collect(),
            paths,
            observed: Some("o".into()),
            first_seen: 0,
            checks: None,
            content_diff: None,
            changed_by: vec![],
        }];
        let signature = report.findings[0].signature.clone();
        let (body, shed) = report.encode_within(100_000).unwrap();
        let shed = shed.expect("it was cut");
        assert!(shed.fits() && body.len() <= 100_000, "{}", body.len());
        assert!(shed.values);
        // 20,000 halved until it fits: 10,000, 5,000, 2,500, 1,250, 625.
        assert_eq!(shed.paths_kept, Some(625));
        let back: Report = serde_json::from_slice(&body).unwrap();
        let f = &back.findings[0];
        assert_eq!(f.paths.len(), 625);
        assert_eq!(f.paths.last().unwrap(), "entry-00624.conf");
        assert_eq!(f.changes.len(), 625);
        assert_eq!(f.signature, signature);
        assert_eq!(
            shed.to_string(),
            "the fleet report was cut to fit 98 KiB: the changes' values and all but the first 625 paths and changes of each finding left out (every finding is in it, its signature made from all its paths)"
        );
        // A report that fits is left whole.
        let (small, shed) = back.clone().encode_within(100_000).unwrap();
        assert!(shed.is_none());
        assert_eq!(serde_json::from_slice::<Report>(&small).unwrap(), back);
    }

    /// A report of many findings, each naming many paths: the old cut
    /// kept 100 paths of each and then the first 1,000 findings, still over
    /// the budget; and the server closes every finding of a check report
    /// it does not find in it.
    fn many_findings(findings: usize, paths: usize) -> Report {
        let mut report: Report = serde_json::from_value(serde_json::json!({
            "format_version": 1, "key": "k", "seq": 1, "kind": "check", "host": "h",
            "labels": {}, "datum_version": "0", "revision": "r", "catalogue": "c",
            "started_at": 0, "finished_at": 0, "duration_ms": 0, "exit_code": 0,
            "counts": {"drifted": findings}, "resources": findings, "expected_interval_s": 600
        }))
        .unwrap();
        report.findings = (0..findings)
            .map(|i| {
                let subject = format!("Tree[t{i:04}]");
                let paths: Vec<String> = (0..paths)
                    .map(|j| format!("etc/app-{i:04}/entry-{j:04}.conf"))
                    .collect();
                Finding {
                    signature: finding_signature(&subject, "changed_outside", &paths),
                    subject,
                    category: "changed_outside".into(),
                    class: "normal".into(),
                    changes: paths
                        .iter()
                        .map(|p| FieldChange {
                            path: p.clone(),
                            observed: Some("changed: content".into()),
                            declared: Some("declared".into()),
                            sensitive: false,
                        })
                        .collect(),
                    paths,
                    observed: Some("o".into()),
                    first_seen: 0,
                    checks: None,
                    content_diff: Some("-a\n+b\n".into()),
                    changed_by: vec![],
                }
            })
            .collect();
        report
    }

    #[test]
    fn a_report_cut_to_fit_fits_and_keeps_every_finding() {
        let mut report = many_findings(3_000, 150);
        let whole = report.clone();
        let (body, shed) = report.encode_within(REPORT_BUDGET).unwrap();
        assert!(body.len() <= REPORT_BUDGET, "{} bytes", body.len());
        let shed = shed.expect("it was cut");
        assert!(shed.fits(), "{shed}");
        let back: Report = serde_json::from_slice(&body).unwrap();
        assert_eq!(back.findings.len(), whole.findings.len());
        for (kept, was) in back.findings.iter().zip(&whole.findings) {
            assert_eq!(kept.signature, was.signature);
            assert_eq!(kept.subject, was.subject);
            // What is left of its paths is its own, nothing made up.
            assert!(was.paths.starts_with(&kept.paths), "{:?}", kept.paths);
            assert_eq!(kept.changes.len(), kept.paths.len());
        }
        assert!(!back.findings[0].paths.is_empty(), "kept what fits");
    }

    #[test]
    fn a_report_that_cannot_fit_says_so() {
        let mut report = many_findings(100, 10);
        let (body, shed) = report.encode_within(10_000).unwrap();
        let shed = shed.expect("it was cut");
        assert!(!shed.fits() && body.len() > 10_000, "{shed}");
        assert_eq!(shed.size, body.len());
        let back: Report = serde_json::from_slice(&body).unwrap();
        assert_eq!(back.findings.len(), 100);
        assert!(back.findings.iter().all(|f| f.paths.is_empty()));
        let said = shed.to_string();
        assert!(
            said.contains("HTTP 413") && said.contains("even with"),
            "{said}"
        );
    }

    #[test]
    fn a_reports_diffs_go_last_finding_first_and_only_when_it_does_not_fit() {
        let finding = |diff: Option<usize>| Finding {
            subject: "File[x]".into(),
            category: "changed_outside".into(),
            class: "normal".into(),
            paths: vec!["content".into()],
            signature: "s".into(),
            observed: None,
            first_seen: 0,
            checks: None,
            changes: vec![FieldChange {
                path: "content".into(),
                observed: Some("live".into()),
                declared: Some("declared".into()),
                sensitive: false,
            }],
            content_diff: diff.map(|n| "x".repeat(n)),
            changed_by: vec![],
        };
        let report = |diffs: usize| {
            let mut report: Report = serde_json::from_value(serde_json::json!({
                "format_version": 1, "key": "k", "seq": 1, "kind": "check", "host": "h",
                "labels": {}, "datum_version": "0", "revision": "r", "catalogue": "c",
                "started_at": 0, "finished_at": 0, "duration_ms": 0, "exit_code": 0,
                "counts": {}, "resources": 0, "expected_interval_s": 600
            }))
            .unwrap();
            report.findings = (0..diffs).map(|_| finding(Some(DIFF_KEPT))).collect();
            report.findings.push(finding(None));
            report
        };
        let diffs = |r: &Report| {
            r.findings
                .iter()
                .filter(|f| f.content_diff.is_some())
                .count()
        };
        // 40 diffs of 16 KiB fit whole: nothing is cut.
        let mut fits = report(40);
        let (_, shed) = fits.encode_within(REPORT_BUDGET).unwrap();
        assert_eq!((shed, diffs(&fits)), (None, 40));
        // 80 do not: the last findings' go until it fits, nothing more.
        let mut over = report(80);
        let (body, shed) = over.encode_within(REPORT_BUDGET).unwrap();
        let shed = shed.expect("it was cut");
        assert!(shed.fits() && body.len() <= REPORT_BUDGET, "{shed}");
        let kept = diffs(&over);
        assert_eq!(shed.diffs, 80 - kept);
        assert!(
            over.findings[..kept]
                .iter()
                .all(|f| f.content_diff.is_some())
        );
        assert!(!shed.values && shed.paths_kept.is_none(), "{shed:?}");
        assert!(
            over.findings
                .iter()
                .all(|f| f.changes[0].observed.is_some())
        );
        assert_eq!(
            shed.to_string(),
            format!(
                "the fleet report was cut to fit 960 KiB: the last {} content diff(s) left out (every finding is in it, its signature made from all its paths)",
                80 - kept
            )
        );
        // One more diff would not have fitted.
        over.findings[kept].content_diff = Some("x".repeat(DIFF_KEPT));
        assert!(serde_json::to_vec(&over).unwrap().len() > REPORT_BUDGET);
    }
    use super::*;

    #[test]
    fn every_host_deep_checks_once_per_period() {
        let hosts: Vec<String> = (0..500).map(|i| format!("web-{i:03}")).collect();
        for fraction in [1.0, 0.5, 0.3, 0.1] {
            let k = period(fraction);
            for h in &hosts {
                let deep: Vec<u64> = (0..3 * k).filter(|r| deep_round(h, 7, k, *r)).collect();
                assert_eq!(deep.len(), 3, "{h} at {fraction}: {deep:?}");
                assert!(deep.windows(2).all(|w| w[1] - w[0] == k));
            }
            // About 1/k of the fleet per round.
            let in_round = hosts.iter().filter(|h| deep_round(h, 7, k, 5)).count();
            let expected = hosts.len() as f64 / k as f64;
            assert!(
                (in_round as f64 - expected).abs() < expected * 0.5 + 5.0,
                "{in_round} vs {expected}"
            );
        }
        assert_eq!(period(0.1), 10);
        assert_eq!(period(0.3), 4);
        assert_eq!(period(f64::NAN), 1);
    }

    #[test]
    fn signatures_ignore_values_and_numbers() {
        let a = failure_signature(
            "File[shop]",
            "apply",
            Some("nginx"),
            "nginx: [emerg] unknown directive \"http3\" in /tmp/.datum.stage.a91f/shop.conf:12",
        );
        let b = failure_signature(
            "File[shop]",
            "apply",
            Some("nginx"),
            "nginx: [emerg] unknown directive \"http3\" in /tmp/.datum.stage.77c0/shop.conf:13",
        );
        assert_eq!(a, b);
        let c = failure_signature("File[shop]", "apply", Some("nginx"), "another message");
        assert_ne!(a, c);
        let paths = vec!["content".to_owned(), "mode".to_owned()];
        assert_eq!(
            finding_signature("File[a]", "changed_outside", &paths),
            finding_signature("File[a]", "changed_outside", &paths)
        );
        assert_ne!(
            observed_hash([("mode", "0600")]),
            observed_hash([("mode", "0644")])
        );
        assert_eq!(
            observed_hash([("a", "1"), ("b", "2")]),
            observed_hash([("b", "2"), ("a", "1")])
        );
    }

    #[test]
    fn bounded_cuts_at_a_character() {
        assert_eq!(bounded("héllo", 2), "h…");
        assert_eq!(bounded("abc", 3), "abc");
        assert_eq!(new_key().len(), 32);
        assert_ne!(new_key(), new_key());
    }
}
