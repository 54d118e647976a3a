//! A throwaway view of the machine for validators, so that running one
//! leaves no trace.
//!
//! `nginx -t` opens (and creates) the logs and pid file its configuration
//! names and creates its temporary folders; other validators write caches or
//! state. A validator therefore never runs on the machine itself: it runs in
//! a view built for that one call and thrown away after it.
//!
//! How the view is built, on a thread of its own (the rest of the process
//! is not affected):
//!
//! 1. `unshare(CLONE_FS | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC |
//!    CLONE_NEWUTS | CLONE_NEWPID)`: the thread gets its own root and working
//!    folder (`CLONE_FS`, so the `chroot` below is the thread's alone), a
//!    private copy of the mount table, a network namespace with nothing but
//!    a loopback device that is down (no network), and a PID namespace in
//!    which the validator is PID 1 (so whatever it leaves running dies with
//!    it). Every mount is made private first, so nothing propagates back.
//! 2. A tmpfs (64 MiB, memory only) holds an upper and a work folder per
//!    layer, and an overlay with the machine's root file system as its read-only
//!    lower layer is mounted from it: reads see the machine, writes land in
//!    the tmpfs. Every other real mount (a separate `/tmp`, `/run`, `/home`,
//!    `/boot`) gets its own overlay on its place in the view (the root file
//!    system's overlay does not show what is mounted on it), or, where the
//!    kernel refuses an overlay on that file system, a read-only bind; a
//!    mounted file (a bind-mounted `/etc/resolv.conf`) is bound read-only.
//! 3. A fresh `/proc` (with `/proc/sys` and `/proc/sysrq-trigger` read-only),
//!    a `/dev` of its own (a tmpfs with `null`, `zero`, `full`, `random`,
//!    `urandom` and `tty` bound from the machine), `/sys` bound read-only.
//! 4. Files the caller places ([`Sandbox::place`]) are written into the
//!    view at their paths, creating folders as needed (only in the view):
//!    `datum plan`'s scratch copy, and the files of a group laid over their
//!    live paths before a group validator runs (issue 14).
//! 5. The thread `chroot`s into the view and runs the program from there
//!    ([`crate::command::run`]: no shell, a minimal environment, a deadline,
//!    bounded output); the child inherits the namespaces and the root, and
//!    starts under [`DATA_LIMIT`] with only [`KEPT_CAPABILITIES`] (a root
//!    process with `CAP_SYS_CHROOT` leaves a `chroot`).
//! 6. When the thread ends, nothing refers to the namespace any more and
//!    the tmpfs with every write goes with it.
//!
//! Built with rustix's mount calls and `nix::sched::unshare` (the one call
//! rustix only offers as `unsafe`, because of `CLONE_FILES`, which is never
//! passed here); about 30 ms of the ~60 ms a validator call takes (see
//! `bench/validators.sh`).
//!
//! Who may build it: creating namespaces and mounting needs root
//! (`CAP_SYS_ADMIN`). As root the sandbox is mandatory, and one that cannot
//! be built (a kernel without overlayfs, a container that forbids mounts) is
//! a validator failure: fail closed, never a silent unsandboxed run. A
//! non-root process cannot build it; then [`isolation`] refuses unless the
//! operator set `DATUM_VALIDATOR_SANDBOX=off`, which runs validators
//! unsandboxed with that user's own rights (what such a user could do anyway;
//! scratch roots in tests and demos). As root that variable is ignored.
//!
//! This module must not decide what a validator's status means.

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use nix::sched::CloneFlags;
use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;
use rustix::mount::{MountFlags, MountPropagationFlags};

use crate::HostError;
use crate::command::{self, CommandOutput, CommandSpec};

/// The environment variable that lets a non-root process run validators
/// unsandboxed (`off`). Ignored as root.
pub const ENV: &str = "DATUM_VALIDATOR_SANDBOX";

/// Size of the tmpfs that receives every write made in the view.
const SCRATCH_SIZE: &str = "64m";

/// Where the scratch tmpfs is mounted in the thread's private mount table.
/// Covering it there hides nothing the view needs: the view shows the root
/// file system's own `/tmp` through the overlay's lower layer, and a
/// separate `/tmp` mount through a descriptor opened before it was covered.
const SCRATCH: &str = "/tmp";

/// How a validator is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// In a throwaway view (the rule).
    Sandboxed,
    /// On the machine itself, with the rights of the process: only for a
    /// non-root process that asked for it, and for tests and benchmarks that
    /// compare a verdict with and without the sandbox.
    Unsandboxed,
}

/// How validators run in this process: sandboxed as root; as another user
/// only unsandboxed, and only when [`ENV`] is `off`.
pub fn isolation() -> Result<Isolation, HostError> {
    let uid = rustix::process::geteuid().as_raw();
    if uid == 0 {
        return Ok(Isolation::Sandboxed);
    }
    match std::env::var_os(ENV) {
        Some(v) if v == "off" => Ok(Isolation::Unsandboxed),
        _ => Err(HostError::SandboxNeedsRoot { uid, env: ENV }),
    }
}

/// A file to lay into the view before the program runs.
#[derive(Debug, Clone)]
struct Placed {
    path: PathBuf,
    bytes: Vec<u8>,
    mode: u32,
    uid: Option<u32>,
    gid: Option<u32>,
}

