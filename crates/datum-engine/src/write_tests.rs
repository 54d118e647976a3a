//! Writing many files (issue 17, see `pass`'s module header): copies staged
//! ahead on several threads, one directory fsync per folder, and the state
//! store never ahead of the disk. A real `File` kind on a temporary root.

use std::collections::HashSet;
use std::path::Path;

use datum_catalog::Catalogue;
use datum_core::{Content, Outcome, Resource, ResourceId};
use datum_host::Host;
use datum_providers::Registry;
use datum_providers::file::FileProvider;
use datum_store::Store;
use serde_json::json;

use crate::ahead::stage_ahead;
use crate::{Mode, PassContext, PassOptions, PassSummary, SilentReporter, run_pass_with};

fn file(name: &str, path: &str, content: &str) -> Resource {
    Resource {
        content: Some(Content::new(content.as_bytes().to_vec())),
        ..Resource::new(
            ResourceId::new("File", name),
            json!({ "path": path, "mode": "0640" }),
        )
    }
}

fn catalogue(resources: Vec<Resource>) -> Catalogue {
    Catalogue {
        host: Default::default(),
        resources,
        autorequires: Vec::new(),
        boundary: Default::default(),
    }
}

fn apply(host: &Host, catalogue: &Catalogue, store: Option<&mut Store>) -> PassSummary {
    apply_at(1_000, host, catalogue, store)
}

/// An apply whose pass started at `now` (Unix seconds).
fn apply_at(
    now: i64,
    host: &Host,
    catalogue: &Catalogue,
    store: Option<&mut Store>,
) -> PassSummary {
    let registry = Registry::new(vec![Box::new(FileProvider)]);
    let mut ctx = PassContext {
        registry: &registry,
        host,
        mode: Mode::Apply,
        store,
        backups: None,
        now,
        skip: HashSet::new(),
        sensitive: None,
    };
    run_pass_with(
        catalogue,
        &mut ctx,
        &mut SilentReporter,
        &PassOptions::default(),
    )
    .unwrap_or_default()
}

/// Files under `dir` (recursively) whose path contains a staging name.
fn staging_left(dir: &Path) -> Vec<String> {
    let mut left = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.to_string_lossy().contains(".datum.stage.") {
                left.push(path.display().to_string());
            } else if path.is_dir() {
                todo.push(path);
            }
        }
    }
    left
}

#[test]
fn many_new_files_cost_one_directory_fsync_per_folder() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("a")).unwrap();
    std::fs::create_dir_all(root.path().join("b")).unwrap();
    // More than one run staged ahead, in two folders.
    let in_a = stage_ahead() * 2 + 7;
    let mut resources: Vec<Resource> = (0..in_a)
        .map(|i| file(&format!("a{i}"), &format!("/a/f{i}"), &format!("a {i}\n")))
        .collect();
    resources.extend((0..5).map(|i| file(&format!("b{i}"), &format!("/b/f{i}"), "b\n")));
    let host = Host::new(root.path());
    let summary = apply(&host, &catalogue(resources), None);

    let changed = summary
        .resources
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Changed { .. }))
        .count();
    assert_eq!(changed, in_a + 5, "{:?}", summary.counts());
    for i in 0..in_a {
        let path = root.path().join(format!("a/f{i}"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("a {i}\n"));
    }
    let mode = std::fs::metadata(root.path().join("a/f0")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o640
    );
    // One fsync for /a and one for /b, at the end of the pass (no store:
    // nothing commits in between), and nothing left owed.
    assert_eq!(host.durability().dir_syncs(), 2);
    assert!(!host.durability().is_pending());
    assert!(
        staging_left(root.path()).is_empty(),
        "{:?}",
        staging_left(root.path())
    );
}

#[test]
fn the_store_records_the_files_only_once_their_folder_is_durable() {
    let root = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("etc")).unwrap();
    let resources: Vec<Resource> = (0..40)
        .map(|i| file(&format!("f{i}"), &format!("/etc/f{i}"), "x\n"))
        .collect();
    let host = Host::new(root.path());
    let path = state.path().join("state.db");
    let mut store = Store::open(&path).unwrap();
    let summary = apply(&host, &catalogue(resources.clone()), Some(&mut store));
    assert_eq!(summary.counts().get("changed"), Some(&40));
    // The pass left the store as it found it (no barrier), its records
    // committed after the one fsync of /etc.
    store.flush().unwrap();
    assert_eq!(host.durability().dir_syncs(), 1);
    assert_eq!(
        Store::open(&path).unwrap().all_verified().unwrap().len(),
        40
    );

    // A second pass changes nothing and owes no fsync.
    let again = Host::new(root.path());
    let summary = apply(&again, &catalogue(resources), Some(&mut store));
    assert_eq!(summary.counts().get("unchanged"), Some(&40));
    assert_eq!(again.durability().dir_syncs(), 0);
}

