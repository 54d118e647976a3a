//! Remembered content hashes of repository source files, so that compiling an
//! unchanged repository does not read and hash every `source:` file again
//! (20,000 files, 282 MB, on every `plan`, `apply` and `check`).
//!
//! This module owns the cache key ([`FileKey`]: size, mtime and ctime in
//! nanoseconds, inode, device), the [`SourceHashes`] trait the compiler asks,
//! and one implementation kept in a small text file ([`HashCacheFile`]). It
//! must not decide where the file lives (the CLI does: next to the state
//! store) and must not be trusted for writing: `datum_host::repo::content_bytes`
//! hashes the bytes it is about to write and refuses them when they differ
//! from the catalogue's hash, cache or not.
//!
//! Why the key can be trusted: a file's content cannot change without its
//! ctime changing, and no process can set ctime (`utimensat` moves mtime and
//! atime, and ctime to *now* with them); an edit that keeps the size, the
//! mtime (restored with `touch -d`) and the inode still moves ctime. Git's
//! index makes the same bet for `git status`. What defeats it: setting the
//! system clock back before an edit, or writing to the block device under the
//! filesystem; both need root on the machine holding the repository. One
//! window remains, which git calls "racy clean": timestamps are taken from a
//! coarse clock, so a write in the same tick as the hashing can leave every
//! field as it was. A file whose ctime or mtime is within [`RACY_WINDOW_NS`]
//! of the moment it was hashed is therefore never recorded: it is hashed
//! again next time, until it has been quiet for that long.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::sync::Mutex;

/// A hash computed this close (in nanoseconds) after the file's last change
/// is not remembered (see the module documentation).
pub const RACY_WINDOW_NS: i64 = datum_core::observed::RACY_WINDOW_NS;

/// The first line of a cache file; anything else is ignored (and rewritten).
/// v3: each line starts with its own checksum (a cache of v2, whose lines
/// carry none, is read as empty and every source hashed once again).
const HEADER: &str = "datum source hashes v3";

/// What must be unchanged for a remembered hash to stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileKey {
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub inode: u64,
    pub device: u64,
}

impl FileKey {
    /// The key of an open file's metadata (`fstat` before reading, so a change
    /// during the read moves ctime past the recorded value).
    pub fn of(meta: &std::fs::Metadata) -> Self {
        // i64 nanoseconds reach the year 2262.
        let ns = |secs: i64, nanos: i64| secs.saturating_mul(1_000_000_000).saturating_add(nanos);
        Self {
            size: meta.size(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
            inode: meta.ino(),
            device: meta.dev(),
        }
    }

    /// Whether the file changed so recently (relative to `now_ns`) that a
    /// later write could still share its timestamps.
    pub fn is_racy(&self, now_ns: i64) -> bool {
        now_ns.saturating_sub(self.ctime_ns.max(self.mtime_ns)) < RACY_WINDOW_NS
    }
}

impl From<datum_host::repo::EntryKey> for FileKey {
    fn from(k: datum_host::repo::EntryKey) -> Self {
        let datum_host::repo::EntryKey {
            size,
            mtime_ns,
            ctime_ns,
            inode,
            device,
        } = k;
        FileKey {
            size,
            mtime_ns,
            ctime_ns,
            inode,
            device,
        }
    }
}

/// The two digests of a source file's bytes: SHA-256 (the checksum of
/// record) and BLAKE3 (what `datum check` compares live files by).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceDigests {
    pub sha256: [u8; 32],
    pub blake3: [u8; 32],
}

impl SourceDigests {
    pub fn sha256_hex(&self) -> String {
        hex::encode(self.sha256)
    }

    pub fn blake3_hex(&self) -> String {
        hex::encode(self.blake3)
    }
}

/// Where the compiler looks up and records source hashes. Shared by the
/// threads that hash content, hence `Sync`.
pub trait SourceHashes: Sync {
    /// The digests remembered for `path` under exactly `key`.
    fn get(&self, path: &Path, key: &FileKey) -> Option<SourceDigests>;
    /// Remembers `digests` for `path` under `key`.
    fn put(&self, path: &Path, key: FileKey, digests: SourceDigests);
    /// Sources will be asked for soon: a cache may read what it remembers
    /// now (the compile asks on a thread of its own while it checks).
    fn prepare(&self) {}
    /// Every source of the compile is hashed: nothing is asked for again
    /// until the next compile, so a cache may let go of what it read.
    fn hashed_all(&self) {}
    /// `path` is a sensitive resource's source: nothing of it may be
    /// remembered (its plain digests would let whoever reads the cache
    /// confirm a guessed secret), and what was is dropped. The compile
    /// hashes it without the cache.
    fn forget(&self, _path: &Path) {}
}

