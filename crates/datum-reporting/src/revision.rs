//! The repository revision a fleet report names.
//!
//! One function, [`repository_revision`]: `git:<commit>` when the
//! repository folder is (inside) a git checkout, read from the checkout's
//! own files (`HEAD`, the ref it names, `packed-refs`; no `git` process),
//! else what the catalogue was compiled from as the snapshot names it
//! (`git:<commit>` of a checkout `datum pull` wrote, `stamp:<digest>` of
//! any other folder), else `unknown`.
//!
//! Owns: that choice. Must not: run git, or write anything.

use std::path::{Path, PathBuf};

/// The revision of the repository at `repo`, whose catalogue was compiled
/// from `compiled_from` (`git:<commit>` or `stamp:<digest>`, when a key was
/// taken).
pub fn repository_revision(repo: &Path, compiled_from: Option<&str>) -> String {
    if let Some(commit) = git_head(repo) {
        return format!("git:{commit}");
    }
    compiled_from.map_or_else(|| "unknown".to_owned(), str::to_owned)
}

fn read_text(path: &Path) -> Option<String> {
    datum_host::repo::read(path)
        .ok()
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
}

/// The git folder of the checkout holding `repo`: `.git` in it or a parent
/// (a folder, or a file `gitdir: PATH` in a worktree).
fn git_dir(repo: &Path) -> Option<PathBuf> {
    let start = datum_host::repo::canonicalize(repo).ok()?;
    for dir in start.ancestors() {
        let dot = dir.join(".git");
        match datum_host::repo::symlink_metadata(&dot).ok() {
            Some(s) if s.is_dir() => return Some(dot),
            Some(s) if s.is_file() => {
                let text = read_text(&dot)?;
                let target = PathBuf::from(text.strip_prefix("gitdir:")?.trim());
                let target = if target.is_absolute() {
                    target
                } else {
                    dir.join(target)
                };
                // Read with links refused, so from its canonical path.
                return datum_host::repo::canonicalize(&target).ok();
            }
            _ => {}
        }
    }
    None
}

fn is_commit(text: &str) -> bool {
    (text.len() == 40 || text.len() == 64) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The commit `HEAD` names in the checkout holding `repo`.
pub fn git_head(repo: &Path) -> Option<String> {
    let git = git_dir(repo)?;
    let head = read_text(&git.join("HEAD"))?;
    if is_commit(&head) {
        return Some(head);
    }
    let name = head.strip_prefix("ref:")?.trim().to_owned();
    // A linked worktree keeps its refs in the common folder.
    let common = read_text(&git.join("commondir"))
        .map(|c| {
            if Path::new(&c).is_absolute() {
                PathBuf::from(c)
            } else {
                git.join(c)
            }
        })
        .unwrap_or_else(|| git.clone());
    for dir in [&git, &common] {
        if let Some(commit) = read_text(&dir.join(&name)).filter(|c| is_commit(c)) {
            return Some(commit);
        }
    }
    let packed = read_text(&common.join("packed-refs"))?;
    packed.lines().find_map(|line| {
        let (commit, r) = line.split_once(' ')?;
        (r.trim() == name && is_commit(commit)).then(|| commit.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_head_through_a_ref_packed_refs_and_a_worktree_file() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("checkout");
        let sub = repo.join("examples");
        std::fs::create_dir_all(sub.join("x")).unwrap();
        let git = repo.join(".git");
        std::fs::create_dir_all(git.join("refs/heads")).unwrap();
        let a = "a".repeat(40);
        std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(git.join("refs/heads/main"), format!("{a}\n")).unwrap();
        assert_eq!(repository_revision(&sub, Some("s")), format!("git:{a}"));
        // Packed.
        std::fs::remove_file(git.join("refs/heads/main")).unwrap();
        let b = "b".repeat(40);
        std::fs::write(
            git.join("packed-refs"),
            format!("# pack-refs\n{b} refs/heads/main\n"),
        )
        .unwrap();
        assert_eq!(git_head(&sub), Some(b.clone()));
        // A worktree: .git is a file naming the worktree's folder.
        let wt = dir.path().join("wt");
        let wt_git = git.join("worktrees/wt");
        std::fs::create_dir_all(&wt_git).unwrap();
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::write(wt.join(".git"), format!("gitdir: {}\n", wt_git.display())).unwrap();
        std::fs::write(wt_git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(wt_git.join("commondir"), "../..\n").unwrap();
        assert_eq!(git_head(&wt), Some(b));
        // Not a checkout.
        let plain = tempfile::tempdir().unwrap();
        assert_eq!(
            repository_revision(plain.path(), Some("stamp:d1")),
            "stamp:d1"
        );
        assert_eq!(
            repository_revision(plain.path(), Some("git:c0ffee")),
            "git:c0ffee"
        );
        assert_eq!(repository_revision(plain.path(), None), "unknown");
    }
}
