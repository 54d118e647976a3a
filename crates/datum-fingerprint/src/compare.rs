//! Comparing a declared tree with an observed one: the Merkle recursion.
//!
//! Owns: [`compare`] and [`TreeDifference`]. Equal hashes end the recursion (the subtree is
//! proved equal), so an undrifted tree costs one comparison; only subtrees whose hashes
//! differ are entered, and each difference is named once, at the highest path where it
//! appears (a missing directory is one `Missing`, not one per file inside it). Must not:
//! look at the host or at content bytes (what a file changed *to* is the File provider's
//! per-resource diff).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::digest::Algorithm;
use crate::error::FingerprintError;
use crate::tree::{Entry, EntryKind, FingerprintedNode, FingerprintedTree, bytes_as_path};

/// One way the observed tree differs from the declared one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreeDifference {
    /// Same type at `path`, different attributes. `fields` are among `content`, `mode`,
    /// `owner`, `group`, `target`, in that order.
    Changed {
        /// Path relative to the tree root (empty = the root itself).
        path: PathBuf,
        /// The attributes that differ.
        fields: Vec<&'static str>,
    },
    /// Declared, not on the host.
    Missing {
        /// Path relative to the tree root.
        path: PathBuf,
    },
    /// On the host, inside the tree, and no declaration covers it.
    Unmanaged {
        /// Path relative to the tree root.
        path: PathBuf,
    },
    /// Something else than the declared type is at `path` (a file became a link).
    TypeChanged {
        /// Path relative to the tree root.
        path: PathBuf,
        /// What the declaration says.
        declared: EntryKind,
        /// What is on the host.
        found: EntryKind,
    },
}

impl TreeDifference {
    /// The path the difference is about, relative to the tree root.
    pub fn path(&self) -> &Path {
        match self {
            TreeDifference::Changed { path, .. }
            | TreeDifference::Missing { path }
            | TreeDifference::Unmanaged { path }
            | TreeDifference::TypeChanged { path, .. } => path,
        }
    }
}

impl std::fmt::Display for TreeDifference {
    /// One line for people: `changed etc/a.conf (content, mode)`, `missing etc/sub`,
    /// `unmanaged etc/a.conf~`, `type changed etc/b.conf (file -> symlink)`; the root is `.`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = self.path();
        let shown = if path.as_os_str().is_empty() {
            Path::new(".").display()
        } else {
            path.display()
        };
        match self {
            TreeDifference::Changed { fields, .. } => {
                write!(f, "changed {shown} ({})", fields.join(", "))
            }
            TreeDifference::Missing { .. } => write!(f, "missing {shown}"),
            TreeDifference::Unmanaged { .. } => write!(f, "unmanaged {shown}"),
            TreeDifference::TypeChanged {
                declared, found, ..
            } => write!(f, "type changed {shown} ({declared} -> {found})"),
        }
    }
}

/// The declared and the observed value of one changed attribute, as people read them
/// (`mode` `0644` / `0777`; `owner` and `group` as numeric ids; `content` as the hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangedValue {
    pub field: &'static str,
    pub declared: String,
    pub observed: String,
}

/// [`compare`], with each `Changed` difference's declared and observed values (empty
/// for the other kinds of difference), so a report can say `mode: 0644 -> 0777`.
pub fn compare_with_values(
    declared: &FingerprintedTree,
    observed: &FingerprintedTree,
) -> Result<Vec<(TreeDifference, Vec<ChangedValue>)>, FingerprintError> {
    if declared.algorithm != observed.algorithm {
        return Err(FingerprintError::AlgorithmMismatch {
            declared: declared.algorithm,
            observed: observed.algorithm,
        });
    }
    let mut out = Vec::new();
    let mut path = PathBuf::new();
    compare_nodes(
        declared.algorithm,
        &declared.root,
        &observed.root,
        &mut path,
        &mut out,
    );
    Ok(out)
}

