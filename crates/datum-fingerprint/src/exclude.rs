//! Exclusion rules in gitignore syntax, relative to a tree's root.
//!
//! Owns: [`Exclusions`]. An excluded entry is not part of the tree at all: not scanned,
//! not fingerprinted, not reported, and (for the policies) not touched. Must not: read
//! `.gitignore` files from the host; the rules come from the declaration only.

use std::path::Path;

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use crate::error::FingerprintError;

/// A compiled set of gitignore-style rules (`*.swp`, `/cache/`, `!keep.conf`, `**/tmp`).
#[derive(Debug, Clone)]
pub struct Exclusions {
    matcher: Gitignore,
    rules: Vec<String>,
}

impl Exclusions {
    /// Compiles `rules`, each one gitignore line (a rule starting with `/` is anchored at
    /// the tree root; one ending in `/` matches directories only).
    pub fn new<I, S>(rules: I) -> Result<Exclusions, FingerprintError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        // Root "." makes the matcher take the candidate paths as already relative.
        let mut builder = GitignoreBuilder::new(".");
        let mut kept = Vec::new();
        for rule in rules {
            let rule = rule.as_ref();
            builder
                .add_line(None, rule)
                .map_err(|source| FingerprintError::Pattern {
                    pattern: rule.to_owned(),
                    source,
                })?;
            kept.push(rule.to_owned());
        }
        let matcher = builder
            .build()
            .map_err(|source| FingerprintError::Pattern {
                pattern: kept.join("\n"),
                source,
            })?;
        Ok(Exclusions {
            matcher,
            rules: kept,
        })
    }

    /// Whether the entry at `rel` (relative to the tree root) is excluded. A directory
    /// that is excluded takes its whole subtree with it, as in git.
    pub fn is_excluded(&self, rel: &Path, is_dir: bool) -> bool {
        self.matcher.matched(rel, is_dir).is_ignore()
    }

    /// The rules as given.
    pub fn rules(&self) -> &[String] {
        &self.rules
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitignore_semantics_relative_to_the_root() {
        let ex = Exclusions::new(["*.swp", "/cache/", "logs/*.log", "!logs/keep.log", "**/tmp"])
            .unwrap();
        assert!(ex.is_excluded(Path::new("a/b/.x.conf.swp"), false));
        assert!(ex.is_excluded(Path::new("cache"), true));
        assert!(!ex.is_excluded(Path::new("cache"), false), "dir-only rule");
        assert!(
            !ex.is_excluded(Path::new("sub/cache"), true),
            "anchored at the root"
        );
        assert!(ex.is_excluded(Path::new("logs/a.log"), false));
        assert!(
            !ex.is_excluded(Path::new("logs/keep.log"), false),
            "negation"
        );
        assert!(ex.is_excluded(Path::new("x/y/tmp"), true));
        assert!(!ex.is_excluded(Path::new("x/y/tmpfile"), false));
        assert_eq!(ex.rules().len(), 5);
    }

    #[test]
    fn non_utf8_names_are_matched_as_bytes() {
        use std::os::unix::ffi::OsStrExt;
        let ex = Exclusions::new(["*.bak"]).unwrap();
        let name = std::ffi::OsStr::from_bytes(b"caf\xe9.bak");
        assert!(ex.is_excluded(Path::new(name), false));
    }

    #[test]
    fn an_invalid_rule_is_reported_with_the_rule() {
        let err = Exclusions::new(["a/**/[z-a]"]).unwrap_err();
        assert!(err.to_string().contains("[z-a]"), "{err}");
    }
}
