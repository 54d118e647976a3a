//! The workers: each takes batches of files from the queue and hashes them, a file
//! costing one `open`, one `fstat` and reads into the worker's buffer.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::Ordering;

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use datum_fingerprint::{Algorithm, Entry, FingerprintError};

use super::queue::{Done, Job, JobQueue, Parent, Slot};
use super::walk::Target;
use super::{BATCH, Keep, READ_BUFFER, ScanOptions, ScanProgress, io_error};

/// A worker: hashes batches from the queue until it is drained; the first error stops
/// every worker. Everything it needs is allocated by the thread that creates it.
pub(super) struct Worker<'a> {
    queue: &'a JobQueue,
    algorithm: Algorithm,
    pub(super) keep: Keep,
    progress: Option<&'a ScanProgress>,
    buf: Vec<u8>,
    batch: Vec<Job>,
    done: Vec<(Parent, Slot, u64)>,
    /// Waits for a read that waited for the disk before it takes jobs.
    standby: bool,
    /// Has hashed a batch (counted once in the scan's stats).
    counted: bool,
    /// Files of the current batch whose first read waited for the disk.
    cold: u64,
}

impl<'a> Worker<'a> {
    pub(super) fn new(queue: &'a JobQueue, opts: &'a ScanOptions, standby: bool) -> Worker<'a> {
        let keep = queue.lock().keep;
        Worker {
            queue,
            algorithm: opts.algorithm,
            keep,
            progress: opts.progress.as_deref(),
            buf: vec![0u8; READ_BUFFER],
            batch: Vec::with_capacity(BATCH),
            done: Vec::with_capacity(BATCH),
            standby,
            counted: false,
            cold: 0,
        }
    }

    pub(super) fn run(&mut self) -> Result<(), FingerprintError> {
        if self.standby && !self.queue.wait_for_cold() {
            return Ok(());
        }
        loop {
            self.queue.take(&mut self.batch);
            if self.batch.is_empty() {
                return Ok(());
            }
            self.hash_batch()?;
        }
    }

    /// Hashes batches while more than `limit` files are queued (the walk, ahead).
    pub(super) fn help(&mut self, limit: usize) -> Result<(), FingerprintError> {
        loop {
            self.queue.take_over(limit, &mut self.batch);
            if self.batch.is_empty() {
                return Ok(());
            }
            self.hash_batch()?;
        }
    }

    fn hash_batch(&mut self) -> Result<(), FingerprintError> {
        if !self.counted {
            self.counted = true;
            self.queue.count_hashing_thread();
        }
        // Taken out and put back, so that its allocation is reused.
        let mut batch = std::mem::take(&mut self.batch);
        let mut failed = None;
        for job in batch.drain(..) {
            match self.hash_one(&job.target) {
                Ok(Some((done, size))) => self.done.push((job.at, Slot::Done(done), size)),
                Ok(None) => self.done.push((job.at, Slot::Vanished, 0)),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        self.batch = batch;
        if let Some(e) = failed {
            self.done.clear();
            self.queue.abort();
            return Err(e);
        }
        self.queue
            .finish(&mut self.done, std::mem::take(&mut self.cold));
        Ok(())
    }

    fn hash_one(&mut self, target: &Target) -> Result<Option<(Done, u64)>, FingerprintError> {
        let Some((entry, cache)) = hash_file(target, self.algorithm, &mut self.buf)? else {
            return Ok(None);
        };
        if cache == Cache::Cold {
            self.cold += 1;
        }
        let size = match entry {
            Entry::File { size, .. } => size,
            _ => 0,
        };
        if let Some(p) = self.progress {
            p.files.fetch_add(1, Ordering::Relaxed);
            p.bytes.fetch_add(size, Ordering::Relaxed);
        }
        // The content hash was made with the algorithm's own function, so this cannot
        // fail; the path is looked up only if it does.
        let done =
            Done::leaf(self.keep, self.algorithm, entry, Path::new("")).map_err(|e| match e {
                FingerprintError::ContentFunction {
                    algorithm,
                    expected,
                    found,
                    ..
                } => FingerprintError::ContentFunction {
                    path: target.path(),
                    algorithm,
                    expected,
                    found,
                },
                other => other,
            })?;
        Ok(Some((done, size)))
    }
}

/// Whether a file's first read found its bytes in the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cache {
    Warm,
    /// Not cached, or the file system cannot say.
    Cold,
}

