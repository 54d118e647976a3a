//! Running a program that changes a root other than `/` (shadow-utils'
//! `useradd --root ROOT` and its kin) so that code the root holds cannot
//! reach the machine.
//!
//! Such a program `chroot`s into the root as root and there runs what the
//! root holds: `ROOT/usr/sbin/nscd -i passwd` and `sss_cache` after each
//! change, the name service modules `ROOT/etc/nsswitch.conf` names, and for
//! `userdel` the `USERDEL_CMD` of `ROOT/etc/login.defs`. A repository can put
//! that code there itself (a File at `/usr/sbin/nscd`, mode 0755), and a
//! `chroot` does not hold root: with every capability the code mounted a
//! `/proc`, made device nodes, and could climb out to the machine.
//!
//! So the program runs, on a thread of its own, in:
//! - new mount, network, IPC, UTS and PID namespaces (no network; whatever
//!   it leaves running dies with it; the machine's processes are not there);
//! - a root of its own (`pivot_root`, the machine's root detached, so there
//!   is nothing to climb out to): a small tmpfs holding the machine's `/usr`
//!   read-only (the program and its libraries, `prlimit` and `setpriv`), the
//!   `/bin`, `/sbin` and `/lib*` links or folders beside it, the dynamic
//!   loader's cache read-only, a private `/dev` (`null`, `zero`, `random`...),
//!   and the target root at its own path, writable, without device nodes or
//!   set-user-id programs (`nodev`, `nosuid`);
//! - without the capabilities to mount, to make device nodes, to load
//!   modules or to trace (util-linux's `setpriv` keeps only
//!   [`ACCOUNT_TOOL_CAPABILITIES`]) and at most [`crate::sandbox::DATA_LIMIT`]
//!   of data.
//!
//! What the root's code can still do is change the root, which the
//! repository declares anyway. Building this needs root (`CAP_SYS_ADMIN`);
//! where it cannot be built the program is not run (fail closed).

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt as _;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::mount::{MountFlags, UnmountFlags};

use crate::HostError;
use crate::command::{self, CommandOutput, CommandSpec};
use crate::sandbox::{
    bounded_with, fail, fd_path, mkdir, mount, own_namespaces, private_dev, run_entered,
};

/// The capabilities a program changing a root keeps (util-linux `setpriv
/// --bounding-set` syntax): what shadow-utils need to `chroot` into the
/// root, write its account files and a new home, and give them owners and
/// modes. Not `CAP_SYS_ADMIN` (mount, `pivot_root`), `CAP_MKNOD`,
/// `CAP_SYS_MODULE`, `CAP_SYS_PTRACE`, `CAP_NET_*`.
pub const ACCOUNT_TOOL_CAPABILITIES: &str = "-all,+chown,+dac_override,+dac_read_search,+fowner,+fsetid,+sys_chroot,+setuid,+setgid,+audit_write";

/// Where the new root is built in the thread's private mount table (a
/// tmpfs mounted there covers the machine's `/tmp` for this thread only;
/// what is under it is reached through descriptors opened before).
const NEW_ROOT: &str = "/tmp";