/// One sandboxed run: the files to place, then [`Sandbox::run`].
#[derive(Debug, Clone, Default)]
pub struct Sandbox {
    placed: Vec<Placed>,
}

pub(crate) fn fail(what: impl Into<String>) -> impl FnOnce(Errno) -> HostError {
    let what = what.into();
    move |e| HostError::Sandbox {
        what,
        source: std::io::Error::from(e),
    }
}

pub(crate) fn mount(
    source: &str,
    target: &Path,
    fstype: &str,
    flags: MountFlags,
    data: &str,
) -> Result<(), Errno> {
    let data = CString::new(data).map_err(|_| Errno::INVAL)?;
    rustix::mount::mount(source, target, fstype, flags, Some(data.as_c_str()))
}

pub(crate) fn mkdir(path: &Path, mode: u32) -> Result<(), HostError> {
    match rustix::fs::mkdir(path, Mode::from_raw_mode(mode)) {
        Ok(()) | Err(Errno::EXIST) => Ok(()),
        Err(e) => Err(fail(format!("create {}", path.display()))(e)),
    }
}

impl Sandbox {
    pub fn new() -> Self {
        Self::default()
    }

    /// Lays `bytes` at `path` (an absolute path as the program will see it:
    /// the real path on the machine) inside the view, with `mode` and the
    /// given owner; missing folders are created, in the view only. What was
    /// at `path` in the view is replaced; the machine never sees it.
    pub fn place(
        &mut self,
        path: impl Into<PathBuf>,
        bytes: Vec<u8>,
        mode: u32,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> &mut Self {
        self.placed.push(Placed {
            path: path.into(),
            bytes,
            mode,
            uid,
            gid,
        });
        self
    }

    /// The bytes placed at `path`, if any.
    pub fn placed(&self, path: &Path) -> Option<&[u8]> {
        self.placed
            .iter()
            .rev()
            .find(|p| p.path == path)
            .map(|p| p.bytes.as_slice())
    }

    /// Every placed file: its path in the view and its bytes.
    pub fn placed_files(&self) -> impl Iterator<Item = (&Path, &[u8])> {
        self.placed
            .iter()
            .map(|p| (p.path.as_path(), p.bytes.as_slice()))
    }

    /// The names of the files placed directly in folder `dir`.
    pub fn placed_in(&self, dir: &Path) -> Vec<OsString> {
        self.placed
            .iter()
            .filter(|p| p.path.parent() == Some(dir))
            .filter_map(|p| p.path.file_name().map(OsStr::to_owned))
            .collect()
    }

    /// Reads `path` as a program in the view would (the placed bytes, else
    /// the machine's file with links followed as the kernel follows them),
    /// at most `limit` bytes, regular files only, never blocking on a FIFO.
    /// For looking at what a validator is about to load (a precheck), never
    /// for managed content: that goes through the boundary.
    pub fn read_as_program(&self, path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
        use std::io::Read as _;
        if let Some(bytes) = self.placed(path) {
            return Ok(bytes.to_vec());
        }
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let file = std::fs::File::from(fd);
        if !file.metadata()?.is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        let mut bytes = Vec::new();
        file.take(limit).read_to_end(&mut bytes)?;
        Ok(bytes)
    }

    /// The entries of folder `dir` as a program in the view would list
    /// them: the machine's, and the files placed there.
    pub fn list_as_program(&self, dir: &Path) -> std::io::Result<Vec<OsString>> {
        let mut names: Vec<OsString> = match std::fs::read_dir(dir) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .map(|e| e.file_name())
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        for placed in self.placed_in(dir) {
            if !names.contains(&placed) {
                names.push(placed);
            }
        }
        names.sort();
        Ok(names)
    }

    /// Whether `path` is a regular file of the machine that not everyone may
    /// read, as a program in the view would find it: no read bit for others
    /// (`/etc/shadow`, a private key, Datum's digest key), or a folder on
    /// its way (links followed) that others may not search (a 0644 token in
    /// a 0700 home, anything under `/root`). A file placed in the view (what
    /// is being validated) is not; neither is what does not exist or is not
    /// a regular file.
    pub fn is_private_file(&self, path: &Path) -> bool {
        if self.placed(path).is_some() {
            return false;
        }
        let Ok(st) = rustix::fs::stat(path) else {
            return false;
        };
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return false;
        }
        if st.st_mode & 0o004 == 0 {
            return true;
        }
        let Ok(canonical) = self.canonical_as_program(path) else {
            return true;
        };
        canonical
            .ancestors()
            .skip(1)
            .any(|dir| rustix::fs::stat(dir).map_or(true, |d| d.st_mode & 0o001 == 0))
    }

    /// The canonical form of `path` on the machine (links followed).
    pub fn canonical_as_program(&self, path: &Path) -> std::io::Result<PathBuf> {
        path.canonicalize()
    }

    /// Runs `spec` in a fresh view (see the module header). An error means
    /// the view could not be built or the program could not start; the
    /// program's own status is in the output.
    pub fn run(&self, spec: &CommandSpec) -> Result<CommandOutput, HostError> {
        for p in &self.placed {
            if let Some(why) = not_placeable(&p.path, &p.bytes) {
                return Err(HostError::NotPlaceable {
                    path: p.path.clone(),
                    why,
                });
            }
        }
        let placed = self.placed.clone();
        let (spec, program) = bounded(spec)?;
        run_entered("datum-sandbox", move || enter_view(&placed), spec, program)
    }
}

