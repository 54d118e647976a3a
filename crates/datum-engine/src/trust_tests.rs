//! A pass asked to trust metadata (`datum plan`/`apply --trust-metadata`):
//! a file its verified record vouches for is taken as converged without
//! being read; everything else is read as in any pass. A real `File` kind
//! on a temporary root, a real state store, the pass's clock injected.

use std::collections::HashSet;
use std::time::{SystemTime, UNIX_EPOCH};

use datum_catalog::Catalogue;
use datum_core::{Content, FileMeta, Outcome, Resource, ResourceId};
use datum_host::Host;
use datum_providers::Registry;
use datum_providers::file::FileProvider;
use datum_store::Store;
use serde_json::json;

use crate::{Mode, PassContext, PassOptions, PassSummary, SilentReporter, run_pass_with};

fn file(name: &str, content: &str) -> Resource {
    let mut r = Resource {
        content: Some(Content::new(content.as_bytes().to_vec())),
        ..Resource::new(
            ResourceId::new("File", name),
            json!({ "path": format!("/etc/{name}"), "mode": "0640" }),
        )
    };
    // What the catalogue computes; any text that changes with the
    // declaration will do here.
    r.declaration_hash = datum_core::sha256_hex(format!("{name}:{content}").as_bytes());
    r
}

fn pass(
    mode: Mode,
    now: i64,
    host: &Host,
    catalogue: &Catalogue,
    store: &mut Store,
    options: &PassOptions,
) -> PassSummary {
    let registry = Registry::new(vec![Box::new(FileProvider)]);
    let mut ctx = PassContext {
        registry: &registry,
        host,
        mode,
        store: Some(store),
        backups: None,
        now,
        skip: HashSet::new(),
        sensitive: None,
    };
    run_pass_with(catalogue, &mut ctx, &mut SilentReporter, options).unwrap()
}

fn outcome(summary: &PassSummary, name: &str) -> Outcome {
    summary
        .resources
        .iter()
        .find(|r| r.id.name == name)
        .map(|r| r.outcome.clone())
        .unwrap()
}

fn changes(outcome: &Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Changed { .. } | Outcome::WouldChange { .. }
    )
}

/// The metadata Datum records for a file (what `lstat` gives), with `sha256`.
fn live_meta(host: &Host, name: &str, sha256: &str) -> FileMeta {
    let stat = host
        .lstat(std::path::Path::new(&format!("/etc/{name}")))
        .unwrap()
        .unwrap();
    FileMeta {
        sha256: Some(sha256.to_owned()),
        ..stat.meta
    }
}

/// A root with `/etc`, a state store, a catalogue of `resources`, and the
/// clock's current second.
struct Bed {
    root: tempfile::TempDir,
    _state: tempfile::TempDir,
    host: Host,
    store: Store,
    cat: Catalogue,
    now: i64,
}

fn bed(resources: Vec<Resource>) -> Bed {
    let root = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("etc")).unwrap();
    let cat = Catalogue {
        host: Default::default(),
        resources,
        autorequires: Vec::new(),
        boundary: Default::default(),
    };
    let host = Host::new(root.path());
    let store = Store::open(&state.path().join("state.db")).unwrap();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    Bed {
        root,
        _state: state,
        host,
        store,
        cat,
        now,
    }
}

fn trusting() -> PassOptions {
    PassOptions {
        trust_metadata: true,
        ..PassOptions::default()
    }
}