/// The folders beside `/usr` a program may need to start: links into
/// `/usr` on a merged-`/usr` system (Debian 12), folders otherwise.
const BESIDE_USR: &[&str] = &["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// Runs `spec`, whose program changes `root` (given to it as the path it
/// has on the machine, which it keeps in the confined view), confined as
/// the module header says. An error means the confinement could not be
/// built or the program could not start; the program's own status is in
/// the output.
pub fn run_in_root(root: &Path, spec: &CommandSpec) -> Result<CommandOutput, HostError> {
    if !root.is_absolute() || root.components().any(|c| c == Component::ParentDir) {
        return Err(HostError::Sandbox {
            what: format!(
                "confine {} to {}: not an absolute path without `..`",
                spec.program,
                root.display()
            ),
            source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        });
    }
    let (spec, program) = bounded_with(spec, ACCOUNT_TOOL_CAPABILITIES, |name: &str| {
        command::which(name)
    })?;
    // A program found outside /usr (a folder first on PATH) is shown too,
    // read-only, at its own place.
    let extra: Vec<PathBuf> = program
        .as_deref()
        .and_then(Path::parent)
        .filter(|dir| !dir.starts_with("/usr"))
        .map(Path::to_path_buf)
        .into_iter()
        .collect();
    let root = root.to_path_buf();
    run_entered(
        "datum-confine",
        move || enter_own_root(&root, &extra),
        spec,
        program,
    )
}

/// What the machine has at one of [`BESIDE_USR`].
enum Beside {
    Link(PathBuf),
    Folder(OwnedFd),
}

fn open_path(path: &Path) -> Result<OwnedFd, HostError> {
    rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
        .map_err(fail(format!("open {}", path.display())))
}

/// Binds what `from` (a descriptor's path) shows at `to`, then sets `flags`
/// on that mount (read-only, `nodev`, `nosuid`).
fn bind(from: &OwnedFd, to: &Path, flags: MountFlags) -> Result<(), HostError> {
    let what = || format!("show {} in the confined root", to.display());
    rustix::mount::mount_bind_recursive(fd_path(from).as_str(), to).map_err(fail(what()))?;
    rustix::mount::mount_remount(to, MountFlags::BIND | flags, c"").map_err(fail(what()))
}

/// `path`'s folders under `base`, created (0755) as needed.
fn folders_under(base: &Path, path: &Path) -> Result<PathBuf, HostError> {
    let mut at = base.to_path_buf();
    for part in path.components() {
        if let Component::Normal(name) = part {
            at.push(name);
            mkdir(&at, 0o755)?;
        }
    }
    Ok(at)
}

/// Builds the confined root on this thread and enters it.
fn enter_own_root(root: &Path, extra: &[PathBuf]) -> Result<(), HostError> {
    own_namespaces()?;

    // Everything shown is opened before the new root covers NEW_ROOT.
    let target = open_path(root)?;
    let usr = open_path(Path::new("/usr"))?;
    let cache = open_path(Path::new("/etc/ld.so.cache")).ok();
    let extra: Vec<(&PathBuf, OwnedFd)> = extra
        .iter()
        .map(|dir| open_path(dir).map(|fd| (dir, fd)))
        .collect::<Result<_, _>>()?;
    let mut beside: Vec<(&str, Beside)> = Vec::new();
    for name in BESIDE_USR {
        let at = Path::new("/").join(name);
        match rustix::fs::readlinkat(rustix::fs::CWD, &at, Vec::new()) {
            Ok(link) => beside.push((
                name,
                Beside::Link(PathBuf::from(OsString::from_vec(link.into_bytes()))),
            )),
            Err(Errno::NOENT) => {}
            // Not a link: a folder of its own.
            Err(Errno::INVAL) => beside.push((name, Beside::Folder(open_path(&at)?))),
            Err(e) => return Err(fail(format!("read {}", at.display()))(e)),
        }
    }

    let new = Path::new(NEW_ROOT);
    mount(
        "tmpfs",
        new,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        "size=1m,mode=0755",
    )
    .map_err(fail("mount the confined root's tmpfs"))?;
    let read_only = MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV;
    mkdir(&new.join("usr"), 0o755)?;
    bind(&usr, &new.join("usr"), read_only)?;
    for (name, what) in beside {
        let at = new.join(name);
        match what {
            Beside::Link(link) => rustix::fs::symlinkat(&link, rustix::fs::CWD, &at)
                .map_err(fail(format!("create {}", at.display())))?,
            Beside::Folder(fd) => {
                mkdir(&at, 0o755)?;
                bind(&fd, &at, read_only)?;
            }
        }
    }
    if let Some(cache) = cache {
        mkdir(&new.join("etc"), 0o755)?;
        let at = new.join("etc/ld.so.cache");
        drop(
            rustix::fs::open(
                &at,
                OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o644),
            )
            .map_err(fail(format!("create {}", at.display())))?,
        );
        bind(&cache, &at, read_only)?;
    }
    mkdir(&new.join("dev"), 0o755)?;
    private_dev(&new.join("dev"))?;
    for (dir, fd) in &extra {
        let at = folders_under(new, dir)?;
        bind(fd, &at, read_only)?;
    }
    let at = folders_under(new, root)?;
    bind(&target, &at, MountFlags::NOSUID | MountFlags::NODEV)?;

    // The machine's root goes: nothing left to climb out to.
    let old = new.join(".machine");
    mkdir(&old, 0o700)?;
    rustix::process::pivot_root(new, &old).map_err(fail("pivot_root into the confined root"))?;
    rustix::process::chdir("/").map_err(fail("enter the confined root"))?;
    rustix::mount::unmount("/.machine", UnmountFlags::DETACH)
        .map_err(fail("detach the machine's root"))?;
    let _ = rustix::fs::rmdir("/.machine");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_confined_program_reaches_its_root_and_nothing_else_of_the_machine() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: confinement needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let script = format!(
            "echo in-root > {r}/written; \
             test -e /etc/passwd && echo SAW-MACHINE-ETC; \
             test -e {outside} && echo SAW-OUTSIDE; \
             echo x 2>/dev/null > /usr/datum-confine-test && echo WROTE-USR; \
             mount -t tmpfs none {r} 2>/dev/null && echo MOUNTED; \
             mknod {r}/disk b 8 0 2>/dev/null && echo MKNOD; \
             echo done",
            r = root.display(),
            outside = dir.path().join("outside").display(),
        );
        std::fs::write(dir.path().join("outside"), "x").unwrap();
        let spec = CommandSpec::new("sh").arg("-c").arg(script);
        let out = run_in_root(&root, &spec).unwrap();
        let said = out.stdout.text();
        assert!(out.success(), "{said} {}", out.stderr.text());
        assert_eq!(said.trim(), "done", "{said}");
        assert_eq!(
            std::fs::read_to_string(root.join("written")).unwrap(),
            "in-root\n"
        );
        assert!(!Path::new("/usr/datum-confine-test").exists());
    }

    #[test]
    fn a_root_that_is_not_a_plain_absolute_path_is_refused() {
        let spec = CommandSpec::new("true");
        for root in ["relative", "/srv/../etc"] {
            // Refused for the path itself, before anything is built (any
            // other failure, such as a non-root run, would pass too).
            let err = run_in_root(Path::new(root), &spec).unwrap_err().to_string();
            assert!(
                err.contains("not an absolute path without `..`"),
                "{root}: {err}"
            );
        }
    }
}
