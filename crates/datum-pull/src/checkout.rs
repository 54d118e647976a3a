//! A revision's files, written out of the cache into a folder of their own.
//!
//! The tree is listed (`git ls-tree -r`) and every blob streamed (`git
//! cat-file --batch`) into a [`TreeWriter`], byte for byte: no attribute,
//! filter, hook or line-ending rule applies, nothing is ever reached through
//! a link, and no `.git` can appear (the writer refuses that component in
//! any case, and fsck refused it at fetch). Submodules are not fetched; their
//! place is left as an empty folder. The checkout ends with a marker,
//! [`MARKER`], saying which commit it is: what [`deployed_revision`] reads.
//!
//! Owns the listing's parsing and the marker's format. Must not decide
//! where the checkout goes or whether it is deployed.

use std::ffi::OsStr;
use std::io::Read;
use std::path::Path;

use datum_host::{Dir, HostError};
use serde::{Deserialize, Serialize};

use crate::cache::Cache;
use crate::commit;
use crate::error::{PullError, Reason};
use crate::tree::{TreeWriter, TreeWritten};

/// The file at the top of every checkout that says which revision it is.
/// Hidden, so the manifest loader never reads it as part of the repository.
pub const MARKER: &str = ".datum-revision.json";
/// The marker's `format_version`.
const MARKER_FORMAT: u32 = 1;
/// The largest marker read.
const MARKER_LIMIT: u64 = 64 * 1024;
/// The largest link target written.
const LINK_LIMIT: u64 = 4096;

/// What a checkout's marker records: the deployed revision as other code
/// (the fleet report's "repository revision") reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeployedRevision {
    pub format_version: u32,
    /// The git commit (40 hex digits).
    pub commit: String,
    /// The commit's tree.
    pub tree: String,
    /// The branch or tag it was pulled from.
    #[serde(rename = "ref")]
    pub git_ref: String,
    /// The remote (credentials removed) or `bundle:FILE`.
    pub source: String,
    /// Who signed it (principal or OpenPGP user id) and with which key.
    pub signer: String,
    pub key: String,
    /// Unix seconds the checkout was written.
    pub checked_out_at: i64,
}

#[cfg(test)]
impl DeployedRevision {
    /// A marker for `commit` as `datum pull` writes one, for tests.
    pub(crate) fn for_test(commit: &str) -> Self {
        Self {
            format_version: MARKER_FORMAT,
            commit: commit.to_owned(),
            tree: "b".repeat(40),
            git_ref: "main".into(),
            source: "file:///srv/r.git".into(),
            signer: "alice@example.com".into(),
            key: "ED25519 SHA256:x".into(),
            checked_out_at: 1,
        }
    }
}

/// The revision deployed at `repository` (the link the agent reads, or a
/// checkout folder itself): the commit `datum pull` wrote there, read from
/// its marker. `None` when the folder is not a checkout made by `datum pull`
/// (a repository put there by hand), or cannot be read.
///
/// A caller that has pinned the repository (compiled it from the folder the
/// link pointed at, see [`datum_host::repo::pinned`]) passes that folder,
/// so the revision is the one its catalogue came from even if the link has
/// moved on since.
pub fn deployed_revision(repository: &Path) -> Option<DeployedRevision> {
    let folder = Dir::open_path(&datum_host::repo::pinned(repository).ok()?).ok()?;
    read_marker(&folder).ok().flatten()
}

/// The marker of a checkout folder; `None` when it has none.
pub fn read_marker(folder: &Dir) -> Result<Option<DeployedRevision>, HostError> {
    let marker = folder.entry(OsStr::new(MARKER));
    // Never through a link, and only a small regular file.
    match marker.lstat()? {
        Some(st) if st.kind == datum_host::FileKind::File && st.meta.size <= MARKER_LIMIT => {}
        _ => return Ok(None),
    }
    let bytes = marker.read()?;
    Ok(serde_json::from_slice::<DeployedRevision>(&bytes)
        .ok()
        .filter(|m| m.format_version == MARKER_FORMAT && commit::is_commit_id(&m.commit)))
}

