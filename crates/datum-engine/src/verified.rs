//! The store's verified records as a pass holds them until each resource's
//! turn.
//!
//! An apply compares every resource with its last verified record (to label
//! a change corrective or intentional, and to skip re-recording a
//! verification the store already holds). It reads them all in one query
//! while the observers start, and holds them through the observation, which
//! is the pass's fullest moment: 100,000 records as the store hands them out
//! (a resource id, two hashes as hex text and the file metadata each) were
//! about 37 MB there. Here each is kept by its resource's place in the pass,
//! its hashes as their 32 bytes, and becomes a [`VerifiedRecord`] again only
//! when its resource's turn comes. A plan reads them one at a time instead,
//! for what it reports as changing.
//!
//! Owns: [`VerifiedRecords`]. Must not: write to the store.

use datum_core::DigestKey;
use datum_core::digest::KEYED_PREFIX;
use datum_core::trust::{Trust, trust};
use datum_core::{FileMeta, Resource, ResourceId};
use datum_store::{Store, VerifiedRecord, VerifiedView, is_sealed_form};

/// The store's verified records, as a pass reads them.
pub(crate) enum VerifiedRecords {
    /// Every record of a resource the pass visits, by its place in the pass;
    /// each taken when its resource's turn comes (a pass visits a resource
    /// once), so it is not held to the end of the pass.
    All(Vec<Option<Held>>),
    /// Read one at a time, when asked: a plan needs the record of a
    /// resource it reports as changing (corrective or intentional), never
    /// of one that is converged, and a quiet host's records were 28 MB of a
    /// 100,000-File plan. Past [`ON_DEMAND_MOST`] questions, all are read.
    OnDemand { asked: usize },
}

/// How many records a plan reads one at a time before it reads them all.
pub(crate) const ON_DEMAND_MOST: usize = 1024;

impl VerifiedRecords {
    /// Every record of a resource of `visited` (the pass's resources, in
    /// its order); none without a store, or when it cannot be read (then
    /// every change is labelled intentional and every verification is
    /// recorded again, as without a store).
    pub(crate) fn all(store: Option<&Store>, visited: &[&Resource]) -> Self {
        Self::all_noting_undeclared(store, visited, false).0
    }

    /// [`VerifiedRecords::all`], and, when `visited` is the whole catalogue
    /// (`whole`), the records of resources it no longer declares (renamed
    /// or removed from the repository): nothing ever reads them again, so an
    /// apply forgets them, or they would stay in the store for good (one
    /// row per name a resource ever had).
    pub(crate) fn all_noting_undeclared(
        store: Option<&Store>,
        visited: &[&Resource],
        whole: bool,
    ) -> (Self, Vec<ResourceId>) {
        let mut undeclared: Vec<ResourceId> = Vec::new();
        let mut places: Vec<(&ResourceId, usize)> = visited
            .iter()
            .enumerate()
            .map(|(i, r)| (&r.id, i))
            .collect();
        places.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let mut held: Vec<Option<Held>> = Vec::new();
        held.resize_with(visited.len(), || None);
        if let Some(store) = store {
            let key = store.digest_key();
            let read = store.each_verified(|view| {
                let id = (view.kind, view.name);
                if let Ok(at) =
                    places.binary_search_by(|(k, _)| (k.kind.as_str(), k.name.as_str()).cmp(&id))
                    && let Some((_, place)) = places.get(at)
                    && let Some(slot) = held.get_mut(*place)
                    && let Some(resource) = visited.get(*place)
                {
                    *slot = Held::of(view, resource, key);
                } else if whole {
                    undeclared.push(ResourceId::new(view.kind, view.name));
                }
            });
            if read.is_err() {
                held.iter_mut().for_each(|slot| *slot = None);
                undeclared.clear();
            }
        }
        (VerifiedRecords::All(held), undeclared)
    }

