//! The way down a depth-first walk of folders: the folder it started in
//! and each folder below it to the one it is in, as a stack kept by the
//! walk rather than one call per level (a local user may make a chain of
//! folders thousands deep where root walks, and a call per level overflowed
//! the thread's stack and aborted the process), holding at most a number of
//! them open (each open folder is a descriptor).
//!
//! Owns: which folders on the way stay open, and opening again one that was
//! let go: from the nearest folder still open above it, one component at a
//! time without following a link ([`Dir::open_child_dir`]), each folder
//! opened the one first met there (same device and inode), or an error.
//! Must not: decide what the walk does in a folder.

use std::ffi::{OsStr, OsString};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::HostError;
use crate::boundary::{Dir, errno};

/// One folder on the way.
struct Step {
    /// Its name in the folder above (empty for the first).
    name: OsString,
    /// Its device and inode when first opened.
    id: (u64, u64),
    /// Its handle, while held.
    dir: Option<Dir>,
}

/// The folders from a walk's first folder down to the one it is in (see
/// the module's documentation). The first folder and the one the walk is in
/// are always held; of the others, at most `most - 2` (fewer inside another
/// walk: [`Way::new`]), spaced out along the way, closer together near the bottom (`Way::trim`). Going back up, a
/// folder let go is opened again from the nearest held above it, and the
/// folders opened on the way to it are spaced out the same way below that
/// one, so that each climbs a short way: going down and back up a chain D
/// deep opens again a few times D folders (about 9 D for 300 deep holding
/// 4, 10 D for 20,000 deep holding 8 and 1.7 D holding 120), where holding
/// only the deepest opened again about D^2/2 `most` (14,850 for 300 deep
/// holding 4; 25 million for 20,000 deep holding 8).
pub struct Way {
    steps: Vec<Step>,
    most: usize,
    /// The folders held by the ways of the thread this one was made on,
    /// this one's included (see [`Way::new`]).
    thread_held: Arc<AtomicUsize>,
    /// The steps holding their folder, shallowest first (the first step
    /// always; the last whenever the walk has been [`Way::here`] or
    /// [`Way::enter`]ed since it last left one).
    held: Vec<usize>,
    /// Held folders [`Way::trim`] has compared, and folders opened again
    /// (tests: that letting go does not scan the way, and how many folders
    /// going back up opens).
    #[cfg(test)]
    looked: usize,
    #[cfg(test)]
    opened: usize,
}

fn id_of(dir: &Dir) -> Result<(u64, u64), HostError> {
    let st =
        rustix::fs::fstat(dir.fd()).map_err(|e| HostError::io("inspect", dir.path(), errno(e)))?;
    Ok((st.st_dev, st.st_ino))
}

thread_local! {
    /// The folders held by the ways made on this thread: a walk inside
    /// another (the Tree provider's folders, the purge's listing below
    /// them, `holds_excluded` inside that) takes what the others left.
    static THREAD_HELD: Arc<AtomicUsize> = Arc::new(AtomicUsize::new(0));
}

impl Way {
    /// A walk starting in `first`, holding at most `most` folders open (at
    /// least two: the first and the one the walk is in) less those the
    /// other ways of this thread hold (the walks it is inside of), but at
    /// least half of `most`: walks nested three deep, as the Tree
    /// provider's are, hold at most twice `most` together, not three times
    /// (each used to take the whole share; see
    /// [`crate::descriptors::Budget`]).
    pub fn new(first: Dir, most: usize) -> Result<Way, HostError> {
        let id = id_of(&first)?;
        let thread_held = THREAD_HELD.with(Arc::clone);
        thread_held.fetch_add(1, Ordering::Relaxed);
        Ok(Way {
            steps: vec![Step {
                name: OsString::new(),
                id,
                dir: Some(first),
            }],
            most: most.max(2),
            thread_held,
            held: vec![0],
            #[cfg(test)]
            looked: 0,
            #[cfg(test)]
            opened: 0,
        })
    }

    /// How many folders below the first the walk is in.
    pub fn depth(&self) -> usize {
        self.steps.len() - 1
    }

