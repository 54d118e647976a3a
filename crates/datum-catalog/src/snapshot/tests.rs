use super::read::{PARALLEL_DECODE, READ_WINDOW, Resources, decode_record};
use super::write::{Hashing, PLACED_BUFFER, write_error, write_records_at};
use super::*;
use crate::catalogue::Catalogue;

#[test]
fn a_checksum_does_not_depend_on_how_its_bytes_were_written() {
    // Records reach the hasher a field at a time, the index in writes
    // of every size: gathered or not, the checksum is the one the
    // reader computes over the whole.
    let bytes: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
    for sizes in [&[1usize][..], &[3, 1, 7], &[4095, 1], &[4096], &[9000, 2]] {
        let mut hashing = Hashing::default();
        let (mut at, mut k) = (0, 0);
        while at < bytes.len() {
            let n = sizes[k % sizes.len()].min(bytes.len() - at);
            hashing.update(&bytes[at..at + n]);
            at += n;
            k += 1;
        }
        assert_eq!(hashing.sum(), checksum(&bytes), "{sizes:?}");
    }
    assert_eq!(Hashing::default().sum(), checksum(&[]));
}
use crate::hashes::RACY_WINDOW_NS;
use std::fs;

/// Timestamps come from a coarse clock: a change in the same tick as the
/// stamp can keep every key (the racy case, which `save` refuses).
fn past_the_clock_tick() {
    std::thread::sleep(std::time::Duration::from_millis(20));
}

/// A snapshot that could not be written on a full file system was
/// warned about as 'invalid value write: error while writing
/// multi-byte MessagePack value', which does not say the disk is full.
#[test]
fn a_failed_write_says_why() {
    struct Full;
    impl std::io::Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from_raw_os_error(28))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let e = rmp_serde::encode::write(&mut Full, &("a", 1u64)).unwrap_err();
    let e = write_error(e);
    assert_eq!(e.kind(), std::io::ErrorKind::StorageFull);
    assert!(e.to_string().contains("No space left on device"), "{e}");
}

fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir_all(dir.path().join("base/files")).unwrap();
    fs::write(dir.path().join("datum.yaml"), "datum: v1alpha1\n").unwrap();
    fs::write(dir.path().join("base/files/motd"), "hello\n").unwrap();
    std::os::unix::fs::symlink("motd", dir.path().join("base/files/link")).unwrap();
    fs::create_dir_all(dir.path().join(".git/objects")).unwrap();
    dir
}

#[test]
fn a_stamp_sums_up_each_folder_and_its_digest_names_the_repository_as_it_is() {
    let dir = tree();
    // motd written again last: the folder's newest entry.
    past_the_clock_tick();
    fs::write(dir.path().join("base/files/motd"), "hello\n").unwrap();
    let stamp = Stamp::take(dir.path()).unwrap();
    // Every folder (`.git` aside) with how many other entries it has;
    // no entry's key is kept.
    let folders: Vec<(String, usize)> = stamp
        .dirs
        .iter()
        .map(|d| {
            (
                String::from_utf8_lossy(&d.path).into_owned(),
                d.entries.count,
            )
        })
        .collect();
    let want = [("", 1), ("base", 0), ("base/files", 2)];
    let want: Vec<(String, usize)> = want.iter().map(|(d, n)| ((*d).into(), *n)).collect();
    assert_eq!(folders, want);
    let files = &stamp.dirs[2].entries;
    let (name, key) = files.newest.as_ref().unwrap();
    assert_eq!(
        (&name[..], key.size),
        (&b"motd"[..], 6),
        "the newest entry, its own key"
    );
    // Saved and loaded: the same stamp, still holding, the same digest.
    let back: Stamp = rmp_serde::from_slice(&rmp_serde::to_vec(&stamp).unwrap()).unwrap();
    assert_eq!(back, stamp);
    assert!(back.still_holds());
    assert_eq!(Stamp::take(dir.path()).unwrap().digest(), stamp.digest());
    past_the_clock_tick();
    fs::write(dir.path().join("base/files/motd"), "hellO\n").unwrap();
    assert_ne!(Stamp::take(dir.path()).unwrap().digest(), stamp.digest());
}