    /// Whether the store already holds the verification of a resource
    /// observed converged, `resource` at `place` with the metadata `meta`
    /// ([`same_verification`]), its record taken once. Compared as it is
    /// held, hashes as bytes: the record is never made text again (two hex
    /// strings a resource, 20,000 of them in a no-op apply). Always false
    /// for a pass reading records on demand: a plan records nothing, and
    /// reports a converged resource unchanged without asking the store.
    ///
    /// `key`: the store's digest key, with which a sensitive resource's
    /// record holds its content hash (see [`Held::of`]).
    pub(crate) fn converged_is_recorded(
        &mut self,
        place: usize,
        resource: &Resource,
        meta: Option<&FileMeta>,
        key: Option<&DigestKey>,
    ) -> bool {
        let VerifiedRecords::All(held) = self else {
            return false;
        };
        held.get_mut(place)
            .and_then(Option::take)
            .is_some_and(|h| h.is_verification(&resource.declaration_hash, meta, key))
    }

    /// The metadata the record of `resource` (at `place`) holds, with its
    /// content hash, when it vouches that `now`, the metadata its path has
    /// now, means nothing `resource` declares has changed: the record is of
    /// this very declaration and [`trust`] says [`Trust::Trusted`]. `None`
    /// for a pass reading records on demand (a plan's) and for a record
    /// already taken.
    pub(crate) fn trusts(
        &self,
        place: usize,
        resource: &Resource,
        now: &FileMeta,
    ) -> Option<FileMeta> {
        let VerifiedRecords::All(held) = self else {
            return None;
        };
        let held = held.get(place)?.as_ref()?;
        if !held.declaration_hash.is(&resource.declaration_hash) {
            return None;
        }
        // A keyed content hash that is not the declared content's: no plain
        // hash to stand for what the file holds, so it is read.
        if held.sha256.as_ref().is_some_and(Hash::is_keyed) {
            return None;
        }
        let recorded = FileMeta {
            sha256: held.sha256.as_ref().map(Hash::text),
            ..held.meta.clone()?
        };
        (trust(&recorded, held.verified_at, now) == Trust::Trusted).then_some(recorded)
    }

    /// Lets the record of the resource at `place` go unread (its resource
    /// needs nothing of it: its metadata vouched for it).
    pub(crate) fn forget(&mut self, place: usize) {
        if let VerifiedRecords::All(held) = self
            && let Some(slot) = held.get_mut(place)
        {
            *slot = None;
        }
    }

    /// The record of `id`, the resource at `place` of `visited`, once.
    pub(crate) fn take(
        &mut self,
        place: usize,
        id: &ResourceId,
        store: Option<&Store>,
        visited: &[&Resource],
    ) -> Option<VerifiedRecord> {
        if let VerifiedRecords::OnDemand { asked } = self {
            *asked += 1;
            if *asked <= ON_DEMAND_MOST {
                let store = store?;
                let record = store.last_verified(id).ok().flatten()?;
                let resource = visited.get(place).filter(|r| &r.id == id)?;
                return unsealed(record, resource, store.digest_key());
            }
            *self = VerifiedRecords::all(store, visited);
        }
        let VerifiedRecords::All(held) = self else {
            return None;
        };
        held.get_mut(place)
            .and_then(Option::take)
            .map(Held::into_record)
    }
}

/// One verified record, held until its resource's turn.
pub(crate) struct Held {
    declaration_hash: Hash,
    /// Without its content hash (kept beside, as bytes).
    meta: Option<FileMeta>,
    sha256: Option<Hash>,
    verified_at: i64,
}