    /// How many folders are held open.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// The walk goes down into `dir`, the folder `name` of the one it is in
    /// (opened from [`Way::here`]); past `most` folders held, some held
    /// above it are let go (`Way::trim`).
    pub fn enter(&mut self, name: &OsStr, dir: Dir) -> Result<(), HostError> {
        let id = id_of(&dir)?;
        self.steps.push(Step {
            name: name.to_owned(),
            id,
            dir: Some(dir),
        });
        let last = self.steps.len() - 1;
        self.hold(last);
        self.trim(last);
        Ok(())
    }

    /// The walk goes back up from the folder it is in: its name in the one
    /// above (`None` in the first folder, which is never left).
    pub fn leave(&mut self) -> Option<OsString> {
        if self.steps.len() < 2 {
            return None;
        }
        let step = self.steps.pop()?;
        // Held, it is the deepest held.
        if self.held.last() == Some(&self.steps.len()) {
            self.held.pop();
            self.thread_held.fetch_sub(1, Ordering::Relaxed);
        }
        Some(step.name)
    }

    /// The folder the walk is in, opened again if it was let go: from the
    /// nearest held above it, one folder at a time, each without following
    /// a link and the one first met there (same device and inode), else an
    /// error.
    pub fn here(&mut self) -> Result<Dir, HostError> {
        let last = self.steps.len() - 1;
        if let Some(dir) = &self.steps[last].dir {
            return Ok(dir.clone());
        }
        // The nearest held above it (the first always is): the deepest held.
        let from = self.held.last().copied().unwrap_or(0);
        let Some(mut above) = self.steps.get(from).and_then(|s| s.dir.clone()) else {
            return Err(HostError::io(
                "reach again",
                OsStr::new(""),
                std::io::Error::other("no folder of the walk is open"),
            ));
        };
        for at in from + 1..=last {
            let step = &self.steps[at];
            let path = above.path().join(&step.name);
            let moved = || {
                HostError::io(
                    "reach again",
                    &path,
                    std::io::Error::other("the folder was moved or replaced while it was walked"),
                )
            };
            let dir = above.open_child_dir(&step.name)?.ok_or_else(moved)?;
            if id_of(&dir)? != step.id {
                return Err(moved());
            }
            self.steps[at].dir = Some(dir.clone());
            self.hold(at);
            #[cfg(test)]
            {
                self.opened += 1;
            }
            // The folder above this one may be let go now (`above` is
            // dropped at the next turn): none but this one is opened from it.
            self.trim(last);
            above = dir;
        }
        Ok(above)
    }

    /// Step `at` holds its folder now (the deepest held).
    fn hold(&mut self, at: usize) {
        self.held.push(at);
        self.thread_held.fetch_add(1, Ordering::Relaxed);
    }

    /// The most folders this way may hold now: `most` less those the other
    /// ways of its thread hold, but at least half of `most` (and two).
    fn most_now(&self) -> usize {
        let others = self
            .thread_held
            .load(Ordering::Relaxed)
            .saturating_sub(self.held.len());
        self.most.saturating_sub(others).max(self.most / 2).max(2)
    }

