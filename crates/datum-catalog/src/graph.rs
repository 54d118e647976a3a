//! The dependency graph: ordering, cycles, and implicit parent-directory edges.
//!
//! This module owns the order a pass visits resources in: every resource after
//! everything it requires, ties broken by declaration order so the same
//! repository always gives the same order. It finds cycles and names them
//! (`File[a] -> File[b] -> File[a]`), and adds the edges a person would expect
//! without writing them: a file requires the Directory resource that declares
//! its parent folder, unless that edge would close a cycle.
//!
//! Nodes are indices (declaration order); this module knows nothing about
//! manifests or providers.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::path::{Path, PathBuf};

/// `edges[i]` lists the nodes node `i` requires (deduplicated by caller or not:
/// repeats are harmless).
pub(crate) type Edges = Vec<Vec<usize>>;

/// A topological order (requirements first, ties by lowest index) and the
/// nodes that could not be ordered because they are on or behind a cycle.
pub(crate) fn order(edges: &Edges) -> (Vec<usize>, Vec<usize>) {
    let n = edges.len();
    let mut pending = vec![0usize; n];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, reqs) in edges.iter().enumerate() {
        let mut seen = reqs.clone();
        seen.sort_unstable();
        seen.dedup();
        for r in seen {
            if r < n {
                pending[i] += 1;
                dependents[r].push(i);
            }
        }
    }
    let mut ready: BinaryHeap<Reverse<usize>> =
        (0..n).filter(|&i| pending[i] == 0).map(Reverse).collect();
    let mut out = Vec::with_capacity(n);
    while let Some(Reverse(i)) = ready.pop() {
        out.push(i);
        for &d in &dependents[i] {
            pending[d] -= 1;
            if pending[d] == 0 {
                ready.push(Reverse(d));
            }
        }
    }
    let stuck = (0..n).filter(|&i| pending[i] > 0).collect();
    (out, stuck)
}

/// The cycles among `stuck` nodes, each as a path that starts and ends at its
/// lowest-index node (`[a, b, a]`). Each cycle is reported once; nodes that
/// only depend on a cycle are not cycles themselves.
pub(crate) fn cycles(edges: &Edges, stuck: &[usize]) -> Vec<Vec<usize>> {
    let n = edges.len();
    let mut is_stuck = vec![false; n];
    for &s in stuck {
        is_stuck[s] = true;
    }
    let mut reported = vec![false; n];
    let mut found = Vec::new();
    for &start in stuck {
        if reported[start] {
            continue;
        }
        // Every stuck node has a stuck requirement: following the lowest one
        // must come back to a node already on the walk.
        let mut walk = vec![start];
        let mut position: HashMap<usize, usize> = HashMap::from([(start, 0)]);
        while let Some(&here) = walk.last() {
            let next = edges[here]
                .iter()
                .copied()
                .filter(|&r| r < n && is_stuck[r])
                .min();
            let Some(next) = next else { break };
            if reported[next] {
                break;
            }
            if let Some(&at) = position.get(&next) {
                let mut cycle: Vec<usize> = walk[at..].to_vec();
                // Rotate to start at the lowest index for a stable message.
                if let Some(min_at) = cycle
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, v)| **v)
                    .map(|(i, _)| i)
                {
                    cycle.rotate_left(min_at);
                }
                for &c in &cycle {
                    reported[c] = true;
                }
                if let Some(&first) = cycle.first() {
                    cycle.push(first);
                }
                found.push(cycle);
                break;
            }
            position.insert(next, walk.len());
            walk.push(next);
        }
    }
    found
}

/// Asks, for many pairs of one graph, whether the first reaches the second
/// following requirements ([`Reach::reaches`]). The nodes seen are marked
/// with the question's number in one list made once: a fresh list per
/// question cost the whole graph each time, though a question visits only
/// what its node requires (100,000 Files under 1,000 Directories, each File
/// asking before its folder's edge: ten billion bytes zeroed, a tenth of the
/// compile).
#[derive(Default)]
pub(crate) struct Reach {
    /// The number of the question that last saw each node.
    seen: Vec<u32>,
    question: u32,
    stack: Vec<usize>,
}

