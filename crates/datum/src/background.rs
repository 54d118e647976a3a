//! Work a command starts and need not wait for before going on, though the
//! process must not end before it is done: each piece runs on a thread of
//! its own, and `main` joins them all before it exits ([`finish`]).
//!
//! Today that is the commit of the caches a compile writes, the catalogue
//! snapshot and the source-hash cache (`context::compile_or_reuse`): their
//! fsync waits for the disk (20 ms for the 12 MB snapshot of 20,000 Files)
//! while the pass that compiled could already be reading the host, and
//! nothing in that run reads them. A piece that fails says so once it is
//! joined, as a warning, never changing the exit code; a process killed
//! before the join leaves the old file in place (the commit renames only
//! what its fsync made durable) and a temporary one, which a later write
//! of the same cache sweeps (`PrivateDir::write_unsynced`).
//!
//! Must not: hold work whose result the command needs, or whose failure
//! should fail it.

use std::sync::Mutex;
use std::thread::JoinHandle;

/// What a piece says when it fails (a warning's text).
type Outcome = Result<(), String>;

static PENDING: Mutex<Vec<JoinHandle<Outcome>>> = Mutex::new(Vec::new());

/// Runs `work` on a thread of its own. Pieces started earlier that are
/// done by now are joined first (a long-running agent starts one per
/// reload). Should no thread start, `work` is dropped unrun, with a
/// warning: whatever it owns undoes itself when dropped (an uncommitted
/// snapshot removes its temporary file, and the next run compiles).
/// `what` names the file it saves, for that warning.
pub fn spawn(what: &'static str, work: impl FnOnce() -> Outcome + Send + 'static) {
    let mut pending = PENDING.lock().unwrap_or_else(|p| p.into_inner());
    let (done, running): (Vec<_>, Vec<_>) = pending.drain(..).partition(|h| h.is_finished());
    *pending = running;
    match std::thread::Builder::new()
        .name("datum-background".to_owned())
        .spawn(work)
    {
        Ok(handle) => pending.push(handle),
        Err(e) => eprintln!("warning: cannot save {what}: cannot start a thread ({e})"),
    }
    drop(pending);
    for handle in done {
        warn_if_failed(handle);
    }
}

/// Waits for every piece still running; says what failed.
pub fn finish() {
    let pending = std::mem::take(&mut *PENDING.lock().unwrap_or_else(|p| p.into_inner()));
    for handle in pending {
        warn_if_failed(handle);
    }
}

fn warn_if_failed(handle: JoinHandle<Outcome>) {
    match handle.join() {
        Ok(Ok(())) => {}
        Ok(Err(warning)) => eprintln!("warning: {warning}"),
        Err(_) => eprintln!("warning: work left to finish in the background stopped unexpectedly"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Every piece has run once `finish` returns, however long it takes;
    /// one that fails does not keep the others from finishing.
    #[test]
    fn finish_waits_for_every_piece() {
        let done = Arc::new(AtomicUsize::new(0));
        for i in 0..4 {
            let done = Arc::clone(&done);
            super::spawn("counting", move || {
                std::thread::sleep(std::time::Duration::from_millis(50));
                done.fetch_add(1, Ordering::SeqCst);
                if i == 2 {
                    Err("piece 2 failed".to_owned())
                } else {
                    Ok(())
                }
            });
        }
        super::finish();
        assert_eq!(done.load(Ordering::SeqCst), 4);
        assert!(super::PENDING.lock().unwrap().is_empty());
    }
}