    /// Lets folders go (the first and the deepest held aside) while more
    /// than it may hold are held ([`Way::most_now`]), each time the one whose neighbours held above
    /// and below are closest for its distance from `bottom` (the folder the
    /// walk is in or is reaching again): what stays held is spaced out
    /// along the way, closer together near the bottom, as going back up
    /// wants. Past 16 held, it lets go of a sixteenth more at once (none
    /// side by side), so that the comparisons, a look at each held folder,
    /// come to a few per folder entered or opened again.
    fn trim(&mut self, bottom: usize) {
        let most = self.most_now();
        if self.held.len() <= most {
            return;
        }
        let keep = most - most / 16;
        while self.held.len() > most {
            let excess = self.held.len() - keep;
            // (how close its neighbours are for their distance from the
            // bottom, as the fraction `span / reach`; its index in `held`)
            let mut candidates = Vec::with_capacity(self.held.len());
            for j in 1..self.held.len() - 1 {
                let (prev, next) = (self.held[j - 1], self.held[j + 1]);
                let span = (next - prev) as u128;
                let reach = (bottom.saturating_sub(prev) + 1) as u128;
                candidates.push((span, reach, j));
            }
            #[cfg(test)]
            {
                self.looked += candidates.len();
            }
            // Closest first; of two as close, the deeper.
            candidates.sort_unstable_by(|a, b| (a.0 * b.1).cmp(&(b.0 * a.1)).then(b.2.cmp(&a.2)));
            let mut go = vec![false; self.held.len()];
            let mut gone = 0;
            for &(_, _, j) in &candidates {
                if gone == excess {
                    break;
                }
                if go[j - 1] || go[j + 1] {
                    continue;
                }
                go[j] = true;
                gone += 1;
            }
            if gone == 0 {
                // Only the first and the deepest are held: `most` is at
                // least two, so this is not reached.
                break;
            }
            for (j, &at) in self.held.iter().enumerate() {
                if go[j] {
                    self.steps[at].dir = None;
                }
            }
            self.thread_held.fetch_sub(gone, Ordering::Relaxed);
            let mut j = 0;
            self.held.retain(|_| {
                j += 1;
                !go[j - 1]
            });
        }
    }
}

