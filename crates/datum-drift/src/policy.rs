//! The decisions behind the reconciliation policies, kept pure so they are
//! tested without a host: what each policy does about one drifted resource
//! ([`decide`]: report, revert with flap detection, accept, quarantine, and
//! the words the report says), which resources a quarantine excludes from apply,
//! when a resource that keeps drifting back stops being reverted (flap
//! detection), and the patch that lets a declaration follow an accepted
//! change.
//!
//! Must not: change the host or the store (the `datum` binary does, through
//! the engine and `datum_store`).

use std::collections::HashSet;
use std::time::Duration;

use datum_core::{Quarantine, QuarantineTarget, ResourceId};

use crate::check::Handling;
use crate::classes::{ClassSpec, Policy, Scope};

/// Where a drifted resource stands before its class's policy is applied
/// (read from the store by the caller). For a `quarantine` policy whose
/// class quarantines the host, both say where the host stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    /// A person quarantined it, or the whole host (break-glass: never
    /// reverted).
    pub person_quarantined: bool,
    /// A policy or flap detection quarantined it.
    pub quarantined: bool,
}

/// What one class's policy does about one drifted resource. `would` is a
/// `datum check` (describe only); otherwise the caller carries it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Report only.
    Report,
    /// A quarantine keeps it as it is (`person`: a person's break-glass).
    Quarantined { person: bool },
    /// Revert it through the engine.
    Revert { would: bool },
    /// It drifted back too often within the window: leave it this time.
    BackOff {
        would: bool,
        reverts: u64,
        window: Duration,
    },
    /// Still drifting after the back-off: quarantine it as flapping, with
    /// [`Decision::flapping_reason`].
    Escalate { would: bool },
    /// Accept the observation and write a patch for the repository.
    Accept { would: bool },
    /// An `accept` class's resource a person quarantined (it or the host):
    /// what changes under break-glass stays theirs to look at, never taken
    /// as the new normal, and is reported after the release.
    AcceptHeld,
    /// Quarantine the resource (or the host).
    Quarantine { would: bool, host: bool },
    /// A `quarantine` policy's resource (or host, `host`) is quarantined
    /// already (`person`: by a person): nothing more to do, and the
    /// quarantine keeps its reason and time.
    Held { person: bool, host: bool },
}

impl Decision {
    /// The report's action word for a decision that does not depend on the
    /// act's outcome (`None` for an accept or a revert carried out: their
    /// word comes from what happened).
    pub fn word(&self) -> Option<String> {
        Some(match self {
            Decision::Report => "reported".to_owned(),
            Decision::Quarantined { person: true } => {
                "not reverted: quarantined by a person".to_owned()
            }
            Decision::Quarantined { person: false } => "not reverted: quarantined".to_owned(),
            Decision::Revert { would: true } => "would revert".to_owned(),
            Decision::Revert { would: false } => "reverting".to_owned(),
            Decision::BackOff {
                would,
                reverts,
                window,
            } => format!(
                "{} reverted {reverts} times within {}",
                if *would {
                    "would back off:"
                } else {
                    "backed off:"
                },
                humantime::format_duration(*window)
            ),
            Decision::Escalate { would: true } => "would quarantine: flapping".to_owned(),
            Decision::Escalate { would: false } => "quarantined: flapping".to_owned(),
            Decision::Accept { would: true } => "would accept".to_owned(),
            Decision::Accept { would: false } => return None,
            Decision::AcceptHeld => "not accepted: quarantined by a person".to_owned(),
            Decision::Quarantine { would: true, host } => {
                if *host {
                    "would quarantine the host".to_owned()
                } else {
                    "would quarantine".to_owned()
                }
            }
            Decision::Quarantine { would: false, .. } => "quarantined".to_owned(),
            Decision::Held { person, host } => format!(
                "{} quarantined{}",
                if *host { "host already" } else { "already" },
                if *person { " by a person" } else { "" }
            ),
        })
    }

    /// What the decision comes to when its act is not still to be done
    /// (an accept or a revert carried out is what happened to it, which
    /// the caller knows): a quarantine made, kept or a person's is
    /// [`Handling::Quarantined`]; what is only said or left is open.
    pub fn handling(&self) -> Handling {
        match self {
            Decision::Quarantined { .. }
            | Decision::AcceptHeld
            | Decision::Escalate { would: false }
            | Decision::Quarantine { would: false, .. }
            | Decision::Held { .. } => Handling::Quarantined,
            Decision::Report
            | Decision::Revert { .. }
            | Decision::BackOff { .. }
            | Decision::Escalate { would: true }
            | Decision::Accept { .. }
            | Decision::Quarantine { would: true, .. } => Handling::Open,
        }
    }