#[test]
fn a_verification_made_while_the_file_had_just_changed_is_made_again_once_it_is_quiet() {
    let root = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("etc")).unwrap();
    let host = Host::new(root.path());
    let mut store = Store::open(&state.path().join("state.db")).unwrap();
    let cat = catalogue(vec![file("f", "/etc/f", "x\n")]);
    let id = ResourceId::new("File", "f");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let verified = |store: &mut Store| store.last_verified(&id).unwrap().unwrap();

    apply_at(now, &host, &cat, Some(&mut store));
    let first = verified(&mut store);
    let meta = first.meta.clone().unwrap();
    assert!(
        !meta.quiet_at(first.verified_at),
        "written in this pass: racy"
    );
    // Unchanged, but the record could not vouch for it: recorded again.
    let summary = apply_at(now + 5, &host, &cat, Some(&mut store));
    assert_eq!(summary.counts().get("unchanged"), Some(&1));
    let second = verified(&mut store);
    assert_eq!((second.verified_at, &second.meta), (now + 5, &first.meta));
    assert!(meta.quiet_at(second.verified_at));
    // Quiet now: an identical verification is not written again.
    apply_at(now + 10, &host, &cat, Some(&mut store));
    assert_eq!(verified(&mut store).verified_at, now + 5);
}

#[test]
fn a_file_that_cannot_be_staged_ahead_is_staged_by_the_loop_and_fails_alone() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("ok")).unwrap();
    // A directory where one file should go: staging refuses it, ahead and
    // again in the loop; its neighbours are written.
    std::fs::create_dir_all(root.path().join("ok/f3/inside")).unwrap();
    let resources: Vec<Resource> = (0..8)
        .map(|i| file(&format!("f{i}"), &format!("/ok/f{i}"), "new\n"))
        .collect();
    let host = Host::new(root.path());
    let summary = apply(&host, &catalogue(resources), None);
    let failed: Vec<&str> = summary
        .resources
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Failed { .. }))
        .map(|r| r.id.name.as_str())
        .collect();
    assert_eq!(failed, ["f3"]);
    assert_eq!(summary.counts().get("changed"), Some(&7));
    assert!(root.path().join("ok/f3/inside").is_dir());
    assert!(staging_left(root.path()).is_empty());
}

/// A converged pass (the common one) stages nothing ahead and starts no
/// worker; a pass with one new file among converged ones plans that one.
#[test]
fn only_files_that_will_be_written_are_staged_ahead() {
    let root = tempfile::tempdir().unwrap();
    let host = Host::new(root.path());
    let mut cat: Vec<Resource> = (0..20)
        .map(|i| file(&format!("f{i}"), &format!("/f{i}"), "same\n"))
        .collect();
    apply(&host, &catalogue(cat.clone()), None);
    let planned = |cat: &[Resource]| {
        let registry = Registry::new(vec![Box::new(FileProvider)]);
        let selected: Vec<&Resource> = cat.iter().collect();
        let observers = crate::observe::Observers {
            registry: &registry,
            host: &host,
            threads: 2,
            slim: &|_| true,
            sweep: crate::observe::Sweep::Folders,
            trusting: None,
        };
        let observations =
            crate::observe::Observations::gather_alongside(&observers, &selected, || ()).0;
        let (options, groups) = (
            crate::PassOptions::default(),
            crate::group::GroupChecks::default(),
        );
        let (accepted, batched) = (Default::default(), Default::default());
        let ahead = crate::ahead::Ahead::new(
            &crate::ahead::AheadInputs {
                selected: &selected,
                observations: &observations,
                options: &options,
                groups: &groups,
                accepted: &accepted,
                batched: &batched,
                registry: &registry,
            },
            &HashSet::new(),
            &host,
            true,
        );
        (ahead.planned(), ahead.threads())
    };
    assert_eq!(planned(&cat), (0, 0), "converged: nothing ahead");
    cat.push(file("new", "/new", "new\n"));
    cat.push(file("newer", "/newer", "newer\n"));
    assert_eq!(planned(&cat), (2, 2), "the two new files only");
}
