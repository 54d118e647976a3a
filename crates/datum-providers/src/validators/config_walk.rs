//! What the prechecks share as they read a configuration the way its
//! program will (nginx, apache2, haproxy): the limits of the walk through
//! its includes, one file read, and the files an include names.

use std::path::{Path, PathBuf};

use datum_host::sandbox::Sandbox;

use super::nginx::glob_match;

/// Files of one configuration followed at most.
pub const MAX_FILES: usize = 2000;

/// Largest configuration file read.
pub const MAX_FILE: u64 = 4 * 1024 * 1024;

/// Include depth followed at most.
pub const MAX_DEPTH: usize = 32;

/// Counts one more file of a walk (`files` so far) at include depth
/// `depth`: beyond [`MAX_FILES`] or [`MAX_DEPTH`] the walk is refused
/// rather than cut short (a precheck that stopped early would pass what it
/// did not read).
pub fn count(files: &mut usize, path: &Path, depth: usize) -> Result<(), String> {
    *files += 1;
    if *files > MAX_FILES || depth > MAX_DEPTH {
        return Err(format!(
            "{}: the configuration includes more than Datum follows ({MAX_FILES} files, {MAX_DEPTH} levels)",
            path.display()
        ));
    }
    Ok(())
}

/// The bytes of `path` as the validator will read it in `view` (`None`: it
/// cannot be read as a file, a folder or nothing there, which the caller
/// decides about); a file over [`MAX_FILE`] bytes is refused.
pub fn read(view: &Sandbox, path: &Path) -> Result<Option<Vec<u8>>, String> {
    let Ok(bytes) = view.read_as_program(path, MAX_FILE + 1) else {
        return Ok(None);
    };
    if bytes.len() as u64 > MAX_FILE {
        return Err(format!(
            "{}: larger than {MAX_FILE} bytes; Datum does not check a configuration file that large",
            path.display()
        ));
    }
    Ok(Some(bytes))
}

/// The files an include (`directive`, as written, for the error) of
/// `pattern` names, in name order: a wildcard only in the last part,
/// matched like glob(3) and the programs' fnmatch (a hidden file only when
/// the pattern names one); a wildcard in a folder name is refused.
pub fn expand(
    view: &Sandbox,
    pattern: &Path,
    at: &str,
    directive: &str,
) -> Result<Vec<PathBuf>, String> {
    let wild = |s: &str| s.contains(['*', '?', '[']);
    let Some(parent) = pattern.parent() else {
        return Ok(Vec::new());
    };
    if wild(&parent.to_string_lossy()) {
        return Err(format!(
            "{at}: {directive} {}: Datum does not follow a wildcard in a folder name",
            pattern.display()
        ));
    }
    let name = pattern
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !wild(&name) {
        return Ok(vec![pattern.to_path_buf()]);
    }
    let mut names = view.list_as_program(parent).unwrap_or_default();
    names.sort();
    Ok(names
        .into_iter()
        .filter(|n| {
            let n = n.to_string_lossy();
            (!n.starts_with('.') || name.starts_with('.')) && glob_match(&name, &n)
        })
        .map(|n| parent.join(n))
        .collect())
}