    /// The reason an escalation quarantines with (shown after the source
    /// word, "flapping: drifted again ...", so it does not repeat it). Every
    /// revert that went through and every back-off is logged (a failed revert
    /// is not), so the reverts done are the limit (the one after it backed
    /// off).
    pub fn flapping_reason(spec: &ClassSpec) -> String {
        format!(
            "drifted again after {} revert{} within {}",
            spec.flap_limit,
            if spec.flap_limit == 1 { "" } else { "s" },
            humantime::format_duration(spec.flap_window)
        )
    }
}

/// The decision of `policy` (the class's, or the `on_change_by` rule's) for
/// one drifted resource of `spec`'s class. `look`: a `datum check`, which
/// decides without acting. `reverts` is called only for a `revert` policy on
/// a resource no quarantine holds: it gives the reverts within the class's
/// flap window, this one included (counted, not recorded: a reconcile logs
/// a back-off or an escalation at once and a revert once it went through,
/// since a revert that failed changed nothing and is no sign of flapping).
pub fn decide<E>(
    policy: Policy,
    spec: &ClassSpec,
    look: bool,
    standing: Standing,
    reverts: impl FnOnce() -> Result<u64, E>,
) -> Result<Decision, E> {
    Ok(match policy {
        Policy::Report => Decision::Report,
        Policy::Revert if standing.person_quarantined => Decision::Quarantined { person: true },
        Policy::Revert if standing.quarantined => Decision::Quarantined { person: false },
        Policy::Revert => {
            let count = reverts()?;
            match flap_decision(count, spec.flap_limit) {
                FlapDecision::Revert => Decision::Revert { would: look },
                FlapDecision::BackOff => Decision::BackOff {
                    would: look,
                    reverts: count - 1,
                    window: spec.flap_window,
                },
                FlapDecision::Escalate => Decision::Escalate { would: look },
            }
        }
        Policy::Accept if standing.person_quarantined => Decision::AcceptHeld,
        Policy::Accept => Decision::Accept { would: look },
        Policy::Quarantine if standing.person_quarantined || standing.quarantined => {
            Decision::Held {
                person: standing.person_quarantined,
                host: spec.scope == Scope::Host,
            }
        }
        Policy::Quarantine => Decision::Quarantine {
            would: look,
            host: spec.scope == Scope::Host,
        },
    })
}

/// The resources an apply must skip: every quarantined resource, and all of
/// them when the host itself is quarantined.
pub fn skip_set<'a>(
    quarantines: &[Quarantine],
    resources: impl IntoIterator<Item = &'a ResourceId>,
) -> HashSet<ResourceId> {
    let host = quarantines
        .iter()
        .any(|q| q.target == QuarantineTarget::Host);
    let named: HashSet<&ResourceId> = quarantines
        .iter()
        .filter_map(|q| match &q.target {
            QuarantineTarget::Resource(id) => Some(id),
            QuarantineTarget::Host => None,
        })
        .collect();
    resources
        .into_iter()
        .filter(|id| host || named.contains(id))
        .cloned()
        .collect()
}

/// What to do with a drifted resource of a `revert` class, given how many
/// reverts (this one included) fell within the class's flap window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlapDecision {
    /// Revert it.
    Revert,
    /// It drifted back `limit` times already: leave it as it is this time and
    /// report it (something on the host keeps rewriting it).
    BackOff,
    /// Still drifting after the back-off: quarantine it for a person.
    Escalate,
}

/// `count` reverts (this attempt included) within the window; `limit` from
/// the class (`flap_limit`, default 3).
pub fn flap_decision(count: u64, limit: u64) -> FlapDecision {
    if count <= limit {
        FlapDecision::Revert
    } else if count == limit + 1 {
        FlapDecision::BackOff
    } else {
        FlapDecision::Escalate
    }
}

/// A unified diff that turns `declared` into `observed`, with the
/// repository-relative `path` in both headers (`a/` and `b/` prefixes, for
/// `git apply` or `patch -p1`). `None` when either side is not text.
pub fn content_patch(path: &str, declared: &[u8], observed: &[u8]) -> Option<String> {
    let before = std::str::from_utf8(declared).ok()?;
    let after = std::str::from_utf8(observed).ok()?;
    Some(
        similar::TextDiff::configure()
            .timeout(datum_core::diff::TEXT_DIFF_TIMEOUT)
            .diff_lines(before, after)
            .unified_diff()
            .context_radius(3)
            .header(&format!("a/{path}"), &format!("b/{path}"))
            .to_string(),
    )
}

/// A file name for a resource's patch: `File-motd.patch` (anything but
/// letters, digits, `.`, `_` and `-` becomes `_`).
pub fn patch_file_name(id: &ResourceId, extension: &str) -> String {
    let safe: String = format!("{}-{}", id.kind, id.name)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{safe}.{extension}")
}

