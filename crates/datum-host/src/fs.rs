//! What the file-system operations share: the kind and metadata of an entry
//! ([`Stat`]), and hashing or reading an already opened regular file.
//!
//! The operations themselves live on [`crate::Located`] (one entry reached
//! through the boundary) and [`crate::Dir`]; every error carries the path
//! and the operation, so a caller can report it as one line. This module
//! must not open anything by path.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use datum_core::FileMeta;
use sha2::{Digest, Sha256};

use crate::HostError;

/// What an entry in the file system is, without following links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    File,
    Directory,
    Symlink,
    Fifo,
    Socket,
    BlockDevice,
    CharDevice,
}

impl FileKind {
    /// The word used in `Presence::OtherType` and in messages.
    pub fn word(self) -> &'static str {
        match self {
            FileKind::File => "file",
            FileKind::Directory => "directory",
            FileKind::Symlink => "symlink",
            FileKind::Fifo => "fifo",
            FileKind::Socket => "socket",
            FileKind::BlockDevice => "block device",
            FileKind::CharDevice => "character device",
        }
    }
}

/// The result of an `lstat`: the kind of entry and its metadata (without a
/// content hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub kind: FileKind,
    pub meta: FileMeta,
    /// How many names the inode has (`st_nlink`). A regular file with more
    /// than one is hard-linked: changing its owner or mode in place would
    /// change every name, so it is rewritten instead.
    pub links: u64,
}

fn nanos(secs: i64, nsecs: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsecs)
}

/// Whether an error means "nothing is there": the entry is missing, or a
/// parent component is not a directory (then nothing can be there either).
pub(crate) fn is_absent(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
    )
}

/// [`Stat`] from a raw `stat`, as `fstatat` (an entry's `lstat`) or `fstat`
/// (an open file's) returns it.
pub(crate) fn stat_of_raw(st: &rustix::fs::Stat) -> Stat {
    let kind = crate::boundary::kind_of(rustix::fs::FileType::from_raw_mode(st.st_mode));
    Stat {
        kind,
        meta: FileMeta {
            size: st.st_size as u64,
            mtime_ns: nanos(st.st_mtime, st.st_mtime_nsec as i64),
            ctime_ns: nanos(st.st_ctime, st.st_ctime_nsec as i64),
            inode: st.st_ino,
            dev: st.st_dev,
            mode: st.st_mode & 0o7777,
            uid: st.st_uid,
            gid: st.st_gid,
            sha256: None,
        },
        links: st.st_nlink,
    }
}

/// The length of an open file, which must be a regular file.
pub(crate) fn regular_len(file: &File, path: &Path, op: &'static str) -> Result<u64, HostError> {
    let m = file.metadata().map_err(|e| HostError::io(op, path, e))?;
    if !m.is_file() {
        return Err(HostError::io(
            op,
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"),
        ));
    }
    Ok(m.len())
}

/// Reads the rest of an open regular file of length `len`.
pub(crate) fn read_all(file: &mut File, path: &Path, len: u64) -> Result<Vec<u8>, HostError> {
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0).saturating_add(1));
    file.read_to_end(&mut bytes)
        .map_err(|e| HostError::io("read", path, e))?;
    Ok(bytes)
}

/// A regular file's SHA-256 and size. Its bytes are never kept: a pass
/// over 20,000 files must not hold them (the engine reads the few that
/// differ again when a person needs a text diff).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hashed {
    pub sha256: String,
    pub size: u64,
}

/// Hashes an open regular file (of length `expected` from its `fstat`) in
/// one streaming read; a file that grew meanwhile is hashed to its new end.
pub(crate) fn hash_open(file: &mut File, path: &Path, expected: u64) -> Result<Hashed, HostError> {
    let mut hasher = Sha256::new();
    let size = stream(file, path, expected, |chunk| hasher.update(chunk))?;
    Ok(Hashed {
        sha256: hex::encode(hasher.finalize()),
        size,
    })
}

/// The declared content a live file is compared with: its size and both
/// digests (see [`crate::Located::hash_expecting`]).
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    pub size: u64,
    pub sha256: &'a str,
    /// Lowercase hex BLAKE3.
    pub blake3: &'a str,
}