impl Reach {
    /// Whether `from` reaches `to` (itself included) following `edges`.
    pub(crate) fn reaches(&mut self, edges: &Edges, from: usize, to: usize) -> bool {
        if self.seen.len() < edges.len() {
            self.seen.resize(edges.len(), 0);
        }
        self.question = self.question.wrapping_add(1);
        if self.question == 0 {
            // Numbers wrapped: no mark may look like this question's.
            self.seen.fill(0);
            self.question = 1;
        }
        self.stack.clear();
        self.stack.push(from);
        while let Some(i) = self.stack.pop() {
            if i == to {
                return true;
            }
            let (Some(seen), Some(required)) = (self.seen.get_mut(i), edges.get(i)) else {
                continue;
            };
            if std::mem::replace(seen, self.question) == self.question {
                continue;
            }
            self.stack.extend_from_slice(required);
        }
        false
    }
}

/// A node and what it requires.
pub(crate) type Pair = (usize, usize);

/// Parent-directory edges: for every node with a path, the nearest ancestor
/// path that a directory node declares. `paths[i]` is node i's path (if it
/// manages one) and whether it is a directory. Edges already present are
/// skipped, and so are those that would close a cycle (the folder requires
/// what is inside it): those come back as the second list, for the caller
/// to refuse. Returns the edges added, then the ones that would close a
/// cycle, each as (node, its folder).
pub(crate) fn add_parent_edges(
    edges: &mut Edges,
    paths: &[Option<(&str, bool)>],
) -> (Vec<Pair>, Vec<Pair>) {
    add_folder_edges(edges, paths, FolderEdge::FolderFirst)
}

/// Removal edges, the other way round: a folder declared absent (removed
/// only when empty) comes after what is declared absent inside it, nearest
/// folder first. `paths[i]` is node i's path when it is declared absent,
/// and whether it is a folder. An edge that would close a cycle (what is
/// inside requires the folder) is not added and comes back in the second
/// list, as (folder, node inside it), for the caller to refuse.
pub(crate) fn add_removal_edges(
    edges: &mut Edges,
    paths: &[Option<(&str, bool)>],
) -> (Vec<Pair>, Vec<Pair>) {
    add_folder_edges(edges, paths, FolderEdge::FolderLast)
}

/// Which of a folder and what is inside it comes first.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FolderEdge {
    /// What is inside requires its folder (made before it).
    FolderFirst,
    /// The folder requires what is inside it (removed after it).
    FolderLast,
}

/// An edge between every node with a path and the nearest folder above it
/// that a folder node declares, in the direction `order` says; the edges
/// added, then those left out because they would close a cycle, each as
/// (the node that requires, what it requires).
fn add_folder_edges(
    edges: &mut Edges,
    paths: &[Option<(&str, bool)>],
    order: FolderEdge,
) -> (Vec<Pair>, Vec<Pair>) {
    let mut dirs: HashMap<&str, usize> = HashMap::new();
    for (i, p) in paths.iter().enumerate() {
        if let Some((path, true)) = p {
            // The first declaration of a path wins; a second is a conflict
            // reported elsewhere.
            dirs.entry(trim(path)).or_insert(i);
        }
    }
    let mut added = Vec::new();
    let mut closing = Vec::new();
    if dirs.is_empty() {
        return (added, closing);
    }
    let mut nearest = NearestFolder::default();
    let mut reach = Reach::default();
    for (i, p) in paths.iter().enumerate() {
        let Some((path, _)) = p else { continue };
        // Every folder above a path is a shorter path than its own, so never
        // the node itself.
        let Some(dir) = nearest.above(Path::new(trim(path)), |at| dirs.get(trim(at)).copied())
        else {
            continue;
        };
        let (from, to) = match order {
            FolderEdge::FolderFirst => (i, dir),
            FolderEdge::FolderLast => (dir, i),
        };
        if edges[from].contains(&to) {
            continue;
        }
        if reach.reaches(edges, to, from) {
            closing.push((from, to));
        } else {
            edges[from].push(to);
            added.push((from, to));
        }
    }
    (added, closing)
}