/// Names every difference between `declared` and `observed`, parents before children and
/// siblings in byte order. Empty exactly when the root hashes are equal.
///
/// Both trees must have been fingerprinted with the same algorithm. Fields the algorithm
/// does not cover are not reported (compat: a directory's own mode/owner, a link's target),
/// so the result agrees with the root hash.
pub fn compare(
    declared: &FingerprintedTree,
    observed: &FingerprintedTree,
) -> Result<Vec<TreeDifference>, FingerprintError> {
    Ok(compare_with_values(declared, observed)?
        .into_iter()
        .map(|(d, _)| d)
        .collect())
}

/// What a walk collects: each difference with its changed values.
type Found = Vec<(TreeDifference, Vec<ChangedValue>)>;

fn compare_nodes(
    algorithm: Algorithm,
    declared: &FingerprintedNode,
    observed: &FingerprintedNode,
    path: &mut PathBuf,
    out: &mut Found,
) {
    if declared.hash == observed.hash {
        return;
    }
    let (want, found) = (declared.entry.kind(), observed.entry.kind());
    if want != found {
        out.push((
            TreeDifference::TypeChanged {
                path: path.clone(),
                declared: want,
                found,
            },
            Vec::new(),
        ));
        return;
    }
    let values = changed_fields(algorithm, &declared.entry, &observed.entry);
    if !values.is_empty() {
        out.push((
            TreeDifference::Changed {
                path: path.clone(),
                fields: values.iter().map(|v| v.field).collect(),
            },
            values,
        ));
    }
    if want == EntryKind::Directory {
        compare_children(algorithm, &declared.children, &observed.children, path, out);
    }
}

fn compare_children(
    algorithm: Algorithm,
    declared: &BTreeMap<Vec<u8>, FingerprintedNode>,
    observed: &BTreeMap<Vec<u8>, FingerprintedNode>,
    path: &mut PathBuf,
    out: &mut Found,
) {
    // A merge of two sorted maps: one pass, byte order kept in the output.
    let mut want = declared.iter().peekable();
    let mut have = observed.iter().peekable();
    loop {
        let order = match (want.peek(), have.peek()) {
            (None, None) => break,
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some((a, _)), Some((b, _))) => a.cmp(b),
        };
        match order {
            std::cmp::Ordering::Less => {
                if let Some((name, _)) = want.next() {
                    out.push((
                        TreeDifference::Missing {
                            path: path.join(bytes_as_path(name)),
                        },
                        Vec::new(),
                    ));
                }
            }
            std::cmp::Ordering::Greater => {
                if let Some((name, _)) = have.next() {
                    out.push((
                        TreeDifference::Unmanaged {
                            path: path.join(bytes_as_path(name)),
                        },
                        Vec::new(),
                    ));
                }
            }
            std::cmp::Ordering::Equal => {
                if let (Some((name, a)), Some((_, b))) = (want.next(), have.next()) {
                    path.push(bytes_as_path(name));
                    compare_nodes(algorithm, a, b, path, out);
                    path.pop();
                }
            }
        }
    }
}

/// The covered attributes that differ between two entries of the same kind, with both
/// values: what a `Changed` difference carries. Public so that a comparison that walks
/// the declared side as a stream (the Tree provider's) names changes exactly as
/// [`compare_with_values`] does.
pub fn changed_values(
    algorithm: Algorithm,
    declared: &Entry,
    observed: &Entry,
) -> Vec<ChangedValue> {
    changed_fields(algorithm, declared, observed)
}

