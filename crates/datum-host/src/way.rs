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
/// the module's documentation). The first folder is always held; of the
/// others, at most `most - 1`, the deepest, so that going back up a chain
/// opens again one folder in `most - 1` only, each from the nearest held.
pub struct Way {
    steps: Vec<Step>,
    most: usize,
    /// How many steps hold their folder (kept, not counted: a count per
    /// step made each folder entered or opened again cost the depth).
    held: usize,
    /// No step in `1..low` holds its folder: where [`Way::trim`] starts
    /// looking for the shallowest held one (it used to start at 1 each
    /// time, so a walk back up a chain of depth D cost D per folder opened
    /// again).
    low: usize,
    /// Steps [`Way::trim`] has looked at, and folders opened again (tests:
    /// that letting go does not scan the way).
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

impl Way {
    /// A walk starting in `first`, holding at most `most` folders open (at
    /// least two: the first and the one the walk is in).
    pub fn new(first: Dir, most: usize) -> Result<Way, HostError> {
        let id = id_of(&first)?;
        Ok(Way {
            steps: vec![Step {
                name: OsString::new(),
                id,
                dir: Some(first),
            }],
            most: most.max(2),
            held: 1,
            low: 1,
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
        self.held
    }

    /// The walk goes down into `dir`, the folder `name` of the one it is in
    /// (opened from [`Way::here`]); past `most` folders held, the shallowest
    /// held (the first aside) is let go.
    pub fn enter(&mut self, name: &OsStr, dir: Dir) -> Result<(), HostError> {
        let id = id_of(&dir)?;
        self.steps.push(Step {
            name: name.to_owned(),
            id,
            dir: Some(dir),
        });
        self.held += 1;
        self.trim();
        Ok(())
    }

    /// The walk goes back up from the folder it is in: its name in the one
    /// above (`None` in the first folder, which is never left).
    pub fn leave(&mut self) -> Option<OsString> {
        if self.steps.len() < 2 {
            return None;
        }
        let step = self.steps.pop()?;
        if step.dir.is_some() {
            self.held -= 1;
        }
        self.low = self.low.min(self.steps.len());
        Some(step.name)
    }

    /// The folder the walk is in, opened again if it was let go.
    pub fn here(&mut self) -> Result<Dir, HostError> {
        let last = self.steps.len() - 1;
        if let Some(dir) = &self.steps[last].dir {
            return Ok(dir.clone());
        }
        // The nearest held above it (the first always is).
        let Some(mut from) = self.steps[..last].iter().rposition(|s| s.dir.is_some()) else {
            return Err(HostError::io(
                "reach again",
                OsStr::new(""),
                std::io::Error::other("no folder of the walk is open"),
            ));
        };
        while from < last {
            let Some(above) = self.steps[from].dir.clone() else {
                break;
            };
            let step = &self.steps[from + 1];
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
            from += 1;
            self.steps[from].dir = Some(dir);
            self.held += 1;
            self.low = self.low.min(from);
            #[cfg(test)]
            {
                self.opened += 1;
            }
            self.trim();
        }
        self.steps[last].dir.clone().ok_or_else(|| {
            HostError::io(
                "reach again",
                OsStr::new(""),
                std::io::Error::other("the walk's folder was let go"),
            )
        })
    }

    /// Lets the shallowest held folders go (the first aside) while more
    /// than `most` are held.
    fn trim(&mut self) {
        while self.held > self.most && self.low < self.steps.len() - 1 {
            #[cfg(test)]
            {
                self.looked += 1;
            }
            if self.steps[self.low].dir.take().is_some() {
                self.held -= 1;
            }
            self.low += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Walking a chain down and back up past the bound, each folder let go
    /// costs one look, not a look at every folder above it: the walk used
    /// to recount and rescan the way from its top at every folder entered
    /// or opened again, so going back up a chain a local user made 20,000
    /// deep under a small descriptor share took minutes (h156's review).
    #[test]
    fn letting_folders_go_does_not_scan_the_way() {
        let tmp = tempfile::tempdir().unwrap();
        let first = Dir::open_path(tmp.path()).unwrap();
        let depth = 300;
        let mut way = Way::new(first, 4).unwrap();
        for _ in 0..depth {
            let here = way.here().unwrap();
            here.entry(OsStr::new("d"))
                .create_dir(0o755, None, None)
                .unwrap();
            let sub = here.open_child_dir(OsStr::new("d")).unwrap().unwrap();
            way.enter(OsStr::new("d"), sub).unwrap();
        }
        while way.depth() > 0 {
            way.here().unwrap();
            assert!(way.held() <= 4, "{}", way.held());
            way.leave();
        }
        let (looked, opened) = (way.looked, way.opened);
        assert!(opened > depth, "the walk up opened {opened} folders again");
        assert!(
            looked <= depth + opened,
            "{looked} looks to let go of at most {} folders",
            depth + opened
        );
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
}
