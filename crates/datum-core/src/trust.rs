//! Metadata-first evaluation: whether a file can be trusted unread.
//!
//! `datum check` (a class with `content: metadata`) and a pass asked to
//! (`datum plan`/`apply --trust-metadata`) skip reading a file whose size,
//! mtime, ctime, inode and device equal the values recorded at its last
//! verified apply (and whose mode and owner still match). ctime is the strong part:
//! user space cannot set it, so an edit that also restores the mtime still
//! moves it, unless the clock or the file system is tampered with. What this
//! misses, by design: any change that preserves all of them, until the next
//! full audit (`audit_every`) or the next pass that reads.
//!
//! One window remains, which git calls "racy clean": timestamps come from a
//! coarse clock, so a write in the same tick as the verification's read can
//! leave every field as it was while the content moved. A record whose file
//! changed within [`RACY_WINDOW_NS`] before its verification started is
//! therefore never trusted ([`FileMeta::quiet_at`]): the file is read until
//! its verification is recorded again once it has been quiet that long (by
//! the next apply, or by the first check that reads it and finds it as
//! declared: [`Trust::Racy`]).
//!
//! The same holds for a file whose metadata moved while its content stayed
//! (a hard link made to it, a `chmod` and back, a backup tool's `touch`):
//! it is read ([`Trust::Moved`]) and, found as declared, its verification
//! is recorded again, so one benign change costs one read, not a read by
//! every metadata pass until the next apply.
//!
//! Owns: [`trust`]. Must not: read content.

use crate::observed::FileMeta;
pub use crate::observed::RACY_WINDOW_NS;

/// What a metadata pass may conclude about a file before reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// Unchanged since its last verified apply: not read.
    Trusted,
    /// Its metadata equals the record, but the record was made while the
    /// file had just changed ([`FileMeta::quiet_at`]): read, and when it
    /// matches, its verification can be recorded again now that it is quiet.
    Racy,
    /// Its metadata moved since the record (of its current declaration, with
    /// a content hash) was made: read, and when it matches its declaration,
    /// its verification can be recorded again with the metadata it has now.
    Moved,
    /// Read: nothing recorded to compare with, or a record without a
    /// content hash (one that drift made untrusted until an apply).
    Read,
}

impl Trust {
    /// Whether a check that reads the file and finds it as declared records
    /// its verification again ([`Trust::Racy`], [`Trust::Moved`]).
    pub fn refreshable(self) -> bool {
        matches!(self, Trust::Racy | Trust::Moved)
    }
}

/// What `now` (the file's metadata) allows against `recorded`, the metadata
/// of the last verified apply, which started at `verified_at` (Unix
/// seconds). A record without a content hash proves nothing about content.
pub fn trust(recorded: &FileMeta, verified_at: i64, now: &FileMeta) -> Trust {
    if recorded.sha256.is_none() {
        Trust::Read
    } else if !same_as_recorded(recorded, now) {
        Trust::Moved
    } else if recorded.quiet_at(verified_at) {
        Trust::Trusted
    } else {
        Trust::Racy
    }
}

/// True when `now` equals `recorded` in every value a metadata check
/// compares, and `recorded` has a content hash.
fn same_as_recorded(recorded: &FileMeta, now: &FileMeta) -> bool {
    recorded.sha256.is_some()
        && recorded.size == now.size
        && recorded.mtime_ns == now.mtime_ns
        && recorded.ctime_ns == now.ctime_ns
        && recorded.inode == now.inode
        && recorded.dev == now.dev
        && recorded.mode == now.mode
        && recorded.uid == now.uid
        && recorded.gid == now.gid
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> FileMeta {
        FileMeta {
            size: 10,
            mtime_ns: 1,
            ctime_ns: 2,
            inode: 3,
            dev: 4,
            mode: 0o644,
            uid: 0,
            gid: 0,
            sha256: Some("ab".into()),
        }
    }

    /// Verified long after the file last changed (`meta()`'s times are ~0).
    const LATER: i64 = 1_000;

    #[test]
    fn any_moved_field_means_read_it_and_a_record_without_a_hash_proves_nothing() {
        let base = meta();
        let unhashed_now = FileMeta {
            sha256: None,
            ..meta()
        };
        assert_eq!(trust(&base, LATER, &unhashed_now), Trust::Trusted);
        let changes: Vec<fn(&mut FileMeta)> = vec![
            |m| m.size = 11,
            |m| m.mtime_ns = 9,
            |m| m.ctime_ns = 9,
            |m| m.inode = 9,
            |m| m.dev = 9,
            |m| m.mode = 0o600,
            |m| m.uid = 1,
            |m| m.gid = 1,
        ];
        for change in changes {
            let mut now = meta();
            change(&mut now);
            assert_eq!(trust(&base, LATER, &now), Trust::Moved);
            assert!(Trust::Moved.refreshable());
        }
        let unhashed = FileMeta {
            sha256: None,
            ..meta()
        };
        assert_eq!(trust(&unhashed, LATER, &meta()), Trust::Read);
        assert!(!Trust::Read.refreshable());
    }

    #[test]
    fn a_record_of_a_file_that_had_just_changed_is_not_trusted() {
        let at = |secs: i64, nanos: i64| secs * 1_000_000_000 + nanos;
        let changed_at = |ctime_ns: i64, mtime_ns: i64| FileMeta {
            ctime_ns,
            mtime_ns,
            ..meta()
        };
        // Verified at second 100: changed before 98 is quiet, later is not.
        for (ctime, mtime, want) in [
            (at(97, 999_999_999), at(97, 0), Trust::Trusted),
            (at(98, 0), at(97, 0), Trust::Racy),
            (at(99, 500), at(90, 0), Trust::Racy),
            (at(90, 0), at(100, 1), Trust::Racy), // an mtime set ahead counts too
            (at(100, 0), at(100, 0), Trust::Racy),
        ] {
            let recorded = changed_at(ctime, mtime);
            assert_eq!(
                trust(&recorded, 100, &recorded),
                want,
                "ctime {ctime} mtime {mtime}"
            );
        }
    }
}
