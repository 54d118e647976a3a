//! Which files make up one module directory of a stack.
//!
//! OpenTofu and Terraform read every `*.tf` (native syntax) and `*.tf.json` (JSON syntax)
//! file of a directory, in name order, and then the override files (`override.tf`,
//! `*_override.tf` and their `.tf.json` forms), whose blocks are merged over the others.
//! Both [`crate::rules`] (reading `ignore_changes`) and [`crate::codify`] (writing accepted
//! values) list files through [`module_files`], so the two never disagree about what the
//! configuration is. Nothing here parses a file.

use std::path::{Path, PathBuf};

/// The syntax of a configuration file, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    /// `*.tf`: HCL native syntax.
    Native,
    /// `*.tf.json`: JSON syntax.
    Json,
}

/// One configuration file of a module directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFile {
    pub path: PathBuf,
    pub syntax: Syntax,
    /// `override.tf`, `x_override.tf` (and `.tf.json`): merged over the other files.
    pub is_override: bool,
}

/// The syntax of `name`, or `None` when OpenTofu would not read it.
pub fn syntax_of(name: &str) -> Option<Syntax> {
    // Editor backups and hidden files are not configuration (Terraform skips them too).
    if name.starts_with('.') || name.starts_with('#') || name.ends_with('~') {
        return None;
    }
    if name.ends_with(".tf.json") {
        Some(Syntax::Json)
    } else if name.ends_with(".tf") {
        Some(Syntax::Native)
    } else {
        None
    }
}

fn is_override(name: &str) -> bool {
    let stem = name
        .strip_suffix(".tf.json")
        .or_else(|| name.strip_suffix(".tf"))
        .unwrap_or(name);
    stem == "override" || stem.ends_with("_override")
}

/// The configuration files of the module in `dir`: ordinary files first, then override
/// files, each group in name order (the order OpenTofu reads them in).
pub fn module_files(dir: &Path) -> std::io::Result<Vec<ConfigFile>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(syntax) = syntax_of(&name) else {
            continue;
        };
        // A directory named `x.tf` is not a file to read.
        if !entry.path().is_file() {
            continue;
        }
        files.push(ConfigFile {
            path: entry.path(),
            syntax,
            is_override: is_override(&name),
        });
    }
    files.sort_by(|a, b| (a.is_override, &a.path).cmp(&(b.is_override, &b.path)));
    Ok(files)
}

/// Whether a module `source` is a local path (the only kind whose files are on disk here).
pub fn is_local_source(source: &str) -> bool {
    source.starts_with("./") || source.starts_with("../")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(syntax_of("main.tf"), Some(Syntax::Native));
        assert_eq!(syntax_of("main.tf.json"), Some(Syntax::Json));
        assert_eq!(syntax_of("main.tfvars"), None);
        assert_eq!(syntax_of(".main.tf"), None);
        assert_eq!(syntax_of("main.tf~"), None);
        assert!(is_override("override.tf") && is_override("a_override.tf.json"));
        assert!(!is_override("overrides.tf"));
    }

    #[test]
    fn overrides_come_last() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["b.tf", "a_override.tf", "a.tf.json", "notes.md"] {
            std::fs::write(dir.path().join(name), "").unwrap();
        }
        std::fs::create_dir(dir.path().join("dir.tf")).unwrap();
        let names: Vec<String> = module_files(dir.path())
            .unwrap()
            .iter()
            .map(|f| f.path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a.tf.json", "b.tf", "a_override.tf"]);
    }
}