#[test]
fn a_stamp_holds_until_something_changes() {
    let dir = tree();
    let stamp = Stamp::take(dir.path()).unwrap();
    // root, base, base/files, and datum.yaml, motd, link.
    assert_eq!(stamp.len(), 6, "{stamp:#?}");
    assert!(stamp.still_holds());

    // Anything inside .git is not the compiler's input.
    fs::write(dir.path().join(".git/HEAD"), "ref").unwrap();
    assert!(stamp.still_holds());

    type Change = Box<dyn Fn(&Path)>;
    let cases: Vec<Change> = vec![
        Box::new(|p| fs::write(p.join("base/files/motd"), "hellO\n").unwrap()),
        Box::new(|p| fs::write(p.join("base/files/new"), "").unwrap()),
        Box::new(|p| fs::remove_file(p.join("base/files/link")).unwrap()),
        Box::new(|p| {
            fs::remove_file(p.join("base/files/link")).unwrap();
            std::os::unix::fs::symlink("other", p.join("base/files/link")).unwrap();
        }),
        Box::new(|p| fs::create_dir(p.join("base/more")).unwrap()),
        Box::new(|p| {
            use std::os::unix::fs::PermissionsExt as _;
            fs::set_permissions(p.join("datum.yaml"), fs::Permissions::from_mode(0o600)).unwrap();
        }),
        Box::new(|p| fs::rename(p.join("base"), p.join("moved")).unwrap()),
    ];
    for (i, change) in cases.iter().enumerate() {
        let dir = tree();
        let stamp = Stamp::take(dir.path()).unwrap();
        past_the_clock_tick();
        change(dir.path());
        assert!(!stamp.still_holds(), "change {i} went unseen");
    }
}

#[test]
fn a_repository_reached_through_a_link_is_stamped_as_its_folder() {
    let dir = tree();
    let outer = tempfile::tempdir().unwrap();
    let link = outer.path().join("repo");
    std::os::unix::fs::symlink(dir.path(), &link).unwrap();
    let stamp = Stamp::take(&link).unwrap();
    assert!(stamp.still_holds());
    past_the_clock_tick();
    fs::write(dir.path().join("new.yaml"), "x").unwrap();
    assert!(!stamp.still_holds(), "a new top-level file is seen");
}

#[test]
fn an_edit_that_restores_size_and_mtime_is_still_seen() {
    let dir = tree();
    let motd = dir.path().join("base/files/motd");
    let before = fs::metadata(&motd).unwrap().modified().unwrap();
    let stamp = Stamp::take(dir.path()).unwrap();
    past_the_clock_tick();
    fs::write(&motd, "HELLO\n").unwrap();
    fs::File::options()
        .write(true)
        .open(&motd)
        .unwrap()
        .set_modified(before)
        .unwrap();
    assert!(!stamp.still_holds(), "ctime moved, the stamp must fail");
}

#[test]
fn a_fresh_stamp_is_racy_and_an_old_one_is_not() {
    let dir = tree();
    let mut stamp = Stamp::take(dir.path()).unwrap();
    assert!(stamp.racy_entry().is_some(), "just written: racy");
    stamp.taken_ns += RACY_WINDOW_NS + 1;
    assert_eq!(stamp.racy_entry(), None);
}

#[test]
fn a_stamp_walked_after_its_start_counts_from_the_start() {
    let dir = tree();
    // Started long before the tree was written (the walk ran while
    // something changed it): every entry is later than the start, racy.
    let hour = 3_600_000_000_000;
    let mut started = RepoKey::start(dir.path(), None);
    started.taken_ns -= hour;
    let RepoKey::Stamp(stamp) = started.walk().unwrap() else {
        panic!("an ordinary folder is stamped")
    };
    assert!(
        stamp.racy_entry().is_some(),
        "changed after the start: racy"
    );
    // Started well after: nothing in the window.
    let mut started = RepoKey::start(dir.path(), None);
    started.taken_ns += hour;
    let RepoKey::Stamp(stamp) = started.walk().unwrap() else {
        panic!("an ordinary folder is stamped")
    };
    assert_eq!(stamp.racy_entry(), None);
}

fn resource(name: &str, sensitive: bool, bytes: &[u8]) -> Resource {
    Resource {
        id: ResourceId::new("File", name),
        desired: serde_json::json!({"path": format!("/etc/{name}"), "mode": "0644"}).into(),
        content: Some(datum_core::Content::new(bytes.to_vec())),
        requires: vec![],
        class: "normal".to_owned(),
        sensitive,
        sensitive_by_field_only: false,
        validate: None,
        origin: datum_core::Origin::default(),
        field_origins: Default::default(),
        declaration_hash: format!("decl-{name}"),
        held: Default::default(),
    }
}

