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

use datum_core::{FileMeta, Resource, ResourceId};
use datum_store::{Store, VerifiedRecord, VerifiedView};

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
        let mut places: Vec<(&ResourceId, usize)> = visited
            .iter()
            .enumerate()
            .map(|(i, r)| (&r.id, i))
            .collect();
        places.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let mut held: Vec<Option<Held>> = Vec::new();
        held.resize_with(visited.len(), || None);
        if let Some(store) = store {
            let read = store.each_verified(|view| {
                let id = (view.kind, view.name);
                if let Ok(at) =
                    places.binary_search_by(|(k, _)| (k.kind.as_str(), k.name.as_str()).cmp(&id))
                    && let Some((_, place)) = places.get(at)
                    && let Some(slot) = held.get_mut(*place)
                {
                    *slot = Some(Held::of(view));
                }
            });
            if read.is_err() {
                held.iter_mut().for_each(|slot| *slot = None);
            }
        }
        VerifiedRecords::All(held)
    }

    /// The record of a resource observed converged: an apply compares it
    /// to decide whether to record the verification again; a plan (reading
    /// on demand) reports it unchanged without asking the store.
    pub(crate) fn take_converged(
        &mut self,
        place: usize,
        id: &ResourceId,
        store: Option<&Store>,
        visited: &[&Resource],
    ) -> Option<VerifiedRecord> {
        match self {
            VerifiedRecords::OnDemand { .. } => None,
            VerifiedRecords::All(_) => self.take(place, id, store, visited),
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
                return store.and_then(|s| s.last_verified(id).ok().flatten());
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
    fn of(view: VerifiedView<'_>) -> Self {
        Held {
            declaration_hash: Hash::of(view.declaration_hash),
            sha256: view.sha256.map(Hash::of),
            meta: view.meta,
            verified_at: view.verified_at,
        }
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

/// A hash as the store keeps it: 64 lowercase hex digits (what Datum
/// writes) as their 32 bytes, anything else as it was written, so that the
/// text given back is always the text read.
enum Hash {
    Bytes([u8; 32]),
    Text(Box<str>),
}

impl Hash {
    fn of(text: &str) -> Self {
        let mut bytes = [0u8; 32];
        let lower_hex =
            text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if lower_hex && hex::decode_to_slice(text, &mut bytes).is_ok() {
            Hash::Bytes(bytes)
        } else {
            Hash::Text(text.into())
        }
    }

    fn into_text(self) -> String {
        match self {
            Hash::Bytes(bytes) => hex::encode(bytes),
            Hash::Text(text) => text.into_string(),
        }
    }
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
            assert_eq!(Held::of(view).into_record(), r);
        }
        assert!(matches!(Hash::of(&hex), Hash::Bytes(_)));
        assert!(matches!(Hash::of(&hex.to_uppercase()), Hash::Text(_)));
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