/// Edges from each followed link (`links`: its node and its target,
/// resolved inside the root) to the folder node declared at or above its
/// target (`paths` as for [`add_parent_edges`]): what is declared below the
/// link is written there, so that folder is made first. An edge already
/// present, to the link itself, or that would close a cycle is left out.
/// Returns the edges added, each as (link, folder).
pub(crate) fn add_target_edges(
    edges: &mut Edges,
    paths: &[Option<(&str, bool)>],
    links: &[(usize, PathBuf)],
) -> Vec<Pair> {
    let mut dirs: HashMap<&str, usize> = HashMap::new();
    for (i, p) in paths.iter().enumerate() {
        if let Some((path, true)) = p {
            dirs.entry(trim(path)).or_insert(i);
        }
    }
    let mut reach = Reach::default();
    let mut added = Vec::new();
    for (from, target) in links {
        let from = *from;
        let Some(to) = target
            .ancestors()
            .find_map(|at| dirs.get(trim(at.to_str()?)).copied())
        else {
            continue;
        };
        if to == from || edges[from].contains(&to) || reach.reaches(edges, to, from) {
            continue;
        }
        edges[from].push(to);
        added.push((from, to));
    }
    added
}

/// The nearest folder above each of a run of paths that `folder_at` names
/// (the node declaring it), asked once per parent: it depends on the parent
/// only, and one folder's paths are mostly declared together, so the last
/// parent's answer is kept (at 100,000 Files declared with no folder, every
/// path looked up every ancestor: half a million lookups on one core).
#[derive(Default)]
pub(crate) struct NearestFolder<'p> {
    last: Option<(&'p Path, Option<usize>)>,
}

impl<'p> NearestFolder<'p> {
    /// The nearest folder at or above `path`'s parent for which `folder_at`
    /// (given each one's path) names a node; `None` for `/` or when none
    /// does. `folder_at` must answer the same for the same path every time.
    pub(crate) fn above(
        &mut self,
        path: &'p Path,
        folder_at: impl Fn(&str) -> Option<usize>,
    ) -> Option<usize> {
        let parent = path.parent()?;
        match self.last {
            Some((last, found)) if last == parent => found,
            _ => {
                let found = parent.ancestors().find_map(|at| folder_at(at.to_str()?));
                self.last = Some((parent, found));
                found
            }
        }
    }
}