impl Held {
    /// The record `view` of `resource`, held. A sensitive resource's record
    /// holds keyed digests of its hashes (`Store::record_verified_of`):
    /// each that is the keyed digest of the resource's own (its declaration
    /// hash, its declared content's hash) is held as that plain hash, so
    /// the pass compares as for any resource; any other stays keyed and
    /// matches nothing plain. A record of a sensitive resource holding a
    /// plain hash (written before records were keyed) is not held: the
    /// resource is read and recorded again, keyed.
    fn of(view: VerifiedView<'_>, resource: &Resource, key: Option<&DigestKey>) -> Option<Self> {
        if !resource.sensitive {
            return Some(Held {
                declaration_hash: Hash::of(view.declaration_hash),
                sha256: view.sha256.map(Hash::of),
                meta: view.meta,
                verified_at: view.verified_at,
            });
        }
        let content = resource.content.as_ref().map(|c| c.sha256.as_str());
        let sha256 = match view.sha256 {
            Some(sha) => Some(Hash::of(unseal(sha, content, key)?)),
            None => None,
        };
        Some(Held {
            declaration_hash: Hash::of(unseal(
                view.declaration_hash,
                Some(&resource.declaration_hash),
                key,
            )?),
            sha256,
            meta: view.meta,
            verified_at: view.verified_at,
        })
    }

    /// The record exactly as the store handed it out.
    fn into_record(self) -> VerifiedRecord {
        let Held {
            declaration_hash,
            meta,
            sha256,
            verified_at,
        } = self;
        VerifiedRecord {
            declaration_hash: declaration_hash.into_text(),
            meta: meta.map(|meta| FileMeta {
                sha256: sha256.map(Hash::into_text),
                ..meta
            }),
            verified_at,
        }
    }
}

impl Held {
    /// [`same_verification`] of the record this is, without making it
    /// ([`Held::into_record`]).
    fn is_verification(
        &self,
        declaration_hash: &str,
        meta: Option<&FileMeta>,
        key: Option<&DigestKey>,
    ) -> bool {
        if !self.declaration_hash.is(declaration_hash) {
            return false;
        }
        match (&self.meta, meta) {
            (None, None) => true,
            (Some(held), Some(now)) => {
                // Every field but the content hash (held beside, as bytes):
                // named, so a field added to FileMeta is compared here too.
                let FileMeta {
                    size,
                    mtime_ns,
                    ctime_ns,
                    inode,
                    dev,
                    mode,
                    uid,
                    gid,
                    sha256: _,
                } = held;
                let sha256_same = match (&self.sha256, &now.sha256) {
                    (None, None) => true,
                    (Some(held), Some(now)) => held.is(now) || held.is_keyed_form(now, key),
                    _ => false,
                };
                *size == now.size
                    && *mtime_ns == now.mtime_ns
                    && *ctime_ns == now.ctime_ns
                    && *inode == now.inode
                    && *dev == now.dev
                    && *mode == now.mode
                    && *uid == now.uid
                    && *gid == now.gid
                    && sha256_same
                    && held.quiet_at(self.verified_at)
            }
            _ => false,
        }
    }
}

/// `recorded`, a hash of a sensitive resource's record, as a pass holds it:
/// `plain` (the resource's own hash now) when it is its keyed digest,
/// `recorded` as it is when it is keyed otherwise (it matches nothing
/// plain), `None` when it is plain (a record written before they were
/// keyed, not used: see [`Held::of`]).
fn unseal<'a>(
    recorded: &'a str,
    plain: Option<&'a str>,
    key: Option<&DigestKey>,
) -> Option<&'a str> {
    if !recorded.starts_with(KEYED_PREFIX) {
        return None;
    }
    match plain {
        Some(plain) if is_sealed_form(key, recorded, plain) => Some(plain),
        _ => Some(recorded),
    }
}

/// [`Held::of`] for a record read on its own (a plan's, on demand).
fn unsealed(
    record: VerifiedRecord,
    resource: &Resource,
    key: Option<&DigestKey>,
) -> Option<VerifiedRecord> {
    if !resource.sensitive {
        return Some(record);
    }
    let view = VerifiedView {
        kind: &resource.id.kind,
        name: &resource.id.name,
        declaration_hash: &record.declaration_hash,
        meta: record.meta.as_ref().map(|m| FileMeta {
            sha256: None,
            ..m.clone()
        }),
        sha256: record.meta.as_ref().and_then(|m| m.sha256.as_deref()),
        verified_at: record.verified_at,
    };
    Held::of(view, resource, key).map(Held::into_record)
}