/// The records written a stretch per core, each at its span, are the
/// very bytes of encoding them one after the other: enough records for
/// every core, some larger than a writer's buffer (written straight
/// through), the region starting past a header.
#[test]
fn records_written_on_every_core_are_the_bytes_written_in_order() {
    let resources: Vec<Resource> = (0..700)
        .map(|i| {
            let size = match i % 97 {
                0 => PLACED_BUFFER + 1000,
                1 => PLACED_BUFFER - 3,
                n => n * 7,
            };
            resource(&format!("f{i}"), false, &vec![(i % 251) as u8; size])
        })
        .collect();
    let mut expected = Vec::new();
    let mut at = Vec::new();
    for r in &resources {
        let before = expected.len() as u64;
        rmp_serde::encode::write(&mut expected, &StoredRef::of(r)).unwrap();
        at.push((before, (expected.len() as u64 - before) as u32, 0));
    }
    let dir = tempfile::tempdir().unwrap();
    let file = fs::File::create_new(dir.path().join("records")).unwrap();
    write_records_at(&file, 100, &resources, &at).unwrap();
    let written = fs::read(dir.path().join("records")).unwrap();
    assert_eq!(written.len(), 100 + expected.len());
    assert!(written[..100].iter().all(|&b| b == 0));
    assert!(written[100..] == expected[..], "the records differ");
    // A span that does not match its record's encoding: refused.
    let mut wrong = at.clone();
    wrong[350].1 += 1;
    let file = fs::File::create_new(dir.path().join("wrong")).unwrap();
    assert!(write_records_at(&file, 0, &resources, &wrong).is_err());
}

fn catalogue(sensitive: bool, bytes: &[u8]) -> Catalogue {
    let mut from_source = resource("hosts", false, b"");
    from_source.content = Some(datum_core::Content::from_source(
        PathBuf::from("/repo/base/files/hosts"),
        "ab".repeat(32),
        Some("cd".repeat(32)),
        12,
    ));
    Catalogue {
        host: HostIdentity {
            name: "web1".to_owned(),
            labels: [("role".to_owned(), "web".to_owned())].into(),
        },
        resources: vec![resource("motd", sensitive, bytes), from_source],
        autorequires: vec![],
        boundary: datum_core::Boundary::default(),
    }
}

#[test]
fn a_compiled_catalogue_is_handed_over_in_the_list_it_was_compiled_into() {
    let lazy = LazyCatalogue::compiled(catalogue(false, b"hello\n"), classes());
    let Resources::Compiled(all) = &lazy.resources else {
        panic!("compiled");
    };
    let (at, ids): (usize, Vec<ResourceId>) = (
        all.as_ptr() as usize,
        all.iter().flatten().map(|r| r.id.clone()).collect(),
    );
    let handed = lazy.into_catalogue().unwrap();
    // The same allocation: the resources were not copied into a second.
    assert_eq!(handed.resources.as_ptr() as usize, at);
    let handed: Vec<ResourceId> = handed.resources.into_iter().map(|r| r.id).collect();
    assert_eq!(handed, ids);
}

fn classes() -> Value {
    serde_json::json!({"critical": {"interval": "5m"}})
}

fn settled_stamp(repo: &Path) -> RepoKey {
    let mut stamp = Stamp::take(repo).unwrap();
    stamp.taken_ns += RACY_WINDOW_NS + 1;
    RepoKey::Stamp(stamp)
}

/// A repository, a state folder, and where its snapshot goes.
struct Setup {
    repo: tempfile::TempDir,
    _state: tempfile::TempDir,
    path: PathBuf,
}

impl Setup {
    fn new() -> Self {
        let state = tempfile::tempdir().unwrap();
        let path = state.path().join("state.catalogue");
        Setup {
            repo: tree(),
            _state: state,
            path,
        }
    }

    /// Saves `c` under a settled stamp of the repository.
    fn save(&self, c: &Catalogue) {
        save(
            datum_providers::registry(),
            &self.path,
            settled_stamp(self.repo.path()),
            c,
            &classes(),
        )
        .unwrap()
        .unwrap();
    }

    fn load(&self, host: &HostIdentity) -> Result<LazyCatalogue, Unused> {
        load(&self.path, self.repo.path(), None, host)
    }
}

#[test]
fn a_saved_snapshot_loads_back_whole_while_nothing_changes() {
    let t = Setup::new();
    let (repo, path) = (&t.repo, &t.path);
    let c = catalogue(false, b"hello\n");
    t.save(&c);
    let host = c.host.clone();

    let lazy = t.load(&host).expect("an unchanged repository reuses it");
    assert_eq!(lazy.classes, classes());
    assert_eq!(lazy.host, host);
    assert_eq!(lazy.entries, Summaries::of(&c.resources));
    assert_eq!(lazy.entries.at(0).path, Some("/etc/motd"));
    let back = lazy.into_catalogue().unwrap();
    assert_eq!(back.resources.len(), 2);
    for (got, want) in back.resources.iter().zip(&c.resources) {
        assert_eq!(got.id, want.id);
        assert_eq!(got.desired, want.desired);
        assert_eq!(got.content, want.content);
        assert_eq!(
            got.content.as_ref().unwrap().source,
            want.content.as_ref().unwrap().source
        );
        assert_eq!(got.declaration_hash, want.declaration_hash);
    }
    assert_eq!(
        &back.resources[0].content.as_ref().unwrap().bytes[..],
        b"hello\n"
    );

    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        fs::metadata(path).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // Another host identity, another repository path, a changed file:
    // each compiles again.
    let mut other = host.clone();
    other.labels.insert("role".to_owned(), "db".to_owned());
    // Each says why (the binary logs it).
    assert_eq!(t.load(&other).err(), Some(Unused::OtherHost));
    assert_eq!(
        load(path, &repo.path().join("base"), None, &host).err(),
        Some(Unused::OtherFolder)
    );
    assert_eq!(
        load(&path.with_extension("none"), repo.path(), None, &host).err(),
        Some(Unused::Missing)
    );
    past_the_clock_tick();
    fs::write(repo.path().join("base/files/motd"), "changed\n").unwrap();
    assert_eq!(t.load(&host).err(), Some(Unused::RepositoryChanged));
}