/// One entry of a tree listing.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    File {
        path: Vec<u8>,
        id: String,
        executable: bool,
    },
    Link {
        path: Vec<u8>,
        id: String,
    },
    /// A submodule: only its place is written.
    Submodule {
        path: Vec<u8>,
    },
}

/// Reads `git ls-tree -r -z` output: `MODE TYPE ID\tPATH\0` per entry.
fn parse_listing(listing: &[u8]) -> Result<Vec<Entry>, String> {
    let mut entries = Vec::new();
    for record in listing.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        let tab = record
            .iter()
            .position(|b| *b == b'\t')
            .ok_or("a listing line without a tab")?;
        let (meta, path) = (&record[..tab], record[tab + 1..].to_vec());
        let meta = String::from_utf8_lossy(meta);
        let fields: Vec<&str> = meta.split(' ').collect();
        let [mode, kind, id] = fields.as_slice() else {
            return Err(format!("a listing line `{meta}`"));
        };
        if !commit::is_commit_id(id) {
            return Err(format!("a bad object id `{id}`"));
        }
        let id = (*id).to_owned();
        entries.push(match (*mode, *kind) {
            ("120000", "blob") => Entry::Link { path, id },
            ("160000", "commit") => Entry::Submodule { path },
            (m, "blob") if m.starts_with("100") => Entry::File {
                path,
                id,
                executable: m.len() == 6
                    && u32::from_str_radix(&m[3..], 8).is_ok_and(|p| p & 0o100 != 0),
            },
            (m, k) => return Err(format!("an entry of mode {m} and type {k}")),
        });
    }
    Ok(entries)
}