/// Whether `known` is the very verification of a resource declared as
/// `declaration_hash` whose file has the metadata `meta` now, made while
/// the file was quiet: then recording it again would only cost writes (a
/// record made while the file had just changed is made again, once it is
/// quiet, so that a metadata check can trust it).
pub(crate) fn same_verification(
    known: &VerifiedRecord,
    declaration_hash: &str,
    meta: Option<&FileMeta>,
) -> bool {
    known.declaration_hash == declaration_hash
        && known.meta.as_ref() == meta
        && known
            .meta
            .as_ref()
            .is_none_or(|m| m.quiet_at(known.verified_at))
}

/// A hash as the store keeps it: 64 lowercase hex digits (what Datum
/// writes) as their 32 bytes, anything else as it was written, so that the
/// text given back is always the text read.
enum Hash {
    Bytes([u8; 32]),
    Text(Box<str>),
}

impl Hash {
    fn of(text: &str) -> Self {
        match lower_hex_bytes(text) {
            Some(bytes) => Hash::Bytes(bytes),
            None => Hash::Text(text.into()),
        }
    }

    /// Whether this is a keyed digest (a sensitive resource's, see
    /// [`Held::of`]).
    fn is_keyed(&self) -> bool {
        matches!(self, Hash::Text(text) if text.starts_with(KEYED_PREFIX))
    }

    /// Whether this is the keyed digest of `plain` under `key`.
    fn is_keyed_form(&self, plain: &str, key: Option<&DigestKey>) -> bool {
        matches!(self, Hash::Text(text) if is_sealed_form(key, text, plain))
    }

    /// Whether this is the hash written as `text`, without a copy.
    fn is(&self, text: &str) -> bool {
        match self {
            Hash::Bytes(bytes) => {
                let mut hex_digits = [0u8; 64];
                hex::encode_to_slice(bytes, &mut hex_digits).is_ok()
                    && hex_digits.as_slice() == text.as_bytes()
            }
            Hash::Text(written) => written.as_ref() == text,
        }
    }

    fn text(&self) -> String {
        match self {
            Hash::Bytes(bytes) => hex::encode(bytes),
            Hash::Text(text) => text.to_string(),
        }
    }

    fn into_text(self) -> String {
        match self {
            Hash::Bytes(bytes) => hex::encode(bytes),
            Hash::Text(text) => text.into_string(),
        }
    }
}