#[test]
fn a_pass_trusting_metadata_reads_only_what_no_quiet_record_vouches_for() {
    let resources = vec![file("a", "a\n"), file("b", "b\n"), file("c", "c\n")];
    let Bed {
        root,
        _state,
        host,
        mut store,
        cat,
        now,
    } = bed(resources.clone());
    let trusting = trusting();
    let reading = PassOptions::default();

    // Written now: the records are racy, so nothing is trusted yet, and
    // every file is read (and found as declared).
    let first = pass(Mode::Apply, now, &host, &cat, &mut store, &reading);
    assert!(first.resources.iter().all(|r| changes(&r.outcome)));
    let racy = pass(Mode::Apply, now, &host, &cat, &mut store, &trusting);
    assert_eq!(racy.trusted_by_metadata, Some(0));
    assert!(
        racy.resources
            .iter()
            .all(|r| r.outcome == Outcome::Unchanged)
    );
    // Ten seconds on, a pass that reads records them again, now quiet.
    pass(Mode::Apply, now + 10, &host, &cat, &mut store, &reading);

    // b: its content changed while every field its record holds stayed
    // (made here by recording its new metadata over its old hash: what the
    // trade misses by design). c: edited, so its metadata moved.
    let sha_b = datum_core::sha256_hex(b"b\n");
    std::fs::write(root.path().join("etc/b"), "B!\n").unwrap();
    std::fs::write(root.path().join("etc/c"), "edited\n").unwrap();
    let tampered = live_meta(&host, "b", &sha_b);
    store
        .record_verified(
            &resources[1].id,
            &resources[1].declaration_hash,
            Some(&tampered),
            now + 10,
        )
        .unwrap();
    store.flush().unwrap();
    let later = now + 20;

    // Trusting: a and b are converged unread, c is read and would change.
    let plan = pass(Mode::Plan, later, &host, &cat, &mut store, &trusting);
    assert_eq!(plan.trusted_by_metadata, Some(2));
    assert_eq!(outcome(&plan, "a"), Outcome::Unchanged);
    assert_eq!(outcome(&plan, "b"), Outcome::Unchanged);
    assert!(changes(&outcome(&plan, "c")));
    // Reading (the default): b's content is seen.
    let plan = pass(Mode::Plan, later, &host, &cat, &mut store, &reading);
    assert_eq!(plan.trusted_by_metadata, None);
    assert!(changes(&outcome(&plan, "b")));
    assert!(changes(&outcome(&plan, "c")));
    // A plan being saved needs every observation whole: nothing trusted.
    let saving = PassOptions {
        fingerprints: true,
        ..trusting.clone()
    };
    let plan = pass(Mode::Plan, later, &host, &cat, &mut store, &saving);
    assert_eq!(plan.trusted_by_metadata, None);
    assert!(changes(&outcome(&plan, "b")));

    // An apply trusting metadata restores c and leaves b as it found it;
    // the records it trusted are not written again.
    let before = store.last_verified(&resources[0].id).unwrap().unwrap();
    let apply = pass(Mode::Apply, later, &host, &cat, &mut store, &trusting);
    assert_eq!(apply.trusted_by_metadata, Some(2));
    assert!(changes(&outcome(&apply, "c")));
    let read = |name: &str| std::fs::read_to_string(root.path().join("etc").join(name)).unwrap();
    assert_eq!(
        (read("a"), read("b"), read("c")),
        ("a\n".into(), "B!\n".into(), "c\n".into())
    );
    assert_eq!(
        store.last_verified(&resources[0].id).unwrap().unwrap(),
        before
    );
    // A changed declaration is never vouched for by the old record (b and
    // the c just written, quiet at the injected clock, are).
    let mut redeclared = cat.clone();
    redeclared.resources[0] = file("a", "new a\n");
    let plan = pass(Mode::Plan, later, &host, &redeclared, &mut store, &trusting);
    assert_eq!(plan.trusted_by_metadata, Some(2));
    assert!(changes(&outcome(&plan, "a")));
    // The next apply that reads puts b right.
    let apply = pass(Mode::Apply, later, &host, &cat, &mut store, &reading);
    assert!(changes(&outcome(&apply, "b")));
    assert_eq!(read("b"), "b\n");
}

/// The look at a path goes through the boundary like any observation: a
/// parent folder swapped for a link to the very same files (same inodes,
/// same times: every field of their records still matches) vouches for
/// nothing, and the files behind it are not trusted.
#[test]
fn a_parent_swapped_for_a_link_is_never_trusted_through() {
    let mut b = bed(vec![file("a", "a\n"), file("b", "b\n")]);
    let now = b.now;
    // Recorded, then recorded again once quiet: trusted.
    for at in [now, now + 10] {
        pass(
            Mode::Apply,
            at,
            &b.host,
            &b.cat,
            &mut b.store,
            &PassOptions::default(),
        );
    }
    let plan = pass(
        Mode::Plan,
        now + 20,
        &b.host,
        &b.cat,
        &mut b.store,
        &trusting(),
    );
    assert_eq!(plan.trusted_by_metadata, Some(2), "trusted before the swap");

    // A rename keeps the files' inodes and times; the link leads to them.
    let root = b.root.path();
    std::fs::rename(root.join("etc"), root.join("elsewhere")).unwrap();
    std::os::unix::fs::symlink("elsewhere", root.join("etc")).unwrap();
    let fresh = Host::new(root);
    let plan = pass(
        Mode::Plan,
        now + 20,
        &fresh,
        &b.cat,
        &mut b.store,
        &trusting(),
    );
    assert_eq!(plan.trusted_by_metadata, Some(0));
    for r in &plan.resources {
        assert!(
            !matches!(r.outcome, Outcome::Unchanged),
            "{} was taken as converged through a link: {:?}",
            r.id,
            r.outcome
        );
    }
}