#[cfg(test)]
mod tests {
    use datum_core::QuarantineSource;

    use super::*;

    #[test]
    fn a_patch_between_texts_with_nothing_in_common_is_made_in_time() {
        // Myers' search is quadratic when two texts share no line: 20,000
        // lines a side took 43 s (a managed file may have 8 MiB), in a
        // check or the agent. Past the timeout the patch is longer than
        // the shortest, never wrong.
        let old: String = (0..20_000).map(|i| format!("a{i}\n")).collect();
        let new: String = (0..20_000).map(|i| format!("b{i}\n")).collect();
        let started = std::time::Instant::now();
        let patch = content_patch("etc/big", old.as_bytes(), new.as_bytes()).unwrap();
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        let removed = patch.lines().filter(|l| l.starts_with("-a")).count();
        let added = patch.lines().filter(|l| l.starts_with("+b")).count();
        assert_eq!((removed, added), (20_000, 20_000));
    }

    fn q(target: QuarantineTarget) -> Quarantine {
        Quarantine {
            target,
            reason: "r".into(),
            source: QuarantineSource::Person,
            since: 0,
        }
    }

    #[test]
    fn skip_set_names_quarantined_resources_or_all_for_the_host() {
        let a = ResourceId::new("File", "a");
        let b = ResourceId::new("File", "b");
        let one = skip_set(&[q(QuarantineTarget::Resource(a.clone()))], [&a, &b]);
        assert_eq!(one, HashSet::from([a.clone()]));
        let all = skip_set(&[q(QuarantineTarget::Host)], [&a, &b]);
        assert_eq!(all.len(), 2);
        assert!(skip_set(&[], [&a]).is_empty());
    }

    fn spec(policy: Policy) -> ClassSpec {
        let mut spec = ClassSpec::default_named("critical");
        spec.policy = policy;
        spec.flap_limit = 2;
        spec.flap_window = Duration::from_secs(3600);
        spec
    }

    const FREE: Standing = Standing {
        person_quarantined: false,
        quarantined: false,
    };

    fn decided(policy: Policy, look: bool, standing: Standing, count: u64) -> Decision {
        let spec = spec(policy);
        decide::<()>(policy, &spec, look, standing, || Ok(count)).unwrap()
    }

    #[test]
    fn report_only_reports_whatever_the_standing() {
        for look in [true, false] {
            let d = decided(Policy::Report, look, FREE, 99);
            assert_eq!(d, Decision::Report);
            assert_eq!(d.word().as_deref(), Some("reported"));
        }
    }

    #[test]
    fn revert_reverts_then_backs_off_then_escalates() {
        let d = decided(Policy::Revert, false, FREE, 1);
        assert_eq!(d, Decision::Revert { would: false });
        assert_eq!(d.word().as_deref(), Some("reverting"));
        assert_eq!(
            decided(Policy::Revert, true, FREE, 2).word().as_deref(),
            Some("would revert")
        );
        let d = decided(Policy::Revert, false, FREE, 3);
        assert_eq!(
            d.word().as_deref(),
            Some("backed off: reverted 2 times within 1h")
        );
        assert_eq!(
            decided(Policy::Revert, true, FREE, 3).word().as_deref(),
            Some("would back off: reverted 2 times within 1h")
        );
        let d = decided(Policy::Revert, false, FREE, 4);
        assert_eq!(d, Decision::Escalate { would: false });
        assert_eq!(d.word().as_deref(), Some("quarantined: flapping"));
        assert_eq!(
            Decision::flapping_reason(&spec(Policy::Revert)),
            "drifted again after 2 reverts within 1h"
        );
    }

    #[test]
    fn accept_takes_nothing_a_person_quarantined_as_the_new_normal() {
        let person = Standing {
            person_quarantined: true,
            quarantined: false,
        };
        for look in [true, false] {
            let d = decided(Policy::Accept, look, person, 0);
            assert_eq!(d, Decision::AcceptHeld);
            assert_eq!(
                d.word().as_deref(),
                Some("not accepted: quarantined by a person")
            );
            assert_eq!(d.handling(), Handling::Quarantined);
            assert_eq!(
                decided(Policy::Accept, look, FREE, 0),
                Decision::Accept { would: look }
            );
        }
    }

    #[test]
    fn revert_never_touches_what_a_quarantine_holds_and_counts_no_revert() {
        let person = Standing {
            person_quarantined: true,
            quarantined: true,
        };
        let spec = spec(Policy::Revert);
        let d = decide::<()>(Policy::Revert, &spec, false, person, || {
            panic!("a quarantined resource must not count a revert")
        })
        .unwrap();
        assert_eq!(
            d.word().as_deref(),
            Some("not reverted: quarantined by a person")
        );
        let policy = Standing {
            person_quarantined: false,
            quarantined: true,
        };
        let d = decide::<()>(Policy::Revert, &spec, false, policy, || {
            panic!("a quarantined resource must not count a revert")
        })
        .unwrap();
        assert_eq!(d.word().as_deref(), Some("not reverted: quarantined"));
    }