/// [`hash_open`] for a file expected to hold
/// `expected`: a file of the expected size is hashed with BLAKE3 (several
/// times faster than SHA-256 here), and when that matches, its SHA-256 is
/// the expected one (same bytes); only a file that differs is hashed with
/// SHA-256 (read again from the start). The result is the same as
/// [`hash_open`]'s either way.
pub(crate) fn hash_open_expecting(
    file: &mut File,
    path: &Path,
    len: u64,
    expected: Expected<'_>,
) -> Result<Hashed, HostError> {
    if len == expected.size {
        let mut hasher = blake3::Hasher::new();
        let size = stream(file, path, len, |chunk| {
            hasher.update(chunk);
        })?;
        if size == expected.size && hasher.finalize().to_hex().as_str() == expected.blake3 {
            return Ok(Hashed {
                sha256: expected.sha256.to_owned(),
                size,
            });
        }
        use std::io::Seek as _;
        file.seek(std::io::SeekFrom::Start(0))
            .map_err(|e| HostError::io("read", path, e))?;
    }
    hash_open(file, path, len)
}

/// Feeds all of `file` (from where it stands) to `f` through the thread's
/// read buffer, never holding more than that of it; returns the bytes
/// read. For a caller that digests a file another way (a Tree's BLAKE3 of
/// its own, a package's MD5, a blob's name): a live file someone else
/// owns may be of any size.
pub fn read_through(file: &mut File, path: &Path, f: impl FnMut(&[u8])) -> Result<u64, HostError> {
    stream(file, path, u64::MAX, f)
}