/// Runs `spec` (already [`bounded_with`]) from a thread of its own that
/// first calls `enter` (namespaces, a root: what the thread does there is
/// the thread's alone); `program` is the program's path for the output.
/// The thread only enters and starts the program (a thread in a new PID
/// namespace may not start threads of its own); draining and waiting happen
/// back on the caller's.
pub(crate) fn run_entered(
    name: &str,
    enter: impl FnOnce() -> Result<(), HostError> + Send + 'static,
    spec: CommandSpec,
    program: Option<PathBuf>,
) -> Result<CommandOutput, HostError> {
    let worker = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || -> Result<command::Started, HostError> {
            enter()?;
            command::start(&spec)
        })
        .map_err(|source| HostError::Sandbox {
            what: format!("start the {name} thread"),
            source,
        })?;
    let started = worker.join().unwrap_or_else(|_| {
        Err(HostError::Sandbox {
            what: format!("the {name} thread"),
            source: std::io::Error::other("panicked"),
        })
    })?;
    let mut output = started.finish()?;
    if let Some(program) = program {
        output.program = program;
    }
    Ok(output)
}

/// Where programs and libraries are read from: the folders `PATH` and the
/// dynamic loader search (on Debian, `/bin`, `/sbin` and `/lib*` are links
/// into `/usr`, which [`place`] does not follow), and
/// `/etc/alternatives`, whose links name programs.
const PROGRAM_FOLDERS: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/alternatives",
];

/// Files read before or while a program starts that make it load code:
/// the dynamic loader's configuration, OpenSSL's (engines and providers
/// are libraries it loads by path), and the start-up files of the
/// interpreters (Debian's Perl reads `/etc/perl` first, Python its
/// `sitecustomize` from `/etc/python3.*`).
const LOADER_FILES: &[(&str, &str)] = &[
    (
        "/etc/ld.so.preload",
        "the dynamic loader loads what /etc/ld.so.preload names into every program",
    ),
    (
        "/etc/ld.so.conf",
        "the dynamic loader finds libraries through /etc/ld.so.conf",
    ),
    (
        "/etc/ld.so.conf.d",
        "the dynamic loader finds libraries through /etc/ld.so.conf.d",
    ),
    (
        "/etc/ld.so.cache",
        "the dynamic loader finds libraries through /etc/ld.so.cache",
    ),
    (
        "/etc/ssl/openssl.cnf",
        "OpenSSL reads /etc/ssl/openssl.cnf when a program starts, and it can load libraries by path",
    ),
    ("/etc/perl", "Perl reads its modules from /etc/perl first"),
];

/// Why a file may not be laid into a view at `path` (`None`: it may). A
/// validator runs as root in the view, and a plan lays the repository's
/// bytes at the target's own path there: a repository File at
/// `/usr/sbin/sshd` with `validate: sshd` was the program `sshd -t` then
/// ran, and `/etc/ld.so.preload` with a library beside it in an nginx group
/// ran that library in `nginx -t`. So nothing is laid where a program, a
/// library or what makes a program load one is read from, and nothing that
/// is a program or a library (ELF) is laid anywhere: a configuration check
/// never needs either. The validation then fails, naming the rule (fail
/// closed); such a file is not a configuration a validator judges.
pub fn not_placeable(path: &Path, bytes: &[u8]) -> Option<String> {
    use std::path::Component;
    if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
        return Some("not an absolute path without `..`".to_owned());
    }
    if let Some(folder) = PROGRAM_FOLDERS.iter().find(|f| path.starts_with(f)) {
        return Some(format!(
            "programs and libraries are read from {folder}, and a file there would run as the validator, as root"
        ));
    }
    if let Some((_, why)) = LOADER_FILES.iter().find(|(f, _)| path.starts_with(f)) {
        return Some((*why).to_owned());
    }
    let python = path
        .strip_prefix("/etc")
        .ok()
        .and_then(|rest| rest.components().next())
        .is_some_and(|c| c.as_os_str().to_string_lossy().starts_with("python"));
    if python {
        return Some(format!(
            "Python reads its start-up files (sitecustomize) from {}",
            path.iter().take(3).collect::<PathBuf>().display()
        ));
    }
    if bytes.starts_with(b"\x7fELF") {
        return Some(
            "it is an ELF program or library, and a validator's view never holds code a repository brought"
                .to_owned(),
        );
    }
    None
}

/// The most a program run in a view may hold in data (heap and private
/// mappings: `RLIMIT_DATA`). The view keeps its writes in a small tmpfs,
/// but nothing bounded its memory: `Include /dev/zero` in an sshd_config
/// made `sshd -t` read zeros into one buffer, 8 GB in 20 s (the deadline is
/// 30 s), from `datum plan`. A configuration check needs a few MiB.
pub const DATA_LIMIT: u64 = 1 << 30;