    #[test]
    fn a_failed_revert_count_is_an_error_not_a_decision() {
        let spec = spec(Policy::Revert);
        assert_eq!(
            decide(Policy::Revert, &spec, false, FREE, || Err("store")),
            Err("store")
        );
    }

    #[test]
    fn accept_is_described_by_check_and_carried_out_by_reconcile() {
        let d = decided(Policy::Accept, true, FREE, 0);
        assert_eq!(d.word().as_deref(), Some("would accept"));
        // The word of a carried-out accept names its patch: the caller's.
        assert_eq!(decided(Policy::Accept, false, FREE, 0).word(), None);
    }

    #[test]
    fn quarantine_takes_the_resource_or_the_host() {
        assert_eq!(
            decided(Policy::Quarantine, true, FREE, 0).word().as_deref(),
            Some("would quarantine")
        );
        let mut host = spec(Policy::Quarantine);
        host.scope = Scope::Host;
        let d = decide::<()>(Policy::Quarantine, &host, true, FREE, || Ok(0)).unwrap();
        assert_eq!(d.word().as_deref(), Some("would quarantine the host"));
        let d = decide::<()>(Policy::Quarantine, &host, false, FREE, || Ok(0)).unwrap();
        assert_eq!(
            d,
            Decision::Quarantine {
                would: false,
                host: true
            }
        );
        assert_eq!(d.word().as_deref(), Some("quarantined"));
    }

    #[test]
    fn a_quarantine_already_there_is_held_not_quarantined_again() {
        let held = Standing {
            person_quarantined: false,
            quarantined: true,
        };
        for look in [true, false] {
            let d = decided(Policy::Quarantine, look, held, 0);
            assert_eq!(
                d,
                Decision::Held {
                    person: false,
                    host: false
                }
            );
            assert_eq!(d.word().as_deref(), Some("already quarantined"));
        }
        let person = Standing {
            person_quarantined: true,
            quarantined: false,
        };
        let mut host = spec(Policy::Quarantine);
        host.scope = Scope::Host;
        let d = decide::<()>(Policy::Quarantine, &host, true, person, || Ok(0)).unwrap();
        assert_eq!(
            d.word().as_deref(),
            Some("host already quarantined by a person")
        );
    }

    #[test]
    fn flapping_backs_off_then_escalates() {
        assert_eq!(flap_decision(1, 3), FlapDecision::Revert);
        assert_eq!(flap_decision(3, 3), FlapDecision::Revert);
        assert_eq!(flap_decision(4, 3), FlapDecision::BackOff);
        assert_eq!(flap_decision(5, 3), FlapDecision::Escalate);
    }

    #[test]
    fn patch_applies_to_the_declared_side() {
        let p = content_patch("base/files/motd", b"hello\n", b"hello\nworld\n").unwrap();
        assert!(p.starts_with("--- a/base/files/motd\n+++ b/base/files/motd\n"));
        assert!(p.contains("+world"));
        assert!(content_patch("x", &[0xff], b"a").is_none());
        assert_eq!(
            patch_file_name(&ResourceId::new("File", "a/b c"), "patch"),
            "File-a_b_c.patch"
        );
    }

    /// A quarantine made, kept or a person's is counted as quarantined
    /// whatever its words; an act only said, or left, is still drifted.
    #[test]
    fn what_each_decision_comes_to() {
        let window = Duration::from_secs(3600);
        for (decision, handling) in [
            (Decision::Report, Handling::Open),
            (
                Decision::Quarantined { person: true },
                Handling::Quarantined,
            ),
            (
                Decision::Quarantined { person: false },
                Handling::Quarantined,
            ),
            (Decision::Revert { would: true }, Handling::Open),
            (
                Decision::BackOff {
                    would: false,
                    reverts: 4,
                    window,
                },
                Handling::Open,
            ),
            (Decision::Escalate { would: true }, Handling::Open),
            (Decision::Escalate { would: false }, Handling::Quarantined),
            (Decision::Accept { would: true }, Handling::Open),
            (
                Decision::Quarantine {
                    would: true,
                    host: true,
                },
                Handling::Open,
            ),
            (
                Decision::Quarantine {
                    would: false,
                    host: false,
                },
                Handling::Quarantined,
            ),
            (
                Decision::Held {
                    person: true,
                    host: true,
                },
                Handling::Quarantined,
            ),
        ] {
            assert_eq!(decision.handling(), handling, "{decision:?}");
        }
    }
}
