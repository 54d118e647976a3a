//! A pass over part of a catalogue, and a pass that must see what an earlier
//! plan saw.
//!
//! - `only`: the resources the pass visits (`--target` with its requirements,
//!   `--class` with theirs); the rest of the catalogue is not observed, not
//!   planned and not reported. The whole catalogue still tells which services
//!   a changed file notifies: a reload it calls for is owed (durably) and
//!   performed after the selection's resources, even when the service is
//!   outside the selection, with nothing else of the service's declaration
//!   applied (`Notifications::activate_outside`; one not as declared is
//!   left alone, the reload owed, with a warning).
//! - `hold`: selected resources that are observed but never changed (the
//!   requirements of `--class` that are not of that class): one in sync lets
//!   its dependents run, one that is not blocks them.
//! - `expect`: the fingerprint of every selected resource's observation in
//!   a saved plan. The pass observes once, as always, and compares before
//!   anything changes: any difference and nothing is applied ([`Stale`]).
//!
//! A fingerprint is a SHA-256 over the canonical JSON of what was observed
//! (presence, fields, and the file metadata that says what is there: size,
//! mode, owner, content hash; not times or inode numbers, which a read or a
//! backup may change). Content itself is never part of an observation's
//! JSON, but its hash is: a plain fingerprint of a sensitive resource lets
//! whoever reads it confirm a guessed secret (hash the guess with the
//! guessable size, mode and owner). With `digest_key`, a sensitive
//! resource's fingerprint is the host's keyed digest of it instead, in
//! `PassSummary::observed` and in the comparison with `expect` alike.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use datum_core::{Observed, Origin, ResourceId, sha256_hex};
use serde_json::json;

/// What restricts or guards a pass (none of it, by default: a full pass).
#[derive(Debug, Clone, Default)]
pub struct PassOptions {
    /// Visit only these resources (`None`: all of them).
    pub only: Option<BTreeSet<ResourceId>>,
    /// Observe these but never change them; why, for the report.
    pub hold: HashSet<ResourceId>,
    pub hold_reason: String,
    /// The observation fingerprints a saved plan recorded, per resource
    /// (`None`: the plan could not observe it).
    pub expect: Option<BTreeMap<ResourceId, Option<String>>>,
    /// Record every observation's fingerprint in `PassSummary::observed`
    /// (a plan about to be saved). Off, a pass computes none (a saved plan
    /// being applied, `expect`, computes them anyway).
    pub fingerprints: bool,
    /// Take a resource as converged, without reading it, when its kind owns
    /// a path, that path is a regular file whose metadata (size, times,
    /// inode, device, mode, owner) equals what its last verified record
    /// holds, the record was made while the file was quiet and its
    /// declaration has not changed since (`datum plan`/`apply
    /// --trust-metadata`; the trade `datum_core::trust` describes). Never
    /// for a pass that computes fingerprints, nor for a resource whose
    /// observation a reconcile accepted: those are read.
    pub trust_metadata: bool,
    /// The host's digest key: a sensitive resource's fingerprint (recorded
    /// or compared with `expect`) is `DigestKey::digest` of the plain one,
    /// which nobody without the key can test a guess against. `None`: every
    /// fingerprint is plain (the caller keeps sensitive ones to itself).
    pub digest_key: Option<datum_core::DigestKey>,
    /// The catalogue is the host's whole catalogue, as compiled from the
    /// repository (`datum apply`): a pass that visits all of it forgets the
    /// verified records of resources it does not declare (renamed or
    /// removed). False (the default): it may be a part of it (a revert's
    /// catalogue of the resources it reverts), and a record of a resource
    /// it does not hold is left as it is; forgetting it would make that
    /// resource read as never applied (`not_converged`), on which no policy
    /// acts, until the next apply.
    pub whole_catalogue: bool,
}

impl PassOptions {
    pub(crate) fn selects(&self, id: &ResourceId) -> bool {
        self.only.as_ref().is_none_or(|only| only.contains(id))
    }
}

/// A saved plan no longer matches the host: what differs, per resource.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} resource(s) changed since the plan was made: {}", .changed.len(), describe(.changed))]
pub struct Stale {
    /// `(resource, what happened)`, in catalogue order.
    pub changed: Vec<(ResourceId, String)>,
}

/// Resources of one kind that manage one object on the host under
/// different names (a Service's unit and an alias of it, one `Id` to
/// systemd): each pass would act on it twice, as two declarations. The
/// pass changes nothing; the catalogue cannot see it (the names differ
/// until the host resolves them).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", describe_shared(.shared))]
pub struct Shared {
    /// `(the object, the resources managing it with where each is
    /// declared)`, in catalogue order.
    pub shared: Vec<(String, Vec<(ResourceId, Origin)>)>,
}

