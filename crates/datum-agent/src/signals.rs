//! SIGTERM, SIGINT and SIGHUP, turned into messages for the daemon.
//!
//! Owns the signal thread. It must not act on a signal itself beyond
//! raising the cancel flag, so the check in flight stops after its current
//! resource while the daemon decides the rest.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::{Handle, Signals};

/// A signal as the daemon sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Stop,
    Reload,
}

/// Starts the signal thread; dropping the guard closes it.
pub struct SignalGuard {
    handle: Handle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub fn spawn<F>(cancel: Arc<AtomicBool>, send: F) -> std::io::Result<SignalGuard>
where
    F: Fn(Signal) + Send + 'static,
{
    let mut signals = Signals::new([SIGTERM, SIGINT, SIGHUP])?;
    let handle = signals.handle();
    let thread = std::thread::Builder::new()
        .name("datum-agent-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if sig == SIGHUP {
                    send(Signal::Reload);
                } else {
                    cancel.store(true, Ordering::SeqCst);
                    send(Signal::Stop);
                }
            }
        })?;
    Ok(SignalGuard {
        handle,
        thread: Some(thread),
    })
}