#[test]
fn resources_are_decoded_one_at_a_time_on_request() {
    let t = Setup::new();
    let (repo, path) = (&t.repo, &t.path);
    let c = catalogue(false, b"hello\n");
    t.save(&c);
    // The compiled form and the snapshot hand out the same resources;
    // with many resources, one is read alone.
    let mut many = c.clone();
    for i in 0..30 {
        many.resources
            .push(resource(&format!("extra{i}"), false, b"e"));
    }
    let mut lazy = {
        save(
            datum_providers::registry(),
            path,
            settled_stamp(repo.path()),
            &many,
            &classes(),
        )
        .unwrap()
        .unwrap();
        t.load(&c.host).unwrap()
    };
    let one = lazy.take(&[20]).unwrap();
    assert_eq!(one[0].id, ResourceId::new("File", "extra18"));
    assert_eq!(&one[0].content.as_ref().unwrap().bytes[..], b"e");
    t.save(&c);
    for mut lazy in [
        t.load(&c.host).unwrap(),
        LazyCatalogue::compiled(c.clone(), classes()),
    ] {
        let second = lazy.take(&[1]).unwrap();
        assert_eq!(second[0].id, ResourceId::new("File", "hosts"));
        let first = lazy.take(&[0]).unwrap();
        assert_eq!(&first[0].content.as_ref().unwrap().bytes[..], b"hello\n");
        assert!(lazy.take(&[7]).is_err(), "no such resource");
    }
}

#[test]
fn a_damaged_index_cannot_ask_for_more_than_the_file_holds() {
    let t = Setup::new();
    let mut many = catalogue(false, b"x");
    for i in 0..40 {
        many.resources.push(resource(&format!("n{i}"), false, b"y"));
    }
    t.save(&many);
    // Cut the records short: the index still decodes, its spans now
    // reach past the end, for a range read and for a single record.
    let bytes = fs::read(&t.path).unwrap();
    fs::write(&t.path, &bytes[..bytes.len() - 40]).unwrap();
    let mut lazy = t.load(&many.host).unwrap();
    assert!(matches!(
        lazy.take(&(0..42).collect::<Vec<_>>()),
        Err(SnapshotError::Damaged { .. })
    ));
    assert!(matches!(
        lazy.take(&[41]),
        Err(SnapshotError::Damaged { .. })
    ));
    assert_eq!(
        lazy.take(&[0]).unwrap()[0].id,
        ResourceId::new("File", "motd")
    );
}

#[test]
fn a_snapshot_others_can_write_is_not_trusted() {
    use std::os::unix::fs::PermissionsExt as _;
    let t = Setup::new();
    let path = &t.path;
    let c = catalogue(false, b"x");
    t.save(&c);
    assert!(t.load(&c.host).is_ok());
    fs::set_permissions(path, fs::Permissions::from_mode(0o620)).unwrap();
    assert_eq!(
        t.load(&c.host).err(),
        Some(Unused::NotPrivate),
        "group-writable"
    );
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).unwrap();
    assert!(t.load(&c.host).is_ok());
}

/// A record read alone lends its buffer to its content (a packed tree
/// is held once, not read and then copied); a record among others in a
/// window gets its own copy (the window is reused for the next records).
#[test]
fn a_record_read_alone_shares_its_buffer_with_its_content() {
    let r = resource("big", false, &[7u8; 4096]);
    let record = rmp_serde::to_vec(&StoredRef::of(&r)).unwrap();
    let alone = bytes::Bytes::from(record.clone());
    let within = |b: &bytes::Bytes| {
        let (start, end) = (
            alone.as_ptr() as usize,
            alone.as_ptr() as usize + alone.len(),
        );
        (start..end).contains(&(b.as_ptr() as usize))
    };
    let shared = decode_record(&alone, Some(&alone)).unwrap();
    let shared = &shared.content.as_ref().unwrap().bytes;
    assert_eq!(&shared[..], &[7u8; 4096][..]);
    assert!(within(shared), "a slice of the record's buffer");
    let copied = decode_record(&record, None).unwrap();
    let copied = &copied.content.as_ref().unwrap().bytes;
    assert_eq!(copied, shared);
    assert!(!within(copied), "its own copy");
}