fn describe_shared(shared: &[(String, Vec<(ResourceId, Origin)>)]) -> String {
    shared
        .iter()
        .map(|(object, ids)| {
            let names: Vec<String> = ids
                .iter()
                .map(|(id, origin)| format!("{id} ({origin})"))
                .collect();
            format!(
                "{} manage one {object} on this host (its name and another name of it): declare it once",
                names.join(" and ")
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why a pass changed nothing and reported no resource.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// A saved plan no longer matches the host.
    #[error(transparent)]
    Stale(#[from] Stale),
    /// Two resources manage one object (see [`Shared`]).
    #[error(transparent)]
    Shared(#[from] Shared),
}

fn describe(changed: &[(ResourceId, String)]) -> String {
    changed
        .iter()
        .map(|(id, why)| format!("{id} ({why})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The fingerprint of one observation (see the module header): plain, or
/// for a `sensitive` resource keyed with `key` when there is one.
pub(crate) fn sealed_fingerprint(
    observed: &Observed,
    sensitive: bool,
    key: Option<&datum_core::DigestKey>,
) -> String {
    let plain = fingerprint(observed);
    match key {
        Some(key) if sensitive => key.digest(&plain),
        _ => plain,
    }
}

/// The plain fingerprint of one observation (see the module header).
pub(crate) fn fingerprint(observed: &Observed) -> String {
    let meta = observed.meta.as_ref().map(|m| {
        json!({
            "size": m.size,
            "mode": m.mode,
            "uid": m.uid,
            "gid": m.gid,
            "sha256": m.sha256,
        })
    });
    let value = json!({
        "presence": observed.presence,
        "fields": observed.fields,
        "meta": meta,
    });
    sha256_hex(datum_catalog::catalogue::canonical_json(&value).as_bytes())
}

/// Compares what this pass observed with what the plan recorded.
pub(crate) fn compare(
    observed: &[(ResourceId, Option<String>)],
    expected: &BTreeMap<ResourceId, Option<String>>,
) -> Result<(), Stale> {
    let mut changed = Vec::new();
    for (id, now) in observed {
        match expected.get(id) {
            None => changed.push((id.clone(), "not in the plan".to_owned())),
            Some(then) if then != now => {
                let why = match (then, now) {
                    (Some(_), None) => "can no longer be observed",
                    (None, Some(_)) => "could not be observed when planned",
                    _ => "what is on the host changed",
                };
                changed.push((id.clone(), why.to_owned()));
            }
            Some(_) => {}
        }
    }
    let seen: HashSet<&ResourceId> = observed.iter().map(|(id, _)| id).collect();
    for id in expected.keys().filter(|id| !seen.contains(id)) {
        changed.push((id.clone(), "planned, but not in this pass".to_owned()));
    }
    if changed.is_empty() {
        Ok(())
    } else {
        Err(Stale { changed })
    }
}

#[cfg(test)]
mod tests {
    use datum_core::{FileMeta, Presence};

    use super::*;

    fn file(sha: &str, mode: u32, mtime: i64) -> Observed {
        Observed {
            presence: Presence::Present,
            fields: BTreeMap::from([("content_sha256".to_owned(), json!(sha))]),
            content: Some(b"secret bytes".to_vec()),
            meta: Some(FileMeta {
                size: 12,
                mtime_ns: mtime,
                mode,
                sha256: Some(sha.to_owned()),
                ..FileMeta::default()
            }),
        }
    }

    #[test]
    fn the_fingerprint_follows_content_and_metadata_but_not_times() {
        let base = fingerprint(&file("aa", 0o644, 1));
        assert_eq!(base, fingerprint(&file("aa", 0o644, 99)));
        assert_ne!(base, fingerprint(&file("ab", 0o644, 1)));
        assert_ne!(base, fingerprint(&file("aa", 0o600, 1)));
        assert_ne!(base, fingerprint(&Observed::absent()));
        // The bytes read for a diff are not part of it.
        let mut other = file("aa", 0o644, 1);
        other.content = Some(b"other".to_vec());
        assert_eq!(base, fingerprint(&other));
    }

    /// A sensitive resource's fingerprint is keyed when there is a key;
    /// any other is the plain one.
    #[test]
    fn a_sensitive_fingerprint_is_keyed() {
        let observed = file("aa", 0o600, 1);
        let plain = fingerprint(&observed);
        let key = datum_core::DigestKey::from_bytes([7; 32]);
        assert_eq!(sealed_fingerprint(&observed, false, Some(&key)), plain);
        assert_eq!(sealed_fingerprint(&observed, true, None), plain);
        let sealed = sealed_fingerprint(&observed, true, Some(&key));
        assert_eq!(sealed, key.digest(&plain));
        assert!(!sealed.contains(&plain));
    }

    #[test]
    fn a_pass_visits_the_selection_holds_what_it_must_and_refuses_a_stale_plan() {
        use datum_catalog::Catalogue;
        use datum_core::Resource;

        use crate::{Mode, PassContext, SilentReporter, run_pass_with};

        let root = tempfile::tempdir().unwrap();
        let host = datum_host::Host::new(root.path().to_path_buf());
        let id = |name: &str| ResourceId::new("File", name);
        let file = |name: &str, requires: &[&str]| Resource {
            requires: requires.iter().map(|r| id(r)).collect(),
            ..Resource::new(
                id(name),
                json!({"path": format!("/{name}"), "content": format!("{name}\n")}),
            )
        };
        let catalogue = Catalogue {
            host: Default::default(),
            resources: vec![file("a", &[]), file("b", &["a"]), file("c", &[])],
            autorequires: Vec::new(),
            boundary: Default::default(),
        };
        let mut ctx = PassContext {
            registry: datum_providers::registry(),
            host: &host,
            mode: Mode::Apply,
            store: None,
            backups: None,
            now: 0,
            skip: HashSet::new(),
            sensitive: None,
        };
        let mut run = |options: &PassOptions| {
            run_pass_with(&catalogue, &mut ctx, &mut SilentReporter, options)
        };
        let outcomes = |summary: &crate::PassSummary| -> Vec<(String, String)> {
            summary
                .resources
                .iter()
                .map(|r| (r.id.name.clone(), r.outcome.word().to_owned()))
                .collect()
        };
        // b and what it requires; a is held and not in sync, so b waits.
        let held = PassOptions {
            only: Some(BTreeSet::from([id("a"), id("b")])),
            hold: HashSet::from([id("a")]),
            hold_reason: "outside the class".to_owned(),
            ..PassOptions::default()
        };
        let summary = run(&held).unwrap();
        assert_eq!(
            outcomes(&summary),
            [
                ("a".into(), "blocked".into()),
                ("b".into(), "blocked".into())
            ]
        );
        assert_eq!(
            summary.resources[0].detail.as_deref(),
            Some("outside the class: not applied")
        );
        assert!(!root.path().join("a").exists() && !root.path().join("b").exists());

        // A plan of c records what it observed; applying it with another
        // fingerprint changes nothing, with the right one it applies.
        let only_c = PassOptions {
            only: Some(BTreeSet::from([id("c")])),
            fingerprints: true,
            ..PassOptions::default()
        };
        let observed = run(&only_c).map(|s| s.observed.clone());
        // A pass that saves no plan computes no fingerprint.
        let unsaved = PassOptions {
            fingerprints: false,
            ..only_c.clone()
        };
        assert!(run(&unsaved).unwrap().observed.is_empty());
        // (That was an apply: undo it to plan from the same state again.)
        std::fs::remove_file(root.path().join("c")).unwrap();
        let mut expected: BTreeMap<ResourceId, Option<String>> =
            observed.unwrap().into_iter().collect();
        let stale = PassOptions {
            expect: Some(BTreeMap::from([(id("c"), Some("0".repeat(64)))])),
            ..only_c.clone()
        };
        let Err(Refused::Stale(err)) = run(&stale) else {
            panic!("not stale")
        };
        assert_eq!(
            err.changed,
            [(id("c"), "what is on the host changed".to_owned())]
        );
        assert!(!root.path().join("c").exists());
        let fresh = PassOptions {
            expect: Some(std::mem::take(&mut expected)),
            ..only_c
        };
        let summary = run(&fresh).unwrap();
        assert_eq!(outcomes(&summary), [("c".into(), "changed".into())]);
        assert_eq!(std::fs::read(root.path().join("c")).unwrap(), b"c\n");
    }

    #[test]
    fn compare_names_every_resource_that_differs() {
        let a = ResourceId::new("File", "a");
        let b = ResourceId::new("File", "b");
        let c = ResourceId::new("File", "c");
        let expected = BTreeMap::from([
            (a.clone(), Some("1".to_owned())),
            (b.clone(), Some("2".to_owned())),
        ]);
        assert_eq!(
            compare(
                &[(a.clone(), Some("1".into())), (b.clone(), Some("2".into()))],
                &expected
            ),
            Ok(())
        );
        let err = compare(
            &[(a.clone(), Some("9".into())), (c.clone(), Some("3".into()))],
            &expected,
        )
        .unwrap_err();
        assert_eq!(
            err.changed,
            [
                (a, "what is on the host changed".to_owned()),
                (c, "not in the plan".to_owned()),
                (b, "planned, but not in this pass".to_owned()),
            ]
        );
    }
}