/// The 32 bytes `text` writes as 64 lowercase hex digits; `None` for any
/// other text (uppercase digits too: given back, they would not be the text
/// read).
fn lower_hex_bytes(text: &str) -> Option<[u8; 32]> {
    let mut bytes = [0u8; 32];
    // 64 characters, none of them uppercase (or an `0x` prefix, which
    // leaves too few digits for 32 bytes): then the crate's decoder decides.
    (text.len() == 64
        && !text.bytes().any(|b| b.is_ascii_uppercase())
        && hex::decode_to_slice(text, &mut bytes).is_ok())
    .then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(declaration_hash: &str, sha256: Option<&str>) -> VerifiedRecord {
        VerifiedRecord {
            declaration_hash: declaration_hash.to_owned(),
            meta: Some(FileMeta {
                size: 3,
                mtime_ns: 4,
                ctime_ns: 5,
                inode: 6,
                dev: 7,
                mode: 0o640,
                uid: 8,
                gid: 9,
                sha256: sha256.map(str::to_owned),
            }),
            verified_at: 10,
        }
    }

    #[test]
    fn a_held_record_is_given_back_exactly_as_read() {
        let hex = "0123456789abcdef".repeat(4);
        for r in [
            record(&hex, Some(&hex)),
            record(&hex, None),
            // Not what Datum writes: kept as text, given back the same.
            record(&hex.to_uppercase(), Some("short")),
            record("", Some(&format!("{hex}0"))),
            VerifiedRecord {
                declaration_hash: hex.clone(),
                meta: None,
                verified_at: -1,
            },
        ] {
            let id = ResourceId::new("File", "f");
            let view = VerifiedView {
                kind: &id.kind,
                name: &id.name,
                declaration_hash: &r.declaration_hash,
                meta: r.meta.clone().map(|m| FileMeta { sha256: None, ..m }),
                sha256: r.meta.as_ref().and_then(|m| m.sha256.as_deref()),
                verified_at: r.verified_at,
            };
            let plain = Resource::new(id.clone(), datum_core::Desired::default());
            assert_eq!(Held::of(view, &plain, None).unwrap().into_record(), r);
        }
        assert!(matches!(Hash::of(&hex), Hash::Bytes(_)));
        assert!(matches!(Hash::of(&hex.to_uppercase()), Hash::Text(_)));
        // Anything but 64 lowercase hex digits stays text, given back as read.
        let mixed = format!("{}A{}", &hex[..10], &hex[11..]);
        let beyond = format!("{}g", &hex[..63]);
        let wide = "é".repeat(32); // 64 bytes, not digits
        let prefixed = format!("0x{}", &hex[..62]); // 64 characters
        for text in [
            mixed.as_str(),
            beyond.as_str(),
            wide.as_str(),
            prefixed.as_str(),
            &hex[..62],
        ] {
            assert!(matches!(Hash::of(text), Hash::Text(_)), "{text}");
            assert_eq!(Hash::of(text).into_text(), text);
        }
        // Bytes decoded are the digits' values, both nibbles in order.
        let Hash::Bytes(bytes) = Hash::of(&hex) else {
            panic!("decoded")
        };
        assert_eq!(
            &bytes[..8],
            &[0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]
        );
        for (hash, text, same) in [
            (Hash::of(&hex), hex.as_str(), true),
            (Hash::of(&hex), beyond.as_str(), false),
            (Hash::of(&hex), &hex[..62], false),
            (Hash::of(&mixed), mixed.as_str(), true),
            (Hash::of(&mixed), hex.as_str(), false),
        ] {
            assert_eq!(hash.is(text), same, "{text}");
        }
    }

    /// A converged resource's record is compared as it is held: the answer
    /// is the one the record given back as text gives, for every field
    /// that differs, either hash written as Datum writes it or not, and a
    /// record made while the file had just changed.
    #[test]
    fn a_held_record_is_the_same_verification_exactly_when_its_text_is() {
        let hex = "0123456789abcdef".repeat(4);
        let other = "fedcba9876543210".repeat(4);
        let upper = hex.to_uppercase();
        let quiet_at = 2_000; // seconds; the file changed at 1,000
        let records = [
            record(&hex, Some(&hex)),
            record(&hex, None),
            record(&upper, Some(&upper)),
            record(&hex, Some("short")),
            VerifiedRecord {
                declaration_hash: hex.clone(),
                meta: None,
                verified_at: quiet_at,
            },
        ]
        .map(|mut r| {
            r.verified_at = quiet_at;
            if let Some(m) = r.meta.as_mut() {
                (m.mtime_ns, m.ctime_ns) = (1_000_000_000_000, 1_000_000_000_000);
            }
            r
        });
        let mut racy = records[0].clone();
        racy.verified_at = 1_001;
        let base = records[0].meta.clone();
        let moved: Vec<Option<FileMeta>> = vec![
            base.clone(),
            None,
            base.clone().map(|m| FileMeta { sha256: None, ..m }),
            base.clone().map(|m| FileMeta {
                sha256: Some(other.clone()),
                ..m
            }),
            base.clone().map(|m| FileMeta {
                sha256: Some(upper.clone()),
                ..m
            }),
            base.clone().map(|m| FileMeta {
                sha256: Some("short".into()),
                ..m
            }),
            base.clone().map(|m| FileMeta { size: 1, ..m }),
            base.clone().map(|m| FileMeta { mtime_ns: 1, ..m }),
            base.clone().map(|m| FileMeta { ctime_ns: 1, ..m }),
            base.clone().map(|m| FileMeta { inode: 1, ..m }),
            base.clone().map(|m| FileMeta { dev: 1, ..m }),
            base.clone().map(|m| FileMeta { mode: 1, ..m }),
            base.clone().map(|m| FileMeta { uid: 1, ..m }),
            base.clone().map(|m| FileMeta { gid: 1, ..m }),
        ];
        let mut same = 0;
        for r in records.iter().chain([&racy]) {
            let id = ResourceId::new("File", "f");
            let plain = Resource::new(id.clone(), datum_core::Desired::default());
            let held = Held::of(
                VerifiedView {
                    kind: &id.kind,
                    name: &id.name,
                    declaration_hash: &r.declaration_hash,
                    meta: r.meta.clone().map(|m| FileMeta { sha256: None, ..m }),
                    sha256: r.meta.as_ref().and_then(|m| m.sha256.as_deref()),
                    verified_at: r.verified_at,
                },
                &plain,
                None,
            )
            .unwrap();
            let metas = moved.iter().cloned().chain([r.meta.clone()]);
            for meta in metas {
                for declaration in [hex.as_str(), other.as_str(), upper.as_str()] {
                    let expected = same_verification(r, declaration, meta.as_ref());
                    same += usize::from(expected);
                    assert_eq!(
                        held.is_verification(declaration, meta.as_ref(), None),
                        expected,
                        "{r:?} {declaration} {meta:?}"
                    );
                }
            }
        }
        // Each quiet record is the same verification as itself, the racy
        // one never.
        assert!(same >= records.len(), "{same}");
        assert!(!same_verification(&racy, &hex, racy.meta.as_ref()));
    }

    /// A record vouches for a file only for its own declaration, with a
    /// content hash, when the file's metadata is exactly what it recorded
    /// and it was made while the file was quiet; and only once read whole.
    #[test]
    fn a_record_trusts_only_a_quiet_unmoved_file_of_its_own_declaration() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("state.db")).unwrap();
        let resources: Vec<Resource> = ["a", "b", "c"]
            .iter()
            .map(|n| datum_testkit::fake::fake_file(n, &format!("/{n}"), "x\n", &[]))
            .collect();
        let visited: Vec<&Resource> = resources.iter().collect();
        let meta = |sha: Option<&str>| FileMeta {
            size: 2,
            mtime_ns: 1_000_000_000_000,
            ctime_ns: 1_000_000_000_000,
            inode: 7,
            dev: 3,
            mode: 0o100644,
            uid: 0,
            gid: 0,
            sha256: sha.map(str::to_owned),
        };
        let sha = "ab".repeat(32);
        // a: quiet (verified 10 s after its change); b: racy (1 s after);
        // c: recorded without a content hash.
        let r = &resources;
        store
            .record_verified(
                &r[0].id,
                &r[0].declaration_hash,
                Some(&meta(Some(&sha))),
                1_010,
            )
            .unwrap();
        store
            .record_verified(
                &r[1].id,
                &r[1].declaration_hash,
                Some(&meta(Some(&sha))),
                1_001,
            )
            .unwrap();
        store
            .record_verified(&r[2].id, &r[2].declaration_hash, Some(&meta(None)), 1_010)
            .unwrap();
        store.flush().unwrap();
        let all = VerifiedRecords::all(Some(&store), &visited);
        let now = meta(None);
        assert_eq!(all.trusts(0, &r[0], &now), Some(meta(Some(&sha))));
        assert_eq!(all.trusts(1, &r[1], &now), None, "racy");
        assert_eq!(all.trusts(2, &r[2], &now), None, "no content hash");
        // Any field moved, or another declaration: read.
        let moved: Vec<fn(&mut FileMeta)> = vec![
            |m| m.size += 1,
            |m| m.mtime_ns += 1,
            |m| m.ctime_ns += 1,
            |m| m.inode += 1,
            |m| m.dev += 1,
            |m| m.mode = 0o100600,
            |m| m.uid = 1,
            |m| m.gid = 1,
        ];
        for change in moved {
            let mut now = meta(None);
            change(&mut now);
            assert_eq!(all.trusts(0, &r[0], &now), None, "{now:?}");
        }
        let mut redeclared = r[0].clone();
        redeclared.declaration_hash = "cd".repeat(32);
        assert_eq!(all.trusts(0, &redeclared, &now), None);
        // Records read on demand (a plan's) trust nothing.
        let on_demand = VerifiedRecords::OnDemand { asked: 0 };
        assert_eq!(on_demand.trusts(0, &r[0], &now), None);
    }

    /// A sensitive File's record holds keyed digests (`record_verified_of`)
    /// which vouch for it as a plain record does for any other; a record of
    /// it holding a plain hash (written before records were keyed) or keyed
    /// with another key vouches for nothing: the file is read, and recorded
    /// again keyed.
    #[test]
    fn a_sensitive_records_keyed_hashes_vouch_for_it_and_a_plain_one_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("state.db")).unwrap();
        let key = DigestKey::from_bytes([7; 32]);
        store.set_digest_key(Some(key.clone()));
        let mut secret = datum_testkit::fake::fake_file("s", "/s", "hunter2\n", &[]);
        secret.sensitive = true;
        secret.declaration_hash = "ef".repeat(32);
        let sha = secret.content.as_ref().unwrap().sha256.clone();
        let meta = |sha: Option<&str>| FileMeta {
            size: 8,
            mtime_ns: 1_000_000_000_000,
            ctime_ns: 1_000_000_000_000,
            inode: 7,
            dev: 3,
            mode: 0o100600,
            uid: 0,
            gid: 0,
            sha256: sha.map(str::to_owned),
        };
        let visited = [&secret];
        let stored = |store: &Store| store.last_verified(&secret.id).unwrap().unwrap();
        store
            .record_verified_of(
                &secret.id,
                true,
                &secret.declaration_hash,
                Some(&meta(Some(&sha))),
                1_010,
            )
            .unwrap();
        let kept = stored(&store);
        assert_eq!(kept.declaration_hash, key.digest(&secret.declaration_hash));
        assert_eq!(kept.meta.as_ref().unwrap().sha256, Some(key.digest(&sha)));
        // Vouches for the file, with its plain content hash for the pass.
        let mut all = VerifiedRecords::all(Some(&store), &visited);
        assert_eq!(all.trusts(0, &secret, &meta(None)), Some(meta(Some(&sha))));
        assert!(all.converged_is_recorded(0, &secret, Some(&meta(Some(&sha))), Some(&key)));
        let mut all = VerifiedRecords::all(Some(&store), &visited);
        let record = all.take(0, &secret.id, Some(&store), &visited).unwrap();
        assert_eq!(record.declaration_hash, secret.declaration_hash);
        assert!(same_verification(
            &record,
            &secret.declaration_hash,
            Some(&meta(Some(&sha)))
        ));
        // Read on demand (a plan's), the same.
        let mut on_demand = VerifiedRecords::OnDemand { asked: 0 };
        let record = on_demand
            .take(0, &secret.id, Some(&store), &visited)
            .unwrap();
        assert_eq!(record.declaration_hash, secret.declaration_hash);
        // A file whose content is not what the record's digest covers: its
        // hash stays keyed, matches nothing plain, and vouches for nothing.
        let other = "cd".repeat(32);
        store
            .record_verified_of(
                &secret.id,
                true,
                &secret.declaration_hash,
                Some(&meta(Some(&other))),
                1_010,
            )
            .unwrap();
        let mut all = VerifiedRecords::all(Some(&store), &visited);
        assert_eq!(all.trusts(0, &secret, &meta(None)), None);
        assert!(!all.converged_is_recorded(0, &secret, Some(&meta(Some(&sha))), Some(&key)));
        // ... but is still this very verification of that content.
        let mut all = VerifiedRecords::all(Some(&store), &visited);
        assert!(all.converged_is_recorded(0, &secret, Some(&meta(Some(&other))), Some(&key)));
        // Another key (the key file lost and made again): nothing vouched.
        store.flush().unwrap();
        let mut rekeyed = Store::open(&dir.path().join("state.db")).unwrap();
        rekeyed.set_digest_key(Some(DigestKey::from_bytes([8; 32])));
        let mut all = VerifiedRecords::all(Some(&rekeyed), &visited);
        assert_eq!(all.trusts(0, &secret, &meta(None)), None);
        let record = all.take(0, &secret.id, Some(&rekeyed), &visited).unwrap();
        assert_ne!(record.declaration_hash, secret.declaration_hash);
        drop(rekeyed);
        // A plain record (before records were keyed) is not held at all.
        store
            .record_verified(
                &secret.id,
                &secret.declaration_hash,
                Some(&meta(Some(&sha))),
                1_010,
            )
            .unwrap();
        let mut all = VerifiedRecords::all(Some(&store), &visited);
        assert_eq!(all.trusts(0, &secret, &meta(None)), None);
        assert!(!all.converged_is_recorded(0, &secret, Some(&meta(Some(&sha))), Some(&key)));
        let mut on_demand = VerifiedRecords::OnDemand { asked: 0 };
        assert_eq!(on_demand.take(0, &secret.id, Some(&store), &visited), None);
        // Without a key nothing is recorded, and the plain record goes.
        store.set_digest_key(None);
        store
            .record_verified_of(
                &secret.id,
                true,
                &secret.declaration_hash,
                Some(&meta(Some(&sha))),
                1_010,
            )
            .unwrap();
        assert_eq!(store.last_verified(&secret.id).unwrap(), None);
    }

    #[test]
    fn every_record_is_found_by_its_place_in_the_pass_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("state.db")).unwrap();
        let resources: Vec<Resource> = ["c", "a", "b"]
            .iter()
            .map(|n| datum_testkit::fake::fake_file(n, &format!("/{n}"), "x\n", &[]))
            .collect();
        let visited: Vec<&Resource> = resources.iter().collect();
        let hex = |d: u8| format!("{d:02x}").repeat(32);
        for (i, r) in resources.iter().enumerate().take(2) {
            store
                .record_verified(&r.id, &hex(i as u8), None, i as i64)
                .unwrap();
        }
        // A record of a resource this pass does not visit is not held.
        store
            .record_verified(&ResourceId::new("File", "gone"), &hex(9), None, 9)
            .unwrap();
        store.flush().unwrap();
        let mut all = VerifiedRecords::all(Some(&store), &visited);
        let VerifiedRecords::All(held) = &all else {
            panic!("all read")
        };
        assert_eq!(held.iter().filter(|h| h.is_some()).count(), 2);
        let take = |all: &mut VerifiedRecords, place: usize| {
            all.take(place, &visited[place].id, Some(&store), &visited)
                .map(|r| (r.declaration_hash, r.verified_at))
        };
        assert_eq!(take(&mut all, 1), Some((hex(1), 1)));
        assert_eq!(take(&mut all, 0), Some((hex(0), 0)));
        assert_eq!(take(&mut all, 0), None, "once");
        assert_eq!(take(&mut all, 2), None, "never verified");
    }
}