#[test]
fn records_are_read_a_window_at_a_time_in_any_order_and_size() {
    let t = Setup::new();
    let mut many = catalogue(false, b"x");
    // Records larger than a read window, between small ones.
    let big = |i: usize| vec![b'a' + (i % 26) as u8; READ_WINDOW as usize + 1000 * i];
    for i in 0..40 {
        let bytes = if i % 10 == 3 {
            big(i)
        } else {
            i.to_string().into_bytes()
        };
        many.resources
            .push(resource(&format!("w{i}"), false, &bytes));
    }
    t.save(&many);
    // Backwards, then forwards past the big ones: each record is read
    // again where the window does not hold it.
    let mut wanted: Vec<usize> = (20..many.resources.len()).rev().collect();
    wanted.extend(2..20);
    let got = t.load(&many.host).unwrap().take(&wanted).unwrap();
    assert_eq!(got.len(), wanted.len());
    for (r, &i) in got.iter().zip(&wanted) {
        assert_eq!(r.id, many.resources[i].id);
        assert_eq!(
            r.content.as_ref().unwrap().bytes,
            many.resources[i].content.as_ref().unwrap().bytes,
            "{}",
            r.id
        );
    }
}

#[test]
fn a_pass_is_handed_the_requirements_the_compile_added_only_in_requires() {
    let mut c = catalogue(false, b"x");
    let (motd, hosts) = (c.resources[0].id.clone(), c.resources[1].id.clone());
    c.resources[1].requires.push(motd.clone());
    c.autorequires = vec![(hosts.clone(), motd.clone())];
    let t = Setup::new();
    t.save(&c);
    for lazy in [
        LazyCatalogue::compiled(c.clone(), classes()),
        t.load(&c.host).unwrap(),
    ] {
        let pass = lazy.into_catalogue_for_pass().unwrap();
        assert!(pass.autorequires.is_empty());
        assert_eq!(pass.resources[1].requires, std::slice::from_ref(&motd));
    }
    // Shown by whatever shows the catalogue.
    let shown = t.load(&c.host).unwrap().into_catalogue().unwrap();
    assert_eq!(shown.autorequires, [(hosts, motd)]);
}

#[test]
fn a_large_request_is_decoded_on_all_cores_in_order() {
    let t = Setup::new();
    let mut many = catalogue(false, b"x");
    for i in 0..PARALLEL_DECODE + 100 {
        many.resources
            .push(resource(&format!("n{i}"), false, i.to_string().as_bytes()));
    }
    t.save(&many);
    let mut lazy = t.load(&many.host).unwrap();
    // Every second one, from the third: a range read, decoded in parts.
    let wanted: Vec<usize> = (2..many.resources.len()).step_by(2).collect();
    assert!(wanted.len() >= PARALLEL_DECODE / 2);
    let got = lazy.take(&wanted).unwrap();
    let ids: Vec<&ResourceId> = got.iter().map(|r| &r.id).collect();
    let want: Vec<&ResourceId> = wanted.iter().map(|&i| &many.resources[i].id).collect();
    assert_eq!(ids, want);
    let all = t.load(&many.host).unwrap().into_catalogue().unwrap();
    assert_eq!(all.resources.len(), many.resources.len());
    let last = all.resources.last().unwrap();
    let n = PARALLEL_DECODE + 99;
    assert_eq!(last.id, ResourceId::new("File", format!("n{n}")));
    assert_eq!(
        last.content.as_ref().unwrap().bytes,
        n.to_string().as_bytes()
    );
}