impl Drop for Way {
    fn drop(&mut self) {
        self.thread_held
            .fetch_sub(self.held.len(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chain `depth` deep made in `tmp`, walked down and back up holding
    /// at most `most`: (the held folders compared, the folders opened
    /// again).
    fn down_and_up(tmp: &std::path::Path, depth: usize, most: usize) -> (usize, usize) {
        let first = Dir::open_path(tmp).unwrap();
        let mut way = Way::new(first, most).unwrap();
        for _ in 0..depth {
            let here = way.here().unwrap();
            if here.lstat_entry(OsStr::new("d")).unwrap().is_none() {
                here.entry(OsStr::new("d"))
                    .create_dir(0o755, None, None)
                    .unwrap();
            }
            let sub = here.open_child_dir(OsStr::new("d")).unwrap().unwrap();
            way.enter(OsStr::new("d"), sub).unwrap();
            assert!(way.held() <= most, "{}", way.held());
        }
        while way.depth() > 0 {
            let depth = way.depth();
            let here = way.here().unwrap();
            assert!(way.held() <= most, "{}", way.held());
            // Every 50th: the folder reached again is the one at its path.
            if depth.is_multiple_of(50) {
                let id = |p: &std::path::Path| {
                    use std::os::unix::fs::MetadataExt as _;
                    let m = std::fs::metadata(p).unwrap();
                    (m.dev(), m.ino())
                };
                let path =
                    tmp.join(std::iter::repeat_n("d", depth).collect::<std::path::PathBuf>());
                assert_eq!(here.path(), path);
                assert_eq!(id_of(&here).unwrap(), id(&path));
            }
            way.leave();
        }

        (way.looked, way.opened)
    }

    /// Walking a chain down and back up past the bound, each folder let go
    /// costs a look at the folders held, not at every folder on the way:
    /// the walk used to recount and rescan the way from its top at every
    /// folder entered or opened again, so going back up a chain a local
    /// user made 20,000 deep under a small descriptor share took minutes
    /// (h156's review). (Letting go of the shallowest held looked at one
    /// folder each time; choosing which to let go compares the held ones,
    /// the first and the deepest aside: `most - 1` of the `most + 1` held,
    /// or, past 16 held, as many for a sixteenth of them let go at once.)
    #[test]
    fn letting_folders_go_does_not_scan_the_way() {
        let tmp = tempfile::tempdir().unwrap();
        let depth = 300;
        let (looked, opened) = down_and_up(tmp.path(), depth, 4);
        assert!(opened > depth, "the walk up opened {opened} folders again");
        assert!(
            looked <= 3 * (depth + opened),
            "{looked} looks to let go of at most {} folders",
            depth + opened
        );
        let (looked, opened) = down_and_up(tmp.path(), depth, 64);
        assert!(opened > 0, "the walk up opened no folder again");
        assert!(
            looked <= 16 * (depth + opened),
            "{looked} looks for {} folders entered or opened again",
            depth + opened
        );
    }

    /// Going down and back up a chain D deep past the bound opens again a
    /// few times D folders, not about D^2 / 2 `most`: the way held only its
    /// deepest folders, so each folder above them was opened again from the
    /// nearest held, far up (14,850 for 300 deep holding 4; a local user
    /// can make such a chain in a managed Tree, and root walks it). Holding
    /// 4 (the first, the one the walk is in and two more), the spaced-out
    /// folders open 2,683 again for 300 deep (8.9 D); holding 8 (the
    /// smallest walk share), 1000 deep, 4,417 (4.4 D). The bound, 10 D, leaves
    /// that margin and fails anything quadratic.
    #[test]
    fn going_back_up_a_deep_chain_opens_a_few_times_its_depth() {
        let tmp = tempfile::tempdir().unwrap();
        for (depth, most) in [(300, 4), (1000, 8)] {
            let (_, opened) = down_and_up(tmp.path(), depth, most);
            assert!(
                opened <= 10 * depth,
                "{opened} folders opened again going back up {depth} deep holding {most}"
            );
        }
    }

    /// A walk inside another on the same thread takes what the outer one
    /// left, and at least half its bound: each used to take its whole
    /// share, so the Tree provider's walks nested three deep (its folders,
    /// the purge's listing, `holds_excluded`) held three shares and ate
    /// into the descriptors kept in reserve. Three nested, each going down
    /// a chain past the bound, hold at most twice it together; a walk on
    /// another thread is not counted, and what a walk lets go or leaves is
    /// given back.
    #[test]
    fn a_walk_inside_another_takes_what_it_left() {
        let tmp = tempfile::tempdir().unwrap();
        let chain = |root: &std::path::Path, depth: usize| {
            let path: std::path::PathBuf = std::iter::repeat_n("d", depth).collect();
            std::fs::create_dir_all(root.join(path)).unwrap();
        };
        let down = |way: &mut Way, depth: usize| {
            for _ in 0..depth {
                let sub = way
                    .here()
                    .unwrap()
                    .open_child_dir(OsStr::new("d"))
                    .unwrap()
                    .unwrap();
                way.enter(OsStr::new("d"), sub).unwrap();
            }
        };
        for name in ["a", "b", "c"] {
            chain(&tmp.path().join(name), 40);
        }
        // (Under 16, a way lets go of one folder at a time: it holds its bound.)
        let most = 12;
        let open = |name: &str| Dir::open_path(&tmp.path().join(name)).unwrap();
        let mut outer = Way::new(open("a"), most).unwrap();
        down(&mut outer, 40);
        assert_eq!(outer.held(), most);
        let mut middle = Way::new(open("b"), most).unwrap();
        down(&mut middle, 40);
        assert_eq!(middle.held(), most / 2);
        let mut inner = Way::new(open("c"), most).unwrap();
        down(&mut inner, 40);
        assert_eq!(inner.held(), most / 2);
        assert_eq!(outer.thread_held.load(Ordering::Relaxed), 2 * most);
        // Going back up still works in so few, each folder the one met.
        while inner.depth() > 0 {
            inner.here().unwrap();
            assert!(inner.held() <= most / 2, "{}", inner.held());
            inner.leave();
        }
        drop(inner);
        // Another thread's walk is not counted.
        let other = open("c");
        let held = std::thread::spawn(move || {
            let mut way = Way::new(other, most).unwrap();
            down(&mut way, 40);
            way.held()
        })
        .join()
        .unwrap();
        assert_eq!(held, most);
        // What the outer walk holds less, the middle one may hold more.
        while outer.depth() > 3 {
            outer.leave();
        }
        let outer_held = outer.held();
        assert!(outer_held <= 4, "{outer_held}");
        drop(middle);
        let mut middle = Way::new(open("b"), most).unwrap();
        down(&mut middle, 40);
        assert_eq!(middle.held(), most - outer_held);
        drop((middle, outer));
        assert_eq!(THREAD_HELD.with(|h| h.load(Ordering::Relaxed)), 0);
    }

    /// A chain walked down and back up past the bound holds at most the
    /// bound, and each folder reached again is the one left.
    #[test]
    fn a_way_down_and_up_holds_at_most_its_bound() {
        let tmp = tempfile::tempdir().unwrap();
        let first = Dir::open_path(tmp.path()).unwrap();
        let mut way = Way::new(first, 3).unwrap();
        for _ in 0..10 {
            let here = way.here().unwrap();
            here.entry(OsStr::new("d"))
                .create_dir(0o755, None, None)
                .unwrap();
            let sub = here.open_child_dir(OsStr::new("d")).unwrap().unwrap();
            way.enter(OsStr::new("d"), sub).unwrap();
            assert!(way.held() <= 3, "{}", way.held());
        }
        assert_eq!(way.depth(), 10);
        while way.depth() > 0 {
            let here = way.here().unwrap();
            assert!(way.held() <= 3, "{}", way.held());
            let depth = way.depth();
            assert_eq!(
                here.path(),
                tmp.path()
                    .join(std::iter::repeat_n("d", depth).collect::<std::path::PathBuf>())
            );
            assert_eq!(way.leave().as_deref(), Some(OsStr::new("d")));
        }
        assert_eq!(way.leave(), None);
        // A folder let go and replaced meanwhile is not taken for it.
        let first = Dir::open_path(tmp.path()).unwrap();
        let mut way = Way::new(first, 2).unwrap();
        let a = way
            .here()
            .unwrap()
            .open_child_dir(OsStr::new("d"))
            .unwrap()
            .unwrap();
        way.enter(OsStr::new("d"), a).unwrap();
        let b = way
            .here()
            .unwrap()
            .open_child_dir(OsStr::new("d"))
            .unwrap()
            .unwrap();
        way.enter(OsStr::new("d"), b).unwrap();
        assert_eq!(way.held(), 2);
        std::fs::rename(tmp.path().join("d"), tmp.path().join("moved")).unwrap();
        std::fs::create_dir(tmp.path().join("d")).unwrap();
        way.leave();
        assert!(way.here().is_err());
    }

    /// The way's own bookkeeping agrees with itself: the first step is
    /// held, the held steps are in order and are exactly those with a
    /// handle, and each handle is the folder first met at its step.
    fn consistent(way: &Way) {
        assert_eq!(way.held.first(), Some(&0));
        assert!(way.held.windows(2).all(|w| w[0] < w[1]), "{:?}", way.held);
        for (at, step) in way.steps.iter().enumerate() {
            assert_eq!(step.dir.is_some(), way.held.contains(&at), "step {at}");
            if let Some(dir) = &step.dir {
                assert_eq!(id_of(dir).unwrap(), step.id, "step {at}");
            }
        }
    }

    /// Walks that end early, by an error mid-way (a folder on the way
    /// replaced), by a panic, or dropped on another thread, give back
    /// every folder they held to their thread's count: a long-running
    /// agent's thread walks thousands of times, and a count left behind
    /// would shrink every later walk's share on it, down to two.
    #[test]
    fn walks_ended_early_give_back_what_they_held() {
        let tmp = tempfile::tempdir().unwrap();
        let most = 12;
        let chain: std::path::PathBuf = std::iter::repeat_n("d", 30).collect();
        std::fs::create_dir_all(tmp.path().join(&chain)).unwrap();
        let down = |way: &mut Way, depth: usize| -> Result<(), HostError> {
            for _ in 0..depth {
                let here = way.here()?;
                let Some(sub) = here.open_child_dir(OsStr::new("d"))? else {
                    return Err(HostError::io(
                        "reach",
                        here.path(),
                        std::io::Error::other("gone"),
                    ));
                };
                way.enter(OsStr::new("d"), sub)?;
            }
            Ok(())
        };
        // Down 30, back up to 5 (the folders above were let go), a folder
        // there replaced: reaching it again fails, and the walk returns.
        let walk = |n: usize| -> Result<(), HostError> {
            let mut way = Way::new(Dir::open_path(tmp.path()).unwrap(), most)?;
            down(&mut way, 30)?;
            consistent(&way);
            // A walk nested in this one, ended by the same error.
            let mut inner = Way::new(Dir::open_path(tmp.path()).unwrap(), most)?;
            down(&mut inner, 30)?;
            while way.depth() > 5 {
                way.leave();
            }
            let at = tmp
                .path()
                .join(std::iter::repeat_n("d", 5).collect::<std::path::PathBuf>());
            let aside = tmp.path().join(format!("aside{n}"));
            std::fs::rename(&at, &aside).unwrap();
            std::fs::create_dir(&at).unwrap();
            let reached = way.here().map(|_| ());
            std::fs::remove_dir(&at).unwrap();
            std::fs::rename(&aside, &at).unwrap();
            consistent(&way);
            reached?;
            down(&mut inner, 0)
        };
        for n in 0..500 {
            assert!(walk(n).is_err(), "walk {n} reached a replaced folder");
        }
        assert_eq!(THREAD_HELD.with(|h| h.load(Ordering::Relaxed)), 0);
        // A panic mid-walk.
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut way = Way::new(Dir::open_path(tmp.path()).unwrap(), most).unwrap();
            down(&mut way, 30).unwrap();
            panic!("mid-walk");
        }));
        assert!(unwound.is_err());
        assert_eq!(THREAD_HELD.with(|h| h.load(Ordering::Relaxed)), 0);
        // Made here, dropped on another thread: given back here, and not
        // taken from that thread's count.
        let mut way = Way::new(Dir::open_path(tmp.path()).unwrap(), most).unwrap();
        down(&mut way, 30).unwrap();
        assert_eq!(THREAD_HELD.with(|h| h.load(Ordering::Relaxed)), most);
        let there = std::thread::spawn(move || {
            drop(way);
            THREAD_HELD.with(|h| h.load(Ordering::Relaxed))
        })
        .join()
        .unwrap();
        assert_eq!(there, 0);
        assert_eq!(THREAD_HELD.with(|h| h.load(Ordering::Relaxed)), 0);
        // A fresh walk on this thread has its whole share.
        let mut way = Way::new(Dir::open_path(tmp.path()).unwrap(), most).unwrap();
        down(&mut way, 30).unwrap();
        assert_eq!(way.held(), most);
    }