fn trim(path: &str) -> &str {
    let t = path.trim_end_matches('/');
    if t.is_empty() && path.starts_with('/') {
        "/"
    } else {
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_come_first_and_ties_keep_declaration_order() {
        // 0 requires 2; 1 is free; 2 is free.
        let edges = vec![vec![2], vec![], vec![]];
        let (out, stuck) = order(&edges);
        assert_eq!(out, [1, 2, 0]);
        assert!(stuck.is_empty());
    }

    #[test]
    fn cycles_are_found_once_and_start_at_the_lowest_node() {
        // 1 -> 2 -> 3 -> 1, and 0 depends on the cycle; 4 requires itself.
        let edges = vec![vec![1], vec![2], vec![3], vec![1], vec![4]];
        let (out, stuck) = order(&edges);
        assert!(out.is_empty());
        assert_eq!(stuck, [0, 1, 2, 3, 4]);
        assert_eq!(cycles(&edges, &stuck), vec![vec![1, 2, 3, 1], vec![4, 4]]);
    }

    #[test]
    fn one_reach_answers_many_questions_whatever_the_earlier_ones_saw() {
        // 0 -> 1 -> 2, 3 -> 1, 4 alone; 5 -> 6 -> 5 (a cycle).
        let edges = vec![vec![1], vec![2], vec![], vec![1], vec![], vec![6], vec![5]];
        let mut reach = Reach::default();
        // Each question after the first walks nodes an earlier one marked.
        let questions = [
            (0, 2, true),
            (3, 2, true),
            (3, 0, false),
            (2, 0, false),
            (1, 1, true),
            (4, 2, false),
            (5, 6, true),
            (6, 0, false),
            (0, 2, true),
        ];
        for (from, to, expected) in questions {
            assert_eq!(reach.reaches(&edges, from, to), expected, "{from} -> {to}");
        }
        // When the question numbers wrap, older marks do not answer for the
        // new round.
        reach.question = u32::MAX;
        assert!(reach.reaches(&edges, 3, 2));
        assert!(reach.reaches(&edges, 0, 2));
        assert!(!reach.reaches(&edges, 2, 3));
        // A graph that grew since the first question (edges only, here a node).
        let mut grown = edges.clone();
        grown.push(vec![0]);
        assert!(reach.reaches(&grown, 7, 2));
    }

    #[test]
    fn a_folder_declared_absent_comes_after_what_is_removed_inside_it() {
        // 0 /srv/gone (folder), 1 /srv/gone/sub (folder), 2 /srv/gone/sub/x,
        // 3 /srv/gone/y, 4 /srv/other; 5 /srv/gone/z requires 0.
        let paths = vec![
            Some(("/srv/gone", true)),
            Some(("/srv/gone/sub/", true)),
            Some(("/srv/gone/sub/x", false)),
            Some(("/srv/gone/y", false)),
            Some(("/srv/other", false)),
            Some(("/srv/gone/z", false)),
        ];
        let mut edges = vec![vec![], vec![], vec![], vec![], vec![], vec![0]];
        let (added, closing) = add_removal_edges(&mut edges, &paths);
        assert_eq!(added, [(0, 1), (1, 2), (0, 3)]);
        assert_eq!(closing, [(0, 5)]);
        let (out, stuck) = order(&edges);
        assert!(stuck.is_empty());
        assert_eq!(out, [2, 1, 3, 0, 4, 5]);
    }

    #[test]
    fn parent_edges_go_to_the_nearest_declared_directory() {
        let paths = vec![
            Some(("/etc", true)),
            Some(("/etc/ssh/", true)),
            Some(("/etc/ssh/sshd_config", false)),
            Some(("/etc/motd", false)),
            Some(("/srv/x", false)),
            None,
        ];
        let mut edges = vec![Vec::new(); paths.len()];
        let (added, _) = add_parent_edges(&mut edges, &paths);
        assert_eq!(added, [(1, 0), (2, 1), (3, 0)]);
    }

    #[test]
    fn each_path_gets_its_own_folder_whatever_came_before_it() {
        // One folder's files, another's, the first's again, one below a
        // folder that is not declared, and a folder inside a folder.
        let paths = vec![
            Some(("/a", true)),
            Some(("/b/", true)),
            Some(("/a/1", false)),
            Some(("/a/2", false)),
            Some(("/b/3", false)),
            Some(("/a/4", false)),
            Some(("/c/5", false)),
            Some(("/a/d", true)),
            Some(("/a/d/6", false)),
            Some(("/a/7", false)),
        ];
        let mut edges = vec![Vec::new(); paths.len()];
        let (added, _) = add_parent_edges(&mut edges, &paths);
        assert_eq!(
            added,
            [(2, 0), (3, 0), (4, 1), (5, 0), (7, 0), (8, 7), (9, 0)]
        );
    }

    #[test]
    fn parent_edges_never_close_a_cycle() {
        // The directory explicitly requires the file inside it.
        let paths = vec![Some(("/etc/x", true)), Some(("/etc/x/f", false))];
        let mut edges = vec![vec![1], vec![]];
        let (added, closing) = add_parent_edges(&mut edges, &paths);
        assert!(added.is_empty());
        // Said, for the compile to refuse.
        assert_eq!(closing, [(1, 0)]);
        assert_eq!(order(&edges).1, Vec::<usize>::new());
    }
}