#[test]
fn racy_or_sensitive_catalogues_are_not_saved() {
    let t = Setup::new();
    let (repo, path) = (&t.repo, &t.path);
    let fresh = Stamp::take(repo.path()).unwrap();
    let got = save(
        datum_providers::registry(),
        path,
        RepoKey::Stamp(fresh),
        &catalogue(false, b"x"),
        &classes(),
    )
    .unwrap();
    assert!(matches!(got, Err(NotSaved::Racy(_))), "{got:?}");
    assert!(!path.exists());

    let canary = b"CANARY-5f2d9 secret";
    let stamp = settled_stamp(repo.path());
    let got = save(
        datum_providers::registry(),
        path,
        stamp,
        &catalogue(true, canary),
        &classes(),
    )
    .unwrap();
    assert_eq!(got, Err(NotSaved::Sensitive("File[motd]".to_owned())));
    assert!(!path.exists());

    // Content from a repository file: saved without its digests (filled
    // in at load: a_sensitive_sources_digests_are_left_out_and_hashed_again),
    // unless the resource, sensitive itself, declares another value (its
    // mode: plan, check and `datum catalogue` mask it).
    let mut c = catalogue(false, b"x");
    c.resources[1].sensitive = true;
    let mut desired = serde_json::json!({"path": "/etc/hosts", "source": "files/hosts"});
    c.resources[1].desired = desired.clone().into();
    rehash(&mut c.resources[1], 0);
    let got = save(
        datum_providers::registry(),
        path,
        settled_stamp(repo.path()),
        &c,
        &classes(),
    )
    .unwrap();
    assert!(got.is_ok(), "{got:?}");
    fs::remove_file(path).unwrap();
    // Its declaration hash not found again from its fields (so it could
    // not be filled in at load): refused.
    c.resources[1].declaration_hash = "ef".repeat(32);
    let got = save(
        datum_providers::registry(),
        path,
        settled_stamp(repo.path()),
        &c,
        &classes(),
    )
    .unwrap();
    assert_eq!(got, Err(NotSaved::Sensitive("File[hosts]".to_owned())));
    assert!(!path.exists());
    desired["mode"] = serde_json::json!("0640");
    c.resources[1].desired = desired.into();
    let got = save(
        datum_providers::registry(),
        path,
        settled_stamp(repo.path()),
        &c,
        &classes(),
    )
    .unwrap();
    assert_eq!(got, Err(NotSaved::Sensitive("File[hosts]".to_owned())));
    assert!(!path.exists());
}

fn commit(c: char) -> String {
    c.to_string().repeat(40)
}

#[test]
fn a_vouched_revision_is_reused_without_looking_at_a_file() {
    let t = Setup::new();
    let c = catalogue(false, b"x");
    let at = |commit: &str| Revision::new(t.repo.path(), commit, &"e".repeat(40)).unwrap();
    let load_at = |r: Option<&Revision>| load(&t.path, t.repo.path(), r, &c.host);
    // Saved right after the files were written: a stamp that fresh is
    // refused as racy, a revision is not (nothing changes its files).
    let key = RepoKey::start(t.repo.path(), Some(at(&commit('a'))))
        .walk()
        .unwrap();
    save(datum_providers::registry(), &t.path, key, &c, &classes())
        .unwrap()
        .unwrap();
    assert!(load_at(Some(&at(&commit('a')))).is_ok());

    // An edit that a stamp would see (size, mtime, ctime all move; a
    // new file): the revision's snapshot does not look, so it loads.
    past_the_clock_tick();
    fs::write(t.repo.path().join("base/files/motd"), "edited by hand\n").unwrap();
    fs::write(t.repo.path().join("base/new.yaml"), "x").unwrap();
    let lazy = load_at(Some(&at(&commit('a')))).expect("keyed by the commit alone");
    assert_eq!(lazy.revision, Some(format!("git:{}", commit('a'))));

    // Another commit, or no longer vouched for: compiled again.
    assert_eq!(
        load_at(Some(&at(&commit('b')))).err(),
        Some(Unused::OtherRevision)
    );
    assert_eq!(
        load_at(None).err(),
        Some(Unused::OtherRevision),
        "not a checkout now: the stamp rules"
    );
    let other_tree = Revision::new(t.repo.path(), &commit('a'), &"f".repeat(40)).unwrap();
    assert_eq!(
        load_at(Some(&other_tree)).err(),
        Some(Unused::OtherRevision)
    );
}

#[test]
fn a_stamped_snapshot_is_not_taken_for_a_revision() {
    let t = Setup::new();
    let c = catalogue(false, b"x");
    t.save(&c);
    assert!(t.load(&c.host).is_ok());
    let r = Revision::new(t.repo.path(), &commit('a'), &"e".repeat(40)).unwrap();
    assert_eq!(
        load(&t.path, t.repo.path(), Some(&r), &c.host).err(),
        Some(Unused::OtherRevision)
    );
    // Two keys of one folder differ, and two revisions' digests too.
    assert_ne!(
        settled_stamp(t.repo.path()).digest(),
        RepoKey::Revision(r.clone()).digest()
    );
    let b = Revision::new(t.repo.path(), &commit('b'), &"e".repeat(40)).unwrap();
    assert_ne!(RepoKey::Revision(r).digest(), RepoKey::Revision(b).digest());
}

