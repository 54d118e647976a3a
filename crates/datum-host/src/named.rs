//! Files the operator names on the command line: `--host-file`, the report
//! of `--markdown FILE`.
//!
//! Their path is the operator's choice, so links in it are followed as
//! given; but a report is written without ever following a link at the
//! file itself (a link found there is an error, never a target): to a fresh
//! temporary file beside it (`O_EXCL | O_NOFOLLOW`, mode 0600), renamed over
//! the name relative to the folder's handle, which replaces a file and never
//! writes into what a link points at.
//!
//! This module must not be used for managed paths (see [`crate::Host`]) or
//! for Datum's own folders (see [`crate::PrivateDir`]).

use std::ffi::OsString;
use std::io::{Read as _, Write as _};
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags};

use crate::boundary::{Dir, errno};
use crate::{FileKind, HostError};

/// Reads a file the operator named, links followed as given.
pub fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut file = std::fs::File::from(fd);
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// [`read`] as text (invalid UTF-8 is an error).
pub fn read_to_string(path: &Path) -> std::io::Result<String> {
    String::from_utf8(read(path)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Writes `bytes` to the report file `path` (see the module header).
pub fn write_report(path: &Path, bytes: &[u8]) -> Result<(), HostError> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(HostError::io(
            "write",
            path,
            std::io::Error::from(std::io::ErrorKind::InvalidInput),
        ));
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let dir = Dir::open_path(parent)?;
    let at = dir.entry(name);
    if let Some(stat) = at.lstat()?
        && stat.kind != FileKind::File
    {
        return Err(HostError::NotPrivate {
            path: path.to_path_buf(),
            problem: format!(
                "a {} is where the report goes; Datum never writes through one (remove it, or name another file)",
                stat.kind.word()
            ),
        });
    }
    let mut tmp = OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".tmp-{}", crate::random_suffix()));
    let tmp_path = parent.join(&tmp);
    let fd = rustix::fs::openat(
        dir.fd(),
        &tmp,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .map_err(|e| HostError::io("create", &tmp_path, errno(e)))?;
    let mut file = std::fs::File::from(fd);
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| HostError::io("write", &tmp_path, e))
        .and_then(|()| {
            rustix::fs::renameat(dir.fd(), &tmp, dir.fd(), name)
                .map_err(|e| HostError::io("write", path, errno(e)))
        });
    if written.is_err() {
        let _ = rustix::fs::unlinkat(dir.fd(), &tmp, AtFlags::empty());
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_replaces_a_file_and_refuses_a_planted_link() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let report = dir.path().join("report.md");
        write_report(&report, b"one").unwrap();
        write_report(&report, b"two").unwrap();
        assert_eq!(std::fs::read(&report).unwrap(), b"two");
        let victim = outside.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let link = dir.path().join("linked.md");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let err = write_report(&link, b"report").unwrap_err();
        assert!(
            err.to_string().contains("symlink is where the report goes"),
            "{err}"
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        // Nothing left behind but the two names.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }
}