/// The first read of a file, without waiting for the disk (`RWF_NOWAIT`): `None` when
/// its bytes are not in the page cache, or the file system cannot tell (then the caller
/// reads as usual). A short read is a read: the rest follows without the flag.
pub(super) fn read_if_cached(fd: &OwnedFd, buf: &mut [u8]) -> Option<Result<usize, Errno>> {
    use rustix::io::{ReadWriteFlags, preadv2};
    match preadv2(
        fd,
        &mut [std::io::IoSliceMut::new(buf)],
        0,
        ReadWriteFlags::NOWAIT,
    ) {
        Err(Errno::AGAIN | Errno::OPNOTSUPP | Errno::INVAL | Errno::NOSYS) => None,
        other => Some(other),
    }
}

/// Opens, checks and hashes one regular file.
fn hash_file(
    target: &Target,
    algorithm: Algorithm,
    buf: &mut [u8],
) -> Result<Option<(Entry, Cache)>, FingerprintError> {
    // NOFOLLOW: a file replaced by a link since the listing fails with ELOOP instead of
    // being followed. NONBLOCK: a file replaced by a fifo cannot hang the scan. NOCTTY: a
    // terminal device cannot become our controlling terminal.
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let opened = match target {
        Target::At(dir, name) => rustix::fs::openat(&dir.fd, name.as_c_str(), flags, Mode::empty()),
        Target::Beneath(root, rel, _) => rustix::fs::openat2(
            root.as_fd(),
            rel,
            flags,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        ),
        Target::Path(path) => rustix::fs::open(path, flags, Mode::empty()),
    };
    let fd = match opened {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::LOOP) => {
            return Err(FingerprintError::Unstable {
                path: target.path(),
            });
        }
        Err(e) => return Err(io_error(&target.path(), "open", e.into())),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| io_error(&target.path(), "fstat", e.into()))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(FingerprintError::Unstable {
            path: target.path(),
        });
    }
    let mut hasher = algorithm.content_hasher();
    let mut size = 0u64;
    let expected = u64::try_from(st.st_size).unwrap_or(0);
    let mut cache = Cache::Warm;
    let mut first = true;
    loop {
        // Read at offsets (the first read's flag needs `preadv2`, which leaves the file
        // position where it was).
        let read = if std::mem::take(&mut first) {
            read_if_cached(&fd, buf).unwrap_or_else(|| {
                cache = Cache::Cold;
                rustix::io::pread(&fd, &mut *buf, 0)
            })
        } else {
            rustix::io::pread(&fd, &mut *buf, size)
        };
        match read {
            Ok(0) => break,
            Ok(n) => {
                let chunk = buf.get(..n).unwrap_or_default();
                hasher.update(chunk);
                size += n as u64;
                datum_core::progress::bytes_hashed(n as u64);
                // A short read from a regular file means end of file; having also reached
                // the size fstat gave, the usual extra read that returns 0 would only cost
                // a system call per file (~5% of a warm pass over small files).
                if n < buf.len() && size >= expected {
                    break;
                }
            }
            Err(Errno::INTR) => continue,
            Err(e) => return Err(io_error(&target.path(), "read", e.into())),
        }
    }
    datum_core::progress::file_hashed();
    let entry = Entry::File {
        mode: st.st_mode & 0o7777,
        uid: st.st_uid,
        gid: st.st_gid,
        size,
        content: hasher.finish(),
    };
    Ok(Some((entry, cache)))
}
