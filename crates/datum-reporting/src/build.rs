//! From what a pass saw to the fleet report (`datum_fleet::Report`).
//!
//! A clean host's report is counts, class bounds and one root fingerprint
//! pair per Tree; detail is added only for failures, findings, changed
//! resources (at most `CHANGED_KEPT`) and quarantines. Sensitive resources
//! lose their validator output and their observed hash here, so nothing
//! downstream (outbox, server, metrics) can hold a value of theirs.
//!
//! Owns: [`Common`], [`apply_report`], [`check_finding`]. Must not: read the
//! host or the store (the callers pass what they found).

use std::collections::BTreeMap;

use datum_core::{Observed, Outcome, Resource};
use datum_drift::check::CheckFinding;
use datum_fleet::report::{
    CHANGED_KEPT, DIFF_KEPT, MESSAGE_KEPT, WARNING_KEPT, WARNINGS_KEPT, bounded, failure_signature,
    finding_signature, observed_hash,
};
use datum_fleet::{ClassBound, Failure, FieldChange, Finding, Report, ReportKind, TreeFingerprint};

/// What every report of a host says about the pass.
#[derive(Debug, Clone)]
pub struct Common {
    pub kind: ReportKind,
    pub host: String,
    pub labels: BTreeMap<String, String>,
    pub revision: String,
    pub catalogue: String,
    pub started_at: i64,
    pub finished_at: i64,
    pub duration_ms: u64,
    pub exit_code: i32,
    pub resources: u64,
    pub classes: Vec<ClassBound>,
    pub expected_interval_s: u64,
}

impl Common {
    /// An empty report of this pass (key and sequence are drawn when it is
    /// queued).
    pub fn report(&self) -> Report {
        Report {
            format_version: datum_fleet::FORMAT_VERSION,
            key: String::new(),
            seq: 0,
            kind: self.kind,
            host: self.host.clone(),
            labels: self.labels.clone(),
            datum_version: env!("CARGO_PKG_VERSION").to_owned(),
            revision: self.revision.clone(),
            catalogue: self.catalogue.clone(),
            started_at: self.started_at,
            finished_at: self.finished_at,
            duration_ms: self.duration_ms,
            exit_code: self.exit_code,
            classes_checked: Vec::new(),
            counts: BTreeMap::new(),
            resources: self.resources,
            classes: self.classes.clone(),
            expected_interval_s: self.expected_interval_s,
            validators: BTreeMap::new(),
            trees: Vec::new(),
            failures: Vec::new(),
            findings: Vec::new(),
            changed: Vec::new(),
            changed_total: 0,
            quarantined: Vec::new(),
            sampling: None,
            trusted_by_metadata: None,
            instructions: Vec::new(),
            pending: Vec::new(),
            warnings: Vec::new(),
            verified_except: None,
        }
    }
}

/// The catalogue's hash: every resource id and declaration hash, in order.
pub fn catalogue_hash<'a>(entries: impl IntoIterator<Item = (String, &'a str)>) -> String {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    for (id, declaration) in entries {
        h.update(id.as_bytes());
        h.update(b"\0");
        h.update(declaration.as_bytes());
        h.update(b"\n");
    }
    hex::encode(&h.finalize()[..16])
}

/// Takes the per-host parts (the root folder, the host name) out of a
/// message before it is signed, so the same failure on two hosts signs the
/// same.
fn host_free(message: &str, host: &str, root: &str) -> String {
    let mut m = message.to_owned();
    if root != "/" && !root.is_empty() {
        m = m.replace(root.trim_end_matches('/'), "");
    }
    if !host.is_empty() {
        m = m.replace(host, "(host)");
    }
    m
}

