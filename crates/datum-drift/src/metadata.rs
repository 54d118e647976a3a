//! Metadata-first evaluation: whether a file can be trusted unread.
//!
//! A class with `content: metadata` skips reading a file whose size, mtime,
//! ctime, inode and device equal the values recorded at its last verified
//! apply (and whose mode and owner still match). ctime is the strong part:
//! user space cannot set it, so an edit that also restores the mtime still
//! moves it, unless the clock or the file system is tampered with. What this
//! misses, by design: any change that preserves all of them, until the next
//! full audit (`audit_every`).
//!
//! Owns: [`unchanged_since_verified`]. Must not: read content.

use datum_core::FileMeta;

/// True when `now` shows no sign of change since `recorded` (the metadata of
/// the last verified apply). A recorded value without a content hash is not
/// trusted: it proves nothing about content.
pub fn unchanged_since_verified(recorded: &FileMeta, now: &FileMeta) -> bool {
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

    #[test]
    fn any_moved_field_means_read_it() {
        let base = meta();
        assert!(unchanged_since_verified(
            &base,
            &FileMeta {
                sha256: None,
                ..meta()
            }
        ));
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
            assert!(!unchanged_since_verified(&base, &now));
        }
        let unhashed = FileMeta {
            sha256: None,
            ..meta()
        };
        assert!(!unchanged_since_verified(&unhashed, &meta()));
    }
}