#[test]
fn the_index_is_read_by_its_length_and_a_damaged_length_compiles_again() {
    let t = Setup::new();
    let c = catalogue(false, b"x");
    t.save(&c);
    let bytes = fs::read(&t.path).unwrap();
    // The length and the checksum follow the header.
    let mut after_header = std::io::Cursor::new(&bytes[MAGIC.len()..]);
    let _: Header = rmp_serde::from_read(&mut after_header).unwrap();
    let at = MAGIC.len() + usize::try_from(after_header.position()).unwrap();
    let length = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    let index_end = at + 16 + usize::try_from(length).unwrap();
    let index: Index = rmp_serde::from_slice(&bytes[at + 16..index_end]).unwrap();
    assert_eq!(index.entries.len(), c.resources.len());
    assert_eq!(
        u64::from_le_bytes(bytes[at + 8..at + 16].try_into().unwrap()),
        checksum(&bytes[at + 16..index_end])
    );
    for (damaged, why) in [
        (u64::MAX, "more than any file holds"),
        (bytes.len() as u64 + 1, "past the file's end"),
        (length - 1, "the index cut short"),
    ] {
        let mut copy = bytes.clone();
        copy[at..at + 8].copy_from_slice(&damaged.to_le_bytes());
        fs::write(&t.path, &copy).unwrap();
        assert_eq!(t.load(&c.host).err(), Some(Unused::Format), "{why}");
    }
    // Put back, it loads and its records are where the index says.
    fs::write(&t.path, &bytes).unwrap();
    let mut lazy = t.load(&c.host).unwrap();
    assert_eq!(lazy.take(&[0]).unwrap()[0].id, c.resources[0].id);
}

/// A byte of the snapshot damaged on disk after it was written went
/// live when it was one of a resource's desired values: a File's mode
/// 0640 read back as 0666 was applied (seen with the binary: motd made
/// world-writable), as a class or a link the boundary follows would
/// have been in the index. Each record and the index carry a checksum,
/// checked as they are read: a damaged record is not decoded (the
/// caller compiles again), a damaged index is not used.
#[test]
fn a_byte_damaged_in_a_record_or_the_index_is_never_used() {
    let t = Setup::new();
    let mut c = catalogue(false, b"x");
    c.resources[0].desired = serde_json::json!({"path": "/etc/motd", "mode": "0640"})
        .as_object()
        .unwrap()
        .clone()
        .into();
    t.save(&c);
    let bytes = fs::read(&t.path).unwrap();
    let at = bytes
        .windows(4)
        .rposition(|w| w == b"0640")
        .expect("the mode is in the record");
    let mut copy = bytes.clone();
    copy[at..at + 4].copy_from_slice(b"0666");
    fs::write(&t.path, &copy).unwrap();
    let mut lazy = t.load(&c.host).unwrap();
    assert!(
        matches!(
            lazy.take(&[0]),
            Err(SnapshotError::Damaged { index: 0, .. })
        ),
        "a damaged record was decoded"
    );
    let all = t.load(&c.host).unwrap().into_catalogue();
    assert!(matches!(all, Err(SnapshotError::Damaged { .. })));
    // The index: a host label's value (the header holds it first).
    let at = bytes
        .windows(3)
        .rposition(|w| w == b"web")
        .expect("a label in the index");
    let mut copy = bytes.clone();
    copy[at] = b'X';
    fs::write(&t.path, &copy).unwrap();
    assert!(t.load(&c.host).is_err(), "a damaged index was used");
    fs::write(&t.path, &bytes).unwrap();
    assert_eq!(
        t.load(&c.host).unwrap().take(&[0]).unwrap()[0].desired,
        c.resources[0].desired
    );
}

#[test]
fn a_damaged_or_foreign_file_is_ignored() {
    let t = Setup::new();
    let path = &t.path;
    let c = catalogue(false, b"x");
    fs::write(path, b"something else entirely").unwrap();
    assert_eq!(t.load(&c.host).err(), Some(Unused::Format));
    t.save(&c);
    let mut bytes = fs::read(path).unwrap();
    let keep = bytes.len() - 5;
    bytes.truncate(keep);
    fs::write(path, &bytes).unwrap();
    // The index still reads; the truncated record does not.
    let lazy = t.load(&c.host).unwrap();
    let err = lazy.into_catalogue().unwrap_err();
    assert!(err.to_string().contains("catalogue snapshot"), "{err}");
}

/// `r`'s declaration hash as the compile computes it, over its first
/// `explicit` requirements.
fn rehash(r: &mut Resource, explicit: usize) {
    r.declaration_hash = crate::catalogue::declaration_hash_of(
        r,
        r.content.as_ref().map(|c| c.sha256.as_str()),
        &r.requires[..explicit],
    );
}

