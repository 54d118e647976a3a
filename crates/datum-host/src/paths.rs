//! Declared paths and where they land under `--root`.
//!
//! A manifest names paths as they are on the managed machine (`/etc/motd`).
//! This module checks that such a path is absolute and already normalised,
//! and maps it under the root a pass runs against. It is pure (no file-system
//! access), so providers call [`check_declared`] from their host-free checks.
//! It must not resolve symlinks: what a path points at is the file-system
//! module's business, and always done without following links.

use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::HostError;

/// Checks that `declared` is absolute and normalised: no `.` or `..`
/// components, no doubled or trailing slash. One spelling per path keeps
/// resource identity and conflict detection simple, and rules out a manifest
/// climbing out of `--root` with `..`.
pub fn check_declared(declared: &Path) -> Result<(), HostError> {
    let bytes = declared.as_os_str().as_bytes();
    if bytes.first() != Some(&b'/') {
        return Err(HostError::NotAbsolute {
            path: declared.to_path_buf(),
        });
    }
    // One scan for what no path may hold (a NUL named as such), one walk
    // of the names: this runs for every path of every pass.
    if bytes.iter().any(|&b| b < 0x20 || b == 0x7f) {
        let path = declared.to_path_buf();
        return Err(if bytes.contains(&0) {
            HostError::NulInPath { path }
        } else {
            HostError::ControlInPath { path }
        });
    }
    if bytes == b"/" {
        return Ok(());
    }
    // PATH_MAX and NAME_MAX (Linux): longer is refused by every system
    // call, so at apply time, after everything before it was written.
    const PATH_MAX: usize = 4095;
    const NAME_MAX: usize = 255;
    let too_long = || HostError::PathTooLong {
        path: declared.to_path_buf(),
        max: PATH_MAX,
    };
    if bytes.len() > PATH_MAX {
        return Err(too_long());
    }
    let mut clean = true;
    for part in bytes[1..].split(|b| *b == b'/') {
        if part.len() > NAME_MAX {
            return Err(too_long());
        }
        clean &= !part.is_empty() && part != b"." && part != b"..";
    }
    if clean {
        Ok(())
    } else {
        Err(HostError::NotNormalised {
            path: declared.to_path_buf(),
            suggestion: lexical_normal(declared),
        })
    }
}

/// The parent and the last component of a path [`check_declared`]
/// accepted, cut at its last slash (what `Path::parent` and
/// `Path::file_name` give for such a path, without parsing it into
/// components: a metadata pass asks this of 20,000 paths). `None` for `/`.
pub fn split_declared(declared: &Path) -> Option<(&Path, &std::ffi::OsStr)> {
    use std::os::unix::ffi::OsStrExt as _;
    let bytes = declared.as_os_str().as_bytes();
    let cut = bytes.iter().rposition(|b| *b == b'/')?;
    let name = &bytes[cut + 1..];
    if name.is_empty() {
        return None;
    }
    let parent = if cut == 0 { &bytes[..1] } else { &bytes[..cut] };
    Some((
        Path::new(std::ffi::OsStr::from_bytes(parent)),
        std::ffi::OsStr::from_bytes(name),
    ))
}

/// The path a declared one maps to under `root`: `/tmp/r` + `/etc/motd` is
/// `/tmp/r/etc/motd`.
pub fn resolve(root: &Path, declared: &Path) -> Result<PathBuf, HostError> {
    check_declared(declared)?;
    let relative = declared.strip_prefix("/").unwrap_or(declared);
    if relative.as_os_str().is_empty() {
        return Ok(root.to_path_buf());
    }
    Ok(root.join(relative))
}

/// `declared` with `.`, `..` and empty components folded away, as an
/// absolute path (the suggestion in an error message; where a followed
/// link's target leads). `..` at the top stays at the top.
pub fn lexical_normal(declared: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for component in declared.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_declared_path_splits_as_parent_and_file_name_do() {
        for declared in ["/etc", "/etc/motd", "/a/b/c.d", "/a b/é/x", "/.hidden/..x"] {
            let path = Path::new(declared);
            check_declared(path).unwrap();
            assert_eq!(
                split_declared(path),
                Some((path.parent().unwrap(), path.file_name().unwrap())),
                "{declared}"
            );
        }
        assert_eq!(split_declared(Path::new("/")), None);
    }

    #[test]
    fn declared_paths_join_under_the_root() {
        let cases = [
            ("/tmp/r", "/etc/motd", "/tmp/r/etc/motd"),
            ("/", "/etc/motd", "/etc/motd"),
            ("/tmp/r", "/", "/tmp/r"),
            ("/tmp/r/", "/a/b c/d", "/tmp/r/a/b c/d"),
        ];
        for (root, declared, want) in cases {
            let got = resolve(Path::new(root), Path::new(declared)).unwrap();
            assert_eq!(got, PathBuf::from(want), "{root} + {declared}");
        }
    }

    #[test]
    fn control_characters_and_names_too_long_for_the_system_are_rejected() {
        for declared in ["/etc/mo\ntd", "/etc/\tx", "/etc/x\u{7f}", "/etc/\r"] {
            let err = check_declared(Path::new(declared)).unwrap_err();
            assert!(
                matches!(err, HostError::ControlInPath { .. }),
                "{declared:?}: {err}"
            );
            // Shown escaped: the message stays on one line.
            assert!(!err.to_string().contains('\n'), "{err}");
        }
        let name = "n".repeat(255);
        check_declared(Path::new(&format!("/etc/{name}"))).unwrap();
        let long_name = format!("/etc/{name}n");
        let long_path = format!("/{}", vec!["d".repeat(200); 21].join("/"));
        for declared in [long_name, long_path] {
            let err = check_declared(Path::new(&declared)).unwrap_err();
            assert!(matches!(err, HostError::PathTooLong { .. }), "{err}");
        }
        // UTF-8 beyond ASCII is no control character.
        check_declared(Path::new("/etc/caf\u{e9}/\u{2028}")).unwrap();
    }

    #[test]
    fn relative_and_unnormalised_paths_are_rejected() {
        let cases = [
            ("etc/motd", None),
            ("", None),
            ("/etc/../shadow", Some("/shadow")),
            ("/etc/./motd", Some("/etc/motd")),
            ("/etc//motd", Some("/etc/motd")),
            ("/etc/app/", Some("/etc/app")),
            ("/..", Some("/")),
            ("/etc/mo\0td", None),
        ];
        for (declared, suggestion) in cases {
            let err = resolve(Path::new("/tmp/r"), Path::new(declared)).unwrap_err();
            match (err, suggestion) {
                (HostError::NotAbsolute { path } | HostError::NulInPath { path }, None) => {
                    assert_eq!(path, Path::new(declared));
                }
                (
                    HostError::NotNormalised {
                        suggestion: got, ..
                    },
                    Some(want),
                ) => {
                    assert_eq!(got, Path::new(want), "{declared}");
                }
                (other, _) => panic!("{declared}: unexpected {other}"),
            }
        }
    }
}