/// The capabilities a program run in a view keeps (util-linux `setpriv
/// --bounding-set` syntax): none but `CAP_NET_ADMIN`, which `nft -c` needs
/// to check a ruleset in the view's own network namespace. The view is a
/// `chroot` in a mount namespace: a root process with its capabilities left
/// it (`chroot` again and climb out), and reached the machine, so code a
/// validator was made to load (a library a configuration names, a script
/// its wrapper sources) ran as root on the host. Without `CAP_SYS_CHROOT`,
/// `CAP_SYS_ADMIN` and the rest, uid 0 in the view keeps only what the
/// files' owner bits give it, inside the view.
///
/// `CAP_NET_BIND_SERVICE` too: `nginx -t` binds the ports it listens on (in
/// the view's own network namespace, which reaches nothing), and without it
/// every site on port 80 or 443 failed its check ("bind() to 0.0.0.0:80
/// failed (13: Permission denied)").
pub const KEPT_CAPABILITIES: &str =
    "-all,+net_admin,+net_bind_service,+chown,+dac_override,+fowner,+setuid,+setgid";

/// `spec` run through util-linux's `prlimit` (Essential in Debian), which
/// sets [`DATA_LIMIT`] and then executes the program, so the limit holds
/// from its first instruction (setting it from here would be for the
/// whole of Datum, or a moment too late; `pre_exec` needs `unsafe`). The
/// program is looked up first, so a missing one is reported as before, and
/// returned to be named in the output (a program that is not there: the
/// spec as it is, to fail as a missing program). Without `prlimit` or
/// `setpriv` the program is not run at all: the limits are what keeps code
/// a configuration makes it load inside the view, so their absence fails
/// the validation closed rather than running it unconfined.
fn bounded(spec: &CommandSpec) -> Result<(CommandSpec, Option<PathBuf>), HostError> {
    bounded_with(spec, KEPT_CAPABILITIES, |name: &str| command::which(name))
}

/// [`bounded`], with the lookup of programs given (a test takes `setpriv`
/// away).
pub(crate) fn bounded_with(
    spec: &CommandSpec,
    capabilities: &str,
    which: impl Fn(&str) -> Option<PathBuf>,
) -> Result<(CommandSpec, Option<PathBuf>), HostError> {
    let Some(program) = which(&spec.program) else {
        return Ok((spec.clone(), None));
    };
    let confiner = |name: &str| {
        which(name).ok_or_else(|| HostError::Sandbox {
            what: format!(
                "`{name}` (util-linux) is not on PATH, and without it `{}` would run with every capability and no memory limit; it is not run",
                spec.program
            ),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        })
    };
    confiner("prlimit")?;
    let setpriv = confiner("setpriv")?;
    let mut args: Vec<OsString> = vec![
        format!("--data={DATA_LIMIT}").into(),
        "--".into(),
        setpriv.into_os_string(),
        format!("--bounding-set={capabilities}").into(),
        "--inh-caps=-all".into(),
        "--".into(),
        program.clone().into_os_string(),
    ];
    args.extend(spec.args.iter().cloned());
    let wrapped = CommandSpec {
        program: "prlimit".to_owned(),
        args,
        ..spec.clone()
    };
    Ok((wrapped, Some(program)))
}

/// A private scratch copy of content for an unsandboxed validator (a
/// non-root process that opted out of the sandbox): a fresh 0700 folder
/// in the temporary directory with one file under the target's name,
/// removed when dropped.
///
/// Everything is done through handles: the temporary directory (`TMPDIR`,
/// the operator's choice, links in its path followed as given) is opened
/// once, the folder made in it with `mkdirat` and taken only if it is the
/// folder just made (`open_made_dir`), the file created
/// in that with `O_CREAT | O_EXCL | O_NOFOLLOW`, and both removed relative
/// to those handles (the folder only while its name still holds it). The
/// validator is given the copy's path, which the kernel walks again: so
/// the temporary directory must be one where nobody else can rename the
/// folder (owned by this user or root, and writable by nobody else or
/// sticky, as `/tmp` is), or the copy is refused.
#[derive(Debug)]
pub struct ScratchCopy {
    tmp: crate::boundary::Dir,
    dir_name: OsString,
    dir: OwnedFd,
    name: OsString,
    file: PathBuf,
}