/// Feeds `file` to `f` through one buffer per thread (a fresh zeroed buffer
/// per file costs more than hashing a small file does); returns the bytes
/// read. `len` is the file's length from `fstat`: a short read that brings
/// the total to exactly that is the end of the file (a regular file's read
/// is short only at its end), which saves the final empty read, one system
/// call per file; a file that grew meanwhile is read to its new end.
fn stream(
    file: &mut File,
    path: &Path,
    len: u64,
    mut f: impl FnMut(&[u8]),
) -> Result<u64, HostError> {
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0u8; 128 * 1024]);
    }
    BUF.with(|cell| {
        let mut buf = cell.borrow_mut();
        let mut size: u64 = 0;
        loop {
            let n = match file.read(&mut buf) {
                Ok(0) => return Ok(size),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(HostError::io("read", path, e)),
            };
            f(&buf[..n]);
            size += n as u64;
            if n < buf.len() && size == len {
                return Ok(size);
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::Host;

    fn host_with(files: &[(&str, &[u8])]) -> (tempfile::TempDir, Host) {
        let dir = tempfile::tempdir().unwrap();
        for (name, bytes) in files {
            std::fs::write(dir.path().join(name), bytes).unwrap();
        }
        let host = Host::new(dir.path());
        (dir, host)
    }

    fn at(host: &Host, declared: &str) -> crate::Located {
        host.locate(&PathBuf::from(declared)).unwrap()
    }

    #[test]
    fn hashing_against_an_expectation_reads_blake3_first_and_sha256_on_a_difference() {
        let bytes = vec![7u8; 300_000];
        let (_dir, host) = host_with(&[("f", &bytes)]);
        let f = at(&host, "/f");
        let real_sha = hex::encode(Sha256::digest(&bytes));
        let real_b3 = blake3::hash(&bytes).to_hex().to_string();
        let planted = "00".repeat(32);
        let exp = |size, sha256, blake3| Expected {
            size,
            sha256,
            blake3,
        };
        // BLAKE3 matches: the expected SHA-256 is taken, not computed (the
        // planted value proves which way it went).
        let h = f.hash_expecting(exp(300_000, &planted, &real_b3)).unwrap();
        assert_eq!((h.sha256.as_str(), h.size), (planted.as_str(), 300_000));
        // Same size, other BLAKE3: the real SHA-256, read again.
        let other_b3 = blake3::hash(b"other").to_hex().to_string();
        let h = f.hash_expecting(exp(300_000, &planted, &other_b3)).unwrap();
        assert_eq!(h.sha256, real_sha);
        // Another size: SHA-256 at once.
        let h = f.hash_expecting(exp(5, &planted, &real_b3)).unwrap();
        assert_eq!((h.sha256.as_str(), h.size), (real_sha.as_str(), 300_000));
        assert_eq!(h.sha256, f.hash().unwrap().sha256);
    }

    #[test]
    fn lstat_reports_kinds_without_following_links() {
        let (dir, host) = host_with(&[("f", b"abc")]);
        std::os::unix::fs::symlink(dir.path().join("f"), dir.path().join("l")).unwrap();
        let f = at(&host, "/f").lstat().unwrap().unwrap();
        assert_eq!(f.kind, FileKind::File);
        assert_eq!(f.meta.size, 3);
        assert_eq!(
            at(&host, "/l").lstat().unwrap().unwrap().kind,
            FileKind::Symlink
        );
        assert_eq!(at(&host, "/missing").lstat().unwrap(), None);
        // A file used as a parent component: nothing can be there.
        assert_eq!(host.lstat(&PathBuf::from("/f/below")).unwrap(), None);
    }

    #[test]
    fn hashing_streams_small_and_large_files() {
        let data = vec![7u8; 200_000];
        let (_dir, host) = host_with(&[("small", b"hi\n"), ("big", &data), ("empty", b"")]);
        let h = at(&host, "/small").hash().unwrap();
        assert_eq!(
            h.sha256,
            "98ea6e4f216f2fb4b69fff9b3a44842c38686ca685f3f55dc48c5d3fb1107be4"
        );
        assert_eq!(h.size, 3);
        let h = at(&host, "/big").hash().unwrap();
        assert_eq!(h.size, 200_000);
        assert_eq!(h.sha256, datum_core::sha256_hex(&data));
        let h = at(&host, "/empty").hash().unwrap();
        assert_eq!((h.sha256, h.size), (datum_core::sha256_hex(b""), 0));
    }

    /// A file is never read whole beyond the limit its caller gives, and
    /// a regular file opened for streaming says its length.
    #[test]
    fn bounded_reads_stop_at_their_limit() {
        let (_dir, host) = host_with(&[("small", b"hello\n"), ("big", &[1u8; 5000])]);
        assert_eq!(
            at(&host, "/small").read_up_to(6).unwrap().as_deref(),
            Some(&b"hello\n"[..])
        );
        assert_eq!(at(&host, "/small").read_up_to(5).unwrap(), None);
        assert_eq!(at(&host, "/big").read_up_to(4999).unwrap(), None);
        let (mut file, len) = at(&host, "/big").open_file().unwrap();
        assert_eq!(len, 5000);
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).unwrap();
        assert_eq!(bytes.len(), 5000);
        // A file longer than its fstat said (grown while read) is hashed
        // whole, its bytes not kept.
        let (mut file, _) = at(&host, "/big").open_file().unwrap();
        let h = hash_open(&mut file, Path::new("/big"), 10).unwrap();
        assert_eq!(h.size, 5000);
        assert_eq!(h.sha256, datum_core::sha256_hex(&[1u8; 5000]));
    }

    #[test]
    fn reading_refuses_symlinks_and_names_the_path() {
        let (dir, host) = host_with(&[("f", b"x")]);
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("f"), dir.path().join("l")).unwrap();
        let err = at(&host, "/l").read().unwrap_err();
        assert_eq!(err.path(), Some(dir.path().join("l").as_path()));
        assert!(at(&host, "/d").hash().is_err(), "a directory is not hashed");
    }

    #[test]
    fn create_dir_sets_the_exact_mode_and_needs_its_parent() {
        let (dir, host) = host_with(&[]);
        at(&host, "/d").create_dir(0o2750, None, None).unwrap();
        assert_eq!(at(&host, "/d").lstat().unwrap().unwrap().meta.mode, 0o2750);
        match host.locate(&PathBuf::from("/no/such/d")).unwrap_err() {
            HostError::MissingParent { path, parent } => {
                assert_eq!(path, dir.path().join("no/such/d"));
                assert_eq!(parent, dir.path().join("no/such"));
            }
            other => panic!("unexpected {other}"),
        }
    }

    /// The owner of the folder above may swap the folder `create_dir` has
    /// just made for one of their own between the `mkdirat` and the open
    /// (here with `RENAME_EXCHANGE`, from another thread, at once after the
    /// folder appears): theirs never gets the declared owner or mode, and
    /// a refusal says what was found.
    #[test]
    fn create_dir_never_changes_a_folder_swapped_in_for_the_one_it_made() {
        use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
        let (dir, host) = host_with(&[]);
        let root = dir.path().to_path_buf();
        let theirs = crate::race::users_folder(&root);
        let mut race = crate::race::Race::exchanging(&root, "d");
        let (mut changed, mut refused) = (0, 0);
        while race.goes_on() {
            let made = race.armed(|| at(&host, "/d").create_dir(0o2750, Some(0), Some(0)));
            // The user's folder is the one holding the marker.
            let (user, ours) = if root.join("d/marker").exists() {
                (root.join("d"), root.join("theirs"))
            } else {
                (root.join("theirs"), root.join("d"))
            };
            let meta = std::fs::metadata(&user).unwrap();
            if meta.permissions().mode() & 0o7777 != 0o755 || meta.uid() != 1000 {
                changed += 1;
            }
            match made {
                Ok(()) => {}
                Err(e) => {
                    refused += 1;
                    assert!(
                        e.to_string().contains("refusing to use")
                            && e.to_string().contains("owned by uid 1000"),
                        "{e}"
                    );
                }
            }
            std::fs::remove_dir(&ours).unwrap();
            if user != theirs {
                std::fs::rename(&user, &theirs).unwrap();
            }
            crate::race::give_to_user(&theirs);
        }
        let (tries, swaps) = race.finish();
        assert_eq!(
            changed, 0,
            "{changed} of {tries} tries gave the user's folder the declared owner and mode ({swaps} swaps, {refused} refused)"
        );
        eprintln!("{tries} tries, {swaps} swaps, {refused} refused");
    }

    #[test]
    fn non_empty_directories_are_not_removed() {
        let (dir, host) = host_with(&[]);
        let d = dir.path().join("d");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("keep"), b"x").unwrap();
        assert!(matches!(
            at(&host, "/d").remove_dir().unwrap_err(),
            HostError::DirectoryNotEmpty { .. }
        ));
        assert!(d.join("keep").exists());
        std::fs::remove_file(d.join("keep")).unwrap();
        at(&host, "/d").remove_dir().unwrap();
        assert!(!d.exists());
    }

    #[test]
    fn set_metadata_applies_owner_then_mode_and_refuses_links() {
        let (dir, host) = host_with(&[("f", b"x")]);
        let f = at(&host, "/f");
        let seen = f.lstat().unwrap().unwrap();
        let me = seen.meta.clone();
        f.set_metadata(&seen, Some(me.uid), Some(me.gid), Some(0o4750))
            .unwrap();
        assert_eq!(f.lstat().unwrap().unwrap().meta.mode, 0o4750);
        std::os::unix::fs::symlink(dir.path().join("f"), dir.path().join("l")).unwrap();
        assert!(
            at(&host, "/l")
                .set_metadata(&seen, None, None, Some(0o600))
                .is_err()
        );
        assert_eq!(
            f.lstat().unwrap().unwrap().meta.mode,
            0o4750,
            "target untouched"
        );
    }

    #[test]
    fn set_metadata_refuses_a_hard_linked_file() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, host) = host_with(&[("f", b"x")]);
        let outside = tempfile::tempdir().unwrap();
        let other = outside.path().join("other-name");
        std::fs::hard_link(dir.path().join("f"), &other).unwrap();
        let f = at(&host, "/f");
        let before = f.lstat().unwrap().unwrap();
        assert_eq!(before.links, 2);
        let err = f
            .set_metadata(&before, None, None, Some(0o666))
            .unwrap_err();
        assert!(
            matches!(err, HostError::HardLinked { links: 2, .. }),
            "{err}"
        );
        assert_eq!(
            std::fs::metadata(&other).unwrap().permissions().mode() & 0o7777,
            before.meta.mode,
            "the other name keeps its mode"
        );
        std::fs::remove_file(&other).unwrap();
        let seen = f.lstat().unwrap().unwrap();
        f.set_metadata(&seen, None, None, Some(0o600)).unwrap();
        assert_eq!(f.lstat().unwrap().unwrap().meta.mode, 0o600);
    }

    #[test]
    fn set_metadata_changes_only_the_entry_looked_at() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, host) = host_with(&[("f", b"x"), ("g", b"#!/bin/sh")]);
        let f = at(&host, "/f");
        let seen = f.lstat().unwrap().unwrap();
        // Another file put in its place since: nothing is changed.
        std::fs::rename(dir.path().join("g"), dir.path().join("f")).unwrap();
        let err = f.set_metadata(&seen, None, None, Some(0o2775)).unwrap_err();
        assert!(matches!(err, HostError::Replaced { .. }), "{err}");
        let mode = |p: &str| {
            std::fs::metadata(dir.path().join(p))
                .unwrap()
                .permissions()
                .mode()
        };
        assert_ne!(mode("f") & 0o7777, 0o2775);
        // A folder looked at, a file there now: the same.
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let d = at(&host, "/d");
        let seen = d.lstat().unwrap().unwrap();
        std::fs::remove_dir(dir.path().join("d")).unwrap();
        std::fs::rename(dir.path().join("f"), dir.path().join("d")).unwrap();
        let err = d.set_metadata(&seen, None, None, Some(0o2775)).unwrap_err();
        assert!(
            err.to_string()
                .contains("the directory Datum looked at was replaced since by a file"),
            "{err}"
        );
        assert_ne!(mode("d") & 0o7777, 0o2775);
    }
}