/// The apply report of a pass: `summary`'s outcomes, with each failure's
/// validator (from `resources`), and `versions` of the validators that ran.
pub fn apply_report(
    common: &Common,
    summary: &datum_engine::PassSummary,
    resources: &[Resource],
    versions: BTreeMap<String, String>,
    root: &str,
) -> Report {
    let by_id: std::collections::HashMap<&datum_core::ResourceId, &Resource> =
        resources.iter().map(|r| (&r.id, r)).collect();
    let mut report = common.report();
    report.counts = summary.counts();
    report.trusted_by_metadata = summary.trusted_by_metadata;
    report.validators = versions;
    for r in &summary.resources {
        let resource = by_id.get(&r.id).copied();
        match &r.outcome {
            Outcome::Changed { .. } => {
                report.changed_total += 1;
                if report.changed.len() < CHANGED_KEPT {
                    report.changed.push(r.id.to_string());
                }
            }
            Outcome::Failed { phase, reason } => {
                // A group validator's failure is reported on
                // `ValidationGroup[NAME]`, NAME being the validator.
                let validator = if r.id.kind == datum_engine::GROUP_KIND {
                    Some(r.id.name.clone())
                } else {
                    resource
                        .and_then(|x| x.validate.clone())
                        .filter(|_| reason.contains("validat"))
                };
                let sensitive = r.sensitive || resource.is_some_and(|x| x.sensitive);
                // The engine already leaves the output of a sensitive
                // resource's validator out of `detail`.
                let mut message = reason.clone();
                if !sensitive && let Some(detail) = &r.detail {
                    message.push('\n');
                    message.push_str(detail);
                }
                let message = bounded(&message, MESSAGE_KEPT);
                let phase = phase.to_string();
                let signature = failure_signature(
                    &r.id.to_string(),
                    &phase,
                    validator.as_deref(),
                    &host_free(&message, &common.host, root),
                );
                report.failures.push(Failure {
                    resource: r.id.to_string(),
                    phase,
                    validator_version: validator
                        .as_ref()
                        .and_then(|v| report.validators.get(v).cloned()),
                    validator,
                    exit_status: exit_status(reason),
                    message,
                    signature,
                });
            }
            // Held back by a person's quarantine: not a failure (the
            // report's `quarantined` list says what is held).
            Outcome::Blocked { .. } if summary.held_by_quarantine(r) => {}
            Outcome::Blocked { by } => {
                let message = format!("blocked by {by}");
                report.failures.push(Failure {
                    resource: r.id.to_string(),
                    phase: "blocked".to_owned(),
                    validator: None,
                    validator_version: None,
                    exit_status: None,
                    signature: failure_signature(&r.id.to_string(), "blocked", None, &message),
                    message,
                });
            }
            _ => {}
        }
    }
    report
}

/// What an apply of the whole catalogue did not verify, for
/// [`Report::verified_except`]: every declared resource whose outcome is
/// neither unchanged nor changed (failed, blocked, held by a quarantine, or
/// absent from the pass), sorted. `None` when the pass trusted metadata
/// (an unchanged resource's content taken as converged, not compared) or
/// when more than `VERIFIED_EXCEPT_KEPT` were not verified. The caller
/// asks only for an apply of the whole catalogue (no `--target`,
/// `--class`): a partial one says nothing of the rest.
pub fn verified_except(
    summary: &datum_engine::PassSummary,
    resources: &[Resource],
) -> Option<Vec<String>> {
    if summary.trusted_by_metadata.is_some_and(|n| n > 0) {
        return None;
    }
    // A resource the pass reported more than once is verified only if
    // every one of its outcomes says so.
    let mut verified: std::collections::HashMap<&datum_core::ResourceId, bool> =
        std::collections::HashMap::new();
    for r in &summary.resources {
        let ok = matches!(r.outcome, Outcome::Unchanged | Outcome::Changed { .. });
        *verified.entry(&r.id).or_insert(ok) &= ok;
    }
    let mut except: Vec<String> = Vec::new();
    for r in resources {
        if verified.get(&r.id) != Some(&true) {
            if except.len() == datum_fleet::report::VERIFIED_EXCEPT_KEPT {
                return None;
            }
            except.push(r.id.to_string());
        }
    }
    except.sort_unstable();
    Some(except)
}