impl ScratchCopy {
    pub fn new(
        name: &OsStr,
        bytes: &[u8],
        mode: u32,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<ScratchCopy, HostError> {
        Self::new_in(&std::env::temp_dir(), name, bytes, mode, uid, gid)
    }

    /// [`ScratchCopy::new`] in the temporary directory `tmp`.
    pub(crate) fn new_in(
        tmp: &Path,
        name: &OsStr,
        bytes: &[u8],
        mode: u32,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<ScratchCopy, HostError> {
        let tmp = crate::boundary::Dir::open_path(tmp)?;
        let st = rustix::fs::fstat(tmp.fd())
            .map_err(|e| HostError::io("inspect", tmp.path(), std::io::Error::from(e)))?;
        let me = rustix::process::geteuid().as_raw();
        let others_write = st.st_mode & 0o022 != 0 && st.st_mode & 0o1000 == 0;
        if (st.st_uid != me && st.st_uid != 0) || others_write {
            return Err(HostError::io(
                "make a scratch copy in",
                tmp.path(),
                std::io::Error::other(format!(
                    "it is owned by uid {} with mode {:04o}, so someone else could rename the copy's folder while a validator reads it by its path; set TMPDIR to a folder of yours, or a sticky one such as /tmp",
                    st.st_uid,
                    st.st_mode & 0o7777
                )),
            ));
        }
        let mut last_error = Errno::EXIST;
        for _ in 0..8 {
            let mut dir_name = OsString::from("datum-plan-");
            dir_name.push(crate::random_suffix());
            let dir_path = tmp.path().join(&dir_name);
            match rustix::fs::mkdirat(tmp.fd(), &dir_name, Mode::from_raw_mode(0o700)) {
                Ok(()) => {}
                Err(Errno::EXIST) => continue,
                Err(e) => {
                    last_error = e;
                    break;
                }
            }
            let dir = crate::boundary::open_made_dir(tmp.fd(), &dir_name, &dir_path)?;
            let copy = ScratchCopy {
                file: dir_path.join(name),
                tmp,
                dir_name,
                dir,
                name: name.to_owned(),
            };
            copy.fill(bytes, mode, uid, gid)?;
            return Ok(copy);
        }
        Err(HostError::io(
            "make a scratch folder in",
            tmp.path(),
            std::io::Error::from(last_error),
        ))
    }

    fn fill(
        &self,
        bytes: &[u8],
        mode: u32,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<(), HostError> {
        let failed = |op: &'static str| move |e: std::io::Error| HostError::io(op, &self.file, e);
        let fd = rustix::fs::openat(
            &self.dir,
            &self.name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| failed("create")(e.into()))?;
        let mut out = std::fs::File::from(fd);
        std::io::Write::write_all(&mut out, bytes).map_err(failed("write"))?;
        if uid.is_some() || gid.is_some() {
            // Best effort: a non-root process may not give files away.
            let _ = rustix::fs::fchown(
                &out,
                uid.map(rustix::fs::Uid::from_raw),
                gid.map(rustix::fs::Gid::from_raw),
            );
        }
        rustix::fs::fchmod(&out, Mode::from_raw_mode(mode & 0o7777))
            .map_err(|e| failed("set the mode of")(e.into()))
    }

    pub fn path(&self) -> &Path {
        &self.file
    }
}

impl Drop for ScratchCopy {
    fn drop(&mut self) {
        let _ = rustix::fs::unlinkat(&self.dir, &self.name, rustix::fs::AtFlags::empty());
        let _ = crate::boundary::remove_if_ours(
            self.tmp.fd(),
            &self.dir_name,
            &self.dir,
            rustix::fs::AtFlags::REMOVEDIR,
        );
    }
}

/// A mount of the machine's mount table, seen from the thread's copy.
struct Mounted {
    point: PathBuf,
    fd: OwnedFd,
    is_dir: bool,
}

/// Undoes the octal escapes of `/proc/self/mountinfo` (`\040` is a space).
fn unescape(field: &str) -> OsString {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 4 <= bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let value =
                (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(value);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    OsString::from_vec(out)
}

/// Mount points of the thread's mount table that the view must show,
/// parents first: everything but `/` itself and the kernel's own trees,
/// which the view gets fresh.
fn other_mounts() -> Result<Vec<Mounted>, HostError> {
    let text = std::fs::read_to_string("/proc/thread-self/mountinfo").map_err(|source| {
        HostError::Sandbox {
            what: "read /proc/thread-self/mountinfo".to_owned(),
            source,
        }
    })?;
    let mut points: Vec<PathBuf> = Vec::new();
    for line in text.lines() {
        let Some(field) = line.split(' ').nth(4) else {
            continue;
        };
        let point = PathBuf::from(unescape(field));
        let skip = point == Path::new("/")
            || ["/proc", "/sys", "/dev"]
                .iter()
                .any(|k| point.starts_with(k));
        if !skip {
            // A point mounted over twice is opened once (the top one).
            points.retain(|p| p != &point);
            points.push(point);
        }
    }
    points.sort_by_key(|p| p.components().count());
    let mut out = Vec::new();
    for point in points {
        // O_PATH: no permission needed, and an automount is not triggered.
        let Ok(fd) = rustix::fs::open(&point, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()) else {
            continue;
        };
        let is_dir = rustix::fs::fstat(&fd)
            .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory);
        out.push(Mounted { point, fd, is_dir });
    }
    Ok(out)
}

pub(crate) fn fd_path(fd: &OwnedFd) -> String {
    format!("/proc/thread-self/fd/{}", fd.as_raw_fd())
}

/// Gives this thread its own root and working folder and new mount,
/// network, IPC, UTS and PID namespaces (see the module header), every
/// mount made private so that nothing propagates back.
pub(crate) fn own_namespaces() -> Result<(), HostError> {
    nix::sched::unshare(
        CloneFlags::CLONE_FS
            | CloneFlags::CLONE_NEWNS
            | CloneFlags::CLONE_NEWNET
            | CloneFlags::CLONE_NEWIPC
            | CloneFlags::CLONE_NEWUTS
            | CloneFlags::CLONE_NEWPID,
    )
    .map_err(|e| HostError::Sandbox {
        what: "create the namespaces (unshare)".to_owned(),
        source: std::io::Error::from_raw_os_error(e as i32),
    })?;
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )
    .map_err(fail("make the mounts private"))
}

/// Builds the view on this thread and `chroot`s into it.
fn enter_view(placed: &[Placed]) -> Result<(), HostError> {
    own_namespaces()?;
    let mounts = other_mounts()?;

    let scratch = Path::new(SCRATCH);
    mount(
        "tmpfs",
        scratch,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        &format!("size={SCRATCH_SIZE},mode=0700"),
    )
    .map_err(fail("mount the scratch tmpfs"))?;
    let view = scratch.join("view");
    for dir in ["up", "work", "view"] {
        mkdir(&scratch.join(dir), 0o700)?;
    }
    let layer = |i: usize| -> Result<String, HostError> {
        let up = scratch.join("up").join(i.to_string());
        let work = scratch.join("work").join(i.to_string());
        mkdir(&up, 0o755)?;
        mkdir(&work, 0o700)?;
        Ok(format!(
            "upperdir={},workdir={}",
            up.display(),
            work.display()
        ))
    };
    let options = format!("lowerdir=/,{}", layer(0)?);
    mount("overlay", &view, "overlay", MountFlags::empty(), &options)
        .map_err(fail("mount the overlay of / (is overlayfs available?)"))?;

    for (i, m) in mounts.iter().enumerate() {
        let relative = m.point.strip_prefix("/").unwrap_or(&m.point);
        let target = view.join(relative);
        if m.is_dir {
            let options = format!("lowerdir={},{}", fd_path(&m.fd), layer(i + 1)?);
            match mount("overlay", &target, "overlay", MountFlags::empty(), &options) {
                Ok(()) => continue,
                // Its mount point is not in the view (hidden by another
                // mount): nothing to show it on.
                Err(Errno::NOENT | Errno::NOTDIR) => continue,
                // A file system overlayfs cannot sit on: read-only instead.
                Err(_) => {}
            }
        }
        match rustix::mount::mount_bind(fd_path(&m.fd).as_str(), &target) {
            Ok(()) => {
                rustix::mount::mount_remount(&target, MountFlags::BIND | MountFlags::RDONLY, c"")
                    .map_err(fail(format!(
                        "make {} read-only in the view",
                        m.point.display()
                    )))?
            }
            Err(Errno::NOENT | Errno::NOTDIR) => {}
            Err(e) => {
                return Err(fail(format!("show {} in the view", m.point.display()))(e));
            }
        }
    }

    kernel_trees(&view)?;
    for p in placed {
        place(&view, p)?;
    }
    rustix::process::chroot(&view).map_err(fail("chroot into the view"))?;
    rustix::process::chdir("/").map_err(fail("enter the view"))?;
    Ok(())
}

/// A fresh `/proc`, a private `/dev`, a read-only `/sys`.
fn kernel_trees(view: &Path) -> Result<(), HostError> {
    let proc = view.join("proc");
    let fresh = mount(
        "proc",
        &proc,
        "proc",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        "",
    );
    match fresh {
        Ok(()) => {
            for ro in ["sys", "sysrq-trigger"] {
                let at = proc.join(ro);
                if rustix::mount::mount_bind(&at, &at).is_ok() {
                    rustix::mount::mount_remount(&at, MountFlags::BIND | MountFlags::RDONLY, c"")
                        .map_err(fail(format!("make {} read-only", at.display())))?;
                }
            }
        }
        // Some containers forbid a new procfs: the machine's, recursively.
        Err(_) => rustix::mount::mount_bind_recursive("/proc", &proc)
            .map_err(fail("show /proc in the view"))?,
    }

    private_dev(&view.join("dev"))?;

    let sys = view.join("sys");
    if rustix::mount::mount_bind("/sys", &sys).is_ok() {
        rustix::mount::mount_remount(&sys, MountFlags::BIND | MountFlags::RDONLY, c"")
            .map_err(fail("make /sys read-only in the view"))?;
    }
    Ok(())
}

/// A `/dev` of its own at `dev` (an existing folder): a tmpfs with `null`,
/// `zero`, `full`, `random`, `urandom` and `tty` bound from the machine,
/// and the usual links; no disk, no terminal of the machine's but `tty`.
pub(crate) fn private_dev(dev: &Path) -> Result<(), HostError> {
    mount(
        "tmpfs",
        dev,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NOEXEC,
        "size=1m,mode=0755",
    )
    .map_err(fail("mount /dev in the view"))?;
    for node in ["null", "zero", "full", "random", "urandom", "tty"] {
        let target = dev.join(node);
        let created = rustix::fs::open(
            &target,
            OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o666),
        )
        .map_err(fail(format!("create {}", target.display())))?;
        drop(created);
        let source = Path::new("/dev").join(node);
        if let Err(e) = rustix::mount::mount_bind(&source, &target) {
            // A machine without /dev/tty (no terminal at all) is fine.
            if node != "tty" {
                return Err(fail(format!("show {} in the view", source.display()))(e));
            }
        }
    }
    for (name, to) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ] {
        rustix::fs::symlinkat(to, rustix::fs::CWD, dev.join(name))
            .map_err(fail(format!("create /dev/{name} in the view")))?;
    }
    mkdir(&dev.join("pts"), 0o755)?;
    mkdir(&dev.join("shm"), 0o1777)?;
    Ok(())
}

