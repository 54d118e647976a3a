//! Which writes of this pass systemd has not read yet.
//!
//! systemd says a unit's files changed on disk (`NeedDaemonReload=yes`)
//! only when a file's modification time is *newer* than the one it loaded.
//! A file rewritten within the same tick of the file system's clock (a
//! second on a file system with one-second timestamps, a jiffy on others),
//! or renamed into place with a copy's older time, reads unchanged, and a
//! restart then runs the definition systemd had loaded before; nothing
//! later reloads it (the unit runs, so every later pass finds it
//! converged). So the question is not put to systemd: the pass notes every
//! path a resource wrote under one of systemd's unit folders
//! ([`after_writing`], called after each part goes live, whatever the
//! kind), and the next start, restart or reload of any unit runs `systemctl
//! daemon-reload` first, once for every write before it ([`owed`] and
//! [`reloaded`]): a pass that writes ten drop-ins and then restarts ten
//! units reloads systemd once.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use datum_host::Host;

/// The folders the system manager reads units and drop-ins from
/// (systemd.unit(5), "System Unit Search Path", and Debian's `/lib`): a
/// write at or below one of them, or of a folder above one, changes what
/// a daemon-reload loads. `/etc/systemd/system.conf` is below none of
/// them; a daemon-reload does not re-execute the manager.
const UNIT_FOLDERS: &[&str] = &[
    "/etc/systemd/system.control",
    "/run/systemd/system.control",
    "/run/systemd/transient",
    "/etc/systemd/system",
    "/etc/systemd/system.attached",
    "/run/systemd/system",
    "/run/systemd/system.attached",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
];

/// Set when a unit file or drop-in was written since the pass last had
/// systemd reload.
#[derive(Debug, Default)]
struct Unread(AtomicBool);

/// Whether any of `written` (host paths as declared) is a unit file, a
/// drop-in or a folder holding them, or a folder above a unit folder.
pub fn reaches_unit_files(written: &[PathBuf]) -> bool {
    written.iter().any(|w| {
        UNIT_FOLDERS
            .iter()
            .any(|folder| w.starts_with(folder) || Path::new(folder).starts_with(w))
    })
}

/// Notes that a resource of this pass wrote `written` (or, for a change an
/// earlier pass made, that an activation it owes is still to come): when
/// that reaches a unit folder, systemd reloads before the next unit acts.
pub fn after_writing(host: &Host, written: &[PathBuf]) {
    if reaches_unit_files(written) {
        host.pass_cache::<Unread>().0.store(true, Ordering::SeqCst);
    }
}

/// Whether a write of this pass is still to be loaded by systemd.
pub fn owed(host: &Host) -> bool {
    host.pass_cache::<Unread>().0.load(Ordering::SeqCst)
}

/// systemd has reloaded: every write noted so far is loaded.
pub fn reloaded(host: &Host) {
    host.pass_cache::<Unread>().0.store(false, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_files_drop_ins_and_folders_above_them_count() {
        for path in [
            "/etc/systemd/system/web.service",
            "/etc/systemd/system/web.service.d/env.conf",
            "/etc/systemd/system/web.service.d",
            "/usr/lib/systemd/system/web.service",
            "/lib/systemd/system/web@.service",
            "/run/systemd/system/web.socket",
            "/etc/systemd",
            "/etc",
        ] {
            assert!(reaches_unit_files(&[PathBuf::from(path)]), "{path}");
        }
        for path in [
            "/etc/nginx/nginx.conf",
            "/etc/systemd/system.conf",
            "/etc/systemd/journald.conf.d/x.conf",
            "/etc/systemd/systemx/web.service",
            "/usr/lib/systemd/user/web.service",
        ] {
            assert!(!reaches_unit_files(&[PathBuf::from(path)]), "{path}");
        }
    }

    #[test]
    fn one_reload_covers_every_write_before_it() {
        let host = Host::with_name("/tmp/unused", "h");
        assert!(!owed(&host));
        after_writing(&host, &[PathBuf::from("/etc/nginx/nginx.conf")]);
        assert!(!owed(&host));
        after_writing(&host, &[PathBuf::from("/etc/systemd/system/a.service")]);
        after_writing(&host, &[PathBuf::from("/etc/systemd/system/b.service")]);
        assert!(owed(&host));
        reloaded(&host);
        assert!(!owed(&host));
        after_writing(&host, &[PathBuf::from("/etc/systemd/system/c.service")]);
        assert!(owed(&host), "a write after the reload owes another");
    }
}