/// [`SourceHashes`] kept in a text file: a header line, then one line per
/// file: `crc32 sha256 blake3 size mtime_ns ctime_ns inode device path`,
/// separated by tabs (the path last and whole), `crc32` being 8 hex digits
/// of the CRC-32 of the rest of the line (after its tab). A missing,
/// unreadable or foreign file is an empty cache; lines that do not parse, or
/// whose checksum does not match, are dropped: a damaged entry is never
/// trusted, its source is hashed again. The CRC finds damage on disk, not a
/// forgery: whoever may write the file may write its checksums (as for the
/// catalogue snapshot's records), and the bytes a pass writes are verified
/// against their SHA-256 anyway (`datum_host::repo::content_bytes`).
#[derive(Debug)]
pub struct HashCacheFile {
    /// The private folder it lives in (`None`: a folder that is missing or
    /// not private; then nothing is read or written) and its name there.
    dir: Option<(datum_host::PrivateDir, std::ffi::OsString)>,
    /// What the file held, sorted by path (its bytes), read when first asked
    /// for (a compile that hashes no `source:` file, a repository of Trees,
    /// never reads it): then read under a shared lock by every hashing
    /// thread, and let go when the compile has hashed everything and
    /// recorded nothing (read again if asked again). Digests are bytes, not
    /// hex, and the list is exactly sized: 20,000 entries cost about 3 MB
    /// plus their paths.
    known: std::sync::RwLock<Option<Vec<Entry>>>,
    /// Recorded during this pass; looked up only after a save and reload (a
    /// pass hashes each source once, so it never asks for what it recorded).
    recorded: Mutex<Vec<Entry>>,
    /// What [`SourceHashes::hashed_all`] does with what was recorded.
    after_hashing: AfterHashing,
    /// What [`AfterHashing::Save`] wrote when every source was hashed,
    /// waiting for its commit ([`HashCacheFile::save`] or
    /// [`HashCacheFile::write_unsynced`]): the compile goes on meanwhile.
    written: Mutex<Option<datum_host::Unsynced>>,
    /// Paths the file held that must not be remembered
    /// ([`SourceHashes::forget`]): left out when it is written again.
    forgotten: Mutex<Vec<Box<Path>>>,
}

type Entry = (Box<Path>, FileKey, SourceDigests);

/// What a [`HashCacheFile`] does with the hashes it recorded once the
/// compile has hashed every source ([`SourceHashes::hashed_all`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterHashing {
    /// Keeps them until the caller calls [`HashCacheFile::save`].
    Keep,
    /// Writes them back at once (in full, to a temporary file, made durable
    /// and put in place by the caller's [`HashCacheFile::save`] or the
    /// commit of its [`HashCacheFile::write_unsynced`]; dropped unsaved
    /// otherwise) and lets go of everything: the compile builds its
    /// catalogue without them (100,000 recorded sources held until a save
    /// after the compile were 20 MiB of its peak).
    Save,
    /// Lets go of them: nothing may be written (a dry run on a host Datum
    /// has never managed leaves no file behind).
    Forget,
}

impl HashCacheFile {
    /// Reads the cache at `path` (empty when it cannot be read).
    pub fn load(path: &Path) -> Self {
        Self::load_from(
            datum_host::PrivateDir::open_parent_of(path, false)
                .ok()
                .flatten(),
        )
    }

    /// Reads the cache `name` in Datum's private folder `dir`.
    pub fn load_in(dir: &datum_host::PrivateDir, name: &std::ffi::OsStr) -> Self {
        Self::load_from(Some((dir.clone(), name.to_owned())))
    }

    fn load_from(dir: Option<(datum_host::PrivateDir, std::ffi::OsString)>) -> Self {
        Self {
            dir,
            known: std::sync::RwLock::new(None),
            recorded: Mutex::new(Vec::new()),
            after_hashing: AfterHashing::Keep,
            written: Mutex::new(None),
            forgotten: Mutex::new(Vec::new()),
        }
    }