/// Writes one placed file into the view, relative to handles (no link in
/// the view is followed either), creating missing folders 0755.
fn place(view: &Path, p: &Placed) -> Result<(), HostError> {
    let what = || format!("place {} in the view", p.path.display());
    let mut dir: OwnedFd = rustix::fs::open(
        view,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(fail(what()))?;
    let parts: Vec<&OsStr> = crate::boundary::components(&p.path);
    let Some((name, parents)) = parts.split_last() else {
        return Err(fail(what())(Errno::INVAL));
    };
    let walk = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    for part in parents {
        dir = match rustix::fs::openat(&dir, *part, walk, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => {
                rustix::fs::mkdirat(&dir, *part, Mode::from_raw_mode(0o755))
                    .map_err(fail(what()))?;
                rustix::fs::openat(&dir, *part, walk, Mode::empty()).map_err(fail(what()))?
            }
            Err(e) => return Err(fail(what())(e)),
        };
    }
    // Whatever the view had there goes (in the view only).
    let _ = rustix::fs::unlinkat(&dir, *name, rustix::fs::AtFlags::empty());
    let fd = rustix::fs::openat(
        &dir,
        *name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(fail(what()))?;
    let mut file = std::fs::File::from(fd);
    std::io::Write::write_all(&mut file, &p.bytes).map_err(|source| HostError::Sandbox {
        what: what(),
        source,
    })?;
    if p.uid.is_some() || p.gid.is_some() {
        rustix::fs::fchown(
            &file,
            p.uid.map(rustix::fs::Uid::from_raw),
            p.gid.map(rustix::fs::Gid::from_raw),
        )
        .map_err(fail(what()))?;
    }
    rustix::fs::fchmod(&file, Mode::from_raw_mode(p.mode & 0o7777)).map_err(fail(what()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A non-root run's scratch copy for an unsandboxed validator: made
    /// through handles, in a temporary directory where nobody else can
    /// rename its folder while the validator reads it by its path.
    #[test]
    fn a_scratch_copy_is_made_only_where_nobody_else_can_move_it() {
        use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
        let base = tempfile::tempdir().unwrap();
        let folder = |name: &str, mode: u32, uid: u32| {
            let p = base.path().join(name);
            std::fs::create_dir(&p).unwrap();
            std::os::unix::fs::chown(&p, Some(uid), None).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            p
        };
        let me = rustix::process::geteuid().as_raw();
        let make = |tmp: &Path| {
            ScratchCopy::new_in(tmp, OsStr::new("app.json"), b"{}\n", 0o640, None, None)
        };
        // Everyone's but sticky, as /tmp is, or this user's own: taken.
        for tmp in [folder("sticky", 0o1777, me), folder("mine", 0o755, me)] {
            let copy = make(&tmp).unwrap();
            assert_eq!(std::fs::read(copy.path()).unwrap(), b"{}\n");
            let file = std::fs::symlink_metadata(copy.path()).unwrap();
            assert_eq!(file.permissions().mode() & 0o7777, 0o640);
            let dir = std::fs::metadata(copy.path().parent().unwrap()).unwrap();
            assert_eq!((dir.permissions().mode() & 0o7777, dir.uid()), (0o700, me));
            drop(copy);
            assert_eq!(
                std::fs::read_dir(&tmp).unwrap().count(),
                0,
                "removed when dropped"
            );
        }
        // Writable by others without the sticky bit, or another user's:
        // refused, nothing made there.
        for tmp in [folder("open", 0o777, me), folder("theirs", 0o755, 1000)] {
            let err = make(&tmp).unwrap_err().to_string();
            assert!(err.contains("set TMPDIR"), "{}: {err}", tmp.display());
            assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
        }
    }

    #[test]
    fn nothing_is_laid_where_code_is_read_from_and_configuration_is() {
        let refused = |path: &str, bytes: &[u8]| not_placeable(Path::new(path), bytes);
        for path in [
            "/usr/sbin/nginx",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/local/lib/x.so",
            "/lib64/ld-linux-x86-64.so.2",
            "/bin/sh",
            "/etc/alternatives/awk",
            "/etc/ld.so.preload",
            "/etc/ld.so.conf.d/x.conf",
            "/etc/ssl/openssl.cnf",
            "/etc/perl/sitecustomize.pl",
            "/etc/python3.11/sitecustomize.py",
            "/etc/nginx/../ld.so.preload",
            "etc/nginx/nginx.conf",
        ] {
            assert!(refused(path, b"text\n").is_some(), "{path} was placeable");
        }
        assert!(
            refused("/etc/nginx/evil.so", b"\x7fELF\x02\x01")
                .is_some_and(|why| why.contains("ELF"))
        );
        // What validators are for: configuration, certificates, and
        // Debian's nftables.conf, a script (`#!/usr/sbin/nft -f`).
        for path in [
            "/etc/ssh/sshd_config",
            "/etc/nginx/sites-enabled/shop.conf",
            "/etc/ssl/certs/shop.pem",
            "/etc/ssl/private/shop.key",
            "/etc/systemd/system/x.service",
            "/etc/ld.so.confx",
            "/srv/usr/x",
        ] {
            assert_eq!(refused(path, b"text\n"), None, "{path}");
        }
        assert_eq!(refused("/etc/nftables.conf", b"#!/usr/sbin/nft -f\n"), None);
    }

    #[test]
    fn a_program_is_not_run_unconfined_when_setpriv_or_prlimit_is_missing() {
        let spec = CommandSpec::new("sshd").arg("-t");
        let found = |missing: &'static str| {
            move |name: &str| (name != missing).then(|| PathBuf::from("/usr/bin").join(name))
        };
        for missing in ["setpriv", "prlimit"] {
            let err = bounded_with(&spec, KEPT_CAPABILITIES, found(missing))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&format!("`{missing}` (util-linux) is not on PATH"))
                    && err.contains("`sshd` would run with every capability"),
                "{err}"
            );
        }
        // Both there: the program runs under them, looked up first.
        let (wrapped, program) = bounded_with(&spec, KEPT_CAPABILITIES, found("none")).unwrap();
        assert_eq!(wrapped.program, "prlimit");
        assert_eq!(program, Some(PathBuf::from("/usr/bin/sshd")));
        assert!(wrapped.args.iter().any(|a| a == "/usr/bin/setpriv"));
        // A program that is not there fails as a missing program.
        let (as_is, none) = bounded_with(&spec, KEPT_CAPABILITIES, |_| None).unwrap();
        assert_eq!((as_is.program.as_str(), none), ("sshd", None));
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape("/mnt/a\\040b"), OsString::from("/mnt/a b"));
        assert_eq!(unescape("/plain"), OsString::from("/plain"));
        assert_eq!(unescape("/tab\\011x\\134"), OsString::from("/tab\tx\\"));
    }

    #[test]
    fn a_sandboxed_program_leaves_no_trace_and_sees_placed_files() {
        if rustix::process::geteuid().as_raw() != 0 {
            println!("skipped: the sandbox needs root");
            return;
        }
        let watched = tempfile::tempdir().unwrap();
        let dir = watched.path().canonicalize().unwrap();
        let placed = dir.join("not-yet/placed.conf");
        let script = format!(
            "cat {p}; echo made > {d}/made; mkdir {d}/sub; touch /etc/datum-sandbox-test; echo $$",
            p = placed.display(),
            d = dir.display()
        );
        let mut sandbox = Sandbox::new();
        sandbox.place(&placed, b"from the caller\n".to_vec(), 0o640, None, None);
        let out = sandbox
            .run(&CommandSpec::new("sh").arg("-c").arg(script))
            .unwrap();
        assert!(out.success(), "{}", out.stderr.text());
        assert_eq!(
            out.stdout.text(),
            "from the caller\n1\n",
            "PID 1 in its namespace"
        );
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "nothing left in the watched folder"
        );
        assert!(!Path::new("/etc/datum-sandbox-test").exists());
    }

    #[test]
    fn a_sandboxed_program_cannot_take_the_memory_of_the_host() {
        if rustix::process::geteuid().as_raw() != 0 {
            println!("skipped: the sandbox needs root");
            return;
        }
        // Its data limit, as the program sees it (KiB).
        let out = Sandbox::new()
            .run(&CommandSpec::new("sh").arg("-c").arg("ulimit -d"))
            .unwrap();
        assert_eq!(out.stdout.text().trim(), (DATA_LIMIT / 1024).to_string());
        assert!(out.program.ends_with("sh"), "{}", out.program.display());
        // A program that is not there is named as before.
        let err = Sandbox::new()
            .run(&CommandSpec::new("datum-no-such-program"))
            .unwrap_err();
        assert!(matches!(err, HostError::ProgramNotFound { .. }), "{err}");
    }

    #[test]
    fn a_sandboxed_program_cannot_leave_the_view() {
        if rustix::process::geteuid().as_raw() != 0 {
            println!("skipped: the sandbox needs root");
            return;
        }
        // Root in the view could `chroot` again and climb out to the
        // machine's own root; without the capability it cannot.
        let out = Sandbox::new()
            .run(
                &CommandSpec::new("sh")
                    .arg("-c")
                    .arg("mkdir /.escape && chroot /.escape /bin/true; echo status $?; grep CapBnd /proc/self/status"),
            )
            .unwrap();
        let text = out.stdout.text();
        assert!(!text.contains("status 0"), "{text}");
        let bounding = text
            .lines()
            .find_map(|l| l.strip_prefix("CapBnd:"))
            .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
            .unwrap();
        // CAP_DAC_READ_SEARCH (open_by_handle_at), CAP_SYS_CHROOT,
        // CAP_SYS_PTRACE, CAP_SYS_ADMIN, CAP_MKNOD, CAP_SYS_MODULE: none.
        for bit in [2, 16, 18, 19, 21, 27] {
            assert_eq!(
                bounding & (1 << bit),
                0,
                "capability {bit} kept: {bounding:x}"
            );
        }
    }

    #[test]
    fn there_is_no_network_inside() {
        if rustix::process::geteuid().as_raw() != 0 {
            println!("skipped: the sandbox needs root");
            return;
        }
        let out = Sandbox::new()
            .run(&CommandSpec::new("cat").arg("/proc/net/dev"))
            .unwrap();
        let text = out.stdout.text();
        let interfaces: Vec<&str> = text
            .lines()
            .skip(2)
            .filter_map(|l| l.split(':').next())
            .map(str::trim)
            .collect();
        assert_eq!(interfaces, ["lo"], "{text}");
    }
}