/// A sensitive File whose content is a repository file (`source:`) is
/// saved, but nothing in the snapshot confirms a guessed secret: neither
/// its SHA-256 nor its BLAKE3 (hex or raw) nor its declaration hash (which
/// covers the SHA-256). The load hashes its source again and computes the
/// declaration hash over its explicit requirements: the same resource and
/// summary as compiled while the file is unchanged, the new file's digests
/// once it changed (seen here under a revision, whose snapshot is not
/// looked past by a stamp), and a source gone leaves the snapshot unused.
#[test]
fn a_sensitive_sources_digests_are_left_out_and_hashed_again() {
    let t = Setup::new();
    let source = t.repo.path().join("base/files/secret");
    let secret = b"password=CANARY-77e1 source\n";
    fs::write(&source, secret).unwrap();
    let digests = |bytes: &[u8]| {
        let c = datum_core::Content::new(bytes.to_vec());
        (c.sha256.clone(), c.blake3.clone().unwrap())
    };
    let (sha, b3) = digests(secret);
    let mut c = catalogue(false, b"x");
    let mut token = resource("token", true, b"");
    token.desired = serde_json::json!({"path": "/token", "source": "files/secret"}).into();
    token.content = Some(datum_core::Content::from_source(
        source.clone(),
        sha.clone(),
        Some(b3.clone()),
        secret.len() as u64,
    ));
    // One explicit requirement, then one the compile added after hashing.
    token.requires = vec![ResourceId::new("File", "motd")];
    rehash(&mut token, 1);
    token.requires.push(ResourceId::new("File", "hosts"));
    let declared = token.declaration_hash.clone();
    c.resources.push(token);
    let at = |commit: &str| Revision::new(t.repo.path(), commit, &"e".repeat(40)).unwrap();
    let key = RepoKey::start(t.repo.path(), Some(at(&commit('a'))))
        .walk()
        .unwrap();
    let got = save(datum_providers::registry(), &t.path, key, &c, &classes()).unwrap();
    assert!(got.is_ok(), "{got:?}");

    let written = fs::read(&t.path).unwrap();
    let holds = |needle: &[u8]| written.windows(needle.len()).any(|w| w == needle);
    for needle in [
        sha.as_bytes().to_vec(),
        b3.as_bytes().to_vec(),
        hex::decode(&sha).unwrap(),
        hex::decode(&b3).unwrap(),
        declared.as_bytes().to_vec(),
        b"CANARY-77e1".to_vec(),
    ] {
        assert!(
            !holds(&needle),
            "the snapshot holds {}",
            String::from_utf8_lossy(&needle)
        );
    }
    // The others keep theirs (the needles above would be found).
    assert!(holds("ab".repeat(32).as_bytes()));

    let load_at = || load(&t.path, t.repo.path(), Some(&at(&commit('a'))), &c.host);
    let mut lazy = load_at().expect("saved and loaded");
    assert_eq!(lazy.entries.at(2).declaration_hash, declared);
    assert_eq!(lazy.entries.at(1).declaration_hash, "decl-hosts");
    let got = lazy.take(&[2, 0]).unwrap();
    let content = got[0].content.as_ref().unwrap();
    assert_eq!(
        (
            content.sha256.as_str(),
            content.blake3.as_deref(),
            content.size,
            got[0].declaration_hash.as_str(),
            content.source.as_deref(),
        ),
        (
            sha.as_str(),
            Some(b3.as_str()),
            secret.len() as u64,
            declared.as_str(),
            Some(source.as_path()),
        )
    );
    assert_eq!(got[0].requires.len(), 2);
    let whole = load_at().unwrap().into_catalogue().unwrap();
    assert_eq!(whole.resources[2].declaration_hash, declared);

    // Changed in the repository: the load has the new file's digests.
    let edited = b"password=CANARY-77e1 rotated\n";
    fs::write(&source, edited).unwrap();
    let (new_sha, new_b3) = digests(edited);
    let mut expected = c.resources[2].clone();
    if let Some(content) = expected.content.as_mut() {
        content.sha256.clone_from(&new_sha);
    }
    expected.requires.truncate(1);
    rehash(&mut expected, 1);
    assert_ne!(expected.declaration_hash, declared);
    let mut lazy = load_at().unwrap();
    assert_eq!(
        lazy.entries.at(2).declaration_hash,
        expected.declaration_hash
    );
    let got = lazy.take(&[2]).unwrap();
    let content = got[0].content.as_ref().unwrap();
    assert_eq!(
        (
            content.sha256.as_str(),
            content.blake3.as_deref(),
            content.size
        ),
        (new_sha.as_str(), Some(new_b3.as_str()), edited.len() as u64)
    );
    assert_eq!(got[0].declaration_hash, expected.declaration_hash);

    // Gone: not used (the compile reports it).
    fs::remove_file(&source).unwrap();
    assert_eq!(load_at().err(), Some(Unused::SourceUnreadable));
}