fn changed_fields(algorithm: Algorithm, declared: &Entry, observed: &Entry) -> Vec<ChangedValue> {
    let mut fields = Vec::new();
    match (declared, observed) {
        (
            Entry::File {
                mode: m1,
                uid: u1,
                gid: g1,
                content: c1,
                ..
            },
            Entry::File {
                mode: m2,
                uid: u2,
                gid: g2,
                content: c2,
                ..
            },
        ) => {
            push_if(&mut fields, "content", c1, c2);
            push_mode(&mut fields, *m1, *m2);
            push_if(&mut fields, "owner", u1, u2);
            push_if(&mut fields, "group", g1, g2);
        }
        (
            Entry::Dir {
                mode: m1,
                uid: u1,
                gid: g1,
            },
            Entry::Dir {
                mode: m2,
                uid: u2,
                gid: g2,
            },
        ) if algorithm == Algorithm::Native => {
            // Native only: the spec's function does not hash a directory's own attributes.
            push_mode(&mut fields, *m1, *m2);
            push_if(&mut fields, "owner", u1, u2);
            push_if(&mut fields, "group", g1, g2);
        }
        (
            Entry::Symlink {
                mode: m1,
                target: t1,
            },
            Entry::Symlink {
                mode: m2,
                target: t2,
            },
        ) => {
            push_mode(&mut fields, *m1, *m2);
            if algorithm == Algorithm::Native && t1 != t2 {
                fields.push(ChangedValue {
                    field: "target",
                    declared: String::from_utf8_lossy(t1).into_owned(),
                    observed: String::from_utf8_lossy(t2).into_owned(),
                });
            }
        }
        (Entry::Other { mode: m1, .. }, Entry::Other { mode: m2, .. }) => {
            push_mode(&mut fields, *m1, *m2);
        }
        // Compat directories, and different kinds (reported as TypeChanged before this is
        // called), have no covered field to compare.
        _ => {}
    }
    fields
}

fn push_if<T: PartialEq + std::fmt::Display>(
    fields: &mut Vec<ChangedValue>,
    field: &'static str,
    declared: &T,
    observed: &T,
) {
    if declared != observed {
        fields.push(ChangedValue {
            field,
            declared: declared.to_string(),
            observed: observed.to_string(),
        });
    }
}