/// The warnings of a pass as the fleet report carries them
/// ([`Report::warnings`]): each at most `WARNING_KEPT` bytes, at most
/// `WARNINGS_KEPT` of them. One naming a sensitive resource, by its id or
/// by its declared path (what the engine withholds a validator's output
/// for: [`datum_engine::SensitiveOnce::names_sensitive`]), is left out, as
/// the agent's log leaves it out (`datum_check::watch`): a shadow-utils
/// program quoting a sensitive file as a shell, a staging folder under a
/// sensitive Tree. The report says how many were left out, never their
/// words; the host's own output still shows them.
///
/// `sensitive` is the run's (the one its pass asked, so the sensitive
/// sources are not read again), of a catalogue holding at least every
/// sensitive resource of the pass's; `None` when the caller cannot say
/// which are (a check that did not decode every declaration): then no
/// warning's words go, only how many there were (failing closed).
pub fn pass_warnings(
    warnings: &[String],
    sensitive: Option<&datum_engine::SensitiveOnce<'_>>,
) -> Vec<String> {
    if warnings.is_empty() {
        return Vec::new();
    }
    let Some(sensitive) = sensitive else {
        return vec![format!(
            "{} warning(s) of the pass, their words not sent (this pass did not read every declaration, so whether one names a sensitive resource is not known; read them on the host)",
            warnings.len()
        )];
    };
    let mut out = Vec::new();
    let mut withheld = 0usize;
    for warning in warnings {
        if sensitive.names_sensitive(warning) {
            withheld += 1;
        } else if out.len() < WARNINGS_KEPT {
            out.push(bounded(warning, WARNING_KEPT));
        }
    }
    let more = warnings.len() - withheld - out.len();
    if more > 0 {
        out.push(format!(
            "{more} more warning(s) of the pass (read them on the host)"
        ));
    }
    if withheld > 0 {
        out.push(format!(
            "{withheld} warning(s) naming a sensitive resource left out (read them on the host)"
        ));
    }
    out
}