    /// The cache, written from now on as `name` in Datum's private folder
    /// `dir`: for one loaded where that folder did not exist yet, which the
    /// caller made once the compile succeeded (the first apply on a bare
    /// root). What was recorded is kept; what was read is let go (read from
    /// `dir` if asked for again).
    pub fn placed_in(mut self, dir: &datum_host::PrivateDir, name: &std::ffi::OsStr) -> Self {
        self.dir = Some((dir.clone(), name.to_owned()));
        *self
            .known
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        self
    }

    /// The cache, doing `after` once every source is hashed ([`AfterHashing`];
    /// [`AfterHashing::Keep`] unless told).
    pub fn after_hashing(mut self, after: AfterHashing) -> Self {
        self.after_hashing = after;
        self
    }

    /// `f` of the remembered entries, read from the file the first time.
    fn with_known<R>(&self, f: impl FnOnce(&[Entry]) -> R) -> R {
        use std::sync::PoisonError;
        {
            let known = self.known.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(entries) = known.as_deref() {
                return f(entries);
            }
        }
        let mut known = self.known.write().unwrap_or_else(PoisonError::into_inner);
        f(known.get_or_insert_with(|| read_entries(self.dir.as_ref())))
    }

    /// How many files are remembered (loaded and recorded since).
    pub fn len(&self) -> usize {
        self.with_known(<[Entry]>::len) + self.recorded.lock().map_or(0, |r| r.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the cache back when anything was recorded since it was loaded:
    /// to a temporary file renamed over the old one, so a reader never sees
    /// half a cache. Entries for files that no longer exist are dropped (a
    /// file hashed by this pass is not looked at again).
    pub fn save(&self) -> std::io::Result<()> {
        match self.write_unsynced()? {
            Some(written) => written.commit().map_err(std::io::Error::other),
            None => Ok(()),
        }
    }

    /// [`HashCacheFile::save`] but for its last step: the cache written in
    /// full to a temporary file, durable and in place when the
    /// [`datum_host::Unsynced`] is committed (which the caller may leave to
    /// another thread); `None` when nothing was recorded. What
    /// [`AfterHashing::Save`] already wrote is handed over as it is, or,
    /// when more was recorded since, committed first and written again with
    /// the rest.
    pub fn write_unsynced(&self) -> std::io::Result<Option<datum_host::Unsynced>> {
        let pending = self
            .written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(written) = pending {
            if self.recorded.lock().is_ok_and(|r| r.is_empty()) {
                return Ok(Some(written));
            }
            written.commit().map_err(std::io::Error::other)?;
        }
        self.write_recorded()
    }

    /// What was recorded and what the file holds, written to a temporary
    /// file; `None` when nothing was recorded.
    fn write_recorded(&self) -> std::io::Result<Option<datum_host::Unsynced>> {
        let recorded = match self.recorded.lock() {
            Ok(r) => r,
            Err(poisoned) => poisoned.into_inner(),
        };
        let forgotten = match self.forgotten.lock() {
            Ok(f) => f,
            Err(poisoned) => poisoned.into_inner(),
        };
        if recorded.is_empty() && forgotten.is_empty() {
            return Ok(None);
        }
        let Some((dir, name)) = &self.dir else {
            return Err(std::io::Error::from(std::io::ErrorKind::NotFound));
        };
        self.with_known(|known| {
            // Recorded entries first, so they win over what was loaded.
            let mut all: Vec<(&Entry, bool)> = recorded
                .iter()
                .map(|e| (e, true))
                .chain(known.iter().map(|e| (e, false)))
                .collect();
            all.sort_by(|a, b| path_bytes(&a.0.0).cmp(path_bytes(&b.0.0)));
            all.dedup_by(|a, b| a.0.0 == b.0.0);
            all.retain(|(e, _)| !forgotten.contains(&e.0));
            // A fresh temporary file per save (two passes saving at once
            // never write into the same one), renamed into Datum's private
            // folder; written line by line (100,000 sources are 16 MB).
            dir.write_unsynced(name, |file| {
                use std::io::Write as _;
                let mut out = std::io::BufWriter::new(file);
                writeln!(out, "{HEADER}")?;
                let mut line = String::new();
                for ((path, key, digests), hashed_now) in all {
                    let Some(p) = path.to_str() else { continue };
                    if !hashed_now && datum_host::repo::symlink_metadata(path).is_err() {
                        continue;
                    }
                    entry_line(&mut line, p, key, digests);
                    writeln!(out, "{:08x}\t{line}", crc32fast::hash(line.as_bytes()))?;
                }
                out.flush()
            })
            .map(Some)
            .map_err(std::io::Error::other)
        })
    }

    /// Lets go of what was read and what was recorded.
    fn let_go(&self) {
        use std::sync::PoisonError;
        *self.known.write().unwrap_or_else(PoisonError::into_inner) = None;
        *self.recorded.lock().unwrap_or_else(PoisonError::into_inner) = Vec::new();
    }
}

impl SourceHashes for HashCacheFile {
    fn prepare(&self) {
        self.with_known(|_| ());
    }

    fn get(&self, path: &Path, key: &FileKey) -> Option<SourceDigests> {
        self.with_known(|known| {
            let i = known
                .binary_search_by(|e| path_bytes(&e.0).cmp(path_bytes(path)))
                .ok()?;
            let (_, k, digests) = known.get(i)?;
            (k == key).then_some(*digests)
        })
    }

    fn forget(&self, path: &Path) {
        let known = self.with_known(|known| {
            known
                .binary_search_by(|e| path_bytes(&e.0).cmp(path_bytes(path)))
                .is_ok()
        });
        if known && let Ok(mut forgotten) = self.forgotten.lock() {
            forgotten.push(path.into());
        }
    }

    fn put(&self, path: &Path, key: FileKey, digests: SourceDigests) {
        // A path that cannot be written on one line is simply not cached.
        if path.to_str().is_none_or(|p| p.contains(['\n', '\r'])) {
            return;
        }
        if let Ok(mut recorded) = self.recorded.lock() {
            recorded.push((path.into(), key, digests));
        }
    }

    /// With nothing recorded there is nothing to write back: what was read
    /// (about 4 MB for 20,000 sources) is let go before the catalogue is
    /// built. What was recorded is kept, saved or forgotten as the cache was
    /// told ([`AfterHashing`]).
    fn hashed_all(&self) {
        let nothing_recorded = self.recorded.lock().is_ok_and(|r| r.is_empty())
            && self.forgotten.lock().is_ok_and(|f| f.is_empty());
        match self.after_hashing {
            _ if nothing_recorded => self.let_go(),
            AfterHashing::Keep => {}
            // One that cannot be written keeps what it recorded: the caller's
            // own `save` tries again and says why it failed.
            AfterHashing::Save => {
                if let Ok(written) = self.write_recorded() {
                    *self
                        .written
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = written;
                    self.let_go();
                }
            }
            AfterHashing::Forget => self.let_go(),
        }
    }
}

/// An entry's line but for its checksum, written into `line` (cleared
/// first): `sha256 blake3 size mtime_ns ctime_ns inode device path`.
fn entry_line(line: &mut String, path: &str, key: &FileKey, digests: &SourceDigests) {
    use std::fmt::Write as _;
    line.clear();
    // Writing to a String cannot fail.
    let _ = write!(
        line,
        "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{path}",
        digests.sha256_hex(),
        digests.blake3_hex(),
        key.size,
        key.mtime_ns,
        key.ctime_ns,
        key.inode,
        key.device
    );
}

/// The entry of a cache line (without its line end), `None` when it does
/// not parse or its checksum is not the CRC-32 of the rest of the line.
/// Read as bytes, the fields of fixed width (the checksum, the digests) by
/// their place: only the numbers are searched for their ends, and the path
/// alone is checked as UTF-8 (20,000 lines are read by every compile).
fn parse_line(line: &[u8]) -> Option<Entry> {
    let (crc, rest) = fixed(line, 8)?;
    let mut written = [0u8; 4];
    hex::decode_to_slice(crc, &mut written).ok()?;
    if u32::from_be_bytes(written) != crc32fast::hash(rest) {
        return None;
    }
    let mut digests = SourceDigests {
        sha256: [0; 32],
        blake3: [0; 32],
    };
    let (sha256, rest) = fixed(rest, 64)?;
    hex::decode_to_slice(sha256, &mut digests.sha256).ok()?;
    let (blake3, rest) = fixed(rest, 64)?;
    hex::decode_to_slice(blake3, &mut digests.blake3).ok()?;
    let (size, rest) = split_tab(rest)?;
    let (mtime_ns, rest) = split_tab(rest)?;
    let (ctime_ns, rest) = split_tab(rest)?;
    let (inode, rest) = split_tab(rest)?;
    let (device, path) = split_tab(rest)?;
    let key = FileKey {
        size: number(size)?,
        mtime_ns: number(mtime_ns)?,
        ctime_ns: number(ctime_ns)?,
        inode: number(inode)?,
        device: number(device)?,
    };
    let path = std::str::from_utf8(path).ok().filter(|p| !p.is_empty())?;
    Some((Path::new(path).into(), key, digests))
}

/// `bytes`' first `width` bytes and what follows the tab after them
/// (`None` when no tab is there).
fn fixed(bytes: &[u8], width: usize) -> Option<(&[u8], &[u8])> {
    (bytes.get(width) == Some(&b'\t')).then_some(())?;
    Some((bytes.get(..width)?, bytes.get(width + 1..)?))
}

/// `bytes` before its first tab and after it.
fn split_tab(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = bytes.iter().position(|&b| b == b'\t')?;
    Some((bytes.get(..at)?, bytes.get(at + 1..)?))
}

/// The number written in `field` (decimal digits, a `-` before a time
/// before 1970), as `str::parse` reads it; `None` for anything else, bytes
/// that are not UTF-8 included, or past `T`. std's parser rather than one
/// of our own: it costs about 10 M instructions more for the 20,000 lines
/// of the standard estate's cache (most of it the UTF-8 check), 0.3 % of a
/// `plan --recompile`.
fn number<T: std::str::FromStr>(field: &[u8]) -> Option<T> {
    std::str::from_utf8(field).ok()?.parse().ok()
}

/// The entries of the cache file `name` in `dir` (none when it cannot be
/// read or is foreign), sorted by path, one per path.
fn read_entries(dir: Option<&(datum_host::PrivateDir, std::ffi::OsString)>) -> Vec<Entry> {
    use std::io::BufRead as _;
    let mut known: Vec<Entry> = Vec::new();
    // Line by line through one small buffer: the file (about 200 bytes a
    // source) is never held whole.
    if let Some((dir, name)) = dir
        && let Ok(Some(file)) = dir.open_read(name)
    {
        let mut reader = std::io::BufReader::new(file);
        let mut line: Vec<u8> = Vec::new();
        if reader.read_until(b'\n', &mut line).is_ok() && without_end(&line) == HEADER.as_bytes() {
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => known.extend(parse_line(without_end(&line))),
                }
            }
        }
    }
    known.shrink_to_fit();
    known.sort_by(|a, b| path_bytes(&a.0).cmp(path_bytes(&b.0)));
    // Equal as bytes, the order sorted in (`Path`'s own equality compares
    // component by component: 11 M instructions for 20,000 entries).
    known.dedup_by(|a, b| path_bytes(&a.0) == path_bytes(&b.0));
    known
}

