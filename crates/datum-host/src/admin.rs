//! Configuration an administrator keeps outside any repository, trusted only
//! when root alone could have written it (`/etc/datum/validators.d`).
//!
//! Such a file may name programs that run as root, so it is read only when
//! the file, its folder and every folder above it belong to root and cannot
//! be written by anyone else (a world-writable folder above is accepted only
//! with the sticky bit, as `/tmp` has it: others cannot rename what root made
//! there). A link at the file or the folder is refused; the file is read
//! from the folder's handle with `O_NOFOLLOW`, and its owner and mode are
//! those of the file descriptor read, not of a name looked up again.

use std::ffi::OsString;
use std::io::Read as _;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use crate::HostError;
use crate::boundary::errno;

/// Who may have written a file or folder: root only.
fn root_only(path: &Path, st: &rustix::fs::Stat, what: &str) -> Result<(), HostError> {
    let mode = st.st_mode;
    let others_write = mode & 0o022 != 0;
    let sticky = mode & 0o1000 != 0;
    let problem = if st.st_uid != 0 {
        Some(format!("the {what} belongs to uid {}, not root", st.st_uid))
    } else if others_write && !(what == "folder above it" && sticky) {
        Some(format!(
            "the {what} can be written by its group or by others (mode {:o})",
            mode & 0o7777
        ))
    } else {
        None
    };
    match problem {
        Some(problem) => Err(HostError::NotPrivate {
            path: path.to_path_buf(),
            problem: format!("{problem}; only root may be able to change what Datum runs as root"),
        }),
        None => Ok(()),
    }
}

/// The `*.<extension>` files of `dir`, sorted by name, with their text;
/// `None` when `dir` does not exist. Every file, the folder and the folders
/// above it must be root's alone (see the module header).
pub fn read_root_owned(
    dir: &Path,
    extension: &str,
) -> Result<Option<Vec<(PathBuf, String)>>, HostError> {
    let fd = match rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(HostError::io("open directory", dir, errno(e))),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| HostError::io("inspect", dir, errno(e)))?;
    root_only(dir, &st, "folder")?;
    let absolute = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| HostError::io("inspect", dir, e))?
            .join(dir)
    };
    for above in absolute.ancestors().skip(1) {
        let st = rustix::fs::stat(above).map_err(|e| HostError::io("inspect", above, errno(e)))?;
        root_only(above, &st, "folder above it")?;
    }
    let listing_fd = rustix::fs::openat(
        &fd,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| HostError::io("list", dir, errno(e)))?;
    let mut listing =
        rustix::fs::Dir::new(listing_fd).map_err(|e| HostError::io("list", dir, errno(e)))?;
    let mut names: Vec<OsString> = Vec::new();
    while let Some(entry) = listing.read() {
        let entry = entry.map_err(|e| HostError::io("list", dir, errno(e)))?;
        let name = entry.file_name().to_bytes();
        let wanted = name.first() != Some(&b'.')
            && Path::new(std::ffi::OsStr::from_bytes(name))
                .extension()
                .is_some_and(|e| e == extension);
        if wanted {
            names.push(std::ffi::OsStr::from_bytes(name).to_os_string());
        }
    }
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let path = dir.join(&name);
        let file = rustix::fs::openat(
            &fd,
            &name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| HostError::io("open", &path, errno(e)))?;
        let st = rustix::fs::fstat(&file).map_err(|e| HostError::io("inspect", &path, errno(e)))?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(HostError::NotPrivate {
                path,
                problem: "not a regular file".to_owned(),
            });
        }
        root_only(&path, &st, "file")?;
        let mut text = String::new();
        std::fs::File::from(file)
            .read_to_string(&mut text)
            .map_err(|e| HostError::io("read", &path, e))?;
        out.push((path, text));
    }
    Ok(Some(out))
}

/// Checks that the program `path` (links resolved: `/usr/sbin/x` may be an
/// alternatives link) is a regular file that only root can change, in
/// folders only root can change. `Ok(false)` when nothing is there (the
/// program is not installed, or a link leads nowhere): using it is then the
/// caller's failure to report, and the check is made again once it is.
pub fn check_root_owned_file(path: &Path) -> Result<bool, HostError> {
    let real = match path.canonicalize() {
        Ok(real) => real,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(HostError::io("inspect", path, e)),
    };
    let st = rustix::fs::stat(&real).map_err(|e| HostError::io("inspect", &real, errno(e)))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(HostError::NotPrivate {
            path: real,
            problem: "not a regular file".to_owned(),
        });
    }
    root_only(&real, &st, "file")?;
    for above in real.ancestors().skip(1) {
        let st = rustix::fs::stat(above).map_err(|e| HostError::io("inspect", above, errno(e)))?;
        root_only(above, &st, "folder above it")?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn is_root() -> bool {
        rustix::process::geteuid().is_root()
    }

    #[test]
    fn a_missing_folder_is_nothing_and_a_foreign_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            read_root_owned(&dir.path().join("none"), "toml")
                .unwrap()
                .is_none()
        );
        let d = dir.path().join("validators.d");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("a.toml"), "x = 1\n").unwrap();
        std::fs::write(d.join("b.txt"), "ignored\n").unwrap();
        if !is_root() {
            // Owned by this (non-root) user: never trusted.
            let err = read_root_owned(&d, "toml").unwrap_err();
            assert!(err.to_string().contains("not root"), "{err}");
            return;
        }
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(d.join("a.toml"), std::fs::Permissions::from_mode(0o644)).unwrap();
        let read = read_root_owned(&d, "toml").unwrap().unwrap();
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].1, "x = 1\n");
        // Writable by others: refused.
        std::fs::set_permissions(d.join("a.toml"), std::fs::Permissions::from_mode(0o666)).unwrap();
        let err = read_root_owned(&d, "toml").unwrap_err();
        assert!(
            err.to_string()
                .contains("written by its group or by others"),
            "{err}"
        );
        std::fs::set_permissions(d.join("a.toml"), std::fs::Permissions::from_mode(0o644)).unwrap();
        // Owned by someone else: refused.
        std::os::unix::fs::chown(d.join("a.toml"), Some(65534), None).unwrap();
        let err = read_root_owned(&d, "toml").unwrap_err();
        assert!(err.to_string().contains("uid 65534"), "{err}");
        std::os::unix::fs::chown(d.join("a.toml"), Some(0), None).unwrap();
        // A link instead of a file: refused, not followed.
        std::fs::remove_file(d.join("a.toml")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", d.join("a.toml")).unwrap();
        assert!(read_root_owned(&d, "toml").is_err());
        // A folder someone else may write to: refused.
        std::fs::remove_file(d.join("a.toml")).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = read_root_owned(&d, "toml").unwrap_err();
        assert!(err.to_string().contains("folder can be written"), "{err}");
    }
}
