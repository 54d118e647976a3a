//! The harness of the race tests: a user's folder to swap in, and a thread
//! that makes one swap whenever an operation is running, counted, while the
//! test runs that operation again and again and judges each outcome.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How many times a race runs its operation at the most, and for how long.
const TRIES: u32 = 20_000;
const FOR: Duration = Duration::from_secs(8);

/// The user's folder: `root/theirs`, owned by uid 1000, mode 0755, holding
/// one file, `marker`, by which a test tells it from Datum's own.
pub(crate) fn users_folder(root: &Path) -> PathBuf {
    let theirs = root.join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::fs::write(theirs.join("marker"), b"alice").unwrap();
    give_to_user(&theirs);
    theirs
}

/// Gives `path` back to uid 1000, mode 0755.
pub(crate) fn give_to_user(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::os::unix::fs::chown(path, Some(1000), Some(1000)).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A swapping thread and the count of the rounds run against it.
pub(crate) struct Race {
    armed: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
    /// Held by the swapper while it swaps; holds the number of swaps.
    gate: Arc<Mutex<u32>>,
    swapper: Option<JoinHandle<()>>,
    started: Instant,
    tries: u32,
}

impl Race {
    /// Swaps `root/name` and `root/theirs` (`RENAME_EXCHANGE`), once a round.
    pub(crate) fn exchanging(root: &Path, name: &'static str) -> Race {
        let parent = rustix::fs::open(
            root,
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        Race::start(move |armed| {
            armed()
                && rustix::fs::renameat_with(
                    &parent,
                    name,
                    &parent,
                    "theirs",
                    rustix::fs::RenameFlags::EXCHANGE,
                )
                .is_ok()
        })
    }

    /// Starts the thread: while a round is armed, `swap` is called (with
    /// the gate held) until it says it swapped; it is given a look at
    /// whether the round is still armed, to ask before it swaps.
    pub(crate) fn start(mut swap: impl FnMut(&dyn Fn() -> bool) -> bool + Send + 'static) -> Race {
        let armed = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let gate = Arc::new(Mutex::new(0u32));
        let swapper = {
            let (armed, done, gate) = (armed.clone(), done.clone(), gate.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    if !armed.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                        continue;
                    }
                    let mut swaps = gate.lock().unwrap();
                    if swap(&|| armed.load(Ordering::Relaxed)) {
                        armed.store(false, Ordering::Relaxed);
                        *swaps += 1;
                    }
                }
            })
        };
        Race {
            armed,
            done,
            gate,
            swapper: Some(swapper),
            started: Instant::now(),
            tries: 0,
        }
    }

    /// Whether to run another round (20,000 at the most, for 8 s); counts it.
    pub(crate) fn goes_on(&mut self) -> bool {
        let more = self.tries < TRIES && self.started.elapsed() < FOR;
        if more {
            self.tries += 1;
        }
        more
    }

    /// The rounds run so far, this one included.
    pub(crate) fn tries(&self) -> u32 {
        self.tries
    }

    /// Runs `operation` with the swap armed, and returns once no swap is
    /// under way any more.
    pub(crate) fn armed<T>(&self, operation: impl FnOnce() -> T) -> T {
        self.armed.store(true, Ordering::Relaxed);
        let outcome = operation();
        self.armed.store(false, Ordering::Relaxed);
        drop(self.gate.lock().unwrap());
        outcome
    }

    /// Stops the thread; the rounds run and the swaps made.
    pub(crate) fn finish(mut self) -> (u32, u32) {
        self.done.store(true, Ordering::Relaxed);
        self.swapper.take().unwrap().join().unwrap();
        (self.tries, *self.gate.lock().unwrap())
    }
}

impl Drop for Race {
    /// A test that fails half-way leaves no thread spinning.
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(swapper) = self.swapper.take() {
            let _ = swapper.join();
        }
    }
}