fn push_mode(fields: &mut Vec<ChangedValue>, declared: u32, observed: u32) {
    // Formatted only when they differ: a Tree compares every entry.
    let (declared, observed) = (declared & 0o7777, observed & 0o7777);
    if declared != observed {
        fields.push(ChangedValue {
            field: "mode",
            declared: format!("{declared:04o}"),
            observed: format!("{observed:04o}"),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Node, fingerprint_tree};

    fn tree(algorithm: Algorithm, edit: impl FnOnce(&mut Node)) -> FingerprintedTree {
        let mut root = Node::dir(0o755, 0, 0);
        let mut etc = Node::dir(0o755, 0, 0);
        assert!(
            etc.insert(
                "a.conf",
                Node::file_with_bytes(algorithm, 0o644, 0, 0, b"a=1\n")
            )
            .is_ok()
        );
        assert!(
            etc.insert(
                "b.conf",
                Node::file_with_bytes(algorithm, 0o600, 0, 0, b"b=2\n")
            )
            .is_ok()
        );
        assert!(etc.insert("current", Node::symlink("a.conf")).is_ok());
        let mut sub = Node::dir(0o750, 0, 0);
        assert!(
            sub.insert("deep", Node::file_with_bytes(algorithm, 0o644, 0, 0, b"d"))
                .is_ok()
        );
        assert!(etc.insert("sub", sub).is_ok());
        assert!(root.insert("etc", etc).is_ok());
        edit(&mut root);
        fingerprint_tree(root, algorithm).unwrap()
    }

    fn at<'a>(root: &'a mut Node, path: &str) -> &'a mut Node {
        let mut node = root;
        for part in path.split('/') {
            node = match node {
                Node::Dir { children, .. } => children.get_mut(part.as_bytes()).unwrap(),
                _ => panic!("not a dir"),
            };
        }
        node
    }

    #[test]
    fn equal_trees_have_no_differences() {
        for algorithm in [Algorithm::Compat, Algorithm::Native] {
            let a = tree(algorithm, |_| {});
            let b = tree(algorithm, |_| {});
            assert_eq!(a.root_hash(), b.root_hash());
            assert_eq!(compare(&a, &b).unwrap(), vec![]);
        }
    }

    #[test]
    fn each_kind_of_drift_is_named_once_at_its_path() {
        let declared = tree(Algorithm::Native, |_| {});
        let observed = tree(Algorithm::Native, |root| {
            // chmod + content edit on one file
            *at(root, "etc/a.conf") =
                Node::file_with_bytes(Algorithm::Native, 0o664, 0, 0, b"a=2\n");
            // chown on another
            if let Node::File { uid, gid, .. } = at(root, "etc/b.conf") {
                *uid = 1000;
                *gid = 1000;
            }
            // retarget the link
            *at(root, "etc/current") = Node::symlink("b.conf");
            // remove a whole directory, add an editor backup
            if let Node::Dir { children, .. } = at(root, "etc") {
                children.remove(b"sub".as_slice());
                children.insert(
                    b"a.conf~".to_vec(),
                    Node::file_with_bytes(Algorithm::Native, 0o644, 0, 0, b""),
                );
            }
        });
        let diffs = compare(&declared, &observed).unwrap();
        assert_eq!(
            diffs,
            vec![
                TreeDifference::Changed {
                    path: "etc/a.conf".into(),
                    fields: vec!["content", "mode"]
                },
                TreeDifference::Unmanaged {
                    path: "etc/a.conf~".into()
                },
                TreeDifference::Changed {
                    path: "etc/b.conf".into(),
                    fields: vec!["owner", "group"]
                },
                TreeDifference::Changed {
                    path: "etc/current".into(),
                    fields: vec!["target"]
                },
                TreeDifference::Missing {
                    path: "etc/sub".into()
                },
            ]
        );
    }

    #[test]
    fn a_file_replaced_by_a_symlink_is_a_type_change() {
        let declared = tree(Algorithm::Compat, |_| {});
        let observed = tree(Algorithm::Compat, |root| {
            *at(root, "etc/b.conf") = Node::symlink("a.conf");
        });
        assert_eq!(
            compare(&declared, &observed).unwrap(),
            vec![TreeDifference::TypeChanged {
                path: "etc/b.conf".into(),
                declared: EntryKind::File,
                found: EntryKind::Symlink
            }]
        );
    }

    #[test]
    fn directory_mode_is_drift_for_native_only() {
        let chmod = |root: &mut Node| {
            if let Node::Dir { mode, .. } = at(root, "etc/sub") {
                *mode = 0o777;
            }
        };
        let native = compare(
            &tree(Algorithm::Native, |_| {}),
            &tree(Algorithm::Native, chmod),
        )
        .unwrap();
        assert_eq!(
            native,
            vec![TreeDifference::Changed {
                path: "etc/sub".into(),
                fields: vec!["mode"]
            }]
        );
        let compat = compare(
            &tree(Algorithm::Compat, |_| {}),
            &tree(Algorithm::Compat, chmod),
        )
        .unwrap();
        assert_eq!(compat, vec![]);
    }

    #[test]
    fn differences_read_as_one_line_each() {
        let shown: Vec<String> = [
            TreeDifference::Changed {
                path: "".into(),
                fields: vec!["mode", "owner"],
            },
            TreeDifference::Missing {
                path: "etc/sub".into(),
            },
            TreeDifference::Unmanaged {
                path: "etc/a.conf~".into(),
            },
            TreeDifference::TypeChanged {
                path: "etc/b.conf".into(),
                declared: EntryKind::File,
                found: EntryKind::Symlink,
            },
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            shown,
            [
                "changed . (mode, owner)",
                "missing etc/sub",
                "unmanaged etc/a.conf~",
                "type changed etc/b.conf (file -> symlink)"
            ]
        );
    }

    #[test]
    fn mixing_algorithms_is_refused() {
        let err = compare(
            &tree(Algorithm::Compat, |_| {}),
            &tree(Algorithm::Native, |_| {}),
        )
        .unwrap_err();
        assert!(matches!(err, FingerprintError::AlgorithmMismatch { .. }));
    }
}