    /// Walks nested on one thread, going down and up a tree at random
    /// (a small generator, seeded: the same each run), keep their
    /// bookkeeping whole after every move, each hold at most what it may
    /// (its bound less the others', at least half), reach again the
    /// folder first met at each step, and together hold what the thread's
    /// count says.
    #[test]
    fn ways_nested_at_random_keep_their_books() {
        let tmp = tempfile::tempdir().unwrap();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n) as usize
        };
        for most in [2, 3, 4, 5, 8, 17, 33] {
            let mut ways: Vec<Way> = Vec::new();
            let mut bounds: Vec<usize> = Vec::new();
            for _ in 0..3000 {
                match next(20) {
                    // A walk inside the innermost, or the innermost ends.
                    0 if ways.len() < 3 => {
                        let others: usize = ways.iter().map(Way::held).sum();
                        ways.push(Way::new(Dir::open_path(tmp.path()).unwrap(), most).unwrap());
                        bounds.push(others);
                    }
                    1 if !ways.is_empty() => {
                        ways.pop();
                        bounds.pop();
                    }
                    n => {
                        let Some(way) = ways.last_mut() else { continue };
                        if n < 9 && way.depth() > 0 {
                            way.leave();
                        } else {
                            let here = way.here().unwrap();
                            assert_eq!(id_of(&here).unwrap(), way.steps[way.depth()].id);
                            let name = OsString::from(format!("{}", next(3)));
                            let entry = here.entry(&name);
                            if entry.lstat().unwrap().is_none() {
                                entry.create_dir(0o755, None, None).unwrap();
                            }
                            let sub = here.open_child_dir(&name).unwrap().unwrap();
                            way.enter(&name, sub).unwrap();
                        }
                        let others = bounds.last().copied().unwrap_or(0);
                        let may = most.saturating_sub(others).max(most / 2).max(2);
                        assert!(way.held() <= may, "{} held of {may}", way.held());
                    }
                }
                for way in &ways {
                    consistent(way);
                }
                let all: usize = ways.iter().map(Way::held).sum();
                assert_eq!(THREAD_HELD.with(|h| h.load(Ordering::Relaxed)), all);
            }
        }
    }
}