/// Writes the tree of `commit_id` into `into` (a fresh, empty folder), then
/// the marker, then makes it all durable. `progress` hears (files written,
/// files in all) now and then.
pub fn write(
    cache: &Cache,
    commit_id: &str,
    marker: &DeployedRevision,
    into: Dir,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<TreeWritten, PullError> {
    // A listing past the bound is the tree's doing (the same on every
    // host), not a failure of this one: refused as the revision's fault.
    let listing = cache.listing(commit_id).map_err(|e| match e {
        crate::git::GitError::TooLarge { limit, .. } => bad_tree(format!(
            "its tree lists more than {} MiB of paths (`git ls-tree -r`; some {} files at 100 bytes a path), more than datum pull writes as a checkout",
            limit >> 20,
            limit / 100
        )),
        other => PullError::Git(other),
    })?;
    let entries =
        parse_listing(&listing).map_err(|detail| bad_tree(format!("git ls-tree gave {detail}")))?;
    if let Some(reserved) = entries.iter().find(|e| top_path(e) == MARKER.as_bytes()) {
        return Err(bad_tree(format!(
            "it holds `{}`, a name datum pull reserves for its own marker",
            String::from_utf8_lossy(top_path(reserved))
        )));
    }
    let total = entries.len() as u64;
    let ids: Vec<String> = entries
        .iter()
        .filter_map(|e| match e {
            Entry::File { id, .. } | Entry::Link { id, .. } => Some(id.clone()),
            Entry::Submodule { .. } => None,
        })
        .collect();
    let mut objects = cache.reader().read_objects(ids)?;
    let mut writer = TreeWriter::new(into);
    let refused = |e: HostError| match &e {
        // A path the writer will not write is the tree's fault, and so is
        // a name no file system here holds (over 255 bytes), which git
        // takes: the same on every host, not a passing failure.
        HostError::Io { source, .. }
            if matches!(
                source.kind(),
                std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidFilename
            ) =>
        {
            bad_tree(e.to_string())
        }
        _ => PullError::Host(e),
    };
    for (done, entry) in entries.iter().enumerate() {
        match entry {
            Entry::File {
                path, executable, ..
            } => {
                objects
                    .next(|header, content| {
                        expect_blob(header)?;
                        writer.file(path, *executable, content)
                    })
                    .map_err(|e| match e {
                        crate::git::GitError::Host(h) => refused(h),
                        other => PullError::Git(other),
                    })?;
            }
            Entry::Link { path, .. } => {
                let target = objects.next(|header, content| {
                    expect_blob(header)?;
                    let mut target = Vec::new();
                    content
                        .take(LINK_LIMIT + 1)
                        .read_to_end(&mut target)
                        .map_err(|e| HostError::io("read", Path::new(&header.id), e))?;
                    Ok(target)
                })?;
                let target = target.unwrap_or_default();
                if target.len() as u64 > LINK_LIMIT {
                    return Err(bad_tree(format!(
                        "the link {} points at a path longer than {LINK_LIMIT} bytes",
                        String::from_utf8_lossy(path)
                    )));
                }
                writer.symlink(path, &target).map_err(refused)?;
            }
            Entry::Submodule { path } => writer.dir(path).map_err(refused)?,
        }
        let done = done as u64 + 1;
        if done.is_multiple_of(256) || done == total {
            progress(done, total);
        }
    }
    objects.finish()?;
    let (root, written) = writer.finish();
    let json = serde_json::to_vec_pretty(marker).map_err(|e| {
        PullError::Host(HostError::io(
            "write",
            root.path().join(MARKER),
            std::io::Error::other(e),
        ))
    })?;
    crate::tree::write_new(&root.entry(OsStr::new(MARKER)), 0o644, &mut &json[..])?;
    root.sync_filesystem()?;
    Ok(written)
}

fn top_path(e: &Entry) -> &[u8] {
    match e {
        Entry::File { path, .. } | Entry::Link { path, .. } | Entry::Submodule { path } => path,
    }
}

fn expect_blob(header: &crate::git::ObjectHeader) -> Result<(), HostError> {
    if header.kind == "blob" {
        Ok(())
    } else {
        Err(HostError::io(
            "read",
            Path::new(&header.id),
            std::io::Error::other(format!("expected a blob, git gave a {}", header.kind)),
        ))
    }
}

fn bad_tree(detail: String) -> PullError {
    // The revision is filled in by the caller, which knows it.
    PullError::Refused(Box::new(crate::error::Refusal {
        revision: String::new(),
        git_ref: String::new(),
        source: String::new(),
        deployed: None,
        reason: Reason::BadTree { detail },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_becomes_files_links_and_submodule_places() {
        let id = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391";
        let listing = format!(
            "100644 blob {id}\tdatum.yaml\0100755 blob {id}\tbase/run sh\0120000 blob {id}\tbase/link\0160000 commit {id}\tvendor/mod\0"
        );
        let entries = parse_listing(listing.as_bytes()).unwrap();
        assert_eq!(
            entries,
            vec![
                Entry::File {
                    path: b"datum.yaml".to_vec(),
                    id: id.into(),
                    executable: false
                },
                Entry::File {
                    path: b"base/run sh".to_vec(),
                    id: id.into(),
                    executable: true
                },
                Entry::Link {
                    path: b"base/link".to_vec(),
                    id: id.into()
                },
                Entry::Submodule {
                    path: b"vendor/mod".to_vec()
                },
            ]
        );
        assert!(parse_listing(format!("040000 tree {id}\tdir\0").as_bytes()).is_err());
        assert!(parse_listing(b"100644 blob zz\tx\0").is_err());
        assert!(parse_listing(b"garbage\0").is_err());
    }

    #[test]
    fn a_marker_is_read_back_and_a_foreign_one_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let folder = Dir::open_path(dir.path()).unwrap();
        assert_eq!(read_marker(&folder).unwrap(), None);
        assert_eq!(deployed_revision(dir.path()), None);
        let marker = DeployedRevision::for_test(&"a".repeat(40));
        std::fs::write(
            dir.path().join(MARKER),
            serde_json::to_vec(&marker).unwrap(),
        )
        .unwrap();
        assert_eq!(deployed_revision(dir.path()), Some(marker.clone()));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        assert_eq!(deployed_revision(&link), Some(marker.clone()));
        let json = serde_json::to_string(&marker).unwrap();
        assert!(json.contains("\"ref\":\"main\""), "{json}");
        std::fs::write(
            dir.path().join(MARKER),
            json.replace(&"a".repeat(40), "HEAD"),
        )
        .unwrap();
        assert_eq!(deployed_revision(dir.path()), None);
    }
}