/// `exit N` in a failure's reason.
fn exit_status(reason: &str) -> Option<i32> {
    let at = reason.find("exit ")?;
    let digits: String = reason[at + 5..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// The fleet form of one check finding. `observed` is the resource's
/// observation (for the hash of what it drifted to), `sensitive` whether
/// the resource is.
pub fn check_finding(
    registry: &datum_providers::Registry,
    f: &CheckFinding,
    observed: Option<&Observed>,
    sensitive: bool,
    first_seen: i64,
) -> Finding {
    let sig = f.finding.signature();
    let observed_hash = if sensitive {
        None
    } else if let Some(fingerprints) = registry.lookup(&f.id.kind).and_then(|p| p.fingerprints()) {
        // The host entries' own fingerprints, where they exist.
        let entries: BTreeMap<String, String> = observed
            .map(|o| fingerprints.observed_entries(o))
            .unwrap_or_default();
        Some(observed_hash(sig.paths.iter().map(|p| {
            (p.as_str(), entries.get(p).map_or("missing", String::as_str))
        })))
    } else {
        let pairs: Vec<(String, String)> = f
            .finding
            .diffs
            .iter()
            // A check finding reads declared (before) -> observed (after).
            .map(|d| (d.path().to_owned(), d.after_display().to_owned()))
            .collect();
        Some(observed_hash(
            pairs.iter().map(|(p, v)| (p.as_str(), v.as_str())),
        ))
    };
    Finding {
        signature: finding_signature(&sig.subject, &sig.category, &sig.paths),
        subject: sig.subject,
        category: sig.category,
        class: f.class.clone(),
        paths: sig.paths,
        observed: observed_hash,
        first_seen,
        checks: None,
        changes: field_changes(&f.finding.diffs, sensitive),
        // `findings_for` makes no content diff for a sensitive resource;
        // the check here keeps that true whatever it does.
        content_diff: f
            .content_diff
            .as_deref()
            .filter(|_| !sensitive)
            .map(|d| bounded(d, DIFF_KEPT)),
        changed_by: f.changed_by.iter().map(writer).collect(),
    }
}

/// A writer as the fleet carries it: who and how, never the command line.
fn writer(w: &datum_core::ChangedBy) -> datum_fleet::Writer {
    datum_fleet::Writer {
        kind: w.kind.word().to_owned(),
        via: w.via.clone(),
        user: w.user.clone(),
        login_user: w.login_user.clone(),
        unit: w.unit.clone(),
        at: w.at,
    }
}

/// A finding's differences as the fleet shows them: values bounded, and
/// none at all when the resource (or the difference) is sensitive.
pub fn field_changes(diffs: &[datum_report::AttrDiff], sensitive: bool) -> Vec<FieldChange> {
    diffs
        .iter()
        .map(|d| {
            let withheld = sensitive || d.is_sensitive();
            let value = |v: Option<&str>| {
                v.filter(|_| !withheld)
                    .map(|v| bounded(v, datum_fleet::report::VALUE_KEPT))
            };
            FieldChange {
                path: d.path().to_owned(),
                observed: value(d.after()),
                declared: value(d.before()),
                sensitive: withheld,
            }
        })
        .collect()
}

/// The fingerprint pair an observation carries, asked of its kind's
/// [`Fingerprints`](datum_providers::Fingerprints) capability (`provider`
/// is the resource's; a kind without the capability has no pair). A sensitive
/// resource's roots are checksums of its secrets (`datum fingerprint` of a
/// guessed folder would confirm the guess): the report carries the host's
/// keyed digests of both instead (equal exactly when the roots are), and no
/// pair at all without a key.
pub fn tree_fingerprint(
    resource: &Resource,
    provider: &dyn datum_providers::Provider,
    observed: &Observed,
    key: Option<&datum_core::DigestKey>,
) -> Option<TreeFingerprint> {
    let roots = provider.fingerprints()?.roots(observed)?;
    let (declared, observed) = if resource.sensitive {
        let key = key?;
        (
            key.digest(&roots.declared),
            roots.observed.map(|o| key.digest(&o)),
        )
    } else {
        (roots.declared, roots.observed)
    };
    Some(TreeFingerprint {
        resource: resource.id.to_string(),
        declared,
        observed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pass's warnings travel, bounded, but one naming a sensitive
    /// resource (its id, or its declared path, as a non-sensitive User's
    /// shell may) only as a count: the server and its database never hold
    /// its words.
    #[test]
    fn a_warning_naming_a_sensitive_resource_is_counted_not_sent() {
        use datum_core::{Resource, ResourceId};
        let r = |kind: &str, name: &str, path: &str, sensitive: bool| Resource {
            sensitive,
            ..Resource::new(
                ResourceId::new(kind, name),
                serde_json::json!({ "path": path }),
            )
        };
        let catalogue = datum_catalog::Catalogue {
            host: datum_catalog::HostIdentity::default(),
            resources: vec![
                r("File", "vault", "/etc/vault-CNRY7731/key", true),
                r("File", "motd", "/etc/motd", false),
                // A sensitive resource declared at the root names nothing.
                r("Directory", "root", "/", true),
            ],
            autorequires: Vec::new(),
            boundary: Default::default(),
        };
        let sensitive = datum_engine::SensitiveOnce::new(&catalogue, datum_providers::registry());
        let warnings = vec![
            "User[w1]: useradd succeeded and said: useradd: Warning: missing or non-executable shell '/etc/vault-CNRY7731/key'".to_owned(),
            "File[vault]: useradd succeeded and said more (its output is not shown: the resource is sensitive)".to_owned(),
            "User[w2]: usermod succeeded and said: usermod: Warning: missing or non-executable shell '/bin/nope'".to_owned(),
            format!("User[w3]: said {}", "x".repeat(5_000)),
        ];
        let sent = pass_warnings(&warnings, Some(&sensitive));
        let all = sent.join("\n");
        assert!(
            !all.contains("CNRY7731") && !all.contains("File[vault]"),
            "{all}"
        );
        assert_eq!(sent[0], warnings[2]);
        assert!(
            sent[1].len() <= WARNING_KEPT + '…'.len_utf8(),
            "{}",
            sent[1].len()
        );
        assert_eq!(
            sent[2],
            "2 warning(s) naming a sensitive resource left out (read them on the host)"
        );
        assert_eq!(sent.len(), 3);
        // At most WARNINGS_KEPT, the rest counted.
        let many: Vec<String> = (0..30).map(|i| format!("User[u{i}]: said it")).collect();
        let sent = pass_warnings(&many, Some(&sensitive));
        assert_eq!(sent.len(), WARNINGS_KEPT + 1);
        assert_eq!(
            sent[WARNINGS_KEPT],
            "10 more warning(s) of the pass (read them on the host)"
        );
        assert!(pass_warnings(&[], Some(&sensitive)).is_empty());
        // Not knowing which resources are sensitive: a count only.
        assert_eq!(
            pass_warnings(&warnings, None),
            vec!["4 warning(s) of the pass, their words not sent (this pass did not read every declaration, so whether one names a sensitive resource is not known; read them on the host)".to_owned()]
        );
        assert!(pass_warnings(&[], None).is_empty());
    }

    /// The warnings are judged by the run's sensitive paths as its pass
    /// read them: a sensitive source changed between the pass and the
    /// report is not read again (read again, it would be refused as
    /// changed and every warning left out: the pass withholding by one
    /// reading and the report by another).
    #[test]
    fn the_warnings_ask_the_passs_sensitive_paths_and_read_nothing_again() {
        use datum_core::{Content, Resource, ResourceId};
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("token");
        std::fs::write(&source, "CNRY5512-hunter\n").unwrap();
        let bytes = std::fs::read(&source).unwrap();
        let content = Content::from_source(
            source.as_path(),
            datum_core::content::sha256_hex(&bytes),
            None,
            bytes.len() as u64,
        );
        let catalogue = datum_catalog::Catalogue {
            host: datum_catalog::HostIdentity::default(),
            resources: vec![Resource {
                sensitive: true,
                content: Some(content),
                ..Resource::new(
                    ResourceId::new("File", "token"),
                    serde_json::json!({ "path": "/etc/token" }),
                )
            }],
            autorequires: Vec::new(),
            boundary: Default::default(),
        };
        let sensitive = datum_engine::SensitiveOnce::new(&catalogue, datum_providers::registry());
        // The pass asked (a validator printed): the source read then.
        assert!(sensitive.paths().named_in("quoted CNRY5512-hunter"));
        std::fs::write(&source, "rotated\n").unwrap();
        let warnings = vec![
            "User[w1]: usermod said CNRY5512-hunter".to_owned(),
            "User[w2]: usermod said '/bin/nope'".to_owned(),
        ];
        assert_eq!(
            pass_warnings(&warnings, Some(&sensitive)),
            vec![
                warnings[1].clone(),
                "1 warning(s) naming a sensitive resource left out (read them on the host)"
                    .to_owned(),
            ]
        );
    }

    /// A sensitive Tree's roots reach the report only keyed: equal when the
    /// roots are, never the roots themselves, and no pair without a key.
    #[test]
    fn a_sensitive_trees_roots_are_keyed_or_left_out() {
        let (same, other) = ("a".repeat(64), "b".repeat(64));
        let provider = datum_providers::registry().lookup("Tree").unwrap();
        let mut observed = Observed::absent();
        datum_providers::tree::keep_roots(&mut observed, &same, Some(&same));
        let mut tree = Resource::new(
            datum_core::ResourceId::new("Tree", "secrets"),
            serde_json::json!({}),
        );
        let key = datum_core::DigestKey::from_bytes([7; 32]);
        let plain = tree_fingerprint(&tree, provider, &observed, Some(&key)).unwrap();
        assert_eq!(
            (plain.declared.as_str(), plain.observed.as_deref()),
            (same.as_str(), Some(same.as_str()))
        );
        tree.sensitive = true;
        let keyed = tree_fingerprint(&tree, provider, &observed, Some(&key)).unwrap();
        assert_eq!(keyed.resource, "Tree[secrets]");
        assert_eq!(keyed.declared, key.digest(&same));
        assert_eq!(keyed.observed.as_deref(), Some(keyed.declared.as_str()));
        assert!(!keyed.declared.contains(&same));
        assert!(
            keyed
                .declared
                .starts_with(datum_fleet::report::KEYED_PREFIX)
        );
        assert_eq!(
            datum_fleet::report::KEYED_PREFIX,
            datum_core::digest::KEYED_PREFIX
        );
        assert_eq!(tree_fingerprint(&tree, provider, &observed, None), None);
        datum_providers::tree::keep_roots(&mut observed, &same, Some(&other));
        let drifted = tree_fingerprint(&tree, provider, &observed, Some(&key)).unwrap();
        assert_eq!(drifted.observed, Some(key.digest(&other)));
        assert_ne!(drifted.observed.as_deref(), Some(drifted.declared.as_str()));
        // Only the declared root known: the pair says so.
        tree.sensitive = false;
        datum_providers::tree::keep_roots(&mut observed, &same, None);
        let declared_only = tree_fingerprint(&tree, provider, &observed, None).unwrap();
        assert_eq!(
            (declared_only.declared.as_str(), declared_only.observed),
            (same.as_str(), None)
        );
    }

    /// The pair is asked of the resource's kind: one without the
    /// fingerprint capability yields none, whatever its observation holds,
    /// and a Tree's observation without a pair (nothing there) none either.
    #[test]
    fn a_kind_without_fingerprints_yields_no_pair() {
        let registry = datum_providers::registry();
        let file = registry.lookup("File").unwrap();
        assert!(file.fingerprints().is_none());
        let mut observed = Observed::absent();
        datum_providers::tree::keep_roots(&mut observed, "a", Some("a"));
        let resource = Resource::new(
            datum_core::ResourceId::new("File", "motd"),
            serde_json::json!({}),
        );
        assert_eq!(tree_fingerprint(&resource, file, &observed, None), None);
        let tree = registry.lookup("Tree").unwrap();
        assert!(tree_fingerprint(&resource, tree, &observed, None).is_some());
        assert_eq!(
            tree_fingerprint(&resource, tree, &Observed::absent(), None),
            None
        );
    }

    #[test]
    fn messages_are_signed_without_the_host_or_its_root() {
        let a = host_free(
            "validation failed (nginx on web-03, exit 1)\nnginx: [emerg] in /tmp/r3/etc/nginx/x.conf",
            "web-03",
            "/tmp/r3",
        );
        let b = host_free(
            "validation failed (nginx on alpha, exit 1)\nnginx: [emerg] in /tmp/q/etc/nginx/x.conf",
            "alpha",
            "/tmp/q/",
        );
        assert_eq!(a, b);
        assert_eq!(
            exit_status("validation failed (sshd on h, exit 255)"),
            Some(255)
        );
        assert_eq!(exit_status("no provider"), None);
    }

    /// What an apply of `resources` resources on web-1 says about itself.
    fn apply_common(resources: u64) -> Common {
        Common {
            kind: ReportKind::Apply,
            host: "web-1".into(),
            labels: BTreeMap::new(),
            revision: "stamp:ab".into(),
            catalogue: "c".into(),
            started_at: 1,
            finished_at: 2,
            duration_ms: 1000,
            exit_code: 0,
            resources,
            classes: Vec::new(),
            expected_interval_s: 600,
        }
    }

    /// A trusting apply's report says how many it did not read; a reading
    /// one's report has no such key at all (an older server, which refuses
    /// fields it does not know, still takes it).
    #[test]
    fn an_apply_report_says_whether_it_trusted_metadata() {
        let common = apply_common(3);
        let report = |trusted| {
            let summary = datum_engine::PassSummary {
                trusted_by_metadata: trusted,
                ..Default::default()
            };
            apply_report(&common, &summary, &[], BTreeMap::new(), "/")
        };
        let reading = serde_json::to_value(report(None)).unwrap();
        assert!(reading.get("trusted_by_metadata").is_none(), "{reading}");
        for n in [0, 3] {
            let trusting = report(Some(n));
            assert_eq!(trusting.trusted_by_metadata, Some(n));
            let json = serde_json::to_string(&trusting).unwrap();
            let back: Report = serde_json::from_str(&json).unwrap();
            assert_eq!(back.trusted_by_metadata, Some(n), "{json}");
        }
    }

    /// What a person's quarantine holds back is not a failure of the host
    /// (its report lists the quarantine); what a failure blocks is.
    #[test]
    fn a_quarantine_and_what_it_holds_back_are_not_failures() {
        use datum_core::{Action, Origin, ResourceId};
        use datum_engine::ResourceReport;
        let common = apply_common(4);
        let id = |name: &str| ResourceId::new("File", name);
        let one = |name: &str, outcome: Outcome| ResourceReport {
            id: id(name),
            origin: Origin::default(),
            target: None,
            action: Action::None,
            diff: Default::default(),
            outcome,
            sensitive: false,
            detail: None,
            withheld: None,
            duration_ms: 0,
        };
        let mut summary = datum_engine::PassSummary {
            resources: vec![
                one("held", Outcome::Blocked { by: id("held") }),
                one("inside", Outcome::Blocked { by: id("held") }),
                one(
                    "bad",
                    Outcome::Failed {
                        phase: datum_core::Phase::Apply,
                        reason: "validation failed".into(),
                    },
                ),
                one("after-bad", Outcome::Blocked { by: id("bad") }),
            ],
            ..Default::default()
        };
        summary.quarantined.insert(id("held"));
        assert!(summary.any_failed());
        let report = apply_report(&common, &summary, &[], BTreeMap::new(), "/");
        let failed: Vec<&str> = report
            .failures
            .iter()
            .map(|f| f.resource.as_str())
            .collect();
        assert_eq!(failed, ["File[bad]", "File[after-bad]"]);

        summary.resources.truncate(2);
        assert!(!summary.any_failed());
        let report = apply_report(&common, &summary, &[], BTreeMap::new(), "/");
        assert!(report.failures.is_empty(), "{:?}", report.failures);
    }

    /// An apply of the whole catalogue names what it did not verify: a
    /// failed resource, one it blocked, one a quarantine held, one the pass
    /// never reached (absent), and one reported twice, once failed; the
    /// unchanged and changed ones are verified. A pass that trusted
    /// metadata claims nothing, nor one past the bound.
    #[test]
    fn an_apply_names_the_resources_it_did_not_verify() {
        use datum_core::{Action, Intent, Origin, ResourceId};
        use datum_engine::ResourceReport;
        let id = |name: &str| ResourceId::new("File", name);
        let one = |name: &str, outcome: Outcome| ResourceReport {
            id: id(name),
            origin: Origin::default(),
            target: None,
            action: Action::None,
            diff: Default::default(),
            outcome,
            sensitive: false,
            detail: None,
            withheld: None,
            duration_ms: 0,
        };
        let failed = || Outcome::Failed {
            phase: datum_core::Phase::Apply,
            reason: "validation failed".into(),
        };
        let declared = |names: &[&str]| -> Vec<Resource> {
            names
                .iter()
                .map(|n| Resource::new(id(n), serde_json::json!({ "path": format!("/{n}") })))
                .collect()
        };
        let mut summary = datum_engine::PassSummary {
            resources: vec![
                one("same", Outcome::Unchanged),
                one(
                    "made",
                    Outcome::Changed {
                        intent: Intent::Corrective,
                    },
                ),
                one("bad", failed()),
                one("after-bad", Outcome::Blocked { by: id("bad") }),
                one("held", Outcome::Blocked { by: id("held") }),
                one("twice", Outcome::Unchanged),
                one("twice", failed()),
            ],
            ..Default::default()
        };
        summary.quarantined.insert(id("held"));
        let resources = declared(&["same", "made", "bad", "after-bad", "held", "twice", "never"]);
        assert_eq!(
            verified_except(&summary, &resources),
            Some(
                [
                    "File[after-bad]",
                    "File[bad]",
                    "File[held]",
                    "File[never]",
                    "File[twice]"
                ]
                .map(String::from)
                .to_vec()
            )
        );
        summary.trusted_by_metadata = Some(0);
        assert!(verified_except(&summary, &resources).is_some());
        summary.trusted_by_metadata = Some(1);
        assert_eq!(verified_except(&summary, &resources), None, "trusted");
        summary.trusted_by_metadata = None;
        let names: Vec<String> = (0..=datum_fleet::report::VERIFIED_EXCEPT_KEPT)
            .map(|i| format!("x{i}"))
            .collect();
        let many = declared(&names.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(
            verified_except(&summary, &many[1..]).map(|v| v.len()),
            Some(1000)
        );
        assert_eq!(verified_except(&summary, &many), None, "past the bound");
    }
}
