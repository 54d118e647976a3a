//! The binary's side of fleet reporting: everything else is
//! `datum_reporting` (re-exported here), and this hands a pass's queued
//! report to a detached `datum outbox --background` (this program, started
//! again), which only the binary can do.

pub use datum_reporting::*;

use std::path::Path;

use datum_store::Store;

use crate::cli::GlobalArgs;

/// After a pass queued its report in `store`: says what the last
/// delivery left, then has the outbox delivered off the pass's path (a
/// detached `datum outbox --background`; see the module header).
pub fn after_pass(r: &Reporting, global: &GlobalArgs, store: &mut Store) {
    let Some(creds) = &r.credentials else {
        return;
    };
    if let Ok(status) = store.outbox_status()
        && status.backoff.failures > 0
    {
        eprintln!(
            "warning: {} report(s) queued for {}; the last delivery failed ({}); retried with backoff (`datum outbox --flush` now)",
            status.depth,
            creds.server,
            status
                .backoff
                .last_error
                .as_deref()
                .unwrap_or("unknown error")
        );
    }
    if std::env::var_os("INVOCATION_ID").is_some() {
        r.deliver(store, PASS_BUDGET, true);
        return;
    }
    if let Err(e) = spawn_delivery(global, store.path()) {
        eprintln!("warning: cannot start the delivery in the background ({e}); delivering now");
        r.deliver(store, PASS_BUDGET, true);
    }
}

/// Starts `datum outbox --background` for this root and state store,
/// detached.
fn spawn_delivery(global: &GlobalArgs, state: &Path) -> anyhow::Result<u32> {
    let exe = std::env::current_exe()?;
    let spec = datum_host::command::CommandSpec::new(exe.to_string_lossy())
        .arg("--root")
        .arg(global.root.as_os_str())
        .arg("--state")
        .arg(state.as_os_str())
        .args(["outbox", "--background"]);
    Ok(datum_host::command::spawn_detached(&spec)?)
}