/// `line` without the line ends (`\n`, `\r`) at its end.
fn without_end(line: &[u8]) -> &[u8] {
    let end = line
        .iter()
        .rposition(|&b| b != b'\n' && b != b'\r')
        .map_or(0, |i| i + 1);
    line.get(..end).unwrap_or_default()
}

/// A path's bytes: the order the remembered entries are sorted and searched
/// in (comparing bytes, not `Path`'s components one by one, which was 2 % of
/// the samples of a `plan --recompile` of 20,000 Files).
fn path_bytes(path: &Path) -> &[u8] {
    use std::os::unix::ffi::OsStrExt as _;
    path.as_os_str().as_bytes()
}

/// Now, in nanoseconds since the epoch (0 if the clock is before it, which
/// makes every file look old: the racy check then never skips, and the ctime
/// comparison alone stands).
pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(size: u64) -> FileKey {
        FileKey {
            size,
            mtime_ns: 1,
            ctime_ns: 2,
            inode: 3,
            device: 4,
        }
    }

    #[test]
    fn a_cache_without_a_folder_is_written_where_it_is_placed() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::write(&a, "a").unwrap();
        let digests = SourceDigests {
            sha256: [1; 32],
            blake3: [2; 32],
        };
        let made = dir.path().join("made");
        let cache =
            HashCacheFile::load(&made.join("source-hashes")).after_hashing(AfterHashing::Keep);
        cache.put(&a, key(1), digests);
        cache.hashed_all();
        std::fs::create_dir(&made).unwrap();
        std::fs::set_permissions(&made, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        let (folder, name) =
            datum_host::PrivateDir::open_parent_of(&made.join("source-hashes"), false)
                .unwrap()
                .unwrap();
        cache.placed_in(&folder, &name).save().unwrap();
        let read = HashCacheFile::load(&made.join("source-hashes"));
        assert_eq!(read.get(&a, &key(1)), Some(digests));
    }

    #[test]
    fn what_was_read_is_let_go_after_hashing_unless_something_is_to_be_written() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, "a").unwrap();
        std::fs::write(&b, "b").unwrap();
        let cache_path = dir.path().join("source-hashes");
        let digests = SourceDigests {
            sha256: [1; 32],
            blake3: [2; 32],
        };
        let first = HashCacheFile::load(&cache_path);
        first.put(&a, key(1), digests);
        first.save().unwrap();
        let read = |c: &HashCacheFile| c.known.read().unwrap().as_ref().map(Vec::len);

        let quiet = HashCacheFile::load(&cache_path);
        assert_eq!(quiet.get(&a, &key(1)), Some(digests));
        quiet.hashed_all();
        assert_eq!(read(&quiet), None, "nothing recorded: let go");
        assert_eq!(
            quiet.get(&a, &key(1)),
            Some(digests),
            "read again when asked"
        );

        let busy = HashCacheFile::load(&cache_path);
        assert_eq!(busy.get(&a, &key(1)), Some(digests));
        busy.put(&b, key(2), digests);
        busy.hashed_all();
        assert_eq!(read(&busy), Some(1), "kept for the save");
        busy.save().unwrap();
        let after = HashCacheFile::load(&cache_path);
        assert_eq!(after.get(&a, &key(1)), Some(digests));
        assert_eq!(after.get(&b, &key(2)), Some(digests));
    }

    #[test]
    fn a_cache_told_to_save_writes_when_everything_is_hashed_and_keeps_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, gone) = (
            dir.path().join("a"),
            dir.path().join("b"),
            dir.path().join("gone"),
        );
        for f in [&a, &b, &gone] {
            std::fs::write(f, "x").unwrap();
        }
        let cache_path = dir.path().join("source-hashes");
        let digests = SourceDigests {
            sha256: [3; 32],
            blake3: [4; 32],
        };
        let first = HashCacheFile::load(&cache_path);
        first.put(&a, key(1), digests);
        first.put(&gone, key(9), digests);
        first.save().unwrap();
        std::fs::remove_file(&gone).unwrap();
        let held = |c: &HashCacheFile| {
            (
                c.known.read().unwrap().as_ref().map(Vec::len),
                c.recorded.lock().unwrap().len(),
            )
        };

        let saving = HashCacheFile::load(&cache_path).after_hashing(AfterHashing::Save);
        assert_eq!(saving.get(&a, &key(1)), Some(digests));
        saving.put(&b, key(2), digests);
        saving.hashed_all();
        assert_eq!(held(&saving), (None, 0), "written, then nothing held");
        // Written, not yet in place: the caller's save commits it (a
        // compile's caller leaves that to another thread).
        assert_eq!(HashCacheFile::load(&cache_path).get(&b, &key(2)), None);
        assert!(saving.written.lock().unwrap().is_some());
        saving.save().unwrap();
        let after = HashCacheFile::load(&cache_path);
        assert_eq!(after.get(&a, &key(1)), Some(digests), "what was read stays");
        assert_eq!(
            after.get(&b, &key(2)),
            Some(digests),
            "what was hashed is added"
        );
        assert_eq!(after.len(), 2, "a file that is gone is dropped");

        // Recorded after it was written: the written file is committed
        // first, then written again with the rest.
        let c = dir.path().join("c");
        std::fs::write(&c, "c").unwrap();
        let twice = HashCacheFile::load(&cache_path).after_hashing(AfterHashing::Save);
        twice.put(&c, key(3), digests);
        twice.hashed_all();
        twice.put(&gone, key(4), digests);
        twice.save().unwrap();
        let after = HashCacheFile::load(&cache_path);
        assert_eq!(after.get(&c, &key(3)), Some(digests));
        assert_eq!(after.get(&b, &key(2)), Some(digests));
        assert_eq!(after.len(), 4, "a, b, c and the one recorded last");
        std::fs::remove_file(&c).unwrap();

        let text = std::fs::read(&cache_path).unwrap();
        let forgetting = HashCacheFile::load(&cache_path).after_hashing(AfterHashing::Forget);
        forgetting.put(&a, key(5), digests);
        forgetting.hashed_all();
        assert_eq!(held(&forgetting), (None, 0), "nothing held");
        forgetting.save().unwrap();
        assert_eq!(std::fs::read(&cache_path).unwrap(), text, "nothing written");
    }

    #[test]
    fn a_hash_is_returned_only_for_the_same_key_and_survives_a_save() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("a file\twith tab");
        std::fs::write(&src, "x").unwrap();
        let cache_path = dir.path().join("source-hashes");
        let cache = HashCacheFile::load(&cache_path);
        assert!(cache.is_empty());
        let digests = SourceDigests {
            sha256: [0xab; 32],
            blake3: [0xcd; 32],
        };
        cache.put(&src, key(1), digests);
        assert_eq!(cache.len(), 1);
        cache.save().unwrap();

        let again = HashCacheFile::load(&cache_path);
        let read = |c: &HashCacheFile| c.known.read().unwrap().as_ref().map(Vec::len);
        assert_eq!(read(&again), None, "read only when first asked");
        assert_eq!(again.get(&src, &key(1)), Some(digests));
        assert_eq!(read(&again), Some(1));
        assert_eq!(again.get(&src, &key(2)), None);
        let mut moved = key(1);
        moved.ctime_ns += 1;
        assert_eq!(again.get(&src, &moved), None);
        assert_eq!(again.get(&dir.path().join("other"), &key(1)), None);
        // Nothing recorded: nothing written.
        std::fs::remove_file(&cache_path).unwrap();
        again.save().unwrap();
        assert!(!cache_path.exists());
    }

    #[test]
    fn foreign_or_damaged_files_read_as_empty_or_partial() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c");
        std::fs::write(&p, "something else\n").unwrap();
        assert!(HashCacheFile::load(&p).is_empty());
        let good = checked(&format!(
            "{}\t{}\t1\t1\t2\t3\t4\t/x",
            "0f".repeat(32),
            "1e".repeat(32)
        ));
        // A line of an older format (one digest; no checksum) is not
        // understood.
        let v1 = checked(&format!("{}\t1\t1\t2\t3\t4\t/v1", "0f".repeat(32)));
        let v2 = format!(
            "{}\t{}\t1\t1\t2\t3\t4\t/v2",
            "0f".repeat(32),
            "1e".repeat(32)
        );
        let bad_hex = checked("zz\t1\t1\t2\t3\t4\t/y");
        std::fs::write(
            &p,
            format!("{HEADER}\n{good}\nnot a line\n{v1}\n{v2}\n{bad_hex}\n"),
        )
        .unwrap();
        let c = HashCacheFile::load(&p);
        assert_eq!(c.len(), 1);
        assert!(c.get(Path::new("/x"), &key(1)).is_some());
        // A cache of the previous version is read as empty.
        std::fs::write(&p, format!("datum source hashes v2\n{v2}\n")).unwrap();
        assert!(HashCacheFile::load(&p).is_empty());
        // A byte damaged into one that is not UTF-8 drops its line only:
        // the lines after it stand (they were all dropped while each line
        // was read as text, whose read fails there).
        let mut bytes = format!("{HEADER}\n{good}\n").into_bytes();
        let mut damaged = checked(&format!(
            "{}\t{}\t1\t1\t2\t3\t4\t/z",
            "0f".repeat(32),
            "1e".repeat(32)
        ))
        .into_bytes();
        let last = damaged.len() - 1;
        damaged[last] = 0xff;
        bytes.extend_from_slice(&damaged);
        bytes.extend_from_slice(
            format!(
                "\n{}\n",
                checked(&format!(
                    "{}\t{}\t1\t1\t2\t3\t4\t/after",
                    "0f".repeat(32),
                    "1e".repeat(32)
                ))
            )
            .as_bytes(),
        );
        std::fs::write(&p, bytes).unwrap();
        let c = HashCacheFile::load(&p);
        assert_eq!(c.len(), 2);
        assert!(c.get(Path::new("/x"), &key(1)).is_some());
        assert!(c.get(Path::new("/after"), &key(1)).is_some());
    }

    /// The numbers of a line are read as `str::parse` read them, for
    /// every form Datum writes (and refused past their type).
    #[test]
    fn numbers_are_read_as_written() {
        for text in [
            "0",
            "7",
            "1796615847123456789",
            "18446744073709551615",
            "18446744073709551616",
            "",
            "-",
            "-0",
            "-1",
            "-9223372036854775808",
            "-9223372036854775809",
            "9223372036854775807",
            "9223372036854775808",
            "12a",
            " 1",
            "1.5",
        ] {
            assert_eq!(
                number::<u64>(text.as_bytes()),
                text.parse::<u64>().ok(),
                "{text}"
            );
            assert_eq!(
                number::<i64>(text.as_bytes()),
                text.parse::<i64>().ok(),
                "{text}"
            );
        }
        for n in [i64::MIN, -1, 0, 1, i64::MAX] {
            assert_eq!(number::<i64>(n.to_string().as_bytes()), Some(n));
        }
        assert_eq!(number::<u64>(b"1\xff"), None);
        assert_eq!(number::<u64>(b"12"), Some(12));
    }

    /// `rest` as a cache line: its checksum, a tab, `rest`.
    fn checked(rest: &str) -> String {
        format!("{:08x}\t{rest}", crc32fast::hash(rest.as_bytes()))
    }

    /// A damaged entry (a digest or a key field changed on disk, the line
    /// otherwise well formed) was trusted by every compile, `--recompile`
    /// too: a file's bytes were taken for what the entry said, and every
    /// apply of them was refused. Each line's checksum now finds the damage:
    /// that entry is ignored (its source hashed again), the others stand.
    #[test]
    fn a_damaged_entry_is_ignored_when_the_cache_is_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, "a").unwrap();
        std::fs::write(&b, "b").unwrap();
        let cache_path = dir.path().join("source-hashes");
        let digests = SourceDigests {
            sha256: [0x11; 32],
            blake3: [0x22; 32],
        };
        let cache = HashCacheFile::load(&cache_path);
        cache.put(&a, key(1), digests);
        cache.put(&b, key(2), digests);
        cache.save().unwrap();
        let text = std::fs::read_to_string(&cache_path).unwrap();
        assert_eq!(HashCacheFile::load(&cache_path).len(), 2, "{text}");

        // One byte of a's SHA-256, then of its ctime, damaged (same length,
        // still hex, still a number): each line still parses.
        let a_line = text.lines().find(|l| l.ends_with("/a")).unwrap();
        let sha_at = a_line.find('\t').unwrap() + 1;
        let ctime_at = a_line.match_indices('\t').nth(5).unwrap().0 + 1;
        for at in [sha_at, ctime_at] {
            let mut damaged_line = a_line.to_owned().into_bytes();
            damaged_line[at] = if damaged_line[at] == b'1' { b'3' } else { b'1' };
            let damaged_line = String::from_utf8(damaged_line).unwrap();
            let rest = damaged_line.split_once('\t').unwrap().1;
            assert!(
                parse_line(checked(rest).as_bytes()).is_some(),
                "{damaged_line}"
            );
            std::fs::write(&cache_path, text.replace(a_line, &damaged_line)).unwrap();
            let read = HashCacheFile::load(&cache_path);
            assert_eq!(read.get(&a, &key(1)), None, "the damaged entry was trusted");
            assert_eq!(read.len(), 1, "the damaged entry was kept: {damaged_line}");
            assert_eq!(read.get(&b, &key(2)), Some(digests), "the others stand");
        }
    }

    #[test]
    fn recently_changed_files_are_racy() {
        let k = key(1);
        assert!(k.is_racy(k.ctime_ns + 10));
        assert!(!k.is_racy(k.ctime_ns + RACY_WINDOW_NS));
    }

    #[test]
    fn the_key_of_a_real_file_moves_when_it_is_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, "one").unwrap();
        let before = FileKey::of(&std::fs::metadata(&p).unwrap());
        assert_eq!(before.size, 3);
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&p, "two").unwrap();
        let after = FileKey::of(&std::fs::metadata(&p).unwrap());
        assert_eq!(after.size, 3);
        assert_ne!(before, after, "same size, new ctime");
    }
}
